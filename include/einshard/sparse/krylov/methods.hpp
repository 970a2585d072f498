#pragma once
/// @file
/// One entry to every Krylov method (`run_method`: by method, vector or block), so the distributed
/// matrix, the batch and a matrix-free operator dispatch the same way; the least-squares methods
/// behind `solve` and the normal-equations adjoint of a least-squares solve; and the custom
/// preconditioner a solve's options carry.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/sparse/preconditioner/custom.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/krylov/bicgstab.hpp"
#include "einshard/sparse/krylov/block_bicgstab.hpp"
#include "einshard/sparse/krylov/block_cg.hpp"
#include "einshard/sparse/krylov/block_gmres.hpp"
#include "einshard/sparse/krylov/block_minres.hpp"
#include "einshard/sparse/krylov/cg.hpp"
#include "einshard/sparse/krylov/column_groups.hpp"
#include "einshard/sparse/krylov/gmres.hpp"
#include "einshard/sparse/krylov/lsmr.hpp"
#include "einshard/sparse/krylov/lsqr.hpp"
#include "einshard/sparse/krylov/minres.hpp"
#include "einshard/sparse/krylov/null_space.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

/// Whether `method` minimizes ‖A x − b‖ (any shape) rather than solving a square system.
inline bool is_least_squares(Method method) { return method == Method::lsqr || method == Method::lsmr; }

/// LSQR or LSMR asked for through `solve`: atol := atol, btol := rtol (1e-8 when rtol is 0), no
/// damping, conlim 1e8, the solve's maxiter, x0 (of the domain) and monitor (torch-sla's mapping).
/// A preconditioner is refused: neither method takes one.
inline SolveResult least_squares_solve(const Operator& A, const DVector& b, const PreconditionerOp* m,
                                       const SolveOptions& o) {
  if (m != nullptr || o.preconditioner != Preconditioner::none || o.custom_preconditioner)
    throw Error(std::string("solve: ") + to_string(o.method) + " takes no preconditioner, got " +
                (o.custom_preconditioner ? std::string("a custom one") : std::string(to_string(o.preconditioner))) +
                "; precondition by solving with A M⁻¹ as a LinearOperator");
  if (o.x0)
    check_partition(*o.x0, *A.domain_layout(), std::string("solve (") + to_string(o.method) + ", x0)", "matrix's",
                    "domain", "make it with domain_zeros() or scatter of a domain-length vector");
  const LeastSquaresOptions lo{.atol = o.atol,
                               .btol = o.rtol > 0.0 ? o.rtol : 1e-8,
                               .maxiter = o.maxiter,
                               .x0 = o.x0,
                               .monitor = o.monitor,
                               .residual_history = o.residual_history};
  auto r = o.method == Method::lsqr ? lsqr(A, b, lo) : lsmr(A, b, lo);
  return {std::move(r.x), std::move(r.info)};
}

/// `least_squares_solve` of an (n_local, k) block, column by column (neither method has a block
/// recurrence here): `info.columns` as the block methods give it.
inline SolveResult least_squares_solve_block(const Operator& A, const DVector& b, const PreconditionerOp* m,
                                             const SolveOptions& o) {
  const auto k = b.local().size(1);
  auto x = at::empty({A.domain_layout()->local_size(), k}, b.local().options());
  SolveResult result;
  for (std::int64_t j = 0; j < k; ++j) {
    auto oj = o;
    if (o.x0) oj.x0 = DVector(A.domain_layout(), o.x0->local().select(1, j).contiguous());
    auto r = least_squares_solve(A, DVector(A.layout(), b.local().select(1, j).contiguous()), m, oj);
    x.select(1, j).copy_(r.x.local());
    result.info.seconds += r.info.seconds;
    result.info.columns.push_back(std::move(r.info));
  }
  summarize_columns(result.info);
  result.x = DVector(A.domain_layout(), x);
  return result;
}

/// `m` null: no preconditioner.
inline SolveResult krylov_solve(const Operator& A, const DVector& b, const PreconditionerOp* m, const SolveOptions& o) {
  switch (o.method) {
    case Method::cg: return cg(A, b, m, o);
    case Method::bicgstab: return bicgstab(A, b, m, o);
    case Method::gmres: return gmres(A, b, m, o);
    case Method::minres: return minres(A, b, m, o);
    case Method::fgmres: return gmres(A, b, m, o, /*flexible=*/true);
    case Method::lsqr:
    case Method::lsmr: return least_squares_solve(A, b, m, o);
  }
  throw Error("solve: unknown method");
}

