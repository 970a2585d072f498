#pragma once
/// @file
/// `Preconditioner::amg`: one hypre BoomerAMG hierarchy over the whole distributed matrix (not
/// one per rank, which is block-Jacobi AMG and needs more iterations the more ranks there are),
/// applied as `AmgOptions::cycles` V- or W-cycles from a zero guess.
///
/// hypre numbers the rows of each rank contiguously, in rank order. einshard's partitions (RCB,
/// Hilbert, METIS, `from_local` ownership) need not be contiguous, but a rank's owned rows are
/// stored in a fixed order, so the contiguous numbering is implied: owned row i of rank r is
/// hypre row first(r) + i, first(r) the rows owned by lower ranks. Setup finds first(r) with one
/// exclusive scan and the hypre numbers of the halo columns with one halo exchange of those
/// numbers (the same messages as a product); after that a vector's owned slice *is* its hypre
/// slice, so applying the preconditioner lends hypre the slices' memory and gathers nothing. The
/// matrix is copied straight into hypre's ParCSR blocks, as PETSc's PCHYPRE does.
///
/// hypre computes in float64 on the host (HYPRE_Real). A matrix of another real dtype or on a
/// device gets its hierarchy from a float64 host copy of its rows, and each application stages
/// the vector there and back (`PrecisionAdapter`): the V-cycle runs on the CPU whatever the Krylov
/// method runs on, as torch-sla's AMG is built on the CPU. Complex values raise an `Error`.
/// Without hypre (EINSHARD_HAS_HYPRE unset) the option raises an `Error` naming hypre.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/preconditioner/aggregation.hpp"
#include "einshard/sparse/preconditioner/amg_options.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

#if defined(EINSHARD_HAS_HYPRE)
// hypre's internal headers (for the hierarchy's levels and matrices, and the vectors' local data:
// its public API has no getter for either) are C written for C; quiet them.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wvolatile"
#endif
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <HYPRE.h>
#include <HYPRE_parcsr_ls.h>
#include <_hypre_parcsr_ls.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

