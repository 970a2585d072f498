// connected_components: FastSV labels against a one-process union-find in the test, for
// symmetric and unsymmetric patterns, simple and RCB partitions, empty shards, at every world size.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "operations_support.hpp"

namespace test_components {

namespace es = einshard;
namespace sp = einshard::sparse;
using es::testing::Coo;

namespace {

/// SciPy's canonical labels of the pattern's graph (an edge per stored entry, either direction),
/// by union-find on one process: component order = order of the smallest vertex.
std::vector<std::int64_t> reference_labels(const Coo& a, std::int64_t& count) {
  std::vector<std::int64_t> parent(static_cast<std::size_t>(a.n));
  std::iota(parent.begin(), parent.end(), 0);
  const auto find = [&](std::int64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  const auto* r = a.rows.data_ptr<std::int64_t>();
  const auto* c = a.cols.data_ptr<std::int64_t>();
  for (std::int64_t k = 0; k < a.rows.numel(); ++k) {
    const auto x = find(r[k]), y = find(c[k]);
    parent[std::max(x, y)] = std::min(x, y);
  }
  std::vector<std::int64_t> label(parent.size(), -1), of_root(parent.size(), -1);
  count = 0;
  for (std::int64_t v = 0; v < a.n; ++v) {
    auto& l = of_root[find(v)];
    if (l < 0) l = count++;
    label[v] = l;
  }
  return label;
}

Coo from_edges(std::int64_t n, const std::vector<std::int64_t>& r, const std::vector<std::int64_t>& c) {
  const auto m = static_cast<std::int64_t>(r.size());
  return {at::ones({m}, at::kDouble), at::tensor(r, at::kLong).view({m}), at::tensor(c, at::kLong).view({m}), n};
}

/// The seed's test graph: node i in component i % parts, each component chained as a path, with
/// self-loops on every node.
Coo path_forest(std::int64_t n, std::int64_t parts) {
  std::vector<std::int64_t> r, c;
  for (std::int64_t i = 0; i < n; ++i) {
    r.push_back(i), c.push_back(i);
    if (i + parts < n) r.push_back(i), c.push_back(i + parts), r.push_back(i + parts), c.push_back(i);
  }
  return from_edges(n, r, c);
}

/// A directed pattern: each edge stored once, in a seeded direction, so half the components are
/// joined only through entries whose transposes are missing; vertices above 3n/4 stay isolated.
Coo directed(std::int64_t n, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto m = n / 2;
  const auto a = at::randint(0, 3 * n / 4, {m}, gen, at::kLong), b = at::randint(0, 3 * n / 4, {m}, gen, at::kLong);
  return {at::ones({m}, at::kDouble), a, b, n};
}

/// A path through the vertices in a seeded random order: diameter n - 1, ids scattered, the
/// hard case for pointer jumping and the worst for label propagation.
Coo shuffled_path(std::int64_t n, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto order = at::randperm(n, gen, at::kLong);
  return {at::ones({n - 1}, at::kDouble), order.narrow(0, 0, n - 1).clone(), order.narrow(0, 1, n - 1).clone(), n};
}

void check_components(const Coo& a, sp::PartitionMethod method, const at::Tensor& coords) {
  const auto mesh = es::testing::world_mesh();
  const auto D = es::testing::distribute(a, mesh, method, coords);
  std::int64_t count = 0;
  const auto expected = reference_labels(a, count);
  const auto c = D.connected_components();
  CHECK(c.count == count);
  CHECK(c.labels.dtype() == at::kLong);
  const auto got = c.labels.full_tensor();
  CHECK(at::equal(got, at::tensor(expected, at::kLong).view({a.n})));
  const auto log2n = std::log2(static_cast<double>(std::max<std::int64_t>(a.n, 2)));
  CHECK(c.rounds <= 2 * log2n);
}

}  // namespace

TEST_CASE("connected_components: interleaved path forest, simple and RCB", "[sparse][components]") {
  using M = sp::PartitionMethod;
  const auto coords = at::stack({at::remainder(at::arange(60), 12), at::div(at::arange(60), 12, "floor")}, 1).to(at::kDouble);
  for (auto method : {M::simple, M::rcb}) check_components(path_forest(60, 5), method, coords);
}

TEST_CASE("connected_components: unsymmetric patterns join both endpoints", "[sparse][components]") {
  using M = sp::PartitionMethod;
  for (std::uint64_t seed : {1u, 2u}) {
    const std::int64_t n = 97;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 100);
    const auto coords = at::rand({n, 2}, gen, at::kDouble);
    for (auto method : {M::simple, M::rcb}) check_components(directed(n, seed), method, coords);
  }
  // Upper-triangular chain only: every edge i -> i + 1 is stored at row i alone.
  std::vector<std::int64_t> r, c;
  for (std::int64_t i = 0; i + 1 < 40; ++i)
    if (i % 10 != 9) r.push_back(i), c.push_back(i + 1);
  check_components(from_edges(40, r, c), M::simple, {});
}

TEST_CASE("connected_components: FastSV rounds grow like log N on a shuffled path", "[sparse][components]") {
  const std::int64_t n = 3000;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  check_components(shuffled_path(n, 9), sp::PartitionMethod::simple, {});
  check_components(shuffled_path(n, 9), sp::PartitionMethod::rcb, at::rand({n, 2}, gen, at::kDouble));
}

TEST_CASE("connected_components: no entries, tiny matrices and empty shards", "[sparse][components]") {
  using M = sp::PartitionMethod;
  check_components(from_edges(5, {}, {}), M::simple, {});  // five isolated vertices
  check_components(from_edges(3, {2}, {0}), M::simple, {});  // fewer rows than ranks at 4 and 8
  check_components(from_edges(1, {0}, {0}), M::simple, {});
}

TEST_CASE("connected_components: the seed's own cases (paths, isolated nodes, blocks, random graphs, node 0 first)",
          "[sparse][components]") {
  using M = sp::PartitionMethod;
  const auto both = [](const Coo& a, std::int64_t expected_count) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(a.n));
    const auto coords = at::rand({a.n, 2}, gen, at::kDouble);
    for (auto method : {M::simple, M::rcb}) check_components(a, method, coords);
    if (expected_count >= 0) {
      const auto D = es::testing::distribute(a, es::testing::world_mesh(), M::simple, {});
      CHECK(D.connected_components().count == expected_count);
    }
  };
  both(from_edges(4, {0, 1, 1, 2, 2, 3}, {1, 0, 2, 1, 3, 2}), 1);  // one path
  both(from_edges(5, {0, 1}, {1, 0}), 4);                           // an edge and three isolated nodes
  both(from_edges(6, {}, {}), 6);                                   // no edges
  {  // blocks of 2, 3, 1, 4 and 5 nodes, each a path: five components
    std::vector<std::int64_t> r, c;
    std::int64_t offset = 0;
    for (std::int64_t size : {2, 3, 1, 4, 5}) {
      for (auto v = offset; v + 1 < offset + size; ++v) r.push_back(v), c.push_back(v + 1), r.push_back(v + 1), c.push_back(v);
      offset += size;
    }
    both(from_edges(offset, r, c), 5);
  }
  for (std::uint64_t seed = 0; seed < 8; ++seed) {  // random symmetric graphs, N in [5, 60), N / 2 edges
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto n = at::randint(5, 60, {1}, gen, at::kLong).item<std::int64_t>();
    const auto m = std::max<std::int64_t>(1, n / 2);
    const auto a = at::randint(0, n, {m}, gen, at::kLong), b = at::randint(0, n, {m}, gen, at::kLong);
    both({at::ones({2 * m}, at::kDouble), at::cat({a, b}), at::cat({b, a}), n}, -1);
  }
  // Blocks {0, 1} and {2, 3, 4} with their diagonals: the one holding node 0 is component 0.
  both(from_edges(5, {0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, {0, 1, 0, 1, 2, 3, 2, 4, 3, 4}), 2);
}

}  // namespace test_components