/// `krylov_solve` of an (n_local, k) block `b`: every method as k coupled recurrences, one block
/// product and one all-reduce per reduction step for all k columns, columns stopping on their own
/// (`SolveInfo::columns`).
inline SolveResult krylov_solve_block(const Operator& A, const DVector& b, const PreconditionerOp* m,
                                      const SolveOptions& o) {
  switch (o.method) {
    case Method::cg: return block_cg(A, b, m, o);
    case Method::bicgstab: return block_bicgstab(A, b, m, o);
    case Method::gmres: return block_gmres(A, b, m, o);
    case Method::minres: return block_minres(A, b, m, o);
    case Method::fgmres: return block_gmres(A, b, m, o, /*flexible=*/true);
    case Method::lsqr:
    case Method::lsmr: return least_squares_solve_block(A, b, m, o);
  }
  throw Error("solve: unknown method");
}

inline SolveResult run_method(const Operator& A, const DVector& b, const PreconditionerOp* m, const SolveOptions& o);

/// `run_method` with `o.null_space` (krylov/null_space.hpp): b, x0 and x projected onto the null
/// space's complement, and every application of a general preconditioner.
inline SolveResult solve_in_complement(const Operator& A, const DVector& b, const PreconditionerOp* m,
                                       const SolveOptions& o) {
  if (o.method != Method::cg && o.method != Method::minres)
    throw Error(std::string("solve: null_space needs cg or minres (a symmetric A, whose range is the null "
                            "space's complement), got ") +
                to_string(o.method) +
                (is_least_squares(o.method) ? "; lsqr and lsmr return the minimum-norm solution without it" : ""));
  const auto bl = b.local().detach();
  const NullSpace null_space(o.null_space, *A.layout(), bl, "solve");
  auto rhs = bl.clone(at::MemoryFormat::Contiguous);
  const auto removed = null_space.remove(rhs);
  // A column of b inside the null space leaves only rounding behind, which no relative stop test
  // can meet: it is zero, as its solution is.
  const auto sq = [](const at::Tensor& v) { return at::real(v * v.conj()).sum(0).to(at::kDouble).reshape({-1}); };
  const auto norms = comm::all_reduce(at::stack({sq(bl), sq(rhs)}), A.layout()->comm()).cpu();
  const auto inside = (norms[1] <= 1e-24 * norms[0]).nonzero().flatten();
  if (inside.numel() > 0 && rhs.dim() == 1) rhs.zero_();
  if (inside.numel() > 0 && rhs.dim() == 2) rhs.index_fill_(1, inside.to(rhs.device()), 0);
  auto inner = o;
  inner.null_space = at::Tensor();
  if (o.x0) {
    auto x0 = o.x0->local().detach().to(bl.scalar_type()).clone(at::MemoryFormat::Contiguous);
    (void)null_space.remove(x0);
    inner.x0 = DVector(o.x0->layout(), x0);
  }
  // The identity and the diagonal preconditioners (the Jacobi kinds) keep the methods' fused
  // kernels: b and x0 are projected, A maps into the complement, and a bounded diagonal cannot
  // amplify what rounding leaves along the null space, which the projection of x removes at the
  // end. A general one can (a V-cycle whose coarsest matrix is singular): its every application
  // is projected, as PETSc projects every preconditioned residual.
  std::optional<ProjectedPreconditioner> projected;
  if (m != nullptr && !m->diagonal().defined()) projected.emplace(m, null_space);
  auto result = run_method(A, DVector(b.layout(), rhs), projected ? &*projected : m, inner);
  auto x = result.x.local().clone(at::MemoryFormat::Contiguous);
  (void)null_space.remove(x);
  result.x = DVector(result.x.layout(), x);
  // The largest column's: Q is orthonormal, so the removed part's norm is its coefficients'.
  if (removed.numel() > 0)
    result.info.rhs_null_space_norm =
        at::linalg_vector_norm(removed.reshape({removed.size(0), -1}), 2, 0).max().item<double>();
  return result;
}

/// An (n_local, k) b runs the block form of the method (k coupled recurrences, one product and
/// one reduction per step for all columns); a vector, the method itself, except (f)gmres with a
/// reduced basis, which the block form holds: a block of one column, its record as a vector's.
/// A block of one column runs the vector method, its record as a block's (the vector kernels are
/// built for one column: a block of one took 2.3x the time of the same CG on a vector).
inline SolveResult run_method(const Operator& A, const DVector& b, const PreconditionerOp* m, const SolveOptions& o) {
  if (o.null_space.defined()) return solve_in_complement(A, b, m, o);
  const bool block_basis = o.gmres_basis == GmresBasis::reduced && (o.method == Method::gmres || o.method == Method::fgmres);
  const auto column = [](const DVector& v) { return DVector(v.layout(), v.local().unsqueeze(1)); };
  const auto vector = [](const DVector& v) { return DVector(v.layout(), v.local().squeeze(1)); };
  if (b.local().dim() == 2) {
    if (b.local().size(1) != 1 && !is_least_squares(o.method)) {
      const auto width = column_group_width(b, o);
      if (width < b.local().size(1))
        return solve_in_column_groups(b, o, width, A.domain_layout(), [&](const DVector& group, SolveOptions og) {
          og.block_columns = static_cast<int>(width);
          return run_method(A, group, m, og);
        });
    }
    if (b.local().size(1) != 1 || block_basis) return krylov_solve_block(A, b, m, o);
    auto ov = o;
    if (o.x0) ov.x0 = vector(*o.x0);
    auto r = krylov_solve(A, vector(b), m, ov);
    r.x = column(r.x);
    r.info.columns = {r.info};
    return r;
  }
  if (!block_basis) return krylov_solve(A, b, m, o);
  auto ob = o;
  if (o.x0) ob.x0 = column(*o.x0);
  auto r = krylov_solve_block(A, column(b), m, ob);
  r.x = vector(r.x);
  r.info.columns.clear();
  return r;
}

