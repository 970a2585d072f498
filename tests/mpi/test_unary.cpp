// Distributed unary einshard against the single-process reference, at any world size (ctest runs
// this binary at 1, 2, 3, 4 and 8 ranks), on every mesh whose size is the world size.
//
// As in the original's suite (reference §5): every rank draws the same full tensors from one seed,
// takes its input shard with the split rule (or the shapes metadata), runs the distributed op, and
// compares its output with its slice of the full result. Gradients follow the conventions of the
// forward/backward pairs (reference §4): the upstream gradient of a sharded or replicated output
// is this rank's slice of one full random gradient G, so the expected input gradient is this rank's
// slice of G; for partial outputs each rank's upstream gradient is its own (rank-dependent) draw,
// and the expected input gradient is the sum over the partial group, computed on every rank.
//
// Faults are injected on one rank only; every rank must raise the same es::Error (compared across
// ranks by hashing the message), and nobody may be left waiting.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/comm/collectives.hpp>
#include <einshard/einshard.hpp>

#include "plan_steps.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace test_unary {

namespace es = einshard;

namespace {

using namespace einshard::testing;  // the step names
using I64 = std::vector<std::int64_t>;
using Names = std::vector<std::string>;


/// The mesh shapes tested at world size W: the 1-D mesh, the 2-D factorizations (with a trivial
/// factor only at small sizes), and (2,2,W/4) from 8 ranks on; (1,1) and (1,1,1) at one rank.
std::vector<std::vector<int>> mesh_shapes(int W) {
  std::vector<std::vector<int>> out{{W}};
  if (W == 1) return {{1}, {1, 1}, {1, 1, 1}};
  for (int a = 1; a <= W; ++a)
    if (W % a == 0 && ((a != 1 && a != W) || W <= 4)) out.push_back({a, W / a});
  if (W % 4 == 0 && W >= 8) out.push_back({2, 2, W / 4});
  return out;
}

/// Meshes are cached: building one is collective, and every rank asks for the same ones in order.
const es::Mesh& mesh_of(const std::vector<int>& sizes) {
  static std::map<std::vector<int>, es::Mesh> cache;
  if (auto it = cache.find(sizes); it != cache.end()) return it->second;
  static const std::vector<std::string> all_names{"dp", "sp", "tp"};
  std::vector<std::string> names(all_names.begin(), all_names.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
  return cache.emplace(sizes, es::Mesh(MPI_COMM_WORLD, sizes, names)).first->second;
}

std::vector<const es::Mesh*> meshes(int min_dims = 1) {
  std::vector<const es::Mesh*> out;
  for (const auto& s : mesh_shapes(es::testing::world().size))
    if (static_cast<int>(s.size()) >= min_dims) out.push_back(&mesh_of(s));
  return out;
}

std::string label(const es::Mesh& m) {
  std::string s = "(";
  for (std::size_t i = 0; i < m.sizes().size(); ++i) s += (i ? "," : "") + std::to_string(m.sizes()[i]);
  return s + ")";
}

/// A full tensor, the same on every rank.
at::Tensor full(const I64& shape, std::uint64_t seed) {
  at::manual_seed(seed);
  return at::randn(shape, at::kDouble);
}

std::vector<std::int64_t> offsets(const I64& sizes) {
  I64 o(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), o.begin() + 1);
  return o;
}

/// Shard sizes of dimension d over `group`: given, or the split rule.
using Given = std::map<std::int64_t, I64>;
I64 sizes_of(const at::Tensor& t, std::int64_t d, const es::Mesh& mesh, const std::string& group,
             const Given& given) {
  if (auto it = given.find(d); it != given.end()) return it->second;
  return es::compute_split_shapes(t.size(d), mesh.size(group));
}

/// This rank's block of `t`: dimension d sharded over groups[d] ("" = whole).
at::Tensor block(const at::Tensor& t, const es::Mesh& mesh, const std::vector<std::string>& groups,
                 const Given& given = {}) {
  auto b = t;
  for (std::size_t d = 0; d < groups.size(); ++d) {
    if (groups[d].empty()) continue;
    const auto s = sizes_of(t, static_cast<std::int64_t>(d), mesh, groups[d], given);
    const auto c = static_cast<std::size_t>(mesh.coordinate(groups[d]));
    b = b.narrow(static_cast<std::int64_t>(d), offsets(s)[c], s[c]);
  }
  return b.contiguous();
}

/// The mesh ranks in this rank's `group` (those that agree with it on every other dimension).
std::vector<int> members(const es::Mesh& mesh, const std::string& group) {
  const auto comps = mesh.components(group);
  const auto mine = mesh.coordinates_of(mesh.rank());
  std::vector<int> out;
  for (int q = 0; q < mesh.size(); ++q) {
    const auto theirs = mesh.coordinates_of(q);
    bool same = true;
    for (int d = 0; d < mesh.ndim(); ++d)
      if (std::find(comps.begin(), comps.end(), d) == comps.end() &&
          theirs[static_cast<std::size_t>(d)] != mine[static_cast<std::size_t>(d)])
        same = false;
    if (same) out.push_back(q);
  }
  return out;
}

/// One draw per mesh rank (the same draws on every rank).
std::vector<at::Tensor> per_rank(const I64& shape, std::uint64_t seed, int P) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (int q = 0; q < P; ++q) out.push_back(at::randn(shape, at::kDouble));
  return out;
}

at::Tensor sum_over(const std::vector<at::Tensor>& xs, const std::vector<int>& ranks) {
  auto s = at::zeros_like(xs[0]);
  for (int q : ranks) s = s + xs[static_cast<std::size_t>(q)];
  return s;
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous(), b.contiguous());
}
bool near(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() &&
         at::allclose(a, b, /*rtol=*/1e-12, /*atol=*/1e-12);
}

using Op = std::function<at::Tensor(const at::Tensor&)>;

/// Runs `op` on a fresh leaf copy of `x`, backpropagates `upstream`; returns the output and the
/// input's gradient.
std::pair<at::Tensor, at::Tensor> forward_backward(const Op& op, const at::Tensor& x,
                                                   const at::Tensor& upstream) {
  auto leaf = x.detach().requires_grad_(true);
  auto y = op(leaf);
  y.backward(upstream);
  return {y.detach(), leaf.grad()};
}

std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& p) {
  std::vector<std::int64_t> inv(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) inv[static_cast<std::size_t>(p[i])] = static_cast<std::int64_t>(i);
  return inv;
}

/// A data-movement notation (no partials): input dims sharded as `in`, output dim i is input dim
/// perm[i] sharded as `out`. Checks the value, the gradient and the plan.
struct Move {
  std::string notation;  // for messages
  Op op;
  I64 shape;                       // full input shape
  std::vector<std::string> in;     // group per input dim
  std::vector<std::string> out;    // group per output dim
  Names expected_steps;
  std::vector<std::int64_t> perm{};  // empty: identity
  Given in_sizes{};                  // by input dim
  Given out_sizes{};                 // by output dim
  bool non_contiguous = false;       // pass the input shard as a transposed view
};

