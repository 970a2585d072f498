// The unary planner (plan::plan_unary) and the all-to-all schedule (plan::schedule_redistribute),
// without MPI: the step names of every distributed unary pattern of the reference (§2.3, with the
// port's rules: one all-to-all for any layout change, one all-reduce over the product group for
// multi-dimension partials), the planner's errors, and, simulating every rank of a mesh in one
// process, that the schedules of all ranks match and tile each output exactly once.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/redistribute.hpp"
#include "einshard/plan/step.hpp"
#include "einshard/plan/unary.hpp"
#include "einshard/shapes.hpp"

#include "plan_steps.hpp"

namespace test_unary_planner {

namespace es = einshard;
namespace plan = einshard::plan;

namespace {

using namespace einshard::testing;  // the step names
using Names = std::vector<std::string>;

const es::MeshShape mesh24{{"dp", "sp"}, {2, 4}};
const es::MeshShape mesh42{{"dp", "sp"}, {4, 2}};
const es::MeshShape mesh222{{"dp", "sp", "tp"}, {2, 2, 2}};
const es::MeshShape mesh8{{"dp"}, {8}};
const es::MeshShape mesh3{{"dp"}, {3}};
const es::MeshShape mesh13{{"dp", "sp"}, {1, 3}};

/// The input and output layouts of a unary notation, its ellipsis standing for `ellipsis` axes.
std::pair<plan::Layout, plan::Layout> layouts(const std::string& source, const es::MeshShape& mesh,
                                              std::int64_t ellipsis = 0) {
  const auto expression = einshard::testing::parsed(source);
  const auto v = expression.view(source);
  return {plan::layout_of(v, v.input(0), ellipsis, mesh), plan::layout_of(v, v.output(), ellipsis, mesh)};
}

std::vector<plan::Step> steps_of(const std::string& source, const es::MeshShape& mesh,
                                 std::int64_t ellipsis = 0) {
  const auto [in, out] = layouts(source, mesh, ellipsis);
  return plan::plan_unary(in, out, mesh);
}

Names names_of(const std::vector<plan::Step>& steps) {
  Names n;
  for (const auto& s : steps) n.push_back(plan::step_name(s.kind));
  return n;
}

Names names(const std::string& source, const es::MeshShape& mesh = mesh24, std::int64_t ellipsis = 0) {
  return names_of(steps_of(source, mesh, ellipsis));
}
}  // namespace

// ---- plan_unary: step names ---------------------------------------------------------------------

TEST_CASE("unary planner: split and gather", "[planner]") {
  CHECK(names("a b -> a/dp b") == Names{SPLIT});
  CHECK(names("a b -> a b/sp") == Names{SPLIT});
  CHECK(names("a/dp b -> a b") == Names{GATHER});
  CHECK(names("a b/sp -> a b") == Names{GATHER});
  CHECK(names("a b -> a/dp b", mesh8) == Names{SPLIT});
  CHECK(names("a b -> a/dp-sp b") == Names{SPLIT});
  CHECK(names("a/sp-dp b -> a b") == Names{GATHER});

  const auto s = steps_of("a b -> a/dp b", mesh24);
  REQUIRE(s.size() == 1);
  CHECK(s[0].group == "dp");
  CHECK(s[0].axis == "a");
  CHECK(s[0].before.str() == "a b");
  CHECK(s[0].after.str() == "a/dp b");

  // Compound groups are spelled canonically (mesh order), whichever order the notation uses.
  const auto c = steps_of("a b -> a/sp-dp b", mesh24);
  REQUIRE(c.size() == 1);
  CHECK(c[0].group == "dp-sp");
  CHECK(c[0].after.str() == "a/dp-sp b");
}

TEST_CASE("unary planner: multi-axis split and gather", "[planner]") {
  const auto s = steps_of("a b -> a/sp b/dp", mesh24);
  CHECK(names_of(s) == Names{SPLIT, SPLIT});
  REQUIRE(s.size() == 2);
  CHECK(s[0].axis == "a");
  CHECK(s[0].group == "sp");
  CHECK(s[1].axis == "b");
  CHECK(s[1].group == "dp");
  CHECK(s[1].after.str() == "a/sp b/dp");

  CHECK(names("a/sp b/dp -> a b") == Names{GATHER, GATHER});
  CHECK(names("a/dp b c/tp -> a b c", mesh222) == Names{GATHER, GATHER});
  CHECK(names("a b c -> a/tp b/dp c/sp", mesh222) == Names{SPLIT, SPLIT, SPLIT});
}

TEST_CASE("unary planner: split + permute and gather + permute", "[planner]") {
  const auto s = steps_of("b a -> a/dp b", mesh24);
  CHECK(names_of(s) == Names{SPLIT, PERMUTE});
  REQUIRE(s.size() == 2);
  CHECK(s[0].axis == "a");
  CHECK(s[0].after.str() == "b a/dp");
  CHECK(s[1].permutation == std::vector<std::int64_t>{1, 0});
  CHECK(s[1].after.str() == "a/dp b");

  CHECK(names("a/dp b c -> c b a") == Names{GATHER, PERMUTE});
  const auto p = steps_of("a/dp b c -> c b a", mesh24);
  CHECK(p.back().permutation == std::vector<std::int64_t>{2, 1, 0});
  // A pure permutation of a sharded layout is local: no step at all reaches the planner in
  // practice, and the planner itself plans only the permute.
  CHECK(names("a/dp b -> b a/dp") == Names{PERMUTE});
  CHECK(names("a/dp b -> a/dp b").empty());
}

TEST_CASE("unary planner: ellipsis axes are whole axes of their own", "[planner]") {
  CHECK(names("... a -> ... a/dp", mesh24, 2) == Names{SPLIT});
  CHECK(names("b ... a/dp -> b ... a", mesh24, 3) == Names{GATHER});
  CHECK(names("... a -> ... a/dp", mesh24, 0) == Names{SPLIT});
  const auto [in, out] = layouts("b ... a/dp -> b ... a", mesh24, 2);
  REQUIRE(in.axes.size() == 4);
  CHECK(in.axes[0].axis == "b");
  CHECK(in.axes[3].axis == "a");
  CHECK(in.axes[3].group == "dp");
  CHECK(in.axes[1].group.empty());
  CHECK(in.axes[1].axis != in.axes[2].axis);
}

TEST_CASE("unary planner: every layout change that is not a pure split or gather is one all-to-all",
          "[planner]") {
  // Same-mesh repartition, both directions, and with more axes.
  CHECK(names("a/dp b -> a b/dp") == Names{ALLTOALL});
  CHECK(names("a b/dp -> a/dp b") == Names{ALLTOALL});
  CHECK(names("a/dp b c -> a b c/dp") == Names{ALLTOALL});
  CHECK(names("a/dp b -> a b/dp", mesh8) == Names{ALLTOALL});
  CHECK(names("a/dp b -> a b/dp", mesh3) == Names{ALLTOALL});
  // Cross-mesh moves, on meshes with unequal (2,4) and equal (2,2,2) sizes.
  CHECK(names("a/dp b -> a/sp b") == Names{ALLTOALL});
  CHECK(names("a/sp b -> a/dp b", mesh42) == Names{ALLTOALL});
  CHECK(names("a/dp b -> a/sp b", mesh222) == Names{ALLTOALL});
  CHECK(names("a/dp b -> a/sp b", mesh13) == Names{ALLTOALL});
  // Onto and off compound groups.
  CHECK(names("a/dp b -> a/dp-sp b") == Names{ALLTOALL});
  CHECK(names("a/dp-sp b -> a b/sp-dp") == Names{ALLTOALL});
  // Ownership permutations: a swap and a 3-cycle.
  CHECK(names("a/dp b/sp -> a/sp b/dp") == Names{ALLTOALL});
  CHECK(names("b h/sp w/tp c -> b h/tp w/sp c", mesh222) == Names{ALLTOALL});
  CHECK(names("a/dp b/sp c/tp -> a/sp b/tp c/dp", mesh222) == Names{ALLTOALL});
  // A move plus an independent split, a split mixed with a gather: still one all-to-all.
  CHECK(names("a/dp b -> a/sp b/tp", mesh222) == Names{ALLTOALL});
  CHECK(names("a b/sp -> a/dp b") == Names{ALLTOALL});
  // And a permute after it when the axis order changes.
  CHECK(names("a/dp b -> b/dp a") == Names{ALLTOALL, PERMUTE});

  const auto s = steps_of("a/dp b/sp c/tp -> a/sp b/tp c/dp", mesh222);
  REQUIRE(s.size() == 1);
  CHECK(s[0].group.empty());
  CHECK(s[0].before.str() == "a/dp b/sp c/tp");
  CHECK(s[0].after.str() == "a/sp b/tp c/dp");
}

TEST_CASE("unary planner: partial conversions", "[planner]") {
  // Partial -> full: one all-reduce.
  CHECK(names("a b // dp -> a b") == Names{ALLREDUCE});
  // Partial -> shard over the same group: reduce-scatter into the axis.
  CHECK(names("a b // dp -> a/dp b") == Names{RS});
  CHECK(names("a b // sp -> a b/sp") == Names{RS});
  const auto rs = steps_of("a b // dp -> a b/dp", mesh24);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].axis == "b");
  CHECK(rs[0].group == "dp");
  CHECK(rs[0].after.str() == "a b/dp");
  // Partial -> shard over another group: all-reduce, then split.
  CHECK(names("a b // dp -> a/sp b") == Names{ALLREDUCE, SPLIT});
  // Shard -> partial over the same group: the all-gather whose backward reduce-scatters.
  CHECK(names("a/dp b -> a b // dp") == Names{GATHER_P});
  const auto gp = steps_of("a/dp b -> a b // dp", mesh24);
  REQUIRE(gp.size() == 1);
  CHECK(gp[0].axis == "a");
  CHECK(gp[0].group == "dp");
  CHECK(gp[0].after.str() == "a b // dp");
  // Shard -> partial over another group: gather, then add the partial.
  CHECK(names("a/dp b -> a b // sp") == Names{GATHER, ADD_P});
  // Full -> partial: identity forward, all-reduce backward.
  CHECK(names("a b -> a b // dp") == Names{ADD_P});
  // Add partial + permute.
  CHECK(names("b a -> a b // dp") == Names{ADD_P, PERMUTE});
  // A kept partial does not move.
  CHECK(names("a b // dp -> a b/sp // dp") == Names{SPLIT});
  CHECK(names("a b // dp -> a b // dp").empty());
}

