// Distributed binary einshard (contractions of two operands) against the single-process reference,
// at any world size (ctest runs this binary at 1, 2, 3, 4 and 8 ranks), for every pattern of
// reference §2.4 and the cases the original could not do (crossed contractions on unequal mesh
// sizes, output partials a binary op introduces, a sharded axis summed away without an output
// partial, partial inputs).
//
// Method (the original's, reference §5.1): every rank draws the same full float64 tensors from one
// seed and takes its input shards with the split rule (or the shapes metadata); the expected output
// shard is sliced from the single-process result by the output layout.
//
// Gradient convention: one full random upstream gradient G; each rank's upstream gradient is its
// slice of G by the output layout. An output partial over g (`// g`) stands for the sum over g of
// the ranks' outputs; its upstream gradient is G's slice on every rank of g, so every input's
// gradient is the single-process gradient of <sum_g outputs, G>. An input's expected gradient is its
// slice (by its layout) of the single-process gradient, on every replica; a partial input's pieces
// each get the whole slice.
//
// Convention for partials nothing sums (`a b -> a b // tp`, and a binary output partial that no
// sharded contraction produces, `a k, k b -> a b // tp`): Megatron's f, identity forward and
// all-reduce backward. Each rank of tp holds the whole value, so the "sum over tp" is |tp| times
// it, and the gradient, the all-reduce of G over tp, is |tp| times the single-process gradient:
// the two agree. It marks a replicated tensor whose downstream gradients are partial; it does not
// preserve the value under a later `// tp ->` all-reduce.
//
// Plans: exact step lists (operand, step, group, axis) are asserted where the test names them
// (mostly at 8 ranks); everywhere, every rank runs the same plan, `explain` predicts it, and the plan
// that ran is the cheapest candidate. Set EINSHARD_TEST_PRINT_PLANS=1 to print every plan (rank 0).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include "plan_steps.hpp"

