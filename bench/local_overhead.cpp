// Per-call overhead of the local einshard paths against torch::einsum and the direct torch ops.
//
// Every case times, side by side in the same process and interleaved round by round,
//   einshard_static    es::einshard<"...">(...)            notation parsed at compile time
//   einshard_runtime   es::einshard("...", {...}, opts)    run-time string, parse cached
//   einsum             at::einsum with the equivalent equation (plus the same reshapes, for groups)
//   direct...          the hand-written torch calls (matmul/linear, permute, reshape)
// and prints one JSON object per line and variant. This machine is noisy, so the numbers that
// matter are the ratios: `ratio_to_einsum` / `ratio_to_direct` are the medians, over the rounds, of
// the per-round ratio of this variant's time to the anchor's time measured in the same round.
//
//   einshard_bench_local [--quick] [--grad] [--case NAME]... [--seconds S] [--list]
//
//   --quick       a few thousand calls in all (smoke test)
//   --grad        time forward + backward (out.sum().backward()) instead of forward under NoGradGuard
//   --case NAME   run only this case (repeatable; also a comma-separated list)
//   --seconds S   target time per variant (default 0.3, --quick 0.02)
//   --list        print the case names and exit
// Environment: EINSHARD_NUM_THREADS (intra-op threads, default 1).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/einshard.hpp>

namespace es = einshard;