TEST_CASE("unary planner: multi-dimension and compound partials reduce in one collective", "[planner]") {
  for (const auto* source : {"loss // (sp,dp) -> loss", "loss // (dp,sp) -> loss", "loss // sp-dp -> loss",
                             "loss // dp-sp -> loss", "a b // (sp,dp) -> a b"}) {
    INFO(source);
    const auto s = steps_of(source, mesh24);
    REQUIRE(s.size() == 1);
    CHECK(plan::step_name(s[0].kind) == ALLREDUCE);
    CHECK(s[0].group == "dp-sp");
    CHECK(s[0].after.partial.empty());
  }
  // Three dimensions at once.
  const auto s3 = steps_of("a // (tp,dp,sp) -> a", mesh222);
  REQUIRE(s3.size() == 1);
  CHECK(s3[0].group == "dp-sp-tp");
  // Reduce one, keep one.
  const auto keep = steps_of("a // (sp,dp) -> a // dp", mesh24);
  REQUIRE(keep.size() == 1);
  CHECK(keep[0].group == "sp");
  CHECK(keep[0].after.partial == "dp");
  // One group is reduce-scattered into the output shard, the rest all-reduced.
  CHECK(names("a b // (sp,dp) -> a/sp b") == Names{RS, ALLREDUCE});
  // Compound partial group onto a compound shard.
  CHECK(names("a b // sp-dp -> a/dp-sp b") == Names{RS});
}

