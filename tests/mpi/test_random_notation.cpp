// Seeded randomized distributed tests of the notation: random unary and binary notations (uneven
// and empty shards, compound groups spelled in any order, partial inputs, contractions with and
// without output partials, an ellipsis), on random mesh shapes of the world, in several dtypes,
// with and without `shapes` metadata. Every rank draws the same cases from one seed; each case's
// output and input gradients must equal the single-process computation (conventions of
// test_unary.cpp and test_binary.cpp: one full upstream gradient G, each rank's slice of it), or
// every rank must raise the same es::Error (a pattern the planner refuses) -- and at least half of
// the cases must run.
//
// A failing case prints a one-line reproducer:
//   reproduce: EINSHARD_RANDOM_SEED=<s> EINSHARD_RANDOM_CASE=<i> mpiexec -n <W> <exe> '[random]'
// EINSHARD_RANDOM_CASES sets the number of cases per test (default 60).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "random_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace test_random_notation {

namespace es = einshard;
namespace rt = einshard::testing::random;

namespace {

using I64 = std::vector<std::int64_t>;
using Strings = std::vector<std::string>;

const char* const axis_pool[] = {"a", "b", "c", "d", "e"};

/// One operand or output: its axes (names) and the group sharding each ("" whole), as written.
struct Operand {
  Strings axes;
  Strings groups;
  std::string partial;  // as written, "" none
};

/// Shard sizes of every (group, axis) of a case: the split rule, or (when the case gives `shapes`)
/// a random composition of the extent, empty parts included.
class ShardTable {
 public:
  void choose(rt::Rng& rng, const es::Mesh& mesh, const std::string& axis, const std::string& group,
              std::int64_t extent, bool given) {
    const auto key = std::pair{mesh.shape().canonical(group), axis};
    if (sizes_.contains(key)) return;
    const auto parts = mesh.size(group);
    I64 s = es::compute_split_shapes(extent, parts);
    if (given) {
      I64 cuts{0, extent};
      for (int k = 1; k < parts; ++k) cuts.push_back(std::uniform_int_distribution<std::int64_t>(0, extent)(rng));
      std::sort(cuts.begin(), cuts.end());
      for (int k = 0; k < parts; ++k) s[static_cast<std::size_t>(k)] = cuts[static_cast<std::size_t>(k) + 1] - cuts[static_cast<std::size_t>(k)];
      given_ = true;
    }
    sizes_[key] = s;
  }
  [[nodiscard]] const I64& sizes(const es::Mesh& mesh, const std::string& axis, const std::string& group) const {
    return sizes_.at({mesh.shape().canonical(group), axis});
  }
  /// The `shapes` option: a list per (mesh group, axis), or none for the split rule.
  [[nodiscard]] es::Shapes shapes() const {
    if (!given_) return {};
    std::map<std::string, std::map<std::string, I64, std::less<>>, std::less<>> by_group;
    for (const auto& [key, s] : sizes_) by_group[key.first][key.second] = s;
    std::map<std::string, es::DimShapes, std::less<>> dims;
    for (auto& [g, axes] : by_group) dims.emplace(g, es::DimShapes(std::move(axes)));
    return es::Shapes(std::move(dims));
  }
  [[nodiscard]] std::string str() const {
    std::string out = given_ ? "shapes" : "split rule";
    for (const auto& [key, s] : sizes_) {
      out += " " + key.second + "/" + key.first + "=[";
      for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
      out += "]";
    }
    return out;
  }

