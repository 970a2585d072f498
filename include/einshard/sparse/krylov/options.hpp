#pragma once
/// @file
/// What a solve is asked (`SolveOptions`) and what it answers (`SolveResult`, `SolveInfo`): the
/// vocabulary shared by every Krylov method of `DSparseTensor::solve`.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/preconditioner/options.hpp"

namespace einshard::sparse {

enum class Method {
  cg,        ///< conjugate gradients (symmetric / Hermitian positive definite A and M)
  bicgstab,  ///< BiCGStab, right-preconditioned (general A)
  gmres,     ///< restarted GMRES(m), right-preconditioned, CGS2 Arnoldi (general A)
  minres,    ///< MINRES (symmetric / Hermitian A, possibly indefinite; M positive definite)
  fgmres,    ///< flexible GMRES(m): right preconditioning that may change every step (general A)
  lsqr,      ///< LSQR through `solve` (any shape, no preconditioner): see `DSparseTensor::lsqr` for its options
  lsmr,      ///< LSMR through `solve`, as lsqr
};

inline const char* to_string(Method m) {
  switch (m) {
    case Method::cg: return "cg";
    case Method::bicgstab: return "bicgstab";
    case Method::gmres: return "gmres";
    case Method::minres: return "minres";
    case Method::fgmres: return "fgmres";
    case Method::lsqr: return "lsqr";
    case Method::lsmr: return "lsmr";
  }
  return "?";
}

/// How CG organises its reductions. `standard`: Hestenes–Stiefel, two all-reduces per iteration
/// (<p, Ap>, then <r, z> with <r, r>). `single_reduction`: Chronopoulos–Gear, one all-reduce of
/// (<r, u>, <Au, u>, <r, r>) per iteration, for latency-bound runs on many ranks; one extra
/// vector update, slightly different rounding. `pipelined`: Ghysels–Vanroose (PETSc's KSPPIPECG),
/// one non-blocking all-reduce per iteration overlapped with the product and the preconditioner,
/// four more vectors, and a check of the true residual before it reports convergence
/// (krylov/pipecg.hpp).
enum class CgVariant { standard, single_reduction, pipelined };

/// When GMRES's classical Gram–Schmidt runs a second pass. `if_needed` (DGKS): when the first
/// cancelled more than half of ‖w‖², which keeps the basis orthogonal to rounding (on a PDE matrix
/// that is nearly every step: twice the orthogonalization traffic). `never`: one pass, PETSc's
/// default (KSP_GMRES_CGS_REFINE_NEVER); half the traffic, but the basis loses orthogonality over
/// long cycles and the residual estimate can drift from the true residual below about 1e-9
/// relative. gmres and fgmres then measure ‖w‖ after a pass that cancelled most of it (one more
/// reduction, as PETSc does every step) and confirm a convergence the estimate reports with the
/// true residual; block GMRES keeps its Pythagorean norms and makes a second pass only when
/// nothing of ‖w‖² is left.
enum class Reorthogonalize { if_needed, never };

/// What (f)gmres stores its Krylov basis in; the arithmetic is the solve's dtype either way.
/// `working`: the solve's dtype. `reduced`: float32 for a float64 solve, complex64 for a complex128
/// one (compressed-basis GMRES, as Ginkgo's CB-GMRES): the Gram–Schmidt passes, most of a step's
/// memory traffic, read half the bytes. The Arnoldi relation then holds to float32 rounding, so a
/// cycle's residual estimate can drift from the true residual near 1e-7 relative; each restart
/// starts from the true residual, and the stop test of the last cycle is checked against it, so
/// tight tolerances are still reached, in about as many iterations on the PDE matrices measured
/// (docs/sparse.md). A float32 or complex64 solve stores its own dtype either way.
enum class GmresBasis { working, reduced };

/// The precision a solve iterates in (docs/sparse.md, "Mixed precision").
enum class Precision {
  working,  ///< the matrix's dtype throughout
  /// float64 (complex128) matrices: iterative refinement around Krylov solves in float32
  /// (complex64), with the true residual b − A x in float64 between rounds (krylov/refinement.hpp).
  /// The matrix keeps a float32 copy of its values (kept while they are unchanged); hypre's AMG and
  /// custom preconditioners run in float64 on converted vectors, the others (smoothed aggregation's
  /// hierarchy and V-cycle included) are made for the copy.
  mixed,
  /// float64 (complex128) matrices: the iterations' products read the float32 (complex64) copy of
  /// the values into float64 vectors and sums; everything else, the preconditioner included, is
  /// the working precision's. The recurrence is that of the float64 solve (the iteration counts
  /// stay), each product streams 4 bytes less per stored entry, and the true residual with the
  /// float64 matrix corrects the copy's rounding as `mixed` does (native CPU kernels only).
  single_values,
};

inline const char* to_string(Precision p) {
  switch (p) {
    case Precision::working: return "working";
    case Precision::mixed: return "mixed";
    case Precision::single_values: return "single_values";
  }
  return "?";
}

/// Why a solve stopped. The first three are convergence.
enum class StopReason {
  converged_rtol,  ///< ||r|| <= rtol * ||b||
  converged_atol,  ///< ||r|| <= atol
  zero_rhs,        ///< b = 0: x = 0 exactly
  maxiter,         ///< the iteration limit was reached first
  diverged,        ///< ||r|| > dtol * ||b||
  breakdown,       ///< the method cannot continue: CG's <p, Ap> or <r, M r> zero or of different
                   ///< signs (A or M indefinite), BiCGStab's <r̂, r> or ω zero, MINRES's M indefinite
  nan,             ///< a NaN or infinity appeared in the residual
};

inline const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::converged_rtol: return "converged (rtol)";
    case StopReason::converged_atol: return "converged (atol)";
    case StopReason::zero_rhs: return "converged (b = 0)";
    case StopReason::maxiter: return "maxiter reached";
    case StopReason::diverged: return "diverged (||r|| > dtol ||b||)";
    case StopReason::breakdown: return "breakdown";
    case StopReason::nan: return "NaN or Inf in the residual";
  }
  return "?";
}

