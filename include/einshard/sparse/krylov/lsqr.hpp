#pragma once
/// @file
/// Distributed LSQR (Paige and Saunders 1982) in the organisation of SciPy's `lsqr`: the same
/// recurrences, estimates and `istop` codes, so iteration counts match SciPy's on the same problem.
///
/// Per iteration: one product with A, one with Aᴴ, two all-reduces (‖u‖², then ‖v‖² together with
/// ‖w‖², which SciPy gets locally for its condition estimate ‖D_k‖_F), and three fused passes:
/// u's update with its norm, v's with its norm (bidiag.hpp), and x's and w's together with ‖w‖².

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/bidiag.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/matrix/operator.hpp"

namespace einshard::sparse::detail {

inline LeastSquaresResult lsqr(const Operator& A, const DVector& b, const LeastSquaresOptions& o) {
  const auto n = A.domain_layout()->global_size();
  const int maxiter = o.maxiter > 0 ? o.maxiter : static_cast<int>(std::min<std::int64_t>(2 * n, 1 << 30));
  LeastSquaresResult res;
  const auto t0 = comm::wall_time();
  // Named references, not a structured binding: the fused passes' lambdas capture them (clang 14
  // cannot capture a structured binding).
  auto start = least_squares_start(A, b, o, res);
  auto& x = start.x;
  const double normb = start.normb;
  auto& gk = start.gk;
  const bool done = start.done;
  if (done) return res;
  const auto& v = gk.v;
  // w = v (normalized), with this rank's ‖w‖² for the next step's reduction.
  auto w = v * gk.v_scale();
  double w_local2 = local_dot(w, w).real();
  const double damp = o.damp, dampsq = damp * damp;
  double alfa = gk.alpha, beta = gk.beta;
  double rhobar = alfa, phibar = beta, anorm = 0.0, acond = 0.0, ddnorm = 0.0, res2 = 0.0, xxnorm = 0.0,
         z = 0.0, cs2 = -1.0, sn2 = 0.0, xnorm = 0.0;
  res.normr = res.r2norm = beta;
  res.normar = alfa * beta;
  least_squares_record(res, o, 0, beta);
  if (res.normar == 0.0) {  // x0 already solves it, or Aᴴ b = 0
    res.normx = 0.0;
    least_squares_finish(res, false);
    return res;
  }
  for (int itn = 1;; ++itn) {
    gk.next_u<0>({});
    beta = gk.beta;
    double wnorm2 = 0.0;
    if (beta > 0.0) {
      anorm = std::sqrt(anorm * anorm + alfa * alfa + beta * beta + dampsq);
      wnorm2 = gk.next_v<1>({w_local2})[1];
      alfa = gk.alpha;
    } else {
      wnorm2 = sum_real<1>({w_local2}, gk.comm())[0];
    }
    // Eliminate the damping parameter, then the subdiagonal β.
    double psi = 0.0, rhobar1 = rhobar;
    if (damp > 0.0) {
      rhobar1 = std::sqrt(rhobar * rhobar + dampsq);
      const double cs1 = rhobar / rhobar1, sn1 = damp / rhobar1;
      psi = sn1 * phibar;
      phibar = cs1 * phibar;
    }
    const auto rot = sym_ortho(rhobar1, beta);
    const double cs = rot.c, sn = rot.s, rho = rot.r;  // rho: captured by the fused update
    const double theta = sn * alfa;
    rhobar = -cs * alfa;
    const double phi = cs * phibar;
    phibar = sn * phibar;
    const double tau = sn * phi;
    // x += (φ/ρ) w, w = v − (θ/ρ) w in one pass, with ‖w‖² of the new w for the next step's
    // reduction; ‖d_k‖² = ‖w‖²/ρ² for the condition estimate.
    w_local2 = uses_generic(x) ? [&] {  // the same pass of ATen operations, its dot in one host copy
      const at::NoGradGuard no_grad;
      x.add_(w, phi / rho);
      w.mul_(-theta / rho).add_(v, gk.v_scale());
      return to_host_real({at::vdot(w, w)})[0];
    }() : vector_pass<1>(x.scalar_type(), x.numel(), [&](auto v0) {
                 using V = decltype(v0);
                 auto* __restrict xp = x.data_ptr<V>();
                 auto* __restrict wp = w.data_ptr<V>();
                 const auto* __restrict vp = v.data_ptr<V>();
                 const V step = static_cast<V>(phi / rho), keep = static_cast<V>(-theta / rho),
                         vs = static_cast<V>(gk.v_scale());
                 return [=](std::int64_t i, V* acc) {
                   const V wi = wp[i];
                   xp[i] += step * wi;
                   const V wn = vs * vp[i] + keep * wi;
                   wp[i] = wn;
                   acc[0] += conj_if_complex(wn) * wn;
                 };
               })[0]
                   .real();
    ddnorm += wnorm2 / (rho * rho);
    // ‖x‖ from the lower-bidiagonal recurrence (no reduction), as in SciPy.
    const double delta = sn2 * rho, gambar = -cs2 * rho, rhs = phi - delta * z, zbar = rhs / gambar;
    xnorm = std::sqrt(xxnorm + zbar * zbar);
    const double gamma = std::sqrt(gambar * gambar + theta * theta);
    cs2 = gambar / gamma;
    sn2 = theta / gamma;
    z = rhs / gamma;
    xxnorm += z * z;
    acond = anorm * std::sqrt(ddnorm);
    res2 += psi * psi;
    const double rnorm = std::sqrt(phibar * phibar + res2);
    const double arnorm = alfa * std::abs(tau);
    const double r1sq = rnorm * rnorm - dampsq * xxnorm;
    if (least_squares_iteration(res, o, itn, maxiter, normb,
                                {std::sqrt(std::abs(r1sq)), rnorm, arnorm, anorm, acond, xnorm}))
      break;
  }
  res.info.seconds = comm::wall_time() - t0;
  least_squares_finish(res, false);
  return res;
}

}  // namespace einshard::sparse::detail