TEST_CASE("unary planner: errors", "[planner]") {
  // Different axis sets.
  CHECK_THROWS_AS(names("a/dp b -> b"), es::Error);
  CHECK_THROWS_WITH(names("a/dp b c -> a b"), Catch::Contains("same axes"));
  CHECK_THROWS_AS(names("a b c -> a/dp b"), es::Error);
  // Diagonal layouts (one mesh dimension on two axes) cannot be repartitioned.
  CHECK_THROWS_WITH(names("a/dp c/dp b -> a c/dp b/sp"), Catch::Contains("diagonal"));
  CHECK_THROWS_AS(names("a/dp b c -> a/sp b/sp c"), es::Error);
  CHECK_THROWS_AS(names("a/dp-sp b -> a/dp b/sp-dp"), es::Error);
  CHECK_THROWS_AS(names("a/dp b/sp -> a/dp-sp b/sp"), es::Error);
  // Overlapping partial groups reduced together.
  CHECK_THROWS_WITH(names("a // (dp,dp-sp) -> a"), Catch::Contains("found 'dp' and 'dp-sp' sharing 'dp'"));
  CHECK_THROWS_AS(names("a // (sp-dp,dp-sp) -> a"), es::Error);
  // Unknown mesh dimensions are caught when the layouts are made.
  CHECK_THROWS_WITH(layouts("a b -> a/zz b", mesh24), Catch::Contains("zz"));
  CHECK_THROWS_AS(layouts("a b // zz -> a b", mesh24), es::Error);
  // Factored groups are local-only.
  CHECK_THROWS_WITH(layouts("(a b) c -> a b/dp c", mesh24),
                    Catch::Equals("einshard '(a b) c -> a b/dp c': expected plain axes in a distributed operation, "
                                  "found '(a b)' (factored groups are local only: reshape before or after the "
                                  "distributed step)"));
  CHECK_THROWS_WITH(layouts("a a b/dp -> a b/dp", mesh24),
                    Catch::StartsWith("einshard 'a a b/dp -> a b/dp': expected each axis once in an operand, found 'a' twice"));
}

