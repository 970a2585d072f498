// sparse::partition_ids: balance, determinism, locality and the error cases of every method.

#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstdint>
#include <utility>
#include <vector>

#include "einshard/sparse/matrix/partition.hpp"

namespace test_partition {

namespace es = einshard;
namespace sp = einshard::sparse;
using M = sp::PartitionMethod;

namespace {

/// The 5-point Poisson pattern of an nx x ny grid (vertex x + nx * y) and the (n, 2) coordinates.
struct Grid {
  at::Tensor row, col, coords;
  std::int64_t n;
};

Grid poisson_2d(std::int64_t nx, std::int64_t ny) {
  std::vector<std::int64_t> r, c;
  for (std::int64_t y = 0; y < ny; ++y)
    for (std::int64_t x = 0; x < nx; ++x) {
      const auto i = x + nx * y;
      r.push_back(i);
      c.push_back(i);
      const std::array<std::pair<int, int>, 4> steps{{{-1, 0}, {1, 0}, {0, -1}, {0, 1}}};
      for (const auto& [dx, dy] : steps) {
        const auto xx = x + dx, yy = y + dy;
        if (xx < 0 || yy < 0 || xx >= nx || yy >= ny) continue;
        r.push_back(i);
        c.push_back(xx + nx * yy);
      }
    }
  const auto n = nx * ny;
  const auto idx = at::arange(n, at::kLong);
  const auto coords =
      at::stack({at::remainder(idx, nx), at::div(idx, nx, "floor")}, 1).to(at::kDouble);
  return {at::tensor(r), at::tensor(c), coords, n};
}

std::vector<std::int64_t> sizes(const at::Tensor& ids, int parts) {
  const auto counts = at::bincount(ids, {}, parts);
  return {counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + parts};
}

void check_balanced(const at::Tensor& ids, std::int64_t n, int parts) {
  REQUIRE(ids.scalar_type() == at::kLong);
  REQUIRE(ids.sizes() == at::IntArrayRef{n});
  CHECK(ids.min().item<std::int64_t>() >= 0);
  CHECK(ids.max().item<std::int64_t>() < parts);
  const auto s = sizes(ids, parts);
  CHECK(*std::max_element(s.begin(), s.end()) - *std::min_element(s.begin(), s.end()) <= 1);
}

std::int64_t edge_cut(const Grid& g, const at::Tensor& ids) {
  return (ids.index_select(0, g.row) != ids.index_select(0, g.col)).sum().item<std::int64_t>();
}

/// The mean over parts of the bounding-box area of each part's coordinates.
double mean_box_area(const at::Tensor& coords, const at::Tensor& ids, int parts) {
  double total = 0;
  for (int p = 0; p < parts; ++p) {
    const auto pts = coords.index({ids == p});
    if (pts.size(0) == 0) continue;
    const auto span = std::get<0>(pts.max(0)) - std::get<0>(pts.min(0)) + 1;
    total += span.prod().item<double>();
  }
  return total / parts;
}

/// A seeded random assignment, the baseline of the locality checks.
at::Tensor random_ids(std::int64_t n, int parts) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  return at::randint(parts, {n}, gen, at::kLong);
}

bool monotone(const at::Tensor& ids) {
  return ids.numel() < 2 || (ids.slice(0, 1) >= ids.slice(0, 0, -1)).all().item<bool>();
}

const at::Tensor none = at::empty({0}, at::kLong);

}  // namespace

TEST_CASE("partition simple: contiguous blocks of ceil(n / parts), empty trailing parts",
          "[sparse][partition][unit]") {
  const auto ids = sp::partition_ids(none, none, 9, 4);
  CHECK(at::equal(ids, at::tensor(std::vector<std::int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2})));
  CHECK(sizes(ids, 4) == std::vector<std::int64_t>{3, 3, 3, 0});
  CHECK(sizes(sp::partition_ids(none, none, 10, 4), 4) == std::vector<std::int64_t>{3, 3, 3, 1});
  CHECK(sizes(sp::partition_ids(none, none, 8, 4), 4) == std::vector<std::int64_t>{2, 2, 2, 2});
  CHECK(sizes(sp::partition_ids(none, none, 2, 4), 4) == std::vector<std::int64_t>{1, 1, 0, 0});
  CHECK(sp::partition_ids(none, none, 0, 3).numel() == 0);
  CHECK(at::equal(sp::partition_ids(none, none, 5, 1), at::zeros({5}, at::kLong)));
  for (std::int64_t n = 0; n < 40; ++n)
    for (int p = 1; p <= 9; ++p) {
      const auto ids_np = sp::partition_ids(none, none, n, p);
      CHECK(monotone(ids_np));
      if (n > 0) CHECK(ids_np.max().item<std::int64_t>() < p);
    }
}

