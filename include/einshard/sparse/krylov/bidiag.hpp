#pragma once
/// @file
/// What LSQR and LSMR share: Golub–Kahan bidiagonalization on a distributed operator (one product
/// with A, one with Aᴴ and two all-reduces per step, each carrying the method's own dots along),
/// SciPy's stable Givens rotation, and Paige and Saunders' stop rules with their `istop` codes.

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <complex>
#include <limits>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/matrix/operator.hpp"

namespace einshard::sparse::detail {

/// A Givens rotation (c, s) with r = sqrt(a² + b²) and [c s; -s c] [a; b] = [r; 0], stable for
/// any magnitudes (SciPy's `_sym_ortho`, after Choi's thesis).
struct Rotation {
  double c, s, r;
};
inline Rotation sym_ortho(double a, double b) {
  const auto sign = [](double t) { return t > 0.0 ? 1.0 : (t < 0.0 ? -1.0 : 0.0); };
  if (b == 0.0) return {sign(a), 0.0, std::abs(a)};
  if (a == 0.0) return {0.0, sign(b), std::abs(b)};
  if (std::abs(b) > std::abs(a)) {
    const double tau = a / b, s = sign(b) / std::sqrt(1.0 + tau * tau);
    return {s * tau, s, b / s};
  }
  const double tau = b / a, c = sign(a) / std::sqrt(1.0 + tau * tau);
  return {c, c * tau, a / c};
}

/// β u = A v − α u and α v = Aᴴ u − β v, u in the range and v in the domain partition. Each half
/// reduces its norm together with `N` dots the caller supplies, so a method that needs more
/// scalars per step still pays two all-reduces. u and v are kept unnormalized, the true vectors
/// being `u_scale()` u and `v_scale()` v: each update is one pass (the product's result, the old
/// vector and the new norm) with the scales folded in, where normalizing would be a pass more.
class GolubKahan {
 public:
  GolubKahan(const Operator& A, at::Tensor u0) : A_(A), comm_(A.layout()->comm()) {
    u = std::move(u0);
    av_ = at::empty_like(u);
    v = at::empty({A.domain_layout()->local_size()}, u.options());
    ahu_ = at::empty_like(v);
  }

  /// Starts from u (= b − A x0) and v = Aᴴ u / ‖Aᴴ u‖ (scaled). `unorm2`: ‖u‖², reduced.
  void begin(double unorm2) {
    beta = std::sqrt(unorm2);
    us_ = beta > 0.0 ? 1.0 / beta : 1.0;
    if (beta > 0.0) {
      A_.apply_adjoint(u, v);  // Aᴴ u_true = us v
      alpha = us_ * std::sqrt(reduce<0>(local_dot(v, v).real(), {})[0]);
    } else {
      v.zero_();
      alpha = 0.0;
    }
    vs_ = alpha > 0.0 ? us_ / alpha : 1.0;
  }

  /// u <- (A v − α u) / β; returns the reduced {β², extra...}. The product writes the new u
  /// itself (apply_update): u is stored as A v − (α us / vs) u, the true one being vs times that
  /// over β, so neither the product's vector nor a pass over it is needed.
  template <std::size_t N>
  std::array<double, N + 1> next_u(const std::array<std::complex<double>, N>& extra) {
    auto s = reduce<N>(A_.apply_update(v, u, -alpha * us_ / vs_, av_), extra);
    const double stored = std::sqrt(s[0]);
    beta = vs_ * stored;
    s[0] = beta * beta;
    us_ = stored > 0.0 ? 1.0 / stored : 1.0;
    return s;
  }

  /// v <- (Aᴴ u − β v) / α; returns the reduced {α², extra...}.
  template <std::size_t N>
  std::array<double, N + 1> next_v(const std::array<std::complex<double>, N>& extra) {
    A_.apply_adjoint(u, ahu_);
    auto s = reduce<N>(axpby_norm(us_, ahu_, -beta * vs_, v), extra);
    alpha = std::sqrt(s[0]);
    vs_ = alpha > 0.0 ? 1.0 / alpha : 1.0;
    return s;
  }

  [[nodiscard]] MPI_Comm comm() const { return comm_; }
  /// The normalized vectors are `u_scale() * u` and `v_scale() * v`.
  [[nodiscard]] double u_scale() const { return us_; }
  [[nodiscard]] double v_scale() const { return vs_; }

  at::Tensor u, v;
  double alpha = 0.0, beta = 0.0;

 private:
  template <std::size_t N>
  std::array<double, N + 1> reduce(double local_norm2, const std::array<std::complex<double>, N>& extra) const {
    std::array<std::complex<double>, N + 1> all{};
    all[0] = local_norm2;
    for (std::size_t i = 0; i < N; ++i) all[i + 1] = extra[i];
    return sum_real<N + 1>(all, comm_);
  }