 private:
  std::map<std::pair<std::string, std::string>, I64> sizes_;
  bool given_ = false;
};

std::string describe(const std::string& notation, const es::Mesh& mesh, at::ScalarType dtype,
                     const ShardTable& table) {
  std::string m;
  for (int s : mesh.sizes()) m += (m.empty() ? "" : ",") + std::to_string(s);
  return "'" + notation + "' on mesh (" + m + "), " + std::string(c10::toString(dtype)) + ", " + table.str();
}

std::string spec(const Operand& o, bool ellipsis) {
  std::string s = ellipsis ? "..." : "";
  for (std::size_t i = 0; i < o.axes.size(); ++i) {
    if (!s.empty()) s += ' ';
    s += o.axes[i];
    if (!o.groups[i].empty()) s += "/" + o.groups[i];
  }
  if (!o.partial.empty()) s += " // " + o.partial;
  return s;
}

/// Random groups for `axes` over `mesh`, no mesh dimension used twice in one operand.
Strings random_groups(rt::Rng& rng, const es::Mesh& mesh, std::size_t n, std::vector<bool>& used) {
  Strings out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(rt::chance(rng, 0.6) ? rt::random_group(rng, mesh, used) : "");
  return out;
}

/// This rank's block of `full` whose dimension d holds axis axes[d] sharded over groups[d].
at::Tensor block(const at::Tensor& full, const Strings& axes, const Strings& groups, const es::Mesh& mesh,
                 const ShardTable& table) {
  auto b = full;
  const auto lead = full.dim() - static_cast<std::int64_t>(axes.size());  // the ellipsis dimensions
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (groups[i].empty()) continue;
    const auto d = lead + static_cast<std::int64_t>(i);
    const auto& sizes = table.sizes(mesh, axes[i], groups[i]);
    const auto c = static_cast<std::size_t>(mesh.coordinate(groups[i]));
    const auto start = std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(c), std::int64_t{0});
    b = b.narrow(d, start, sizes[c]);
  }
  return b.contiguous();
}

at::Tensor draw(const I64& shape, at::ScalarType dtype, std::uint64_t seed) {
  at::manual_seed(seed);
  if (dtype == at::kLong) return at::randint(-4, 5, shape, at::kLong);
  return at::randn(shape, at::TensorOptions().dtype(dtype));
}

bool close(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) return false;
  if (want.scalar_type() == at::kLong) return at::equal(got, want);
  const double tol = want.scalar_type() == at::kFloat ? 1e-5 : 1e-11;
  return at::allclose(got, want, tol, tol);
}

/// Sums `t` over the ranks of `group` (the value an output partial over it stands for).
at::Tensor sum_over(const at::Tensor& t, const es::Mesh& mesh, const std::string& group) {
  auto s = t.detach().contiguous().clone();
  const auto type = s.scalar_type() == at::kFloat ? MPI_FLOAT : s.scalar_type() == at::kDouble ? MPI_DOUBLE
                                                                                                : MPI_C_DOUBLE_COMPLEX;
  MPI_Allreduce(MPI_IN_PLACE, s.data_ptr(), static_cast<int>(s.numel()), type, MPI_SUM, mesh.comm(group));
  return s;
}

}  // namespace