namespace einshard::sparse::detail {

/// The ghosts of an owned-length vector, in the matrix's halo order (its halo exchange).
using GhostsOf = std::function<at::Tensor(const at::Tensor& owned)>;

#if defined(EINSHARD_HAS_HYPRE)

inline constexpr int hypre_coarsen_type(AmgCoarsening c) {
  switch (c) {
    case AmgCoarsening::hmis: return 10;
    case AmgCoarsening::pmis: return 8;
    case AmgCoarsening::falgout: return 6;
  }
  return 10;
}

inline constexpr int hypre_interp_type(AmgInterpolation i) {
  switch (i) {
    case AmgInterpolation::extended_i: return 6;
    case AmgInterpolation::extended: return 14;
    case AmgInterpolation::standard: return 8;
    case AmgInterpolation::classical: return 0;
    case AmgInterpolation::direct: return 3;
    case AmgInterpolation::multipass: return 4;
  }
  return 6;
}

inline constexpr int hypre_agg_interp_type(AmgAggressiveInterpolation i) {
  switch (i) {
    case AmgAggressiveInterpolation::multipass: return 4;
    case AmgAggressiveInterpolation::two_stage_extended_i: return 1;
    case AmgAggressiveInterpolation::two_stage_standard: return 2;
    case AmgAggressiveInterpolation::two_stage_extended: return 3;
  }
  return 4;
}

inline std::string to_string(AmgCoarsening c) {
  switch (c) {
    case AmgCoarsening::hmis: return "hmis";
    case AmgCoarsening::pmis: return "pmis";
    case AmgCoarsening::falgout: return "falgout";
  }
  return "unknown";
}

/// hypre relax types of the down and the up sweeps.
inline constexpr std::pair<int, int> hypre_relax_types(AmgSmoother s) {
  switch (s) {
    case AmgSmoother::l1_gauss_seidel: return {13, 14};
    case AmgSmoother::hybrid_gauss_seidel: return {6, 6};
    case AmgSmoother::l1_jacobi: return {18, 18};
    case AmgSmoother::chebyshev: return {16, 16};
  }
  return {13, 14};
}

/// The stored entries per row of the whole matrix, nnz / rows (collective): what picks the
/// defaults of `AmgOptions::resolved`.
inline double mean_row_entries(const LocalRows& rows, std::int64_t global_rows) {
  const auto nnz = comm::all_reduce_value(static_cast<std::int64_t>(rows.a.nnz()), comm::Reduction::sum, rows.comm);
  return global_rows > 0 ? static_cast<double>(nnz) / static_cast<double>(global_rows) : 0.0;
}

/// The faults of options (resolved: every field set) and matrix found before any hypre call, so
/// that a bad input is the same `Error` on every rank instead of a hypre abort or a hang inside a
/// collective setup. `owned`: the owned rows' global indices.
inline std::string amg_fault(const LocalRows& rows, std::int64_t global_rows, std::int64_t global_cols,
                             const AmgOptions& o, const at::Tensor& owned) {
  if (global_rows != global_cols)
    return "amg preconditioner setup: expected a square matrix, found " + std::to_string(global_rows) + "x" +
           std::to_string(global_cols);
  if (rows.a.dtype() != at::kDouble)  // other real dtypes are staged through float64 (make_amg)
    return std::string("amg preconditioner setup (hypre BoomerAMG): expected real values, found ") +
           c10::toString(rows.a.dtype());
  if (global_rows > std::numeric_limits<HYPRE_BigInt>::max() ||
      rows.a.nnz() + rows.n_owned > std::numeric_limits<HYPRE_Int>::max())  // + an explicit diagonal per row
    return "amg preconditioner setup: expected at most " +
           std::to_string(std::numeric_limits<HYPRE_BigInt>::max()) + " rows and as many local entries (hypre's " +
           std::to_string(8 * sizeof(HYPRE_BigInt)) + "-bit indices), found " + std::to_string(global_rows) +
           " rows and " + std::to_string(rows.a.nnz()) + " entries on this rank";
  if (!(*o.strong_threshold >= 0 && *o.strong_threshold < 1) || o.sweeps < 1 || o.max_levels < 1 ||
      *o.max_elements < 0 || *o.aggressive_levels < 0 || o.cycles < 1)
    return "amg options: expected 0 ≤ strong_threshold < 1, sweeps ≥ 1, max_levels ≥ 1, "
           "max_elements ≥ 0, aggressive_levels ≥ 0 and cycles ≥ 1, found " +
           std::to_string(*o.strong_threshold) + ", " + std::to_string(o.sweeps) + ", " +
           std::to_string(o.max_levels) + ", " + std::to_string(*o.max_elements) + ", " +
           std::to_string(*o.aggressive_levels) + " and " + std::to_string(o.cycles);
  if (o.functions < 1 || global_rows % o.functions != 0)
    return "amg options: expected functions ≥ 1 dividing the matrix's rows (functions unknowns per node), "
           "found functions = " + std::to_string(o.functions) + " with " + std::to_string(global_rows) + " rows";
  if (o.nodal && o.functions < 2)
    return "amg options: expected functions > 1 with nodal = true (nodal coarsening groups the unknowns of a "
           "node), found functions = " + std::to_string(o.functions);
  if (o.nodal) {
    if (auto broken = broken_node(owned, o.functions); !broken.empty())
      return "amg options: expected every rank to own whole nodes with nodal = true (the " +
             std::to_string(o.functions) + " rows of a node on one rank: partition with PartitionOptions{.functions = " +
             std::to_string(o.functions) + "}, or own whole nodes in from_local), found " + broken;
  }
  if (const auto& z = o.near_null_space; z.defined()) {
    if (!o.nodal)
      return "amg options: expected nodal = true (and functions > 1) with a near_null_space (hypre fits the "
             "interpolation to it node by node), found nodal = false";
    if (*o.aggressive_levels < 1)
      return "amg options: expected aggressive_levels ≥ 1 with a near_null_space (hypre 2.26 fits the modes on a "
             "finest level without aggressive coarsening by writing past the end of interpolation rows, a "
             "segmentation fault on a clamped beam of structured tetrahedra), found aggressive_levels = " +
             std::to_string(*o.aggressive_levels);
    if (z.dim() != 2 || z.size(0) != rows.n_owned || !at::isFloatingType(z.scalar_type()) || !z.device().is_cpu())
      return "amg options: expected near_null_space of shape (owned rows, m) = (" + std::to_string(rows.n_owned) +
             ", m), real floating point, on the CPU, found shape " + c10::str(z.sizes()) + ", " +
             c10::toString(z.scalar_type()) + " on " + z.device().str();
  }
  check_rows(rows);
  return {};  // a zero diagonal is found while the matrix is copied (AmgOp::build_matrix)
}

/// The columns of a near-null space that vary within an unknown (collective): a column constant
/// on every unknown across all ranks (a translation) is one that interpolation by unknowns already
/// reproduces, and fitting it again adds interpolation entries without improving the coarse space.
inline std::vector<std::int64_t> varying_modes(const at::Tensor& z, int functions, MPI_Comm comm) {
  const auto m = z.size(1);
  const auto by_unknown = z.to(at::kDouble).reshape({-1, functions, m});  // (nodes, functions, m)
  std::vector<double> lo(static_cast<std::size_t>(functions * m), std::numeric_limits<double>::infinity());
  std::vector<double> hi(lo.size(), -std::numeric_limits<double>::infinity());
  if (by_unknown.size(0) > 0) {
    const auto mn = by_unknown.amin(0).contiguous(), mx = by_unknown.amax(0).contiguous();
    std::copy_n(mn.data_ptr<double>(), lo.size(), lo.begin());
    std::copy_n(mx.data_ptr<double>(), hi.size(), hi.begin());
  }
  comm::all_reduce_values(std::span<double>(lo), comm::Reduction::min, comm);
  comm::all_reduce_values(std::span<double>(hi), comm::Reduction::max, comm);
  std::vector<std::int64_t> keep;
  for (std::int64_t j = 0; j < m; ++j) {
    bool varies = false;
    for (int f = 0; f < functions; ++f) {
      const auto k = static_cast<std::size_t>(f * m + j);
      varies |= hi[k] - lo[k] > 1e-12 * std::max(std::abs(hi[k]), std::abs(lo[k]));
    }
    if (varies) keep.push_back(j);
  }
  return keep;
}

/// hypre's status after a call sequence: empty, or what failed. Clears hypre's sticky flag.
inline std::string hypre_fault(const char* what) {
  const HYPRE_Int err = HYPRE_GetError();
  HYPRE_ClearAllErrors();
  if (err == 0 || err == HYPRE_ERROR_CONV) return {};
  return std::string("amg preconditioner setup: expected hypre BoomerAMG's ") + what + " to succeed, found hypre error code " +
         std::to_string(err);
}

/// Tests: the next n checks of a fitted setup's first cycle (AmgOp::check_fitted_cycle) find it
/// non-finite, as a stray value of hypre's would make it. Process-wide; every rank sets the same n.
inline int& amg_spoiled_cycles() {
  static int n = 0;
  return n;
}

class AmgOp final : public PreconditionerOp {
 public:
  /// `owned`: the owned rows' global indices (int64, ascending), which say each row's unknown.
  AmgOp(const LocalRows& rows, std::int64_t global_rows, std::int64_t global_cols, const GhostsOf& ghosts_of,
        const AmgOptions& o, const at::Tensor& owned)
      : options_(o.resolved(mean_row_entries(rows, global_rows))) {
    // The near-null space's width, agreed before anything reads it (-1: none on this rank).
    const auto& z = options_.near_null_space;
    const std::int64_t width = z.defined() && z.dim() == 2 ? z.size(1) : -1;
    const auto widest = comm::all_reduce_value(width, comm::Reduction::max, rows.comm);
    const auto narrowest = comm::all_reduce_value(width, comm::Reduction::min, rows.comm);
    agreed_setup(rows.comm, [&] {
      if (auto fault = amg_fault(rows, global_rows, global_cols, options_, owned); !fault.empty()) throw Error(fault);
      if (widest != narrowest)
        throw Error("amg options: expected a near_null_space with the same number of columns on every rank, found " +
                    std::to_string(narrowest) + " to " + std::to_string(widest) + " (-1: none)");
    });
    initialize_hypre();
    comm_ = comm::OwnedComm(rows.comm);
    const std::int64_t n = rows.n_owned;
    if (options_.functions > 1) {
      // Global row g is unknown g % functions of node g / functions, wherever the partition put
      // it; hypre's own assignment would count from each rank's first row instead.
      const auto unknown = (owned % options_.functions).to(at::kInt).contiguous();
      dof_func_.assign(unknown.data_ptr<std::int32_t>(), unknown.data_ptr<std::int32_t>() + unknown.numel());
    }
    const std::int64_t first = comm::exclusive_sum(n, comm_);
    const auto numbers = ghosts_of(at::arange(first, first + n, at::kLong)).contiguous();
    HYPRE_ClearAllErrors();
    try {
      // Every smoother divides by the diagonal (or its l1 row norm, which a zero diagonal makes
      // indefinite); hypre would only warn.
      comm::raise_if_any(comm_, build_matrix(rows, first, global_rows, numbers));
      finish_matrix(first);
      std::string fault = hypre_fault("matrix assembly");
      if (fault.empty()) {
        if (z.defined()) make_modes(first);
        setup_solver();
        fault = hypre_fault("setup");
      }
      comm::raise_if_any(comm_, fault);
      if (!par_modes_.empty()) check_fitted_cycle();  // the same on every rank (varying_modes)
    } catch (...) {
      release();  // the constructor throws, so no destructor runs
      throw;
    }
    measure_hierarchy();
  }
  AmgOp(const AmgOp&) = delete;
  AmgOp& operator=(const AmgOp&) = delete;
  ~AmgOp() override { release(); }

