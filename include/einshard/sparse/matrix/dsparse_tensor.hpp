#pragma once
/// @file
/// `DSparseTensor`: a sparse matrix partitioned by rows over the ranks of a mesh. Each rank
/// stores its owned rows in local numbering (owned columns first, then ghosts), split as PETSc's
/// MPIAIJ into a diagonal block (owned columns) and a row-compressed off-diagonal block (ghost
/// columns), so a product multiplies the diagonal block while the halo is in flight. A
/// rectangular (m, n) matrix has two partitions, as PETSc's row and column layouts: the range
/// (rows, b, A x) and the domain (columns, x, Aᴴ y); a square one has one.

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/comm/autograd.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/ops.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/matrix/block_kernels.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/csr_autograd.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"
#include "einshard/sparse/matrix/halo.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/matrix/partition.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/matrix/sparse_tensor.hpp"

namespace einshard::sparse {

class BatchSparseTensor;
class DBatchSparseTensor;
DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh);

// Results and options of the operations defined in analysis/ and io/ (included by
// <einshard/sparse.hpp>): the matrix offers them as members and knows none of their
// implementations (its solves: detail::SolveMembers, matrix/operator.hpp).
struct Components;
struct EigshOptions;
struct EigshResult;
struct LogdetOptions;
struct NewtonOptions;
struct NewtonResult;
struct NonlinearResidual;
/// g(u) or g'(u) on the owned slice of u (nonlinear_solve's pointwise term).
using PointwiseFunction = std::function<at::Tensor(const at::Tensor&)>;

/// Options of `DSparseTensor::from_local`.
struct FromLocalOptions {
  /// The global rows this rank owns (any set; together the ranks must own every row exactly once).
  /// Default: contiguous blocks, the `simple` partition.
  std::optional<at::Tensor> owned_rows{};
  /// The domain entries (x's rows, the matrix's columns) this rank owns. Default: the row
  /// partition for a square matrix, contiguous blocks for a rectangular one.
  std::optional<at::Tensor> owned_cols{};
};

/// Options of `DSparseTensor::load`.
struct LoadOptions {
  /// Where the loaded matrix lives: the files are read into host memory (mapped where they can
  /// be), then the matrix moves there as `to(device)` moves it.
  at::Device device = at::kCPU;
};

namespace detail {

/// Stored entries in global numbering (COO): what assembly routes to the rows' owners and what
/// a matrix gives back for transposes, saves and gathers.
struct CooEntries {
  at::Tensor values, rows, cols;
};

class PreconditionerCache;  // preconditioner/cache.hpp
class DerivedMatrixCache;   // krylov/solve.hpp
struct SolvePipeline;       // krylov/solve.hpp: the solves, which keep these caches on the matrix

/// What the solvers keep on a matrix between solves, made by the first solve (the matrix holds
/// them, and knows neither their types nor a solver).
struct SolveCaches {
  /// The last solve's preconditioner. A copy starts without: copies are how a matrix gets other
  /// values (`with_values`), and a cached Chebyshev operator refers to its own matrix.
  std::shared_ptr<PreconditionerCache> preconditioner;
  /// The assembled Aᴴ of the last backward, shared by copies (a solve's autograd record holds a
  /// copy of its matrix) and keyed by the values.
  std::shared_ptr<DerivedMatrixCache> adjoint;
  /// The single-precision copy of a mixed-precision solve (with its own preconditioner cache);
  /// like the preconditioner, a copy starts without.
  std::shared_ptr<DerivedMatrixCache> inner;

  SolveCaches() = default;
  SolveCaches(const SolveCaches& o) : adjoint(o.adjoint) {}
  SolveCaches& operator=(const SolveCaches& o) {
    preconditioner.reset();
    inner.reset();
    adjoint = o.adjoint;
    return *this;
  }
  SolveCaches(SolveCaches&&) noexcept = default;
  SolveCaches& operator=(SolveCaches&&) noexcept = default;
  ~SolveCaches() = default;
};

}  // namespace detail

/// Thread safety: `const` methods change no value but write into the object's halo scratch, so one
/// object (not its copies, which are independent) must not be used by two threads at once.
class DSparseTensor final : public detail::Operator, public detail::SolveMembers<DSparseTensor> {
 public:
  /// Distributed assembly: each rank passes COO entries (global row and column indices) of any
  /// rows; entries of rows owned elsewhere are sent to their owner, duplicates are summed. No rank
  /// ever holds the global matrix or an O(N) table. Collective over `mesh`; bad input (lengths,
  /// indices out of range, shapes or dtypes that differ between ranks) raises the same Error on
  /// every rank. Gradients reach `values` for the entries of rows this rank owns.
  static DSparseTensor from_local(const at::Tensor& values, const at::Tensor& rows, const at::Tensor& cols,
                                  std::array<std::int64_t, 2> shape, const Mesh& mesh,
                                  const FromLocalOptions& options = {});