TEST_CASE("random unary notations: values and gradients equal one process", "[mpi][random]") {
  const auto W = es::testing::world().size;
  rt::Tally tally("random unary notations");
  for (const auto& c : rt::cases()) {
    auto rng = c.rng();
    const auto& mesh = rt::random_mesh(rng, W);
    const auto naxes = rt::uniform(rng, 1, 3);
    Operand in, out;
    I64 extents;
    for (int i = 0; i < naxes; ++i) {
      in.axes.emplace_back(axis_pool[i]);
      extents.push_back(rt::random_extent(rng));
    }
    std::vector<bool> used_in(static_cast<std::size_t>(mesh.ndim()), false), used_out = used_in;
    in.groups = random_groups(rng, mesh, in.axes.size(), used_in);
    if (rt::chance(rng, 0.3)) in.partial = rt::random_group(rng, mesh, used_in);
    std::vector<int> perm(static_cast<std::size_t>(naxes));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int p : perm) out.axes.push_back(in.axes[static_cast<std::size_t>(p)]);
    out.groups = random_groups(rng, mesh, out.axes.size(), used_out);
    const bool ellipsis = rt::chance(rng, 0.25);
    I64 lead = ellipsis ? I64(static_cast<std::size_t>(rt::uniform(rng, 0, 2)), 2) : I64{};
    const auto dtype = rt::random_dtype(rng, /*integers=*/true);
    ShardTable table;
    std::map<std::string, std::int64_t> extent_of;
    for (int i = 0; i < naxes; ++i) extent_of[in.axes[static_cast<std::size_t>(i)]] = extents[static_cast<std::size_t>(i)];
    const bool given = rt::chance(rng, 0.4);
    for (const auto* o : {&in, &out})
      for (std::size_t i = 0; i < o->axes.size(); ++i)
        if (!o->groups[i].empty()) table.choose(rng, mesh, o->axes[i], o->groups[i], extent_of[o->axes[i]], given);
    const std::string notation = spec(in, ellipsis) + " -> " + spec(out, ellipsis);
    INFO(c.reproducer(W, describe(notation, mesh, dtype, table)));

    I64 shape = lead;
    for (auto e : extents) shape.push_back(e);
    const auto X = draw(shape, dtype, c.seed);
    auto x = block(X, in.axes, in.groups, mesh, table);
    if (!in.partial.empty()) {  // pieces that sum to the block over the partial group
      const auto q = mesh.coordinate(in.partial), n = mesh.size(in.partial);
      x = dtype == at::kLong ? (q == 0 ? x : at::zeros_like(x)) : x * (2.0 * (q + 1) / (n * (n + 1.0)));
    }
    const bool grads = dtype == at::kDouble || dtype == at::kFloat;
    if (grads) x.requires_grad_(true);
    at::Tensor y;
    std::string error;
    try {
      y = es::einshard(notation, {x}, {.mesh = mesh, .shapes = table.shapes()});
    } catch (const es::Error& e) {
      error = e.what();
    }
    if (!tally.agreed(error)) continue;

    std::vector<std::int64_t> dims(lead.size());
    std::iota(dims.begin(), dims.end(), 0);
    for (int p : perm) dims.push_back(static_cast<std::int64_t>(lead.size()) + p);
    const auto want = block(X.permute(dims).contiguous(), out.axes, out.groups, mesh, table);
    INFO("output: got " << y.sizes() << ", want " << want.sizes());
    CHECK(close(y, want));
    if (!grads) continue;
    I64 out_shape = lead;
    for (int p : perm) out_shape.push_back(extents[static_cast<std::size_t>(p)]);
    const auto G = draw(out_shape, dtype, c.seed + 1);
    (y * block(G, out.axes, out.groups, mesh, table)).sum().backward();
    std::vector<std::int64_t> back(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) back[static_cast<std::size_t>(dims[i])] = static_cast<std::int64_t>(i);
    REQUIRE(x.grad().defined());
    CHECK(close(x.grad(), block(G.permute(back).contiguous(), in.axes, in.groups, mesh, table)));
  }
  tally.require_enough();
}