void check_move(const es::Mesh& mesh, const Move& m, std::uint64_t seed = 7) {
  INFO(m.notation << " on " << label(mesh) << ", rank " << mesh.rank());
  auto perm = m.perm;
  if (perm.empty()) {
    perm.resize(m.shape.size());
    std::iota(perm.begin(), perm.end(), 0);
  }
  const auto X = full(m.shape, seed);
  const auto Y = X.permute(perm).contiguous();
  const auto G = full(Y.sizes().vec(), seed + 1);
  auto x = block(X, mesh, m.in, m.in_sizes);
  if (m.non_contiguous && x.dim() >= 2) {
    x = x.transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
    if (x.size(0) > 1 && x.size(-1) > 1) CHECK_FALSE(x.is_contiguous());
  }
  const auto upstream = block(G, mesh, m.out, m.out_sizes);
  const auto [y, grad] = forward_backward(m.op, x, upstream);
  CHECK(same(y, block(Y, mesh, m.out, m.out_sizes)));
  CHECK(same(grad, block(G.permute(inverse(perm)).contiguous(), mesh, m.in, m.in_sizes)));
  CHECK(es::last_plan().names() == m.expected_steps);
}

Op runtime(std::string notation, es::Options o) {
  return [notation = std::move(notation), o = std::move(o)](const at::Tensor& x) {
    return es::einshard(notation, {x}, o);
  };
}

/// Extents to test on a mesh: 17 (17 on 8: [2]*7+[3]), 3 (3 on 4: [0,0,0,3]) and, on the 1-D mesh,
/// 0 (every shard empty). Fewer on the other meshes keeps the 8-rank run short.
I64 extents(const es::Mesh& mesh) { return mesh.ndim() == 1 ? I64{17, 3, 0} : I64{17, 3}; }

// ---- errors raised on every rank -------------------------------------------------------------

/// Runs `f` on every rank; every rank must throw es::Error whose message contains `fragment`, and
/// the messages must be identical on all ranks (after the "einshard '<notation>': " prefix when
/// `skip_prefix`, for ranks that were given different notations on purpose).
void expect_same_error(const std::function<void()>& f, const std::string& fragment, bool skip_prefix = false) {
  std::string message;
  int threw = 0, other = 0;
  try {
    f();
  } catch (const es::Error& e) {
    threw = 1;
    message = e.what();
  } catch (const std::exception& e) {
    other = 1;
    message = e.what();
  }
  INFO("rank " << es::testing::world().rank << ": " << message);
  CHECK(threw == 1);
  CHECK(other == 0);
  CHECK_THAT(message, Catch::Contains(fragment));
  const auto compared = skip_prefix && message.find("': ") != std::string::npos
                            ? message.substr(message.find("': ") + 3)
                            : message;
  std::uint64_t h = std::hash<std::string>{}(compared), lo = 0, hi = 0;
  int all_threw = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&threw, &all_threw, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  CHECK(lo == hi);
  CHECK(all_threw == 1);
}

/// The rank that injects a fault: 1 when there is one, else the only rank.
int faulty_rank() { return es::testing::world().size > 1 ? 1 : 0; }

}  // namespace

// ---- split and gather -----------------------------------------------------------------------

TEST_CASE("unary: split and gather along dim 0, every mesh, uneven and empty shards", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    for (auto A : extents(mesh)) {
      const I64 shape{A, 3};
      const es::Options o{.mesh = mesh};
      check_move(mesh, {"a b -> a/dp b", [&](const at::Tensor& x) { return es::einshard<"a b -> a/dp b">(x, o); },
                        shape, {"", ""}, {"dp", ""}, {SPLIT}});
      check_move(mesh, {"a/dp b -> a b", [&](const at::Tensor& x) { return es::einshard<"a/dp b -> a b">(x, o); },
                        shape, {"dp", ""}, {"", ""}, {GATHER}});
      // The run-time notation form gives the same results.
      check_move(mesh, {"a b -> a/dp b (run time)", runtime("a b -> a/dp b", o), shape, {"", ""}, {"dp", ""}, {SPLIT}});
      check_move(mesh, {"a/dp b -> a b (run time)", runtime("a/dp b -> a b", o), shape, {"dp", ""}, {"", ""}, {GATHER}});
    }
  }
}

TEST_CASE("unary: split and gather along inner dimensions", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    for (auto B : extents(mesh)) {
      const I64 shape{2, B, 3};
      const es::Options o{.mesh = mesh};
      check_move(mesh, {"a b c -> a b/dp c", [&](const at::Tensor& x) { return es::einshard<"a b c -> a b/dp c">(x, o); },
                        shape, {"", "", ""}, {"", "dp", ""}, {SPLIT}});
      check_move(mesh, {"a b/dp c -> a b c", [&](const at::Tensor& x) { return es::einshard<"a b/dp c -> a b c">(x, o); },
                        shape, {"", "dp", ""}, {"", "", ""}, {GATHER}});
      check_move(mesh, {"a b c/dp -> a b c", runtime("a b c/dp -> a b c", o), I64{2, 3, B},
                        {"", "", "dp"}, {"", "", ""}, {GATHER}});
    }
  }
}

TEST_CASE("unary: split and gather over other and compound mesh dimensions", "[mpi][unary]") {
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    const es::Options o{.mesh = mesh};
    for (auto A : I64{17, 3}) {
      const I64 shape{A, 2};
      check_move(mesh, {"a b -> a/sp b", runtime("a b -> a/sp b", o), shape, {"", ""}, {"sp", ""}, {SPLIT}});
      check_move(mesh, {"a/sp b -> a b", runtime("a/sp b -> a b", o), shape, {"sp", ""}, {"", ""}, {GATHER}});
      check_move(mesh, {"a b -> a/sp-dp b", [&](const at::Tensor& x) { return es::einshard<"a b -> a/sp-dp b">(x, o); },
                        shape, {"", ""}, {"dp-sp", ""}, {SPLIT}});
      check_move(mesh, {"a/dp-sp b -> a b", runtime("a/dp-sp b -> a b", o), shape, {"dp-sp", ""}, {"", ""}, {GATHER}});
    }
  }
}