/// Called on every rank after every iteration (and once for the initial residual, iteration 0):
/// the iteration number and the residual norm the stop test uses.
using Monitor = std::function<void(int iteration, double residual_norm)>;

namespace detail {
/// The defaults `SolveOptions` takes its fields from: the library's, or those of the innermost
/// `SolverConfig` alive on this thread (krylov/config.hpp).
struct SolveDefaults {
  Method method = Method::cg;
  Preconditioner preconditioner = Preconditioner::none;
  double rtol = 1e-5;
  double atol = 0.0;
  int maxiter = 10000;
  double dtol = 1e4;
  int restart = 30;
};
inline SolveDefaults& solve_defaults() {
  thread_local SolveDefaults defaults;
  return defaults;
}
}  // namespace detail

/// Options of `DSparseTensor::solve`. The stop test is ||r_k|| <= max(atol, rtol * ||b||) with the
/// recursively updated (unpreconditioned) residual, checked every iteration. Defaults follow
/// PETSc's KSP (rtol 1e-5, maxiter 10000, dtol 1e4; PETSc's abstol 1e-50 is atol 0 here) and
/// SciPy's cg (rtol 1e-5, atol 0), except that SciPy's maxiter is 10 n. See docs/sparse.md.
///
/// The fields below that a `SolverConfig` sets take its values when the options are made inside its
/// scope; a field you write (`{.rtol = 1e-8}`) wins over the scope.
struct SolveOptions {
  Method method = detail::solve_defaults().method;
  Preconditioner preconditioner = detail::solve_defaults().preconditioner;
  double rtol = detail::solve_defaults().rtol;
  double atol = detail::solve_defaults().atol;
  int maxiter = detail::solve_defaults().maxiter;
  double dtol = detail::solve_defaults().dtol;  ///< divergence: ||r|| > dtol * ||b|| (PETSc's divtol)
  std::optional<DVector> x0{};       ///< initial guess (default zero)
  Monitor monitor{};
  CgVariant cg_variant = CgVariant::standard;
  int restart = detail::solve_defaults().restart;  ///< (f)gmres: Krylov vectors per cycle (PETSc's and SciPy's 30)
  /// k right-hand sides: at most this many columns iterate together, the groups one after another
  /// (the same iterates). 0: all k while their vectors fit each rank's share of its node's
  /// last-level cache, else the widest group of 8, 4, 2 or 1 that does (krylov/column_groups.hpp).
  int block_columns = 0;
  Reorthogonalize reorthogonalize = Reorthogonalize::if_needed;  ///< gmres: see `Reorthogonalize`
  GmresBasis gmres_basis = GmresBasis::working;                  ///< (f)gmres: see `GmresBasis`
  PreconditionerOptions preconditioner_options{};
  bool residual_history = true;      ///< record every residual norm in `SolveInfo`
  /// Your own preconditioner, used instead of `preconditioner` (which must then stay `none`).
  PreconditionerFn custom_preconditioner{};
  /// Pipelined CG: replace the recursive residual by b − A x (and rebuild the auxiliary vectors)
  /// every this many iterations; 0: only when the recursive one passes the stop test and the true
  /// one does not. See krylov/pipecg.hpp.
  int residual_replacement = 0;
  /// `Precision::mixed`, `single_values`: single-precision iterations or values, refined to this
  /// solve's tolerance.
  Precision precision = Precision::working;
  /// A singular A's null space, as PETSc's MatSetNullSpace: this rank's rows of m vectors that
  /// span it, (owned rows, m) or a vector (the constants of a pure Neumann problem, the rigid body
  /// modes of a floating structure). b's component in their span is removed, a general
  /// preconditioner's every application projected onto the complement, and x returned with no
  /// component in it (the
  /// minimum-norm solution). cg and minres (a symmetric A, whose range is the complement), with
  /// `Precision::working`. Given on every rank or on none (krylov/null_space.hpp).
  at::Tensor null_space{};
};

struct SolveInfo {
  bool converged = false;
  int iterations = 0;
  double residual_norm = 0.0;          ///< at the last iteration (recursive residual)
  double rhs_norm = 0.0;               ///< ||b||
  StopReason reason = StopReason::maxiter;
  std::vector<double> residual_history;  ///< ||r_0||, ..., ||r_iterations||
  double seconds = 0.0;                ///< wall time of the iterations (setup excluded)
  double setup_seconds = 0.0;          ///< preconditioner setup
  /// The matrix's preconditioner from its previous solve was reused (same kind and options): no
  /// setup ran.
  bool preconditioner_reused = false;
  /// Several right-hand sides (`solve` of an (n_local, k) block): each column's own record; the
  /// fields above then summarize them (converged: all did; iterations, norms: the largest).
  std::vector<SolveInfo> columns;
  int levels = 0;                      ///< multigrid preconditioners: levels of the hierarchy
  double operator_complexity = 0.0;    ///< multigrid: Σ nnz(A_level) / nnz(A), the setup's memory factor
  /// `Precision::mixed`, `single_values`: the refinement rounds (true residuals computed in the
  /// working precision).
  int refinements = 0;
  /// `SolveOptions::null_space`: the norm of b's component in its span, removed before the
  /// iterations (0 for a consistent b; a block: the largest column's). `rhs_norm` is the rest's.
  double rhs_null_space_norm = 0.0;
};

struct SolveResult {
  DVector x;
  SolveInfo info;
};

}  // namespace einshard::sparse
