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
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/comm/autograd.hpp"
#include "einshard/comm/ops.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/preconditioner/amg.hpp"
#include "einshard/sparse/matrix/block_kernels.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/csr_autograd.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/halo.hpp"
#include "einshard/sparse/krylov/block_cg.hpp"
#include "einshard/sparse/krylov/lsmr.hpp"
#include "einshard/sparse/krylov/lsqr.hpp"
#include "einshard/sparse/krylov/methods.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/matrix/partition.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#if EINSHARD_DEFINE_SPARSE  // the autograd record of a solve, used by the members defined below
#include "einshard/sparse/krylov/solve_autograd.hpp"
#endif
#include "einshard/sparse/krylov/options.hpp"
#include "einshard/sparse/matrix/sparse_tensor.hpp"

namespace einshard::sparse {

class BatchSparseTensor;
class DBatchSparseTensor;
DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh);

// Results and options of the operations defined in graph.hpp, io.hpp, eigsh.hpp, logdet.hpp and
// nonlinear.hpp (included by <einshard/sparse.hpp>).
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

namespace detail {

struct AdjointSolver;  // solve_autograd.hpp: the backward of a solve

/// The halo pair. Forward: x (owned) -> x with ghosts appended; backward: the ghosts' gradients go
/// back to their owners and are added (the reverse exchange), so d/dx of a distributed product is
/// exact. `reverse` swaps the two (A^T's product: ghost contributions, the tail of a local-length
/// vector, to their owners).
struct HaloOp final : comm::CommOp {
  std::shared_ptr<HaloExchange> exchange;
  bool reverse;
  explicit HaloOp(std::shared_ptr<HaloExchange> e, bool reverse_pair = false)
      : exchange(std::move(e)), reverse(reverse_pair) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override {
    return reverse ? accumulate(x) : with_ghosts(x);
  }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
    return reverse ? with_ghosts(g) : accumulate(g);
  }

 private:
  [[nodiscard]] at::Tensor with_ghosts(const at::Tensor& x) const {
    const auto owned = x.contiguous();
    return at::cat({owned, exchange->ghosts_of(owned)});
  }
  [[nodiscard]] at::Tensor accumulate(const at::Tensor& full) const {
    const auto n = exchange->plan().owned();
    auto owned = full.narrow(0, 0, n).clone();
    exchange->start_reverse(full.narrow(0, n, full.numel() - n).contiguous());
    exchange->finish_reverse(owned);
    return owned;
  }
};

/// Rows to owners, for assembly: entries a rank holds for rows it does not own travel to the owner.
struct Triples {
  at::Tensor values, rows, cols;
};

inline Triples send_to_owners(const RowLayout& layout, Triples t) {
  const auto mine = layout.is_owned(t.rows);
  int foreign = mine.all().item<bool>() ? 0 : 1;
  comm::check(MPI_Allreduce(MPI_IN_PLACE, &foreign, 1, MPI_INT, MPI_MAX, layout.comm()), "MPI_Allreduce");
  if (foreign == 0) return t;
  const auto away = (~mine).nonzero().flatten();
  const auto rows = to_vector(t.rows.index_select(0, away));
  const auto cols = to_vector(t.cols.index_select(0, away));
  const auto vals = t.values.detach().index_select(0, away).contiguous();
  const auto owner = layout.owners(rows);
  const int p = layout.size();
  const auto esize = static_cast<std::size_t>(vals.element_size());
  std::vector<std::vector<std::int64_t>> idx(static_cast<std::size_t>(p));
  std::vector<std::vector<char>> bytes(static_cast<std::size_t>(p));
  const auto* raw = static_cast<const char*>(vals.data_ptr());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto& d = idx[static_cast<std::size_t>(owner[i])];
    d.push_back(rows[i]);
    d.push_back(cols[i]);
    auto& b = bytes[static_cast<std::size_t>(owner[i])];
    b.insert(b.end(), raw + i * esize, raw + (i + 1) * esize);
  }
  const auto got_idx = comm::alltoallv(idx, layout.comm());
  const auto got_bytes = comm::alltoallv(bytes, layout.comm());
  std::vector<std::int64_t> r, c;
  std::vector<char> v;
  for (int s = 0; s < p; ++s) {
    const auto& gi = got_idx[static_cast<std::size_t>(s)];
    for (std::size_t k = 0; k < gi.size(); k += 2) {
      r.push_back(gi[k]);
      c.push_back(gi[k + 1]);
    }
    const auto& gb = got_bytes[static_cast<std::size_t>(s)];
    v.insert(v.end(), gb.begin(), gb.end());
  }
  const auto kept = mine.nonzero().flatten();
  const auto n = static_cast<std::int64_t>(r.size());
  auto received = at::empty({n}, t.values.options().requires_grad(false));
  if (n > 0) std::memcpy(received.data_ptr(), v.data(), v.size());
  return {at::cat({t.values.index_select(0, kept), received}),
          at::cat({t.rows.index_select(0, kept), at::tensor(r, at::kLong).view({n})}),
          at::cat({t.cols.index_select(0, kept), at::tensor(c, at::kLong).view({n})})};
}

