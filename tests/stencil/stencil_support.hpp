#pragma once
// Shared code of the stencil tests (einhalo, einroll, einwindow, einconv): meshes, shards of full
// tensors, and the check every distributed result goes through.
//
// Every rank draws the same full tensors from one seed and takes its shard. The reference output
// of every rank q is computed on one process from the full tensor with plain torch (index
// arithmetic, at::pad, at::roll, unfold, conv); rank q's upstream gradient G_q is a draw every
// rank can reproduce. The expected input gradient on this rank is then the gradient of
// sum_q <ref_q(X), G_q> over the ranks q holding the same replica, restricted to this rank's
// shard: exactly what one process computes for the whole distributed computation.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>
#include <einshard/ops/conv.hpp>
#include <einshard/ops/halo.hpp>
#include <einshard/ops/roll.hpp>
#include <einshard/ops/window.hpp>
#include <einshard/plan/halo.hpp>  // the pure planner, tested on its own

#include "test_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace stencil_test {

namespace es = einshard;
using I64 = std::vector<std::int64_t>;

/// The mesh shapes tested at world size W: the 1-D mesh, the 2-D factorizations, and (2,2,W/4)
/// from 8 ranks on.
inline std::vector<std::vector<int>> mesh_shapes(int W) {
  std::vector<std::vector<int>> out{{W}};
  if (W == 1) return {{1}, {1, 1}};
  for (int a = 2; a < W; ++a)
    if (W % a == 0) out.push_back({a, W / a});
  if (W % 4 == 0 && W >= 8) out.push_back({2, 2, W / 4});
  return out;
}

/// Meshes are cached (building one is collective); dimensions are named dp, sp, tp.
inline const es::Mesh& mesh_of(const std::vector<int>& sizes) {
  static std::map<std::vector<int>, es::Mesh> cache;
  if (auto it = cache.find(sizes); it != cache.end()) return it->second;
  static const std::vector<std::string> all{"dp", "sp", "tp"};
  std::vector<std::string> names(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
  return cache.emplace(sizes, es::Mesh(MPI_COMM_WORLD, sizes, names)).first->second;
}

inline std::vector<const es::Mesh*> meshes() {
  std::vector<const es::Mesh*> out;
  for (const auto& s : mesh_shapes(es::testing::world().size)) out.push_back(&mesh_of(s));
  return out;
}

inline std::string label(const es::Mesh& m) {
  std::string s = "(";
  for (std::size_t i = 0; i < m.sizes().size(); ++i) s += (i ? "," : "") + std::to_string(m.sizes()[i]);
  return s + ")";
}

inline at::Tensor full(const I64& shape, std::uint64_t seed, at::ScalarType dtype = at::kDouble) {
  at::manual_seed(seed);
  return at::randn(shape, dtype);
}

/// How a tensor is laid out: the group of each dimension ("" whole) and, where given, the shard
/// sizes of a dimension (else the split rule).
struct Sharding {
  std::vector<std::string> groups;
  std::map<std::int64_t, I64> given{};

  [[nodiscard]] I64 sizes(std::int64_t d, std::int64_t extent, const es::Mesh& mesh) const {
    if (auto it = given.find(d); it != given.end()) return it->second;
    return es::compute_split_shapes(extent, mesh.size(groups[static_cast<std::size_t>(d)]));
  }
  /// Offset and size along d of mesh rank q's shard.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> range(std::int64_t d, std::int64_t extent,
                                                            const es::Mesh& mesh, int q) const {
    const auto& g = groups[static_cast<std::size_t>(d)];
    if (g.empty()) return {0, extent};
    const auto s = sizes(d, extent, mesh);
    const auto c = static_cast<std::size_t>(mesh.shape().coordinate(mesh.shape().group(g), mesh.coordinates_of(q)));
    return {std::accumulate(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(c), std::int64_t{0}), s[c]};
  }
  [[nodiscard]] at::Tensor block(const at::Tensor& t, const es::Mesh& mesh, int q) const {
    auto b = t;
    for (std::int64_t d = 0; d < t.dim(); ++d) {
      const auto [o, s] = range(d, t.size(d), mesh, q);
      b = b.narrow(d, o, s);
    }
    return b;
  }
  /// The shapes metadata stating every sharded dimension's sizes (two sharded dimensions at most:
  /// `Shapes` is built from an initializer list).
  [[nodiscard]] es::Shapes shapes(const I64& extents, const es::Mesh& mesh) const {
    if (given.empty()) return {};
    std::vector<std::pair<const std::string, es::DimShapes>> by_group;
    for (std::size_t d = 0; d < groups.size(); ++d)
      if (!groups[d].empty())
        by_group.emplace_back(groups[d], es::DimShapes(sizes(static_cast<std::int64_t>(d), extents[d], mesh)));
    REQUIRE(by_group.size() <= 2);
    if (by_group.size() == 1) return es::Shapes{by_group[0]};
    return es::Shapes{by_group[0], by_group[1]};
  }
  /// The mesh ranks holding the same replica as this rank (equal on every unused mesh dimension).
  [[nodiscard]] std::vector<int> replicas(const es::Mesh& mesh) const {
    std::vector<bool> used(static_cast<std::size_t>(mesh.ndim()), false);
    for (const auto& g : groups)
      if (!g.empty())
        for (int d : mesh.components(g)) used[static_cast<std::size_t>(d)] = true;
    const auto mine = mesh.coordinates_of(mesh.rank());
    std::vector<int> out;
    for (int q = 0; q < mesh.size(); ++q) {
      const auto theirs = mesh.coordinates_of(q);
      bool same = true;
      for (std::size_t d = 0; d < used.size(); ++d) same = same && (used[d] || theirs[d] == mine[d]);
      if (same) out.push_back(q);
    }
    return out;
  }
};