namespace test_binary {

namespace es = einshard;

namespace {

using I64 = std::vector<std::int64_t>;
using Names = std::vector<std::string>;
using Extents = std::map<std::string, std::int64_t>;
/// Split metadata by (axis, group), for slicing; the same as the `.shapes` option passed along.
using ShapeMap = std::map<std::pair<std::string, std::string>, I64>;

using namespace einshard::testing;  // step names, tag, x, y, z

Names tagged(const es::Plan& p) {
  Names out;
  for (const auto& s : p.steps) {
    if (s.name == EINSUM) {
      out.push_back(EINSUM);
      continue;
    }
    const auto who = s.operand < 0 ? std::string("z")
                     : s.operand < 2 ? std::string(s.operand == 0 ? "x" : "y")
                                     : "w" + std::to_string(s.operand);  // later operands
    out.push_back(tag(who, s.name, s.group, s.axis));
  }
  return out;
}

std::string joined(const Names& n) {
  std::string s;
  for (const auto& e : n) s += (s.empty() ? "" : ", ") + e;
  return "[" + s + "]";
}

// ---- meshes ------------------------------------------------------------------------------------

struct MeshKey {
  std::vector<int> sizes;
  Names names;
  auto operator<=>(const MeshKey&) const = default;
};

/// Meshes are cached: building one (and its groups) is collective, and every rank asks for the same
/// ones in the same order.
const es::Mesh& mesh_of(const std::vector<int>& sizes, const Names& names) {
  static std::map<MeshKey, es::Mesh> cache;
  const MeshKey key{sizes, names};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  return cache.emplace(key, es::Mesh(MPI_COMM_WORLD, sizes, names)).first->second;
}

std::string label(const es::Mesh& m) {
  std::string s = "(";
  for (std::size_t i = 0; i < m.sizes().size(); ++i)
    s += (i ? "," : "") + m.names()[i] + ":" + std::to_string(m.sizes()[i]);
  return s + ")";
}

/// The shapes of a mesh with `dims` dimensions tested at world size W: (W); at 8 ranks (2,4),
/// (4,2) and (2,2,2); smaller worlds get what fits, with trivial factors: (1,W), (W,1), (2,2) at 4.
std::vector<std::vector<int>> mesh_shapes(int dims, int W) {
  if (dims == 1) return {{W}};
  if (dims == 2) {
    if (W == 8) return {{2, 4}, {4, 2}};
    if (W == 4) return {{2, 2}, {1, 4}, {4, 1}};
    if (W == 1) return {{1, 1}};
    return {{1, W}, {W, 1}};
  }
  if (W == 8) return {{2, 2, 2}};
  if (W == 4) return {{1, 2, 2}, {2, 2, 1}};
  if (W == 1) return {{1, 1, 1}};
  return {{1, 1, W}, {W, 1, 1}};
}

std::vector<const es::Mesh*> meshes(const Names& names) {
  std::vector<const es::Mesh*> out;
  for (const auto& s : mesh_shapes(static_cast<int>(names.size()), es::testing::world().size))
    out.push_back(&mesh_of(s, names));
  return out;
}

// ---- the notation, read independently of the library --------------------------------------------

struct Axis {
  std::string name, group;
};
struct TSpec {
  std::vector<Axis> axes;
  Names partials;
};
struct Formula {
  std::vector<TSpec> inputs;
  TSpec output;
};

std::string trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

/// `a/dp b ... // (tp,sp)`; `...` stands for `ellipsis` whole axes named _0, _1, ...
TSpec parse_spec(const std::string& text, int ellipsis) {
  TSpec s;
  const auto p = text.find("//");
  std::istringstream in(text.substr(0, p));
  std::string tok;
  while (in >> tok) {
    if (tok == "...") {
      for (int i = 0; i < ellipsis; ++i) s.axes.push_back({"_" + std::to_string(i), ""});
      continue;
    }
    const auto slash = tok.find('/');
    s.axes.push_back({tok.substr(0, slash), slash == std::string::npos ? "" : tok.substr(slash + 1)});
  }
  if (p != std::string::npos) {
    std::string rest;
    for (char c : text.substr(p + 2))
      if (c != ' ' && c != '(' && c != ')') rest += c;
    std::istringstream parts(rest);
    std::string g;
    while (std::getline(parts, g, ',')) s.partials.push_back(g);
  }
  return s;
}

Formula parse_formula(const std::string& notation, int ellipsis) {
  Formula f;
  const auto arrow = notation.find("->");
  std::istringstream ins(notation.substr(0, arrow));
  std::string part;
  while (std::getline(ins, part, ',')) f.inputs.push_back(parse_spec(trim(part), ellipsis));
  f.output = parse_spec(trim(notation.substr(arrow + 2)), ellipsis);
  return f;
}

/// The torch::einsum equation of the formula over full tensors.
std::string equation(const Formula& f) {
  std::map<std::string, char> letters;
  auto letter = [&](const std::string& n) {
    if (!letters.contains(n)) letters[n] = static_cast<char>('a' + letters.size());
    return letters[n];
  };
  std::string eq;
  for (std::size_t i = 0; i < f.inputs.size(); ++i) {
    if (i) eq += ',';
    for (const auto& a : f.inputs[i].axes) eq += letter(a.name);
  }
  eq += "->";
  for (const auto& a : f.output.axes) eq += letter(a.name);
  return eq;
}

I64 shape_of(const TSpec& s, const Extents& e) {
  I64 out;
  for (const auto& a : s.axes) out.push_back(e.at(a.name));
  return out;
}

I64 split_of(const std::string& axis, const std::string& group, std::int64_t n, const es::Mesh& mesh,
             const ShapeMap& shapes) {
  if (auto it = shapes.find({axis, group}); it != shapes.end()) return it->second;
  return es::compute_split_shapes(n, mesh.size(group));
}

/// This rank's block of a full tensor laid out as `s` (partials ignored).
at::Tensor shard(const at::Tensor& full, const TSpec& s, const es::Mesh& mesh, const ShapeMap& shapes) {
  at::Tensor t = full;
  for (std::size_t d = 0; d < s.axes.size(); ++d) {
    const auto& [name, group] = s.axes[d];
    if (group.empty()) continue;
    const auto sizes = split_of(name, group, full.size(static_cast<std::int64_t>(d)), mesh, shapes);
    const auto c = static_cast<std::size_t>(mesh.coordinate(group));
    const auto offset = std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(c), std::int64_t{0});
    t = t.narrow(static_cast<std::int64_t>(d), offset, sizes[c]);
  }
  return t.contiguous().clone();
}

double group_size(const Names& groups, const es::Mesh& mesh) {
  double n = 1;
  for (const auto& g : groups) n *= mesh.size(g);
  return n;
}

/// The sum over each group in turn (raw MPI, independent of the library's collectives).
at::Tensor sum_over(const at::Tensor& t, const Names& groups, const es::Mesh& mesh) {
  auto s = t.detach().to(at::kDouble).contiguous().clone();
  for (const auto& g : groups)
    MPI_Allreduce(MPI_IN_PLACE, s.numel() ? s.data_ptr<double>() : nullptr, static_cast<int>(s.numel()),
                  MPI_DOUBLE, MPI_SUM, mesh.comm(g));
  return s;
}

bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

/// True when every rank passes the same string.
bool same_everywhere(const std::string& s) {
  const auto h = static_cast<unsigned long long>(std::hash<std::string>{}(s));
  unsigned long long mine[2] = {h, ~h}, most[2] = {0, 0};  // max of h and of ~h (= ~min of h)
  MPI_Allreduce(mine, most, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return most[0] == ~most[1];
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a - b).abs().max().item<double>();
}

bool close(const at::Tensor& got, const at::Tensor& want) {
  return got.defined() && got.sizes() == want.sizes() && got.scalar_type() == want.scalar_type() &&
         at::allclose(got, want, 1e-10, 1e-10);
}

bool print_plans() {
  static const bool on = [] {
    const char* v = std::getenv("EINSHARD_TEST_PRINT_PLANS");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}

// ---- the check -----------------------------------------------------------------------------------

struct Case {
  std::string notation;
  Extents extents;
  int ellipsis = 0;          ///< axes `...` stands for (named _0, _1, ... in `extents`)
  ShapeMap split{};          ///< split metadata, for slicing (pass the same as `shapes`)
  es::Shapes shapes{};
  std::optional<es::Policy> policy{};
};

struct Expect {
  std::optional<Names> steps{};  ///< the exact plan (see `tagged`), when given
  bool local = false;            ///< runs as a local einsum (no plan, no communication)
  /// Value of the output's partial sum, as a multiple of the product: 1 for partials a contraction
  /// produces; |g| for partials introduced by identity forward (see the file comment).
  double scale = 1;
};

std::string describe(const Case& c, const es::Mesh& mesh) {
  std::string s = "'" + c.notation + "' on " + label(mesh) + " with";
  for (const auto& [k, v] : c.extents) s += " " + k + "=" + std::to_string(v);
  return s;
}

/// Runs `c` on `mesh` and checks the output and every input gradient against the single-process
/// reference; returns the plan (tagged) that ran.
Names check(const es::Mesh& mesh, const Case& c, const Expect& e = {}) {
  const auto what = describe(c, mesh);
  INFO(what);
  const auto f = parse_formula(c.notation, c.ellipsis);
  const auto n = f.inputs.size();
  const auto eq = equation(f);
  const auto opt = at::TensorOptions().dtype(at::kDouble);

  // The single-process reference (the same draws on every rank).
  at::manual_seed(std::hash<std::string>{}(what) % 100000);
  std::vector<at::Tensor> full;
  for (const auto& s : f.inputs) full.push_back(at::randn(shape_of(s, c.extents), opt));
  const auto G = at::randn(shape_of(f.output, c.extents), opt);
  std::vector<at::Tensor> ref;
  for (const auto& t : full) ref.push_back(t.clone().requires_grad_(true));
  const auto ref_out = at::einsum(eq, ref);
  (ref_out * G).sum().backward();

  // This rank's pieces: a partial input's pieces sum to the full tensor.
  std::vector<at::Tensor> local;
  for (std::size_t i = 0; i < n; ++i)
    local.push_back((shard(full[i], f.inputs[i], mesh, c.split) / group_size(f.inputs[i].partials, mesh))
                        .requires_grad_(true));
  es::Options o{.mesh = mesh};
  o.shapes = c.shapes;
  o.policy = c.policy;

  bool ok = true;
  std::string error;
  at::Tensor out;
  es::Plan predicted, ran;
  try {
    predicted = es::explain(c.notation, local, o);
    out = es::einshard(c.notation, local, o);
    ran = es::last_plan();
  } catch (const std::exception& ex) {
    ok = false;
    error = ex.what();
  }
  INFO("error: " << error);
  REQUIRE(all_ranks(ok));  // the same on every rank, so every rank leaves here or none does

  const auto steps = tagged(ran);
  INFO("plan: " << joined(steps));
  if (print_plans() && es::testing::world().rank == 0)
    std::cout << "PLAN " << what << ": " << (e.local ? "[local]" : joined(steps)) << '\n';
  if (e.local) {
    CHECK(predicted.steps.empty());
  } else {
    CHECK(ran.notation == c.notation);
    CHECK(tagged(predicted) == steps);
    CHECK(same_everywhere(joined(steps)));
    REQUIRE_FALSE(ran.alternatives.empty());
    // One contraction: its candidates, cheapest first (more operands list every stage's).
    if (std::count(steps.begin(), steps.end(), EINSUM) == 1)
      for (const auto& a : ran.alternatives) CHECK(ran.alternatives.front().score <= a.score);
    if (e.steps) CHECK(steps == *e.steps);
  }

  // Forward: this rank's block (summed over the output's partial groups).
  const auto want = shard(ref_out.detach(), f.output, mesh, c.split) * e.scale;
  const auto got = sum_over(out, f.output.partials, mesh);
  INFO("max |output - reference| = " << max_abs_diff(got, want));
  CHECK(close(got, want));

  // Backward.
  try {
    (out * shard(G, f.output, mesh, c.split)).sum().backward();
  } catch (const std::exception& ex) {
    ok = false;
    error = ex.what();
  }
  REQUIRE(all_ranks(ok));
  for (std::size_t i = 0; i < n; ++i) {
    INFO("gradient of input " << i + 1);
    REQUIRE(local[i].grad().defined());
    const auto g = shard(ref[i].grad(), f.inputs[i], mesh, c.split) * e.scale;
    INFO("max |grad - reference slice| = " << max_abs_diff(local[i].grad(), g));
    CHECK(close(local[i].grad(), g));
  }
  return steps;
}

/// `check` on every mesh of the kind `names` (see mesh_shapes), for each extent set; the plans
/// keyed by "<mesh label> <set index>" are asserted.
void check_all(const Names& mesh_names, const std::string& notation, const std::vector<Extents>& sets,
               const std::map<std::string, Names>& plans = {}, Expect e = {}) {
  std::vector<std::string> labels, used;
  for (const auto* mesh : meshes(mesh_names)) {
    labels.push_back(label(*mesh));
    for (std::size_t i = 0; i < sets.size(); ++i) {
      const auto key = label(*mesh) + " " + std::to_string(i);
      Expect ei = e;
      if (auto it = plans.find(key); it != plans.end()) {
        ei.steps = it->second;
        used.push_back(key);
      }
      check(*mesh, {notation, sets[i]}, ei);
    }
  }
  // Every plan given for a mesh of this world size was asserted (no mistyped keys).
  for (const auto& [key, steps] : plans)
    if (std::find(labels.begin(), labels.end(), key.substr(0, key.rfind(' '))) != labels.end()) {
      INFO("plan key " << key);
      CHECK(std::find(used.begin(), used.end(), key) != used.end());
    }
}

const Names TP{"tp"}, DP{"dp"}, DPSP{"dp", "sp"}, DPTP{"dp", "tp"}, DPSPTP{"dp", "sp", "tp"},
    DPSP12{"dp", "sp1", "sp2"};

}  // namespace

// ---- §2.4, one row after the other --------------------------------------------------------------

TEST_CASE("binary: column-parallel linear b n c, h/tp c -> b n h/tp", "[mpi][binary]") {
  // The original ran this as a local einsum, leaving x's gradient partial over tp (gotcha 3.3.1);
  // here x is marked partial (Megatron f), so its gradient is all-reduced over tp in backward.
  const Names plan{x(ADD_P, "tp"), EINSUM};
  check_all(TP, "b n c, h/tp c -> b n h/tp",
            {{{"b", 2}, {"n", 3}, {"c", 4}, {"h", 16}}, {{"b", 2}, {"n", 3}, {"c", 4}, {"h", 17}},
             {{"b", 1}, {"n", 2}, {"c", 3}, {"h", 3}}},
            {{"(tp:8) 0", plan}, {"(tp:8) 1", plan}, {"(tp:8) 2", plan}, {"(tp:4) 0", plan}});
}

TEST_CASE("binary: row-parallel linear, reduced and kept partial", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"b", 2}, {"n", 3}, {"c", 16}, {"h", 4}},
                                  {{"b", 2}, {"n", 3}, {"c", 17}, {"h", 4}},
                                  {{"b", 1}, {"n", 2}, {"c", 3}, {"h", 2}}};
  const Names reduced{EINSUM, z(ALLREDUCE, "tp")};
  check_all(TP, "b n c/tp, h c/tp -> b n h", sets,
            {{"(tp:8) 0", reduced}, {"(tp:8) 1", reduced}, {"(tp:8) 2", reduced}});
  const Names kept{EINSUM};
  check_all(TP, "b n c/tp, h c/tp -> b n h // tp", sets,
            {{"(tp:8) 0", kept}, {"(tp:8) 1", kept}, {"(tp:8) 2", kept}, {"(tp:3) 1", kept}});
}