/// The halo exchange of one DSparseTensor object and its ghost buffer: the scratch its `const`
/// products write into. A copy gets its own (same plan, fresh buffers), so copies (`A + 1`,
/// `with_values`) never share buffers; one object is not to be used from two threads at once.
class HaloScratch {
 public:
  HaloScratch() = default;
  explicit HaloScratch(std::shared_ptr<const HaloPlan> plan)
      : plan_(std::move(plan)), exchange_(plan_ ? std::make_shared<HaloExchange>(plan_) : nullptr) {}
  HaloScratch(const HaloScratch& o) : HaloScratch(o.plan_) {}
  HaloScratch& operator=(const HaloScratch& o) {
    if (this != &o) *this = HaloScratch(o.plan_);
    return *this;
  }
  HaloScratch(HaloScratch&&) noexcept = default;
  HaloScratch& operator=(HaloScratch&&) noexcept = default;
  ~HaloScratch() = default;

  [[nodiscard]] const std::shared_ptr<HaloExchange>& exchange() const { return exchange_; }
  /// The ghost buffer, (re)made for `like`'s dtype and columns: (ghosts) for a vector, (ghosts, k)
  /// for an (owned, k) block.
  at::Tensor& ghosts(const at::Tensor& like) {
    const auto k = like.dim() == 2 ? like.size(1) : std::int64_t{-1};
    const auto held = ghosts_.defined() && ghosts_.dim() == 2 ? ghosts_.size(1) : std::int64_t{-1};
    if (!ghosts_.defined() || ghosts_.scalar_type() != like.scalar_type() || held != k)
      ghosts_ = k < 0 ? at::empty({plan_->ghost_count()}, like.options().requires_grad(false))
                      : at::empty({plan_->ghost_count(), k}, like.options().requires_grad(false));
    return ghosts_;
  }

 private:
  std::shared_ptr<const HaloPlan> plan_;
  std::shared_ptr<HaloExchange> exchange_;
  at::Tensor ghosts_;
};

}  // namespace detail

/// Thread safety: `const` methods change no value but write into the object's halo scratch, so one
/// object (not its copies, which are independent) must not be used by two threads at once.
class DSparseTensor final : public detail::Operator {
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
  /// Solves A x = b (see `SolveOptions` for the stop test and defaults). Collective.
  ///
  /// Several right-hand sides: `b` an (n_local, k) block (`scatter` of an (N, k) tensor) gives an
  /// (n_local, k) x and `info.columns`. Every method runs them as k coupled recurrences (one halo
  /// exchange per product and one all-reduce per reduction step for all k, columns converging
  /// independently); a recorded (differentiable) block solve has one block adjoint solve.
  [[nodiscard]] SolveResult solve(const DVector& b, const SolveOptions& options = {}) const;

  /// Aᴴ (Aᵀ for real values) as a distributed matrix: its rows partitioned as this matrix's
  /// columns and its columns as these rows. Collective (one assembly); differentiable in values().
  [[nodiscard]] DSparseTensor adjoint() const;

  // ---- least squares (any shape) ---------------------------------------------------------------
  /// min ‖A x − b‖² + damp² ‖x‖² by LSQR (SciPy's `lsqr`); b in the range, x in the domain.
  [[nodiscard]] LeastSquaresResult lsqr(const DVector& b, const LeastSquaresOptions& options = {}) const;
  /// The same problem by LSMR (SciPy's `lsmr`): ‖Aᴴ r‖ decreases monotonically.
  [[nodiscard]] LeastSquaresResult lsmr(const DVector& b, const LeastSquaresOptions& options = {}) const;

  // ---- values --------------------------------------------------------------------------------
  /// The same matrix structure with other stored values (same length and order as `values()`).
  [[nodiscard]] DSparseTensor with_values(at::Tensor values) const;
  [[nodiscard]] DSparseTensor to(at::ScalarType dtype) const { return with_values(local_.values.to(dtype)); }

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
  [[nodiscard]] double max() const { return extreme(MPI_MAX); }
  [[nodiscard]] double min() const { return extreme(MPI_MIN); }
  /// "fro" (sqrt of the sum of |a_ij|^2), "1" (largest column abs-sum), "inf" (largest row abs-sum).
  [[nodiscard]] double norm(std::string_view ord = "fro") const;