  const Operator& A_;
  MPI_Comm comm_;
  at::Tensor av_, ahu_;
  double us_ = 1.0, vs_ = 1.0;
};

/// Paige and Saunders' stop rules in SciPy's order (later tests override earlier ones), shared by
/// LSQR and LSMR. `normr`, `normar`, `norma`, `conda`, `normx`: the current estimates.
inline int least_squares_istop(int itn, int maxiter, double normb, double normr, double normar, double norma,
                               double conda, double normx, const LeastSquaresOptions& o) {
  const double test1 = normr / normb;
  const double test2 =
      norma * normr != 0.0 ? normar / (norma * normr) : std::numeric_limits<double>::infinity();
  const double test3 = 1.0 / conda;
  const double t1 = test1 / (1.0 + norma * normx / normb);
  const double rtol = o.btol + o.atol * norma * normx / normb;
  const double ctol = o.conlim > 0.0 ? 1.0 / o.conlim : 0.0;
  int istop = 0;
  if (itn >= maxiter) istop = 7;
  if (1.0 + test3 <= 1.0) istop = 6;
  if (1.0 + test2 <= 1.0) istop = 5;
  if (1.0 + t1 <= 1.0) istop = 4;
  if (test3 <= ctol) istop = 3;
  if (test2 <= o.atol) istop = 2;
  if (test1 <= rtol) istop = 1;
  if (!std::isfinite(normr) || !std::isfinite(normx)) istop = -1;  // NaN: reported as StopReason::nan
  return istop;
}

/// Records one iteration's residual estimate (history, monitor).
inline void least_squares_record(LeastSquaresResult& r, const LeastSquaresOptions& o, int itn, double normr) {
  r.info.iterations = itn;
  r.info.residual_norm = normr;
  if (o.residual_history) r.info.residual_history.push_back(normr);
  if (o.monitor) o.monitor(itn, normr);
}

/// `info.reason` and `converged` from `istop` (see LeastSquaresResult).
inline void least_squares_finish(LeastSquaresResult& r, bool zero_rhs) {
  auto& info = r.info;
  switch (r.istop) {
    case 0: info.reason = zero_rhs ? StopReason::zero_rhs : StopReason::converged_atol; break;
    case 1: case 4: info.reason = StopReason::converged_rtol; break;
    case 2: case 5: info.reason = StopReason::converged_atol; break;
    case 3: case 6: info.reason = StopReason::breakdown; break;
    case 7: info.reason = StopReason::maxiter; break;
    default: info.reason = StopReason::nan; break;
  }
  info.converged = info.reason == StopReason::zero_rhs || info.reason == StopReason::converged_rtol ||
                   info.reason == StopReason::converged_atol;
}

/// One iteration's estimates (the stop test uses r2norm, the damped residual both minimize).
struct LeastSquaresEstimates {
  double normr, r2norm, normar, norma, conda, normx;
};

/// Stores an iteration's estimates in `res`, records r2norm, and applies the stop rules: true to
/// stop (`res.istop` set).
inline bool least_squares_iteration(LeastSquaresResult& res, const LeastSquaresOptions& o, int itn, int maxiter,
                                    double normb, const LeastSquaresEstimates& e) {
  res.normr = e.normr;
  res.r2norm = e.r2norm;
  res.normar = e.normar;
  res.norma = e.norma;
  res.conda = e.conda;
  res.normx = e.normx;
  least_squares_record(res, o, itn, e.r2norm);
  res.istop = least_squares_istop(itn, maxiter, normb, e.r2norm, e.normar, e.norma, e.conda, e.normx, o);
  return res.istop != 0;
}

/// b = 0: x = 0 exactly, whatever x0 was (istop 0, reason zero_rhs).
inline void least_squares_zero_rhs(LeastSquaresResult& res, const LeastSquaresOptions& o, at::Tensor& x) {
  x.zero_();
  least_squares_record(res, o, 0, 0.0);
  least_squares_finish(res, /*zero_rhs=*/true);
}

/// The start both methods share: x = x0 (or 0), u = b − A x0 with ‖b‖ and ‖u‖ in one all-reduce,
/// `res.x` and `res.info.rhs_norm` set, then b = 0 answered (`done`) or the bidiagonalization
/// begun (v = Aᴴ u / ‖Aᴴ u‖).
struct LeastSquaresStart {
  at::Tensor x;
  double normb;
  GolubKahan gk;
  bool done;
};
inline LeastSquaresStart least_squares_start(const Operator& A, const DVector& b, const LeastSquaresOptions& o,
                                             LeastSquaresResult& res) {
  const auto bl = b.local();
  auto u = bl.detach().contiguous().clone();
  const auto n_local = A.domain_layout()->local_size();
  auto x = o.x0 ? o.x0->local().detach().to(u.scalar_type()).contiguous().clone() : at::zeros({n_local}, u.options());
  if (o.x0) {
    auto q = at::empty_like(u);
    A.apply(x, q, {});
    u.sub_(q);
  }
  const auto n = sum_real<2>({local_dot(bl, bl), o.x0 ? local_dot(u, u) : std::complex<double>{}}, A.layout()->comm());
  const double normb = std::sqrt(n[0]), normu2 = o.x0 ? n[1] : n[0];
  res.x = DVector(A.domain_layout(), x);
  res.info.rhs_norm = normb;
  LeastSquaresStart s{x, normb, GolubKahan(A, u), normb == 0.0};
  if (s.done)
    least_squares_zero_rhs(res, o, s.x);
  else
    s.gk.begin(normu2);
  return s;
}

}  // namespace einshard::sparse::detail