/// Global indices [begin, end) of an axis of extent n, resolved by a boundary: the rows a padded
/// axis holds. Returns (indices into [0, n), mask of real rows).
inline std::pair<at::Tensor, at::Tensor> resolve(std::int64_t begin, std::int64_t end, std::int64_t n,
                                                 es::Boundary b) {
  auto i = at::arange(begin, end, at::kLong);
  if (b == es::Boundary::periodic) return {at::remainder(i, n), at::ones_like(i, at::kBool)};
  const auto inside = (i >= 0).logical_and(i < n);
  return {i.clamp(0, std::max<std::int64_t>(n - 1, 0)), b == es::Boundary::constant ? inside : at::ones_like(inside)};
}

/// Rows [begin, end) of dimension d of t, resolved by the boundary (constant rows take `fill`).
inline at::Tensor rows(const at::Tensor& t, std::int64_t d, std::int64_t begin, std::int64_t end,
                       es::Boundary b, double fill) {
  const auto n = t.size(d);
  if (n == 0) {
    auto shape = t.sizes().vec();
    shape[static_cast<std::size_t>(d)] = end - begin;
    return at::full(shape, fill, t.options()) + 0 * t.sum();
  }
  const auto [index, real] = resolve(begin, end, n, b);
  auto y = t.index_select(d, index);
  std::vector<std::int64_t> view(static_cast<std::size_t>(t.dim()), 1);
  view[static_cast<std::size_t>(d)] = end - begin;
  return at::where(real.view(view), y, at::scalar_tensor(fill, t.options()));
}

/// Shard sizes with empty shards: one row at odd coordinates, the rest on the last.
inline I64 with_empty_shards(std::int64_t n, int parts) {
  I64 s(static_cast<std::size_t>(parts), 0);
  std::int64_t used = 0;
  for (int c = 1; c + 1 < parts && used < n; c += 2, ++used) s[static_cast<std::size_t>(c)] = 1;
  s.back() += n - used;
  return s;
}

/// The outputs [j0, j1) group coordinate c owns when output j belongs to the owner of input row
/// clamp(j*stride + shift, 0, n-1) (written independently of the library's closed form).
inline std::pair<std::int64_t, std::int64_t> owned_outputs(const I64& shards, std::int64_t outputs,
                                                           std::int64_t stride, std::int64_t shift, int c) {
  const auto n = std::accumulate(shards.begin(), shards.end(), std::int64_t{0});
  std::int64_t j0 = -1, j1 = 0;
  for (std::int64_t j = 0; j < outputs; ++j) {
    auto row = std::clamp<std::int64_t>(j * stride + shift, 0, n - 1);
    int owner = 0;
    for (std::int64_t start = 0; owner < static_cast<int>(shards.size()); ++owner) {
      if (row < start + shards[static_cast<std::size_t>(owner)]) break;
      start += shards[static_cast<std::size_t>(owner)];
    }
    if (owner == c) {
      if (j0 < 0) j0 = j;
      j1 = j + 1;
    }
  }
  return j0 < 0 ? std::pair<std::int64_t, std::int64_t>{0, 0} : std::pair{j0, j1};
}