  // ---- graphs, files, spectra, determinants, Newton (each defined in its own header) ----------
  /// Labels of the connected components of the symmetrised pattern (graph.hpp). Collective.
  [[nodiscard]] Components connected_components() const;
  /// Writes `directory` (created if needed): one file per partition, then the metadata (io.hpp).
  void save(const std::string& directory) const;
  /// Reads a saved matrix at any world size (io.hpp). Collective over `mesh`.
  static DSparseTensor load(const std::string& directory, const Mesh& mesh);
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
  /// A^T and A^H with the same row partition; each entry travels to its column's owner (queries.hpp).
  [[nodiscard]] DSparseTensor T() const;
  [[nodiscard]] DSparseTensor H() const;
  [[nodiscard]] bool is_symmetric(double atol = 1e-8, double rtol = 1e-5) const;
  [[nodiscard]] bool is_hermitian(double atol = 1e-8, double rtol = 1e-5) const;
  /// A X for a block X whose owned slice is (n_local, m): one halo exchange for the whole block,
  /// each stored entry read once for all m columns (LOBPCG's and the probes' products).
  [[nodiscard]] at::Tensor apply_block(const at::Tensor& x) const;

 private:
  DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, std::shared_ptr<const RowLayout> domain,
                detail::Triples t);

  /// A matrix from the parts a load at the saved world size read back (io.hpp): the saved local CSR
  /// and halo plan, with no assembly and no handshake.
  DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, std::shared_ptr<const RowLayout> domain,
                std::shared_ptr<const HaloPlan> plan, Csr local);

  /// `x` (solved already) recorded for autograd as the solution of A x = b, whatever produced it
  /// (a Krylov solve, or Newton at its root with b = -g(x)): the backward solves λ by
  /// `adjoint_solve` (λ = A⁻ᴴ ∂L/∂x, or the Jacobian's), then ∂L/∂b = λ and
  /// ∂L/∂a_ij = −λ_i conj(x_j) on the stored pattern. Collective in the backward.
  [[nodiscard]] at::Tensor record_solution(const at::Tensor& b, const at::Tensor& x,
                                           std::function<at::Tensor(const at::Tensor&)> adjoint_solve) const;
  /// `x` (in the domain) recorded as argmin ‖A x − b‖² + damp² ‖x‖²: the backward solves the normal
  /// equations (AᴴA + damp² I) λ = ∂L/∂x to `rtol` (detail::least_squares_adjoint).
  [[nodiscard]] at::Tensor record_least_squares(const at::Tensor& b, const at::Tensor& x, double damp, double rtol,
                                                const std::string& what) const;
  /// The part of a solve's autograd record both kinds share: the pattern and the halo of x.
  [[nodiscard]] c10::intrusive_ptr<detail::AdjointSolver> adjoint_record() const;

  /// x = Aᵀ y or Aᴴ y on owned slices: the off-diagonal block's ghost contributions travel back
  /// while the diagonal block runs.
  void transpose_apply(const at::Tensor& y, at::Tensor& x, bool conjugate) const;
  /// apply and apply_update: y = A x (+ *update y), interior rows while the halo travels.
  std::complex<double> halo_product(const at::Tensor& x, at::Tensor& y, const at::Tensor& w, const double* update) const;

  /// The diagonal / off-diagonal split of `local_` (structure once; values via refresh_blocks).
  /// One pass in stored order, no sort: the diagonal block is each row's entries with a column
  /// below n_owned (a load maps a saved CSR back through here, so this is most of its cost
  /// besides reading; torch's nonzero/cumsum/index_select passes took 5x as long).
  void split_blocks();
  void refresh_blocks();


  /// The values of `b`, after checking it has this matrix's structure (same halo plan: the
  /// results of value operations on one matrix, or the same assembly).
  [[nodiscard]] const at::Tensor& same_structure(const DSparseTensor& b, const char* op) const;

  /// Largest or smallest stored real value over all ranks; ranks without entries take part with
  /// the neutral element. A matrix without any stored entry is an error on every rank.
  [[nodiscard]] double extreme(MPI_Op op) const;

  /// `x` must be in partition `l` (the range's or the domain's). The size test is local but the
  /// sizes are global, so every rank throws together; same_as is collective.
  void check_vector(const DVector& x, const char* op, const RowLayout& l) const;

  /// `solve` of an (n_local, k) block (see there).

  /// A built-in preconditioner of `options` for this matrix. AMG's hierarchy spans the ranks, so
  /// it needs the global numbering of the halo columns, which only the distributed matrix has.
  [[nodiscard]] std::unique_ptr<detail::PreconditionerOp> make_preconditioner(const SolveOptions& options) const;

  /// A solve's preconditioner: the custom one of `options`, or the built-in kind (reused from the
  /// previous solve when its kind, options and the values are the same), or null for none.
  struct PreparedPreconditioner {
    std::shared_ptr<const detail::PreconditionerOp> op;
    bool reused = false;
    double seconds = 0.0;
    /// The setup's part of a solve's info.
    void describe(SolveInfo& info) const {
      info.setup_seconds = seconds;
      info.preconditioner_reused = reused;
      if (op) std::tie(info.levels, info.operator_complexity) = op->hierarchy();
    }
  };
  [[nodiscard]] PreparedPreconditioner prepare_preconditioner(const SolveOptions& options) const;

  /// The solve without autograd, and the preconditioner it used (null: none).
  [[nodiscard]] std::pair<SolveResult, std::shared_ptr<const detail::PreconditionerOp>> solve_detached(
      const DVector& b, const SolveOptions& options) const;

  /// λ = A⁻ᴴ g for the backward of `solve`: CG and MINRES assume A = Aᴴ, so they reuse A and the
  /// forward's preconditioner; the other methods solve with the assembled Aᴴ (kept while the
  /// values are unchanged) and its own preconditioner of the same kind (a custom one is for A, so
  /// it is dropped). A stop without convergence is an Error on every rank.
  [[nodiscard]] at::Tensor adjoint_solve(const at::Tensor& g, const std::shared_ptr<const detail::PreconditionerOp>& m,
                                         const SolveOptions& options) const;

  /// The assembled Aᴴ of the last backward, shared by copies and rebuilt when the values change
  /// (the same key as the preconditioner cache: the values' storage and version).
  class AdjointCache {
   public:
    template <class Make>
    const DSparseTensor& get(const at::Tensor& values, MPI_Comm comm, Make&& make) {
      std::lock_guard lock(mutex_);
      int reuse = matrix_ && impl_ == values.unsafeGetTensorImpl() && version_ == values._version() ? 1 : 0;
      comm::check(MPI_Allreduce(MPI_IN_PLACE, &reuse, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
      if (reuse == 0) {
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

  template <class Method>
  [[nodiscard]] LeastSquaresResult least_squares(const DVector& b, const LeastSquaresOptions& options,
                                                 const char* name, Method method) const {
    const auto op = std::string(name);
    check_vector(b, op.c_str(), *layout_);
    if (options.x0) check_vector(*options.x0, (op + " (x0)").c_str(), *domain_);
    detail::check_least_squares_options(options, "DSparseTensor::" + op);
    // Whether to record is decided together: the backward is collective.
    int record = at::GradMode::is_enabled() && (b.local().requires_grad() || local_.values.requires_grad()) ? 1 : 0;
    comm::check(MPI_Allreduce(MPI_IN_PLACE, &record, 1, MPI_INT, MPI_MAX, layout_->comm()), "MPI_Allreduce");
    auto r = method(*this, b.like(b.local().detach().to(dtype()).contiguous()), options);
    if (record != 0)
      r.x = DVector(domain_, record_least_squares(b.local().to(dtype()), r.x.local(), options.damp,
                                                  std::max(std::min(options.atol, options.btol), 1e-12),
                                                  "DSparseTensor::" + op));
    return r;
  }

  /// Methods for A x = b need a square matrix whose domain is partitioned as its range.
  void check_square(const char* method) const;

  /// Global shape and dtype must be the same on every rank: a fault string, empty when they agree.
  static std::string agree_across_ranks(MPI_Comm comm, std::array<std::int64_t, 2> shape, at::ScalarType dtype);

  Mesh mesh_;
  std::shared_ptr<const RowLayout> layout_;  // range (rows)
  std::shared_ptr<const RowLayout> domain_;  // domain (columns); == layout_ for a square matrix
  std::int64_t m_ = 0, n_ = 0;
  std::shared_ptr<const HaloPlan> plan_;
  Csr local_;     // owned rows x (owned + ghost) columns, the differentiable values
  Csr hot_;       // local_ as the products read it (shared storage; values detached, contiguous)
  at::Tensor boundary_;  // local rows with ghost columns, ascending
  at::Tensor ghost_starts_;  // each boundary row's first ghost entry (ghost_starts)
  at::Tensor mixed_;         // positions in boundary_ of the rows with owned columns too (mixed_rows)
  mutable detail::HaloScratch scratch_;
  /// The last solve's preconditioner (empty in a copy: `with_values` copies).
  mutable detail::PreconditionerCache preconditioner_cache_;
  std::shared_ptr<AdjointCache> adjoint_cache_ = std::make_shared<AdjointCache>();
};

// ---- DSparseTensor's members ----------------------------------------------------------------------
// Header-only: defined here, inline. Compiled (the CMake target's default): defined once in the
// library einshard_compiled (src/sparse.cpp), so a translation unit that calls them neither generates
// the Krylov methods and preconditioners nor their autograd nodes. See config.hpp.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE DSparseTensor DSparseTensor::from_local(const at::Tensor& values, const at::Tensor& rows, const at::Tensor& cols,
                                std::array<std::int64_t, 2> shape, const Mesh& mesh,
                                const FromLocalOptions& options) {
  if (!mesh) throw Error("DSparseTensor::from_local: needs a mesh");
  const MPI_Comm comm = mesh.comm();
  std::string fault;
  // First: the checks below read the indices, which a tensor of another device (or the meta
  // device, which has no data) would fail on this rank alone, leaving the others in the collective.
  if (!values.device().is_cpu() || !rows.device().is_cpu() || !cols.device().is_cpu())
    fault = "DSparseTensor::from_local: values, rows and cols must be CPU tensors, got devices " +
            std::string(c10::str(values.device(), ", ", rows.device(), ", ", cols.device()));
  else if (values.dim() != 1 || rows.dim() != 1 || cols.dim() != 1 || values.numel() != rows.numel() ||
      values.numel() != cols.numel())
    fault = "DSparseTensor::from_local: values, rows and cols must be 1-D of one length, got " +
            std::string(c10::str(values.sizes(), ", ", rows.sizes(), ", ", cols.sizes()));
  else if (!at::isFloatingType(values.scalar_type()) && !at::isComplexType(values.scalar_type()))
    fault = std::string("DSparseTensor::from_local: values must be floating point or complex, got ") +
            c10::toString(values.scalar_type());
  else if (shape[0] < 0 || shape[1] < 0)
    fault = "DSparseTensor::from_local: expected a shape of sizes >= 0, got (" + std::to_string(shape[0]) +
            ", " + std::to_string(shape[1]) + ")";
  else if (rows.numel() > 0) {
    const auto range = [&](const at::Tensor& t, const char* what, std::int64_t n) {
      const auto lo = t.min().item<std::int64_t>(), hi = t.max().item<std::int64_t>();
      if (lo < 0 || hi >= n)
        fault = std::string("DSparseTensor::from_local: ") + what + " index " +
                std::to_string(lo < 0 ? lo : hi) + " is out of range [0, " + std::to_string(n) + ")";
    };
    range(rows, "row", shape[0]);
    if (fault.empty()) range(cols, "column", shape[1]);
  }
  // Collective on every rank, faulty or not, so the checks stay matched.
  const auto disagreement = agree_across_ranks(comm, shape, values.scalar_type());
  comm::raise_if_any(comm, fault.empty() ? disagreement : fault);

  auto layout = options.owned_rows ? std::make_shared<const RowLayout>(*options.owned_rows, shape[0], comm)
                                   : RowLayout::simple(shape[0], comm);
  auto domain = options.owned_cols ? std::make_shared<const RowLayout>(*options.owned_cols, shape[1], comm)
                : shape[0] == shape[1] ? layout
                                       : RowLayout::simple(shape[1], comm);
  auto t = detail::send_to_owners(*layout, {values, rows.to(at::kLong), cols.to(at::kLong)});
  return DSparseTensor(mesh, std::move(layout), std::move(domain), std::move(t));
}

EINSHARD_INLINE DSparseTensor DSparseTensor::partition(const SparseTensor& A, const Mesh& mesh, const PartitionOptions& options) {
  if (!mesh) throw Error("DSparseTensor::partition: needs a mesh");
  const MPI_Comm comm = mesh.comm();
  const auto n = A.rows();
  if (A.rows() != A.cols()) {
    if (options.method != PartitionMethod::simple)
      throw Error("DSparseTensor::partition: a rectangular matrix (" + std::to_string(A.rows()) + " x " +
                  std::to_string(A.cols()) + ") is partitioned in contiguous blocks; expected method simple");
    const auto [first, last] = simple_rows(n, comm);
    const auto keep = ((A.row_indices() >= first) & (A.row_indices() < last)).nonzero().flatten();
    return from_local(A.values().index_select(0, keep), A.row_indices().index_select(0, keep),
                      A.col_indices().index_select(0, keep), {n, A.cols()}, mesh);
  }
  std::string fault;
  at::Tensor ids;
  const int me = comm::rank_of(comm);
  if (me == 0) {
    try {
      ids = partition_ids(A.row_indices(), A.col_indices(), n, comm::size_of(comm), options).to(at::kLong).contiguous();
    } catch (const std::exception& e) {
      fault = e.what();
    }
  }
  comm::raise_if_any(comm, fault);
  if (me != 0) ids = at::empty({n}, at::kLong);
  comm::check(MPI_Bcast(ids.data_ptr(), comm::count(n), MPI_INT64_T, 0, comm), "MPI_Bcast");
  const auto owned = (ids == me).nonzero().flatten();
  const auto keep = (ids.index_select(0, A.row_indices()) == me).nonzero().flatten();
  return from_local(A.values().index_select(0, keep), A.row_indices().index_select(0, keep),
                    A.col_indices().index_select(0, keep), {n, A.cols()}, mesh, {.owned_rows = owned});
}

EINSHARD_INLINE std::int64_t DSparseTensor::global_nnz() const {
  std::int64_t n = nnz();
  comm::check(MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT64_T, MPI_SUM, layout_->comm()), "MPI_Allreduce");
  return n;
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

EINSHARD_INLINE std::vector<double> DSparseTensor::apply_block(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const {
  const auto k = x.size(1);
  auto& ghosts = scratch_.ghosts(x);
  std::vector<double> dots(w.defined() ? static_cast<std::size_t>(k) : 0, 0.0);
  const auto owned = domain_->local_size();
  scratch_.exchange()->start(x, ghosts);
  detail::spmm_halo(hot_, boundary_, owned, x, ghosts, y, /*boundary_phase=*/false, w, dots.data());
  scratch_.exchange()->finish_receives();
  if (boundary_.numel() > 0)
    detail::spmm_halo(hot_, boundary_, owned, x, ghosts, y, /*boundary_phase=*/true, w, dots.data());
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
  auto& ghosts = scratch_.ghosts(x);
  const auto owned = domain_->local_size();
  scratch_.exchange()->start(x, ghosts);
  auto dot = detail::spmv_halo(hot_, boundary_, ghost_starts_, owned, x, ghosts, y, w, /*boundary_phase=*/false, update);
  scratch_.exchange()->finish_receives();
  if (boundary_.numel() > 0)
    dot += detail::spmv_halo(hot_, boundary_, ghost_starts_, owned, x, ghosts, y, w, /*boundary_phase=*/true, update);
  scratch_.exchange()->finish();
  return dot;
}

EINSHARD_INLINE SolveResult DSparseTensor::solve(const DVector& b, const SolveOptions& options) const {
  const bool least_squares = detail::is_least_squares(options.method);
  if (!least_squares) check_square(to_string(options.method));
  check_vector(b, "solve", *layout_);
  if (b.local().dim() == 2) detail::check_block_x0(b, options, "DSparseTensor::solve");
  // Whether to record is decided together: the backward is collective.
  int record = at::GradMode::is_enabled() && (b.local().requires_grad() || local_.values.requires_grad()) ? 1 : 0;
  comm::check(MPI_Allreduce(MPI_IN_PLACE, &record, 1, MPI_INT, MPI_MAX, layout_->comm()), "MPI_Allreduce");
  if (record == 0) return solve_detached(b.like(b.local().detach().to(dtype())), options).first;
  const auto bl = b.local().to(dtype());
  auto [result, precond] = solve_detached(b.like(bl.detach()), options);
  // A rectangular (or differently partitioned) least-squares solve has no Aᴴ λ = g to solve.
  if (least_squares && (m_ != n_ || (domain_ != layout_ && !domain_->same_as(*layout_)))) {
    result.x = DVector(domain_, record_least_squares(bl, result.x.local(), 0.0, options.rtol > 0.0 ? options.rtol : 1e-8,
                                                     "DSparseTensor::solve"));
    return result;
  }
  // The adjoint's right-hand side is a gradient of any size: its stop test is relative only, to
  // the forward's relative accuracy max(rtol, atol / ‖b‖), so ∂L/∂x → c ∂L/∂x scales the gradient
  // by c however small c is (an absolute floor would return zero for a small enough gradient).
  auto adjoint_options = options;
  const double bnorm = result.info.rhs_norm;
  adjoint_options.rtol = std::max(options.rtol, bnorm > 0.0 ? options.atol / bnorm : 0.0);
  adjoint_options.atol = 0.0;
  result.x = DVector(layout_, record_solution(bl, result.x.local(), [self = *this, precond = precond, adjoint_options](
                                                                        const at::Tensor& g) {
                       return self.adjoint_solve(g, precond, adjoint_options);
                     }));
  return result;
}

EINSHARD_INLINE DSparseTensor DSparseTensor::adjoint() const {
  const auto [v, r, c] = detail::csr_to_coo(local_);
  const auto global_col = at::cat({domain_->owned(), plan_->ghosts}).index_select(0, c.to(at::kLong));
  const auto global_row = layout_->owned().index_select(0, r.to(at::kLong));
  FromLocalOptions o{.owned_rows = domain_->owned()};
  if (domain_ != layout_) o.owned_cols = layout_->owned();
  return from_local(local_.values.is_complex() ? local_.values.conj().resolve_conj() : local_.values, global_col,
                    global_row, {n_, m_}, mesh_, o);
}

EINSHARD_INLINE LeastSquaresResult DSparseTensor::lsqr(const DVector& b, const LeastSquaresOptions& options) const {
  return least_squares(b, options, "lsqr", detail::lsqr);
}

EINSHARD_INLINE LeastSquaresResult DSparseTensor::lsmr(const DVector& b, const LeastSquaresOptions& options) const {
  return least_squares(b, options, "lsmr", detail::lsmr);
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
    double sq = a.numel() ? a.to(at::kDouble).square().sum().item<double>() : 0.0;
    comm::check(MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, layout_->comm()), "MPI_Allreduce");
    return std::sqrt(sq);
  }
  if (ord != "1" && ord != "inf")
    throw Error("DSparseTensor::norm: ord must be \"fro\", \"1\" or \"inf\", got \"" + std::string(ord) + "\"");
  const auto sums = with_values(a).sum(ord == "1" ? 0 : 1).local();
  double m = sums.numel() ? sums.max().item<double>() : 0.0;
  comm::check(MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, layout_->comm()), "MPI_Allreduce");
  return m;
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
              detail::Triples t)
    : mesh_(std::move(mesh)), layout_(std::move(layout)), domain_(std::move(domain)),
      m_(layout_->global_size()), n_(domain_->global_size()) {
  const auto n_owned = domain_->local_size();
  const auto owned_col = domain_->is_owned(t.cols);
  const auto ghosts = std::get<0>(at::_unique(t.cols.masked_select(~owned_col), /*sorted=*/true));
  plan_ = HaloPlan::build(domain_, ghosts);
  scratch_ = detail::HaloScratch(plan_);
  // Global ghost index -> ghost slot (the plan orders ghosts by owner, then index).
  const auto [sorted_ghosts, slot_of_sorted] = plan_->ghosts.sort();
  auto local_col = at::empty_like(t.cols);
  local_col.masked_scatter_(owned_col, domain_->local_index(t.cols.masked_select(owned_col)));
  local_col.masked_scatter_(~owned_col, slot_of_sorted.index_select(
                                            0, at::searchsorted(sorted_ghosts, t.cols.masked_select(~owned_col))) +
                                            n_owned);
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

EINSHARD_INLINE c10::intrusive_ptr<detail::AdjointSolver> DSparseTensor::adjoint_record() const {
  auto adjoint = c10::make_intrusive<detail::AdjointSolver>();
  adjoint->pattern = local_;
  adjoint->with_ghosts = [exchange = scratch_.exchange()](const at::Tensor& v) {
    const auto owned = v.contiguous();
    return at::cat({owned, exchange->ghosts_of(owned)});
  };
  return adjoint;
}

EINSHARD_INLINE at::Tensor DSparseTensor::record_solution(const at::Tensor& b, const at::Tensor& x,
                                         std::function<at::Tensor(const at::Tensor&)> adjoint_solve) const {
  auto adjoint = adjoint_record();
  adjoint->solve = std::move(adjoint_solve);
  return detail::SolveFunction::apply(b, local_.values, x, adjoint);
}

EINSHARD_INLINE at::Tensor DSparseTensor::record_least_squares(const at::Tensor& b, const at::Tensor& x, double damp,
                                                              double rtol, const std::string& what) const {
  auto adjoint = adjoint_record();
  auto ax = at::empty_like(b, at::MemoryFormat::Contiguous).detach();
  if (x.dim() == 2)
    (void)apply_block(x.detach().contiguous(), ax, {});
  else
    (void)apply(x.detach().contiguous(), ax, {});
  adjoint->residual = b.detach() - ax;
  adjoint->least_squares = [self = *this, damp, rtol, what](const at::Tensor& g) {
    return detail::least_squares_adjoint(self, g, damp, rtol, what);
  };
  return detail::SolveFunction::apply(b, local_.values, x, adjoint);
}

EINSHARD_INLINE void DSparseTensor::transpose_apply(const at::Tensor& y, at::Tensor& x, bool conjugate) const {
  const auto owned = domain_->local_size();
  auto& ghosts = scratch_.ghosts(y);
  detail::spmv_transpose_halo(hot_, boundary_, ghost_starts_, mixed_, owned, y, x, ghosts, /*ghost_phase=*/true, conjugate);
  scratch_.exchange()->start_reverse(ghosts);
  detail::spmv_transpose_halo(hot_, boundary_, ghost_starts_, mixed_, owned, y, x, ghosts, /*ghost_phase=*/false, conjugate);
  scratch_.exchange()->finish_reverse(x);
}

EINSHARD_INLINE void DSparseTensor::split_blocks() {
  boundary_ = detail::boundary_rows(local_, domain_->local_size());
  ghost_starts_ = detail::ghost_starts(local_, boundary_, domain_->local_size());
  mixed_ = detail::mixed_rows(local_, boundary_, ghost_starts_);
  hot_ = Csr{local_.rows, local_.cols, local_.rowptr, local_.col, {}};
  refresh_blocks();  // first: compact_rowptr counts the entries by their values
  hot_ = detail::compact_rowptr(std::move(hot_));
}

EINSHARD_INLINE void DSparseTensor::refresh_blocks() { hot_.values = local_.values.detach().contiguous(); }

EINSHARD_INLINE const at::Tensor& DSparseTensor::same_structure(const DSparseTensor& b, const char* op) const {
  if (plan_ != b.plan_ || !at::equal(local_.col, b.local_.col) || !at::equal(local_.rowptr, b.local_.rowptr))
    throw Error(std::string("DSparseTensor ") + op +
                ": the matrices have different structures (partition or stored pattern)");
  return b.values();
}

EINSHARD_INLINE double DSparseTensor::extreme(MPI_Op op) const {
  if (local_.values.is_complex()) throw Error("DSparseTensor::max/min: complex values are not ordered");
  const bool is_max = op == MPI_MAX;
  double v = nnz() == 0 ? (is_max ? -HUGE_VAL : HUGE_VAL)
                        : (is_max ? values().max() : values().min()).item<double>();
  if (global_nnz() == 0) throw Error("DSparseTensor::max/min: the matrix stores no entries");
  comm::check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, op, layout_->comm()), "MPI_Allreduce");
  return v;
}