TEST_CASE("binary: sharded contraction with a sharded free axis a/sp b/dp, b/dp c -> a/sp c",
          "[mpi][binary]") {
  const Names plan{y(ADD_P, "sp"), EINSUM, z(ALLREDUCE, "dp")};
  check_all(DPSP, "a/sp b/dp, b/dp c -> a/sp c",
            {{{"a", 8}, {"b", 8}, {"c", 3}}, {{"a", 9}, {"b", 5}, {"c", 3}}, {{"a", 3}, {"b", 1}, {"c", 2}}},
            {{"(dp:2,sp:4) 0", plan}, {"(dp:4,sp:2) 0", plan}, {"(dp:2,sp:4) 1", plan}});
}

TEST_CASE("binary: multi-axis contraction, reduced and kept as partials", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"a", 8}, {"b", 8}, {"c", 3}, {"d", 5}},
                                  {{"a", 5}, {"b", 9}, {"c", 3}, {"d", 2}},
                                  {{"a", 1}, {"b", 3}, {"c", 2}, {"d", 2}}};
  // One all-reduce over the product group dp-sp where the original did two in sequence.
  const Names reduced{EINSUM, z(ALLREDUCE, "dp-sp")};
  check_all(DPSP, "a/dp b/sp c, a/dp b/sp d -> c d", sets,
            {{"(dp:2,sp:4) 0", reduced}, {"(dp:4,sp:2) 0", reduced}, {"(dp:2,sp:4) 2", reduced}});
  const Names kept{EINSUM};
  check_all(DPSP, "a/dp b/sp c, a/dp b/sp d -> c d // (dp,sp)", sets,
            {{"(dp:2,sp:4) 0", kept}, {"(dp:4,sp:2) 1", kept}});
  // One partial kept, the other reduced.
  check_all(DPSP, "a/dp b/sp c, a/dp b/sp d -> c d // dp", sets,
            {{"(dp:2,sp:4) 0", {EINSUM, z(ALLREDUCE, "sp")}}});
}

