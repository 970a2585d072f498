#pragma once
/// @file
/// `DSparseTensor::nonlinear_solve`: Newton–Krylov for F(u) = A u + g(u) = 0 with g pointwise
/// (g and g' given on the owned slice), or for a general residual with a Jacobian-vector product.
/// Each Newton step solves J du = -F by restarted, preconditioned GMRES(restart) (the original
/// runs unpreconditioned full GMRES, allocating N/P x N per rank up front), then Armijo
/// backtracking; a line search that finds no decrease stops the solve and says so (the original
/// silently takes the full step). `NewtonResult::adjoint` solves J^T lambda = dL/du at the
/// solution, for gradients w.r.t. parameters: dL/dtheta = -lambda^T dF/dtheta.
///
/// For the pointwise form J = A + diag(g'(u)) is a DSparseTensor with A's structure (its diagonal
/// entries changed, or added by one assembly when A does not store its whole diagonal), so every
/// preconditioner of `solve` applies; the general form runs GMRES on the user's product.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/config.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/matrix/transpose.hpp"
#include "einshard/sparse/krylov/options.hpp"
#include "einshard/sparse/krylov/solve.hpp"
#if EINSHARD_DEFINE_SPARSE  // only the definitions below need it
#include "einshard/sparse/krylov/gmres.hpp"
#endif

namespace einshard::sparse {

struct NewtonOptions {
  /// Stop when ||F(u)|| <= max(atol, rtol ||F(u0)||).
  double rtol = 1e-10;
  double atol = 1e-12;
  int maxiter = 50;
  bool line_search = true;
  /// Armijo: accept alpha when ||F(u + alpha du)|| <= (1 - 1e-4 alpha) ||F(u)||, halving alpha.
  int max_backtracks = 20;
  /// The Newton step's GMRES: restart length, iteration limit, and the floor of its relative
  /// tolerance. The tolerance itself follows Eisenstat and Walker (choice 2): eta_k = 0.9
  /// (||F_k|| / ||F_k-1||)^2 within [linear_rtol, 1e-2], loose far from the root and tight near it,
  /// so the steps keep Newton's fast local convergence without oversolving the early ones.
  int restart = 30;
  int linear_maxiter = 1000;
  double linear_rtol = 1e-10;
  /// Pointwise form only: the preconditioner of J (built per Newton step from J's rows).
  Preconditioner preconditioner = Preconditioner::block_jacobi;
};

/// One Newton step's record.
struct NewtonStep {
  double residual_norm = 0.0;  ///< ||F|| before the step
  double step_length = 0.0;    ///< the accepted alpha (0 when the line search failed)
  int linear_iterations = 0;
  double linear_residual = 0.0;  ///< GMRES's final relative residual
  bool linear_converged = false;
};

struct NewtonInfo {
  bool converged = false;
  int iterations = 0;
  double residual_norm = 0.0;          ///< ||F(u)|| at the returned u
  double initial_residual_norm = 0.0;  ///< ||F(u0)||
  /// "converged (atol)", "converged (rtol)", "maxiter reached", "line search failed".
  std::string reason;
  std::vector<NewtonStep> steps;
};

/// A general residual: F(u), J(u) v and, for the adjoint, J(u)^T v (may be left empty).
struct NonlinearResidual {
  std::function<DVector(const DVector&)> residual;
  std::function<DVector(const DVector& u, const DVector& v)> jvp;
  std::function<DVector(const DVector& u, const DVector& v)> vjp;
};

struct NewtonResult {
  DVector u;
  NewtonInfo info;
  /// lambda with J(u)^T lambda = dL/du (GMRES with the Newton step's settings). Collective.
  [[nodiscard]] DVector adjoint(const DVector& dL_du) const {
    if (!transpose_solve) throw Error("NewtonResult::adjoint: the residual has no vjp (J^T v); pass one");
    return transpose_solve(dL_du);
  }
  std::function<DVector(const DVector&)> transpose_solve;
};

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

/// A Krylov operator from a product on DVectors (the general residual's J v or J^T v).
class FunctionOperator final : public Operator {
 public:
  FunctionOperator(std::shared_ptr<const RowLayout> layout, std::function<DVector(const DVector&)> f)
      : layout_(std::move(layout)), f_(std::move(f)) {}
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return layout_; }
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    y.copy_(f_(DVector(layout_, x)).local());
    if (!w.defined() || y.numel() == 0) return {};
    const auto d = (w.conj() * y).sum();
    if (d.is_complex()) return static_cast<std::complex<double>>(d.item<c10::complex<double>>());
    return {d.item<double>(), 0.0};
  }

 private:
  std::shared_ptr<const RowLayout> layout_;
  std::function<DVector(const DVector&)> f_;
};

