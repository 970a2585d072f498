// Parameter states without MPI: the layout rules, gradient and init-sync values, merges, the spec
// round trip, attachment to tensors (all-or-nothing) and shard metadata from mesh coordinates.

#include <ATen/ATen.h>

#include "einshard/model.hpp"
#include "einshard/plan/binary.hpp"
#include "einshard/plan/param_grad.hpp"
#include "einshard/plan/policy_scope.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace test_parameter_state {

namespace es = einshard;

namespace {

const es::MeshShape mesh2{{"dp", "tp"}, {2, 4}};
const es::MeshShape mesh3{{"dp", "sp", "tp"}, {2, 2, 2}};

es::ParameterState make(std::string_view layout, std::optional<std::string_view> grad = std::nullopt,
                        std::optional<std::string_view> init = std::nullopt, const es::MeshShape& m = mesh2,
                        bool notation = false) {
  return es::make_parameter_state(layout, m, grad, init, "test", notation);
}

using einshard::testing::error_of;

#define REQUIRE_ERROR(expr, fragment) \
  REQUIRE_THAT(error_of([&] { (void)(expr); }), Catch::Contains(fragment))

}  // namespace

TEST_CASE("parameter layouts: axes, shard groups, footprint", "[model][state]") {
  auto s = make("out/tp in");
  REQUIRE(s.axes.size() == 2);
  CHECK(s.axes[0].axis == "out");
  CHECK(s.axes[0].group == "tp");
  CHECK(s.axes[1].group.empty());
  CHECK(s.layout() == "out/tp in");
  CHECK(s.shard_groups() == std::vector<std::string>{"tp"});
  CHECK(s.footprint() == "tp");
  // A compound group is spelled in mesh order, whatever the layout wrote.
  auto c = make("a/sp-dp b", std::nullopt, std::nullopt, mesh3);
  CHECK(c.axes[0].group == "dp-sp");
  CHECK(c.footprint() == "dp-sp");
  auto e = make("... c/tp");
  CHECK(e.ellipsis);
  CHECK(e.ellipsis_at == 0);
  CHECK(e.layout() == "... c/tp");
  auto m = make("a ... b");
  CHECK(m.ellipsis_at == 1);
}

TEST_CASE("parameter layouts: every rule rejects with a message", "[model][state]") {
  REQUIRE_ERROR(make("a/tp b/tp"), "overlapping mesh groups 'tp' and 'tp'");
  REQUIRE_ERROR(make("a/dp-tp b/tp"), "overlapping mesh groups");
  REQUIRE_ERROR(make("a/dp-sp b/sp-tp", std::nullopt, std::nullopt, mesh3), "overlapping");
  REQUIRE_ERROR(make("a a"), "appears more than once");
  REQUIRE_ERROR(make("a/foo b"), "references unknown mesh dimensions: foo");
  REQUIRE_ERROR(make("a/dp-foo b"), "unknown mesh dimensions: dp-foo");
  REQUIRE_ERROR(make("(a b) c"), "factored group");
  REQUIRE_ERROR(make("a b // tp"), "partial");
  REQUIRE_ERROR(make("a -> b"), "invalid parameter layout");
  REQUIRE_ERROR(make("a/"), "invalid parameter layout");
  // Distinct groups on distinct axes are fine.
  CHECK_NOTHROW(make("a/dp b/tp"));
  CHECK_NOTHROW(make("a/dp b/sp c/tp", std::nullopt, std::nullopt, mesh3));
}

