#pragma once
/// @file
/// The solve pipeline: everything between `A.solve(b, options)` and a Krylov method, written once
/// for every operator (a `DSparseTensor`, a `LinearOperator`, the systems of a batch). In order:
/// the checks of the options, the shapes and the partitions; the preconditioner (a custom one, or
/// a built-in kind made for the matrix or reused from its last solve); the vector-or-block
/// dispatch; and, for a matrix, the autograd record whose backward is one adjoint solve. PETSc's
/// KSPSolve owns the same steps: the matrix knows no solver, and a method knows no matrix.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "einshard/comm/reduce.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/krylov/options.hpp"
#include "einshard/sparse/matrix/assembly.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/linear_operator.hpp"
#include "einshard/sparse/matrix/stencil_operator.hpp"
#include "einshard/sparse/matrix/transpose.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
// The methods, the preconditioners and the autograd record of a solve: only the definitions below
// use them, so a translation unit of a compiled program (config.hpp) does not parse them.
#if EINSHARD_DEFINE_SPARSE
#include "einshard/sparse/krylov/methods.hpp"
#include "einshard/sparse/krylov/refinement.hpp"
#include "einshard/sparse/krylov/solve_autograd.hpp"
#include "einshard/sparse/preconditioner/cache.hpp"
#include "einshard/sparse/preconditioner/factory.hpp"
#include "einshard/sparse/preconditioner/smoothed_aggregation.hpp"
#endif

namespace einshard::sparse {
namespace detail {

struct AdjointSolver;  // solve_autograd.hpp: the backward of a solve

/// The solve's preconditioner and what making it cost (the setup part of `SolveInfo`).
struct PreparedPreconditioner {
  std::shared_ptr<const PreconditionerOp> op;  ///< null: none
  bool reused = false;
  double seconds = 0.0;
  void describe(SolveInfo& info) const {
    info.setup_seconds = seconds;
    info.preconditioner_reused = reused;
    if (op) std::tie(info.levels, info.operator_complexity) = op->hierarchy();
  }
};

/// A matrix made from another's values (the assembled Aᴴ of its last backward, its single-precision
/// copy), rebuilt when the values change (the same key as the preconditioner cache: the values'
/// storage and version). Collective: every rank reuses or every rank rebuilds.
class DerivedMatrixCache {
 public:
  template <class Make>
  const DSparseTensor& get(const at::Tensor& values, MPI_Comm comm, Make&& make) {
    std::lock_guard lock(mutex_);
    if (!comm::every_rank(matrix_ && impl_ == values.unsafeGetTensorImpl() && version_ == values._version(), comm)) {
      matrix_ = std::make_shared<const DSparseTensor>(make());
      impl_ = values.unsafeGetTensorImpl();
      version_ = values._version();
    }
    return *matrix_;
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<const DSparseTensor> matrix_;
  const void* impl_ = nullptr;
  std::uint32_t version_ = 0;
};

/// The steps of a solve that reach into the operators (their friend).
struct SolvePipeline {
  static SolveResult solve(const LinearOperator& A, const DVector& b, const SolveOptions& options);
  /// LSQR or LSMR (`method`) after the checks; for a matrix, with the autograd record.
  static LeastSquaresResult least_squares(const LinearOperator& A, const DVector& b,
                                          const LeastSquaresOptions& options, Method method);
  static LeastSquaresResult least_squares(const DSparseTensor& A, const DVector& b,
                                          const LeastSquaresOptions& options, Method method);

  static SolveResult solve(const DSparseTensor& A, const DVector& b, const SolveOptions& options);
  /// A stencil's solve: Jacobi and Chebyshev from its diagonal, the other preconditioners from its
  /// assembled rows (kept for the solve only); lsqr and lsmr are an Error (no adjoint product).
  static SolveResult solve(const StencilOperator& A, const DVector& b, const SolveOptions& options);
  static LeastSquaresResult least_squares(const StencilOperator& A, const DVector& b,
                                          const LeastSquaresOptions& options, Method method);
  /// The solve without autograd, and the preconditioner it used (null: none).
  static std::pair<SolveResult, std::shared_ptr<const PreconditionerOp>> solve_detached(const DSparseTensor& A,
                                                                                        const DVector& b,
                                                                                        const SolveOptions& options);
  /// `Precision::mixed` and `single_values`: refinement around solves with the matrix's
  /// single-precision copy (krylov/refinement.hpp). No preconditioner is returned: the backward makes its own.
  static SolveResult solve_mixed(const DSparseTensor& A, const DVector& b, const SolveOptions& options);
  /// `x` (solved already) recorded for autograd as the solution of A x = b, whatever produced it
  /// (a Krylov solve, or Newton at its root with b = -g(x)): the backward solves λ by
  /// `adjoint_solve` (λ = A⁻ᴴ ∂L/∂x, or the Jacobian's), then ∂L/∂b = λ and
  /// ∂L/∂a_ij = −λ_i conj(x_j) on the stored pattern. Collective in the backward.
  static at::Tensor record_solution(const DSparseTensor& A, const at::Tensor& b, const at::Tensor& x,
                                    std::function<at::Tensor(const at::Tensor&)> adjoint_solve);