TEST_CASE("partition rcb: balanced, deterministic, non-monotone on a grid", "[sparse][partition][unit]") {
  const auto g = poisson_2d(16, 12);
  for (const int parts : {1, 2, 3, 4, 5, 8}) {
    INFO(parts << " parts");
    const auto ids = sp::partition_ids(g.row, g.col, g.n, parts, {M::rcb, g.coords});
    check_balanced(ids, g.n, parts);
    CHECK(at::equal(ids, sp::partition_ids(g.row, g.col, g.n, parts, {M::rcb, g.coords})));
    if (parts > 1) {
      CHECK_FALSE(monotone(ids));
      // Compact parts: far smaller boxes than a random assignment.
      const auto random = random_ids(g.n, parts);
      CHECK(mean_box_area(g.coords, ids, parts) < 0.6 * mean_box_area(g.coords, random, parts));
    }
  }
  // The first cut is along x (16 > 12): with 2 parts, part 0 holds x < 8.
  const auto two = sp::partition_ids(g.row, g.col, g.n, 2, {M::rcb, g.coords});
  CHECK(at::equal(two, (g.coords.select(1, 0) >= 8).to(at::kLong)));
  // Ties (every point at the same place, or on few distinct values) do not unbalance the parts.
  check_balanced(sp::partition_ids(none, none, 37, 4, {M::rcb, at::zeros({37, 3})}), 37, 4);
  check_balanced(
      sp::partition_ids(none, none, 50, 3,
                        {M::rcb, at::remainder(at::arange(50, at::kDouble), 2).unsqueeze(1)}),
      50, 3);
  // automatic = rcb with coordinates, simple without.
  CHECK(at::equal(sp::partition_ids(g.row, g.col, g.n, 4, {M::automatic, g.coords}),
                  sp::partition_ids(g.row, g.col, g.n, 4, {M::rcb, g.coords})));
  CHECK(at::equal(sp::partition_ids(g.row, g.col, g.n, 4, {M::automatic}),
                  sp::partition_ids(g.row, g.col, g.n, 4)));
}

TEST_CASE("partition hilbert: the index is a continuous bijection", "[sparse][partition][unit]") {
  // 2-D, order 4: every cell of a 16 x 16 grid once, consecutive indices in neighbouring cells.
  std::vector<std::array<std::int64_t, 3>> cell(256, {-1, -1, -1});
  for (std::uint32_t x = 0; x < 16; ++x)
    for (std::uint32_t y = 0; y < 16; ++y) {
      const auto h = sp::detail::hilbert_index({x, y, 0}, 2, 4);
      REQUIRE(h < 256);
      CHECK(cell[h][0] == -1);
      cell[h] = {x, y, 0};
    }
  for (std::size_t h = 1; h < 256; ++h)
    CHECK(std::abs(cell[h][0] - cell[h - 1][0]) + std::abs(cell[h][1] - cell[h - 1][1]) == 1);
  // 3-D, order 3.
  std::vector<std::array<std::int64_t, 3>> cube(512, {-1, -1, -1});
  for (std::uint32_t x = 0; x < 8; ++x)
    for (std::uint32_t y = 0; y < 8; ++y)
      for (std::uint32_t z = 0; z < 8; ++z) {
        const auto h = sp::detail::hilbert_index({x, y, z}, 3, 3);
        REQUIRE(h < 512);
        CHECK(cube[h][0] == -1);
        cube[h] = {x, y, z};
      }
  for (std::size_t h = 1; h < 512; ++h) {
    std::int64_t d = 0;
    for (int a = 0; a < 3; ++a) d += std::abs(cube[h][a] - cube[h - 1][a]);
    CHECK(d == 1);
  }
}

