#pragma once
/// @file
/// Distributed preconditioned conjugate gradients, in two organisations of the reductions
/// (`CgVariant`): Hestenes–Stiefel with two all-reduces per iteration, and Chronopoulos–Gear with
/// one. The vector updates and the dots are fused (krylov/kernels.hpp) and the product returns
/// its own dot (`Operator::apply`), so an unpreconditioned standard iteration streams the matrix
/// once and the vectors in three passes.

#include <mpi.h>

#include <array>
#include <cmath>
#include <complex>
#include <string>

#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/dvector.hpp"
#include "einshard/sparse/krylov/kernels.hpp"
#include "einshard/sparse/operator.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "einshard/sparse/solver.hpp"

namespace einshard::sparse::detail {

/// Sums the real parts of `v` over the ranks (the dots of a Hermitian method are real).
template <std::size_t N>
std::array<double, N> sum_real(const std::array<std::complex<double>, N>& v, MPI_Comm comm) {
  std::array<double, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = v[i].real();
  comm::check(MPI_Allreduce(MPI_IN_PLACE, out.data(), static_cast<int>(N), MPI_DOUBLE, MPI_SUM, comm),
              "MPI_Allreduce");
  return out;
}

/// Bookkeeping shared by both variants: the stop test, the history, the monitor.
class CgProgress {
 public:
  CgProgress(const SolveOptions& o, SolveInfo& info) : o_(o), info_(info) {}

  void start(double rhs_norm) {
    info_.rhs_norm = rhs_norm;
    tol_ = std::max(o_.atol, o_.rtol * rhs_norm);
  }
  /// Records ||r_k|| and says whether to stop (setting the reason).
  bool record(int k, double rnorm) {
    info_.iterations = k;
    info_.residual_norm = rnorm;
    if (o_.residual_history) info_.residual_history.push_back(rnorm);
    if (o_.monitor) o_.monitor(k, rnorm);
    if (!std::isfinite(rnorm)) return stop(StopReason::nan);
    if (rnorm <= tol_) return stop(rnorm <= o_.atol ? StopReason::converged_atol : StopReason::converged_rtol);
    if (rnorm > o_.dtol * info_.rhs_norm) return stop(StopReason::diverged);
    if (k >= o_.maxiter) return stop(StopReason::maxiter);
    return false;
  }
  /// CG needs <r, M r> and <p, A p> of one sign: both positive (SPD A and M) or both negative
  /// (negative definite A with a negative definite M, e.g. Jacobi on -A, which is why Jacobi keeps
  /// negative diagonals). A zero or a change of sign is a breakdown.
  bool check_same_sign(double rz, double curvature) {
    if (!std::isfinite(rz) || !std::isfinite(curvature)) return stop(StopReason::nan);
    if (rz * curvature <= 0.0) return stop(StopReason::breakdown);
    return false;
  }
  bool check_nonzero(double rz) {
    if (!std::isfinite(rz)) return stop(StopReason::nan);
    if (rz == 0.0) return stop(StopReason::breakdown);
    return false;
  }

 private:
  bool stop(StopReason r) {
    info_.reason = r;
    info_.converged = r == StopReason::converged_atol || r == StopReason::converged_rtol || r == StopReason::zero_rhs;
    return true;
  }
  const SolveOptions& o_;
  SolveInfo& info_;
  double tol_ = 0.0;
};

/// z = M^-1 r as the CG kernels want it: a diagonal `d` for the fused kernels (Jacobi kinds), the
/// identity, or a general operator applied in its own pass.
struct PreconditionerUse {
  const PreconditionerOp* op = nullptr;
  at::Tensor diagonal;
  bool identity = true;