 private:
  /// The matrix's caches, made on its first solve.
  static SolveCaches& caches(const DSparseTensor& A);
  /// A built-in preconditioner of `options` for A. AMG's hierarchy spans the ranks, so it needs
  /// the global numbering of the halo columns, which only the distributed matrix has.
  static std::unique_ptr<PreconditionerOp> make_preconditioner(const DSparseTensor& A, const SolveOptions& options);
  /// The custom preconditioner of `options`, or the built-in kind (reused from the previous solve
  /// when its kind, options and the values are the same), or none.
  static PreparedPreconditioner prepare(const DSparseTensor& A, const SolveOptions& options);
  /// λ = A⁻ᴴ g for the backward of `solve`: CG and MINRES assume A = Aᴴ, so they reuse A and the
  /// forward's preconditioner; the other methods solve with the assembled Aᴴ (kept while the
  /// values are unchanged) and its own preconditioner of the same kind (a custom one is for A, so
  /// it is dropped). A stop without convergence is an Error on every rank.
  static at::Tensor adjoint_solve(const DSparseTensor& A, const at::Tensor& g,
                                  const std::shared_ptr<const PreconditionerOp>& m, const SolveOptions& options);
  /// `x` (in the domain) recorded as argmin ‖A x − b‖² + damp² ‖x‖²: the backward solves the normal
  /// equations (AᴴA + damp² I) λ = ∂L/∂x to `rtol` (least_squares_adjoint).
  static at::Tensor record_least_squares(const DSparseTensor& A, const at::Tensor& b, const at::Tensor& x, double damp,
                                         double rtol, const std::string& what);
  /// The part of a solve's autograd record both kinds share: the pattern and the halo of x.
  static c10::intrusive_ptr<AdjointSolver> adjoint_record(const DSparseTensor& A);
  /// Both operators' least squares: one set of checks and calls.
  template <class Op>
  static LeastSquaresResult least_squares_of(const Op& A, const DVector& b, const LeastSquaresOptions& options,
                                             Method method);
};

template <class Op, class Options, class LsOptions>
SolveResult SolveMembers<Op, Options, LsOptions>::solve(const DVector& b, const Options& options) const {
  return SolvePipeline::solve(static_cast<const Op&>(*this), b, options);
}
template <class Op, class Options, class LsOptions>
LeastSquaresResult SolveMembers<Op, Options, LsOptions>::lsqr(const DVector& b, const LsOptions& options) const {
  return SolvePipeline::least_squares(static_cast<const Op&>(*this), b, options, Method::lsqr);
}
template <class Op, class Options, class LsOptions>
LeastSquaresResult SolveMembers<Op, Options, LsOptions>::lsmr(const DVector& b, const LsOptions& options) const {
  return SolvePipeline::least_squares(static_cast<const Op&>(*this), b, options, Method::lsmr);
}

}  // namespace detail

// The pipeline's steps. Header-only: defined here, inline. Compiled (the CMake target's default):
// defined once in the library einshard_compiled (src/sparse.cpp), so a translation unit that calls
// them neither parses nor generates the Krylov methods, the preconditioners and their autograd
// nodes. See config.hpp.
#if EINSHARD_DEFINE_SPARSE

namespace detail {

/// Methods for A x = b need a square operator whose domain is partitioned as its range. `noun`
/// names the operator ("matrix"), `partitions` says how the partitions came to differ.
EINSHARD_INLINE void check_square_system(const Operator& A, Method method, const std::string& what,
                                         const char* noun, const char* partitions) {
  const auto m = A.layout()->global_size(), n = A.domain_layout()->global_size();
  if (m != n)
    throw Error(what + ": " + to_string(method) + " needs a square " + noun + ", got shape (" + std::to_string(m) +
                ", " + std::to_string(n) + "); use lsqr or lsmr for least squares");
  if (A.domain_layout() != A.layout() && !A.domain_layout()->same_as(*A.layout()))
    throw Error(what + ": " + to_string(method) + " needs " + partitions);
}

// ---- any operator ----------------------------------------------------------------------------------

EINSHARD_INLINE SolveResult SolvePipeline::solve(const LinearOperator& A, const DVector& b, const SolveOptions& options) {
  const auto what = std::string("LinearOperator::solve");
  const bool least_squares = is_least_squares(options.method);
  if (least_squares) A.require_adjoint(what);
  if (!least_squares) check_square_system(A, options.method, what, "operator", "the domain partitioned as the range");
  if (options.preconditioner != Preconditioner::none)
    throw Error(what + ": the preconditioner " + std::string(to_string(options.preconditioner)) +
                " needs a matrix's entries, which an operator does not have; pass custom_preconditioner");
  if (options.precision != Precision::working)
    throw Error(what + ": precision " + to_string(options.precision) +
                " solves with a single-precision copy of a matrix's values, which an operator does not have; "
                "apply your operator in the precision you want");
  A.check(b, *A.layout(), what, "");
  if (options.x0) A.check(*options.x0, *A.domain_layout(), what + " (x0)", "");
  const auto bl = b.like(b.local().detach().contiguous());
  if (bl.local().dim() == 2) check_block_options(bl, options, what);
  const auto m = custom_preconditioner(options, A.layout(), what);
  return run_method(A, bl, m.get(), options);
}

EINSHARD_INLINE SolveResult SolvePipeline::solve(const StencilOperator& A, const DVector& b, const SolveOptions& options) {
  const auto what = std::string("StencilOperator::solve");
  if (is_least_squares(options.method))
    throw Error(what + ": " + to_string(options.method) +
                " needs the adjoint product, which a stencil does not offer; solve its assemble()d matrix");
  if (options.precision != Precision::working)
    throw Error(what + ": precision " + to_string(options.precision) +
                " refines with a matrix's float32 copy; solve the assemble()d matrix, or make the stencil in "
                "float32 and refine it yourself");
  A.check(b, what);
  if (options.x0) A.check(*options.x0, what + " (x0)");
  const auto bl = b.like(b.local().detach().to(A.dtype()).contiguous());
  if (bl.local().dim() == 2) check_block_options(bl, options, what);
  const auto start = comm::wall_time();
  std::shared_ptr<const PreconditionerOp> m = custom_preconditioner(options, A.layout(), what);
  std::optional<DSparseTensor> assembled;  // what a preconditioner built from rows refers to
  const auto kind = options.preconditioner;
  if (!m && (kind == Preconditioner::jacobi || kind == Preconditioner::chebyshev)) {
    // The diagonal as rows of one entry each: what these two read of a matrix.
    const auto n = A.layout()->local_size();
    const Csr diagonal{n, n, at::arange(n + 1, at::kLong), at::arange(n, at::kLong), A.diagonal_};
    m = detail::make_preconditioner(kind, LocalRows{diagonal, n, A.layout()->comm()},
                            [&A](const at::Tensor& x, at::Tensor& y) { (void)A.apply(x, y, {}); },
                            options.preconditioner_options);
  } else if (!m && kind != Preconditioner::none) {
    assembled.emplace(A.assemble());
    m = make_preconditioner(*assembled, options);
  }
  const double setup = comm::wall_time() - start;
  auto result = run_method(A, bl, m.get(), options);
  result.info.setup_seconds = setup;
  if (m) std::tie(result.info.levels, result.info.operator_complexity) = m->hierarchy();
  return result;
}

EINSHARD_INLINE LeastSquaresResult SolvePipeline::least_squares(const StencilOperator& A, const DVector& /*b*/,
                                                       const LeastSquaresOptions& /*options*/, Method method) {
  (void)A;  // the same Error on every rank: nothing to agree on
  throw Error(std::string("StencilOperator::") + to_string(method) +
              ": needs the adjoint product, which a stencil does not offer; solve its assemble()d matrix");
}

template <class Op>
LeastSquaresResult SolvePipeline::least_squares_of(const Op& A, const DVector& b, const LeastSquaresOptions& options,
                                                   Method which) {
  constexpr bool matrix = std::is_same_v<Op, DSparseTensor>;
  const char* name = to_string(which);
  const auto method = which == Method::lsqr ? &lsqr : &lsmr;
  const auto what = std::string(matrix ? "DSparseTensor::" : "LinearOperator::") + name;
  if constexpr (matrix) {
    A.check_vector(b, name, *A.layout());
    if (options.x0) A.check_vector(*options.x0, (std::string(name) + " (x0)").c_str(), *A.domain_layout());
  } else {
    A.check(b, *A.layout(), what, "range");
    if (options.x0) A.check(*options.x0, *A.domain_layout(), what + " (x0)", "domain");
  }
  check_least_squares_options(options, what);
  if constexpr (!matrix) {
    A.require_adjoint(what);
    return method(A, b.like(b.local().detach().contiguous()), options);
  } else {
    // Whether to record is decided together: the backward is collective.
    const bool record = comm::any_rank(
        at::GradMode::is_enabled() && (b.local().requires_grad() || A.values().requires_grad()), A.layout()->comm());
    auto r = method(A, b.like(b.local().detach().to(A.dtype()).contiguous()), options);
    if (record)
      r.x = DVector(A.domain_layout(), record_least_squares(A, b.local().to(A.dtype()), r.x.local(), options.damp,
                                                            std::max(std::min(options.atol, options.btol), 1e-12),
                                                            what));
    return r;
  }
}

EINSHARD_INLINE LeastSquaresResult SolvePipeline::least_squares(const LinearOperator& A, const DVector& b,
                                                       const LeastSquaresOptions& options, Method method) {
  return least_squares_of(A, b, options, method);
}


EINSHARD_INLINE SolveCaches& SolvePipeline::caches(const DSparseTensor& A) {
  auto& c = A.solve_caches_;
  if (!c.preconditioner) c.preconditioner = std::make_shared<PreconditionerCache>();
  if (!c.adjoint) c.adjoint = std::make_shared<DerivedMatrixCache>();
  if (!c.inner) c.inner = std::make_shared<DerivedMatrixCache>();
  return c;
}

EINSHARD_INLINE std::unique_ptr<PreconditionerOp> SolvePipeline::make_preconditioner(const DSparseTensor& A,
                                                                                     const SolveOptions& options) {
  const LocalRows rows{A.local_, A.layout_->local_size(), A.layout_->comm()};
  if (options.preconditioner == Preconditioner::amg)
    return make_amg(
        rows, A.m_, A.n_,
        [exchange = A.scratch_.exchange()](const at::Tensor& owned) { return exchange->ghosts_of(owned); },
        options.preconditioner_options.amg, A.layout_->owned());
  if (options.preconditioner == Preconditioner::smoothed_aggregation)
    return std::make_unique<SmoothedAggregationOp>(A, options.preconditioner_options.amg);
  return detail::make_preconditioner(
      options.preconditioner, rows, [&A](const at::Tensor& x, at::Tensor& y) { A.apply(x, y, {}); },
      options.preconditioner_options);
}

EINSHARD_INLINE PreparedPreconditioner SolvePipeline::prepare(const DSparseTensor& A, const SolveOptions& options) {
  const auto start = comm::wall_time();
  PreparedPreconditioner m{custom_preconditioner(options, A.layout_, "DSparseTensor::solve")};
  if (!m.op && options.preconditioner != Preconditioner::none)
    std::tie(m.op, m.reused) =
        caches(A).preconditioner->get(options.preconditioner, options.preconditioner_options, A.local_.values,
                                    A.layout_->comm(), [&] { return make_preconditioner(A, options); });
  m.seconds = comm::wall_time() - start;
  return m;
}

EINSHARD_INLINE std::pair<SolveResult, std::shared_ptr<const PreconditionerOp>> SolvePipeline::solve_detached(
    const DSparseTensor& A, const DVector& b, const SolveOptions& options) {
  if (options.precision != Precision::working) return {solve_mixed(A, b, options), nullptr};
  const auto m = prepare(A, options);
  auto result = run_method(A, b, m.op.get(), options);
  m.describe(result.info);
  return {std::move(result), m.op};
}

EINSHARD_INLINE SolveResult SolvePipeline::solve_mixed(const DSparseTensor& A, const DVector& b,
                                                       const SolveOptions& options) {
  const auto what = std::string("DSparseTensor::solve (precision ") + to_string(options.precision) + ")";
  if (A.dtype() != at::kDouble && A.dtype() != at::kComplexDouble)
    throw Error(what + ": needs a float64 or complex128 matrix to refine in, got " +
                std::string(c10::toString(A.dtype())) + "; solve it with Precision::working");
  if (is_least_squares(options.method))
    throw Error(what + ": " + to_string(options.method) + " minimizes ||A x - b|| and has no residual to refine; " +
                "use Precision::working");
  if (b.local().dim() != 1)
    throw Error(what + ": one right-hand side at a time, got an (n_local, " + std::to_string(b.local().size(1)) +
                ") block; use Precision::working for blocks");
  if (options.null_space.defined())
    throw Error(what + ": null_space projects in the working precision only; use Precision::working");
  const bool values_only = options.precision == Precision::single_values;
  const auto& copy =
      caches(A).inner->get(A.local_.values, A.layout_->comm(), [&A] { return A.to(inner_dtype(A.dtype())); });
  // single_values: float64 vectors through the copy's values, which the native loops read as they
  // are; ATen's products (the generic kernels) multiply one dtype, so there the rounded values
  // are widened again for the solve: the same arithmetic, without the saving.
  const auto widened = values_only && detail::uses_generic(copy.local_.values)
                           ? std::optional<DSparseTensor>(A.with_values(copy.local_.values.to(A.dtype())))
                           : std::nullopt;
  const auto& single = widened ? *widened : copy;
  const auto low = values_only ? A.dtype() : inner_dtype(A.dtype());
  // hypre runs in float64 and a custom preconditioner is written for the matrix's dtype: both are
  // applied in it, as every preconditioner of single_values' float64 vectors. The others are made
  // for the single-precision copy (and cached on it).
  const bool working_preconditioner =
      values_only || options.custom_preconditioner || options.preconditioner == Preconditioner::amg;
  const auto m = working_preconditioner ? prepare(A, options) : prepare(single, options);
  // The preconditioner for each phase's vectors: made for one, adapted to the other.
  const auto m_low = working_preconditioner && m.op && !values_only
                         ? std::make_shared<PrecisionAdapter>(m.op, A.dtype())
                         : m.op;
  const auto m_working =
      !working_preconditioner && m.op ? std::make_shared<PrecisionAdapter>(m.op, low) : m.op;
  const auto working = [&](const at::Tensor& r, const SolveOptions& wo) {
    auto o = wo;
    o.custom_preconditioner = {};
    return run_method(A, DVector(A.layout_, r), working_preconditioner ? m.op.get() : prepare(A, o).op.get(), o);
  };
  auto result = options.method == Method::cg && options.cg_variant == CgVariant::standard
                    ? mixed_cg(A, single, b, m_working.get(), m_low.get(), low,
                               values_only ? copy_rounding(A.local_.values, copy.local_.values, A.layout_->comm())
                                           : kSingleRounding,
                               options,
                               // Rounds whose stop test is the true residual: a working-precision
                               // CG from where a singular copy left x (far along its null space)
                               // can pass its recursive test short of the true tolerance.
                               [&](const SolveOptions& wo) { return refine(A, b, A.dtype(), wo, working, working); })
                    : refine(
                          A, b, low, options,
                          [&](const at::Tensor& r, const SolveOptions& io) {
                            return run_method(single, DVector(single.layout_, r), m_low.get(), io);
                          },
                          working);
  m.describe(result.info);
  return result;
}

EINSHARD_INLINE SolveResult SolvePipeline::solve(const DSparseTensor& A, const DVector& b,
                                                 const SolveOptions& options) {
  const bool least_squares = is_least_squares(options.method);
  if (!least_squares)
    check_square_system(A, options.method, "DSparseTensor::solve", "matrix",
                        "the columns partitioned as the rows (from_local's owned_cols differs from owned_rows)");
  A.check_vector(b, "solve", *A.layout_);
  if (b.local().dim() == 2) check_block_options(b, options, "DSparseTensor::solve");
  // Whether to record is decided together: the backward is collective.
  const bool record = comm::any_rank(
      at::GradMode::is_enabled() && (b.local().requires_grad() || A.local_.values.requires_grad()), A.layout_->comm());
  if (!record) return solve_detached(A, b.like(b.local().detach().to(A.dtype())), options).first;
  const auto bl = b.local().to(A.dtype());
  auto [result, precond] = solve_detached(A, b.like(bl.detach()), options);
  // A rectangular (or differently partitioned) least-squares solve has no Aᴴ λ = g to solve.
  if (least_squares && (A.m_ != A.n_ || (A.domain_ != A.layout_ && !A.domain_->same_as(*A.layout_)))) {
    result.x = DVector(A.domain_, record_least_squares(A, bl, result.x.local(), 0.0,
                                                       options.rtol > 0.0 ? options.rtol : 1e-8, "DSparseTensor::solve"));
    return result;
  }
  // The adjoint's right-hand side is a gradient of any size: its stop test is relative only, to
  // the forward's relative accuracy max(rtol, atol / ‖b‖), so ∂L/∂x → c ∂L/∂x scales the gradient
  // by c however small c is (an absolute floor would return zero for a small enough gradient).
  caches(A);  // made before the record copies A, so that the copy shares A's adjoint cache
  auto adjoint_options = options;
  const double bnorm = result.info.rhs_norm;
  adjoint_options.rtol = std::max(options.rtol, bnorm > 0.0 ? options.atol / bnorm : 0.0);
  adjoint_options.atol = 0.0;
  result.x = DVector(A.layout_, record_solution(A, bl, result.x.local(),
                                                [self = A, precond = precond, adjoint_options](const at::Tensor& g) {
                                                  return adjoint_solve(self, g, precond, adjoint_options);
                                                }));
  return result;
}

EINSHARD_INLINE at::Tensor SolvePipeline::adjoint_solve(const DSparseTensor& A, const at::Tensor& g,
                                                        const std::shared_ptr<const PreconditionerOp>& m,
                                                        const SolveOptions& options) {
  auto o = options;
  o.x0.reset();
  o.monitor = {};
  o.residual_history = false;
  const auto rhs = DVector(A.layout_, g.to(A.dtype()).contiguous());
  SolveResult r;
  if (o.method == Method::cg || o.method == Method::minres) {
    r = run_method(A, rhs, m ? m.get() : prepare(A, o).op.get(), o);
  } else {
    o.custom_preconditioner = {};
    const auto& H = caches(A).adjoint->get(A.local_.values, A.layout_->comm(), [&A] { return A.adjoint(); });
    r = solve_detached(H, DVector(H.layout(), rhs.local()), o).first;
  }
  if (!r.info.converged)
    throw Error(std::string("DSparseTensor::solve (backward): the adjoint solve by ") + to_string(o.method) +
                " did not converge (" + to_string(r.info.reason) + " after " + std::to_string(r.info.iterations) +
                " iterations); loosen rtol or raise maxiter");
  return r.x.local();
}

EINSHARD_INLINE c10::intrusive_ptr<AdjointSolver> SolvePipeline::adjoint_record(const DSparseTensor& A) {
  auto adjoint = c10::make_intrusive<AdjointSolver>();
  adjoint->pattern = A.local_;
  adjoint->with_ghosts = [exchange = A.scratch_.exchange()](const at::Tensor& v) {
    const auto owned = v.contiguous();
    return at::cat({owned, exchange->ghosts_of(owned)});
  };
  return adjoint;
}

EINSHARD_INLINE at::Tensor SolvePipeline::record_solution(const DSparseTensor& A, const at::Tensor& b,
                                                          const at::Tensor& x,
                                                          std::function<at::Tensor(const at::Tensor&)> adjoint_solve) {
  auto adjoint = adjoint_record(A);
  adjoint->solve = std::move(adjoint_solve);
  return SolveFunction::apply(b, A.local_.values, x, adjoint);
}

EINSHARD_INLINE at::Tensor SolvePipeline::record_least_squares(const DSparseTensor& A, const at::Tensor& b,
                                                               const at::Tensor& x, double damp, double rtol,
                                                               const std::string& what) {
  auto ax = at::empty_like(b, at::MemoryFormat::Contiguous).detach();
  if (x.dim() == 2)
    (void)A.apply_block(x.detach().contiguous(), ax, {});
  else
    (void)A.apply(x.detach().contiguous(), ax, {});
  auto adjoint = adjoint_record(A);
  adjoint->residual = b.detach() - ax;
  adjoint->least_squares = [self = A, damp, rtol, what](const at::Tensor& g) {
    return least_squares_adjoint(self, g, damp, rtol, what);
  };
  return SolveFunction::apply(b, A.local_.values, x, adjoint);
}

EINSHARD_INLINE LeastSquaresResult SolvePipeline::least_squares(const DSparseTensor& A, const DVector& b,
                                                                const LeastSquaresOptions& options, Method method) {
  return least_squares_of(A, b, options, method);
}

}  // namespace detail

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
