#pragma once
/// @file
/// Which preconditioner a solve applies and its settings: the part of the preconditioners that
/// `SolveOptions` names, without their implementations (one header per kind, factory.hpp).

#include <functional>
#include <string>

#include "einshard/error.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/preconditioner/amg_options.hpp"

namespace einshard::sparse {

/// A preconditioner you bring: z = M⁻¹ r, r and z in the matrix's partition. Called collectively
/// (every rank, same step), so it may itself communicate or run an inner solve; with
/// `Method::fgmres` it may differ from call to call.
using PreconditionerFn = std::function<DVector(const DVector& r)>;


/// Which preconditioner a solver applies. `block_jacobi` is a per-rank ILU(0), or IC(0) with
/// `PreconditionerOptions::ic0`. `amg` is hypre's BoomerAMG over the whole matrix
/// (`PreconditionerOptions::amg`; float64 only; an `Error` naming hypre in a build without it).
/// `smoothed_aggregation` is einshard's own AMG (smoothed_aggregation.hpp): the same
/// `PreconditionerOptions::amg` fields that describe the problem (`functions`, `near_null_space`,
/// `strong_threshold`, `smoother`, `sweeps`, `max_levels`, `cycles`), any real dtype and device,
/// and a float32 cycle for a float32 matrix. `ssor` is per-rank symmetric SOR of the owned block (`ssor_omega`); `neumann` a truncated
/// Neumann series of `neumann_degree` terms (torch-sla's "polynomial", also accepted by
/// `preconditioner_from_string`).
enum class Preconditioner { none, jacobi, l1_jacobi, block_jacobi, chebyshev, amg, ssor, neumann, smoothed_aggregation };

inline std::string to_string(Preconditioner kind) {
  switch (kind) {
    case Preconditioner::none: return "none";
    case Preconditioner::jacobi: return "jacobi";
    case Preconditioner::l1_jacobi: return "l1_jacobi";
    case Preconditioner::block_jacobi: return "block_jacobi";
    case Preconditioner::chebyshev: return "chebyshev";
    case Preconditioner::amg: return "amg";
    case Preconditioner::ssor: return "ssor";
    case Preconditioner::neumann: return "neumann";
    case Preconditioner::smoothed_aggregation: return "smoothed_aggregation";
  }
  return "unknown";
}

/// The kind `to_string` names, and torch-sla's spellings of the same kinds ("jacobi_l1",
/// "polynomial", "pyamg"); an `Error` listing the names for any other string.
inline Preconditioner preconditioner_from_string(const std::string& name) {
  for (const auto kind : {Preconditioner::none, Preconditioner::jacobi, Preconditioner::l1_jacobi,
                          Preconditioner::block_jacobi, Preconditioner::chebyshev, Preconditioner::amg,
                          Preconditioner::ssor, Preconditioner::neumann, Preconditioner::smoothed_aggregation})
    if (name == to_string(kind)) return kind;
  if (name == "jacobi_l1") return Preconditioner::l1_jacobi;
  if (name == "polynomial") return Preconditioner::neumann;
  if (name == "pyamg") return Preconditioner::amg;
  throw Error("preconditioner_from_string: expected none, jacobi, l1_jacobi, block_jacobi, chebyshev, amg, "
              "ssor, neumann or smoothed_aggregation (or polynomial, jacobi_l1, pyamg), found \"" + name + "\"");
}

/// Settings of the preconditioners that have any.
///
/// Chebyshev: the polynomial targets the eigenvalues of D⁻¹A in [chebyshev_lower·λ, 1.1·λ], λ the
/// largest Ritz value of `eig_iterations` Lanczos steps (run as Jacobi-preconditioned CG on a
/// pseudo-random right-hand side, as PETSc's KSPChebyshev estimates with KSPCG). The factor 1.1
/// is PETSc's. PETSc's lower factor is 0.1 (KSPChebyshevEstEigSet's default transform
/// (0, 0.1; 0, 1.1)), which targets the upper spectrum for a multigrid smoother; a preconditioner
/// of CG should also damp lower modes, hence 1/30 here.
///
/// SSOR: M = (D/ω + L)(D/ω)⁻¹(D/ω + U) / (2 − ω) on each rank's owned block, one symmetric SOR
/// sweep from zero (PETSc's PCSOR with SOR_LOCAL_SYMMETRIC_SWEEP and its = 1).
///
/// Neumann: z = Σ_{k<d} (I − S A)^k S r, d = `neumann_degree` (d − 1 distributed matvecs), with
/// S = D⁻¹/τ, τ = ‖D⁻¹A‖_∞ (`neumann_jacobi`, the default), or S = I/τ, τ = ‖A‖_∞ as torch-sla
/// does. An ∞-norm bounds the spectral radius, so the eigenvalues of S A lie in (0, 1] for SPD A
/// and every term of the series is positive: M⁻¹ is SPD (for negative-definite A with the Jacobi
/// scaling, negative definite, as Jacobi's).
struct PreconditionerOptions {
  bool ic0 = false;                   ///< block_jacobi: IC(0) (symmetric A) instead of ILU(0)
  int chebyshev_degree = 3;           ///< degree of q: distributed matvecs per application (≥ 1)
  double chebyshev_lower = 1.0 / 30;  ///< lower bound as a fraction of λ_max, in (0, 1.1)
  int eig_iterations = 10;            ///< Lanczos steps of the λ_max estimate (≥ 1)
  AmgOptions amg{};                   ///< amg, smoothed_aggregation: the multigrid's settings (amg_options.hpp)
  double ssor_omega = 1.0;            ///< ssor: the relaxation factor ω, in (0, 2)
  int neumann_degree = 2;             ///< neumann: terms of the series (≥ 1; d − 1 matvecs per application)
  bool neumann_jacobi = true;         ///< neumann: scale by D⁻¹ (a nonzero diagonal needed) before τ
};

}  // namespace einshard::sparse
