#pragma once
/// @file
/// Distributed BiCGStab (van der Vorst), right-preconditioned (Saad, Algorithm 7.7 with M⁻¹ applied
/// to the search directions), for general square A, real or complex. Three all-reduces per
/// iteration: <r̂, v> (returned by the product itself), (<t, s>, <t, t>), and (<r̂, r>, <r, r>) of
/// the new residual, so the stop test sees the true recursive ‖r‖ every iteration (the original
/// checked every tenth and surfaced breakdowns only as NaN).

#include <mpi.h>

#include <cmath>
#include <complex>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"

namespace einshard::sparse::detail {

inline SolveResult bicgstab(const Operator& A, const DVector& b, const PreconditionerOp* m,
                            const SolveOptions& o) {
  using C = std::complex<double>;
  const MPI_Comm comm = A.layout()->comm();
  return run_from_start(A, b, o, [&](IterationZero& st, Progress& progress, SolveResult&) {
    const auto& bl = st.b;
    auto& x = st.x;
    auto& r = st.r;
    const double rnorm = st.rnorm;
    const PreconditionerUse M(m, bl);
    const auto rhat = r.clone();  // the shadow residual r̂ = r₀
    C rho = rnorm * rnorm;
    auto p = r.clone(), v = at::zeros_like(bl), s = at::empty_like(bl), t = at::empty_like(bl);
    auto phat = M.identity ? p : at::empty_like(bl);
    auto shat = M.identity ? s : at::empty_like(bl);
    C alpha = 1, omega = 1;
    for (int k = 1;; ++k) {
      if (!M.identity) M.apply(p, phat);
      const C rv = comm::summed({A.apply(phat, v, rhat)}, comm)[0];
      if (rv == 0.0 || !std::isfinite(std::abs(rv))) {
        progress.stop(std::isfinite(std::abs(rv)) ? StopReason::breakdown : StopReason::nan);
        break;
      }
      alpha = rho / rv;
      at::sub_out(s, r, v, scalar(alpha, bl));  // s = r − α v
      if (!M.identity) M.apply(s, shat);
      const auto ts = comm::summed({A.apply(shat, t, s), local_dot(t, t)}, comm);  // (<s, t>, <t, t>)
      omega = ts[1].real() == 0.0 ? C(0) : std::conj(ts[0]) / ts[1].real();
      x.add_(phat, scalar(alpha, bl)).add_(shat, scalar(omega, bl));
      at::sub_out(r, s, t, scalar(omega, bl));  // r = s − ω t
      const auto next = comm::summed({local_dot(rhat, r), local_dot(r, r)}, comm);
      if (progress.record(k, std::sqrt(next[1].real()))) break;
      if (omega == 0.0 || next[0] == 0.0) {  // the next direction is undefined
        progress.stop(StopReason::breakdown);
        break;
      }
      const C beta = next[0] / rho * (alpha / omega);
      rho = next[0];
      p.sub_(v, scalar(omega, bl)).mul_(scalar(beta, bl)).add_(r);  // p = r + β (p − ω v)
    }
  });
}

}  // namespace einshard::sparse::detail