TEST_CASE("partition hilbert: equal chunks with local parts", "[sparse][partition][unit]") {
  const auto g = poisson_2d(8, 8);
  const auto ids = sp::partition_ids(g.row, g.col, g.n, 4, {M::hilbert, g.coords});
  CHECK(sizes(ids, 4) == std::vector<std::int64_t>{16, 16, 16, 16});
  CHECK(at::equal(ids, sp::partition_ids(g.row, g.col, g.n, 4, {M::hilbert, g.coords})));
  const auto random = random_ids(g.n, 4);
  CHECK(mean_box_area(g.coords, ids, 4) < 0.5 * mean_box_area(g.coords, random, 4));
  const auto big = poisson_2d(30, 17);
  for (const int parts : {3, 7, 8})
    check_balanced(sp::partition_ids(big.row, big.col, big.n, parts, {M::hilbert, big.coords}),
                   big.n, parts);
  // 3-D: a 4^3 grid in two halves of 32.
  const auto idx = at::arange(64, at::kLong);
  const auto cube = at::stack({idx.remainder(4), at::div(idx, 4, "floor").remainder(4),
                               at::div(idx, 16, "floor")},
                              1);
  const auto halves = sp::partition_ids(none, none, 64, 2, {M::hilbert, cube});
  CHECK(sizes(halves, 2) == std::vector<std::int64_t>{32, 32});
  // 1-D and 4-D coordinates are refused.
  CHECK_THROWS_AS(sp::partition_ids(none, none, 64, 2, {M::hilbert, idx.unsqueeze(1)}), es::Error);
  CHECK_THROWS_AS(sp::partition_ids(none, none, 16, 2, {M::hilbert, at::zeros({16, 4})}),
                  es::Error);
  CHECK_THROWS_AS(sp::partition_ids(none, none, 64, 2, {M::hilbert, idx}), es::Error);
}

TEST_CASE("partition slicing: equal slabs along the longest axis", "[sparse][partition][unit]") {
  const auto g = poisson_2d(12, 3);
  const auto ids = sp::partition_ids(g.row, g.col, g.n, 4, {M::slicing, g.coords});
  check_balanced(ids, g.n, 4);
  // Slabs in x: part = x / 3.
  CHECK(at::equal(ids, at::div(g.coords.select(1, 0), 3, "floor").to(at::kLong)));
  check_balanced(sp::partition_ids(g.row, g.col, g.n, 5, {M::slicing, g.coords}), g.n, 5);
}

TEST_CASE("partition metis: better edge cut than random on a 2-D Poisson graph",
          "[sparse][partition][unit]") {
#if defined(EINSHARD_HAS_METIS) && EINSHARD_HAS_METIS
  const auto g = poisson_2d(24, 20);
  for (const int parts : {2, 3, 4, 8, 16}) {
    INFO(parts << " parts");
    const auto ids = sp::partition_ids(g.row, g.col, g.n, parts, {M::metis});
    REQUIRE(ids.sizes() == at::IntArrayRef{g.n});
    CHECK(ids.min().item<std::int64_t>() == 0);
    CHECK(ids.max().item<std::int64_t>() == parts - 1);
    CHECK(at::equal(ids, sp::partition_ids(g.row, g.col, g.n, parts, {M::metis})));
    const auto s = sizes(ids, parts);
    for (const auto size : s) CHECK(size <= 1.1 * static_cast<double>(g.n) / parts + 1);
    const auto random = random_ids(g.n, parts);
    CHECK(edge_cut(g, ids) < edge_cut(g, random) / 5);
    // An unsymmetric pattern (only the upper triangle) is symmetrised first: the same graph.
    const auto upper = g.row <= g.col;
    CHECK(at::equal(sp::partition_ids(g.row.index({upper}), g.col.index({upper}), g.n, parts,
                                      {M::metis}),
                    ids));
  }
  CHECK(at::equal(sp::partition_ids(g.row, g.col, g.n, 1, {M::metis}),
                  at::zeros({g.n}, at::kLong)));
  // Small graphs stay balanced (METIS's k-way puts a 3-vertex ring in 2 parts all in one part).
  for (const std::int64_t n : {3, 5, 9, 20}) {
    const auto ring = at::arange(n, at::kLong);
    for (const int parts : {2, 3, 4, 8, 16}) {
      INFO("ring of " << n << " in " << parts << " parts");
      const auto ids = sp::partition_ids(ring, at::remainder(ring + 1, n), n, parts, {M::metis});
      const auto s = sizes(ids, parts);
      CHECK(*std::max_element(s.begin(), s.end()) <= (n + parts - 1) / parts + 1);
      if (n >= parts) CHECK(*std::min_element(s.begin(), s.end()) >= 1);
    }
  }
  for (const int parts : {9, 16}) {
    INFO("5 x 5 grid in " << parts << " parts");
    const auto small = poisson_2d(5, 5);
    const auto ids = sp::partition_ids(small.row, small.col, small.n, parts, {M::metis});
    const auto s = sizes(ids, parts);
    CHECK(*std::min_element(s.begin(), s.end()) >= 1);
  }
  // Only self-loops: no edges for METIS; falls back to simple.
  const auto diag = at::arange(10, at::kLong);
  CHECK(at::equal(sp::partition_ids(diag, diag, 10, 3, {M::metis}),
                  sp::partition_ids(none, none, 10, 3)));
  CHECK_THROWS_AS(sp::partition_ids(diag, diag + 1, 10, 3, {M::metis}), es::Error);
  CHECK_THROWS_AS(sp::partition_ids(diag, diag.slice(0, 1), 10, 3, {M::metis}), es::Error);
#else
  const auto g = poisson_2d(4, 4);
  CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 2, {M::metis}), es::Error);