  /// `cycles` cycles on A z = r from z = 0 (collective). hypre's vectors borrow r's and z's
  /// memory for the call (as PETSc's PCHYPRE does), so nothing is copied; BoomerAMG reads b only.
  void apply(const at::Tensor& r, at::Tensor& z) const override {
    const auto src = r.contiguous();
    z.zero_();
    Borrow b(par_b_, const_cast<double*>(src.data_ptr<double>())), x(par_x_, z.data_ptr<double>());
    HYPRE_BoomerAMGSolve(solver_, par_a_, par_b_, par_x_);
  }
  [[nodiscard]] std::string name() const override { return "amg(boomeramg, " + to_string(*options_.coarsening) + ")"; }
  /// The options in use: the caller's, with the unset fields chosen from the matrix.
  [[nodiscard]] const AmgOptions& options() const { return options_; }
  [[nodiscard]] std::pair<int, double> hierarchy() const override { return {levels_, complexity_}; }

 private:
  /// hypre's objects and the duplicated communicator. Not once MPI is finalized (an AMG kept in
  /// a matrix that outlives MPI_Finalize): hypre would call MPI, so the process leaves them to exit.
  void release() {
    if (comm::mpi_ended()) return;
    if (solver_) HYPRE_BoomerAMGDestroy(solver_);
    drop_modes();
    if (x_) HYPRE_IJVectorDestroy(x_);
    if (b_) HYPRE_IJVectorDestroy(b_);
    if (par_a_) hypre_ParCSRMatrixDestroy(reinterpret_cast<hypre_ParCSRMatrix*>(par_a_));
    comm_ = {};
    solver_ = nullptr, x_ = b_ = nullptr, par_a_ = nullptr;
  }
  static void initialize_hypre() {
    static const bool done = [] {
      HYPRE_Init();
      return true;
    }();
    (void)done;
  }
  /// Points a hypre vector's local data at `data` until destroyed (its own array is restored).
  class Borrow {
   public:
    Borrow(HYPRE_ParVector v, double* data)
        : local_(hypre_ParVectorLocalVector(reinterpret_cast<hypre_ParVector*>(v))), own_(hypre_VectorData(local_)) {
      hypre_VectorData(local_) = data;
    }
    Borrow(const Borrow&) = delete;
    Borrow& operator=(const Borrow&) = delete;
    ~Borrow() { hypre_VectorData(local_) = own_; }

