#pragma once
/// @file
/// Distributed LSMR (Fong and Saunders 2011) in the organisation of SciPy's `lsmr`: the same
/// recurrences, estimates and `istop` codes. LSMR minimizes ‖Aᴴ r‖ over the Krylov space, so
/// ‖Aᴴ r‖ falls monotonically and the method can stop earlier than LSQR on a least-squares problem.
///
/// Per iteration: one product with A, one with Aᴴ, two all-reduces, and three fused passes (u's and
/// v's updates with their norms, bidiag.hpp; h̄, x and h together with the dots below). SciPy's stop test needs ‖x_k‖
/// every iteration, which would be a third all-reduce; here it is predicted exactly from dots of
/// the previous iterates (x, h, h̄), reduced together with ‖u‖²:
/// x_k = x + γ h̄_k, h̄_k = h − δ h̄, so ‖x_k‖² = ‖x‖² + 2γ Re<x, h̄_k> + γ² ‖h̄_k‖², each a
/// combination of <x,x>, <x,h>, <x,h̄>, <h,h>, <h,h̄>, <h̄,h̄>.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/bidiag.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/matrix/operator.hpp"

namespace einshard::sparse::detail {

inline LeastSquaresResult lsmr(const Operator& A, const DVector& b, const LeastSquaresOptions& o) {
  const auto m = A.layout()->global_size(), n = A.domain_layout()->global_size();
  const int maxiter = o.maxiter > 0 ? o.maxiter : static_cast<int>(std::max<std::int64_t>(std::min(m, n), 1));
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
  const double damp = o.damp;
  double alpha = gk.alpha, beta = gk.beta;
  double zetabar = alpha * beta, alphabar = alpha, rho = 1.0, rhobar = 1.0, cbar = 1.0, sbar = 0.0;
  auto h = at::zeros_like(v), hbar = at::zeros_like(v);
  // h̄ = h − δ h̄, x += γ h̄, h = v − κ h in one pass (v normalized by its scale), with this rank's
  // <x,x>, <x,h>, <x,h̄>, <h,h>, <h,h̄>, <h̄,h̄> of the new vectors, the next step's dots.
  const auto update = [&](double delta, double gamma, double kappa) {
    if (uses_generic(x)) {  // the same pass of ATen operations, its dots in one host copy
      const at::NoGradGuard no_grad;
      hbar.mul_(-delta).add_(h);
      x.add_(hbar, gamma);
      h.mul_(-kappa).add_(v, gk.v_scale());
      const auto d = to_host({at::vdot(x, x), at::vdot(x, h), at::vdot(x, hbar), at::vdot(h, h), at::vdot(h, hbar),
                              at::vdot(hbar, hbar)});
      std::array<std::complex<double>, 6> out;
      std::copy(d.begin(), d.end(), out.begin());
      return out;
    }
    return vector_pass<6>(x.scalar_type(), x.numel(), [&](auto v0) {
      using V = decltype(v0);
      auto* __restrict xp = x.data_ptr<V>();
      auto* __restrict hp = h.data_ptr<V>();
      auto* __restrict bp = hbar.data_ptr<V>();
      const auto* __restrict vp = v.data_ptr<V>();
      const V d = static_cast<V>(delta), g = static_cast<V>(gamma), c = static_cast<V>(-kappa),
              vs = static_cast<V>(gk.v_scale());
      return [=](std::int64_t i, V* acc) {
        const V hi = hp[i];
        const V bi = hi - d * bp[i];
        bp[i] = bi;
        const V xi = xp[i] + g * bi;
        xp[i] = xi;
        const V hn = vs * vp[i] + c * hi;
        hp[i] = hn;
        acc[0] += conj_if_complex(xi) * xi;
        acc[1] += conj_if_complex(xi) * hn;
        acc[2] += conj_if_complex(xi) * bi;
        acc[3] += conj_if_complex(hn) * hn;
        acc[4] += conj_if_complex(hn) * bi;
        acc[5] += conj_if_complex(bi) * bi;
      };
    });
  };
  auto dots = update(0.0, 0.0, 0.0);  // h = v, h̄ = 0, x as it is
  double betadd = beta, betad = 0.0, rhodold = 1.0, tautildeold = 0.0, thetatilde = 0.0, zeta = 0.0, d = 0.0;
  double normA2 = alpha * alpha, maxrbar = 0.0, minrbar = 1e100;
  res.norma = std::sqrt(normA2);
  res.conda = 1.0;
  res.normr = res.r2norm = beta;
  res.normar = alpha * beta;
  least_squares_record(res, o, 0, beta);
  if (res.normar == 0.0) {
    least_squares_finish(res, false);
    return res;
  }
  for (int itn = 1;; ++itn) {
    const auto s = gk.next_u<6>(dots);
    beta = gk.beta;
    if (beta > 0.0) {
      gk.next_v<0>({});
      alpha = gk.alpha;
    }
    // Construct the rotations P̂ (damping), P and P̄.
    const auto [chat, shat, alphahat] = sym_ortho(alphabar, damp);
    const double rhoold = rho;
    const auto rot = sym_ortho(alphahat, beta);
    const double c = rot.c, sn = rot.s;
    rho = rot.r;
    const double thetanew = sn * alpha;
    alphabar = c * alpha;
    const double rhobarold = rhobar, zetaold = zeta, thetabar = sbar * rho, rhotemp = cbar * rho;
    const auto bar = sym_ortho(cbar * rho, thetanew);
    cbar = bar.c;
    sbar = bar.s;
    rhobar = bar.r;
    zeta = cbar * zetabar;
    zetabar = -sbar * zetabar;
    // h̄ = h − δ h̄, x += γ h̄, h = v − (θ/ρ) h; ‖x‖ predicted from the reduced dots (see above).
    const double delta = thetabar * rho / (rhoold * rhobarold), gamma = zeta / (rho * rhobar);
    const double x_hbar = s[2] - delta * s[3];
    const double hbar2 = s[4] - 2.0 * delta * s[5] + delta * delta * s[6];
    const double normx = std::sqrt(std::max(0.0, s[1] + 2.0 * gamma * x_hbar + gamma * gamma * hbar2));
    dots = update(delta, gamma, thetanew / rho);
    // Estimate ‖r‖.
    const double betaacute = chat * betadd, betacheck = -shat * betadd;
    const double betahat = c * betaacute;
    betadd = -sn * betaacute;
    const double thetatildeold = thetatilde;
    const auto tilde = sym_ortho(rhodold, thetabar);
    thetatilde = tilde.s * rhobar;
    rhodold = tilde.c * rhobar;
    betad = -tilde.s * betad + tilde.c * betahat;
    tautildeold = (zetaold - thetatildeold * tautildeold) / tilde.r;
    const double taud = (zeta - thetatilde * tautildeold) / rhodold;
    d += betacheck * betacheck;
    const double normr = std::sqrt(d + (betad - taud) * (betad - taud) + betadd * betadd);
    // Estimate ‖A‖ and cond(A).
    normA2 += beta * beta;
    const double normA = std::sqrt(normA2);
    normA2 += alpha * alpha;
    maxrbar = std::max(maxrbar, rhobarold);
    if (itn > 1) minrbar = std::min(minrbar, rhobarold);
    const double condA = std::max(maxrbar, rhotemp) / std::min(minrbar, rhotemp);
    // LSMR's estimate is of the damped residual ‖[b; 0] − [A; damp I] x‖, which SciPy returns as
    // normr; the undamped one would come by a cancelling difference, so it is not offered.
    if (least_squares_iteration(res, o, itn, maxiter, normb, {normr, normr, std::abs(zetabar), normA, condA, normx}))
      break;
  }
  res.info.seconds = comm::wall_time() - t0;
  least_squares_finish(res, false);
  return res;
}

}  // namespace einshard::sparse::detail