  /// Partitions a matrix every rank holds (`A` identical on all ranks) with `options.method`; the
  /// partition ids are computed on rank 0 and broadcast, so every rank agrees byte for byte even
  /// when the partitioner is not deterministic. A rectangular matrix has no graph to partition:
  /// its rows and columns go in contiguous blocks (`simple`, the only method it accepts).
  static DSparseTensor partition(const SparseTensor& A, const Mesh& mesh, const PartitionOptions& options = {});

  /// Many matrices with one pattern, the batch split over the mesh's ranks (see batch.hpp).
  /// A template only so that this header need not include batch.hpp: instantiated where
  /// `BatchSparseTensor` is complete.
  template <class Batch>
  static auto partition_batch(const Batch& A, const Mesh& mesh) {
    return sparse::partition_batch(A, mesh);
  }

  // ---- properties ----------------------------------------------------------------------------
  [[nodiscard]] std::array<std::int64_t, 2> shape() const { return {m_, n_}; }
  [[nodiscard]] std::int64_t rows() const { return m_; }
  [[nodiscard]] std::int64_t cols() const { return n_; }
  [[nodiscard]] bool is_square() const { return m_ == n_; }
  [[nodiscard]] int num_partitions() const { return layout_->size(); }
  [[nodiscard]] at::ScalarType dtype() const { return local_.dtype(); }
  /// Stored entries of this rank's rows.
  [[nodiscard]] std::int64_t nnz() const { return local_.nnz(); }
  /// Stored entries of the whole matrix (collective).
  [[nodiscard]] std::int64_t global_nnz() const;
  /// The bytes this rank's part holds (local): its CSR and the products' split of it (the values of
  /// its diagonal runs), the halo's plan and buffers, and the row and column layouts. Storage
  /// shared between them counts once; the caches of solves (a preconditioner, an adjoint, a
  /// single-precision copy) are not counted.
  /// What stays flat per rank as ranks are added (docs/scale.md measures it to 1,024 ranks).
  [[nodiscard]] std::int64_t held_bytes() const;
  /// Rows of this rank's part the product takes as diagonal runs (local; docs/sparse.md,
  /// "Diagonal runs"): the interiors of a structured grid's lines; 0 for a matrix from an
  /// unstructured mesh, for complex values and for values off the CPU.
  [[nodiscard]] std::int64_t diagonal_run_rows() const;
  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  /// The range partition: rows, b, A x.
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return layout_; }
  /// The domain partition: columns, x, Aᴴ y (the range partition's object when they coincide).
  [[nodiscard]] const std::shared_ptr<const RowLayout>& domain_layout() const override { return domain_; }
  [[nodiscard]] const HaloPlan& halo() const { return *plan_; }
  /// This rank's rows in local numbering: columns [0, owned) are owned rows, then the ghosts
  /// (`halo().ghosts` gives their global indices).
  [[nodiscard]] const Csr& local() const { return local_; }
  /// The stored values of this rank's rows (differentiable leaf or the tensor passed in).
  [[nodiscard]] const at::Tensor& values() const { return local_.values; }

  // ---- vectors -------------------------------------------------------------------------------
  /// The owned slice of a global vector every rank holds: of length rows() in the range partition
  /// (b), or, for a rectangular matrix, of length cols() in the domain partition (x); an (N, k)
  /// block of k vectors gives an (n_local, k) slice.
  [[nodiscard]] DVector scatter(const at::Tensor& global) const;
  [[nodiscard]] DVector vector(at::Tensor owned) const { return {layout_, std::move(owned)}; }
  /// Zeros in the range partition (b's).
  [[nodiscard]] DVector zeros() const { return {layout_, at::zeros({layout_->local_size()}, local_.values.options().requires_grad(false))}; }
  /// Zeros in the domain partition (x's).
  [[nodiscard]] DVector domain_zeros() const { return {domain_, at::zeros({domain_->local_size()}, local_.values.options().requires_grad(false))}; }

  // ---- products ------------------------------------------------------------------------------
  /// y = A x. Overlaps the halo exchange with the diagonal block; differentiable in x and in
  /// `values()` (then through the autograd path, with the reverse halo exchange in backward).
  [[nodiscard]] DVector matvec(const DVector& x) const;
  friend DVector operator*(const DSparseTensor& a, const DVector& x) { return a.matvec(x); }

  /// w = A^T y (range -> domain): the transposed blocks' contributions to ghost rows go back to
  /// their owners (the reverse halo exchange), overlapped with the diagonal block. Differentiable in y.
  [[nodiscard]] DVector rmatvec(const DVector& y) const;

  /// Y = A X for an (owned, k) block: one halo exchange of whole rows for all k columns, and each
  /// stored entry read once (block_kernels.hpp).
  std::vector<double> apply_block(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override;

  /// x = Aᴴ y on owned slices (y: range, x: domain), the adjoint half of the least-squares methods.
  void apply_adjoint(const at::Tensor& y, at::Tensor& x) const override;

  /// y = A x on owned slices, returning the local partial <w, y>: the hot path of the solvers.
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override;
  /// y = A x + beta y with the local ‖y‖², in the product's own pass (`scratch` unused).
  double apply_update(const at::Tensor& x, at::Tensor& y, double beta, at::Tensor& scratch) const override;

  // ---- solvers -------------------------------------------------------------------------------
  // solve, lsqr and lsmr (detail::SolveMembers, defined in krylov/solve.hpp). A recorded
  // (differentiable) block solve has one block adjoint solve.

  // ---- values --------------------------------------------------------------------------------
  /// The same matrix structure with other stored values (same length and order as `values()`).
  [[nodiscard]] DSparseTensor with_values(at::Tensor values) const;
  [[nodiscard]] DSparseTensor to(at::ScalarType dtype) const { return with_values(local_.values.to(dtype)); }
  /// The same matrix on `device` (values differentiably): a loaded or host-assembled matrix onto a GPU.
  [[nodiscard]] DSparseTensor to(const at::Device& device) const {
    DSparseTensor out = *this;
    out.place_on(device);
    return out;
  }

  // Value operations act on the stored entries only (sparsity kept: A + 1.5 adds 1.5 to each
  // stored entry), as SparseTensor's; the result shares the partition and the halo plan.
  friend DSparseTensor operator+(const DSparseTensor& a, const at::Scalar& s) { return a.with_values(a.values() + s); }
  friend DSparseTensor operator-(const DSparseTensor& a, const at::Scalar& s) { return a.with_values(a.values() - s); }
  friend DSparseTensor operator*(const DSparseTensor& a, const at::Scalar& s) { return a.with_values(a.values() * s); }
  friend DSparseTensor operator*(const at::Scalar& s, const DSparseTensor& a) { return a.with_values(a.values() * s); }
  friend DSparseTensor operator/(const DSparseTensor& a, const at::Scalar& s) { return a.with_values(a.values() / s); }
  friend DSparseTensor operator-(const DSparseTensor& a) { return a.with_values(-a.values()); }
  friend DSparseTensor operator+(const DSparseTensor& a, const DSparseTensor& b) { return a.with_values(a.values() + a.same_structure(b, "+")); }
  friend DSparseTensor operator-(const DSparseTensor& a, const DSparseTensor& b) { return a.with_values(a.values() - a.same_structure(b, "-")); }
  /// Entrywise product of two matrices with the same structure (Hadamard).
  friend DSparseTensor operator*(const DSparseTensor& a, const DSparseTensor& b) { return a.with_values(a.values() * a.same_structure(b, "*")); }
  [[nodiscard]] DSparseTensor abs() const { return with_values(values().abs()); }
  [[nodiscard]] DSparseTensor sqrt() const { return with_values(values().sqrt()); }
  [[nodiscard]] DSparseTensor square() const { return with_values(values().square()); }
  [[nodiscard]] DSparseTensor exp() const { return with_values(values().exp()); }
  [[nodiscard]] DSparseTensor log() const { return with_values(values().log()); }
  [[nodiscard]] DSparseTensor conj() const { return with_values(values().conj().resolve_conj()); }

  // ---- reductions over the stored values (collective; replicated results) --------------------
  [[nodiscard]] at::Tensor sum() const;
  /// Row sums (axis 1, A 1) or column sums (axis 0, A^T 1), as a distributed vector.
  [[nodiscard]] DVector sum(int axis) const;
  [[nodiscard]] at::Tensor mean() const { return sum() / static_cast<double>(std::max<std::int64_t>(global_nnz(), 1)); }
  [[nodiscard]] double max() const { return extreme(comm::Reduction::max); }
  [[nodiscard]] double min() const { return extreme(comm::Reduction::min); }
  /// "fro" (sqrt of the sum of |a_ij|^2), "1" (largest column abs-sum), "inf" (largest row abs-sum).
  [[nodiscard]] double norm(std::string_view ord = "fro") const;

  // ---- graphs, files, spectra, determinants, Newton (each defined in its own header) ----------
  /// Labels of the connected components of the symmetrised pattern (components.hpp). Collective.
  [[nodiscard]] Components connected_components() const;
  /// Writes `directory` (created if needed): one file per partition, then the metadata (save_load.hpp).
  void save(const std::string& directory) const;
  /// Reads a saved matrix at any world size onto `options.device` (save_load.hpp). Collective over `mesh`.
  static DSparseTensor load(const std::string& directory, const Mesh& mesh, const LoadOptions& options = {});
  /// k eigenpairs by LOBPCG with a sharded basis (eigsh.hpp). Collective.
  [[nodiscard]] EigshResult eigsh() const;
  [[nodiscard]] EigshResult eigsh(const EigshOptions& options) const;
  /// Newton-Krylov for A u + g(u) = 0 with g pointwise, or for a general residual (nonlinear.hpp).
  [[nodiscard]] NewtonResult nonlinear_solve(const PointwiseFunction& g, const PointwiseFunction& dg, const DVector& u0) const;
  [[nodiscard]] NewtonResult nonlinear_solve(const PointwiseFunction& g, const PointwiseFunction& dg, const DVector& u0,
                                             const NewtonOptions& options) const;
  [[nodiscard]] NewtonResult nonlinear_solve(const NonlinearResidual& residual, const DVector& u0,
                                             const NewtonOptions& options) const;
  /// log det A by stochastic Lanczos quadrature, distributed and differentiable (logdet.hpp).
  [[nodiscard]] at::Tensor logdet() const;
  [[nodiscard]] at::Tensor logdet(const LogdetOptions& options) const;
  /// Gathering fallbacks that do not scale: the whole matrix on every rank (gathered.hpp).
  [[nodiscard]] at::Tensor full_tensor() const;
  [[nodiscard]] double det() const;
  [[nodiscard]] at::Tensor svd(std::int64_t k = 6) const;
  [[nodiscard]] double condition_number() const;
  /// A^T and A^H with the same row partition; each entry travels to its column's owner (transpose.hpp).
  [[nodiscard]] DSparseTensor T() const;
  [[nodiscard]] DSparseTensor H() const;
  /// Aᴴ (Aᵀ for real values) as a distributed matrix: its rows partitioned as this matrix's
  /// columns and its columns as these rows. Collective (one assembly); differentiable in values().
  [[nodiscard]] DSparseTensor adjoint() const;
  [[nodiscard]] bool is_symmetric(double atol = 1e-8, double rtol = 1e-5) const;
  [[nodiscard]] bool is_hermitian(double atol = 1e-8, double rtol = 1e-5) const;
  /// The rows of x this rank's stored columns read from other ranks, in the halo's order
  /// (`halo().ghosts`), for an owned vector or (owned, k) block in the domain's partition: one
  /// halo exchange, collective. What a product with ghost rows of its own needs (a multigrid
  /// setup's sparse products).
  [[nodiscard]] at::Tensor ghosts_of(const at::Tensor& x) const;
  /// A X for a block X whose owned slice is (n_local, m): one halo exchange for the whole block,
  /// each stored entry read once for all m columns (LOBPCG's and the probes' products).
  [[nodiscard]] at::Tensor apply_block(const at::Tensor& x) const;

 private:
  DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, std::shared_ptr<const RowLayout> domain,
                detail::CooEntries t);

  /// A matrix from the parts a load at the saved world size read back (save_load.hpp): the saved local CSR
  /// and halo plan, with no assembly and no handshake.
  DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, std::shared_ptr<const RowLayout> domain,
                std::shared_ptr<const HaloPlan> plan, Csr local);

  friend struct detail::SolvePipeline;

  /// x = Aᵀ y or Aᴴ y on owned slices: the off-diagonal block's ghost contributions travel back
  /// while the diagonal block runs.
  void transpose_apply(const at::Tensor& y, at::Tensor& x, bool conjugate) const;
  /// apply and apply_update: y = A x (+ *update y), interior rows while the halo travels.
  std::complex<double> halo_product(const at::Tensor& x, at::Tensor& y, const at::Tensor& w, const double* update) const;
  /// The generic kernels' y = A x + beta y (x a vector or an owned block): the interior product
  /// while the halo travels, then the boundary rows' ghost columns added.
  void generic_product(const at::Tensor& x, at::Tensor& y, double beta) const;

  /// The diagonal / off-diagonal split of `local_` (structure once; values via refresh_blocks).
  /// One pass in stored order, no sort: the diagonal block is each row's entries with a column
  /// below n_owned (a load maps a saved CSR back through here, so this is most of its cost
  /// besides reading, and a chain of torch passes would cost several times as much).
  void split_blocks();
  void refresh_blocks();
  /// Makes the copies of the values the products keep (diagonal runs, the generic kernels' split)
  /// again when the values' version counter has moved since: an in-place change (an optimizer's
  /// step on values()) would otherwise leave them on the old values. One counter read per product.
  void follow_values() const;
  /// Moves the stored entries (values differentiably) to `device` after a host assembly; the
  /// native kernels' row lists stay on the host, unused there.
  void place_on(const at::Device& device);

  /// The values of `b`, after checking it has this matrix's structure (same halo plan: the
  /// results of value operations on one matrix, or the same assembly).
  [[nodiscard]] const at::Tensor& same_structure(const DSparseTensor& b, const char* op) const;

  /// Largest or smallest stored real value over all ranks; ranks without entries take part with
  /// the neutral element. A matrix without any stored entry is an error on every rank.
  [[nodiscard]] double extreme(comm::Reduction r) const;

  /// `x` must be in partition `l` (the range's or the domain's). The size test is local but the
  /// sizes are global, so every rank throws together; same_as is collective.
  void check_vector(const DVector& x, const char* op, const RowLayout& l) const;

  Mesh mesh_;
  std::shared_ptr<const RowLayout> layout_;  // range (rows)
  std::shared_ptr<const RowLayout> domain_;  // domain (columns); == layout_ for a square matrix
  std::int64_t m_ = 0, n_ = 0;
  std::shared_ptr<const HaloPlan> plan_;
  Csr local_;     // owned rows x (owned + ghost) columns, the differentiable values
  Csr product_csr_;  // local_ as the products read it (shared storage; values detached, contiguous)
  at::Tensor boundary_;  // local rows with ghost columns, ascending
  at::Tensor ghost_starts_;  // each boundary row's first ghost entry (ghost_starts)
  at::Tensor boundary_with_owned_;         // positions in boundary_ of the rows with owned columns too (mixed_rows)
  // Copies of the values the products keep (refresh_blocks; again at the next product after an
  // in-place change of the values: follow_values). `values_version_`: the values' version counter
  // when they were made.
  mutable detail::DiagonalRuns diagonal_runs_;  // interior rows of constant offsets
  mutable detail::GenericHaloCsr generic_;  // product_csr_ split for ATen, when the values take the generic kernels
  mutable std::int64_t values_version_ = 0;
  mutable detail::HaloScratch scratch_;
  mutable detail::SolveCaches solve_caches_;
};