TEST_CASE("random contractions: values and gradients equal one process", "[mpi][random]") {
  const auto W = es::testing::world().size;
  rt::Tally tally("random contractions");
  for (const auto& c : rt::cases(1000)) {
    auto rng = c.rng();
    const auto& mesh = rt::random_mesh(rng, W);
    // Roles: 0 kept from x, 1 kept from y, 2 batch (both, kept), 3 contracted (both, summed).
    const auto naxes = rt::uniform(rng, 2, 4);
    Operand x, y, z;
    std::map<std::string, std::int64_t> extent_of;
    std::vector<int> roles;
    for (int i = 0; i < naxes; ++i) {
      const int role = i == 0 ? 0 : i == 1 ? 3 : rt::uniform(rng, 0, 3);
      roles.push_back(role);
      const std::string a = axis_pool[i];
      extent_of[a] = rt::random_extent(rng);
      if (role != 1) x.axes.push_back(a);
      if (role != 0) y.axes.push_back(a);
      if (role != 3) z.axes.push_back(a);
    }
    std::shuffle(x.axes.begin(), x.axes.end(), rng);
    std::shuffle(y.axes.begin(), y.axes.end(), rng);
    std::shuffle(z.axes.begin(), z.axes.end(), rng);
    std::vector<bool> ux(static_cast<std::size_t>(mesh.ndim()), false), uy = ux, uz = ux;
    x.groups = random_groups(rng, mesh, x.axes.size(), ux);
    y.groups = random_groups(rng, mesh, y.axes.size(), uy);
    z.groups = random_groups(rng, mesh, z.axes.size(), uz);
    // An output partial where a contracted axis is sharded alike in both inputs (the sum it leaves).
    for (int i = 0; i < naxes; ++i) {
      if (roles[static_cast<std::size_t>(i)] != 3 || !z.partial.empty()) continue;
      const auto gx = x.groups[static_cast<std::size_t>(std::find(x.axes.begin(), x.axes.end(), axis_pool[i]) - x.axes.begin())];
      const auto gy = y.groups[static_cast<std::size_t>(std::find(y.axes.begin(), y.axes.end(), axis_pool[i]) - y.axes.begin())];
      bool clash = false;  // the output shards over a dimension of the group: no partial over it
      if (!gx.empty())
        for (int d : mesh.components(gx)) clash = clash || uz[static_cast<std::size_t>(d)];
      if (!gx.empty() && gx == gy && !clash && rt::chance(rng, 0.5)) z.partial = gx;
    }
    const auto dtype = rt::random_dtype(rng, /*integers=*/false);
    ShardTable table;
    const bool given = rt::chance(rng, 0.4);
    for (const auto* o : {&x, &y, &z})
      for (std::size_t i = 0; i < o->axes.size(); ++i)
        if (!o->groups[i].empty()) table.choose(rng, mesh, o->axes[i], o->groups[i], extent_of[o->axes[i]], given);
    const std::string notation = spec(x, false) + ", " + spec(y, false) + " -> " + spec(z, false);
    INFO(c.reproducer(W, describe(notation, mesh, dtype, table)));

    auto shape_of = [&](const Operand& o) {
      I64 s;
      for (const auto& a : o.axes) s.push_back(extent_of[a]);
      return s;
    };
    auto letters = [](const Operand& o) {
      std::string s;
      for (const auto& a : o.axes) s += a;
      return s;
    };
    const auto X = draw(shape_of(x), dtype, c.seed), Y = draw(shape_of(y), dtype, c.seed + 1);
    const auto Xr = X.clone().requires_grad_(true), Yr = Y.clone().requires_grad_(true);
    const auto Z = at::einsum(letters(x) + "," + letters(y) + "->" + letters(z), {Xr, Yr});
    const bool grads = dtype != at::kComplexDouble;
    const auto G = draw(shape_of(z), dtype, c.seed + 2);
    if (grads) (Z * G).sum().backward();

    auto xl = block(X, x.axes, x.groups, mesh, table), yl = block(Y, y.axes, y.groups, mesh, table);
    if (grads) {
      xl.requires_grad_(true);
      yl.requires_grad_(true);
    }
    at::Tensor zl;
    std::string error;
    try {
      zl = es::einshard(notation, {xl, yl}, {.mesh = mesh, .shapes = table.shapes()});
    } catch (const es::Error& e) {
      error = e.what();
    }
    if (!tally.agreed(error)) continue;
    const auto want = block(Z.detach(), z.axes, z.groups, mesh, table);
    INFO("output: got " << zl.sizes() << ", want " << want.sizes());
    CHECK(close(z.partial.empty() ? zl.detach() : sum_over(zl, mesh, z.partial), want));
    if (!grads) continue;
    (zl * block(G, z.axes, z.groups, mesh, table)).sum().backward();
    REQUIRE(xl.grad().defined());
    REQUIRE(yl.grad().defined());
    CHECK(close(xl.grad(), block(Xr.grad(), x.axes, x.groups, mesh, table)));
    CHECK(close(yl.grad(), block(Yr.grad(), y.axes, y.groups, mesh, table)));
  }
  tally.require_enough();
}

}  // namespace test_random_notation
