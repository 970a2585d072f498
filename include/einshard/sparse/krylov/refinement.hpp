#pragma once
/// @file
/// Mixed precision: `Precision::mixed` (Krylov iterations in single precision) and
/// `Precision::single_values` (float64 iterations whose products read the matrix's float32
/// values), kept to a float64 tolerance. CG (standard) runs as one recurrence: in the working
/// precision until the residual is small enough for single-precision products not to slow it
/// (mixed_cg), then in single precision with reliable updates (Sleijpen and van der Vorst;
/// QUDA's mixed-precision CG): whenever the single-precision residual has fallen tenfold, its
/// iterate is added to a float64 one and the residual recomputed from the float64 matrix, the
/// search direction kept, so the iterations stay those of the float64 solve. The other methods
/// run as iterative refinement whose corrections come from Krylov solves with the copy. A
/// float32 product streams 8 bytes per stored entry instead of 12, and a float32 vector pass
/// half the bytes; the outer loop computes the true residual b − A x with the float64 matrix, so
/// the answer meets the tolerance against it. When a round no longer halves the true residual
/// (κ(A) times float32's rounding near 1), the solve finishes in the working precision from the
/// iterate reached (as refinement rounds, so the stop test stays on the true residual).

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

/// The largest relative difference between a stored value and its single-precision copy, over
/// every rank (complex values: each part's): what the copy adds to a product of `single_values`,
/// 0 where the copy holds every value exactly (integer stencils); a value the copy flushes to
/// zero counts 1.
inline double copy_rounding(const at::Tensor& values, const at::Tensor& copy, MPI_Comm comm) {
  auto v = values.detach();
  auto c = copy.to(v.scalar_type());
  if (v.is_complex()) {
    v = at::view_as_real(v);
    c = at::view_as_real(c);
  }
  const double local = v.numel() == 0 ? 0.0 : ((c - v).abs_() / v.abs()).nan_to_num_(0.0).max().item<double>();
  return comm::all_reduce_value(local, comm::Reduction::max, comm);
}

/// The relative rounding of float32, what every operation of a single-precision recurrence adds.
inline constexpr double kSingleRounding = 0x1p-24;

/// Each inner solve reduces its residual by this factor (or to the outer tolerance, if nearer):
/// float32 rounding (6e-8) times the growth of a long recurrence leaves a few digits of margin.
inline constexpr double kInnerReduction = 1e-5;

/// A round counts as progress when it at least halves the true residual.
inline constexpr double kRoundProgress = 0.5;

/// Reliable updates when the single-precision residual has fallen by this factor since the last one.
inline constexpr double kReliableUpdate = 0.1;

/// A reliable update's true residual within this factor of the recursive one: the single-precision
/// recurrence still tells the truth.
inline constexpr double kTrueFollows = 2.0;