// ---- DSparseTensor's members ----------------------------------------------------------------------
// Header-only: defined here, inline. Compiled (the CMake target's default): defined once in the
// library einshard_compiled (src/sparse.cpp), so a translation unit that calls them neither generates
// the Krylov methods and preconditioners nor their autograd nodes. See config.hpp.
#if EINSHARD_DEFINE_SPARSE



EINSHARD_INLINE std::int64_t DSparseTensor::global_nnz() const {
  return comm::all_reduce_value(nnz(), comm::Reduction::sum, layout_->comm());
}

EINSHARD_INLINE std::int64_t DSparseTensor::diagonal_run_rows() const {
  std::int64_t rows = 0;
  if (diagonal_runs_.active())
    for (const auto& r : diagonal_runs_.runs) rows += r.end - r.begin;
  return rows;
}

EINSHARD_INLINE std::int64_t DSparseTensor::held_bytes() const {
  detail::HeldBytes held;
  for (const auto* c : {&local_, &product_csr_}) {
    held.add(c->rowptr);
    held.add(c->col);
    held.add(c->values);
  }
  held.add(diagonal_runs_.offsets);
  held.add(diagonal_runs_.runs);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&boundary_, &ghost_starts_, &boundary_with_owned_,
                                                                     &diagonal_runs_.values, &generic_.interior,
                                                                     &generic_.boundary, &generic_.rows})
    held.add(*t);
  if (plan_) plan_->count_bytes(held);
  scratch_.count_bytes(held);
  layout_->count_bytes(held);
  if (domain_ != layout_) domain_->count_bytes(held);
  return held.bytes();
}

