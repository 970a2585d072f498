// The FFT planner (plan/fft.hpp) on its own: pure, no MPI. Which axes each local FFT stage
// transforms, how many transposes run, and the order constraints of real transforms.

#include <einshard/notation/parser.hpp>
#include <einshard/plan/fft.hpp>
#include <einshard/plan/fft_factored.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

namespace test_fft_plan {

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
  // The only axis: transformed in place over its group, then moved to the output's group.
  const auto lone = make("x/p -> k/q", {{"x", "k"}});
  REQUIRE(lone.stages.size() == 2);
  CHECK(lone.stages[0].kind == plan::FftStage::Kind::factored);
  CHECK(lone.stages[0].after.str() == "k/p");
  CHECK(lone.stages[1].after.str() == "k/q");
  CHECK(make("k/p -> x/p", {{"k", "x"}}, true, true).stages.at(0).op == plan::FftOp::real_inverse);
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

TEST_CASE("factored 1-D FFT: balanced factors, Bluestein where none exist", "[spectral][fft][plan]") {
  auto f = [](std::int64_t n, std::int64_t p) {
    const auto r = plan::factor_fft(n, p);
    CHECK(r.m1 * r.m2 == r.m);
    return std::vector<std::int64_t>{r.m, r.m1, r.m2};
  };
  CHECK(f(64, 4) == std::vector<std::int64_t>{64, 8, 8});
  CHECK(f(1 << 20, 8) == std::vector<std::int64_t>{1 << 20, 1024, 1024});
  CHECK(f(36, 4) == std::vector<std::int64_t>{36, 6, 6});
  // A prime: the least 5-smooth m >= 2n-1 = 193 is 200 = 10 x 20.
  CHECK(f(97, 2) == std::vector<std::int64_t>{200, 10, 20});
  // 2 x 53 on 4 ranks: 2 rows would leave two ranks idle; 216 = 12 x 18 balances.
  CHECK(f(106, 4) == std::vector<std::int64_t>{216, 12, 18});
  CHECK(f(106, 2) == std::vector<std::int64_t>{106, 2, 53});
  // Short lengths whose Bluestein length is no better stay as they are.
  CHECK(f(2, 4) == std::vector<std::int64_t>{2, 1, 2});
  CHECK(f(1, 8) == std::vector<std::int64_t>{1, 1, 1});
  CHECK(plan::detail::next_smooth(193) == 200);
}

TEST_CASE("factored 1-D FFT: six-step schedules move every element once per transpose", "[spectral][fft][plan]") {
  for (const int parts : {1, 2, 3, 5}) {
    const std::int64_t r1 = 6, r2 = 10;
    std::int64_t sent = 0, received = 0, kept = 0;
    for (int me = 0; me < parts; ++me) {
      const auto s = plan::plan_six_step(r1, r2, parts, me);
      for (const auto* t : {&s.to_columns, &s.to_rows, &s.to_output}) {
        for (const auto& m : t->sends) (m.peer == me ? kept : sent) += m.box.numel();
        for (const auto& m : t->recvs) received += m.peer == me ? 0 : m.box.numel();
      }
      CHECK(s.to_columns.out_shape == std::vector<std::int64_t>{r1, s.cols[static_cast<std::size_t>(me)]});
      CHECK(s.to_output.out_shape == std::vector<std::int64_t>{s.out_rows[static_cast<std::size_t>(me)], r1});
    }
    CHECK(sent == received);
    CHECK(sent + kept == 3 * r1 * r2);
  }
  // Ranges: uneven blocks into rows, clipped to the signal.
  const std::vector<plan::Range> from{{0, 0}, {0, 7}}, to{{0, 4}, {4, 7}};
  const auto s = plan::schedule_ranges(from, to, 1);
  REQUIRE(s.sends.size() == 2);
  CHECK(s.sends[0].peer == 0);
  CHECK(s.sends[0].box.size == std::vector<std::int64_t>{4});
  CHECK((plan::clip(to, 0, 5) == std::vector<plan::Range>{{0, 4}, {4, 5}}));
}

}  // namespace test_fft_plan
