#pragma once
/// @file
/// The settings of the algebraic multigrid preconditioner (`Preconditioner::amg`, hypre's
/// BoomerAMG, see sparse/amg.hpp), apart from the preconditioner itself so that
/// `PreconditionerOptions` can carry them without pulling in hypre.
///
/// The defaults follow the matrix, as hypre's user manual advises for 2-D and 3-D diffusion
/// ("BoomerAMG"): a field left unset is chosen from the mean number of stored entries per row
/// (`amg_row_entries_3d` below), and a field set by the caller always wins:
///
///   ≤ 6 entries per row (a 5-point stencil, 2-D): Falgout coarsening with classical interpolation,
///     not truncated, θ = 0.25. Complexity about 2.2, and the iteration count stays within 2 from
///     1 to 8 ranks, where HMIS moves by 3 (docs/sparse.md).
///   more (a 7-point stencil or wider, 3-D): HMIS with extended+i interpolation truncated to 4
///     entries, θ = 0.5 and one level of aggressive coarsening. Falgout's and plain HMIS's
///     operator complexity grows in 3-D (3.7 to 6.7 at 100³), and these cut it to 1.6.
///   With nodal coarsening (a PDE system), θ = 0.25 at any width: the strength of a node's
///     connections is a block's row sum, and θ = 0.5 coarsens 3-D elasticity too slowly (operator
///     complexity 1.6–1.8 against 1.1–1.2, the same iterations within 20%; docs/sparse.md).
///
/// Both use one sweep of l1 hybrid Gauss–Seidel (forward on the way down, backward on the way up,
/// so the V-cycle is symmetric and CG may use it) and Gaussian elimination on the coarsest level.

#include <ATen/ATen.h>

#include <optional>

namespace einshard::sparse {

/// How BoomerAMG picks the coarse points (hypre's coarsen type).
enum class AmgCoarsening {
  hmis,     ///< HMIS (10): Ruge–Stüben on each rank, PMIS across; the 3-D default
  pmis,     ///< PMIS (8): parallel independent sets, lowest complexity, needs long-range interpolation
  falgout,  ///< Falgout (6): Ruge–Stüben inside, CLJP on the rank boundaries; the 2-D default
};

/// How coarse corrections are interpolated (hypre's interp type).
enum class AmgInterpolation {
  extended_i,  ///< extended+i (6), distance two; the 3-D default, needed by HMIS/PMIS
  extended,    ///< extended (14), distance two
  standard,    ///< standard (8)
  classical,   ///< classical modified (0), distance one; pairs with Falgout, the 2-D default
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

/// How the levels of aggressive coarsening interpolate (hypre's aggressive interp type): their
/// coarse points can be two connections away from a fine point, which one interpolation step
/// does not reach.
enum class AmgAggressiveInterpolation {
  multipass,             ///< multipass (4): the cheapest setup; the default
  two_stage_extended_i,  ///< extended+i, then extended+i again on the coarse points (1)
  two_stage_standard,    ///< standard in two stages (2)
  two_stage_extended,    ///< extended in two stages (3)
};

enum class AmgCycle { v, w };

/// Mean stored entries per row above which a matrix gets the 3-D defaults: a 2-D 5-point stencil
/// has at most 5, a 3-D 7-point one 6.94 at 100³ (fewer on boundary rows, so small grids count too).
inline constexpr double amg_row_entries_3d = 6.0;

/// BoomerAMG's options; every field maps to one HYPRE_BoomerAMGSet* call (docs/sparse.md). The
/// optional ones, when unset, are chosen from the matrix (`resolved`). `Preconditioner::
/// smoothed_aggregation` reads `strong_threshold` (its own default 0.05), `smoother`, `sweeps`,
/// `max_levels`, `cycles`, `functions` and `near_null_space` (with any `functions`: aggregates are
/// always of whole nodes), and ignores the rest.
struct AmgOptions {
  std::optional<AmgCoarsening> coarsening;        ///< falgout (2-D) or hmis (3-D)
  std::optional<AmgInterpolation> interpolation;  ///< classical (2-D) or extended_i (3-D)
  std::optional<double> strong_threshold;  ///< a_ij is strong when -a_ij ≥ θ max_k(-a_ik); 0.25 (2-D, nodal), 0.5 (3-D)
  std::optional<int> max_elements;         ///< interpolation entries kept per row, 0: all (2-D), 4 (3-D)
  /// l1_gauss_seidel (BoomerAMG); chebyshev (smoothed aggregation, which offers chebyshev and
  /// l1_jacobi only: a Gauss–Seidel sweep is sequential, the polynomial runs on any device)
  std::optional<AmgSmoother> smoother;
  int sweeps = 1;                  ///< smoother sweeps before and after each coarse correction
  AmgCycle cycle = AmgCycle::v;
  int max_levels = 25;             ///< hypre's default
  std::optional<int> aggressive_levels;  ///< levels of aggressive coarsening: 0 (2-D), 1 (3-D, or a near_null_space)
  /// How those levels interpolate. A two-stage interpolation keeps `max_elements` entries per row
  /// in each stage and in their product: fewer iterations and cheaper solves than multipass for a
  /// dearer setup, so it pays when the setup is reused over solves with the same matrix
  /// (docs/sparse.md has the figures).
  AmgAggressiveInterpolation aggressive_interpolation = AmgAggressiveInterpolation::multipass;
  int cycles = 1;                  ///< V/W-cycles per application of the preconditioner
  /// Relax the coarse points, then the fine ones (hypre's relax order 1, PETSc's PCHYPRE default)
  /// instead of in row order (hypre's default, 0).
  bool cf_order = false;
  /// Unknowns per node of a PDE system, interleaved: global row g is unknown g % functions of node
  /// g / functions (elasticity: the dimension, the displacement components of a node in
  /// consecutive rows). Coarsening and interpolation then never mix unknowns of different kinds
  /// (hypre's NumFunctions, with each row's unknown handed over as its DofFunc), on any row
  /// partition. Must divide the matrix's rows.
  int functions = 1;
  /// Coarsen nodes instead of unknowns: the strength of a node's connections is taken from the
  /// row sums of the `functions` × `functions` blocks (hypre's nodal coarsening 4), so all the
  /// unknowns of a node are coarse or fine together, which strongly coupled systems (elasticity)
  /// need. Needs `functions` > 1 and every node's rows on one rank (`PartitionOptions::functions`
  /// partitions so; `from_local` owners choose their rows).
  bool nodal = false;
  /// (owned rows, m), this rank's rows of m vectors the interpolation should reproduce, the
  /// near-null space of the operator: for elasticity its rigid body modes
  /// (`rigid_body_modes`, rigid_body_modes.hpp). Undefined: none (smoothed aggregation: the
  /// constants of each unknown). With `Preconditioner::amg` it needs `nodal`. hypre fits the
  /// interpolation to them (its interp-vector variant 3, Baker, Kolev and Yang 2010); a mode that
  /// is constant on each unknown (a translation) is one the unknown-wise interpolation already
  /// reproduces, so it is left out of the fit.
  at::Tensor near_null_space;