// ---- schedule_redistribute: all ranks of a mesh simulated in one process --------------------------

namespace {

/// Row-major coordinates of every rank of a mesh (as MPI_Cart_create without reordering).
std::vector<std::vector<int>> all_coordinates(const es::MeshShape& mesh) {
  const int world = std::accumulate(mesh.sizes.begin(), mesh.sizes.end(), 1, std::multiplies<>());
  std::vector<std::vector<int>> out(static_cast<std::size_t>(world), std::vector<int>(mesh.sizes.size()));
  for (int r = 0; r < world; ++r) {
    int rest = r;
    for (auto d = mesh.sizes.size(); d-- > 0;) {
      out[static_cast<std::size_t>(r)][d] = rest % mesh.sizes[d];
      rest /= mesh.sizes[d];
    }
  }
  return out;
}

struct Case {
  std::string notation;
  es::MeshShape mesh;
  std::vector<std::int64_t> global;
  /// Optional explicit shard sizes by (axis, group); the split rule otherwise.
  std::map<std::pair<std::string, std::string>, std::vector<std::int64_t>> given{};
};

/// A rank's box of a layout, in global coordinates (the test's own arithmetic).
struct GlobalBox {
  std::vector<std::int64_t> start, size;
};

void check_schedules(const Case& c) {
  INFO(c.notation << " on (" << [&] {
    std::string s;
    for (auto n : c.mesh.sizes) s += (s.empty() ? "" : ",") + std::to_string(n);
    return s;
  }() << ")");
  // Not a structured binding: the lambdas below capture both, which clang 14 cannot do.
  const auto both = layouts(c.notation, c.mesh);
  const auto& from = both.first;
  const auto& to = both.second;
  REQUIRE(from.axes.size() == c.global.size());
  // Shard sizes of every (axis, group) either layout uses.
  std::map<std::pair<std::string, std::string>, std::vector<std::int64_t>> table;
  for (const auto* l : {&from, &to})
    for (std::size_t i = 0; i < l->axes.size(); ++i) {
      const auto& [axis, group] = l->axes[i];
      if (group.empty()) continue;
      const auto key = std::pair{axis, group.name()};
      if (table.contains(key)) continue;
      const auto g = c.given.find(key);
      table[key] = g != c.given.end() ? g->second
                                      : es::compute_split_shapes(c.global[i], c.mesh.size(group));
    }
  const auto coords = all_coordinates(c.mesh);
  const int world = static_cast<int>(coords.size());
  const auto shards = [&](std::size_t i, const es::Group& g) -> const std::vector<std::int64_t>& {
    return table.at({from.axes[i].axis, g.name()});
  };
  const auto coords_of = [&](int r) { return std::span<const int>(coords[static_cast<std::size_t>(r)]); };
  auto box = [&](const plan::Layout& l, int r) {
    GlobalBox b;
    for (std::size_t i = 0; i < l.axes.size(); ++i) {
      const auto& g = l.axes[i].group;
      if (g.empty()) {
        b.start.push_back(0);
        b.size.push_back(c.global[i]);
        continue;
      }
      const auto& s = table.at({l.axes[i].axis, g.name()});
      const auto k = static_cast<std::size_t>(c.mesh.coordinate(g, coords[static_cast<std::size_t>(r)]));
      b.start.push_back(std::accumulate(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), std::int64_t{0}));
      b.size.push_back(s[k]);
    }
    return b;
  };