namespace {

using Clock = std::chrono::steady_clock;

struct Variant {
  std::string name;
  std::function<at::Tensor()> fn;
};

struct Case {
  std::string name;
  std::string notation;  // for the report
  std::string shapes;    // for the report
  std::vector<at::Tensor> inputs;
  std::vector<Variant> variants;
};

struct Config {
  bool quick = false;
  bool grad = false;
  double seconds = -1;
  std::vector<std::string> only;
  int threads = 1;
};

int threads_from_env() {
  const char* value = std::getenv("EINSHARD_NUM_THREADS");
  if (value == nullptr || *value == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return (end != value && *end == '\0' && n > 0 && n < 1024) ? static_cast<int>(n) : 1;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return NAN;
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << '(';
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? "," : "") << t.size(d);
  s << ')';
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// The cases. Every variant of a case returns the same values and shape (checked before timing).

Case linear(const std::string& name, int64_t b, int64_t n, int64_t c, int64_t o) {
  Case k;
  k.name = name;
  k.notation = "b n c, o c -> b n o";
  auto x = at::randn({b, n, c});
  auto w = at::randn({o, c});
  k.inputs = {x, w};
  k.shapes = shape_of(x) + "x" + shape_of(w);
  k.variants = {
      {"einshard_static", [=] { return es::einshard<"b n c, o c -> b n o">(x, w); }},
      {"einshard_runtime", [=] { return es::einshard("b n c, o c -> b n o", {x, w}); }},
      {"einsum", [=] { return at::einsum("bnc,oc->bno", {x, w}); }},
      {"direct_matmul", [=] { return at::matmul(x, w.t()); }},
      {"direct_linear", [=] { return at::linear(x, w); }},
  };
  return k;
}

Case linear_ellipsis() {
  Case k;
  k.name = "linear_ellipsis_small";
  k.notation = "... c, o c -> ... o";
  auto x = at::randn({4, 32, 128});
  auto w = at::randn({256, 128});
  k.inputs = {x, w};
  k.shapes = shape_of(x) + "x" + shape_of(w);
  k.variants = {
      {"einshard_static", [=] { return es::einshard<"... c, o c -> ... o">(x, w); }},
      {"einshard_runtime", [=] { return es::einshard("... c, o c -> ... o", {x, w}); }},
      {"einsum", [=] { return at::einsum("...c,oc->...o", {x, w}); }},
      {"direct_matmul", [=] { return at::matmul(x, w.t()); }},
      {"direct_linear", [=] { return at::linear(x, w); }},
  };
  return k;
}

Case permutation() {
  Case k;
  k.name = "permute_small";
  k.notation = "b t c h w -> b t h w c";
  auto x = at::randn({2, 3, 4, 5, 6});
  k.inputs = {x};
  k.shapes = shape_of(x);
  // at::einsum returns a view for a pure permutation (checked in check_case), so the like-for-like
  // direct op is permute() without contiguous().
  k.variants = {
      {"einshard_static", [=] { return es::einshard<"b t c h w -> b t h w c">(x); }},
      {"einshard_runtime", [=] { return es::einshard("b t c h w -> b t h w c", {x}); }},
      {"einsum", [=] { return at::einsum("btchw->bthwc", {x}); }},
      {"direct_permute", [=] { return x.permute({0, 1, 3, 4, 2}); }},
  };
  return k;
}

Case unpack() {
  Case k;
  k.name = "unpack_small";
  k.notation = "b (h p) c -> b h p c  (.sizes p=4)";
  auto x = at::randn({4, 32, 64});
  k.inputs = {x};
  k.shapes = shape_of(x);
  // The einsum "equivalent" needs the reshape einshard does for the group: reshape, then the
  // (identity) einsum. The direct op is the reshape alone.
  k.variants = {
      {"einshard_static",
       [=] { return es::einshard<"b (h p) c -> b h p c">(x, {.sizes = {{"p", 4}}}); }},
      {"einshard_runtime",
       [=] { return es::einshard("b (h p) c -> b h p c", {x}, {.sizes = {{"p", 4}}}); }},
      {"einsum",
       [=] {
         return at::einsum("bhpc->bhpc", {x.reshape({x.size(0), x.size(1) / 4, 4, x.size(2)})});
       }},
      {"direct_reshape", [=] { return x.reshape({x.size(0), x.size(1) / 4, 4, x.size(2)}); }},
  };
  return k;
}

Case pack() {
  Case k;
  k.name = "pack_small";
  k.notation = "b h p c -> b (h p) c";
  auto x = at::randn({4, 8, 4, 64});
  k.inputs = {x};
  k.shapes = shape_of(x);
  k.variants = {
      {"einshard_static", [=] { return es::einshard<"b h p c -> b (h p) c">(x); }},
      {"einshard_runtime", [=] { return es::einshard("b h p c -> b (h p) c", {x}); }},
      {"einsum",
       [=] {
         auto y = at::einsum("bhpc->bhpc", {x});
         return y.reshape({y.size(0), y.size(1) * y.size(2), y.size(3)});
       }},
      {"direct_reshape",
       [=] { return x.reshape({x.size(0), x.size(1) * x.size(2), x.size(3)}); }},
  };
  return k;
}

Case window_partition() {
  Case k;
  k.name = "window_partition_small";
  k.notation = "b [*spatial *window] c -> (b *spatial) *window c  (window=(4,4))";
  auto x = at::randn({2, 16, 16, 32});
  k.inputs = {x};
  k.shapes = shape_of(x);
  constexpr int64_t wh = 4, ww = 4;
  k.variants = {
      {"einshard_static",
       [=] {
         return es::einshard<"b (h wh) (w ww) c -> (b h w) wh ww c">(
             x, {.sizes = {{"wh", wh}, {"ww", ww}}});
       }},
      {"einshard_runtime_families",
       [=] {
         return es::einshard("b [*spatial *window] c -> (b *spatial) *window c", {x},
                             {.sizes = {{"window", {wh, ww}}},
                              .families = {{"spatial", {"h", "w"}}, {"window", {"wh", "ww"}}}});
       }},
      {"einshard_runtime",
       [=] {
         return es::einshard("b (h wh) (w ww) c -> (b h w) wh ww c", {x},
                             {.sizes = {{"wh", wh}, {"ww", ww}}});
       }},
      {"einsum",
       [=] {
         const auto b = x.size(0), h = x.size(1) / wh, w = x.size(2) / ww, c = x.size(3);
         return at::einsum("bhiwjc->bhwijc", {x.reshape({b, h, wh, w, ww, c})})
             .reshape({b * h * w, wh, ww, c});
       }},
      {"direct_reshape_permute",
       [=] {
         const auto b = x.size(0), h = x.size(1) / wh, w = x.size(2) / ww, c = x.size(3);
         return x.reshape({b, h, wh, w, ww, c})
             .permute({0, 1, 3, 2, 4, 5})
             .reshape({b * h * w, wh, ww, c});
       }},
  };
  return k;
}

Case attention_scores() {
  Case k;
  k.name = "attention_scores_small";
  k.notation = "b h q d, b h k d -> b h q k";
  auto q = at::randn({2, 4, 16, 32});
  auto kk = at::randn({2, 4, 16, 32});
  k.inputs = {q, kk};
  k.shapes = shape_of(q) + "x" + shape_of(kk);
  k.variants = {
      {"einshard_static", [=] { return es::einshard<"b h q d, b h k d -> b h q k">(q, kk); }},
      {"einshard_runtime", [=] { return es::einshard("b h q d, b h k d -> b h q k", {q, kk}); }},
      {"einsum", [=] { return at::einsum("bhqd,bhkd->bhqk", {q, kk}); }},
      {"direct_matmul", [=] { return at::matmul(q, kk.transpose(-2, -1)); }},
  };
  return k;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  cases.push_back(linear("linear_small", 4, 32, 128, 256));
  cases.push_back(linear("linear_medium", 8, 128, 512, 2048));
  cases.push_back(linear_ellipsis());
  cases.push_back(permutation());
  cases.push_back(unpack());
  cases.push_back(pack());
  cases.push_back(window_partition());
  cases.push_back(attention_scores());
  return cases;
}

// ---------------------------------------------------------------------------------------------

/// Same values and shape from every variant; reports whether einsum's result aliases an input.
void check_case(const Case& k) {
  c10::NoGradGuard no_grad;
  const auto reference = k.variants.at(0).fn();
  for (const auto& v : k.variants) {
    const auto out = v.fn();
    if (out.sizes() != reference.sizes() || !at::allclose(out, reference, 1e-4, 1e-4))
      throw std::runtime_error("case " + k.name + ": variant " + v.name + " gives " +
                               shape_of(out) + ", expected " + shape_of(reference) +
                               " (or different values)");
  }
}

bool einsum_is_view(const Case& k) {
  c10::NoGradGuard no_grad;
  for (const auto& v : k.variants)
    if (v.name == "einsum") {
      const auto out = v.fn();
      for (const auto& x : k.inputs)
        if (out.is_alias_of(x)) return true;
    }
  return false;
}

struct Timer {
  const Config& cfg;
  std::vector<at::Tensor> inputs;

  // One call, with backward in --grad mode.
  void call(const Variant& v) {
    if (!cfg.grad) {
      at::Tensor out = v.fn();
      (void)out;
      return;
    }
    at::Tensor out = v.fn();
    out.sum().backward();
    for (auto& x : inputs) x.mutable_grad().reset();
  }

  // Mean seconds per call over `n` calls.
  double batch(const Variant& v, int64_t n) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) call(v);
    return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(n);
  }
};