   private:
    hypre_Vector* local_;
    double* own_;
  };

  /// A's owned rows as hypre's ParCSR matrix, copied from the local CSR in one pass (the copy
  /// PETSc's PCHYPRE makes; hypre's IJ interface would also search each
  /// row for repeated columns and sort the halo columns in its assembly): the owned columns form
  /// the diag block with the diagonal entry first (hypre's smoothers read it there), the halo
  /// columns the offd block, numbered by their sorted hypre numbers. Local work only; returns the
  /// zero-diagonal fault.
  std::string build_matrix(const LocalRows& rows, std::int64_t first, std::int64_t global_rows,
                           const at::Tensor& ghost_numbers) {
    n_ = rows.n_owned;
    const auto n_ghosts = ghost_numbers.numel();
    // offd column of each halo slot: its rank among the sorted hypre numbers.
    const auto order = std::get<1>(ghost_numbers.sort()).contiguous();
    const auto* gp = ghost_numbers.data_ptr<std::int64_t>();
    const auto* op = order.data_ptr<std::int64_t>();
    std::vector<HYPRE_Int> offd_of(static_cast<std::size_t>(n_ghosts));
    for (std::int64_t j = 0; j < n_ghosts; ++j) offd_of[static_cast<std::size_t>(op[j])] = static_cast<HYPRE_Int>(j);
    // Room for each block's entries, filled in one pass and trimmed to what it holds: a row
    // without a stored diagonal gets an explicit zero there (at most n_ more in diag), and stored
    // zeros off the diagonal are left out: element-by-element assembly stores them wherever an
    // element's coupling vanishes (elasticity on structured tetrahedra), and hypre's systems
    // interpolation (nodal blocks, fitted vectors) fails its setup on them (hypre error 12).
    // A counting pass first took as long as the copy.
    const std::int64_t halo_room = n_ghosts > 0 ? rows.a.col.ge(n_).sum().item<std::int64_t>() : 0;
    const std::int64_t diag_room = rows.a.nnz() - halo_room + n_, offd_room = halo_room;
    std::array<HYPRE_BigInt, 2> starts{static_cast<HYPRE_BigInt>(first), static_cast<HYPRE_BigInt>(first + n_)};
    par_a_ = reinterpret_cast<HYPRE_ParCSRMatrix>(hypre_ParCSRMatrixCreate(
        comm_, static_cast<HYPRE_BigInt>(global_rows), static_cast<HYPRE_BigInt>(global_rows), starts.data(),
        starts.data(), static_cast<HYPRE_Int>(n_ghosts), static_cast<HYPRE_Int>(diag_room),
        static_cast<HYPRE_Int>(offd_room)));
    auto* a = reinterpret_cast<hypre_ParCSRMatrix*>(par_a_);
    hypre_ParCSRMatrixInitialize(a);
    auto* diag = hypre_ParCSRMatrixDiag(a);
    auto* offd = hypre_ParCSRMatrixOffd(a);
    HYPRE_Int *di = hypre_CSRMatrixI(diag), *dj = hypre_CSRMatrixJ(diag), *oi = hypre_CSRMatrixI(offd),
              *oj = hypre_CSRMatrixJ(offd);
    HYPRE_Real *dv = hypre_CSRMatrixData(diag), *ov = hypre_CSRMatrixData(offd);
    HYPRE_BigInt* col_map = hypre_ParCSRMatrixColMapOffd(a);
    for (std::int64_t j = 0; j < n_ghosts; ++j) col_map[j] = static_cast<HYPRE_BigInt>(gp[op[j]]);
    std::int64_t zero_diagonals = 0, first_zero = -1;
    dispatch_view(rows.a, [&](auto m) {
      using V = typename decltype(m)::value_type;
      if constexpr (std::is_same_v<V, double>) {
        HYPRE_Int d = 0, o = 0;
        for (std::int64_t i = 0; i < n_; ++i) {
          di[i] = d;
          oi[i] = o;
          // The row's order with its diagonal swapped into the first slot, as hypre's IJ
          // assembly of preallocated rows leaves it (the way PETSc's PCHYPRE hands rows over):
          // interpolation truncation breaks ties by this order, so shifting the entries before
          // the diagonal instead gives another hierarchy (one more CG iteration on 3-D P1 Poisson).
          const HYPRE_Int start = d;
          HYPRE_Int diagonal = -1;
          for (auto k = m.rp[i]; k < m.rp[i + 1]; ++k) {
            const auto c = static_cast<std::int64_t>(m.ci[k]);
            if (c != i && m.av[k] == 0.0) continue;
            if (c < n_) {
              if (c == i && diagonal < 0) diagonal = d;
              dj[d] = static_cast<HYPRE_Int>(c);
              dv[d++] = m.av[k];
            } else {
              oj[o] = offd_of[static_cast<std::size_t>(c - n_)];
              ov[o++] = m.av[k];
            }
          }
          if (diagonal < 0) {
            diagonal = d;
            dj[d] = static_cast<HYPRE_Int>(i);
            dv[d++] = 0.0;
          }
          std::swap(dj[start], dj[diagonal]);
          std::swap(dv[start], dv[diagonal]);
          if (dv[start] == 0.0) {
            if (first_zero < 0) first_zero = i;
            ++zero_diagonals;
          }
        }
        di[n_] = d;
        oi[n_] = o;
        hypre_CSRMatrixNumNonzeros(diag) = d;
        hypre_CSRMatrixNumNonzeros(offd) = o;
      }
    });
    if (zero_diagonals == 0) return {};
    return "amg preconditioner setup: expected a nonzero diagonal, found a zero one in owned row " +
           std::to_string(first_zero) + " (" + std::to_string(zero_diagonals) + " such row" +
           (zero_diagonals > 1 ? "s" : "") + " on this rank)";
  }