EINSHARD_INLINE DVector DSparseTensor::scatter(const at::Tensor& global) const {
  if ((global.dim() != 1 && global.dim() != 2) || (global.size(0) != m_ && global.size(0) != n_))
    throw Error("DSparseTensor::scatter: expected a global vector of length " + std::to_string(m_) +
                (m_ == n_ ? std::string() : " (range) or " + std::to_string(n_) + " (domain)") +
                " or a block (length, k), got shape " + std::string(c10::str(global.sizes())));
  const auto& l = global.size(0) == m_ ? layout_ : domain_;
  return {l, l->scatter(global)};
}

EINSHARD_INLINE DVector DSparseTensor::matvec(const DVector& x) const {
  check_vector(x, "matvec", *domain_);
  if (at::GradMode::is_enabled() && (x.local().requires_grad() || local_.values.requires_grad())) {
    const auto with_ghosts = comm::apply_op(x.local(), c10::make_intrusive<detail::HaloOp>(scratch_.exchange()));
    return {layout_, detail::csr_matvec(local_, local_.values, with_ghosts)};
  }
  const auto xl = x.local().to(dtype()).contiguous();
  auto y = at::empty({layout_->local_size()}, xl.options());
  apply(xl, y, {});
  return {layout_, y};
}

EINSHARD_INLINE DVector DSparseTensor::rmatvec(const DVector& y) const {
  check_vector(y, "rmatvec", *layout_);
  if (at::GradMode::is_enabled() && (y.local().requires_grad() || local_.values.requires_grad())) {
    const auto full = detail::csr_rmatvec(local_, local_.values, y.local());
    return {domain_, comm::apply_op(full, c10::make_intrusive<detail::HaloOp>(scratch_.exchange(), /*reverse=*/true))};
  }
  const auto yl = y.local().to(dtype()).contiguous();
  auto w = at::empty({domain_->local_size()}, yl.options());
  transpose_apply(yl, w, /*conjugate=*/false);
  return {domain_, w};
}

