#pragma once
/// @file
/// Which preconditioner a solve applies and its settings: the part of the preconditioners that
/// `SolveOptions` names, without their implementations (preconditioner.hpp).

#include <string>

#include "einshard/sparse/amg_options.hpp"

namespace einshard::sparse {

/// Which preconditioner a solver applies. `block_jacobi` is a per-rank ILU(0), or IC(0) with
/// `PreconditionerOptions::ic0`. `amg` is hypre's BoomerAMG over the whole matrix
/// (`PreconditionerOptions::amg`; float64 only; an `Error` naming hypre in a build without it).
enum class Preconditioner { none, jacobi, l1_jacobi, block_jacobi, chebyshev, amg };

inline std::string to_string(Preconditioner kind) {
  switch (kind) {
    case Preconditioner::none: return "none";
    case Preconditioner::jacobi: return "jacobi";
    case Preconditioner::l1_jacobi: return "l1_jacobi";
    case Preconditioner::block_jacobi: return "block_jacobi";
    case Preconditioner::chebyshev: return "chebyshev";
    case Preconditioner::amg: return "amg";
  }
  return "unknown";
}

/// Settings of the preconditioners that have any.
///
/// Chebyshev: the polynomial targets the eigenvalues of D⁻¹A in [chebyshev_lower·λ, 1.1·λ], λ the
/// largest Ritz value of `eig_iterations` Lanczos steps (run as Jacobi-preconditioned CG on a
/// pseudo-random right-hand side, as PETSc's KSPChebyshev estimates with KSPCG). The factor 1.1
/// is PETSc's. PETSc's lower factor is 0.1 (KSPChebyshevEstEigSet's default transform
/// (0, 0.1; 0, 1.1)), which targets the upper spectrum for a multigrid smoother; a preconditioner
/// of CG should also damp lower modes, hence 1/30 here.
struct PreconditionerOptions {
  bool ic0 = false;                   ///< block_jacobi: IC(0) (symmetric A) instead of ILU(0)
  int chebyshev_degree = 3;           ///< degree of q: distributed matvecs per application (≥ 1)
  double chebyshev_lower = 1.0 / 30;  ///< lower bound as a fraction of λ_max, in (0, 1.1)
  int eig_iterations = 10;            ///< Lanczos steps of the λ_max estimate (≥ 1)
  AmgOptions amg{};                   ///< amg: BoomerAMG's settings (sparse/amg_options.hpp)
};

}  // namespace einshard::sparse