  /// The collective rest of the matrix (its entry counts and the halo pattern of its products),
  /// and the two vectors whose data `apply` borrows.
  void finish_matrix(std::int64_t first) {
    auto* a = reinterpret_cast<hypre_ParCSRMatrix*>(par_a_);
    hypre_ParCSRMatrixSetNumNonzeros(a);
    hypre_ParCSRMatrixSetDNumNonzeros(a);
    hypre_MatvecCommPkgCreate(a);
    const auto lo = static_cast<HYPRE_BigInt>(first), hi = static_cast<HYPRE_BigInt>(first + n_ - 1);
    const auto vector = [&](HYPRE_IJVector& v, HYPRE_ParVector& par) {
      HYPRE_IJVectorCreate(comm_, lo, hi, &v);
      HYPRE_IJVectorSetObjectType(v, HYPRE_PARCSR);
      HYPRE_IJVectorInitialize(v);
      HYPRE_IJVectorAssemble(v);
      void* o = nullptr;
      HYPRE_IJVectorGetObject(v, &o);
      par = static_cast<HYPRE_ParVector>(o);
    };
    vector(b_, par_b_);
    vector(x_, par_x_);
  }

  /// The near-null space's columns that vary within an unknown, as hypre vectors (collective).
  void make_modes(std::int64_t first) {
    const auto& z = options_.near_null_space;
    const auto lo = static_cast<HYPRE_BigInt>(first), hi = static_cast<HYPRE_BigInt>(first + n_ - 1);
    for (const auto j : varying_modes(z, options_.functions, comm_)) {
      const auto column = z.select(1, j).to(at::kDouble).contiguous();
      HYPRE_IJVector v = nullptr;
      HYPRE_IJVectorCreate(comm_, lo, hi, &v);
      modes_.push_back(v);
      HYPRE_IJVectorSetObjectType(v, HYPRE_PARCSR);
      HYPRE_IJVectorInitialize(v);
      HYPRE_IJVectorAssemble(v);
      void* o = nullptr;
      HYPRE_IJVectorGetObject(v, &o);
      auto* local = hypre_ParVectorLocalVector(static_cast<hypre_ParVector*>(o));
      std::copy_n(column.data_ptr<double>(), n_, hypre_VectorData(local));
      par_modes_.push_back(static_cast<HYPRE_ParVector>(o));
    }
  }