void run_case(Case& k, const Config& cfg) {
  check_case(k);
  std::optional<c10::NoGradGuard> no_grad;
  if (cfg.grad) {
    for (auto& x : k.inputs) x.set_requires_grad(true);
  } else {
    no_grad.emplace();
  }
  Timer timer{cfg, k.inputs};
  const auto nv = k.variants.size();

  // Warmup and calibration: ~target/10 per variant (at least a few calls).
  const double target = cfg.seconds > 0 ? cfg.seconds : (cfg.quick ? 0.02 : 0.3);
  std::vector<double> estimate(nv);
  for (std::size_t i = 0; i < nv; ++i) {
    timer.batch(k.variants[i], 3);
    int64_t n = 1;
    double t = 0;
    double spent = 0;
    while (spent < target / 10) {
      t = timer.batch(k.variants[i], n);
      spent += t * static_cast<double>(n);
      n *= 2;
    }
    estimate[i] = t;
  }
  const double fastest = *std::min_element(estimate.begin(), estimate.end());
  const double einsum_estimate = [&] {
    for (std::size_t i = 0; i < nv; ++i)
      if (k.variants[i].name == "einsum") return estimate[i];
    return fastest;
  }();
  // A sample is the mean of `calls` calls lasting >= ~20 us for the fastest variant (the clock then
  // costs < 0.5%); rounds make ~target seconds per variant.
  const auto calls = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(20e-6 / fastest)));
  const int64_t min_rounds = cfg.quick ? 5 : 15;
  const int64_t max_rounds = cfg.quick ? 200 : 5000;
  const auto rounds = std::clamp<int64_t>(
      static_cast<int64_t>(target / (einsum_estimate * static_cast<double>(calls))), min_rounds,
      max_rounds);

  std::vector<std::vector<double>> samples(nv, std::vector<double>(static_cast<std::size_t>(rounds)));
  for (int64_t r = 0; r < rounds; ++r)
    for (std::size_t j = 0; j < nv; ++j) {  // rotate the order so no variant always goes first
      const auto i = (j + static_cast<std::size_t>(r)) % nv;
      samples[i][static_cast<std::size_t>(r)] = timer.batch(k.variants[i], calls);
    }

  auto index_of = [&](auto pred) -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < nv; ++i)
      if (pred(k.variants[i].name)) return i;
    return std::nullopt;
  };
  const auto einsum = index_of([](const std::string& n) { return n == "einsum"; });
  const auto direct = index_of([](const std::string& n) { return n.rfind("direct", 0) == 0; });
  auto paired_ratio = [&](std::size_t i, std::optional<std::size_t> anchor) -> double {
    if (!anchor) return NAN;
    std::vector<double> r(static_cast<std::size_t>(rounds));
    for (std::size_t s = 0; s < r.size(); ++s) r[s] = samples[i][s] / samples[*anchor][s];
    return quantile(r, 0.5);
  };
  const bool view = einsum_is_view(k);
  for (std::size_t i = 0; i < nv; ++i) {
    std::cout << "{\"bench\":\"local\",\"case\":" << json_string(k.name)
              << ",\"variant\":" << json_string(k.variants[i].name)
              << ",\"median_us\":" << json_number(quantile(samples[i], 0.5) * 1e6)
              << ",\"p10_us\":" << json_number(quantile(samples[i], 0.1) * 1e6)
              << ",\"p90_us\":" << json_number(quantile(samples[i], 0.9) * 1e6)
              << ",\"iters\":" << rounds * calls << ",\"rounds\":" << rounds
              << ",\"calls_per_sample\":" << calls
              << ",\"ratio_to_einsum\":" << json_number(paired_ratio(i, einsum))
              << ",\"ratio_to_direct\":" << json_number(paired_ratio(i, direct))
              << ",\"notation\":" << json_string(k.notation)
              << ",\"shapes\":" << json_string(k.shapes)
              << ",\"einsum_returns_view\":" << (view ? "true" : "false")
              << ",\"grad\":" << (cfg.grad ? "true" : "false") << ",\"threads\":" << cfg.threads
              << ",\"torch\":" << json_string(TORCH_VERSION) << "}\n";
  }
  std::cout.flush();
  for (auto& x : k.inputs) x.set_requires_grad(false);
}

