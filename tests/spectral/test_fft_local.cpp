// einfft on one process (every rank runs these alike): values and gradients against torch::fft on
// the same tensor, for renamed and permuted axes, forward and inverse, complex and real transforms,
// every norm mode, families, run-time notations, and the faults a call can have.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>
#include <einshard/exec/local_fft.hpp>  // the local FFT backend switch these tests set

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace test_fft_local {

namespace es = einshard;

namespace {

bool near(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::allclose(a, b, 1e-10, 1e-10);
}

/// Output and input gradient of `f` on a leaf copy of `x`, with upstream gradient `g`.
template <class F>
std::pair<at::Tensor, at::Tensor> run(F f, const at::Tensor& x, const at::Tensor& g) {
  auto leaf = x.detach().clone().requires_grad_(true);
  auto y = f(leaf);
  y.backward(g);
  return {y.detach(), leaf.grad()};
}

at::Tensor upstream_like(const at::Tensor& y, std::uint64_t seed) {
  at::manual_seed(seed);
  return at::randn(y.sizes(), y.options());
}

const std::vector<std::optional<std::string>> norms{std::nullopt, "backward", "forward", "ortho"};

std::optional<c10::string_view> view(const std::optional<std::string>& n) {
  if (!n) return std::nullopt;
  return c10::string_view(n->data(), n->size());
}

}  // namespace

TEST_CASE("einfft local: complex forward and inverse, renamed and permuted, every norm", "[spectral][fft]") {
  at::manual_seed(1);
  const auto x = at::randn({3, 5, 6, 2}, at::kComplexDouble);
  for (const auto& norm : norms) {
    for (const bool inverse : {false, true}) {
      INFO("norm " << norm.value_or("(unset)") << (inverse ? " inverse" : " forward"));
      const es::Options o{.axes = {{"x", "kx"}, {"y", "ky"}}, .inverse = inverse, .norm = norm};
      auto ours = [&](const at::Tensor& t) { return es::einfft<"b x y c -> c ky b kx">(t, o); };
      auto theirs = [&](const at::Tensor& t) {
        auto r = inverse ? at::fft_ifftn(t, std::nullopt, at::IntArrayRef{1, 2}, view(norm))
                         : at::fft_fftn(t, std::nullopt, at::IntArrayRef{1, 2}, view(norm));
        return r.permute({3, 2, 0, 1});
      };
      const auto g = upstream_like(theirs(x), 7);
      const auto [y, dx] = run(ours, x, g);
      const auto [ry, rdx] = run(theirs, x, g);
      CHECK(near(y, ry));
      CHECK(near(dx, rdx));
    }
  }
}

TEST_CASE("einfft local: real input to a complex transform, and one axis", "[spectral][fft]") {
  at::manual_seed(2);
  const auto x = at::randn({4, 7}, at::kDouble);
  const auto g = upstream_like(at::fft_fft(x, std::nullopt, 1).to(at::kComplexDouble), 3);
  const auto [y, dx] = run([](const at::Tensor& t) { return es::einfft<"b x -> b k">(t, {.axes = {{"x", "k"}}}); }, x, g);
  const auto [ry, rdx] = run([](const at::Tensor& t) { return at::fft_fft(t, std::nullopt, 1); }, x, g);
  CHECK(near(y, ry));
  CHECK(near(dx, rdx));
}

TEST_CASE("einfft local: real transforms, half axis last listed, every norm", "[spectral][fft]") {
  at::manual_seed(3);
  const auto x = at::randn({2, 6, 5, 3}, at::kDouble);
  for (const auto& norm : norms) {
    INFO("norm " << norm.value_or("(unset)"));
    // Forward: the half axis is x (listed last), so torch's rfftn takes dims (y, x).
    const es::Options f{.axes = {{"y", "ky"}, {"x", "kx"}}, .real = true, .norm = norm};
    auto ours = [&](const at::Tensor& t) { return es::einfft<"b x y c -> b kx ky c">(t, f); };
    auto theirs = [&](const at::Tensor& t) {
      return at::fft_rfftn(t, std::nullopt, at::IntArrayRef{2, 1}, view(norm));
    };
    const auto g = upstream_like(theirs(x), 11);
    const auto [y, dx] = run(ours, x, g);
    const auto [ry, rdx] = run(theirs, x, g);
    CHECK(y.size(1) == 4);
    CHECK(near(y, ry));
    CHECK(near(dx, rdx));

    // Inverse: odd and default signal sizes.
    for (const std::optional<std::int64_t> signal : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{7}}) {
      es::Options i{.axes = {{"ky", "y"}, {"kx", "x"}}, .inverse = true, .real = true, .norm = norm};
      if (signal) i.signal_sizes = {{"x", *signal}};
      const auto n = signal.value_or(2 * (ry.size(1) - 1));
      auto ours_i = [&](const at::Tensor& t) { return es::einfft<"b kx ky c -> b x y c">(t, i); };
      auto theirs_i = [&](const at::Tensor& t) {
        return at::fft_irfftn(t, at::IntArrayRef{t.size(2), n}, at::IntArrayRef{2, 1}, view(norm));
      };
      const auto gi = upstream_like(theirs_i(ry), 13);
      const auto [yi, dyi] = run(ours_i, ry, gi);
      const auto [ryi, rdyi] = run(theirs_i, ry, gi);
      CHECK(yi.size(1) == n);
      CHECK(near(yi, ryi));
      CHECK(near(dyi, rdyi));
      // Without autograd the library's FFT runs (FFTW where built with it), whose c2r overwrites
      // its input: the caller's spectrum is left as it was, and the norm's scale applied once.
      const auto kept = ry.clone();
      CHECK(near(ours_i(ry), ryi));
      CHECK(at::equal(ry, kept));
    }
  }
}