  void setup_solver() {
    const auto& o = options_;
    HYPRE_BoomerAMGCreate(&solver_);
    HYPRE_BoomerAMGSetPrintLevel(solver_, 0);
    HYPRE_BoomerAMGSetCoarsenType(solver_, hypre_coarsen_type(*o.coarsening));
    HYPRE_BoomerAMGSetInterpType(solver_, hypre_interp_type(*o.interpolation));
    HYPRE_BoomerAMGSetPMaxElmts(solver_, *o.max_elements);
    HYPRE_BoomerAMGSetStrongThreshold(solver_, *o.strong_threshold);
    HYPRE_BoomerAMGSetAggNumLevels(solver_, *o.aggressive_levels);
    HYPRE_BoomerAMGSetAggInterpType(solver_, hypre_agg_interp_type(o.aggressive_interpolation));
    if (o.aggressive_interpolation != AmgAggressiveInterpolation::multipass) {
      // Untruncated, the two stages' product is denser than the interpolation it replaces.
      HYPRE_BoomerAMGSetAggP12MaxElmts(solver_, *o.max_elements);
      HYPRE_BoomerAMGSetAggPMaxElmts(solver_, *o.max_elements);
    }
    const auto [down, up] = hypre_relax_types(*o.smoother);
    HYPRE_BoomerAMGSetCycleRelaxType(solver_, down, 1);
    HYPRE_BoomerAMGSetCycleRelaxType(solver_, up, 2);
    HYPRE_BoomerAMGSetCycleRelaxType(solver_, 9, 3);  // Gaussian elimination on the coarsest level
    HYPRE_BoomerAMGSetNumSweeps(solver_, o.sweeps);
    HYPRE_BoomerAMGSetRelaxOrder(solver_, o.cf_order ? 1 : 0);
    HYPRE_BoomerAMGSetCycleType(solver_, o.cycle == AmgCycle::v ? 1 : 2);
    HYPRE_BoomerAMGSetMaxLevels(solver_, o.max_levels);
    if (o.functions > 1) {
      HYPRE_BoomerAMGSetNumFunctions(solver_, o.functions);
      if (n_ > 0) {  // hypre frees the array with the solver
        auto* dof_func = hypre_CTAlloc(HYPRE_Int, n_, HYPRE_MEMORY_HOST);
        std::copy(dof_func_.begin(), dof_func_.end(), dof_func);
        HYPRE_BoomerAMGSetDofFunc(solver_, dof_func);
      }
    }
    if (o.nodal) {
      // Row-sum norm of each node block, and its diagonal made the negative sum of the node's
      // off-diagonal blocks: the strength measure of hypre's own elasticity settings (MFEM's).
      HYPRE_BoomerAMGSetNodal(solver_, 4);
      HYPRE_BoomerAMGSetNodalDiag(solver_, 1);
    }
    if (!par_modes_.empty()) {
      // Variant 3 (LN): of hypre's three fits, the one whose setup succeeds on unstructured
      // elasticity at every rank count tried; the GM variants (1, 2) stop with hypre error 12 on
      // some partitions (P2 tetrahedra on 4 ranks, docs/sparse.md). Each fitted column is
      // truncated to 4 entries, as `max_elements` truncates P, and the modes are smoothed on each
      // level before the fit.
      HYPRE_BoomerAMGSetInterpVecVariant(solver_, 3);
      HYPRE_BoomerAMGSetInterpVecQMax(solver_, 4);
      HYPRE_BoomerAMGSetSmoothInterpVectors(solver_, 1);
      HYPRE_BoomerAMGSetInterpVectors(solver_, static_cast<HYPRE_Int>(par_modes_.size()), par_modes_.data());
    }
    // A preconditioner: a fixed number of cycles, no convergence test (tol 0 also skips the
    // residual norm hypre would compute every cycle).
    HYPRE_BoomerAMGSetMaxIter(solver_, o.cycles);
    HYPRE_BoomerAMGSetTol(solver_, 0.0);
    HYPRE_BoomerAMGSetup(solver_, par_a_, par_b_, par_x_);
  }