TEST_CASE("gradient values: modes, backends, schedules and their errors", "[model][state]") {
  CHECK(make("out in").grad.mode == es::GradMode::none);        // a bare layout reduces nothing
  CHECK_FALSE(make("out in").grad.explicit_none);
  CHECK(make("out in", std::nullopt, std::nullopt, mesh2, true).grad.mode == es::GradMode::pending);
  auto none = make("out in", "none");
  CHECK(none.grad.mode == es::GradMode::none);
  CHECK(none.grad.explicit_none);
  auto g = make("out/tp in", "dp");
  CHECK(g.grad.mode == es::GradMode::given);
  CHECK(g.grad.groups == std::vector<std::string>{"dp"});
  CHECK(g.reduce() == std::vector<std::string>{"dp"});
  auto a = make("out in", "async");
  CHECK(a.pending());
  CHECK(a.grad.schedule == es::GradSchedule::async);
  CHECK(make("out in", "ddp").grad.backend == es::GradBackend::ddp);
  CHECK(make("out in", "external").grad.backend == es::GradBackend::external);
  auto gs = make("out in", "dp-tp:async");
  CHECK(gs.grad.groups == std::vector<std::string>{"dp-tp"});
  CHECK(gs.grad.schedule == es::GradSchedule::async);
  CHECK(make("out in", "tp:ddp").grad.backend == es::GradBackend::ddp);
  auto ext = make("out/tp in", "tp:external");  // external is exempt from the overlap rule
  CHECK(ext.reduce().empty());
  auto list = make("a b", "dp, tp");
  CHECK(list.grad.groups == std::vector<std::string>{"dp", "tp"});
  REQUIRE_ERROR(make("out in", "async:ddp"), "requires an explicit mesh group");
  REQUIRE_ERROR(make("out in", "dp:bogus"), "unknown grad annotation suffix 'bogus'");
  REQUIRE_ERROR(make("out in", ":async"), "invalid grad annotation");
  REQUIRE_ERROR(make("out in", "dp:"), "invalid grad annotation");
  REQUIRE_ERROR(make("out in", "foo"), "grad references unknown mesh dimensions: foo");
  REQUIRE_ERROR(make("out/tp in", "tp"), "gradient group 'tp' overlaps the shard dimensions");
  REQUIRE_ERROR(make("out/tp in", "dp-tp"), "overlaps the shard dimensions");
  REQUIRE_ERROR(make("out in", "dp,dp-tp"), "share the mesh dimension 'dp'");
  REQUIRE_ERROR(make("out in", "dp,"), "empty group");
}

TEST_CASE("init-sync values: inferred from the footprint, given, none, external", "[model][state]") {
  auto s = make("out/tp in");
  CHECK(s.init_sync.mode == es::InitSyncMode::inferred);
  CHECK(s.shared() == std::vector<std::string>{"dp"});
  CHECK(make("out in").shared() == std::vector<std::string>{"dp-tp"});
  CHECK(make("out/dp-tp in").shared().empty());
  CHECK(make("a/sp b", std::nullopt, std::nullopt, mesh3).shared() == std::vector<std::string>{"dp-tp"});
  CHECK(make("out/tp in", std::nullopt, "dp").init_sync.mode == es::InitSyncMode::given);
  CHECK(make("out/tp in", std::nullopt, "none").shared().empty());
  CHECK(make("out/tp in", std::nullopt, "external").init_sync.mode == es::InitSyncMode::external);
  REQUIRE_ERROR(make("out/tp in", std::nullopt, "tp"), "init_sync group 'tp' overlaps the shard dimensions");
  REQUIRE_ERROR(make("out/tp in", std::nullopt, "dp-tp"), "overlaps the shard dimensions");
  REQUIRE_ERROR(make("out in", std::nullopt, "dp:async"), "do not accept suffixes");
  REQUIRE_ERROR(make("out in", std::nullopt, "zz"), "init_sync references unknown mesh dimensions: zz");
}

