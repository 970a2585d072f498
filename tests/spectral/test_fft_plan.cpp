// The FFT planner (plan/fft.hpp) on its own: pure, no MPI. Which axes each local FFT stage
// transforms, how many transposes run, and the order constraints of real transforms.

#include <einshard/notation/parser.hpp>
#include <einshard/plan/fft.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

namespace es = einshard;
namespace plan = einshard::plan;

namespace {

const es::MeshShape mesh{{"p", "q"}, {2, 4}};

plan::FftPlan make(const std::string& text, const std::vector<std::pair<std::string, std::string>>& axes,
                   bool inverse = false, bool real = false, std::int64_t length = 8) {
  const auto form = plan::fft_parse_form(text);
  const auto parsed = es::notation::parse(form);
  REQUIRE(parsed.ok);
  auto p = plan::fft_problem(parsed.expression.view(form), text, axes, inverse, real, &mesh);
  for (auto& a : p.axes) {
    a.in_length = length;
    a.out_length = a.half ? (inverse ? 2 * (length - 1) : length / 2 + 1) : length;
  }
  return plan::plan_fft(p, mesh);
}

/// "fft(2 3) move fft(1)": the stages in short.
std::string shape(const plan::FftPlan& p) {
  std::string out;
  for (const auto& s : p.stages) {
    if (!out.empty()) out += ' ';
    if (s.kind == plan::FftStage::Kind::move) {
      out += "move";
      continue;
    }
    out += std::string(plan::fft_op_name(s.op)) + "(";
    for (std::size_t i = 0; i < s.dims.size(); ++i) out += (i ? " " : "") + std::to_string(s.dims[i]);
    out += ")";
  }
  return out;
}

}  // namespace

TEST_CASE("fft planner: the parse form keeps columns", "[spectral][fft][plan]") {
  CHECK(plan::fft_parse_form("b x -> b k") == "b x ,  b k ->  b k");
  CHECK(plan::fft_parse_form("b x").empty());
}

TEST_CASE("fft planner: slabs, transposed output, inverse", "[spectral][fft][plan]") {
  const std::vector<std::pair<std::string, std::string>> xyz{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
  const auto transposed = make("b x/p y z -> b kx ky/p kz", xyz);
  CHECK(shape(transposed) == "fft(2 3) move fft(1)");
  CHECK(transposed.transposes() == 1);
  const auto standard = make("b x/p y z -> b kx/p ky kz", xyz);
  CHECK(shape(standard) == "fft(2 3) move fft(1) move");
  CHECK(standard.transposes() == 2);
  // The inverse of the transposed layout goes back in one transpose.
  const auto back = make("b kx ky/p kz -> b x/p y z", {{"kx", "x"}, {"ky", "y"}, {"kz", "z"}}, true);
  CHECK(shape(back) == "ifft(1 3) move ifft(2)");
  CHECK(back.transposes() == 1);
  // An axis moving to another mesh dimension.
  CHECK(make("b x/p y z -> b kx ky/q kz", xyz).transposes() == 2);
}

TEST_CASE("fft planner: pencils and axes with no local partner", "[spectral][fft][plan]") {
  const std::vector<std::pair<std::string, std::string>> xyz{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
  // One transpose per sharded axis, each within its own mesh dimension.
  const auto pencil = make("x/p y/q z -> kx ky/q kz/p", xyz);
  CHECK(shape(pencil) == "fft(2) move fft(0) move fft(1) move");
  CHECK(pencil.stages[1].after.str() == "x y/q kz/p");
  // Nothing local: the first transpose joins two groups into a compound one.
  const auto both = make("x/p y/q -> kx ky", {{"x", "kx"}, {"y", "ky"}});
  CHECK(both.stages[0].kind == plan::FftStage::Kind::move);
  CHECK(both.stages[0].after.str() == "x y/p-q");
  CHECK_THROWS_WITH(make("x/p -> k/p", {{"x", "k"}}), Catch::Contains("the only axis"));
  CHECK_THROWS_WITH(make("x/p y/p -> kx ky", {{"x", "kx"}, {"y", "ky"}}), Catch::Contains("same mesh dimension"));
}

TEST_CASE("fft planner: real transforms start (forward) and end (inverse) with the half axis", "[spectral][fft][plan]") {
  const std::vector<std::pair<std::string, std::string>> f{{"x", "kx"}, {"y", "ky"}};
  // Sharded half axis forward: freed first, then one rfft with the half axis last.
  const auto fwd = make("b x y/p -> b kx ky/p", f, false, true);
  REQUIRE(fwd.stages.size() >= 2);
  CHECK(fwd.stages[0].kind == plan::FftStage::Kind::move);
  CHECK(fwd.stages[1].op == plan::FftOp::real_forward);
  CHECK(fwd.stages[1].dims.back() == 2);
  // Inverse: every other axis first, the half axis alone at the end.
  const auto inv = make("b kx ky/p -> b x y/p", {{"kx", "x"}, {"ky", "y"}}, true, true);
  const plan::FftStage* last_fft = nullptr;
  for (const auto& s : inv.stages)
    if (s.kind == plan::FftStage::Kind::fft) last_fft = &s;
  REQUIRE(last_fft != nullptr);
  CHECK(last_fft->op == plan::FftOp::real_inverse);
  CHECK(last_fft->dims == std::vector<std::int64_t>{2});
  CHECK(shape(inv).rfind("ifft(1)", 0) == 0);
}