EINSHARD_INLINE void DSparseTensor::generic_product(const at::Tensor& x, at::Tensor& y, double beta) const {
  const at::NoGradGuard no_grad;
  auto& ghosts = scratch_.ghosts(x);
  scratch_.exchange()->exchange_overlapped(x, ghosts, [&] { detail::generic_product_into(generic_.interior, x, y, beta); });
  if (generic_.rows.numel() == 0) return;
  const auto& g = generic_.boundary;
  y.index_add_(0, generic_.rows, x.dim() == 1 ? at::mv(g, ghosts) : at::mm(g, ghosts));
}

EINSHARD_INLINE std::vector<double> DSparseTensor::apply_block(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const {
  follow_values();
  if (generic_.defined()) {
    generic_product(x, y, 0.0);
    return w.defined() ? detail::to_host_real({detail::column_dots(w, y)}) : std::vector<double>{};
  }
  const auto k = x.size(1);
  auto& ghosts = scratch_.ghosts(x);
  std::vector<double> dots(w.defined() ? static_cast<std::size_t>(k) : 0, 0.0);
  const auto owned = domain_->local_size();
  scratch_.exchange()->start(x, ghosts);
  detail::spmm_halo(product_csr_, boundary_, owned, x, ghosts, y, /*boundary_phase=*/false, w, dots.data());
  scratch_.exchange()->finish_receives();
  if (boundary_.numel() > 0)
    detail::spmm_halo(product_csr_, boundary_, owned, x, ghosts, y, /*boundary_phase=*/true, w, dots.data());
  scratch_.exchange()->finish();
  return dots;
}

EINSHARD_INLINE void DSparseTensor::apply_adjoint(const at::Tensor& y, at::Tensor& x) const { transpose_apply(y, x, /*conjugate=*/true); }

EINSHARD_INLINE std::complex<double> DSparseTensor::apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const {
  return halo_product(x, y, w, nullptr);
}

EINSHARD_INLINE double DSparseTensor::apply_update(const at::Tensor& x, at::Tensor& y, double beta,
                                                   at::Tensor& /*scratch*/) const {
  return halo_product(x, y, {}, &beta).real();
}

EINSHARD_INLINE std::complex<double> DSparseTensor::halo_product(const at::Tensor& x, at::Tensor& y, const at::Tensor& w,
                                                                const double* update) const {
  follow_values();
  if (generic_.defined()) {
    generic_product(x, y, update != nullptr ? *update : 0.0);
    return detail::generic_product_dot(y, w, update != nullptr);
  }
  auto& ghosts = scratch_.ghosts(x);
  const auto owned = domain_->local_size();
  scratch_.exchange()->start(x, ghosts);
  auto dot = detail::spmv_halo(product_csr_, boundary_, ghost_starts_, owned, x, ghosts, y, w, /*boundary_phase=*/false,
                               update, &diagonal_runs_);
  scratch_.exchange()->finish_receives();
  if (boundary_.numel() > 0)
    dot += detail::spmv_halo(product_csr_, boundary_, ghost_starts_, owned, x, ghosts, y, w, /*boundary_phase=*/true, update);
  scratch_.exchange()->finish();
  return dot;
}





EINSHARD_INLINE DSparseTensor DSparseTensor::with_values(at::Tensor values) const {
  if (values.dim() != 1 || values.numel() != nnz())
    throw Error("DSparseTensor::with_values: expected " + std::to_string(nnz()) + " values, got shape " +
                std::string(c10::str(values.sizes())));
  DSparseTensor out = *this;
  out.local_.values = std::move(values);
  out.refresh_blocks();
  return out;
}

EINSHARD_INLINE at::Tensor DSparseTensor::sum() const {
  return comm::apply_op(values().sum(), c10::make_intrusive<comm::AllReduceOp>(layout_->comm()));
}

EINSHARD_INLINE DVector DSparseTensor::sum(int axis) const {
  const auto ones = [&](const std::shared_ptr<const RowLayout>& l) {
    return DVector(l, at::ones({l->local_size()}, local_.values.options().requires_grad(false)));
  };
  if (axis == 1 || axis == -1) return matvec(ones(domain_));
  if (axis == 0 || axis == -2) return rmatvec(ones(layout_));
  throw Error("DSparseTensor::sum: axis must be 0, 1, -1 or -2, got " + std::to_string(axis));
}

EINSHARD_INLINE double DSparseTensor::norm(std::string_view ord) const {
  const auto a = values().detach().abs();
  if (ord == "fro") {
    const double sq = a.numel() ? a.to(at::kDouble).square().sum().item<double>() : 0.0;
    return std::sqrt(comm::all_reduce_value(sq, comm::Reduction::sum, layout_->comm()));
  }
  if (ord != "1" && ord != "inf")
    throw Error("DSparseTensor::norm: ord must be \"fro\", \"1\" or \"inf\", got \"" + std::string(ord) + "\"");
  const auto sums = with_values(a).sum(ord == "1" ? 0 : 1).local();
  const double m = sums.numel() ? sums.max().item<double>() : 0.0;
  return comm::all_reduce_value(m, comm::Reduction::max, layout_->comm());
}

EINSHARD_INLINE at::Tensor DSparseTensor::ghosts_of(const at::Tensor& x) const {
  return scratch_.exchange()->ghosts_of(x.contiguous());
}

EINSHARD_INLINE at::Tensor DSparseTensor::apply_block(const at::Tensor& x) const {
  // x is partitioned like the domain (the columns), Y like the range: they differ when rectangular.
  if (x.dim() != 2 || x.size(0) != domain_->local_size())
    throw Error("DSparseTensor::apply_block: expected an owned block (" + std::to_string(domain_->local_size()) +
                ", m), got shape " + std::string(c10::str(x.sizes())));
  const auto xc = x.detach().to(dtype()).contiguous();
  auto y = at::empty({layout_->local_size(), xc.size(1)}, xc.options());
  apply_block(xc, y, {});
  return y;
}

EINSHARD_INLINE DSparseTensor::DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, std::shared_ptr<const RowLayout> domain,
              detail::CooEntries t)
    : mesh_(std::move(mesh)), layout_(std::move(layout)), domain_(std::move(domain)),
      m_(layout_->global_size()), n_(domain_->global_size()) {
  // Each entry's column to a local one in host passes: an owned column to its position, a ghost
  // to its slot once the plan has ordered the ghosts; no whole-tensor masks over every entry.
  const auto n_owned = domain_->local_size();
  const auto cols = t.cols.to(at::kCPU, at::kLong).contiguous();
  const auto* c = cols.data_ptr<std::int64_t>();
  const auto n = cols.numel();
  auto local_col = at::empty({n}, at::kLong);
  auto* lc = local_col.data_ptr<std::int64_t>();
  domain_->positions({c, static_cast<std::size_t>(n)}, lc);
  std::vector<std::int64_t> ghost_ids;
  for (std::int64_t k = 0; k < n; ++k)
    if (lc[k] < 0) ghost_ids.push_back(c[k]);
  std::sort(ghost_ids.begin(), ghost_ids.end());
  ghost_ids.erase(std::unique(ghost_ids.begin(), ghost_ids.end()), ghost_ids.end());
  plan_ = HaloPlan::build(domain_, detail::to_tensor(std::move(ghost_ids)));
  scratch_ = detail::HaloScratch(plan_);
  // Global ghost index -> ghost slot (the plan orders ghosts by owner, then index).
  const auto [sorted_t, slot_t] = plan_->ghosts.to(at::kLong).sort();
  const auto* sorted_ghosts = sorted_t.data_ptr<std::int64_t>();
  const auto* slot_of_sorted = slot_t.data_ptr<std::int64_t>();
  const auto ghost_count = sorted_t.numel();
  for (std::int64_t k = 0; k < n; ++k)
    if (lc[k] < 0)
      lc[k] = slot_of_sorted[std::lower_bound(sorted_ghosts, sorted_ghosts + ghost_count, c[k]) - sorted_ghosts] +
              n_owned;
  local_ = detail::coo_to_csr(t.values, layout_->local_index(t.rows), local_col, layout_->local_size(),
                              plan_->local_size());
  split_blocks();
}