TEST_CASE("annotations inside a layout, and the spec round trip", "[model][state]") {
  auto s = make("out/tp in [param, grad=dp:async, init_sync=dp]");
  CHECK(s.grad.groups == std::vector<std::string>{"dp"});
  CHECK(s.grad.schedule == es::GradSchedule::async);
  CHECK(s.init_sync.mode == es::InitSyncMode::given);
  REQUIRE_ERROR(make("out in [param, grad=dp]", "tp"), "grad given both");
  REQUIRE_ERROR(make("out in [param, init_sync=dp]", std::nullopt, "tp"), "init_sync given both");
  for (const char* layout : {"out/tp in [param, grad=dp]", "out/tp in [param, grad=none, init_sync=none]",
                             "... c [param, grad=dp-tp:ddp, init_sync=external]", "a/dp b [param, grad=tp:async]",
                             "k [param, grad=external]"}) {
    auto a = make(layout);
    auto b = make(a.spec());
    CHECK(a.spec() == b.spec());
    CHECK(a.grad == b.grad);
    CHECK(a.init_sync == b.init_sync);
    CHECK((a.axes == b.axes));
  }
  CHECK(make("out/tp in", "dp").spec() == "out/tp in [param, grad=dp]");
  CHECK(make("x", "none", "none").spec() == "x [param, grad=none, init_sync=none]");
}

TEST_CASE("merging registrations: the conflict rules", "[model][state][merge]") {
  const auto merged = [](const es::ParameterState& a, const es::ParameterState& b) { return es::merge(a, b, "test"); };
  // Layouts must agree.
  REQUIRE_ERROR(merged(make("out/tp in"), make("out in")), "cannot be registered with the layout 'out in'");
  REQUIRE_ERROR(merged(make("a b"), make("a ... b")), "cannot be registered");
  REQUIRE_ERROR(merged(make("a b"), make("a b", std::nullopt, std::nullopt, mesh3)), "different mesh");
  // Nothing given yields to anything; anything stays over nothing.
  CHECK(merged(make("out in"), make("out in", "dp")).grad.groups == std::vector<std::string>{"dp"});
  CHECK(merged(make("out in", "dp"), make("out in")).grad.groups == std::vector<std::string>{"dp"});
  // An explicit none conflicts with any non-none, either way round, but not with nothing or none.
  REQUIRE_ERROR(merged(make("out in", "none"), make("out in", "dp")), "explicit grad=none");
  REQUIRE_ERROR(merged(make("out in", "dp"), make("out in", "none")), "explicit grad=none");
  REQUIRE_ERROR(merged(make("out in", "none"), make("out in", "async")), "explicit grad=none");
  CHECK(merged(make("out in", "none"), make("out in")).grad.explicit_none);
  CHECK(merged(make("out in", "none"), make("out in", "none")).grad.explicit_none);
  // Pending yields to concrete; concrete stays over pending; pending + pending stays pending.
  CHECK(merged(make("out in", "async"), make("out in", "dp")).grad.mode == es::GradMode::given);
  CHECK(merged(make("out in", "dp"), make("out in", "async")).grad.mode == es::GradMode::given);
  CHECK(merged(make("out in", "async"), make("out in", "ddp")).pending());
  // async refines the default schedule, from either side.
  CHECK(merged(make("out in", "dp"), make("out in", "async")).grad.schedule == es::GradSchedule::async);
  CHECK(merged(make("out in", "async"), make("out in", "dp")).grad.schedule == es::GradSchedule::async);
  // Concrete groups must cover the same dimensions (compound or list alike).
  CHECK_NOTHROW(merged(make("out in", "dp-tp"), make("out in", "tp,dp")));
  REQUIRE_ERROR(merged(make("out in", "dp"), make("out in", "tp")), "gradient groups 'dp' and 'tp' differ");
  // Backends must agree where both name one.
  REQUIRE_ERROR(merged(make("out in", "ddp"), make("out in", "dp:external")), "backends differ");
  CHECK(merged(make("out in", "ddp"), make("out in", "dp")).grad.backend == es::GradBackend::ddp);
  // Init sync: inferred yields; two given values must agree.
  CHECK(merged(make("out/tp in"), make("out/tp in", std::nullopt, "none")).shared().empty());
  CHECK(merged(make("out/tp in", std::nullopt, "none"), make("out/tp in")).init_sync.mode == es::InitSyncMode::none);
  REQUIRE_ERROR(merged(make("out/tp in", std::nullopt, "none"), make("out/tp in", std::nullopt, "dp")),
                "init_sync values differ");
  REQUIRE_ERROR(merged(make("out/tp in", std::nullopt, "external"), make("out/tp in", std::nullopt, "dp")),
                "init_sync values differ");
  // The merged state names both sources.
  auto a = make("out in");
  auto b = make("out in", "dp");
  b.source = "second";
  CHECK_THAT(merged(a, b).source, Catch::Contains("second"));
}