TEST_CASE("binary: a compound output partial equals the list of its dimensions", "[mpi][binary]") {
  // `// dp-sp` and `// (dp,sp)` both mean the sum over every rank of dp and sp: the contraction's
  // own partial sums are the output, nothing moves. (Partial groups were once compared as strings:
  // the planner all-reduced over dp-sp and added dp-sp back by identity forward, |dp|*|sp| times
  // the product.)
  const std::vector<Extents> sets{{{"a", 8}, {"b", 8}, {"c", 3}, {"d", 5}}, {{"a", 5}, {"b", 9}, {"c", 3}, {"d", 2}}};
  check_all(DPSP, "a/dp b/sp c, a/dp b/sp d -> c d // dp-sp", sets,
            {{"(dp:2,sp:4) 0", {EINSUM}}, {"(dp:4,sp:2) 0", {EINSUM}}});
  check_all(DPSP, "a k/dp-sp, k/dp-sp b -> a b // (dp,sp)", {{{"a", 3}, {"k", 8}, {"b", 2}}},
            {{"(dp:2,sp:4) 0", {EINSUM}}});
}

TEST_CASE("binary: shared sharded batch axes", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"b", 8}, {"a", 3}, {"c", 8}, {"d", 2}},
                                  {{"b", 5}, {"a", 2}, {"c", 9}, {"d", 3}},
                                  {{"b", 1}, {"a", 2}, {"c", 3}, {"d", 2}}};
  // Every sharded axis carried unchanged: a local einsum, no plan, no communication.
  check_all(DPSP, "b/dp a c, b/dp c d -> b/dp a d", sets, {}, {.local = true});
  // The replicated operand is split (backward all-gathers its gradient).
  check_all(DPSP, "b/dp a c, b c d -> b/dp a d", sets,
            {{"(dp:2,sp:4) 0", {y(SPLIT, "dp", "b"), EINSUM}}, {"(dp:4,sp:2) 1", {y(SPLIT, "dp", "b"), EINSUM}}});
  // With a sharded contraction on the other dimension.
  check_all(DPSP, "b/dp a c/sp, b/dp c/sp d -> b/dp a d", sets,
            {{"(dp:2,sp:4) 0", {EINSUM, z(ALLREDUCE, "sp")}}, {"(dp:4,sp:2) 0", {EINSUM, z(ALLREDUCE, "sp")}}});
}

TEST_CASE("binary: elementwise products", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"l", 16}, {"e", 3}}, {{"l", 17}, {"e", 2}}, {{"l", 3}, {"e", 2}}};
  check_all(TP, "l/tp e, l/tp e -> l/tp e", sets, {}, {.local = true});
  const Names split{y(SPLIT, "tp", "l"), EINSUM};
  check_all(TP, "l/tp e, l e -> l/tp e", sets, {{"(tp:8) 0", split}, {"(tp:8) 1", split}, {"(tp:8) 2", split}});
  check_all(TP, "l e, l/tp e -> l/tp e", sets, {{"(tp:8) 0", {x(SPLIT, "tp", "l"), EINSUM}}});
}