TEST_CASE("unary: a gather without shapes learns uneven shard sizes", "[mpi][unary]") {
  const auto W = es::testing::world().size;
  // Sizes the split rule would never produce, with empty shards.
  I64 custom;
  for (int r = 0; r < W; ++r) custom.push_back(r % 3 == 1 ? 0 : r + 2);
  const auto total = std::accumulate(custom.begin(), custom.end(), std::int64_t{0});
  const auto& mesh = mesh_of({W});
  const es::Options o{.mesh = mesh};
  check_move(mesh, {"a/dp b -> a b (learned)", [&](const at::Tensor& x) { return es::einshard<"a/dp b -> a b">(x, o); },
                    I64{total, 3}, {"dp", ""}, {"", ""}, {GATHER}, {}, {{0, custom}}});
  check_move(mesh, {"a b/dp -> a b (learned)", runtime("a b/dp -> a b", o), I64{2, total}, {"", "dp"}, {"", ""},
                    {GATHER}, {}, {{1, custom}}});
  // The same with the sizes given as shapes metadata, and a split that follows them.
  const es::Options with{.mesh = mesh, .shapes = es::Shapes{{"dp", custom}}};
  check_move(mesh, {"a/dp b -> a b (given)", runtime("a/dp b -> a b", with), I64{total, 3}, {"dp", ""}, {"", ""},
                    {GATHER}, {}, {{0, custom}}});
  check_move(mesh, {"a b -> a/dp b (given)", runtime("a b -> a/dp b", with), I64{total, 3}, {"", ""}, {"dp", ""},
                    {SPLIT}, {}, {}, {{0, custom}}});
}

TEST_CASE("unary: multi-axis split and gather", "[mpi][unary]") {
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    const es::Options o{.mesh = mesh};
    const I64 shape{17, 3};
    check_move(mesh, {"a b -> a/sp b/dp", [&](const at::Tensor& x) { return es::einshard<"a b -> a/sp b/dp">(x, o); },
                      shape, {"", ""}, {"sp", "dp"}, {SPLIT, SPLIT}});
    check_move(mesh, {"a/sp b/dp -> a b", runtime("a/sp b/dp -> a b", o), shape, {"sp", "dp"}, {"", ""},
                      {GATHER, GATHER}});
    if (mesh.ndim() == 3) {
      check_move(mesh, {"a b c -> a/tp b/dp c/sp", runtime("a b c -> a/tp b/dp c/sp", o), I64{5, 3, 2}, {"", "", ""},
                        {"tp", "dp", "sp"}, {SPLIT, SPLIT, SPLIT}});
      check_move(mesh, {"a/tp b/dp c/sp -> a b c", runtime("a/tp b/dp c/sp -> a b c", o), I64{5, 3, 2},
                        {"tp", "dp", "sp"}, {"", "", ""}, {GATHER, GATHER, GATHER}});
    }
  }
}

TEST_CASE("unary: split + permute and gather + permute", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    const es::Options o{.mesh = mesh};
    // b a -> a/dp b: output dim 0 is input dim 1.
    check_move(mesh, {"b a -> a/dp b", [&](const at::Tensor& x) { return es::einshard<"b a -> a/dp b">(x, o); },
                      I64{4, 17}, {"", ""}, {"dp", ""}, {SPLIT, PERMUTE}, {1, 0}});
    check_move(mesh, {"a/dp b c -> c b a", runtime("a/dp b c -> c b a", o), I64{3, 2, 4}, {"dp", "", ""},
                      {"", "", ""}, {GATHER, PERMUTE}, {2, 1, 0}});
  }
}

TEST_CASE("unary: ellipsis on both sides", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    const es::Options o{.mesh = mesh};
    check_move(mesh, {"... a -> ... a/dp", [&](const at::Tensor& x) { return es::einshard<"... a -> ... a/dp">(x, o); },
                      I64{2, 3, 17}, {"", "", ""}, {"", "", "dp"}, {SPLIT}});
    // The ellipsis may stand for no axis at all.
    check_move(mesh, {"... a -> ... a/dp (1-D)", runtime("... a -> ... a/dp", o), I64{17}, {""}, {"dp"}, {SPLIT}});
    check_move(mesh, {"b ... a/dp -> b ... a",
                      [&](const at::Tensor& x) { return es::einshard<"b ... a/dp -> b ... a">(x, o); },
                      I64{2, 3, 2, 3}, {"", "", "", "dp"}, {"", "", "", ""}, {GATHER}});
    check_move(mesh, {"... a/dp b -> ... a b/dp", runtime("... a/dp b -> ... a b/dp", o), I64{2, 5, 4},
                      {"", "dp", ""}, {"", "", "dp"}, {ALLTOALL}});
  }
}

// ---- all-to-all layout changes ----------------------------------------------------------------

TEST_CASE("unary: same-mesh repartition is exactly one all-to-all", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    const auto P = mesh.size("dp");
    const es::Options o{.mesh = mesh};
    for (const auto& [A, B] : mesh.ndim() == 1 ? std::vector<std::pair<std::int64_t, std::int64_t>>{{17, 9}, {3, 4}, {0, 5}}
                                               : std::vector<std::pair<std::int64_t, std::int64_t>>{{17, 9}, {3, 4}}) {
      const I64 shape{A, B};
      check_move(mesh, {"a/dp b -> a b/dp", [&](const at::Tensor& x) { return es::einshard<"a/dp b -> a b/dp">(x, o); },
                        shape, {"dp", ""}, {"", "dp"}, {ALLTOALL}});
      check_move(mesh, {"a b/dp -> a/dp b", runtime("a b/dp -> a/dp b", o), shape, {"", "dp"}, {"dp", ""}, {ALLTOALL}});
    }
    // With the shapes metadata per axis (form 3), sizes the split rule would not give.
    I64 sa(static_cast<std::size_t>(P), 0), sb(static_cast<std::size_t>(P), 1);
    sa[0] = 6;
    if (P > 1) {
      sb[0] = 0;
      sb.back() = std::max<std::int64_t>(7 - (P - 2), 2);  // 7 in all up to 9 ranks, never negative
    } else {
      sb[0] = 7;
    }
    const auto total_b = std::accumulate(sb.begin(), sb.end(), std::int64_t{0});
    const es::Options by_axis{.mesh = mesh, .shapes = es::Shapes{{"dp", {{"a", sa}, {"b", sb}}}}};
    check_move(mesh, {"a/dp b -> a b/dp (shapes by axis)",
                      [&](const at::Tensor& x) { return es::einshard<"a/dp b -> a b/dp">(x, by_axis); },
                      I64{6, total_b}, {"dp", ""}, {"", "dp"}, {ALLTOALL}, {}, {{0, sa}}, {{1, sb}}});
    check_move(mesh, {"a b/dp -> a/dp b (shapes by axis)", runtime("a b/dp -> a/dp b", by_axis),
                      I64{6, total_b}, {"", "dp"}, {"dp", ""}, {ALLTOALL}, {}, {{1, sb}}, {{0, sa}}});
    // Non-contiguous inputs, empty columns.
    check_move(mesh, {"a/dp b -> a b/dp (non-contiguous)", runtime("a/dp b -> a b/dp", o), I64{17, 9}, {"dp", ""},
                      {"", "dp"}, {ALLTOALL}, {}, {}, {}, true});
    check_move(mesh, {"a b -> a/dp b (non-contiguous)", runtime("a b -> a/dp b", o), I64{17, 9}, {"", ""},
                      {"dp", ""}, {SPLIT}, {}, {}, {}, true});
    check_move(mesh, {"a b/dp -> a b (non-contiguous)", runtime("a b/dp -> a b", o), I64{4, 9}, {"", "dp"},
                      {"", ""}, {GATHER}, {}, {}, {}, true});
    check_move(mesh, {"a/dp b -> a b/dp (no columns)", runtime("a/dp b -> a b/dp", o), I64{5, 0}, {"dp", ""},
                      {"", "dp"}, {ALLTOALL}});
    if (mesh.ndim() >= 2)  // On another dimension, with replicas over dp.
      check_move(mesh, {"a/sp b -> a b/sp", runtime("a/sp b -> a b/sp", o), I64{17, 6}, {"sp", ""}, {"", "sp"},
                        {ALLTOALL}});
    // More axes and a permutation after the move.
    check_move(mesh, {"a/dp b c -> a b c/dp", runtime("a/dp b c -> a b c/dp", o), I64{5, 2, 9}, {"dp", "", ""},
                      {"", "", "dp"}, {ALLTOALL}});
    check_move(mesh, {"a/dp b -> b/dp a", runtime("a/dp b -> b/dp a", o), I64{5, 9}, {"dp", ""}, {"dp", ""},
                      {ALLTOALL, PERMUTE}, {1, 0}});
  }
}