TEST_CASE("attaching states to tensors: retrieval, merge, ranks, all-or-nothing", "[model][registry]") {
  auto w = at::zeros({4, 3});
  auto b = at::zeros({4});
  CHECK_FALSE(es::has_parameter_state(w));
  REQUIRE_ERROR(es::parameter_state(w), "found none");
  es::register_parameter_state(w, make("out/tp in"));
  CHECK(es::parameter_state(w).layout() == "out/tp in");
  // The same tensor seen through another handle (as a module's parameters are) has the state.
  at::Tensor alias = w;
  CHECK(es::has_parameter_state(alias));
  CHECK_FALSE(es::has_parameter_state(w.detach()));  // a new tensor
  es::register_parameter_state(w, make("out/tp in", "dp"));
  CHECK(es::parameter_state(w).reduce() == std::vector<std::string>{"dp"});
  REQUIRE_ERROR(es::register_parameter_state(w, make("out/tp in", "none")), "explicit grad=none");
  CHECK(es::parameter_state(w).reduce() == std::vector<std::string>{"dp"});  // unchanged
  REQUIRE_ERROR(es::register_parameter_state(b, make("out in")), "names 2 dimensions, but the parameter has 1");
  REQUIRE_ERROR(es::register_parameter_state(b, make("a b ...")), "names 2 or more dimensions");
  es::register_parameter_state(b, make("..."));
  CHECK(es::has_parameter_state(b));
  es::set_parameter_state(w, make("out in"));  // replaces
  CHECK(es::parameter_state(w).layout() == "out in");
  es::clear_parameter_state(w);
  CHECK_FALSE(es::has_parameter_state(w));
  // A batch is all-or-nothing: the second entry fails, the first is not attached.
  auto x = at::zeros({2});
  auto y = at::zeros({2, 2});
  REQUIRE_ERROR(es::detail::ParameterRegistry::instance().attach({{x, make("a")}, {y, make("a")}}, "test"),
                "names 1 dimensions, but the parameter has 2");
  CHECK_FALSE(es::has_parameter_state(x));
  // The same tensor twice in one batch merges in order (conflicts included).
  es::detail::ParameterRegistry::instance().attach({{x, make("a")}, {x, make("a", "dp")}}, "test");
  CHECK(es::parameter_state(x).reduce() == std::vector<std::string>{"dp"});
  REQUIRE_ERROR(es::detail::ParameterRegistry::instance().attach({{y, make("a b", "dp")}, {y, make("a b", "tp")}}, "test"),
                "differ");
  CHECK_FALSE(es::has_parameter_state(y));
}

TEST_CASE("a dead tensor's state does not leak to a new one", "[model][registry]") {
  for (int i = 0; i < 300; ++i) {
    auto t = at::zeros({3});
    CHECK_FALSE(es::has_parameter_state(t));
    es::register_parameter_state(t, make("a", "dp"));
  }
}