TEST_CASE("einfft local: run-time notation with families, and explain", "[spectral][fft]") {
  at::manual_seed(4);
  const auto x = at::randn({2, 4, 6}, at::kComplexFloat);
  const auto y = es::einfft("b *space -> *freq b", {x},
                            {.families = {{"space", {"h", "w"}}, {"freq", {"kh", "kw"}}},
                             .axes = {{"space", "freq"}}});
  const auto ref = at::fft_fftn(x, std::nullopt, at::IntArrayRef{1, 2}).permute({1, 2, 0});
  CHECK(at::allclose(y, ref, 1e-5, 1e-5));
  const auto plan = es::explain_fft("b h w -> kh kw b", {x}, {.axes = {{"h", "kh"}, {"w", "kw"}}});
  CHECK(plan.names() == std::vector<std::string>{"fft", "permute"});
}

TEST_CASE("einfft local: faults", "[spectral][fft]") {
  const auto x = at::randn({2, 4}, at::kDouble);
  auto fails = [&](auto f, const std::string& part) {
    try {
      f();
      FAIL("no error; expected one containing: " << part);
    } catch (const es::Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  };
  // No transform axes: a layout change (torch-einshard's layout-only einfft), but not a real one.
  CHECK(at::equal(es::einfft<"b x -> x b">(x, {}), x.t()));
  fails([&] { (void)es::einfft<"b x -> b x">(x, {.real = true}); }, "no transform axes");
  fails([&] { (void)es::einfft<"b x -> b k">(x, {.axes = {{"z", "k"}}}); }, "not an axis of the input");
  fails([&] { (void)es::einfft<"b x -> b k">(x, {.axes = {{"x", "q"}}}); }, "not an axis of the output");
  fails([&] { (void)es::einfft<"b x -> c k">(x, {.axes = {{"x", "k"}}}); }, "must keep it");
  fails([&] { (void)es::einfft<"b x -> b k">(x, {.axes = {{"x", "k"}}, .norm = "half"}); }, ".norm");
  fails([&] { (void)es::einfft<"b x -> b k">(x, {.axes = {{"x", "k"}}, .groups = 2}); }, "'.groups'");
  fails([&] { (void)es::einfft<"b x c -> b k c">(x, {.axes = {{"x", "k"}}}); }, "names 3 dimensions");
  fails([&] { (void)es::einfft<"b x -> b k">(x.to(at::kComplexDouble), {.axes = {{"x", "k"}}, .real = true}); },
        "needs a real tensor");
  fails([&] { (void)es::einfft<"b x -> b k">(x, {.axes = {{"x", "k"}}, .signal_sizes = {{"k", 4}}}); },
        "signal sizes are only");
  fails([&] { (void)es::einfft<"b x/tp -> b k/tp">(x, {.axes = {{"x", "k"}}}); }, "needs a mesh");
  fails([&] { (void)es::einfft<"x b -> b x">(x, {.axes = {{"x", "b"}}}); }, "names another input axis");
  fails([&] { (void)es::einfft<"b x -> b k">(x.to(at::kLong), {.axes = {{"x", "k"}}}); }, "float32");
  CHECK_THROWS_AS(es::einfft("b x -> b", {x}, {.axes = {{"x", "k"}}}), es::Error);
  CHECK_THROWS_AS(es::einfft("b x -> b (", {x}, {.axes = {{"x", "k"}}}), es::NotationError);
}

TEST_CASE("einfft local: the FFTW backend equals torch's FFT, strided and every norm", "[spectral][fft]") {
  // Without a recorded gradient the complex passes run on FFTW when the build has it; with the
  // backend set to torch, or with autograd recording, they are torch's. All must agree.
  INFO("FFTW backend built: " << es::exec::has_fftw());
  at::manual_seed(21);
  at::NoGradGuard no_grad;
  for (const auto dtype : {at::kComplexDouble, at::kComplexFloat}) {
    const double tol = dtype == at::kComplexDouble ? 1e-10 : 1e-4;
    const auto base = at::randn({6, 5, 8, 3}, dtype);
    // A permuted (strided) input and a narrowed one (offset data, maybe unaligned: torch then).
    for (const auto& x : {base, base.permute({2, 0, 3, 1}), base.narrow(0, 1, 4)}) {
      for (const std::optional<std::string>& norm : {std::optional<std::string>{}, std::optional<std::string>{"forward"},
                                                    std::optional<std::string>{"ortho"}})
        for (const bool inverse : {false, true}) {
          const es::Options o{.axes = {{"a", "ka"}, {"c", "kc"}}, .inverse = inverse, .norm = norm};
          std::optional<c10::string_view> n;
          if (norm) n = *norm;
          const auto want = inverse ? at::fft_ifftn(x, std::nullopt, at::IntArrayRef{0, 2}, n)
                                    : at::fft_fftn(x, std::nullopt, at::IntArrayRef{0, 2}, n);
          const auto got = es::einfft("a b c d -> ka b kc d", {x}, o);
          CHECK(at::allclose(got, want, tol, tol));
          es::exec::local_fft_backend() = es::exec::LocalFft::torch;
          CHECK(at::allclose(es::einfft("a b c d -> ka b kc d", {x}, o), want, tol, tol));
          es::exec::local_fft_backend() = es::exec::LocalFft::automatic;
        }
    }
  }
}

TEST_CASE("einfft local: FFTW's routes, planner efforts and wisdom", "[spectral][fft]") {
  // An out-of-place pass runs as FFTW's own out-of-place plan or as a copy into the output and a
  // plan in place there, whichever planning timed faster: both routes, forced, at each effort, must
  // give torch's transform and leave the input as it was.
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  at::manual_seed(23);
  at::NoGradGuard no_grad;
  struct Restore {
    ~Restore() {
      es::exec::fftw_planner() = es::exec::FftwPlanner::measure;
#if defined(EINSHARD_HAS_FFTW)
      es::exec::detail::fftw_forced_route().reset();
#endif
    }
  } restore;
  const auto x = at::randn({12, 10, 16}, at::kComplexDouble);
  const auto before = x.clone();
  const auto want = at::fft_fftn(x, std::nullopt, at::IntArrayRef{0, 2});
  const auto want_all = at::fft_ifftn(x, std::nullopt, std::nullopt, "ortho");
  using es::exec::FftwPlanner;
  for (const auto planner : {FftwPlanner::estimate, FftwPlanner::measure}) {
#if defined(EINSHARD_HAS_FFTW)
    using es::exec::detail::FftwCopy;
    for (const auto routing : {std::optional<FftwCopy>{FftwCopy::direct}, std::optional<FftwCopy>{FftwCopy::output_order},
                               std::optional<FftwCopy>{FftwCopy::input_order}, std::optional<FftwCopy>{}}) {
      es::exec::detail::fftw_forced_route() = routing;
      INFO("route " << (routing ? static_cast<int>(*routing) : -1));
#else
    {
#endif
      es::exec::fftw_planner() = planner;
      INFO("planner " << static_cast<int>(planner));
      auto kept = at::full({12, 10, 16}, 7.0, at::kComplexDouble);
      (void)es::einfft_out<"a b c -> ka b kc">(kept, x, {.axes = {{"a", "ka"}, {"c", "kc"}}});
      CHECK(at::allclose(kept, want, 1e-10, 1e-10));
      // Into a tensor whose memory order is another (as a transposed output's last pass writes).
      auto block = at::full({10, 12, 16}, 7.0, at::kComplexDouble);
      const auto into = block.permute({1, 0, 2});
      const auto got = es::exec::local_fft(x, es::plan::FftOp::inverse, {0, 1, 2}, {12, 10, 16}, "ortho", false, into);
      CHECK(got.is_same(into));
      CHECK(at::allclose(into, want_all, 1e-10, 1e-10));
      CHECK(at::equal(x, before));
      // In place over the input's own memory in another order (a transposed output written over
      // its input): FFTW plans it in place, or the pass goes out of place and copies.
      auto own = x.clone();
      const auto over = own.as_strided({12, 10, 16}, {16, 12 * 16, 1});
      (void)es::exec::local_fft(own, es::plan::FftOp::inverse, {0, 1, 2}, {12, 10, 16}, "ortho", true, over);
      CHECK(at::allclose(over, want_all, 1e-10, 1e-10));
    }
  }
  const auto path = std::string("einshard_test_wisdom_") + std::to_string(rank) + ".txt";
  if (es::exec::has_fftw()) {
    es::exec::save_fftw_wisdom(path);
    es::exec::load_fftw_wisdom(path);  // what it saved reads back
    {
      std::ofstream(path) << "not wisdom";
    }
    CHECK_THROWS_WITH(es::exec::load_fftw_wisdom(path), Catch::Contains("holds no FFTW wisdom"));
    CHECK_THROWS_WITH(es::exec::load_fftw_wisdom(path + ".missing"), Catch::Contains("cannot read"));
  } else {
    CHECK_THROWS_WITH(es::exec::save_fftw_wisdom(path), Catch::Contains("built without FFTW"));
    CHECK_THROWS_WITH(es::exec::load_fftw_wisdom(path), Catch::Contains("built without FFTW"));
  }
  std::remove(path.c_str());
}

}  // namespace test_fft_local