/// AᴴA + damp² I as an operator on A's domain: two products per application.
class NormalOperator final : public Operator {
 public:
  NormalOperator(const Operator& a, double damp) : a_(a), dampsq_(damp * damp) {}
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return a_.domain_layout(); }
  /// One vector (the base class runs a block column by column: A's adjoint product takes vectors).
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    auto ax = at::empty({a_.layout()->local_size()}, x.options());
    (void)a_.apply(x, ax, {});
    a_.apply_adjoint(ax, y);
    if (dampsq_ != 0.0) y.add_(x, dampsq_);
    return w.defined() ? local_dot(w, y) : std::complex<double>{};
  }

 private:
  const Operator& a_;
  double dampsq_;
};

/// The backward of a least-squares solve x = argmin ‖A x − b‖² + damp² ‖x‖²: λ = (AᴴA + damp² I)⁻¹ g
/// by CG on the normal equations (CGLS, LSQR's twin in exact arithmetic) and z = A λ; then
/// ∂L/∂b = z and ∂L/∂a_ij = r_i conj(λ_j) − z_i conj(x_j), r = b − A x. Needs AᴴA + damp² I
/// nonsingular (m ≥ n with full column rank, or damp > 0). `g`: an owned slice of the domain, or
/// an (n_local, k) block. Returns {z, λ}; throws the same Error on every rank when CG fails.
inline std::pair<at::Tensor, at::Tensor> least_squares_adjoint(const Operator& A, const at::Tensor& g, double damp,
                                                               double rtol, const std::string& what) {
  const NormalOperator N(A, damp);
  const DVector rhs(A.domain_layout(), g.contiguous());
  const SolveOptions o{.method = Method::cg, .preconditioner = Preconditioner::none, .rtol = rtol, .atol = 0.0,
                       .maxiter = 10000, .residual_history = false};
  const auto r = run_method(N, rhs, nullptr, o);
  if (!r.info.converged)
    throw Error(what + " (backward): CG on the normal equations did not converge (" + to_string(r.info.reason) +
                " after " + std::to_string(r.info.iterations) +
                " iterations); AᴴA + damp² I must be nonsingular (m >= n and full column rank, or damp > 0)");
  const auto lambda = r.x.local();
  auto z = at::empty(g.dim() == 2 ? at::IntArrayRef{A.layout()->local_size(), g.size(1)}
                                  : at::IntArrayRef{A.layout()->local_size()},
                     g.options());
  if (g.dim() == 2)
    (void)A.apply_block(lambda.contiguous(), z, {});
  else
    (void)A.apply(lambda.contiguous(), z, {});
  return {z, lambda};
}

/// Throws unless `o.x0`, when given, is a block of as many columns as `b` (a solve of an (n_local, k)
/// b) and `o.block_columns` is not negative (the same on every rank: the options are).
inline void check_block_options(const DVector& b, const SolveOptions& o, const std::string& what) {
  if (o.block_columns < 0)
    throw Error(what + ": .block_columns must be 0 (as the cache holds) or positive, got " +
                std::to_string(o.block_columns));
  if (o.x0 && (o.x0->local().dim() != 2 || o.x0->columns() != b.columns()))
    throw Error(what + ": x0 must be a block of " + std::to_string(b.columns()) + " columns like b, got shape " +
                std::string(c10::str(o.x0->local().sizes())));
}

/// The custom preconditioner of `o` on `layout` (checked against `o.preconditioner`), or null
/// when `o` asks for a built-in kind (the caller builds or reuses that) or none.
inline std::shared_ptr<const PreconditionerOp> custom_preconditioner(const SolveOptions& o,
                                                                     const std::shared_ptr<const RowLayout>& layout,
                                                                     const std::string& what) {
  if (!o.custom_preconditioner) return nullptr;
  if (o.preconditioner != Preconditioner::none)
    throw Error(what + ": set preconditioner or custom_preconditioner, not both (got " +
                to_string(o.preconditioner) + " and a custom one)");
  return std::make_shared<CustomPreconditionerOp>(o.custom_preconditioner, layout);
}

}  // namespace einshard::sparse::detail