TEST_CASE("shard metadata from mesh coordinates: even, uneven, compound, ellipsis, shapes", "[model][metadata]") {
  const std::vector<std::int64_t> global{10, 3};
  auto s = make("out/tp in");
  // tp has 4 ranks: the split rule gives 3, 3, 3, 1.
  const std::vector<std::int64_t> expect_begin{0, 3, 6, 9}, expect_size{3, 3, 3, 1};
  for (int dp = 0; dp < 2; ++dp)
    for (int tp = 0; tp < 4; ++tp) {
      const std::vector<int> coords{dp, tp};
      auto m = es::param_shard_metadata(s, global, coords);
      CHECK(m.global_shape == global);
      CHECK(m.local_slices[0].first == expect_begin[tp]);
      CHECK(m.local_slices[0].second == expect_begin[tp] + expect_size[tp]);
      CHECK(m.local_shape == std::vector<std::int64_t>{expect_size[tp], 3});
      CHECK(m.shard_dims == std::vector<std::string>{"tp", ""});
    }
  // A compound group ranks row-major: dp-tp coordinate = dp * 4 + tp; 17 over 8 is 2*7 + 3.
  auto c = make("n/dp-tp");
  for (int dp = 0; dp < 2; ++dp)
    for (int tp = 0; tp < 4; ++tp) {
      const std::vector<int> coords{dp, tp};
      const std::vector<std::int64_t> g{17};
      auto m = es::param_shard_metadata(c, g, coords);
      const int k = dp * 4 + tp;
      CHECK(m.local_slices[0].first == 2 * k);
      CHECK(m.local_shape[0] == (k == 7 ? 3 : 2));
    }
  // An ellipsis covers whole dimensions; named axes around it keep their sharding.
  auto e = make("a/tp ... b");
  const std::vector<int> coords{1, 2};
  const std::vector<std::int64_t> g4{8, 5, 6, 7};
  auto m = es::param_shard_metadata(e, g4, coords);
  CHECK(m.local_shape == std::vector<std::int64_t>{2, 5, 6, 7});
  CHECK(m.local_slices[0] == std::pair<std::int64_t, std::int64_t>{4, 6});
  // Given shapes (uneven as the caller wants) win over the split rule.
  auto u = es::param_shard_metadata(s, global, coords, es::Shapes{{"tp", {1, 2, 3, 4}}});
  CHECK(u.local_slices[0] == std::pair<std::int64_t, std::int64_t>{3, 6});
  REQUIRE_ERROR(es::param_shard_metadata(s, global, coords, es::Shapes{{"tp", {1, 1, 1, 1}}}), "sum to 4");
  const std::vector<std::int64_t> g1{10};
  REQUIRE_ERROR(es::param_shard_metadata(s, g1, coords), "global shape has 1");
  const std::vector<int> bad{0};
  REQUIRE_ERROR(es::param_shard_metadata(s, global, bad), "expected 2 mesh coordinates");
  // Empty shards are shards too.
  const std::vector<std::int64_t> g3{3, 1};
  auto z = es::param_shard_metadata(s, g3, std::vector<int>{0, 0});
  CHECK(z.local_shape == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("policies: resolution order, nesting scopes, custom weights", "[model][policy]") {
  CHECK(es::resolve_policy(std::nullopt) == es::PlanPolicy(es::Policy::training));
  es::set_default_policy(es::Policy::memory);
  CHECK(es::resolve_policy(std::nullopt) == es::PlanPolicy(es::Policy::memory));
  {
    es::PolicyScope outer(es::Policy::inference);
    CHECK(es::resolve_policy(std::nullopt) == es::PlanPolicy(es::Policy::inference));
    {
      const es::PolicyWeights w{.forward = 1, .backward = 0, .bytes = 1e-9};
      es::PolicyScope inner(w);
      CHECK(es::resolve_policy(std::nullopt) == es::PlanPolicy(w));
      CHECK(es::resolve_policy(es::Policy::latency) == es::PlanPolicy(es::Policy::latency));  // the call wins
    }
    CHECK(es::resolve_policy(std::nullopt) == es::PlanPolicy(es::Policy::inference));
  }
  CHECK(es::resolve_policy(std::nullopt) == es::PlanPolicy(es::Policy::memory));
  es::set_default_policy(es::Policy::training);
  // Weights reproduce the named modes they spell out, and keys tell policies apart.
  es::plan::Estimate e;
  e.forward_bytes = 1e6, e.backward_bytes = 3e6, e.forward_collectives = 2, e.backward_collectives = 3;
  e.flops = 1e7, e.peak_bytes = 5e5;
  const es::PlanPolicy training(es::PolicyWeights{}), inference(es::PolicyWeights{.forward = 1, .backward = 0});
  CHECK(training.score(e) == Approx(es::plan::score(e, es::Policy::training)));
  CHECK(inference.score(e) == Approx(es::plan::score(e, es::Policy::inference)));
  const es::PlanPolicy bytes(es::PolicyWeights{.forward = 0, .backward = 0, .bytes = 2});
  CHECK(bytes.score(e) == Approx(8e6));
  const es::PlanPolicy calls(es::PolicyWeights{.forward = 0, .backward = 0, .collectives = 1, .peak_bytes = 1});
  CHECK(calls.score(e) == Approx(5 + 5e5));
  CHECK(training.key() != es::PlanPolicy(es::Policy::training).key());
  CHECK(bytes.key() != calls.key());
  CHECK(bytes.key() == es::PlanPolicy(es::PolicyWeights{.forward = 0, .backward = 0, .bytes = 2}).key());
  CHECK_THAT(bytes.str(), Catch::Contains("custom"));
  CHECK(es::PlanPolicy(es::Policy::latency).str() == "latency");
}

TEST_CASE("a [param] operand's plan: the partial over dimensions it is replicated on is deferred", "[model][plan]") {
  namespace plan = es::plan;
  const es::MeshShape mesh{{"dp", "tp"}, {2, 4}};
  const std::map<std::string, std::int64_t, std::less<>> global{{"b", 8}, {"c", 6}, {"h", 12}};
  auto plan_for = [&](const std::string& source) {
    const auto parsed = es::notation::parse(source);
    REQUIRE(parsed.ok);
    const auto v = parsed.expression.view(source);
    const auto x = plan::layout_of(v, v.input(0), 0, mesh), y = plan::layout_of(v, v.input(1), 0, mesh),
               z = plan::layout_of(v, v.output(), 0, mesh);
    return std::tuple{plan::plan_binary(x, y, z, mesh, global, 8, es::Policy::training), x, y};
  };
  auto has_add_partial = [](const std::vector<plan::Step>& steps) {
    return std::any_of(steps.begin(), steps.end(), [](const plan::Step& s) { return s.kind == plan::StepKind::add_partial; });
  };
  {  // column-parallel weight, batch over dp: the weight's gradient is partial over dp
    auto [p, x, y] = plan_for("b/dp c, h/tp c -> b/dp h/tp");
    auto steps = p.chosen.y_steps;
    REQUIRE(has_add_partial(steps));
    CHECK(plan::defer_parameter_partial(steps, y, mesh) == "dp");
    CHECK_FALSE(has_add_partial(steps));
    // Were the input a parameter: it is replicated over tp, where the computation is spread.
    auto xs = p.chosen.x_steps;
    CHECK(plan::defer_parameter_partial(xs, x, mesh) == "tp");
  }
  {  // a weight sharded over tp on the contracted axis, batch over dp
    auto [p, x, y] = plan_for("b/dp c, c/tp h -> b/dp h");
    auto steps = p.chosen.y_steps;
    CHECK(plan::defer_parameter_partial(steps, y, mesh) == "dp");
  }
  {  // replicated data and weight, nothing spread: nothing arrives partial
    auto [p, x, y] = plan_for("b c, h c -> b h");
    auto steps = p.chosen.y_steps;
    CHECK(plan::defer_parameter_partial(steps, y, mesh).empty());
    CHECK(steps.size() == p.chosen.y_steps.size());
  }
}

#undef REQUIRE_ERROR

}  // namespace test_parameter_state