EINSHARD_INLINE void DSparseTensor::check_vector(const DVector& x, const char* op, const RowLayout& l) const {
  const char* side = m_ == n_ ? "" : &l == domain_.get() ? "domain" : "range";
  detail::check_partition(x, l, std::string("DSparseTensor::") + op, "matrix's", side,
                          "make it with scatter(), vector(), zeros() or domain_zeros() of this matrix");
}

EINSHARD_INLINE std::unique_ptr<detail::PreconditionerOp> DSparseTensor::make_preconditioner(const SolveOptions& options) const {
  const detail::LocalRows rows{local_, layout_->local_size(), layout_->comm()};
  if (options.preconditioner == Preconditioner::amg)
    return detail::make_amg(
        rows, shape()[0], shape()[1],
        [exchange = scratch_.exchange()](const at::Tensor& owned) { return exchange->ghosts_of(owned); },
        options.preconditioner_options.amg);
  return detail::make_preconditioner(
      options.preconditioner, rows, [this](const at::Tensor& x, at::Tensor& y) { apply(x, y, {}); },
      options.preconditioner_options);
}

EINSHARD_INLINE DSparseTensor::PreparedPreconditioner DSparseTensor::prepare_preconditioner(const SolveOptions& options) const {
  const auto start = MPI_Wtime();
  PreparedPreconditioner m{detail::custom_preconditioner(options, layout_, "DSparseTensor::solve")};
  if (!m.op && options.preconditioner != Preconditioner::none)
    std::tie(m.op, m.reused) = preconditioner_cache_.get(options.preconditioner, options.preconditioner_options,
                                                         local_.values, layout_->comm(),
                                                         [&] { return make_preconditioner(options); });
  m.seconds = MPI_Wtime() - start;
  return m;
}