/// The Newton iteration over a residual and a step solver (J du = rhs -> du, its info).
inline NewtonResult newton(const std::function<DVector(const DVector&)>& residual,
                           const std::function<std::pair<DVector, SolveInfo>(const DVector& u, const DVector& rhs,
                                                                             double rtol)>& step,
                           const DVector& u0, const NewtonOptions& o) {
  NewtonResult result;
  auto& info = result.info;
  auto u = u0.clone();
  auto f = residual(u);
  double fn = f.norm().item<double>();
  info.initial_residual_norm = fn;
  const double target = std::max(o.atol, o.rtol * fn);
  for (;;) {
    info.residual_norm = fn;
    if (fn <= o.atol || (info.iterations > 0 && fn <= target)) {
      info.converged = true;
      info.reason = fn <= o.atol ? "converged (atol)" : "converged (rtol)";
      break;
    }
    if (!std::isfinite(fn)) {
      info.reason = "NaN or Inf in the residual";
      break;
    }
    if (info.iterations >= o.maxiter) {
      info.reason = "maxiter reached";
      break;
    }
    NewtonStep s;
    s.residual_norm = fn;
    const double ratio = info.steps.empty() ? 0.0 : fn / info.steps.back().residual_norm;
    const double eta = info.steps.empty() ? 1e-2 : std::clamp(0.9 * ratio * ratio, o.linear_rtol, 1e-2);
    const auto [du, linear] = step(u, -f, std::max(eta, o.linear_rtol));
    s.linear_iterations = linear.iterations;
    s.linear_converged = linear.converged;
    s.linear_residual = linear.rhs_norm > 0 ? linear.residual_norm / linear.rhs_norm : 0.0;
    double alpha = 1.0;
    bool accepted = false;
    for (int b = 0; b <= (o.line_search ? o.max_backtracks : 0); ++b, alpha *= 0.5) {
      auto trial = u + alpha * du;
      auto ft = residual(trial);
      const double tn = ft.norm().item<double>();
      if (!o.line_search || tn <= (1.0 - 1e-4 * alpha) * fn) {
        u = std::move(trial);
        f = std::move(ft);
        fn = tn;
        accepted = true;
        break;
      }
    }
    ++info.iterations;
    s.step_length = accepted ? alpha : 0.0;
    info.steps.push_back(s);
    if (!accepted) {  // no decrease along du: report, do not step
      info.residual_norm = fn;
      info.reason = "line search failed";
      break;
    }
  }
  result.u = std::move(u);
  return result;
}

}  // namespace detail

EINSHARD_INLINE NewtonResult DSparseTensor::nonlinear_solve(const PointwiseFunction& g, const PointwiseFunction& dg,
                                                   const DVector& u0) const {
  return nonlinear_solve(g, dg, u0, NewtonOptions{});
}