TEST_CASE("unary: cross-mesh moves are one all-to-all, no gathers", "[mpi][unary]") {
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    const es::Options o{.mesh = mesh};
    for (auto A : extents(mesh)) {
      const I64 shape{A, 2};
      check_move(mesh, {"a/dp b -> a/sp b", [&](const at::Tensor& x) { return es::einshard<"a/dp b -> a/sp b">(x, o); },
                        shape, {"dp", ""}, {"sp", ""}, {ALLTOALL}});
      check_move(mesh, {"a/sp b -> a/dp b", runtime("a/sp b -> a/dp b", o), shape, {"sp", ""}, {"dp", ""}, {ALLTOALL}});
      check_move(mesh, {"a/dp b -> a/dp-sp b", runtime("a/dp b -> a/dp-sp b", o), shape, {"dp", ""}, {"dp-sp", ""},
                        {ALLTOALL}});
      check_move(mesh, {"a/sp-dp b -> a b/dp-sp", runtime("a/sp-dp b -> a b/dp-sp", o), I64{A, 9}, {"dp-sp", ""},
                        {"", "dp-sp"}, {ALLTOALL}});
      // A split mixed with a gather on different dimensions: one all-to-all too.
      check_move(mesh, {"a b/sp -> a/dp b", runtime("a b/sp -> a/dp b", o), I64{A, 5}, {"", "sp"}, {"dp", ""},
                        {ALLTOALL}});
    }
  }
}

TEST_CASE("unary: ownership permutations are one all-to-all", "[mpi][unary]") {
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    const es::Options o{.mesh = mesh};
    check_move(mesh, {"a/dp b/sp -> a/sp b/dp",
                      [&](const at::Tensor& x) { return es::einshard<"a/dp b/sp -> a/sp b/dp">(x, o); },
                      I64{17, 5}, {"dp", "sp"}, {"sp", "dp"}, {ALLTOALL}});
    if (mesh.ndim() == 3) {
      check_move(mesh, {"a/dp b/sp c/tp -> a/sp b/tp c/dp",
                        [&](const at::Tensor& x) { return es::einshard<"a/dp b/sp c/tp -> a/sp b/tp c/dp">(x, o); },
                        I64{3, 5, 4}, {"dp", "sp", "tp"}, {"sp", "tp", "dp"}, {ALLTOALL}});
      check_move(mesh, {"b h/sp w/tp c -> b h/tp w/sp c", runtime("b h/sp w/tp c -> b h/tp w/sp c", o),
                        I64{2, 5, 3, 2}, {"", "sp", "tp", ""}, {"", "tp", "sp", ""}, {ALLTOALL}});
      // An ownership move plus an independent split.
      check_move(mesh, {"a/dp b -> a/sp b/tp", runtime("a/dp b -> a/sp b/tp", o), I64{5, 3}, {"dp", ""},
                        {"sp", "tp"}, {ALLTOALL}});
    }
  }
}

TEST_CASE("unary: plans report this rank's all-to-all bytes; explain moves nothing", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const auto P = mesh.size("dp");
    const auto c = static_cast<std::size_t>(mesh.coordinate("dp"));
    const std::int64_t A = 17, B = 9;
    const auto sa = es::compute_split_shapes(A, P), sb = es::compute_split_shapes(B, P);
    const auto x = block(full({A, B}, 3), mesh, {"dp", ""});
    const es::Options o{.mesh = mesh};
    const auto plan = es::explain<"a/dp b -> a b/dp">(x, o);
    REQUIRE(plan.steps.size() == 1);
    CHECK(plan.names() == Names{ALLTOALL});
    // Sent: my rows of every other rank's columns; received: my columns of every other rank's rows.
    CHECK(plan.steps[0].forward.bytes_sent == sa[c] * (B - sb[c]) * 8);
    CHECK(plan.steps[0].forward.bytes_received == sb[c] * (A - sa[c]) * 8);
    CHECK(plan.steps[0].backward.bytes_sent == plan.steps[0].forward.bytes_received);
    CHECK(plan.steps[0].backward.bytes_received == plan.steps[0].forward.bytes_sent);
    CHECK(plan.steps[0].before == "a/dp b");
    CHECK(plan.steps[0].after == "a b/dp");
    // The run-time form explains the same, and running records the same plan.
    const auto again = es::explain("a/dp b -> a b/dp", {x}, o);
    CHECK(again.names() == plan.names());
    CHECK(again.steps[0].forward.bytes_sent == plan.steps[0].forward.bytes_sent);
    (void)es::einshard<"a/dp b -> a b/dp">(x, o);
    CHECK(es::last_plan().steps.size() == 1);
    CHECK(es::last_plan().steps[0].forward.bytes_sent == plan.steps[0].forward.bytes_sent);
    // A split costs nothing forward.
    const auto s = es::explain<"a b -> a/dp b">(full({A, B}, 3), o);
    CHECK(s.names() == Names{SPLIT});
    CHECK(s.steps[0].forward.bytes_sent == 0);
  }
}

// ---- partials ---------------------------------------------------------------------------------