EINSHARD_INLINE std::pair<SolveResult, std::shared_ptr<const detail::PreconditionerOp>> DSparseTensor::solve_detached(
    const DVector& b, const SolveOptions& options) const {
  const auto m = prepare_preconditioner(options);
  auto result = b.local().dim() == 2 ? detail::krylov_solve_block(*this, b, m.op.get(), options)
                                     : detail::krylov_solve(*this, b, m.op.get(), options);
  m.describe(result.info);
  return {std::move(result), m.op};
}

EINSHARD_INLINE at::Tensor DSparseTensor::adjoint_solve(const at::Tensor& g, const std::shared_ptr<const detail::PreconditionerOp>& m,
                                       const SolveOptions& options) const {
  auto o = options;
  o.x0.reset();
  o.monitor = {};
  o.residual_history = false;
  const auto rhs = DVector(layout_, g.to(dtype()).contiguous());
  SolveResult r;
  if (o.method == Method::cg || o.method == Method::minres) {
    r = rhs.local().dim() == 2 ? detail::krylov_solve_block(*this, rhs, m.get(), o)
                               : detail::krylov_solve(*this, rhs, m.get(), o);
  } else {
    o.custom_preconditioner = {};
    const auto& H = adjoint_cache_->get(local_.values, layout_->comm(), [this] { return adjoint(); });
    r = H.solve_detached(DVector(H.layout(), rhs.local()), o).first;
  }
  if (!r.info.converged)
    throw Error(std::string("DSparseTensor::solve (backward): the adjoint solve by ") + to_string(o.method) +
                " did not converge (" + to_string(r.info.reason) + " after " + std::to_string(r.info.iterations) +
                " iterations); loosen rtol or raise maxiter");
  return r.x.local();
}