  /// Levels and Σ nnz(A_l) / nnz(A_0), from the hierarchy's matrices (one small all-reduce).
  void measure_hierarchy() {
    auto* data = reinterpret_cast<hypre_ParAMGData*>(solver_);
    levels_ = hypre_ParAMGDataNumLevels(data);
    auto** a = hypre_ParAMGDataAArray(data);
    std::vector<double> nnz(static_cast<std::size_t>(levels_), 0.0);
    for (int l = 0; l < levels_; ++l) {
      const auto* m = a[l];
      nnz[static_cast<std::size_t>(l)] = static_cast<double>(hypre_CSRMatrixNumNonzeros(hypre_ParCSRMatrixDiag(m)) +
                                                             hypre_CSRMatrixNumNonzeros(hypre_ParCSRMatrixOffd(m)));
    }
    comm::all_reduce_values(std::span<double>(nnz.data(), static_cast<std::size_t>(levels_)), comm::Reduction::sum, comm_);
    double total = 0;
    for (const double v : nnz) total += v;
    complexity_ = levels_ > 0 && nnz[0] > 0 ? total / nnz[0] : 0.0;
  }

  /// Frees the near-null space's level-0 vectors (hypre frees the coarse levels' copies itself).
  void drop_modes() {
    for (auto* v : modes_) HYPRE_IJVectorDestroy(v);
    modes_.clear(), par_modes_.clear();
  }

