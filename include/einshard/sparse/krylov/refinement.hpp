#pragma once
/// @file
/// Mixed precision (`Precision::mixed`): Krylov iterations in single precision, kept to a float64
/// tolerance. CG (standard) runs as one recurrence in float32 with reliable updates (Sleijpen and
/// van der Vorst; QUDA's mixed-precision CG): whenever the float32 residual has fallen tenfold,
/// the float32 iterate is added to a float64 one and the residual recomputed from the float64
/// matrix, the search direction kept, so the iterations stay those of the float64 solve. The
/// other methods run as iterative refinement whose corrections come from Krylov solves in single
/// precision. A float32 product streams 8 bytes per stored entry instead of 12
/// and every vector pass half the bytes, so the inner iterations of a bandwidth-bound solve run
/// up to twice as fast; the outer loop computes the true residual b − A x with the float64 matrix,
/// so the answer meets the tolerance against it. When a round no longer halves the true residual
/// (κ(A) times float32's rounding near 1), the solve finishes in the working precision from the
/// iterate reached (as refinement rounds, so the stop test stays on the true residual).

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/krylov/options.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// The dtype of the inner solves of a mixed-precision solve of `working`.
inline at::ScalarType inner_dtype(at::ScalarType working) {
  return working == at::kComplexDouble ? at::kComplexFloat : at::kFloat;
}

/// A preconditioner of the working precision applied to inner-precision vectors (AMG, which hypre
/// runs in float64, and custom preconditioners, written for the matrix's dtype).
class InnerPrecisionAdapter final : public PreconditionerOp {
 public:
  InnerPrecisionAdapter(std::shared_ptr<const PreconditionerOp> op, at::ScalarType working)
      : op_(std::move(op)), working_(working) {}
  void apply(const at::Tensor& r, at::Tensor& z) const override {
    auto zw = at::empty(r.sizes(), r.options().dtype(working_));
    op_->apply(r.to(working_), zw);
    z.copy_(zw);
  }
  [[nodiscard]] std::string name() const override { return op_->name(); }
  [[nodiscard]] at::Tensor diagonal() const override { return op_->diagonal(); }
  [[nodiscard]] std::pair<int, double> hierarchy() const override { return op_->hierarchy(); }

 private:
  std::shared_ptr<const PreconditionerOp> op_;
  at::ScalarType working_;
};

/// Each inner solve reduces its residual by this factor (or to the outer tolerance, if nearer):
/// float32 rounding (6e-8) times the growth of a long recurrence leaves a few digits of margin.
inline constexpr double kInnerReduction = 1e-5;

/// A round counts as progress when it at least halves the true residual.
inline constexpr double kRoundProgress = 0.5;

/// Reliable updates when the float32 residual has fallen by this factor since the last one.
inline constexpr double kReliableUpdate = 0.1;

