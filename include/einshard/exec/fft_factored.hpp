#pragma once
/// @file
/// Runs the factored 1-D FFT of a lone sharded axis (plan/fft_factored.hpp): six-step transforms,
/// and Bluestein's chirp convolution around them where the length has no balanced factorization.
/// Built from differentiable pieces only — the transposes are `RedistributeOp`s (backward: the
/// reverse all-to-all), the rest is torch (FFTs, products with constant twiddles and chirps,
/// real/conj/flip/pad) — so the backward is the adjoint distributed transform and gathers nothing.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/autograd.hpp"
#include "einshard/exec/local_fft.hpp"
#include "einshard/exec/steps.hpp"
#include "einshard/plan/fft.hpp"
#include "einshard/plan/fft_factored.hpp"

namespace einshard::exec {

namespace detail {

/// One exchange of a factored transform: the all-to-all(v) and its reverse; absent (identity) when
/// every rank already holds what it is to hold.
struct Exchange {
  c10::intrusive_ptr<RedistributeOp> op;
  [[nodiscard]] at::Tensor operator()(const at::Tensor& x) const { return op ? comm::apply_op(x, op) : x; }
};

/// The exchange of schedule `s` over `comm`; its backward runs the same messages reversed.
inline Exchange schedule_exchange(const plan::Schedule& s, MPI_Comm comm) {
  return {c10::make_intrusive<RedistributeOp>(comm, s, plan::Schedule{s.recvs, s.sends, s.out_shape, s.in_shape})};
}

/// The exchange over `comm` from rank r holding `from[r]` of an axis to it holding `to[r]`; the
/// identity when the distributions agree (every rank sees all of them, so all decide alike).
inline Exchange ranges_exchange(std::span<const plan::Range> from, std::span<const plan::Range> to,
                                MPI_Comm comm, int me) {
  if (std::equal(from.begin(), from.end(), to.begin(), to.end())) return {};
  return schedule_exchange(plan::schedule_ranges(from, to, me), comm);
}

/// e^(iθ), θ = sign·π·(num mod 2·den)/den: reducing the integer first keeps large products exact.
inline at::Tensor phase(const at::Tensor& num, std::int64_t den, double sign, at::ScalarType complex) {
  const auto angle = at::remainder(num, 2 * den).to(at::kDouble) * (sign * std::numbers::pi / static_cast<double>(den));
  return at::polar(at::ones_like(angle), angle).to(complex);
}

}  // namespace detail

/// One six-step transform of length r1·r2 on this rank: row blocks in, k2 blocks out.
struct SixStep {
  plan::SixStepPlan plan;
  std::size_t me = 0;
  detail::Exchange to_columns, to_rows, to_output;
  at::Tensor twiddle;  ///< ω^(k1·i2) of the forward transform over [r1, this rank's columns]

  SixStep(plan::SixStepPlan p, MPI_Comm comm, int rank, at::ScalarType complex)
      : plan(std::move(p)),
        me(static_cast<std::size_t>(rank)),
        to_columns(detail::schedule_exchange(plan.to_columns, comm)),
        to_rows(detail::schedule_exchange(plan.to_rows, comm)),
        to_output(detail::schedule_exchange(plan.to_output, comm)) {
    const auto col = plan::consecutive(plan.cols)[me];
    const auto k1 = at::arange(plan.r1, at::kLong).unsqueeze(1);
    const auto i2 = at::arange(col.lo, col.hi, at::kLong).unsqueeze(0);
    twiddle = detail::phase(k1 * i2, plan.r1 * plan.r2, -2.0, complex);
  }

  /// The unnormalized transform (e^(−2πi·) forward, e^(+2πi·) inverse) of this rank's rows
  /// (1-D, rows·r2 long); `real`: keep the real part before the last transpose, which then moves
  /// half the bytes.
  [[nodiscard]] at::Tensor operator()(const at::Tensor& x, bool inverse, bool real = false) const {
    const auto op = inverse ? plan::FftOp::inverse : plan::FftOp::forward;
    const std::optional<std::string> unscaled = inverse ? "forward" : "backward";
    // Each exchange returns a fresh tensor: without autograd recording, work on it in place.
    const bool owned = !comm::records(x);
    const auto w = inverse ? twiddle.conj() : twiddle;
    auto a = to_columns(x.reshape({plan.rows[me], plan.r2}));
    a = local_fft(a, op, {0}, {}, unscaled, owned);
    a = owned ? a.mul_(w) : a * w;
    a = to_rows(a);
    a = local_fft(a, op, {1}, {}, unscaled, owned);
    if (real) a = at::real(a);
    // The exchange packs straight from the transposed view: no separate transpose copy.
    return to_output(a.t()).reshape({-1});
  }
};

/// The factored 1-D FFT of a lone sharded axis over its group, with torch's norm conventions.
struct FactoredFftCall {
  plan::FftOp op = plan::FftOp::forward;
  plan::FactoredFft factors;
  std::size_t me = 0;
  double scale = 1;
  std::vector<plan::Range> entry;  ///< by rank: the part of [0, n) each rank feeds into `first`
  std::vector<plan::Range> exit;   ///< by rank: the part of [0, n) each rank holds after
  /// Inverse real transforms assemble the full spectrum over `entry` from the half spectrum: X[k]
  /// for k ≤ n/2 (`direct`, by rank) and conj(X[n−k]) above (`mirrored`: the indices n−k, by rank).
  std::vector<plan::Range> direct, mirrored;
  detail::Exchange enter, mirror, leave;
  std::optional<SixStep> first, second;  ///< second: Bluestein's inverse, the factors swapped
  at::Tensor chirp_in, chirp_out;        ///< Bluestein's chirps over this rank's entry and exit
  /// Bluestein's kernel: the forward transform of b[j] = conj(chirp[min(j, m−j)]) (zero where that
  /// distance is n or more), over this rank's k2 block.
  at::Tensor kernel;

