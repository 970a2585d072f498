#pragma once
/// @file
/// Distributed MINRES (Paige and Saunders 1975, in the organisation of SciPy's `minres`) for
/// symmetric or Hermitian A, indefinite allowed, with a symmetric positive definite preconditioner
/// M. Two all-reduces per iteration (α = <v, A v> and β² = <r, M r>), as CG.
///
/// The quantity MINRES minimizes and can report without another product is ‖r‖ in the M⁻¹ norm
/// (‖r‖₂ without a preconditioner); its stop test is that norm against max(atol, rtol·‖b‖_{M⁻¹}),
/// as SciPy's and PETSc's preconditioned MINRES do. An indefinite M (<r, M r> < 0) is a breakdown,
/// raised identically on every rank.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"

namespace einshard::sparse::detail {

inline SolveResult minres(const Operator& A, const DVector& b, const PreconditionerOp* m,
                          const SolveOptions& o) {
  const auto& layout = A.layout();
  const MPI_Comm comm = layout->comm();
  SolveResult result;
  auto& info = result.info;
  Progress progress(o, info);
  auto [bl, x, r1] = initial_guess(A, b, o);
  result.x = DVector(layout, x);
  const PreconditionerUse M(m, bl);
  const auto t0 = comm::wall_time();
  auto y = at::empty_like(bl);
  M.apply(r1, y);
  // ‖b‖ in the same norm as the residual: <b, M b> (M b is y when there is no x0: r = b).
  auto mb = y;
  if (o.x0) {
    mb = at::empty_like(bl);
    M.apply(bl, mb);
  }
  const auto init = sum_real<2>({local_dot(r1, y), local_dot(bl, mb)}, comm);
  if (init[1] == 0.0) {
    zero_rhs(result, o);
    return result;
  }
  if (init[0] < 0.0 || init[1] < 0.0 || !std::isfinite(init[0])) {
    progress.start(0.0);
    progress.stop(std::isfinite(init[0]) ? StopReason::breakdown : StopReason::nan);
    return result;
  }
  progress.start(std::sqrt(init[1]));
  double beta = std::sqrt(init[0]), oldb = 0.0;
  if (progress.record(0, beta)) {
    info.seconds = comm::wall_time() - t0;
    return result;
  }
  auto r2 = r1.clone(), v = at::empty_like(bl);
  auto w = at::zeros_like(bl), w1 = at::zeros_like(bl), w2 = at::zeros_like(bl);
  double dbar = 0.0, epsln = 0.0, phibar = beta, cs = -1.0, sn = 0.0;
  constexpr double tiny = std::numeric_limits<double>::epsilon();
  for (int k = 1;; ++k) {
    at::mul_out(v, y, 1.0 / beta);
    A.apply(v, y, {});
    if (k >= 2) y.sub_(r1, beta / oldb);
    const double alfa = sum_real<1>({local_dot(v, y)}, comm)[0];
    y.sub_(r2, alfa / beta);
    std::swap(r1, r2);
    r2.copy_(y);
    M.apply(r2, y);
    oldb = beta;
    const double b2 = sum_real<1>({local_dot(r2, y)}, comm)[0];
    if (b2 < 0.0 || !std::isfinite(b2)) {
      progress.stop(std::isfinite(b2) ? StopReason::breakdown : StopReason::nan);
      break;
    }
    beta = std::sqrt(b2);
    // The next plane rotation, and the update of x along the new direction w.
    const double oldeps = epsln;
    const double delta = cs * dbar + sn * alfa;
    const double gbar = sn * dbar - cs * alfa;
    epsln = sn * beta;
    dbar = -cs * beta;
    const double gamma = std::max(std::hypot(gbar, beta), tiny);
    cs = gbar / gamma;
    sn = beta / gamma;
    const double phi = cs * phibar;
    phibar = sn * phibar;
    std::swap(w1, w2);
    std::swap(w2, w);  // w1 <- old w2, w2 <- old w
    at::sub_out(w, v, w1, oldeps).sub_(w2, delta).div_(gamma);
    x.add_(w, phi);
    if (progress.record(k, std::abs(phibar))) break;
    if (beta == 0.0) {  // the Krylov space is invariant: x is the solution
      progress.stop(StopReason::converged_rtol);
      break;
    }
  }
  info.seconds = comm::wall_time() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