TEST_CASE("unary: partial -> full is one all-reduce; its backward is the identity", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    const auto X = per_rank({5, 3}, 11, mesh.size());
    const auto G = full({5, 3}, 12);
    const auto& x = X[static_cast<std::size_t>(mesh.rank())];
    {
      const auto [y, grad] = forward_backward(
          [&](const at::Tensor& t) { return es::einshard<"a b // dp -> a b">(t, o); }, x, G);
      CHECK(near(y, sum_over(X, members(mesh, "dp"))));
      CHECK(same(grad, G));
      CHECK(es::last_plan().names() == Names{ALLREDUCE});
      CHECK(es::last_plan().steps[0].group == "dp");
    }
    if (mesh.ndim() >= 2) {
      const auto [y, grad] = forward_backward(runtime("a b // sp -> a b", o), x, G);
      CHECK(near(y, sum_over(X, members(mesh, "sp"))));
      CHECK(same(grad, G));
      CHECK(es::last_plan().names() == Names{ALLREDUCE});
    }
    if (mesh.ndim() >= 2) {  // Reduced over dp, then split over sp.
      const auto [y, grad] = forward_backward(runtime("a b // dp -> a/sp b", o), x, block(G, mesh, {"sp", ""}));
      CHECK(near(y, block(sum_over(X, members(mesh, "dp")), mesh, {"sp", ""})));
      CHECK(same(grad, G));
      CHECK(es::last_plan().names() == Names{ALLREDUCE, SPLIT});
    }
  }
}

TEST_CASE("unary: partial -> shard reduce-scatters; its backward all-gathers", "[mpi][unary]") {
  for (auto algorithm : {es::comm::ReduceScatterAlgorithm::native, es::comm::ReduceScatterAlgorithm::allreduce_slice}) {
    const auto saved = es::comm::algorithms().reduce_scatter;
    es::comm::algorithms().reduce_scatter = algorithm;
    for (const auto* mp : meshes()) {
      const auto& mesh = *mp;
      // The all-reduce-and-slice algorithm shares everything else with the native one: one mesh.
      if (algorithm != es::comm::ReduceScatterAlgorithm::native && mp != meshes().front()) continue;
      INFO(label(mesh) << (algorithm == es::comm::ReduceScatterAlgorithm::native ? " native" : " allreduce_slice"));
      const es::Options o{.mesh = mesh};
      for (auto A : extents(mesh)) {
        INFO("A = " << A);
        const auto X = per_rank({A, 3}, 21, mesh.size());
        const auto sum = sum_over(X, members(mesh, "dp"));
        const auto G = full({A, 3}, 22);
        const auto& x = X[static_cast<std::size_t>(mesh.rank())];
        {
          const auto [y, grad] = forward_backward(
              [&](const at::Tensor& t) { return es::einshard<"a b // dp -> a/dp b">(t, o); }, x,
              block(G, mesh, {"dp", ""}));
          CHECK(near(y, block(sum, mesh, {"dp", ""})));
          CHECK(same(grad, G));
          CHECK(es::last_plan().names() == Names{RS});
        }
        {  // Into an inner dimension.
          const auto Xt = per_rank({3, A}, 23, mesh.size());
          const auto sumt = sum_over(Xt, members(mesh, "dp"));
          const auto Gt = full({3, A}, 24);
          const auto [y, grad] = forward_backward(runtime("a b // dp -> a b/dp", o),
                                                  Xt[static_cast<std::size_t>(mesh.rank())],
                                                  block(Gt, mesh, {"", "dp"}));
          CHECK(near(y, block(sumt, mesh, {"", "dp"})));
          CHECK(same(grad, Gt));
          CHECK(es::last_plan().names() == Names{RS});
        }
        if (mesh.ndim() >= 2) {  // Over a compound group.
          const auto all = sum_over(X, members(mesh, "dp-sp"));
          const auto [y, grad] = forward_backward(runtime("a b // sp-dp -> a/dp-sp b", o), x,
                                                  block(G, mesh, {"dp-sp", ""}));
          CHECK(near(y, block(all, mesh, {"dp-sp", ""})));
          CHECK(same(grad, G));
          CHECK(es::last_plan().names() == Names{RS});
        }
      }
    }
    es::comm::algorithms().reduce_scatter = saved;
  }
}

TEST_CASE("unary: shard -> partial all-gathers; its backward reduce-scatters", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    for (auto A : extents(mesh)) {
      INFO("A = " << A);
      const auto X = full({A, 3}, 31);
      const auto Gs = per_rank({A, 3}, 32, mesh.size());  // rank-dependent upstream gradients
      const auto [y, grad] = forward_backward(
          [&](const at::Tensor& t) { return es::einshard<"a/dp b -> a b // dp">(t, o); },
          block(X, mesh, {"dp", ""}), Gs[static_cast<std::size_t>(mesh.rank())]);
      CHECK(same(y, X));
      CHECK(near(grad, block(sum_over(Gs, members(mesh, "dp")), mesh, {"dp", ""})));
      CHECK(es::last_plan().names() == Names{GATHER_P});
    }
    {  // From an inner dimension.
      const auto X = full({3, 17}, 33);
      const auto Gs = per_rank({3, 17}, 34, mesh.size());
      const auto [y, grad] = forward_backward(runtime("a b/dp -> a b // dp", o), block(X, mesh, {"", "dp"}),
                                              Gs[static_cast<std::size_t>(mesh.rank())]);
      CHECK(same(y, X));
      CHECK(near(grad, block(sum_over(Gs, members(mesh, "dp")), mesh, {"", "dp"})));
      CHECK(es::last_plan().names() == Names{GATHER_P});
    }
    if (mesh.ndim() >= 2) {
      const auto X = full({17, 2}, 35);
      const auto Gs = per_rank({17, 2}, 36, mesh.size());
      const auto& gq = Gs[static_cast<std::size_t>(mesh.rank())];
      {  // Over a compound group.
        const auto [y, grad] =
            forward_backward(runtime("a/sp-dp b -> a b // dp-sp", o), block(X, mesh, {"dp-sp", ""}), gq);
        CHECK(same(y, X));
        CHECK(near(grad, block(sum_over(Gs, members(mesh, "dp-sp")), mesh, {"dp-sp", ""})));
        CHECK(es::last_plan().names() == Names{GATHER_P});
      }
      {  // Onto another group: gather over dp, then a partial over sp (backward: all-reduce, slice).
        const auto [y, grad] = forward_backward(runtime("a/dp b -> a b // sp", o), block(X, mesh, {"dp", ""}), gq);
        CHECK(same(y, X));
        CHECK(near(grad, block(sum_over(Gs, members(mesh, "sp")), mesh, {"dp", ""})));
        CHECK(es::last_plan().names() == Names{GATHER, ADD_P});
      }
    }
  }
}

