// The binary planner (plan::plan_binary), without MPI: for every pattern of reference §2.4, the
// steps it chooses at sizes where bandwidth and arithmetic matter (the same plan as the original's
// or a cheaper one; the original's compute layout is among the candidates and never scores better),
// that the chosen candidate is the cheapest under every policy, the local equation, the errors, and
// the candidates' meaning of an output partial.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/binary.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"
#include "plan_steps.hpp"

namespace test_binary_planner {

namespace es = einshard;
namespace plan = einshard::plan;

namespace {

using Names = std::vector<std::string>;
using Global = std::map<std::string, std::int64_t, std::less<>>;

const es::MeshShape tp8{{"tp"}, {8}};
const es::MeshShape dp8{{"dp"}, {8}};
const es::MeshShape mesh24{{"dp", "sp"}, {2, 4}};
const es::MeshShape mesh42{{"dp", "sp"}, {4, 2}};
const es::MeshShape mesh222{{"dp", "sp", "tp"}, {2, 2, 2}};
const es::MeshShape dptp24{{"dp", "tp"}, {2, 4}};

using namespace einshard::testing;  // step names, tag, x, y, z

struct Layouts {
  plan::Layout x, y, z;
};

Layouts layouts(const std::string& source, const es::MeshShape& mesh) {
  const auto expression = einshard::testing::parsed(source);
  const auto v = expression.view(source);
  REQUIRE(v.input_count() == 2);
  return {plan::layout_of(v, v.input(0), 0, mesh), plan::layout_of(v, v.input(1), 0, mesh),
          plan::layout_of(v, v.output(), 0, mesh)};
}

plan::BinaryPlan plan_of(const std::string& source, const es::MeshShape& mesh, const Global& global,
                         es::Policy policy = es::Policy::training, std::int64_t element = 8) {
  const auto l = layouts(source, mesh);
  return plan::plan_binary(l.x, l.y, l.z, mesh, global, element, policy);
}

/// The chosen steps, in execution order, as "x:name(group,axis)", the einsum, "z:...".
Names tagged(const plan::BinaryCandidate& c) {
  Names out;
  for (const auto& s : c.x_steps) out.push_back(tag("x", plan::step_name(s.kind), s.group.name(), s.axis));
  for (const auto& s : c.y_steps) out.push_back(tag("y", plan::step_name(s.kind), s.group.name(), s.axis));
  out.push_back(EINSUM);
  for (const auto& s : c.z_steps) out.push_back(tag("z", plan::step_name(s.kind), s.group.name(), s.axis));
  return out;
}

const plan::BinaryCandidate* candidate(const plan::BinaryPlan& p, const std::string& compute) {
  for (const auto& a : p.alternatives)
    if (a.compute.str() == compute) return &a;
  return nullptr;
}

/// The chosen plan is the first and cheapest candidate.
void check_cheapest(const plan::BinaryPlan& p) {
  REQUIRE_FALSE(p.alternatives.empty());
  CHECK(p.chosen.compute == p.alternatives.front().compute);
  CHECK(p.chosen.score == p.alternatives.front().score);
  for (const auto& a : p.alternatives) CHECK(p.chosen.score <= a.score);
}

struct Row {
  std::string notation;
  const es::MeshShape* mesh;
  Global global;
  Names steps;               ///< the chosen plan
  std::string original;      ///< the original's compute layout ("" when it is not a candidate)
};

}  // namespace

TEST_CASE("binary planner: every pattern of reference §2.4 at bandwidth-bound sizes", "[binary][planner]") {
  // Sizes where bytes and arithmetic outweigh the per-collective latency; at small sizes the model
  // may prefer fewer collectives (the MPI tests assert those plans too).
  const std::vector<Row> rows{
      // Column-parallel: the replicated x is marked partial (Megatron f): its gradient is
      // all-reduced over tp in backward. The original ran a local einsum and left it partial.
      {"b n c, h/tp c -> b n h/tp", &tp8, {{"b", 8}, {"n", 512}, {"c", 1024}, {"h", 4096}},
       {x(ADD_P, "tp"), EINSUM}, "b n c h/tp"},
      {"b n c/tp, h c/tp -> b n h", &tp8, {{"b", 8}, {"n", 512}, {"c", 4096}, {"h", 1024}},
       {EINSUM, z(ALLREDUCE, "tp")}, "b n c/tp h"},
      {"b n c/tp, h c/tp -> b n h // tp", &tp8, {{"b", 8}, {"n", 512}, {"c", 4096}, {"h", 1024}},
       {EINSUM}, "b n c/tp h"},
      {"a/sp b/dp, b/dp c -> a/sp c", &mesh24, {{"a", 4096}, {"b", 4096}, {"c", 512}},
       {y(ADD_P, "sp"), EINSUM, z(ALLREDUCE, "dp")}, "a/sp b/dp c"},
      // Two partials reduced by one all-reduce over the product group (the original: two).
      {"a/dp b/sp c, a/dp b/sp d -> c d", &mesh24, {{"a", 512}, {"b", 512}, {"c", 256}, {"d", 256}},
       {EINSUM, z(ALLREDUCE, "dp-sp")}, "a/dp b/sp c d"},
      {"a/dp b/sp c, a/dp b/sp d -> c d // (dp,sp)", &mesh24, {{"a", 512}, {"b", 512}, {"c", 256}, {"d", 256}},
       {EINSUM}, "a/dp b/sp c d"},
      {"b/dp a c, b/dp c d -> b/dp a d", &mesh24, {{"b", 64}, {"a", 512}, {"c", 512}, {"d", 512}},
       {EINSUM}, "b/dp a c d"},
      {"b/dp a c, b c d -> b/dp a d", &mesh24, {{"b", 64}, {"a", 512}, {"c", 512}, {"d", 512}},
       {y(SPLIT, "dp", "b"), EINSUM}, "b/dp a c d"},
      {"b/dp a c/sp, b/dp c/sp d -> b/dp a d", &mesh24, {{"b", 64}, {"a", 512}, {"c", 512}, {"d", 512}},
       {EINSUM, z(ALLREDUCE, "sp")}, "b/dp a c/sp d"},
      {"l/tp e, l/tp e -> l/tp e", &tp8, {{"l", 4096}, {"e", 1024}}, {EINSUM}, "l/tp e"},
      {"l/tp e, l e -> l/tp e", &tp8, {{"l", 4096}, {"e", 1024}}, {y(SPLIT, "tp", "l"), EINSUM}, "l/tp e"},
      // Gathering x would compute the whole product on every rank: computing on x's shards and
      // gathering the result wins when the arithmetic dominates.
      {"l/tp e, e f -> l f", &tp8, {{"l", 4096}, {"e", 1024}, {"f", 4096}},
       {y(ADD_P, "tp"), EINSUM, z(GATHER, "tp", "l")}, "l e f"},
      {"l e, e f -> l/tp f", &tp8, {{"l", 4096}, {"e", 1024}, {"f", 4096}},
       {x(SPLIT, "tp", "l"), y(ADD_P, "tp"), EINSUM}, "l/tp e f"},
      {"l/tp e, e f/tp -> l f/tp", &tp8, {{"l", 4096}, {"e", 1024}, {"f", 4096}},
       {x(GATHER_P, "tp", "l"), EINSUM}, "l e f/tp"},
      {"l f/tp, f/tp e -> l/tp e", &tp8, {{"l", 4096}, {"e", 1024}, {"f", 4096}},
       {EINSUM, z(RS, "tp", "l")}, "l f/tp e"},
      {"l f, f/tp e -> l e", &tp8, {{"l", 4096}, {"e", 1024}, {"f", 4096}},
       {x(SPLIT, "tp", "f"), EINSUM, z(ALLREDUCE, "tp")}, "l f/tp e"},
      // Post-contraction all-to-all (the original needed shapes and a runtime guard).
      {"l/tp e, e f -> l f/tp", &tp8, {{"l", 4096}, {"e", 1024}, {"f", 4096}},
       {y(ADD_P, "tp"), EINSUM, z(ALLTOALL)}, "l/tp e f"},
      {"b h q/tp d, b h k/tp d -> b h q/tp k", &tp8,
       {{"b", 8}, {"h", 16}, {"q", 2048}, {"k", 2048}, {"d", 64}}, {y(GATHER_P, "tp", "k"), EINSUM},
       "b h q/tp d k"},
      // Attention values: the original gathered q and reduce-scattered (fwd AG + RS); here only V's
      // k is gathered (backward reduce-scatters its gradient).
      {"b h q/tp k, b h k/tp d -> b h q/tp d", &tp8,
       {{"b", 8}, {"h", 16}, {"q", 2048}, {"k", 2048}, {"d", 64}}, {y(GATHER_P, "tp", "k"), EINSUM},
       "b h q k/tp d"},
      // Crossed: the original moved y's f and e (3 steps) and reduce-scattered f. With a
      // reduce-scatter that packs instead of all-reducing (comm/collectives.hpp), reduce-scattering
      // l beats gathering e on both operands (which copies x's inner e twice).
      {"l/sp e/dp, e/sp f/dp -> l/sp f/dp", &mesh24, {{"l", 4096}, {"e", 4096}, {"f", 4096}},
       {x(ALLTOALL), x(ADD_P, "dp"), EINSUM, z(RS, "sp", "l")}, "l/sp e/dp f"},
      {"b l e/dp, b e/sp f -> b/dp l f", &mesh24, {{"b", 64}, {"l", 256}, {"e", 1024}, {"f", 256}},
       {x(ALLTOALL), y(SPLIT, "dp", "b"), EINSUM, z(ALLREDUCE, "sp")}, "b l e/dp f"},
      {"a/dp k, k/sp b -> a/dp b/sp", &mesh24, {{"a", 1024}, {"k", 4096}, {"b", 4096}},
       {x(SPLIT, "sp", "k"), y(ADD_P, "dp"), EINSUM, z(RS, "sp", "b")}, "a/dp k/sp b"},
      // With a as long as k the result's reduce-scatter along its inner axis b (an all-reduce and
      // a slice, comm/collectives.hpp) costs more than moving y by all-to-all.
      {"a/dp k, k/sp b -> a/dp b/sp", &mesh24, {{"a", 4096}, {"k", 4096}, {"b", 4096}},
       {x(ADD_P, "sp"), y(ALLTOALL), y(ADD_P, "dp"), EINSUM}, "a/dp k/sp b"},
      // Two crossed contractions on a 2x4 mesh (NotImplementedError in the original).
      {"a k/dp m/sp, k/sp m/dp b -> a/sp b/dp", &mesh24, {{"a", 1024}, {"k", 1024}, {"m", 1024}, {"b", 1024}},
       {y(ALLTOALL), EINSUM, z(RS, "sp", "a"), z(RS, "dp", "b")}, "a k/dp m/sp b"},
      {"a k/dp m/sp, k/sp m/dp b -> a/sp b/dp", &mesh222, {{"a", 1024}, {"k", 1024}, {"m", 1024}, {"b", 1024}},
       {y(ALLTOALL), EINSUM, z(RS, "sp", "a"), z(RS, "dp", "b")}, "a k/dp m/sp b"},
      // The original: x gathered a, split a and k; here one all-to-all does all three.
      {"a/tp k, k/tp b -> a/dp b", &mesh222, {{"a", 4096}, {"k", 4096}, {"b", 4096}},
       {x(ALLTOALL), y(ADD_P, "dp"), EINSUM, z(ALLREDUCE, "tp")}, "a/dp k/tp b"},
      {"a/tp k, k/tp b -> a/dp b", &dptp24, {{"a", 4096}, {"k", 4096}, {"b", 4096}},
       {x(ALLTOALL), y(ADD_P, "dp"), EINSUM, z(ALLREDUCE, "tp")}, "a/dp k/tp b"},
      // Owner swap + split of n as one all-to-all; three all-reduces as one.
      {"a k/dp m/sp n/tp, k/sp m/dp n b -> a b", &mesh222,
       {{"a", 256}, {"k", 256}, {"m", 256}, {"n", 256}, {"b", 256}},
       {y(ALLTOALL), EINSUM, z(ALLREDUCE, "dp-sp-tp")}, "a k/dp m/sp n/tp b"},
      // Beyond the original: summed away sharded axis, reduced.
      {"b/dp c, c -> c", &dp8, {{"b", 100000}, {"c", 50}}, {y(ADD_P, "dp"), EINSUM, z(ALLREDUCE, "dp")}, ""},
      {"a k, k b -> a b // tp", &tp8, {{"a", 256}, {"k", 256}, {"b", 256}}, {EINSUM, z(ADD_P, "tp")}, ""},
      {"a k // dp, k/sp b -> a b/sp", &mesh24, {{"a", 256}, {"k", 256}, {"b", 256}},
       {x(ADD_P, "sp"), y(ALLTOALL), y(ADD_P, "dp"), EINSUM, z(ALLREDUCE, "dp")}, ""},
  };
  for (const auto& r : rows) {
    INFO(r.notation << " on " << r.mesh->joined_names());
    const auto p = plan_of(r.notation, *r.mesh, r.global);
    CHECK(tagged(p.chosen) == r.steps);
    check_cheapest(p);
    if (!r.original.empty()) {
      const auto* o = candidate(p, r.original);
      REQUIRE(o != nullptr);
      CHECK(p.chosen.score <= o->score);
    }
  }
}

TEST_CASE("binary planner: the cheapest candidate under every policy", "[binary][planner]") {
  const std::vector<std::pair<std::string, const es::MeshShape*>> cases{
      {"a/dp k, k/sp b -> a/dp b/sp", &mesh24},     {"l/sp e/dp, e/sp f/dp -> l/sp f/dp", &mesh42},
      {"b l e/dp, b e/sp f -> b/dp l f", &mesh24},  {"a k/dp m/sp, k/sp m/dp b -> a/sp b/dp", &mesh42},
      {"l/tp e, e f -> l f/tp", &tp8},              {"b n c, h/tp c -> b n h/tp", &tp8}};
  for (const auto& [notation, mesh] : cases)
    for (std::int64_t n : {3, 8, 17, 1024})
      for (auto policy : {es::Policy::training, es::Policy::inference, es::Policy::memory,
                          es::Policy::communication, es::Policy::latency}) {
        INFO(notation << " n=" << n << " policy " << static_cast<int>(policy));
        Global g;
        for (const char* a : {"a", "b", "c", "d", "e", "f", "h", "k", "l", "m", "n"}) g[a] = n;
        const auto p = plan_of(notation, *mesh, g, policy);
        check_cheapest(p);
        // The score is the policy's score of the candidate's estimate.
        for (const auto& a : p.alternatives) CHECK(a.score == plan::score(a.estimate, policy));
      }
}

TEST_CASE("binary planner: the estimate of the chosen plan", "[binary][planner]") {
  // Row-parallel on 8: one forward all-reduce of the (b n h) result, nothing backward.
  const auto p = plan_of("b n c/tp, h c/tp -> b n h", tp8, {{"b", 2}, {"n", 4}, {"c", 64}, {"h", 8}});
  CHECK(p.chosen.estimate.forward_collectives == 1);
  CHECK(p.chosen.estimate.backward_collectives == 0);
  CHECK(p.chosen.estimate.forward_bytes == Approx(2.0 * 7 / 8 * 2 * 4 * 8 * 8));
  CHECK(p.chosen.estimate.flops == Approx(2.0 * 2 * 4 * 8 * 8));  // c: 64 / 8 per rank
  // Kept partial: nothing at all.
  const auto q = plan_of("b n c/tp, h c/tp -> b n h // tp", tp8, {{"b", 2}, {"n", 4}, {"c", 64}, {"h", 8}});
  CHECK(q.chosen.estimate.forward_bytes == 0);
  CHECK(q.chosen.estimate.backward_bytes == 0);
  CHECK(q.chosen.estimate.forward_collectives + q.chosen.estimate.backward_collectives == 0);
}

TEST_CASE("binary planner: layouts of the chosen candidate", "[binary][planner]") {
  const auto p = plan_of("a/dp k, k/sp b -> a/dp b/sp", mesh24, {{"a", 1024}, {"k", 4096}, {"b", 4096}});
  CHECK(p.chosen.compute.str() == "a/dp k/sp b");
  CHECK(p.chosen.result.str() == "a/dp b // sp");
  REQUIRE(p.chosen.y_steps.size() == 1);
  CHECK(p.chosen.y_steps[0].after.str() == "k/sp b // dp");
  CHECK(p.equation == "ab,bc->ac");
  // The equation keeps each operand's axis order and writes the output's.
  const auto q = plan_of("e/sp f/dp, l/sp e/dp -> f/dp l/sp", mesh24, {{"l", 8}, {"e", 8}, {"f", 8}});
  CHECK(q.equation == "ab,ca->bc");
}

TEST_CASE("binary planner: candidates never shard two axes over one dimension", "[binary][planner]") {
  const auto p = plan_of("a k // dp, k/sp b -> a b/sp", mesh24, {{"a", 8}, {"k", 8}, {"b", 8}});
  for (const auto& c : p.alternatives) {
    INFO(c.compute.str());
    // x is partial over dp: none of its axes may be computed sharded over dp.
    CHECK(c.compute.group("a") != "dp");
    CHECK(c.compute.group("k") != "dp");
    std::vector<std::string> used;
    for (const auto& a : c.compute.axes)
      if (!a.group.empty()) {
        CHECK(std::find(used.begin(), used.end(), a.group.name()) == used.end());
        used.push_back(a.group.name());
      }
  }
}

TEST_CASE("binary planner: a result axis is never sharded over a partial input's group",
          "[binary][planner]") {
  // x partial over dp, y sharding the free axis b over dp: a candidate computing b/dp would hold,
  // on rank r of dp, x_r times y's block r of b, whose sum over dp is nothing. Such candidates are
  // invalid, and a candidate whose moves the unary planner refuses is skipped, not fatal.
  for (const std::string notation : {"a k // dp, k b/dp -> a b/dp", "a k // dp, k/sp b/dp -> a/dp b"}) {
    INFO(notation);
    plan::BinaryPlan p;
    REQUIRE_NOTHROW(p = plan_of(notation, mesh24, {{"a", 8}, {"k", 8}, {"b", 8}}));
    for (const auto& c : p.alternatives) {
      INFO(c.compute.str() << " -> " << c.result.str());
      for (const auto& a : c.result.axes) CHECK_FALSE(a.group.overlaps(c.result.partial));
    }
  }
}

TEST_CASE("binary planner: errors", "[binary][planner]") {
  const Global g{{"a", 4}, {"k", 4}, {"b", 4}};
  // Both inputs partial over the same group: a product of partial sums is not a partial sum.
  CHECK_THROWS_WITH(plan_of("a k // dp, k b // dp -> a b", mesh24, g), Catch::Contains("found both inputs partial"));
  CHECK_THROWS_AS(plan_of("a k // dp, k b // dp -> a b", mesh24, g), es::Error);
  // Overlapping groups count too (dp and dp-sp share dp).
  CHECK_THROWS_WITH(plan_of("a k // dp, k b // dp-sp -> a b", mesh24, g), Catch::Contains("found both inputs partial"));
  CHECK_THROWS_WITH(plan_of("a k // (sp,dp), k b // dp -> a b", mesh24, g), Catch::Contains("found both inputs partial"));
  // Partials over different groups are fine.
  CHECK_NOTHROW(plan_of("a k // dp, k b // sp -> a b", mesh24, g));
}

TEST_CASE("binary planner: an output partial means the same on every candidate", "[binary][planner]") {
  // The sum over g of the outputs of `x, y -> z // g` must not depend on the plan. Candidates whose
  // contraction produces the partial over g give the product; a candidate that added it afterwards
  // by identity forward (z: identity_forward_allreduce_backward) would give |g| times the product.
  // When an input can produce the partial (it shards a summed axis over g, or is partial over g),
  // every candidate must produce it: these once picked the identity kind (`a k/dp, k/sp b -> a b //
  // dp` on (2,4) chose `a k/sp b` + identity over dp under the training policy at k = 4096, and
  // under the memory policy at k = 64).
  struct Case {
    std::string notation;
    const es::MeshShape* mesh;
    Global global;
    es::Policy policy;
  };
  const std::vector<Case> cases{
      {"a k/dp, k/sp b -> a b // dp", &mesh24, {{"a", 8}, {"k", 4096}, {"b", 8}}, es::Policy::training},
      {"a k/dp, k/sp b -> a b // dp", &mesh24, {{"a", 8}, {"k", 64}, {"b", 8}}, es::Policy::memory},
      {"a k/tp, k b -> a b // tp", &tp8, {{"a", 8}, {"k", 64}, {"b", 64}}, es::Policy::communication},
  };
  for (const auto& c : cases) {
    INFO(c.notation << " policy " << static_cast<int>(c.policy));
    const auto p = plan_of(c.notation, *c.mesh, c.global, c.policy);
    for (const auto& a : p.alternatives) {
      INFO("candidate " << a.compute.str());
      for (const auto& s : a.z_steps) CHECK(s.kind != plan::StepKind::add_partial);
    }
    for (const auto& s : p.chosen.z_steps) CHECK(s.kind != plan::StepKind::add_partial);
  }
  // A partial no input can produce is introduced by identity forward (the unary convention), and
  // one the contraction produces is kept beside it.
  const auto p = plan_of("a k/dp, k/dp b -> a b // (dp,sp)", mesh24, {{"a", 8}, {"k", 8}, {"b", 8}});
  CHECK(tagged(p.chosen) == Names{EINSUM, z(ADD_P, "sp")});
  for (const auto& a : p.alternatives) CHECK(a.result.partial.contains(0));  // partial over dp
}

TEST_CASE("binary planner: a compound output partial equals the list of its dimensions",
          "[binary][planner]") {
  // `// dp-sp` and `// (dp,sp)` are the same sum (over every rank of dp and sp): the contraction's
  // partial sums over dp and sp already are the output; nothing moves. (These once all-reduced over
  // dp-sp and added dp-sp back by identity forward: |dp|*|sp| times the product.)
  const auto p = plan_of("a/dp b/sp c, a/dp b/sp d -> c d // dp-sp", mesh24,
                         {{"a", 8}, {"b", 8}, {"c", 3}, {"d", 5}});
  CHECK(tagged(p.chosen) == Names{EINSUM});
  const auto q = plan_of("a k/dp-sp, k/dp-sp b -> a b // (dp,sp)", mesh24, {{"a", 3}, {"k", 8}, {"b", 2}});
  CHECK(tagged(q.chosen) == Names{EINSUM});
  CHECK(layouts("a k // (sp,dp), k b -> a b", mesh24).x == layouts("a k // dp-sp, k b -> a b", mesh24).x);
}

}  // namespace test_binary_planner