TEST_CASE("binary: gather or split a free axis", "[mpi][binary]") {
  check_all(TP, "l/tp e, e f -> l f",
            {{{"l", 16}, {"e", 4}, {"f", 8}}, {{"l", 17}, {"e", 3}, {"f", 2}}, {{"l", 3}, {"e", 2}, {"f", 2}}},
            {{"(tp:8) 0", {x(GATHER, "tp", "l"), EINSUM}}, {"(tp:8) 1", {x(GATHER, "tp", "l"), EINSUM}}});
  // Small: the whole product on every rank, then a slice (one collective, in backward). Wide:
  // the original's plan, x split and y marked partial.
  check_all(TP, "l e, e f -> l/tp f",
            {{{"l", 16}, {"e", 4}, {"f", 8}}, {{"l", 256}, {"e", 16}, {"f", 256}}, {{"l", 3}, {"e", 2}, {"f", 2}}},
            {{"(tp:8) 0", {EINSUM, z(SPLIT, "tp", "l")}}, {"(tp:8) 1", {x(SPLIT, "tp", "l"), y(ADD_P, "tp"), EINSUM}}});
}

TEST_CASE("binary: sequence-parallel MLP up l/tp e, e f/tp -> l f/tp", "[mpi][binary]") {
  const Names plan{x(GATHER_P, "tp", "l"), EINSUM};
  check_all(TP, "l/tp e, e f/tp -> l f/tp",
            {{{"l", 16}, {"e", 4}, {"f", 8}}, {{"l", 17}, {"e", 3}, {"f", 9}}, {{"l", 3}, {"e", 2}, {"f", 3}}},
            {{"(tp:8) 0", plan}, {"(tp:8) 1", plan}});
}

TEST_CASE("binary: contraction into a reduce-scattered output axis", "[mpi][binary]") {
  const Names plan{EINSUM, z(RS, "tp", "l")};
  // Even, uneven (17 on 8: [2,...,2,3]; native MPI_Reduce_scatter with counts) and empty shards.
  check_all(TP, "l f/tp, f/tp e -> l/tp e",
            {{{"l", 16}, {"e", 4}, {"f", 8}}, {{"l", 17}, {"e", 3}, {"f", 9}}, {{"l", 3}, {"e", 2}, {"f", 3}}},
            {{"(tp:8) 0", plan}, {"(tp:8) 1", plan}, {"(tp:8) 2", plan}, {"(tp:3) 1", plan}});
  // On a 2-D mesh, the other dimension replicated.
  check_all(DPSP, "l f/sp, f/sp e -> l/sp e",
            {{{"l", 8}, {"e", 3}, {"f", 8}}, {{"l", 7}, {"e", 2}, {"f", 5}}},
            {{"(dp:2,sp:4) 0", {EINSUM, z(RS, "sp", "l")}}});
}

TEST_CASE("binary: reduce-scatter with shapes metadata", "[mpi][binary]") {
  const auto w = es::testing::world();
  const auto& mesh = mesh_of({w.size}, TP);
  // Ragged shards chosen by the user: l gets [1, 2, ..., W], f gets [W, ..., 1].
  I64 L, F;
  for (int i = 0; i < w.size; ++i) {
    L.push_back(i + 1);
    F.push_back(w.size - i);
  }
  const auto n = static_cast<std::int64_t>(w.size) * (w.size + 1) / 2;
  Case c{"l f/tp, f/tp e -> l/tp e", {{"l", n}, {"e", 3}, {"f", n}}};
  c.split = {{{"l", "tp"}, L}, {{"f", "tp"}, F}};
  c.shapes = es::Shapes{{"tp", {{"l", L}, {"f", F}}}};
  check(mesh, c, {.steps = Names{EINSUM, z(RS, "tp", "l")}});
}

TEST_CASE("binary: RS shape with the partial kept is not a layout (l/tp e // tp)", "[mpi][binary]") {
  // The original split the partial (`l/tp e // tp`); here a mesh dimension may not both shard an
  // axis and be a partial of the same tensor: each rank would hold a different block of its own
  // partial, which sums to nothing. The notation is rejected before any communication.
  const auto w = es::testing::world();
  const auto& mesh = mesh_of({w.size}, TP);
  const auto a = at::zeros({4, 2}, at::kDouble), b = at::zeros({2, 3}, at::kDouble);
  CHECK_THROWS_AS(es::einshard("l f/tp, f/tp e -> l/tp e // tp", {a, b}, {.mesh = mesh}), es::NotationError);
}

TEST_CASE("binary: split the full contracted axis l f, f/tp e -> l e", "[mpi][binary]") {
  check_all(TP, "l f, f/tp e -> l e",
            // Size set 1: with e = 16 instead of 64, gathering the small y and computing whole is
            // the cheaper plan under the calibrated model (plan/cost.hpp).
            {{{"l", 16}, {"e", 4}, {"f", 8}}, {{"l", 64}, {"e", 64}, {"f", 256}}, {{"l", 3}, {"e", 2}, {"f", 3}}},
            {{"(tp:8) 0", {y(GATHER, "tp", "f"), EINSUM}},
             {"(tp:8) 1", {x(SPLIT, "tp", "f"), EINSUM, z(ALLREDUCE, "tp")}}});
}