  [[nodiscard]] bool inverse() const { return op == plan::FftOp::inverse || op == plan::FftOp::real_inverse; }

  [[nodiscard]] at::Tensor operator()(const at::Tensor& x) const {
    const bool real_out = op == plan::FftOp::real_inverse;
    auto y = real_out ? hermitian(x) : enter(x);
    if (!y.is_complex()) y = y.to(c10::toComplexType(y.scalar_type()));
    if (factors.bluestein()) {
      const auto rows = first->plan.input()[me];
      y = at::constant_pad_nd(y * chirp_in, {0, rows.size() - entry[me].size()});
      y = (*second)((*first)(y, false) * kernel, true);
      y = y.narrow(0, 0, exit[me].size()) * chirp_out;
      if (real_out) y = at::real(y);
    } else {
      y = (*first)(y, inverse(), real_out);
    }
    y = leave(y);
    return scale == 1 ? y : y * scale;
  }

 private:
  /// The full spectrum over this rank's entry range. The mirrored entries arrive in ascending
  /// n−k, so they are flipped here.
  [[nodiscard]] at::Tensor hermitian(const at::Tensor& x) const {
    const auto a = enter(x);
    const auto b = at::conj_physical(at::flip(mirror(x), {0}));
    const auto gap = entry[me].size() - direct[me].size() - mirrored[me].size();
    return at::cat({a, at::zeros({gap}, a.options()), b});
  }
};

/// Prepares the factored transform `op` of a lone axis sharded over `comm` (this rank `me` of
/// `parts`): `in` and `out` are the shard sizes of the input (length `in_length`) and of the output
/// (`out_length`); `n` is the transform length (the signal length of an inverse real transform).
inline FactoredFftCall prepare_factored(plan::FftOp op, std::int64_t n, std::span<const std::int64_t> in,
                                        std::span<const std::int64_t> out, MPI_Comm comm, int me,
                                        at::ScalarType complex, const std::optional<std::string>& norm) {
  FactoredFftCall c;
  c.op = op;
  c.me = static_cast<std::size_t>(me);
  const int parts = static_cast<int>(in.size());
  c.factors = plan::factor_fft(n, parts);
  const auto& f = c.factors;
  c.first.emplace(plan::plan_six_step(f.m1, f.m2, parts, me), comm, me, complex);
  const auto last = f.bluestein() ? plan::plan_six_step(f.m2, f.m1, parts, me) : c.first->plan;
  if (f.bluestein()) c.second.emplace(last, comm, me, complex);
  c.entry = plan::clip(c.first->plan.input(), 0, n);
  c.exit = plan::clip(f.bluestein() ? last.output() : c.first->plan.output(), 0, n);
  const auto sources = plan::consecutive(in);
  if (op == plan::FftOp::real_inverse) {
    const auto half = std::min(in.empty() ? 0 : sources.back().hi, n / 2 + 1);
    c.direct = plan::clip(c.entry, 0, half);
    for (const auto& e : plan::clip(c.entry, std::max(n / 2 + 1, n - sources.back().hi + 1), n))
      c.mirrored.push_back(e.size() > 0 ? plan::Range{n - e.hi + 1, n - e.lo + 1} : plan::Range{});
    c.enter = detail::ranges_exchange(sources, c.direct, comm, me);
    c.mirror = detail::ranges_exchange(sources, c.mirrored, comm, me);
  } else {
    c.enter = detail::ranges_exchange(sources, c.entry, comm, me);
  }
  c.leave = detail::ranges_exchange(c.exit, plan::consecutive(out), comm, me);
  if (f.bluestein()) {
    const double sign = c.inverse() ? 1.0 : -1.0;
    auto chirp = [&](plan::Range r) {
      const auto j = at::arange(r.lo, r.hi, at::kLong);
      return detail::phase(j * j, n, sign, complex);
    };
    c.chirp_in = chirp(c.entry[c.me]);
    c.chirp_out = chirp(c.exit[c.me]);
    // One forward transform, collective like the rest of the preparation (every rank prepares the
    // same call at the same point).
    at::NoGradGuard no_grad;
    const auto rows = c.first->plan.input()[c.me];
    const auto j = at::arange(rows.lo, rows.hi, at::kLong);
    const auto d = at::minimum(j, f.m - j);
    const auto b = detail::phase(d * d, n, -sign, complex) * (d < n).to(complex);
    c.kernel = (*c.first)(b, false);
  }
  const auto length = static_cast<double>(n);
  const auto mode = norm.value_or("backward");
  c.scale = mode == "ortho" ? 1 / std::sqrt(length) : (mode == "forward") != c.inverse() ? 1 / length : 1;
  if (f.bluestein()) c.scale /= static_cast<double>(f.m);
  return c;
}

}  // namespace einshard::exec