  std::vector<plan::Schedule> sched;
  for (int r = 0; r < world; ++r)
    sched.push_back(plan::schedule_redistribute(from, to, c.global, shards, c.mesh, coords_of, r, world));

  std::int64_t sent = 0, received = 0;
  for (int q = 0; q < world; ++q) {
    INFO("rank " << q);
    const auto& s = sched[static_cast<std::size_t>(q)];
    const auto in = box(from, q), out = box(to, q);
    CHECK(s.in_shape == in.size);
    CHECK(s.out_shape == out.size);
    // (b) The receives tile this rank's output box exactly once.
    const auto n = std::accumulate(out.size.begin(), out.size.end(), std::int64_t{1}, std::multiplies<>());
    std::vector<int> hits(static_cast<std::size_t>(n), 0);
    int self_sends = 0, self_recvs = 0;
    for (const auto& t : s.recvs) {
      REQUIRE(t.peer >= 0);
      REQUIRE(t.peer < world);
      REQUIRE(t.box.start.size() == out.size.size());
      self_recvs += t.peer == q;
      // Walk the box's elements (row-major) and count them in the output.
      std::vector<std::int64_t> idx(t.box.start.size(), 0);
      for (std::int64_t e = 0; e < t.box.numel(); ++e) {
        std::int64_t flat = 0;
        for (std::size_t d = 0; d < idx.size(); ++d) {
          const auto pos = t.box.start[d] + idx[d];
          REQUIRE(pos >= 0);
          REQUIRE(pos < out.size[d]);
          flat = flat * out.size[d] + pos;
        }
        ++hits[static_cast<std::size_t>(flat)];
        for (auto d = idx.size(); d-- > 0;) {
          if (++idx[d] < t.box.size[d]) break;
          idx[d] = 0;
        }
      }
      received += t.box.numel();
    }
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    for (const auto& t : s.sends) {
      self_sends += t.peer == q;
      for (std::size_t d = 0; d < t.box.size.size(); ++d) {
        CHECK(t.box.start[d] >= 0);
        CHECK(t.box.start[d] + t.box.size[d] <= in.size[d]);
      }
      sent += t.box.numel();
    }
    // At most one local copy each way (exchange_boxes pairs them), and of equal size.
    CHECK(self_sends <= 1);
    CHECK(self_sends == self_recvs);
    // (a) What q sends to p is what p receives from q: one message each way, the same global box.
    for (const auto& t : s.sends) {
      const auto& theirs = sched[static_cast<std::size_t>(t.peer)].recvs;
      const auto matches = std::count_if(theirs.begin(), theirs.end(), [&](const plan::Transfer& u) { return u.peer == q; });
      REQUIRE(matches == 1);
      const auto& u = *std::find_if(theirs.begin(), theirs.end(), [&](const plan::Transfer& v) { return v.peer == q; });
      CHECK(u.box.size == t.box.size);
      CHECK(u.box.numel() == t.box.numel());
      const auto their_out = box(to, t.peer);
      for (std::size_t d = 0; d < t.box.size.size(); ++d)
        CHECK(in.start[d] + t.box.start[d] == their_out.start[d] + u.box.start[d]);
    }
    for (const auto& u : s.recvs) {
      const auto& theirs = sched[static_cast<std::size_t>(u.peer)].sends;
      CHECK(std::count_if(theirs.begin(), theirs.end(), [&](const plan::Transfer& t) { return t.peer == q; }) == 1);
    }
  }
  // (c) Conservation: everything sent is received, and the receives fill every rank's output.
  CHECK(sent == received);
  std::int64_t outputs = 0;
  for (int q = 0; q < world; ++q) {
    const auto o = box(to, q);
    outputs += std::accumulate(o.size.begin(), o.size.end(), std::int64_t{1}, std::multiplies<>());
  }
  CHECK(received == outputs);
}

}  // namespace