/// The coordinate of mesh rank q in `group`.
inline int coordinate_of(const es::Mesh& mesh, const std::string& group, int q) {
  return group.empty() ? 0 : mesh.shape().coordinate(mesh.shape().group(group), mesh.coordinates_of(q));
}

inline bool near(const at::Tensor& a, const at::Tensor& b, double tol = 1e-10) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && at::allclose(a, b, tol, tol);
}

/// Checks a distributed op on this rank's shard against the references of every rank.
/// `ref(X, params, q)` is mesh rank q's expected output, computed from the full X with torch ops;
/// `params` are whole tensors every rank holds (a weight, a bias), whose gradients are checked too.
using Params = std::vector<at::Tensor>;
inline void check_op(const es::Mesh& mesh, const at::Tensor& X, const Sharding& in,
                     const std::function<at::Tensor(const at::Tensor&, const Params&)>& op,
                     const std::function<at::Tensor(const at::Tensor&, const Params&, int)>& ref,
                     const Params& params = {}, std::uint64_t seed = 99, double tol = 1e-10) {
  const int me = mesh.rank();
  auto leaves = [&] {
    Params p;
    for (const auto& t : params) p.push_back(t.detach().clone().requires_grad_(true));
    return p;
  };
  auto x = in.block(X, mesh, me).contiguous().detach().requires_grad_(true);
  const auto mine = leaves();
  auto y = op(x, mine);
  auto Xg = X.detach().requires_grad_(true);
  const auto theirs = leaves();
  at::Tensor loss = at::zeros({}, X.options());
  at::Tensor G_me;
  for (int q : in.replicas(mesh)) {
    const auto r = ref(Xg, theirs, q);
    const auto G = full(r.sizes().vec(), seed + static_cast<std::uint64_t>(q), X.scalar_type());
    loss = loss + (r * G).sum();
    if (q == me) {
      G_me = G;
      CHECK(near(y.detach(), r.detach(), tol));
    }
  }
  REQUIRE(G_me.defined());
  y.backward(G_me);
  loss.backward();
  CHECK(near(x.grad(), in.block(Xg.grad(), mesh, me), tol));
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO("gradient of parameter " << i);
    CHECK(near(mine[i].grad(), theirs[i].grad(), tol));
  }
}

/// check_op for an op of the tensor alone.
inline void check_op(const es::Mesh& mesh, const at::Tensor& X, const Sharding& in,
                     const std::function<at::Tensor(const at::Tensor&)>& op,
                     const std::function<at::Tensor(const at::Tensor&, int)>& ref, std::uint64_t seed = 99,
                     double tol = 1e-10) {
  check_op(
      mesh, X, in, [&](const at::Tensor& x, const Params&) { return op(x); },
      [&](const at::Tensor& Xf, const Params&, int q) { return ref(Xf, q); }, {}, seed, tol);
}

inline void check_cost(const es::StepCost& a, const es::StepCost& b) {
  CHECK(a.bytes_sent == b.bytes_sent);
  CHECK(a.bytes_received == b.bytes_received);
  CHECK(a.collectives == b.collectives);
  CHECK(a.peak_bytes == b.peak_bytes);
}

/// es::last_plan() (after the call) is what explain said.
inline void check_same(const es::Plan& ran, const es::Plan& explained) {
  CHECK(ran.notation == explained.notation);
  REQUIRE(ran.steps.size() == explained.steps.size());
  for (std::size_t i = 0; i < ran.steps.size(); ++i) {
    const auto& a = ran.steps[i];
    const auto& b = explained.steps[i];
    INFO("step " << i << ": " << a.name);
    CHECK(a.name == b.name);
    CHECK(a.group == b.group);
    CHECK(a.axis == b.axis);
    CHECK(a.before == b.before);
    CHECK(a.after == b.after);
    CHECK(a.operand == b.operand);
    check_cost(a.forward, b.forward);
    check_cost(a.backward, b.backward);
  }
}

/// Every rank must throw es::Error containing `fragment`, with the same message everywhere.
inline void expect_same_error(const std::function<void()>& f, const std::string& fragment) {
  std::string message;
  int threw = 0;
  try {
    f();
  } catch (const es::Error& e) {
    threw = 1;
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("not an es::Error: ") + e.what();
  }
  INFO("rank " << es::testing::world().rank << ": " << message);
  CHECK(threw == 1);
  CHECK_THAT(message, Catch::Contains(fragment));
  std::uint64_t h = std::hash<std::string>{}(message), lo = 0, hi = 0;
  int all = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&threw, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  CHECK(lo == hi);
  CHECK(all == 1);
}