EINSHARD_INLINE DSparseTensor::DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, std::shared_ptr<const RowLayout> domain,
              std::shared_ptr<const HaloPlan> plan, Csr local)
    : mesh_(std::move(mesh)), layout_(std::move(layout)), domain_(std::move(domain)),
      m_(layout_->global_size()), n_(domain_->global_size()), plan_(std::move(plan)), local_(std::move(local)),
      scratch_(plan_) {
  split_blocks();
}




EINSHARD_INLINE void DSparseTensor::transpose_apply(const at::Tensor& y, at::Tensor& x, bool conjugate) const {
  follow_values();
  const auto owned = domain_->local_size();
  if (generic_.defined()) {
    // The ghost columns' part first, sent back while the owned columns' part is formed; Aᴴ y is
    // conj(Aᵀ conj(y)), which needs no conjugated copy of the matrix.
    const at::NoGradGuard no_grad;
    const bool conj = conjugate && product_csr_.values.is_complex();
    const auto yc = conj && y.is_complex() ? y.conj().resolve_conj() : y;
    const auto ghosts = generic_.rows.numel() > 0
                            ? at::mv(generic_.boundary.t(), yc.index_select(0, generic_.rows))
                            : at::zeros({plan_->ghost_count()}, y.options());
    scratch_.exchange()->reverse_overlapped(ghosts, x, [&] { x.copy_(at::mv(generic_.interior.t(), yc)); });
    if (conj) x.conj_physical_();
    return;
  }
  auto& ghosts = scratch_.ghosts(y);
  detail::spmv_transpose_halo(product_csr_, boundary_, ghost_starts_, boundary_with_owned_, owned, y, x, ghosts, /*ghost_phase=*/true, conjugate);
  scratch_.exchange()->start_reverse(ghosts);
  detail::spmv_transpose_halo(product_csr_, boundary_, ghost_starts_, boundary_with_owned_, owned, y, x, ghosts, /*ghost_phase=*/false, conjugate);
  scratch_.exchange()->finish_reverse(x);
}