TEST_CASE("unary: full -> partial is the identity; its backward all-reduces", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    const auto X = full({4, 3}, 41);
    const auto Gs = per_rank({4, 3}, 42, mesh.size());
    const auto& g = Gs[static_cast<std::size_t>(mesh.rank())];
    {
      const auto [y, grad] =
          forward_backward([&](const at::Tensor& t) { return es::einshard<"a b -> a b // dp">(t, o); }, X, g);
      CHECK(same(y, X));
      CHECK(near(grad, sum_over(Gs, members(mesh, "dp"))));
      CHECK(es::last_plan().names() == Names{ADD_P});
    }
    {  // Add partial + permute.
      const auto [y, grad] = forward_backward(runtime("b a -> a b // dp", o), X, g.t().contiguous());
      CHECK(same(y, X.t().contiguous()));
      CHECK(near(grad, sum_over(Gs, members(mesh, "dp"))));
      CHECK(es::last_plan().names() == Names{ADD_P, PERMUTE});
    }
    if (mesh.ndim() >= 2) {  // Over a compound group.
      const auto [y, grad] = forward_backward(runtime("a b -> a b // sp-dp", o), X, g);
      CHECK(same(y, X));
      CHECK(near(grad, sum_over(Gs, members(mesh, "dp-sp"))));
      CHECK(es::last_plan().names() == Names{ADD_P});
    }
  }
}

TEST_CASE("unary: multi-dimension and compound partials reduce in one all-reduce", "[mpi][unary]") {
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    const auto X = per_rank({3, 2}, 51, mesh.size());
    const auto G = full({3, 2}, 52);
    const auto everyone = members(mesh, "dp-sp");
    const auto& x = X[static_cast<std::size_t>(mesh.rank())];
    const std::vector<std::pair<std::string, Op>> ops{
        {"a b // (sp,dp) -> a b", [&](const at::Tensor& t) { return es::einshard<"a b // (sp,dp) -> a b">(t, o); }},
        {"a b // (dp,sp) -> a b", runtime("a b // (dp,sp) -> a b", o)},
        {"a b // sp-dp -> a b", runtime("a b // sp-dp -> a b", o)},
        {"a b // dp-sp -> a b", [&](const at::Tensor& t) { return es::einshard<"a b // dp-sp -> a b">(t, o); }},
    };
    for (const auto& [name, op] : ops) {
      INFO(name);
      const auto [y, grad] = forward_backward(op, x, G);
      CHECK(near(y, sum_over(X, everyone)));
      CHECK(same(grad, G));
      CHECK(es::last_plan().names() == Names{ALLREDUCE});
      CHECK(es::last_plan().steps[0].group == "dp-sp");
    }
    {  // One group reduce-scattered into the output's shard, the other all-reduced.
      const auto [y, grad] =
          forward_backward(runtime("a b // (sp,dp) -> a/sp b", o), x, block(G, mesh, {"sp", ""}));
      CHECK(near(y, block(sum_over(X, everyone), mesh, {"sp", ""})));
      CHECK(same(grad, G));
      CHECK(es::last_plan().names() == Names{RS, ALLREDUCE});
    }
    {  // Reduce-scattered over dp, then split over sp.
      const auto [y, grad] =
          forward_backward(runtime("a b // dp -> a/dp b/sp", o), x, block(G, mesh, {"dp", "sp"}));
      CHECK(near(y, block(sum_over(X, members(mesh, "dp")), mesh, {"dp", "sp"})));
      CHECK(same(grad, G));
      CHECK(es::last_plan().names() == Names{RS, SPLIT});
    }
  }
}

TEST_CASE("unary: scalar partials on 0-d tensors", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    std::vector<at::Tensor> values;
    for (int q = 0; q < mesh.size(); ++q) values.push_back(at::scalar_tensor(0.25 * q + 1.0, at::kDouble));
    const auto& x = values[static_cast<std::size_t>(mesh.rank())];
    const auto upstream = at::scalar_tensor(3.5, at::kDouble);
    {
      const auto [y, grad] =
          forward_backward([&](const at::Tensor& t) { return es::einshard<"loss // dp -> loss">(t, o); }, x, upstream);
      CHECK(y.dim() == 0);
      CHECK(near(y, sum_over(values, members(mesh, "dp"))));
      CHECK(grad.dim() == 0);
      CHECK(same(grad, upstream));
      CHECK(es::last_plan().names() == Names{ALLREDUCE});
    }
    if (mesh.ndim() >= 2)
      for (const auto& [name, op] : std::vector<std::pair<std::string, Op>>{
               {"loss // (dp,sp) -> loss",
                [&](const at::Tensor& t) { return es::einshard<"loss // (dp,sp) -> loss">(t, o); }},
               {"loss // dp-sp -> loss", runtime("loss // dp-sp -> loss", o)},
               {"loss // (sp,dp) -> loss", runtime("loss // (sp,dp) -> loss", o)}}) {
        INFO(name);
        const auto [y, grad] = forward_backward(op, x, upstream);
        CHECK(y.dim() == 0);
        CHECK(near(y, sum_over(values, members(mesh, "dp-sp"))));
        CHECK(same(grad, upstream));
        CHECK(es::last_plan().names() == Names{ALLREDUCE});
        CHECK(es::last_plan().steps.size() == 1);
        CHECK(es::last_plan().steps[0].group == "dp-sp");
      }
  }
}

TEST_CASE("unary: a kept partial travels through an all-to-all within its own replicas", "[mpi][unary]") {
  // a/dp b // sp -> a b/dp // sp: ranks that differ on sp hold different partial data, so each
  // element must come from the rank with the same sp coordinate.
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    const auto k = static_cast<std::size_t>(mesh.coordinate("sp"));
    const auto Xs = per_rank({17, 5}, 81, mesh.size("sp"));  // one full tensor per sp coordinate
    const auto Gs = per_rank({17, 5}, 82, mesh.size("sp"));
    const auto [y, grad] = forward_backward(runtime("a/dp b // sp -> a b/dp // sp", o),
                                            block(Xs[k], mesh, {"dp", ""}), block(Gs[k], mesh, {"", "dp"}));
    CHECK(same(y, block(Xs[k], mesh, {"", "dp"})));
    CHECK(same(grad, block(Gs[k], mesh, {"dp", ""})));
    CHECK(es::last_plan().names() == Names{ALLTOALL});
  }
}