  PreconditionerUse(Preconditioner kind, const PreconditionerOp* m, const at::Tensor& like) : op(m) {
    if (kind == Preconditioner::none || m == nullptr) return;
    identity = false;
    if (const auto d = m->diagonal(); d.defined()) diagonal = d.to(like.scalar_type()).contiguous();
  }
  [[nodiscard]] bool general() const { return !identity && !diagonal.defined(); }
  void apply(const at::Tensor& r, at::Tensor& z) const {
    if (diagonal.defined())
      at::mul_out(z, diagonal, r);
    else if (identity)
      z.copy_(r);
    else
      op->apply(r, z);
  }
};

inline SolveResult cg(const Operator& A, const DVector& b, Preconditioner kind, const PreconditionerOp* m,
                      const SolveOptions& o) {
  const auto& layout = A.layout();
  const MPI_Comm comm = layout->comm();
  SolveResult result;
  auto& info = result.info;
  CgProgress progress(o, info);
  const auto bl = b.local().detach().contiguous();
  const auto dtype = bl.scalar_type();
  auto x = o.x0 ? o.x0->local().detach().to(dtype).clone().contiguous() : at::zeros_like(bl);
  auto r = bl.clone();
  auto q = at::empty_like(bl);
  if (o.x0) {
    A.apply(x, q, {});
    r.sub_(q);
  }
  const PreconditionerUse M(kind, m, bl);
  auto z = M.identity ? r : at::empty_like(bl);
  if (!M.identity) M.apply(r, z);
  const auto t0 = MPI_Wtime();
  const auto init = sum_real<3>({local_dot(r, z), local_dot(r, r), local_dot(bl, bl)}, comm);
  progress.start(std::sqrt(init[2]));
  result.x = DVector(layout, x);
  if (init[2] == 0.0) {  // b = 0: the solution is 0, whatever x0 was
    x.zero_();
    info.reason = StopReason::zero_rhs;
    info.converged = true;
    info.residual_norm = 0.0;
    if (o.residual_history) info.residual_history.push_back(0.0);
    if (o.monitor) o.monitor(0, 0.0);
    return result;
  }
  double rz = init[0];
  if (progress.record(0, std::sqrt(init[1])) || progress.check_nonzero(rz)) {
    info.seconds = MPI_Wtime() - t0;
    return result;
  }

  if (o.cg_variant == CgVariant::standard) {
    auto p = z.clone();
    for (int k = 1;; ++k) {
      const double pap = sum_real<1>({A.apply(p, q, p)}, comm)[0];
      if (progress.check_same_sign(rz, pap)) break;
      const double alpha = rz / pap;
      auto dots = cg_update(x, r, p, q, alpha, M.diagonal, z);
      if (M.general()) {
        M.apply(r, z);
        dots[0] = local_dot(r, z);
      }
      const auto red = sum_real<2>(dots, comm);
      if (progress.record(k, std::sqrt(red[1])) || progress.check_nonzero(red[0])) break;
      const double beta = red[0] / rz;
      rz = red[0];
      at::add_out(p, M.identity ? r : z, p, beta);
    }
  } else {
    // Chronopoulos–Gear: u = M r, w = A u; one reduction of (<r,u>, <u,w>, <r,r>) per iteration.
    auto u = M.identity ? r.clone() : z;
    auto w = at::empty_like(bl);
    auto p = at::zeros_like(bl);
    auto s = at::zeros_like(bl);
    double gamma = rz;
    double delta = sum_real<1>({A.apply(u, w, u)}, comm)[0];
    double alpha_old = 0.0, gamma_old = 0.0;
    for (int k = 1;; ++k) {
      const double beta = k == 1 ? 0.0 : gamma / gamma_old;
      const double denom = k == 1 ? delta : delta - beta * gamma / alpha_old;
      if (progress.check_same_sign(gamma, denom)) break;
      const double alpha = gamma / denom;
      auto dots = cgcg_update(x, r, p, s, u, w, alpha, beta, M.diagonal, M.identity);
      if (M.general()) {
        M.apply(r, u);
        dots[0] = local_dot(r, u);
      }
      const auto red = sum_real<3>({dots[0], A.apply(u, w, u), dots[1]}, comm);
      if (progress.record(k, std::sqrt(red[2])) || progress.check_nonzero(red[0])) break;
      gamma_old = gamma;
      gamma = red[0];
      delta = red[1];
      alpha_old = alpha;
    }
  }
  info.seconds = MPI_Wtime() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