EINSHARD_INLINE void DSparseTensor::split_blocks() {
  boundary_ = detail::boundary_rows(local_, domain_->local_size());
  ghost_starts_ = detail::ghost_starts(local_, boundary_, domain_->local_size());
  boundary_with_owned_ = detail::mixed_rows(local_, boundary_, ghost_starts_);
  diagonal_runs_ = detail::find_diagonal_runs(local_.rowptr, local_.col, local_.rows, boundary_);
  product_csr_ = Csr{local_.rows, local_.cols, local_.rowptr, local_.col, {}};
  refresh_blocks();  // first: compact_rowptr counts the entries by their values
  product_csr_ = detail::compact_rowptr(std::move(product_csr_));
}

EINSHARD_INLINE void DSparseTensor::place_on(const at::Device& device) {
  local_.values = local_.values.to(device);
  local_.rowptr = local_.rowptr.to(device);
  local_.col = local_.col.to(device);
  product_csr_.rowptr = product_csr_.rowptr.to(device);
  product_csr_.col = product_csr_.col.to(device);
  refresh_blocks();
}

EINSHARD_INLINE void DSparseTensor::refresh_blocks() {
  product_csr_.values = local_.values.detach().contiguous();
  values_version_ = -1;
  follow_values();
}

EINSHARD_INLINE void DSparseTensor::follow_values() const {
  const auto& values = product_csr_.values;
  const auto version = values.is_inference() ? 0 : values._version();  // inference tensors keep none
  if (version == values_version_) return;
  detail::fill_diagonal_runs(diagonal_runs_, product_csr_.rowptr, values);
  generic_ = detail::uses_generic(values) ? detail::generic_halo_csr(product_csr_, values, domain_->local_size())
                                          : detail::GenericHaloCsr{};
  values_version_ = version;
}