  /// hypre 2.26's LN fit of the near-null space reads past an array of its own (valgrind, 4
  /// ranks), so its interpolation now and then takes a stray value and the V-cycle returns NaN
  /// (about one setup in twenty of an elasticity beam on 4 ranks). One cycle on a vector of ones
  /// finds that: the setup is made again, and if that cycle fails too, once more without the
  /// near-null space (nodal coarsening by unknowns, as with `near_null_space` unset). Collective.
  void check_fitted_cycle() {
    for (int attempt = 0;; ++attempt) {
      auto ones = at::ones({n_}, at::kDouble), out = at::empty({n_}, at::kDouble);
      apply(ones, out);
      bool finite = out.isfinite().all().item<bool>();
      if (amg_spoiled_cycles() > 0) {
        --amg_spoiled_cycles();
        finite = false;
      }
      // Still not finite on the third: the solve reports it (StopReason::nan).
      if (comm::all_reduce_value(finite ? 1 : 0, comm::Reduction::min, comm_) == 1 || attempt == 2) return;
      HYPRE_BoomerAMGDestroy(solver_);
      solver_ = nullptr;
      if (attempt == 1) drop_modes();
      setup_solver();
      comm::raise_if_any(comm_, hypre_fault("setup"));
    }
  }

  AmgOptions options_;
  comm::OwnedComm comm_;
  std::int64_t n_ = 0;
  HYPRE_IJVector b_ = nullptr, x_ = nullptr;
  HYPRE_ParCSRMatrix par_a_ = nullptr;
  HYPRE_ParVector par_b_ = nullptr, par_x_ = nullptr;
  HYPRE_Solver solver_ = nullptr;
  std::vector<HYPRE_IJVector> modes_;      // the near-null space's level-0 vectors, ours to free
  std::vector<HYPRE_ParVector> par_modes_;
  std::vector<HYPRE_Int> dof_func_;  // the unknown of each owned row, with functions > 1
  int levels_ = 0;
  double complexity_ = 0.0;
};

#endif  // EINSHARD_HAS_HYPRE

/// The amg preconditioner of a distributed matrix: its rows, its global shape, its halo exchange
/// and the owned rows' global indices. Collective over `rows.comm`; every fault is the same
/// `Error` on every rank.
inline std::unique_ptr<PreconditionerOp> make_amg(const LocalRows& rows, std::int64_t global_rows,
                                                  std::int64_t global_cols, const GhostsOf& ghosts_of,
                                                  const AmgOptions& options, const at::Tensor& owned) {
#if defined(EINSHARD_HAS_HYPRE)
  const auto& values = rows.a.values;
  // Every rank's matrix has one dtype and device kind (agreed at assembly), so every rank stages
  // or none does.
  if (values.defined() && at::isFloatingType(values.scalar_type()) &&
      (values.scalar_type() != at::kDouble || !values.device().is_cpu())) {
    const Csr host{rows.a.rows, rows.a.cols, rows.a.rowptr.cpu(), rows.a.col.cpu(), values.to(at::kCPU, at::kDouble)};
    const auto device = values.device();
    const GhostsOf host_ghosts = [&](const at::Tensor& o) { return ghosts_of(o.to(device)).cpu(); };
    // Each cycle stages r to float64 on the host and z back: two passes over a vector, beside the
    // cycle's sweeps over every level's matrix.
    return std::make_unique<PrecisionAdapter>(
        std::make_unique<AmgOp>(LocalRows{host, rows.n_owned, rows.comm}, global_rows, global_cols, host_ghosts,
                                options, owned.cpu()),
        at::kDouble, at::Device(at::kCPU));
  }
  return std::make_unique<AmgOp>(rows, global_rows, global_cols, ghosts_of, options, owned);
#else
  (void)rows, (void)global_rows, (void)global_cols, (void)ghosts_of, (void)options, (void)owned;
  throw Error("amg preconditioner setup: expected a build of einshard with hypre (BoomerAMG), found one "
              "configured without it (EINSHARD_HAS_HYPRE is not set; install libhypre-dev and reconfigure)");
#endif
}

}  // namespace einshard::sparse::detail