TEST_CASE("binary: post-contraction all-to-all l/tp e, e f -> l f/tp", "[mpi][binary]") {
  // Small: gather x, slice the product. Wide (e = 256): the original's repartition plan, y marked
  // partial, the einsum on x's layout, one all-to-all of the result; no shapes needed, uneven too.
  check_all(TP, "l/tp e, e f -> l f/tp",
            {{{"l", 16}, {"e", 4}, {"f", 8}}, {{"l", 16}, {"e", 256}, {"f", 16}},
             {{"l", 17}, {"e", 256}, {"f", 13}}, {{"l", 3}, {"e", 2}, {"f", 3}}},
            {{"(tp:8) 0", {x(GATHER, "tp", "l"), EINSUM, z(SPLIT, "tp", "f")}},
             {"(tp:8) 1", {y(ADD_P, "tp"), EINSUM, z(ALLTOALL)}},
             {"(tp:8) 2", {y(ADD_P, "tp"), EINSUM, z(ALLTOALL)}}});
}

TEST_CASE("binary: attention scores and values", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"b", 2}, {"h", 2}, {"q", 8}, {"k", 8}, {"d", 3}},
                                  {{"b", 1}, {"h", 2}, {"q", 9}, {"k", 11}, {"d", 2}},
                                  {{"b", 1}, {"h", 1}, {"q", 3}, {"k", 2}, {"d", 2}}};
  const Names scores{y(GATHER_P, "tp", "k"), EINSUM};
  check_all(TP, "b h q/tp d, b h k/tp d -> b h q/tp k", sets, {{"(tp:8) 0", scores}, {"(tp:8) 1", scores}});
  // The original: gather q, split k of the scores, einsum, reduce-scatter q (fwd AG + RS, bwd 2 AG).
  // Here: gather V's k (backward reduce-scatters its gradient), einsum in the scores' layout.
  const Names values{y(GATHER_P, "tp", "k"), EINSUM};
  check_all(TP, "b h q/tp k, b h k/tp d -> b h q/tp d", sets, {{"(tp:8) 0", values}, {"(tp:8) 1", values}});
}

TEST_CASE("binary: crossed contraction l/sp e/dp, e/sp f/dp -> l/sp f/dp", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"l", 8}, {"e", 8}, {"f", 8}}, {{"l", 5}, {"e", 9}, {"f", 7}},
                                  {{"l", 1}, {"e", 3}, {"f", 2}}};
  // Both operands gather e, each with a reduce-scattering backward; no output communication.
  const Names plan{x(GATHER_P, "dp", "e"), y(GATHER_P, "sp", "e"), EINSUM};
  check_all(DPSP, "l/sp e/dp, e/sp f/dp -> l/sp f/dp", sets,
            {{"(dp:2,sp:4) 0", plan}, {"(dp:4,sp:2) 0", plan}});
  check_all(DPSPTP, "l/sp e/dp, e/sp f/dp -> l/sp f/dp", sets, {{"(dp:2,sp:2,tp:2) 0", plan}});
  // Operand order swapped; output axes in the other order.
  check_all(DPSP, "e/sp f/dp, l/sp e/dp -> l/sp f/dp", {sets[1]},
            {{"(dp:2,sp:4) 0", {x(GATHER_P, "sp", "e"), y(GATHER_P, "dp", "e"), EINSUM}}});
  check_all(DPSP, "l/sp e/dp, e/sp f/dp -> f/dp l/sp", {sets[1]});
}

TEST_CASE("binary: crossed contraction with an ellipsis", "[mpi][binary]") {
  for (const auto* mesh : meshes(DPSP)) {
    Case c{"... l/sp e/dp, e/sp f/dp -> ... l/sp f/dp", {{"_0", 2}, {"l", 5}, {"e", 8}, {"f", 4}}, 1};
    check(*mesh, c);
    Case c2{"... l/sp e/dp, e/sp f/dp -> ... l/sp f/dp", {{"_0", 2}, {"_1", 3}, {"l", 4}, {"e", 3}, {"f", 4}}, 2};
    check(*mesh, c2);
  }
}

TEST_CASE("binary: a local free axis sharded by the reduction b l e/dp, b e/sp f -> b/dp l f",
          "[mpi][binary]") {
  check_all(DPSP, "b l e/dp, b e/sp f -> b/dp l f",
            {{{"b", 4}, {"l", 3}, {"e", 8}, {"f", 5}}, {{"b", 8}, {"l", 32}, {"e", 64}, {"f", 32}},
             {{"b", 3}, {"l", 2}, {"e", 5}, {"f", 2}}},
            {{"(dp:2,sp:4) 0", {x(GATHER, "dp", "e"), y(GATHER, "sp", "e"), EINSUM, z(SPLIT, "dp", "b")}},
             {"(dp:2,sp:4) 1", {x(ALLTOALL), y(SPLIT, "dp", "b"), EINSUM, z(ALLREDUCE, "sp")}}});
}

TEST_CASE("binary: the 'SUMMA' layout a/dp k, k/sp b -> a/dp b/sp", "[mpi][binary]") {
  check_all(DPSP, "a/dp k, k/sp b -> a/dp b/sp",
            // Size set 1: a shorter than k. With a = k the result's reduce-scatter along its inner
            // axis b (an all-reduce and a slice) costs more than moving y by all-to-all.
            {{{"a", 8}, {"k", 8}, {"b", 8}}, {{"a", 16}, {"k", 64}, {"b", 64}}, {{"a", 5}, {"k", 7}, {"b", 3}}},
            {{"(dp:2,sp:4) 0", {y(GATHER, "sp", "k"), y(ADD_P, "dp"), EINSUM, z(SPLIT, "sp", "b")}},
             {"(dp:2,sp:4) 1", {x(SPLIT, "sp", "k"), y(ADD_P, "dp"), EINSUM, z(RS, "sp", "b")}}});
}