TEST_CASE("redistribute schedule: every rank's messages match and tile its output", "[redistribute]") {
  const es::MeshShape m2{{"dp"}, {2}};
  const es::MeshShape m4{{"dp"}, {4}};
  const es::MeshShape m31{{"dp", "sp"}, {3, 1}};
  const es::MeshShape m22{{"dp", "sp"}, {2, 2}};
  const std::vector<Case> cases{
      // Same-mesh repartitions, even, uneven, with empty shards and an empty axis.
      {"a/dp b -> a b/dp", mesh8, {16, 8}},
      {"a/dp b -> a b/dp", mesh8, {17, 9}},
      {"a/dp b -> a b/dp", m4, {3, 10}},
      {"a b/dp -> a/dp b", m4, {3, 10}},
      {"a/dp b -> a b/dp", m4, {0, 5}},
      {"a/dp b -> a b/dp", mesh3, {7, 5}},
      {"a/dp b -> a b/dp", m2, {7, 1}},
      {"a/dp b c -> a b c/dp", m4, {5, 2, 6}},
      {"a/dp b -> a b/dp", m4, {6, 6}, {{{"a", "dp"}, {6, 0, 0, 0}}, {{"b", "dp"}, {0, 1, 2, 3}}}},
      // Cross-mesh moves.
      {"a/dp b -> a/sp b", mesh24, {17, 3}},
      {"a/sp b -> a/dp b", mesh24, {3, 4}},
      {"a/dp b -> a/sp b", mesh42, {9, 2}},
      {"a/dp b -> a/sp b", mesh222, {5, 3}},
      {"a/dp b -> a/sp b", mesh13, {4, 2}},
      {"a/dp b -> a/sp b", m31, {4, 2}},
      // Compound groups.
      {"a/dp b -> a/dp-sp b", mesh24, {17, 2}},
      {"a/dp-sp b -> a b/dp-sp", mesh24, {9, 10}},
      {"a/dp-sp b -> a/sp b/dp", mesh24, {9, 10}},
      {"a/dp-sp-tp b -> a b/dp-sp-tp", mesh222, {7, 9}},
      // Ownership permutations.
      {"a/dp b/sp -> a/sp b/dp", mesh24, {5, 7}},
      {"a/dp b/sp -> a/sp b/dp", m22, {3, 3}},
      {"a/dp b/sp c/tp -> a/sp b/tp c/dp", mesh222, {3, 5, 4}},
      {"a/dp b/sp c/tp -> a/tp b/dp c/sp", mesh222, {2, 1, 7}},
      // A move plus a split, a split mixed with a gather, replicated sources and targets.
      {"a/dp b -> a/sp b/tp", mesh222, {6, 5}},
      {"a b/sp -> a/dp b", mesh24, {5, 9}},
      {"a/dp b -> a b/sp", mesh24, {5, 9}},
      {"a/sp b c -> a b/dp c/sp", mesh42, {7, 6, 3}},
      // Scalars-like: a one-element axis over many ranks.
      {"a/dp b -> a b/dp", mesh8, {1, 1}},
  };
  for (const auto& c : cases) check_schedules(c);
}

TEST_CASE("redistribute schedule: a layout change to itself is all local copies", "[redistribute]") {
  const auto [from, to] = layouts("a/dp b/sp -> a/dp b/sp", mesh24);
  const std::vector<std::int64_t> global{5, 7};
  const auto sa = es::compute_split_shapes(5, 2), sb = es::compute_split_shapes(7, 4);
  const auto coords = all_coordinates(mesh24);
  for (int r = 0; r < 8; ++r) {
    const auto s = plan::schedule_redistribute(
        from, to, global,
        [&](std::size_t i, const es::Group&) -> const std::vector<std::int64_t>& { return i == 0 ? sa : sb; },
        mesh24, [&](int q) { return std::span<const int>(coords[static_cast<std::size_t>(q)]); }, r, 8);
    for (const auto& t : s.sends) CHECK(t.peer == r);
    for (const auto& t : s.recvs) CHECK(t.peer == r);
    CHECK(s.in_shape == s.out_shape);
  }
}

}  // namespace test_unary_planner