  /// Equal fields, and the same `near_null_space` tensor at the same version (as a solve's cache
  /// compares the matrix's values: by identity, not by value).
  friend bool operator==(const AmgOptions& a, const AmgOptions& b) {
    const auto same_tensor = [](const at::Tensor& x, const at::Tensor& y) {
      if (x.defined() != y.defined()) return false;
      return !x.defined() || (x.unsafeGetTensorImpl() == y.unsafeGetTensorImpl() && x._version() == y._version());
    };
    return a.coarsening == b.coarsening && a.interpolation == b.interpolation &&
           a.strong_threshold == b.strong_threshold && a.max_elements == b.max_elements && a.smoother == b.smoother &&
           a.sweeps == b.sweeps && a.cycle == b.cycle && a.max_levels == b.max_levels &&
           a.aggressive_levels == b.aggressive_levels && a.aggressive_interpolation == b.aggressive_interpolation &&
           a.cycles == b.cycles && a.cf_order == b.cf_order && a.functions == b.functions && a.nodal == b.nodal &&
           same_tensor(a.near_null_space, b.near_null_space);
  }

  /// These options with every unset field chosen for a matrix with `row_entries` stored entries
  /// per row on average (nnz / rows); the fields already set are kept.
  [[nodiscard]] AmgOptions resolved(double row_entries) const {
    const bool wide = row_entries > amg_row_entries_3d;
    AmgOptions o = *this;
    o.coarsening = coarsening.value_or(wide ? AmgCoarsening::hmis : AmgCoarsening::falgout);
    o.interpolation = interpolation.value_or(wide ? AmgInterpolation::extended_i : AmgInterpolation::classical);
    o.strong_threshold = strong_threshold.value_or(wide && !nodal ? 0.5 : 0.25);
    o.max_elements = max_elements.value_or(wide ? 4 : 0);
    o.smoother = smoother.value_or(AmgSmoother::l1_gauss_seidel);
    // A fitted near-null space needs an aggressive level whatever the width (amg.hpp's check).
    o.aggressive_levels = aggressive_levels.value_or(wide || near_null_space.defined() ? 1 : 0);
    return o;
  }
};

}  // namespace einshard::sparse
