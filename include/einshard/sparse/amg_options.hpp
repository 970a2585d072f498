#pragma once
/// @file
/// The settings of the algebraic multigrid preconditioner (`Preconditioner::amg`, hypre's
/// BoomerAMG, see sparse/amg.hpp), apart from the preconditioner itself so that
/// `PreconditionerOptions` can carry them without pulling in hypre.
///
/// The defaults are BoomerAMG's recommended CPU settings for 2-D and 3-D diffusion (hypre's user
/// manual, "BoomerAMG"; its own defaults since 2.x): HMIS coarsening, extended+i interpolation
/// truncated to 4 entries per row, strength threshold 0.25, one sweep of l1 hybrid Gauss–Seidel
/// (forward on the way down, backward on the way up, so the V-cycle is symmetric and CG may use
/// it), Gaussian elimination on the coarsest level. For 3-D problems hypre suggests a strength
/// threshold of 0.5 and one level of aggressive coarsening, which lower the operator complexity.

namespace einshard::sparse {

/// How BoomerAMG picks the coarse points (hypre's coarsen type).
enum class AmgCoarsening {
  hmis,     ///< HMIS (10): Ruge–Stüben on each rank, PMIS across; the default
  pmis,     ///< PMIS (8): parallel independent sets, lowest complexity, needs long-range interpolation
  falgout,  ///< Falgout (6): Ruge–Stüben inside, CLJP on the rank boundaries; classical, denser
};

/// How coarse corrections are interpolated (hypre's interp type).
enum class AmgInterpolation {
  extended_i,  ///< extended+i (6), distance two; the default, needed by HMIS/PMIS
  extended,    ///< extended (14), distance two
  standard,    ///< standard (8)
  classical,   ///< classical modified (0), distance one; pairs with Falgout
  direct,      ///< direct (3), distance one, cheapest
  multipass,   ///< multipass (4), for aggressive coarsening
};

/// The smoother on every level but the coarsest (hypre's relax type).
enum class AmgSmoother {
  l1_gauss_seidel,      ///< l1 hybrid Gauss–Seidel (13 down, 14 up: forward then backward); the default
  hybrid_gauss_seidel,  ///< hybrid symmetric Gauss–Seidel (6): Gauss–Seidel inside a rank, Jacobi across
  l1_jacobi,            ///< l1-Jacobi (18): order independent, the same result at any rank count
  chebyshev,            ///< Chebyshev polynomial (16) of the diagonally scaled matrix
};

enum class AmgCycle { v, w };

/// BoomerAMG's options; every field maps to one HYPRE_BoomerAMGSet* call (docs/sparse.md).
struct AmgOptions {
  AmgCoarsening coarsening = AmgCoarsening::hmis;
  AmgInterpolation interpolation = AmgInterpolation::extended_i;
  double strong_threshold = 0.25;  ///< a_ij is strong when -a_ij ≥ θ max_k(-a_ik); 0.5 for 3-D
  int max_elements = 4;            ///< interpolation entries kept per row (0: no truncation)
  AmgSmoother smoother = AmgSmoother::l1_gauss_seidel;
  int sweeps = 1;                  ///< smoother sweeps before and after each coarse correction
  AmgCycle cycle = AmgCycle::v;
  int max_levels = 25;             ///< hypre's default
  int aggressive_levels = 0;       ///< levels of aggressive coarsening (1 is hypre's 3-D advice)
  int cycles = 1;                  ///< V/W-cycles per application of the preconditioner
  /// Relax the coarse points, then the fine ones (hypre's relax order 1, PETSc's PCHYPRE default)
  /// instead of in row order (hypre's default, 0).
  bool cf_order = false;
  friend bool operator==(const AmgOptions&, const AmgOptions&) = default;
};

}  // namespace einshard::sparse