[[noreturn]] void usage(const char* argv0, int code) {
  (code ? std::cerr : std::cout)
      << "usage: " << argv0
      << " [--quick] [--grad] [--case NAME]... [--seconds S] [--list]\n"
         "Prints one JSON object per line and variant. Env: EINSHARD_NUM_THREADS (default 1).\n";
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.quick = true;
    } else if (a == "--grad") {
      cfg.grad = true;
    } else if (a == "--list") {
      list = true;
    } else if ((a == "--case" || a == "--seconds") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (a == "--seconds") {
        cfg.seconds = std::atof(value.c_str());
        continue;
      }
      std::stringstream s(value);
      for (std::string name; std::getline(s, name, ',');)
        if (!name.empty()) cfg.only.push_back(name);
    } else if (a == "-h" || a == "--help") {
      usage(argv[0], 0);
    } else {
      std::cerr << "unknown argument '" << a << "'\n";
      usage(argv[0], 2);
    }
  }
  cfg.threads = threads_from_env();
  at::set_num_threads(cfg.threads);
  at::manual_seed(0);

  auto cases = all_cases();
  if (list) {
    for (const auto& k : cases) std::cout << k.name << '\n';
    return 0;
  }
  for (const auto& name : cfg.only)
    if (std::none_of(cases.begin(), cases.end(), [&](const Case& k) { return k.name == name; })) {
      std::cerr << "unknown case '" << name << "' (see --list)\n";
      return 2;
    }
  try {
    for (auto& k : cases)
      if (cfg.only.empty() ||
          std::find(cfg.only.begin(), cfg.only.end(), k.name) != cfg.only.end())
        run_case(k, cfg);
  } catch (const std::exception& e) {
    std::cerr << "einshard_bench_local: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
