#pragma once
/// @file
/// What every distributed Krylov method shares: reductions of dot products over the ranks, the stop
/// test with its history, monitor and reason (`Progress`), and the preconditioner as the kernels
/// apply it (`PreconditionerUse`).

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

/// Sums the real parts of `v` over the ranks (the dots of a Hermitian method are real).
template <std::size_t N>
std::array<double, N> sum_real(const std::array<std::complex<double>, N>& v, MPI_Comm comm) {
  std::array<double, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = v[i].real();
  comm::all_reduce_values(std::span<double>(out), comm::Reduction::sum, comm);
  return out;
}

/// Bookkeeping every Krylov method shares: the stop test, the history, the monitor, the reason.
class Progress {
 public:
  Progress(const SolveOptions& o, SolveInfo& info) : o_(o), info_(info) {}

  void start(double rhs_norm) {
    info_.rhs_norm = rhs_norm;
    tol_ = std::max(o_.atol, o_.rtol * rhs_norm);
  }
  /// Whether ||r|| = rnorm passes the convergence test (records nothing).
  [[nodiscard]] bool met(double rnorm) const { return rnorm <= tol_; }
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

  /// Takes back a convergence that a check of the true residual did not confirm: the iteration
  /// goes on, and the next stop sets the reason.
  void resume() {
    info_.converged = false;
    info_.reason = StopReason::maxiter;
  }
  /// Stops with `r` (breakdowns a method detects itself); returns true.
  bool stop(StopReason r) {
    info_.reason = r;
    info_.converged = r == StopReason::converged_atol || r == StopReason::converged_rtol || r == StopReason::zero_rhs;
    return true;
  }
 private:
  const SolveOptions& o_;
  SolveInfo& info_;
  double tol_ = 0.0;
};

/// z = M^-1 r as the Krylov kernels want it: a diagonal `d` for the fused kernels (Jacobi kinds), the
/// identity, or a general operator applied in its own pass.
struct PreconditionerUse {
  const PreconditionerOp* op = nullptr;
  at::Tensor diagonal;
  bool identity = true;

  /// `m` null: the identity (a solve passes null for `Preconditioner::none`).
  PreconditionerUse(const PreconditionerOp* m, const at::Tensor& like) : op(m) {
    if (m == nullptr) return;
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


/// `v` as a scalar for tensors of `like`'s dtype (its real part for a real one).
inline at::Scalar scalar(std::complex<double> v, const at::Tensor& like) {
  return like.is_complex() ? at::Scalar(c10::complex<double>(v)) : at::Scalar(v.real());
}

/// Host values as a 1-D tensor of `like`'s dtype on its device (their real parts for a real one):
/// one copy of a few coefficients to the device.
inline at::Tensor tensor_like(const std::vector<std::complex<double>>& v, const at::Tensor& like) {
  auto t = at::from_blob(const_cast<std::complex<double>*>(v.data()), {static_cast<std::int64_t>(v.size())},
                         at::kComplexDouble)
               .clone();
  return (like.is_complex() ? t : at::real(t)).to(like.device(), like.scalar_type());
}

/// A 1-D tensor's values as complex<double>, copied to the host in one copy.
inline std::vector<std::complex<double>> host_complex(const at::Tensor& t) {
  const auto c = t.to(at::kComplexDouble).cpu().contiguous();
  const auto* p = reinterpret_cast<const std::complex<double>*>(c.data_ptr());
  return {p, p + c.numel()};
}

/// The start every method but CG shares: x = x0 (or 0) and r = b - A x, owned slices, detached.
struct InitialGuess {
  at::Tensor b, x, r;
};

inline InitialGuess initial_guess(const Operator& A, const DVector& b, const SolveOptions& o) {
  InitialGuess s;
  s.b = b.local().detach().contiguous();
  s.x = o.x0 ? o.x0->local().detach().to(s.b.scalar_type()).clone().contiguous() : at::zeros_like(s.b);
  s.r = s.b.clone();
  if (o.x0) {
    auto q = at::empty_like(s.b);
    A.apply(s.x, q, {});
    s.r.sub_(q);
  }
  return s;
}

/// The result for b = 0: x = 0 exactly, whatever x0 was.
inline void zero_rhs(SolveResult& result, const SolveOptions& o) {
  auto& info = result.info;
  result.x.local().zero_();
  info.reason = StopReason::zero_rhs;
  info.converged = true;
  info.residual_norm = 0.0;
  if (o.residual_history) info.residual_history.push_back(0.0);
  if (o.monitor) o.monitor(0, 0.0);
}

/// A block solve's summary from its columns' records (`SolveInfo::columns`): converged when every
/// column did (else the first failing column's reason); the largest iterations and norms.
inline void summarize_columns(SolveInfo& info) {
  info.converged = true;
  info.reason = info.columns.empty() ? StopReason::zero_rhs : info.columns.front().reason;
  for (const auto& c : info.columns) {
    info.iterations = std::max(info.iterations, c.iterations);
    info.residual_norm = std::max(info.residual_norm, c.residual_norm);
    info.rhs_norm = std::max(info.rhs_norm, c.rhs_norm);
    if (!c.converged && info.converged) {
      info.converged = false;
      info.reason = c.reason;
    }
  }
}

/// The start BiCGStab and GMRES share: x = x0 (or 0) and r = b − A x (`initial_guess`), ‖b‖ for the stop
/// test, x = 0 for b = 0, and the iteration-0 record. `done`: the solve ended before iterating.
struct IterationZero {
  at::Tensor b, x, r;
  double rnorm = 0.0;
  bool done = false;
};

inline IterationZero iteration_zero(const Operator& A, const DVector& b, const SolveOptions& o, Progress& progress,
                     SolveResult& result) {
  auto [bl, x, r] = initial_guess(A, b, o);
  result.x = DVector(A.layout(), x);
  const auto init = comm::summed({local_dot(r, r), local_dot(bl, bl)}, A.layout()->comm());
  progress.start(std::sqrt(init[1].real()));
  IterationZero s{bl, x, r, std::sqrt(init[0].real())};
  if (init[1].real() == 0.0) {
    zero_rhs(result, o);
    s.done = true;
    return s;
  }
  s.done = progress.record(0, s.rnorm);
  return s;
}

/// A method that begins with `iteration_zero`: the result, its Progress and the start made, then
/// `iterate(started, progress, result)` unless the solve ended at the start, the iterations
/// timed into `info.seconds`.
template <class Iterate>
SolveResult run_from_start(const Operator& A, const DVector& b, const SolveOptions& o, Iterate&& iterate) {
  SolveResult result;
  Progress progress(o, result.info);
  const auto t0 = comm::wall_time();
  auto s = iteration_zero(A, b, o, progress, result);
  if (!s.done) iterate(s, progress, result);
  result.info.seconds = comm::wall_time() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