TEST_CASE("unary: other dtypes move and sum in their own arithmetic", "[mpi][unary]") {
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const es::Options o{.mesh = mesh};
    const auto X = full({17, 6}, 91);
    // Integers through an all-to-all and a gather (no autograd).
    const auto xi = (X * 100).to(at::kLong);
    CHECK(same(es::einshard<"a/dp b -> a b/dp">(block(xi, mesh, {"dp", ""}), o), block(xi, mesh, {"", "dp"})));
    CHECK(same(es::einshard("a b/dp -> a b", {block(xi.to(at::kByte), mesh, {"", "dp"})}, o), xi.to(at::kByte)));
    CHECK(same(es::einshard("a b/dp -> a b", {block(X > 0, mesh, {"", "dp"})}, o), X > 0));
    // Complex: a gather with gradients.
    const auto Xc = at::complex(X, X.flip(0));
    CHECK(same(es::einshard("a/dp b -> a b", {block(Xc, mesh, {"dp", ""})}, o), Xc));
    // Half and bfloat16 partial sums: exact multiples of 0.5, so the result is exact.
    for (auto dt : {at::kHalf, at::kBFloat16}) {
      INFO(c10::toString(dt));
      const auto base = at::arange(12, at::kDouble).reshape({3, 4}) * 0.5;
      const auto mine = (base + mesh.rank()).to(dt);
      double ranks = 0;
      for (int q : members(mesh, "dp")) ranks += q;
      const auto expected = (base * static_cast<double>(mesh.size("dp")) + ranks).to(dt);
      const auto y = es::einshard<"a b // dp -> a b">(mine, o);
      CHECK(y.scalar_type() == dt);
      CHECK(same(y, expected));
      const auto rs = es::einshard("a b // dp -> a/dp b", {mine}, o);
      CHECK(same(rs, block(expected, mesh, {"dp", ""})));
    }
    // Float32 with gradients through a repartition.
    const auto xf = block(X.to(at::kFloat), mesh, {"dp", ""}).requires_grad_(true);
    const auto yf = es::einshard<"a/dp b -> a b/dp">(xf, o);
    CHECK(yf.scalar_type() == at::kFloat);
    yf.backward(at::ones_like(yf));
    CHECK(same(xf.grad(), at::ones_like(xf)));
  }
}

TEST_CASE("unary: shapes keyed by a compound group in either spelling", "[mpi][unary]") {
  // "sp-dp" and "dp-sp" name one group: shapes given under the spelling the notation uses apply.
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    I64 sizes(static_cast<std::size_t>(mesh.size("dp-sp")), 0);  // one entry per rank of the group
    sizes.back() = 4;
    for (const auto* key : {"dp-sp", "sp-dp"}) {
      INFO(label(mesh) << ", shapes under '" << key << "'");
      const es::Options o{.mesh = mesh, .shapes = es::Shapes{{key, sizes}}};
      check_move(mesh, {"a b -> a/sp-dp b", runtime("a b -> a/sp-dp b", o), I64{4, 2}, {"", ""}, {"dp-sp", ""},
                        {SPLIT}, {}, {}, {{0, sizes}}});
    }
  }
}

// ---- shapes metadata ------------------------------------------------------------------------------

TEST_CASE("unary: shapes metadata in all three forms", "[mpi][unary]") {
  const auto W = es::testing::world().size;
  // A split all on the last rank, then one all on the first: not the split rule's sizes.
  I64 last(static_cast<std::size_t>(W), 0), first(static_cast<std::size_t>(W), 0);
  last.back() = 5;
  first.front() = 4;
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    if (mesh.size("dp") != W) continue;  // flat and per-dimension lists are sized for the whole world
    // 1. One list for every dimension and axis.
    const es::Options flat{.mesh = mesh, .shapes = es::Shapes(std::vector<std::int64_t>(last))};
    check_move(mesh, {"a b -> a/dp b (flat shapes)", [&](const at::Tensor& x) { return es::einshard<"a b -> a/dp b">(x, flat); },
                      I64{5, 2}, {"", ""}, {"dp", ""}, {SPLIT}, {}, {}, {{0, last}}});
    check_move(mesh, {"a/dp b -> a b (flat shapes)", runtime("a/dp b -> a b", flat), I64{5, 2}, {"dp", ""}, {"", ""},
                      {GATHER}, {}, {{0, last}}});
    // 2. A list per mesh dimension.
    const es::Options by_dim{.mesh = mesh, .shapes = es::Shapes{{"dp", last}}};
    check_move(mesh, {"a b -> a b/dp (shapes by dim)", runtime("a b -> a b/dp", by_dim), I64{2, 5}, {"", ""},
                      {"", "dp"}, {SPLIT}, {}, {}, {{1, last}}});
    // 3. A list per mesh dimension and axis: a repartition with different splits of a and b.
    const es::Options by_axis{.mesh = mesh, .shapes = es::Shapes{{"dp", {{"a", last}, {"b", first}}}}};
    check_move(mesh, {"a/dp b -> a b/dp (shapes by axis)", runtime("a/dp b -> a b/dp", by_axis), I64{5, 4},
                      {"dp", ""}, {"", "dp"}, {ALLTOALL}, {}, {{0, last}}, {{1, first}}});
  }
  // Per mesh dimension on a 2-D mesh: both dimensions listed.
  for (const auto* mp : meshes(2)) {
    const auto& mesh = *mp;
    // Both lists sum to 3: dp puts everything on its last coordinate, sp on its first.
    I64 on_dp(static_cast<std::size_t>(mesh.size("dp")), 0), on_sp(static_cast<std::size_t>(mesh.size("sp")), 0);
    on_dp.back() = 3;
    on_sp.front() = 3;
    const es::Options o{.mesh = mesh, .shapes = es::Shapes{{"dp", on_dp}, {"sp", on_sp}}};
    check_move(mesh, {"a b -> a/dp b/sp (shapes by dim)", runtime("a b -> a/dp b/sp", o), I64{3, 3}, {"", ""},
                      {"dp", "sp"}, {SPLIT, SPLIT}, {}, {}, {{0, on_dp}, {1, on_sp}}});
    check_move(mesh, {"a/dp b -> a/sp b (shapes by dim)", runtime("a/dp b -> a/sp b", o), I64{3, 2}, {"dp", ""},
                      {"sp", ""}, {ALLTOALL}, {}, {{0, on_dp}}, {{0, on_sp}}},
               17);
  }
}

// ---- errors ---------------------------------------------------------------------------------------