#endif
}

TEST_CASE("partition: bad input raises einshard::Error", "[sparse][partition][unit]") {
  const auto g = poisson_2d(4, 4);
  for (const auto method : {M::rcb, M::hilbert, M::slicing}) {
    CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 2, {method}), es::Error);
    CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 2, {method, g.coords.slice(0, 1)}),
                    es::Error);
    CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 2, {method, g.coords.select(1, 0)}),
                    es::Error);
  }
  CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 0), es::Error);
  CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, -1, 2), es::Error);
  CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 2, {static_cast<M>(42)}), es::Error);
  CHECK_THROWS_AS(sp::partition_ids(g.row, g.col, g.n, 2, {M::automatic, g.coords.slice(0, 3)}),
                  es::Error);
}

TEST_CASE("partition in whole nodes: every method partitions the nodes, a node's rows stay together",
          "[sparse][partition][unit]") {
  // A 3-unknown system on the 5-point grid: rows 3k, 3k + 1, 3k + 2 of node k, every unknown of a
  // node coupled to every unknown of its neighbours.
  const auto g = poisson_2d(9, 7);
  const int f = 3;
  const auto unknown = at::arange(f, at::kLong);
  const auto rows = (g.row.unsqueeze(1) * f + unknown).unsqueeze(2).expand({-1, f, f}).reshape({-1});
  const auto cols = (g.col.unsqueeze(1) * f + unknown).unsqueeze(1).expand({-1, f, f}).reshape({-1});
  const auto n = g.n * f;
  const auto row_coords = g.coords.repeat_interleave(f, 0);
  std::vector<M> methods{M::simple, M::rcb, M::hilbert, M::slicing, M::automatic};
#if defined(EINSHARD_HAS_METIS) && EINSHARD_HAS_METIS
  methods.push_back(M::metis);
#endif
  for (const auto method : methods)
    for (const int parts : {1, 2, 3, 4, 8}) {
      INFO("method " << static_cast<int>(method) << ", " << parts << " parts");
      const auto ids = sp::partition_ids(rows, cols, n, parts, {method, row_coords, f});
      REQUIRE(ids.sizes() == at::IntArrayRef{n});
      const auto by_node = ids.reshape({-1, f});
      CHECK(at::equal(by_node, by_node.select(1, 0).unsqueeze(1).expand({-1, f})));  // whole nodes
      // The nodes' parts are those of the node graph itself, with coordinates per row or per node.
      const auto nodes = sp::partition_ids(g.row, g.col, g.n, parts, {method, g.coords});
      CHECK(at::equal(by_node.select(1, 0), nodes));
      CHECK(at::equal(sp::partition_ids(rows, cols, n, parts, {method, g.coords, f}), ids));
      if (method != M::metis) check_balanced(nodes, g.n, parts);
    }
  // simple: blocks of ceil(nodes / parts) nodes (10 nodes on 4 parts: 3, 3, 3, 1).
  CHECK(sizes(sp::partition_ids(none, none, 30, 4, {M::simple, {}, 3}), 4) == std::vector<std::int64_t>{9, 9, 9, 3});
  CHECK(at::equal(sp::partition_ids(none, none, 30, 4, {M::simple, {}, 1}), sp::partition_ids(none, none, 30, 4)));
  CHECK_THROWS_WITH(sp::partition_ids(none, none, 10, 2, {M::simple, {}, 3}),
                    Catch::Contains("functions ≥ 1 dividing the rows") && Catch::Contains("10 rows"));
  CHECK_THROWS_WITH(sp::partition_ids(none, none, 9, 2, {M::simple, {}, 0}), Catch::Contains("functions ≥ 1"));
  CHECK_THROWS_WITH(sp::partition_ids(rows, cols, n, 2, {M::rcb, g.coords.slice(0, 1), f}),
                    Catch::Contains("coords of the rows") && Catch::Contains("of the nodes (63, d)"));
  CHECK_THROWS_WITH(sp::partition_ids(rows, cols, n, 2, {M::rcb, {}, f}), Catch::Contains("expected coordinates"));
}

}  // namespace test_partition