/// Mixed-precision CG (`o.cg_variant` standard): `A` the float64 operator, `single` its float32
/// copy, `m` the preconditioner for float32 vectors (null: none). The stop test is passed only on
/// a residual just recomputed in float64, so `residual_norm` is the true one when it converges.
/// When a reliable update finds the true residual not halved since the previous one (κ(A) times
/// float32's rounding near 1), or the float32 recurrence breaks down, `working(options)` finishes the solve in the working precision
/// from the float64 iterate (`options.x0`).
template <class Working>
SolveResult mixed_cg(const Operator& A, const Operator& single, const DVector& b, const PreconditionerOp* m,
                     const SolveOptions& o, Working&& working) {
  SolveResult result;
  auto& info = result.info;
  Progress progress(o, info);
  const MPI_Comm comm = A.layout()->comm();
  auto [bl, x_hi, r_hi] = initial_guess(A, b, o);
  result.x = DVector(A.layout(), x_hi);
  const auto t0 = comm::wall_time();
  const auto low = inner_dtype(bl.scalar_type());
  auto r = r_hi.to(low);
  auto x = at::zeros_like(r);
  auto q = at::empty_like(r);
  auto q_hi = at::empty_like(bl);
  const PreconditionerUse M(m, r);
  auto z = M.identity ? r : at::empty_like(r);
  if (!M.identity) M.apply(r, z);
  const auto init = sum_real<3>({local_dot(r, z), local_dot(r_hi, r_hi), local_dot(bl, bl)}, comm);
  progress.start(std::sqrt(init[2]));
  if (init[2] == 0.0) {
    zero_rhs(result, o);
    return result;
  }
  double rz = init[0];
  double rnorm = std::sqrt(init[1]);
  double since_update = rnorm;  // the largest residual since the last reliable update
  double last_true = rnorm;     // the true residual at the last reliable update
  bool stalled = false;
  if (progress.record(0, rnorm) || progress.check_nonzero(rz)) {
    info.seconds = comm::wall_time() - t0;
    return result;
  }
  auto p = z.clone();
  const double tol = std::max(o.atol, o.rtol * info.rhs_norm);
  for (int k = 1;; ++k) {
    const double pap = sum_real<1>({single.apply(p, q, p)}, comm)[0];
    if (progress.check_same_sign(rz, pap)) break;
    auto dots = cg_update(x, r, p, q, rz / pap, M.diagonal, z);
    if (M.general()) {
      M.apply(r, z);
      dots[0] = local_dot(r, z);
    }
    auto red = sum_real<2>(dots, comm);
    rnorm = std::sqrt(red[1]);
    since_update = std::max(since_update, rnorm);
    if (rnorm <= tol || rnorm < kReliableUpdate * since_update || !std::isfinite(rnorm)) {
      x_hi.add_(x.to(x_hi.scalar_type()));
      x.zero_();
      (void)A.apply(x_hi, q_hi, {});
      at::sub_out(r_hi, bl, q_hi);
      r.copy_(r_hi);
      // z of the new r: keeping the recursive residual's z instead (saving a V-cycle per update
      // with AMG) took 16 iterations instead of 9 on 2-D Poisson 1000².
      if (!M.identity) M.apply(r, z);
      red = sum_real<2>({local_dot(r, z), local_dot(r_hi, r_hi)}, comm);
      rnorm = since_update = std::sqrt(red[1]);
      ++info.refinements;
      stalled = rnorm > tol && !(rnorm <= kRoundProgress * last_true);
      last_true = rnorm;
      if (stalled) break;
    }
    if (progress.record(k, rnorm) || progress.check_nonzero(red[0])) break;
    const double beta = red[0] / rz;
    rz = red[0];
    at::add_out(p, z, p, beta);
  }
  x_hi.add_(x.to(x_hi.scalar_type()));
  // A breakdown or a NaN of the float32 recurrence may be float32's own (a copy of A that rounding
  // made singular or indefinite): the working precision decides.
  stalled = stalled || (!info.converged && (info.reason == StopReason::breakdown || info.reason == StopReason::nan));
  if (stalled) {
    auto wo = o;
    wo.x0 = DVector(A.layout(), x_hi);
    wo.maxiter = std::max(0, o.maxiter - info.iterations);
    wo.monitor = {};
    if (o.monitor)
      wo.monitor = [&o, offset = info.iterations](int k, double res) {
        if (k > 0) o.monitor(offset + k, res);
      };
    auto rest = working(wo);
    info.iterations += rest.info.iterations;
    info.setup_seconds += rest.info.setup_seconds;
    if (o.residual_history)
      for (std::size_t k = 1; k < rest.info.residual_history.size(); ++k)
        info.residual_history.push_back(rest.info.residual_history[k]);
    info.residual_norm = rest.info.residual_norm;
    info.reason = rest.info.reason;
    info.converged = rest.info.converged;
    result.x = std::move(rest.x);
  }
  info.seconds = comm::wall_time() - t0;
  return result;
}