EINSHARD_INLINE const at::Tensor& DSparseTensor::same_structure(const DSparseTensor& b, const char* op) const {
  if (plan_ != b.plan_ || !at::equal(local_.col, b.local_.col) || !at::equal(local_.rowptr, b.local_.rowptr))
    throw Error(std::string("DSparseTensor ") + op +
                ": the matrices have different structures (partition or stored pattern)");
  return b.values();
}

EINSHARD_INLINE double DSparseTensor::extreme(comm::Reduction r) const {
  if (local_.values.is_complex()) throw Error("DSparseTensor::max/min: complex values are not ordered");
  const bool is_max = r == comm::Reduction::max;
  double v = nnz() == 0 ? (is_max ? -HUGE_VAL : HUGE_VAL)
                        : (is_max ? values().max() : values().min()).item<double>();
  if (global_nnz() == 0) throw Error("DSparseTensor::max/min: the matrix stores no entries");
  return comm::all_reduce_value(v, r, layout_->comm());
}

EINSHARD_INLINE void DSparseTensor::check_vector(const DVector& x, const char* op, const RowLayout& l) const {
  const char* side = m_ == n_ ? "" : &l == domain_.get() ? "domain" : "range";
  detail::check_partition(x, l, std::string("DSparseTensor::") + op, "matrix's", side,
                          "make it with scatter(), vector(), zeros() or domain_zeros() of this matrix");
}







#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