TEST_CASE("binary: two crossed contractions, also on unequal mesh sizes", "[mpi][binary]") {
  // The original needed |dp| == |sp| (an owner swap) and raised NotImplementedError on (2,4).
  const std::vector<Extents> sets{{{"a", 8}, {"k", 8}, {"m", 8}, {"b", 8}},
                                  {{"a", 5}, {"k", 6}, {"m", 7}, {"b", 3}},
                                  {{"a", 2}, {"k", 3}, {"m", 1}, {"b", 3}}};
  const Names plan{y(ALLTOALL), EINSUM, z(RS, "sp", "a"), z(RS, "dp", "b")};
  check_all(DPSP, "a k/dp m/sp, k/sp m/dp b -> a/sp b/dp", sets,
            {{"(dp:2,sp:4) 0", plan}, {"(dp:4,sp:2) 0", plan}});
  check_all(DPSPTP, "a k/dp m/sp, k/sp m/dp b -> a/sp b/dp", sets, {{"(dp:2,sp:2,tp:2) 0", plan}});
}

TEST_CASE("binary: owner swap plus an extra local contraction", "[mpi][binary]") {
  check_all(DPSPTP, "a k/dp m/sp n/tp, k/sp m/dp n b -> a b",
            {{{"a", 4}, {"k", 4}, {"m", 4}, {"n", 4}, {"b", 4}}, {{"a", 3}, {"k", 5}, {"m", 3}, {"n", 7}, {"b", 2}}},
            {{"(dp:2,sp:2,tp:2) 0", {y(ALLTOALL), EINSUM, z(ALLREDUCE, "dp-sp-tp")}}});
  // The same with the other 3-D names.
  check_all(DPSP12, "a k/sp1 m/sp2 n/dp, k/sp2 m/sp1 n b -> a b",
            {{{"a", 4}, {"k", 4}, {"m", 4}, {"n", 4}, {"b", 4}}},
            {{"(dp:2,sp1:2,sp2:2) 0", {y(ALLTOALL), EINSUM, z(ALLREDUCE, "dp-sp1-sp2")}}});
}

TEST_CASE("binary: reduce on one dimension, own on another a/tp k, k/tp b -> a/dp b", "[mpi][binary]") {
  const std::vector<Extents> sets{{{"a", 8}, {"k", 8}, {"b", 8}}, {{"a", 64}, {"k", 64}, {"b", 64}},
                                  {{"a", 7}, {"k", 5}, {"b", 3}}};
  const Names small{x(GATHER, "tp", "a"), y(GATHER, "tp", "k"), EINSUM, z(SPLIT, "dp", "a")};
  const Names wide{x(ALLTOALL), y(ADD_P, "dp"), EINSUM, z(ALLREDUCE, "tp")};
  check_all(DPTP, "a/tp k, k/tp b -> a/dp b", sets, {{"(dp:2,tp:4) 0", small}, {"(dp:2,tp:4) 1", wide}});
  check_all(DPSPTP, "a/tp k, k/tp b -> a/dp b", sets,
            {{"(dp:2,sp:2,tp:2) 0", small}, {"(dp:2,sp:2,tp:2) 1", wide}});
}

// ---- beyond the original --------------------------------------------------------------------------

TEST_CASE("binary: a sharded axis summed away without an output partial is reduced", "[mpi][binary]") {
  // The original returned each rank's partial sum (gotcha 3.3.2).
  check_all(DP, "b/dp c, c -> c",
            {{{"b", 16}, {"c", 5}}, {{"b", 17}, {"c", 3}}, {{"b", 3}, {"c", 2}}, {{"b", 4096}, {"c", 2}}},
            {{"(dp:8) 0", {x(GATHER, "dp", "b"), EINSUM}},
             {"(dp:8) 3", {y(ADD_P, "dp"), EINSUM, z(ALLREDUCE, "dp")}}});
  check_all(DPSP, "a/sp b/dp c, c -> a/sp c", {{{"a", 8}, {"b", 6}, {"c", 3}}, {{"a", 3}, {"b", 5}, {"c", 2}}});
}

TEST_CASE("binary: output partials introduced by a binary op (identity forward)", "[mpi][binary]") {
  const auto W = es::testing::world().size;
  // Nothing is sharded: each rank holds the product, its gradient is all-reduced (see the file
  // comment), so the sum over tp is |tp| times the product.
  check_all(TP, "a k, k b -> a b // tp", {{{"a", 3}, {"k", 4}, {"b", 2}}},
            {{"(tp:8) 0", {EINSUM, z(ADD_P, "tp")}}}, {.scale = static_cast<double>(W)});
  check_all(DPSP, "a k, k b -> a b // (dp,sp)", {{{"a", 3}, {"k", 4}, {"b", 2}}},
            {{"(dp:2,sp:4) 0", {EINSUM, z(ADD_P, "dp-sp")}}}, {.scale = static_cast<double>(W)});
  // One partial from the contraction (sums to the product), one introduced over the other dimension.
  for (const auto* mesh : meshes(DPSP)) {
    const auto sp = static_cast<double>(mesh->size("sp"));
    check(*mesh, {"a k/dp, k/dp b -> a b // (dp,sp)", {{"a", 3}, {"k", 8}, {"b", 2}}}, {.scale = sp});
  }
}

TEST_CASE("binary: the meaning of an output partial does not depend on the plan", "[mpi][binary]") {
  // `a k/dp, k/sp b -> a b // dp`: the partial over dp can come from contracting k over dp (the sum
  // over dp of the outputs is the product) or, on another candidate, from identity forward after an
  // all-reduce over sp (the sum over dp would be |dp| times the product). Only the first kind of
  // candidate may run, whatever the sizes and the policy (these two once picked the second kind).
  for (const auto* mesh : meshes(DPSP)) {
    Case c{"a k/dp, k/sp b -> a b // dp", {{"a", 8}, {"k", 64}, {"b", 8}}};
    c.policy = es::Policy::memory;
    check(*mesh, c);
  }
  const auto W = es::testing::world().size;
  Case c{"a k/tp, k b -> a b // tp", {{"a", 8}, {"k", 64}, {"b", 64}}};
  c.policy = es::Policy::communication;
  check(mesh_of({W}, TP), c);
}