/// x ← x + A⁻¹ r in rounds, r = b − A x in the working precision, until the stop test of `o`
/// passes on the true residual. `inner(r_scaled, options)` solves with the single-precision
/// operator (r scaled to unit norm, in the inner dtype); once a round fails to halve the true
/// residual, `working(r_scaled, options)` solves the rounds in the working precision instead,
/// and a working round that fails too ends the solve with its reason. The history and the
/// monitor follow the rounds' iterations (their residuals in the working scale); `residual_norm`
/// is the true one.
template <class Inner, class Working>
SolveResult refine(const Operator& A, const DVector& b, const SolveOptions& o, Inner&& inner, Working&& working) {
  SolveResult result;
  auto& info = result.info;
  const auto t0 = comm::wall_time();
  const MPI_Comm comm = A.layout()->comm();
  auto [bl, x, r] = initial_guess(A, b, o);
  result.x = DVector(A.layout(), x);
  const auto init = comm::summed({local_dot(r, r), local_dot(bl, bl)}, comm);
  info.rhs_norm = std::sqrt(init[1].real());
  if (init[1].real() == 0.0) {
    zero_rhs(result, o);
    return result;
  }
  double rnorm = std::sqrt(init[0].real());
  info.residual_norm = rnorm;
  if (o.residual_history) info.residual_history.push_back(rnorm);
  if (o.monitor) o.monitor(0, rnorm);
  const double tol = std::max(o.atol, o.rtol * info.rhs_norm);
  const auto low = inner_dtype(bl.scalar_type());
  auto q = at::empty_like(bl);
  const auto stop = [&](StopReason reason) {
    info.reason = reason;
    info.converged = reason == StopReason::converged_atol || reason == StopReason::converged_rtol;
  };
  bool single = true;
  for (;;) {
    if (!std::isfinite(rnorm)) {
      stop(StopReason::nan);
      break;
    }
    if (rnorm <= tol) {
      stop(rnorm <= o.atol ? StopReason::converged_atol : StopReason::converged_rtol);
      break;
    }
    if (rnorm > o.dtol * info.rhs_norm) {
      stop(StopReason::diverged);
      break;
    }
    if (info.iterations >= o.maxiter) {
      stop(StopReason::maxiter);
      break;
    }
    auto io = o;
    io.x0.reset();
    io.precision = Precision::working;
    io.rtol = single ? std::max(kInnerReduction, tol / rnorm) : tol / rnorm;
    io.atol = 0.0;
    io.maxiter = o.maxiter - info.iterations;
    io.monitor = {};
    if (o.monitor)
      io.monitor = [&o, offset = info.iterations, rnorm](int k, double res) {
        if (k > 0) o.monitor(offset + k, res * rnorm);
      };
    const auto scaled = r.div(rnorm);
    auto round = single ? inner(scaled.to(low), io) : working(scaled, io);
    info.iterations += round.info.iterations;
    info.setup_seconds += round.info.setup_seconds;
    info.preconditioner_reused = round.info.preconditioner_reused;
    if (single) ++info.refinements;
    if (o.residual_history)
      for (std::size_t k = 1; k < round.info.residual_history.size(); ++k)
        info.residual_history.push_back(round.info.residual_history[k] * rnorm);
    x.add_(round.x.local().to(x.scalar_type()), rnorm);
    (void)A.apply(x, q, {});
    at::sub_out(r, bl, q);
    const double next = std::sqrt(comm::summed({local_dot(r, r)}, comm)[0].real());
    const bool progress = std::isfinite(next) && next <= kRoundProgress * rnorm && round.info.iterations > 0;
    rnorm = next;
    info.residual_norm = rnorm;
    if (progress || rnorm <= tol || !std::isfinite(rnorm)) continue;
    if (!single) {
      // Stalled in the working precision too: what stopped its round ends the solve.
      stop(round.info.converged ? StopReason::breakdown : round.info.reason);
      break;
    }
    single = false;
  }
  info.seconds = comm::wall_time() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
