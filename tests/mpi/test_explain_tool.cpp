// einshard-explain's engine (tools/einshard-explain/explain.hpp) plans from the mesh shape alone;
// here its plan is checked against what es::explain reports on live shards of the same global
// tensors: the same steps in the same order, and, with shards that are even at every world size
// (extents divisible by 24, or by twice the world size where 24 is not: 13, 16, 32 ranks), the
// model's per-rank bytes equal each rank's exact bytes sent, forward and backward, and the
// collectives counted agree (but for an all-to-all in which a rank has nothing to exchange).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "../../tools/einshard-explain/explain.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace test_explain_tool {

namespace es = einshard;

namespace {

struct Case {
  std::string notation;
  std::vector<std::string> whole;  ///< each input's spec with its sharding removed
  es::tools::GlobalSizes sizes;
};

std::vector<std::int64_t> shape_of(const std::string& spec, const es::tools::GlobalSizes& sizes) {
  std::vector<std::int64_t> s;
  std::size_t b = 0;
  while (b < spec.size()) {
    auto e = spec.find(' ', b);
    if (e == std::string::npos) e = spec.size();
    if (e > b) s.push_back(sizes.at(spec.substr(b, e - b)));
    b = e + 1;
  }
  return s;
}

/// The input specs of a notation, in order.
std::vector<std::string> input_specs(const std::string& notation) {
  std::vector<std::string> out;
  const auto lhs = notation.substr(0, notation.find("->"));
  std::size_t b = 0;
  while (b <= lhs.size()) {
    auto e = lhs.find(',', b);
    if (e == std::string::npos) e = lhs.size();
    auto s = lhs.substr(b, e - b);
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    out.push_back(s);
    b = e + 1;
  }
  return out;
}

void check_case(const es::Mesh& mesh, const Case& c) {
  INFO(c.notation);
  es::tools::ExplainRequest r{.notation = c.notation, .mesh = mesh.shape(), .sizes = c.sizes, .element = 8,
                              .dtype = "float64"};
  const auto predicted = es::tools::explain_request(r);

  // The same global tensors on every rank, cut into this rank's shards by einshard itself.
  at::manual_seed(7);
  const auto specs = input_specs(c.notation);
  std::vector<at::Tensor> shards;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto full = at::randn(shape_of(c.whole[i], c.sizes), at::kDouble);
    shards.push_back(c.whole[i] == specs[i] ? full
                                            : es::einshard(c.whole[i] + " -> " + specs[i], {full}, {.mesh = mesh}));
  }
  const auto ran = es::explain(c.notation, shards, {.mesh = mesh});

  REQUIRE(ran.steps.size() == predicted.steps.size());
  for (std::size_t i = 0; i < ran.steps.size(); ++i) {
    const auto& got = ran.steps[i];
    const auto& want = predicted.steps[i];
    INFO("step " << i << ": " << got.name << " " << got.before << " -> " << got.after);
    CHECK(got.name == want.name);
    CHECK(got.after == want.after.str());
    if (want.name == "rank_local_einsum") continue;
    CHECK(got.group == want.group);
    CHECK(static_cast<double>(got.forward.bytes_sent) == Approx(want.cost.forward_bytes).margin(0.5));
    CHECK(static_cast<double>(got.backward.bytes_sent) == Approx(want.cost.backward_bytes).margin(0.5));
    // The model counts an all-to-all as one collective on every rank; a rank with no message to
    // post in it (every rank, on a mesh of one) makes no call, and the plan that ran says so.
    const auto calls = [&](const es::StepCost& ran, int modelled) {
      return got.name == "alltoall_repartition" && ran.bytes_sent + ran.bytes_received == 0 ? 0 : modelled;
    };
    CHECK(got.forward.collectives == calls(got.forward, want.cost.forward_collectives));
    CHECK(got.backward.collectives == calls(got.backward, want.cost.backward_collectives));
  }
}

}  // namespace

TEST_CASE("einshard-explain's plan is the plan es::explain reports on live shards", "[explain][tool]") {
  const auto w = es::testing::world();
  // One mesh dimension of the whole world, and two (dp=2) where the world splits evenly.
  std::vector<es::Mesh> meshes{es::Mesh(MPI_COMM_WORLD, {w.size}, {"tp"})};
  if (w.size % 2 == 0 && w.size > 2) meshes.emplace_back(MPI_COMM_WORLD, std::vector<int>{2, w.size / 2},
                                                         std::vector<std::string>{"dp", "tp"});
  const std::int64_t e = 24 % w.size == 0 ? 24 : 2 * w.size;  // even over W and over (2, W/2)
  const es::tools::GlobalSizes s{{"b", e}, {"n", e}, {"c", 2 * e}, {"h", e}}, u{{"b", e}, {"c", 2 * e}};
  const std::vector<Case> cases{
      {"b n c, h/tp c -> b n h/tp", {"b n c", "h c"}, s},   // column-parallel: f on the input
      {"b n c/tp, h c/tp -> b n h", {"b n c", "h c"}, s},   // row-parallel: all-reduce of the result
      {"b n c/tp, h c/tp -> b/tp n h", {"b n c", "h c"}, s},  // reduce-scatter into the output
      {"b c/tp -> b/tp c", {"b c"}, u},                     // all-to-all
      {"b/tp c -> b c", {"b c"}, u},                         // all-gather
      {"b c -> b c/tp", {"b c"}, u},                         // split
  };
  for (const auto& mesh : meshes)
    for (const auto& c : cases) check_case(mesh, c);
}

TEST_CASE("einshard-explain's engine refuses what it cannot plan, with the planner's message", "[explain][tool]") {
  const es::MeshShape mesh{{"dp"}, {2}};
  es::tools::ExplainRequest r{.notation = "a b -> a/tp b", .mesh = mesh};
  CHECK_THROWS_WITH(es::tools::explain_request(r), Catch::Contains("unknown mesh dimension 'tp'"));
  r.notation = "a b -> a/dp b q";
  CHECK_THROWS_AS(es::tools::explain_request(r), es::NotationError);
  r.notation = "a b -> a/dp b";
  r.sizes = {{"a", 4}, {"z", 4}};
  CHECK_THROWS_WITH(es::tools::explain_request(r), Catch::Contains("axis 'z'"));
  CHECK_THROWS_AS(es::tools::parse_arguments({"a b -> b a"}), es::tools::UsageError);
  CHECK_THROWS_AS(es::tools::parse_arguments({"a b -> b a", "--mesh", "dp=0"}), es::tools::UsageError);
  const auto p = es::tools::parse_arguments({"a b -> b a", "--mesh", "dp=2,tp=4", "--shape", "a=3,b=5",
                                             "--dtype", "bfloat16", "--policy", "memory"});
  CHECK(p.mesh.names == std::vector<std::string>{"dp", "tp"});
  CHECK(p.mesh.sizes == std::vector<int>{2, 4});
  CHECK(p.sizes.at("b") == 5);
  CHECK(p.element == 2);
  CHECK(p.policy == es::Policy::memory);
}

}  // namespace test_explain_tool