TEST_CASE("binary: a partial input", "[mpi][binary]") {
  // Binary partial inputs were rejected by the original; here the result is partial over the
  // input's groups too and is reduced as the output asks.
  check_all(DPSP, "a k // dp, k/sp b -> a b/sp", {{{"a", 3}, {"k", 4}, {"b", 8}}, {{"a", 2}, {"k", 3}, {"b", 5}}});
  // y's gradient is partial over tp (each rank's piece of x gives its own share): y is marked.
  check_all(TP, "a k // tp, k b -> a b", {{{"a", 3}, {"k", 4}, {"b", 2}}},
            {{"(tp:8) 0", {y(ADD_P, "tp"), EINSUM, z(ALLREDUCE, "tp")}}});
  check_all(TP, "a k // tp, k b -> a b // tp", {{{"a", 3}, {"k", 4}, {"b", 2}}},
            {{"(tp:8) 0", {y(ADD_P, "tp"), EINSUM}}});
}

TEST_CASE("binary: a partial input and a free axis sharded over its group", "[mpi][binary]") {
  // The candidate computing b over dp from x = a k // dp would hold, on rank r of dp, x_r times
  // y's block r of b: no partial sum at all. The planner never shards a result axis over a
  // dimension the result is a partial sum over, so y's b is gathered and the result reduce-scattered.
  check_all(DPSP, "a k // dp, k b/dp -> a b/dp", {{{"a", 3}, {"k", 4}, {"b", 12}}});
  check_all(DPSP, "a k // dp, k/sp b/dp -> a/dp b", {{{"a", 4}, {"k", 8}, {"b", 6}}});
}

TEST_CASE("binary: both inputs partial over one group is an error on every rank", "[mpi][binary]") {
  const auto w = es::testing::world();
  const auto& mesh = mesh_of({w.size}, TP);
  const auto a = at::ones({3, 4}, at::kDouble), b = at::ones({4, 2}, at::kDouble);
  CHECK_THROWS_WITH(es::einshard("a k // tp, k b // tp -> a b", {a, b}, {.mesh = mesh}),
                    Catch::Contains("found both inputs partial"));
}

TEST_CASE("binary: three operands, contracted two at a time", "[mpi][binary]") {
  // Contractions of more than two operands run as a chain of binary plans (cheapest pair first);
  // each stage is a binary plan of its own, so the plan has one local einsum per pair.
  for (const auto* mesh : meshes(DPSP)) {
    for (const auto& ext : std::vector<Extents>{{{"a", 3}, {"b", 5}, {"c", 7}, {"d", 2}}}) {
      for (const std::string notation :
           {"a b/sp, b/sp c, c d -> a d", "a/dp b, b c/sp, c d -> a/dp d", "a b/dp, b c, c/sp d -> a d/sp // dp"}) {
        const auto steps = check(*mesh, {notation, ext});
        CHECK(std::count(steps.begin(), steps.end(), EINSUM) == 2);
      }
    }
  }
}

TEST_CASE("binary: the unary convention a b -> a b // tp (identity forward, all-reduce backward)",
          "[mpi][binary]") {
  const auto w = es::testing::world();
  const auto& mesh = mesh_of({w.size}, TP);
  at::manual_seed(7);
  const auto full = at::randn({3, 5}, at::kDouble);
  const auto G = at::randn({3, 5}, at::kDouble);
  auto xl = full.clone().requires_grad_(true);
  auto out = es::einshard("a b -> a b // tp", {xl}, {.mesh = mesh});
  CHECK(es::last_plan().names() == Names{ADD_P});
  CHECK(at::equal(out.detach(), full));  // identity forward: every rank holds the whole value
  (out * G).sum().backward();            // the upstream gradient G on every rank of tp
  CHECK(at::allclose(xl.grad(), G * w.size, 1e-12, 1e-12));  // all-reduced: |tp| G
  // A later reduction gives |tp| times the value: the partial marks gradients, not values.
  auto x2 = full.clone().requires_grad_(true);
  auto back = es::einshard("a b // tp -> a b", {es::einshard("a b -> a b // tp", {x2}, {.mesh = mesh})},
                           {.mesh = mesh});
  CHECK(at::allclose(back.detach(), full * w.size, 1e-12, 1e-12));
  (back * G).sum().backward();
  CHECK(at::allclose(x2.grad(), G * w.size, 1e-12, 1e-12));
}

TEST_CASE("binary: explain is collective and matches the run", "[mpi][binary]") {
  const auto w = es::testing::world();
  const auto& mesh = mesh_of({w.size}, TP);
  const auto xs = es::compute_split_shapes(17, w.size);
  const auto a = at::ones({17, 3}, at::kDouble), b = at::ones({xs[static_cast<std::size_t>(w.rank)], 3}, at::kDouble);
  const auto p = es::explain<"l e, l/tp e -> l/tp e">(a, b, {.mesh = mesh});
  const auto out = es::einshard<"l e, l/tp e -> l/tp e">(a, b, {.mesh = mesh});
  CHECK(p.names() == es::last_plan().names());
  CHECK(p.names() == Names{SPLIT, EINSUM});
  CHECK(out.size(0) == xs[static_cast<std::size_t>(w.rank)]);
  CHECK(p.steps.front().operand == 0);
}

}  // namespace test_binary