TEST_CASE("unary errors: bad notations and metadata raise the same error on every rank", "[mpi][unary][errors]") {
  const auto W = es::testing::world().size;
  const auto& mesh = mesh_of({W});
  const es::Options o{.mesh = mesh};
  const auto X = full({5, 3}, 61);
  const auto x = block(X, mesh, {"dp", ""});

  // A mesh dimension the mesh lacks.
  expect_same_error([&] { (void)es::einshard<"a b -> a/zz b">(X, o); }, "zz");
  expect_same_error([&] { (void)es::einshard("a/dp b // zz -> a b", {x}, o); }, "zz");
  // Missing shapes for a dimension, for an axis; wrong lengths; sums that miss the extent.
  expect_same_error([&] { (void)es::einshard<"a b -> a/dp b">(X, {.mesh = mesh, .shapes = es::Shapes{{"sp", {1}}}}); },
                    "Missing split shapes for mesh dimension 'dp'");
  expect_same_error(
      [&] {
        (void)es::einshard<"a/dp b -> a b/dp">(
            x, {.mesh = mesh, .shapes = es::Shapes{{"dp", {{"a", es::compute_split_shapes(5, W)}}}}});
      },
      "Missing split shapes for axis 'b'");
  expect_same_error(
      [&] {
        (void)es::einshard<"a b -> a/dp b">(
            X, {.mesh = mesh, .shapes = es::Shapes(std::vector<std::int64_t>(static_cast<std::size_t>(W) + 1, 1))});
      },
      "entries");
  {
    I64 wrong = es::compute_split_shapes(5, W);
    wrong.back() += 1;
    expect_same_error([&] { (void)es::einshard<"a b -> a/dp b">(X, {.mesh = mesh, .shapes = es::Shapes{{"dp", wrong}}}); },
                      "sums to 6");
  }
  // Different axis sets: a distributed unary op does not reduce.
  const auto X3 = full({5, 3, 2}, 62);
  expect_same_error([&] { (void)es::einshard("a/dp b c -> a b", {block(X3, mesh, {"dp", "", ""})}, o); },
                    "same axes");
  // A diagonal layout (one mesh dimension on two axes) cannot be repartitioned.
  expect_same_error(
      [&] { (void)es::einshard("a/dp b/dp c -> a b/dp c/dp", {block(X3, mesh, {"dp", "dp", ""})}, o); },
      "diagonal");
  // An ellipsis on one side only.
  expect_same_error([&] { (void)es::einshard("... a/dp -> a", {x.select(1, 0)}, o); }, "'...'");
  // No mesh: nothing moves, every rank raises.
  CHECK_THROWS_AS(es::einshard<"a b -> a/dp b">(X), es::Error);
  // The library is still usable afterwards.
  check_move(mesh, {"a/dp b -> a b after errors", runtime("a/dp b -> a b", o), I64{5, 3}, {"dp", ""}, {"", ""}, {GATHER}});
}

TEST_CASE("unary errors: a fault on one rank raises the same error on every rank", "[mpi][unary][errors]") {
  const auto W = es::testing::world().size;
  const int bad = faulty_rank();
  for (const auto* mp : meshes()) {
    const auto& mesh = *mp;
    INFO(label(mesh));
    const bool me = mesh.rank() == bad;
    const es::Options o{.mesh = mesh};
    const auto X = full({9, 3}, 71);
    const auto x = block(X, mesh, {"dp", ""});
    const auto given = es::compute_split_shapes(9, mesh.size("dp"));
    const es::Options with{.mesh = mesh, .shapes = es::Shapes{{"dp", given}}};
    const auto one_row = at::zeros({1, x.size(1)}, x.options());  // x may have no rows (9 on 13 ranks)

    // A shard whose size disagrees with the shapes metadata (or, where the shard has replicas on
    // other ranks, with theirs): the message names the axis either way.
    expect_same_error(
        [&] { (void)es::einshard<"a/dp b -> a b">(me ? at::cat({x, one_row}) : x, with); },
        "axis 'a'");
    // ... also when the call would have been a repartition.
    expect_same_error(
        [&] { (void)es::einshard("a/dp b -> a b/dp", {me ? at::zeros({x.size(0) + 2, 3}, at::kDouble) : x}, with); },
        "axis 'a'");
    // explain() is collective too and agrees on the same fault.
    expect_same_error(
        [&] { (void)es::explain<"a/dp b -> a b">(me ? at::cat({x, one_row}) : x, with); }, "axis 'a'");
    // A different number of dimensions than the notation names.
    expect_same_error([&] { (void)es::einshard<"a/dp b -> a b">(me ? x.unsqueeze(0) : x, o); }, "dimensions");
    expect_same_error([&] { (void)es::einshard<"loss // dp -> loss">(me ? X : at::scalar_tensor(1.0, at::kDouble), o); },
                      "dimensions");
    if (W > 1) {  // Faults that need another rank to disagree with.
      // A whole axis that is not whole everywhere.
      expect_same_error([&] { (void)es::einshard<"a/dp b -> a b">(me ? at::cat({x, x}, 1) : x, o); }, "axis 'b'");
      expect_same_error([&] { (void)es::einshard<"a b // dp -> a b">(me ? X.narrow(0, 0, 8) : X, o); }, "axis 'a'");
      // A different dtype.
      expect_same_error([&] { (void)es::einshard<"a/dp b -> a b">(me ? x.to(at::kFloat) : x, o); }, "dtype");
      expect_same_error([&] { (void)es::einshard<"a b // dp -> a b">(me ? X.to(at::kHalf) : X, o); }, "dtype");
      // A different number of dimensions between ranks (the ellipsis accepts both).
      expect_same_error([&] { (void)es::einshard<"... a/dp b -> ... a b">(me ? x.unsqueeze(0) : x, o); },
                        "dimensions");
      // The compile-time and run-time forms of one notation are the same operation.
      CHECK(same(me ? es::einshard<"a/dp b -> a b">(x, o) : es::einshard("a/dp b -> a b", {x}, o), X));
      // A different operation.
      expect_same_error(
          [&] {
            (void)(me ? es::einshard("a/dp b -> a b", {x}, o) : es::einshard("a/dp b -> a b/dp", {x}, o));
          },
          "different operation", /*skip_prefix=*/true);
    }
    // Every rank still agrees afterwards.
    check_move(mesh, {"a/dp b -> a b after faults", runtime("a/dp b -> a b", o), I64{9, 3}, {"dp", ""}, {"", ""},
                      {GATHER}});
  }
  (void)W;
}

TEST_CASE("unary: a call on a new mesh never runs a plan made for a freed one", "[mpi][unary][cache]") {
  // MPI hands a freed communicator's handle to the next one it makes, so a cache keyed by the
  // handle would run the plan of the old mesh's shape on the new one. Keyed by mesh identity and
  // shape, each mesh gets its own plan.
  const auto w = es::testing::world();
  const auto X = at::arange(2 * w.size * 3, at::kDouble).reshape({2 * w.size, 3});
  for (int round = 0; round < 3; ++round) {
    {
      const es::Mesh first(MPI_COMM_WORLD, {w.size}, {"dp"});  // dp spans the world
      const auto y = es::einshard<"a b -> a/dp b">(X, {.mesh = first});
      CHECK(at::equal(y, X.narrow(0, 2 * w.rank, 2)));
    }
    {
      // A call on another mesh: the last-plan record lets go of the first one, which is freed.
      const es::Mesh other(MPI_COMM_WORLD, {w.size}, {"tp"});
      (void)es::einshard<"a b -> a/tp b">(X, {.mesh = other});
    }
    // The same notation and tensors on a mesh where dp has one rank: every rank keeps all of a.
    const es::Mesh second(MPI_COMM_WORLD, {1, w.size}, {"dp", "sp"});
    const auto y = es::einshard<"a b -> a/dp b">(X, {.mesh = second});
    CHECK(at::equal(y, X));
  }
}

}  // namespace test_unary