inline int faulty_rank() { return es::testing::world().size > 1 ? 1 : 0; }

/// The mesh ranks a prepared call exchanging one row on every axis (periodic) reports a fault on
/// when rank `f` passes the wrong operands: f, then, axis by axis in order, every rank that
/// receives rows from a rank already faulty (its neighbours along that axis's group: on both sides,
/// or with `before_only` the one before, as a roll by +1 fetches).
inline std::set<int> faulted_ranks(const es::Mesh& mesh, const std::vector<std::string>& groups, int f,
                                   bool before_only = false) {
  std::set<int> faulty{f};
  for (const auto& g : groups) {
    auto next = faulty;
    for (int q = 0; q < mesh.size(); ++q)
      for (int p : faulty) {
        bool same_line = true;  // p and q differ at most in g's coordinate
        for (const auto& other : groups)
          if (other != g) same_line = same_line && coordinate_of(mesh, other, p) == coordinate_of(mesh, other, q);
        const int n = mesh.size(g), d = (coordinate_of(mesh, g, q) - coordinate_of(mesh, g, p) + n) % n;
        if (same_line && (d == 1 || (!before_only && d == n - 1))) next.insert(q);
      }
    faulty = next;
  }
  return faulty;
}

/// A prepared call on every rank, rank faulty_rank() making each call of `bad` in turn (named by
/// the operand it gets wrong): that rank raises, the ranks in `faulted` raise as its peers, the
/// others return `expected` (no rank waits for a collective), and the next `good` call is whole
/// everywhere.
inline void check_prepared_faults(const es::Mesh& mesh, const std::set<int>& faulted,
                                  const std::function<at::Tensor()>& good,
                                  const std::vector<std::pair<std::string, std::function<at::Tensor()>>>& bad,
                                  const at::Tensor& expected) {
  const int f = faulty_rank();
  for (const auto& [operand, call] : bad) {
    std::string message;
    try {
      const auto y = mesh.rank() == f ? call() : good();
      CHECK(near(y, expected));
    } catch (const es::Error& e) {
      message = e.what();
    }
    INFO("rank " << mesh.rank() << " (faulty rank " << f << ", wrong " << operand << "): " << message);
    if (mesh.rank() == f)
      CHECK_THAT(message, Catch::Contains("this rank's " + operand + " is") && Catch::Contains("prepared for"));
    else if (faulted.count(mesh.rank()))
      CHECK_THAT(message, Catch::Contains("a rank this one exchanges rows with"));
    else
      CHECK(message.empty());
    CHECK(near(good(), expected));
  }
}

/// The layout of the prepared calls' fault tests: h split over dp, and w over sp on a 2 x W/2 mesh
/// (from 4 ranks on, so that faults spread along two axes), else whole; X a (2W + 3, 2W + 1) field
/// drawn from `seed`, x this rank's block of it.
struct FaultLayout {
  const es::Mesh& mesh;
  std::string h, w;                   ///< "h/dp", "w/sp" or "w"
  std::vector<std::string> groups;    ///< the groups splitting h and w, in order
  std::vector<std::string> sharding;  ///< of (h, w)
  at::Tensor X, x;
};
inline FaultLayout fault_layout(std::uint64_t seed) {
  const int W = es::testing::world().size;
  const bool two = W % 2 == 0 && W > 2;
  FaultLayout L{two ? mesh_of({2, W / 2}) : mesh_of({W}), "h/dp", two ? "w/sp" : "w",
                two ? std::vector<std::string>{"dp", "sp"} : std::vector<std::string>{"dp"},
                {"dp", two ? "sp" : ""}, full({2 * W + 3, 2 * W + 1}, seed), {}};
  L.x = Sharding{L.sharding}.block(L.X, L.mesh, L.mesh.rank()).contiguous();
  return L;
}

/// check_prepared_faults for an op of the tensor alone, given `x` on good calls and each of `bad`
/// on the faulty rank's.
inline void check_prepared_faults(const es::Mesh& mesh, const std::set<int>& faulted,
                                  const std::function<at::Tensor(const at::Tensor&)>& op, const at::Tensor& x,
                                  const at::Tensor& expected, const std::vector<at::Tensor>& bad) {
  std::vector<std::pair<std::string, std::function<at::Tensor()>>> calls;
  for (const auto& b : bad) calls.emplace_back("tensor", [&op, b] { return op(b); });
  check_prepared_faults(mesh, faulted, [&] { return op(x); }, calls, expected);
}

}  // namespace stencil_test