/// Mixed-precision CG (`o.cg_variant` standard): `A` the float64 operator, `single` its float32
/// copy; `low` the dtype of the single-precision phase's vectors (float32, or float64 for
/// `single_values`), `m_working` and `m_low` the preconditioner for working-precision and for
/// `low` vectors (null: none); `rounding` the relative error the single-precision phase adds to
/// each product (0: none). The stop test is passed only on
/// a residual just recomputed in float64, so `residual_norm` is the true one when it converges.
///
/// The iterations run in the working precision until ‖r‖ ≤ tol / rounding, then in single
/// precision, the direction carried over. Inexact Krylov theory (Simoncini and Szyld; van den
/// Eshof and Sleijpen) bounds the error a product may carry by about tol / ‖r_k‖: large late,
/// small early. Products of relative error 6e-8 from the first iteration cost 12–14 % more
/// iterations on variable-coefficient 5-point Laplacians (100², 300²): the smooth error the
/// early iterations remove comes back at each reliable update. With the switch the iteration
/// counts were the float64 solve's and 70–78 % of the iterations ran in single precision.
/// When a reliable update finds the true residual neither halved since the previous one nor near
/// the recursive one (κ(A) times float32's rounding near 1), or the float32 recurrence breaks
/// down, `working(options)` finishes the solve in the working precision from the float64 iterate
/// (`options.x0`).
template <class Working>
SolveResult mixed_cg(const Operator& A, const Operator& single, const DVector& b, const PreconditionerOp* m_working,
                     const PreconditionerOp* m_low, at::ScalarType low, double rounding, const SolveOptions& o,
                     Working&& working) {
  // Both are made from one diagonal: uniform together.
  m_working = for_cg(m_working);
  m_low = for_cg(m_low);
  SolveResult result;
  auto& info = result.info;
  Progress progress(o, info);
  const MPI_Comm comm = A.layout()->comm();
  auto [bl, x_hi, r_hi] = initial_guess(A, b, o);
  result.x = DVector(A.layout(), x_hi);
  const auto t0 = comm::wall_time();
  // The recurrence's vectors: working precision first, `low` after the switch.
  auto r = r_hi.clone();
  auto x = at::zeros_like(r);
  auto q = at::empty_like(r);
  auto q_hi = at::empty_like(bl);
  PreconditionerUse M(m_working, r);
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
  const double switch_below = rounding > 0.0 ? tol / rounding : std::numeric_limits<double>::infinity();
  const Operator* op = &A;
  for (int k = 1;; ++k) {
    if (op == &A && rnorm <= switch_below) {
      op = &single;
      x_hi.add_(x);
      x = at::zeros_like(r, r.options().dtype(low));
      r = r.to(low);
      p = p.to(low);
      q = at::empty_like(r);
      M = PreconditionerUse(m_low, r);
      z = M.identity ? r : at::empty_like(r);
      since_update = last_true = rnorm;
    }
    const double pap = sum_real<1>({op->apply(p, q, p)}, comm)[0];
    if (progress.check_same_sign(rz, pap)) break;
    auto dots = cg_update(x, r, p, q, rz / pap, M.diagonal, z);
    if (M.general()) {
      M.apply(r, z);
      dots[0] = local_dot(r, z);
    }
    auto red = sum_real<2>(dots, comm);
    rnorm = std::sqrt(red[1]);
    since_update = std::max(since_update, rnorm);
    if (rnorm <= tol || (op == &single && (rnorm < kReliableUpdate * since_update || !std::isfinite(rnorm)))) {
      x_hi.add_(x.to(x_hi.scalar_type()));
      x.zero_();
      (void)A.apply(x_hi, q_hi, {});
      at::sub_out(r_hi, bl, q_hi);
      r.copy_(r_hi);
      // z of the new r where that costs a vector pass (a diagonal); a general preconditioner
      // keeps the recursive residual's z: with AMG, where every iteration is an update, z of the
      // new r doubled the V-cycles for the same 8 iterations (2-D Poisson 1000², 0.89 s against
      // 1.35 s).
      if (M.diagonal.defined()) M.apply(r, z);
      red = sum_real<2>({local_dot(r, z), local_dot(r_hi, r_hi)}, comm);
      const double recursive = rnorm;
      rnorm = since_update = std::sqrt(red[1]);
      ++info.refinements;
      // Stalled: the true residual neither halved since the last update nor near the recursive
      // one. Either test alone misjudges: CG's residual is not monotone (it may rise several-fold
      // before it falls), so a true residual near the last update's can still be progress.
      stalled = rnorm > tol && !(rnorm <= kRoundProgress * last_true) && !(rnorm <= kTrueFollows * recursive);
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
/// operator (r scaled to unit norm, in dtype `low`); once a round fails to halve the true
/// residual, `working(r_scaled, options)` solves the rounds in the working precision instead,
/// and a working round that fails too ends the solve with its reason. The history and the
/// monitor follow the rounds' iterations (their residuals in the working scale); `residual_norm`
/// is the true one.
template <class Inner, class Working>
SolveResult refine(const Operator& A, const DVector& b, at::ScalarType low, const SolveOptions& o, Inner&& inner,
                   Working&& working) {
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