EINSHARD_INLINE void DSparseTensor::check_square(const char* method) const {
  if (m_ != n_)
    throw Error(std::string("DSparseTensor::solve: ") + method + " needs a square matrix, got shape (" +
                std::to_string(m_) + ", " + std::to_string(n_) + "); use lsqr or lsmr for least squares");
  if (domain_ != layout_ && !domain_->same_as(*layout_))
    throw Error(std::string("DSparseTensor::solve: ") + method +
                " needs the columns partitioned as the rows (from_local's owned_cols differs from owned_rows)");
}

EINSHARD_INLINE std::string DSparseTensor::agree_across_ranks(MPI_Comm comm, std::array<std::int64_t, 2> shape, at::ScalarType dtype) {
  const auto d = static_cast<std::int64_t>(dtype);
  std::array<std::int64_t, 6> v{shape[0], -shape[0], shape[1], -shape[1], d, -d};
  comm::check(MPI_Allreduce(MPI_IN_PLACE, v.data(), 6, MPI_INT64_T, MPI_MAX, comm), "MPI_Allreduce");
  if (v[0] != -v[1] || v[2] != -v[3]) return "DSparseTensor::from_local: ranks disagree on the global shape";
  if (v[4] != -v[5]) return "DSparseTensor::from_local: ranks pass values of different dtypes";
  return {};
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