EINSHARD_INLINE NewtonResult DSparseTensor::nonlinear_solve(const PointwiseFunction& g, const PointwiseFunction& dg,
                                                   const DVector& u0, const NewtonOptions& options) const {
  check_vector(u0, "nonlinear_solve", *layout_);
  // Agreed: an empty function on one rank must not leave the others in Newton's collectives.
  comm::raise_if_any(layout_->comm(), !g || !dg ? "DSparseTensor::nonlinear_solve: expected g and g' (dg), found an empty function" : "");
  const bool recording = at::GradMode::is_enabled();
  at::NoGradGuard no_grad;
  // Positions of the stored diagonal in values(): J's values are A's plus g'(u) there.
  const auto coo = detail::csr_to_coo(local_);  // no structured binding: the lambda below captures r
  const auto r = std::get<1>(coo);
  const auto diag_pos = (std::get<2>(coo).to(at::kLong) == r).nonzero().flatten();
  const bool whole = comm::every_rank(diag_pos.numel() == layout_->local_size(), layout_->comm());
  const auto base = values().detach();
  const auto owned = layout_->owned();
  const auto jacobian = [=, this](const DVector& u) {
    const auto d = dg(u.local()).to(dtype());
    if (whole) return with_values(base.index_add(0, diag_pos, d.index_select(0, r.index_select(0, diag_pos))));
    const auto t = detail::global_entries(*this);
    return from_local(at::cat({base, d}), at::cat({t.rows, owned}), at::cat({t.cols, owned}), shape(), mesh_,
                      {.owned_rows = owned});
  };
  const auto residual = [&](const DVector& u) { return matvec(u) + DVector(layout_, g(u.local()).to(dtype())); };
  const SolveOptions linear{.method = Method::gmres, .preconditioner = options.preconditioner, .rtol = options.linear_rtol,
                            .maxiter = options.linear_maxiter, .restart = options.restart, .residual_history = false};
  auto result = detail::newton(
      residual,
      [&](const DVector& u, const DVector& rhs, double rtol) {
        auto o = linear;
        o.rtol = rtol;
        auto s = jacobian(u).solve(rhs, o);
        return std::make_pair(std::move(s.x), s.info);
      },
      u0, options);
  result.transpose_solve = [jacobian, linear, u = result.u](const DVector& dL_du) {
    at::NoGradGuard guard;
    return jacobian(u).T().solve(dL_du, linear).x;
  };
  // Autograd: at the root A u + g(u; theta) = 0, u is the solution of A u = b with b = -g(u; theta)
  // held at u, so the solve's node gives dL/dtheta = lambda^H db/dtheta = -lambda^H dg/dtheta and
  // dL/da_ij = -lambda_i conj(u_j), with J^H lambda = dL/du: one linear adjoint solve in backward.
  // g is evaluated once more, recorded, to reach the tensors it depends on.
  if (recording) {
    at::AutoGradMode enable(true);
    const auto x = result.u.local().detach();
    const auto b = -g(x).to(dtype());
    const bool record = comm::any_rank(b.requires_grad() || values().requires_grad(), layout_->comm());
    if (record && result.info.converged)
      result.u = DVector(layout_, detail::SolvePipeline::record_solution(*this, b, x, [jacobian, linear, u = result.u](const at::Tensor& dL_du) {
                           at::NoGradGuard guard;
                           const auto r = jacobian(u).H().solve(DVector(u.layout(), dL_du), linear);
                           if (!r.info.converged) {
                             char reached[32];
                             std::snprintf(reached, sizeof reached, "%.1e",
                                           r.info.rhs_norm > 0 ? r.info.residual_norm / r.info.rhs_norm : 0.0);
                             throw Error(std::string("DSparseTensor::nonlinear_solve (backward): expected the adjoint GMRES to converge, found ") +
                                         to_string(r.info.reason) + " after " + std::to_string(r.info.iterations) +
                                         " iterations at relative residual " + reached +
                                         "; raise NewtonOptions::restart or linear_maxiter, or choose a stronger preconditioner");
                           }
                           return r.x.local();
                         }));
  }
  return result;
}

EINSHARD_INLINE NewtonResult DSparseTensor::nonlinear_solve(const NonlinearResidual& residual, const DVector& u0,
                                                   const NewtonOptions& options) const {
  check_vector(u0, "nonlinear_solve", *layout_);
  comm::raise_if_any(layout_->comm(), !residual.residual || !residual.jvp
                                          ? "DSparseTensor::nonlinear_solve: expected a residual and its jvp (J v), found an empty function"
                                          : "");
  at::NoGradGuard no_grad;
  const SolveOptions linear{.method = Method::gmres, .rtol = options.linear_rtol, .maxiter = options.linear_maxiter,
                            .restart = options.restart, .residual_history = false};
  const auto krylov = [layout = layout_, linear](std::function<DVector(const DVector&)> product, const DVector& rhs,
                                                 double rtol) {
    const detail::FunctionOperator op(layout, std::move(product));
    auto o = linear;
    o.rtol = rtol;
    return detail::gmres(op, rhs, nullptr, o);
  };
  auto result = detail::newton(
      residual.residual,
      [&](const DVector& u, const DVector& rhs, double rtol) {
        auto s = krylov([&](const DVector& v) { return residual.jvp(u, v); }, rhs, rtol);
        return std::make_pair(std::move(s.x), s.info);
      },
      u0, options);
  if (residual.vjp)
    result.transpose_solve = [krylov, vjp = residual.vjp, u = result.u, rtol = options.linear_rtol](const DVector& dL_du) {
      at::NoGradGuard guard;
      return krylov([&](const DVector& v) { return vjp(u, v); }, dL_du, rtol).x;
    };
  return result;
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
