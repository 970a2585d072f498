#pragma once
/// @file
/// `DSparseTensor`: a square sparse matrix partitioned by rows over the ranks of a mesh. Each rank
/// stores its owned rows in local numbering (owned columns first, then ghosts), split as PETSc's
/// MPIAIJ into a diagonal block (owned columns) and a row-compressed off-diagonal block (ghost
/// columns), so a product multiplies the diagonal block while the halo is in flight.

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

#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/error.hpp"
#include "einshard/exec/autograd.hpp"
#include "einshard/exec/steps.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/batch.hpp"
#include "einshard/sparse/csr.hpp"
#include "einshard/sparse/csr_autograd.hpp"
#include "einshard/sparse/dvector.hpp"
#include "einshard/sparse/halo.hpp"
#include "einshard/sparse/krylov/bicgstab.hpp"
#include "einshard/sparse/krylov/cg.hpp"
#include "einshard/sparse/krylov/gmres.hpp"
#include "einshard/sparse/krylov/minres.hpp"
#include "einshard/sparse/layout.hpp"
#include "einshard/sparse/operator.hpp"
#include "einshard/sparse/partition.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "einshard/sparse/solver.hpp"
#include "einshard/sparse/sparse_tensor.hpp"

namespace einshard::sparse {

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
};

namespace detail {

/// x (owned) -> x with ghosts appended. Backward: the ghosts' gradients go back to their owners
/// and are added (the reverse halo exchange), so d/dx of a distributed product is exact.
struct HaloOp final : exec::CommOp {
  std::shared_ptr<HaloExchange> exchange;
  explicit HaloOp(std::shared_ptr<HaloExchange> e) : exchange(std::move(e)) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override {
    const auto owned = x.contiguous();
    return at::cat({owned, exchange->ghosts_of(owned)});
  }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
    const auto n = exchange->plan().owned();
    auto owned = g.narrow(0, 0, n).clone();
    const auto ghosts = g.narrow(0, n, g.numel() - n).contiguous();
    exchange->start_reverse(ghosts);
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

}  // namespace detail

class DSparseTensor final : public detail::Operator {
 public:
  /// Distributed assembly: each rank passes COO entries (global row and column indices) of any
  /// rows; entries of rows owned elsewhere are sent to their owner, duplicates are summed. No rank
  /// ever holds the global matrix or an O(N) table. Collective over `mesh`; bad input (lengths,
  /// indices out of range, shapes or dtypes that differ between ranks) raises the same Error on
  /// every rank. Gradients reach `values` for the entries of rows this rank owns.
  static DSparseTensor from_local(const at::Tensor& values, const at::Tensor& rows, const at::Tensor& cols,
                                  std::array<std::int64_t, 2> shape, const Mesh& mesh,
                                  const FromLocalOptions& options = {}) {
    if (!mesh) throw Error("DSparseTensor::from_local: needs a mesh");
    const MPI_Comm comm = mesh.comm();
    std::string fault;
    if (values.dim() != 1 || rows.dim() != 1 || cols.dim() != 1 || values.numel() != rows.numel() ||
        values.numel() != cols.numel())
      fault = "DSparseTensor::from_local: values, rows and cols must be 1-D of one length, got " +
              std::string(c10::str(values.sizes(), ", ", rows.sizes(), ", ", cols.sizes()));
    else if (!at::isFloatingType(values.scalar_type()) && !at::isComplexType(values.scalar_type()))
      fault = std::string("DSparseTensor::from_local: values must be floating point or complex, got ") +
              c10::toString(values.scalar_type());
    else if (shape[0] != shape[1] || shape[0] < 0)
      fault = "DSparseTensor::from_local: a distributed matrix must be square, got shape (" +
              std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ")";
    else if (rows.numel() > 0) {
      const auto range = [&](const at::Tensor& t, const char* what) {
        const auto lo = t.min().item<std::int64_t>(), hi = t.max().item<std::int64_t>();
        if (lo < 0 || hi >= shape[0])
          fault = std::string("DSparseTensor::from_local: ") + what + " index " +
                  std::to_string(lo < 0 ? lo : hi) + " is out of range [0, " + std::to_string(shape[0]) + ")";
      };
      range(rows, "row");
      if (fault.empty()) range(cols, "column");
    }
    // Collective on every rank, faulty or not, so the checks stay matched.
    const auto disagreement = agree_across_ranks(comm, shape[0], values.scalar_type());
    comm::raise_if_any(comm, fault.empty() ? disagreement : fault);

    auto layout = options.owned_rows ? std::make_shared<const RowLayout>(*options.owned_rows, shape[0], comm)
                                     : RowLayout::simple(shape[0], comm);
    auto t = detail::send_to_owners(*layout, {values, rows.to(at::kLong), cols.to(at::kLong)});
    return DSparseTensor(mesh, std::move(layout), std::move(t));
  }

  /// Partitions a matrix every rank holds (`A` identical on all ranks) with `options.method`; the
  /// partition ids are computed on rank 0 and broadcast, so every rank agrees byte for byte even
  /// when the partitioner is not deterministic.
  static DSparseTensor partition(const SparseTensor& A, const Mesh& mesh, const PartitionOptions& options = {}) {
    if (!mesh) throw Error("DSparseTensor::partition: needs a mesh");
    const MPI_Comm comm = mesh.comm();
    const auto n = A.rows();
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

  /// Many matrices with one pattern, the batch split over the mesh's ranks (see batch.hpp).
  static DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh) {
    return sparse::partition_batch(A, mesh);
  }

  // ---- properties ----------------------------------------------------------------------------
  [[nodiscard]] std::array<std::int64_t, 2> shape() const { return {n_, n_}; }
  [[nodiscard]] std::int64_t rows() const { return n_; }
  [[nodiscard]] std::int64_t cols() const { return n_; }
  [[nodiscard]] int num_partitions() const { return layout_->size(); }
  [[nodiscard]] at::ScalarType dtype() const { return local_.dtype(); }
  /// Stored entries of this rank's rows.
  [[nodiscard]] std::int64_t nnz() const { return local_.nnz(); }
  /// Stored entries of the whole matrix (collective).
  [[nodiscard]] std::int64_t global_nnz() const {
    std::int64_t n = nnz();
    comm::check(MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT64_T, MPI_SUM, layout_->comm()), "MPI_Allreduce");
    return n;
  }
  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return layout_; }
  [[nodiscard]] const HaloPlan& halo() const { return *plan_; }
  /// This rank's rows in local numbering: columns [0, owned) are owned rows, then the ghosts
  /// (`halo().ghosts` gives their global indices).
  [[nodiscard]] const Csr& local() const { return local_; }
  /// The stored values of this rank's rows (differentiable leaf or the tensor passed in).
  [[nodiscard]] const at::Tensor& values() const { return local_.values; }

  // ---- vectors -------------------------------------------------------------------------------
  /// The owned slice of a global vector every rank holds.
  [[nodiscard]] DVector scatter(const at::Tensor& global) const {
    if (global.dim() != 1 || global.numel() != n_)
      throw Error("DSparseTensor::scatter: expected a global vector of length " + std::to_string(n_) +
                  ", got shape " + std::string(c10::str(global.sizes())));
    return {layout_, layout_->scatter(global)};
  }
  [[nodiscard]] DVector vector(at::Tensor owned) const { return {layout_, std::move(owned)}; }
  [[nodiscard]] DVector zeros() const { return {layout_, at::zeros({layout_->local_size()}, local_.values.options().requires_grad(false))}; }

  // ---- products ------------------------------------------------------------------------------
  /// y = A x. Overlaps the halo exchange with the diagonal block; differentiable in x and in
  /// `values()` (then through the autograd path, with the reverse halo exchange in backward).
  [[nodiscard]] DVector matvec(const DVector& x) const {
    check_vector(x, "matvec");
    if (at::GradMode::is_enabled() && (x.local().requires_grad() || local_.values.requires_grad())) {
      const auto with_ghosts = exec::apply_op(x.local(), c10::make_intrusive<detail::HaloOp>(exchange_));
      return {layout_, detail::csr_matvec(local_, local_.values, with_ghosts)};
    }
    const auto xl = x.local().to(dtype()).contiguous();
    auto y = at::empty({layout_->local_size()}, xl.options());
    apply(xl, y, {});
    return {layout_, y};
  }
  friend DVector operator*(const DSparseTensor& a, const DVector& x) { return a.matvec(x); }

  /// w = A^T y: the transposed blocks' contributions to ghost rows go back to their owners (the
  /// reverse halo exchange), overlapped with the diagonal block. Differentiable in y.
  [[nodiscard]] DVector rmatvec(const DVector& y) const {
    check_vector(y, "rmatvec");
    if (at::GradMode::is_enabled() && (y.local().requires_grad() || local_.values.requires_grad())) {
      const auto full = detail::csr_rmatvec(local_, local_.values, y.local());
      return {layout_, exec::apply_op(full, c10::make_intrusive<ReverseHaloOp>(exchange_))};
    }
    const auto yl = y.local().to(dtype()).contiguous();
    auto ghosts = at::zeros({plan_->ghost_count()}, yl.options());
    detail::spmv_transpose_rows_add(off_, off_rows_, yl, ghosts);
    exchange_->start_reverse(ghosts);
    auto w = at::zeros({layout_->local_size()}, yl.options());
    detail::spmv_transpose_add(diag_, yl, w, 0, diag_.rows);
    exchange_->finish_reverse(w);
    return {layout_, w};
  }

  /// y = A x on owned slices, returning the local partial <w, y>: the hot path of the solvers.
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    exchange_->start(x, ghost_buffer(x));
    auto dot = detail::spmv_dot(diag_, x, y, w);
    exchange_->finish();
    if (off_.rows > 0) dot += detail::spmv_rows_add_dot(off_, off_rows_, ghost_buffer_, y, w);
    return dot;
  }

  // ---- solvers -------------------------------------------------------------------------------
  /// Solves A x = b (see `SolveOptions` for the stop test and defaults). Collective.
  [[nodiscard]] SolveResult solve(const DVector& b, const SolveOptions& options = {}) const {
    check_vector(b, "solve");
    const auto start = MPI_Wtime();
    auto make = [&] {
      return detail::make_preconditioner(
          options.preconditioner, detail::LocalRows{local_, layout_->local_size(), layout_->comm()},
          [this](const at::Tensor& x, at::Tensor& y) { apply(x, y, {}); }, options.preconditioner_options);
    };
    std::shared_ptr<const detail::PreconditionerOp> precond;
    bool reused = false;
    if (options.preconditioner == Preconditioner::none)
      precond = make();
    else
      std::tie(precond, reused) = preconditioner_cache_.get(options.preconditioner, options.preconditioner_options,
                                                            local_.values, layout_->comm(), make);
    const auto setup = MPI_Wtime() - start;
    auto result = [&] {
      switch (options.method) {
        case Method::cg: return detail::cg(*this, b, options.preconditioner, precond.get(), options);
        case Method::bicgstab: return detail::bicgstab(*this, b, options.preconditioner, precond.get(), options);
        case Method::gmres: return detail::gmres(*this, b, options.preconditioner, precond.get(), options);
        case Method::minres: return detail::minres(*this, b, options.preconditioner, precond.get(), options);
      }
      throw Error("DSparseTensor::solve: unknown method");
    }();
    result.info.setup_seconds = setup;
    result.info.preconditioner_reused = reused;
    return result;
  }

  // ---- values --------------------------------------------------------------------------------
  /// The same matrix structure with other stored values (same length and order as `values()`).
  [[nodiscard]] DSparseTensor with_values(at::Tensor values) const {
    if (values.dim() != 1 || values.numel() != nnz())
      throw Error("DSparseTensor::with_values: expected " + std::to_string(nnz()) + " values, got shape " +
                  std::string(c10::str(values.sizes())));
    DSparseTensor out = *this;
    out.local_.values = std::move(values);
    out.refresh_blocks();
    return out;
  }
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
  [[nodiscard]] at::Tensor sum() const {
    return exec::apply_op(values().sum(), c10::make_intrusive<exec::AllReduceOp>(layout_->comm()));
  }
  /// Row sums (axis 1, A 1) or column sums (axis 0, A^T 1), as a distributed vector.
  [[nodiscard]] DVector sum(int axis) const {
    const auto ones = DVector(layout_, at::ones({layout_->local_size()}, local_.values.options().requires_grad(false)));
    if (axis == 1 || axis == -1) return matvec(ones);
    if (axis == 0 || axis == -2) return rmatvec(ones);
    throw Error("DSparseTensor::sum: axis must be 0, 1, -1 or -2, got " + std::to_string(axis));
  }
  [[nodiscard]] at::Tensor mean() const { return sum() / static_cast<double>(std::max<std::int64_t>(global_nnz(), 1)); }
  [[nodiscard]] double max() const { return extreme(MPI_MAX); }
  [[nodiscard]] double min() const { return extreme(MPI_MIN); }
  /// "fro" (sqrt of the sum of |a_ij|^2), "1" (largest column abs-sum), "inf" (largest row abs-sum).
  [[nodiscard]] double norm(std::string_view ord = "fro") const {
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
  /// A X for a block X whose owned slice is (n_local, m): one halo exchange for the whole block.
  [[nodiscard]] at::Tensor apply_block(const at::Tensor& x) const;

 private:
  /// A^T's backward pair: ghost contributions (the tail of a local-length vector) to owners.
  struct ReverseHaloOp final : exec::CommOp {
    std::shared_ptr<HaloExchange> exchange;
    explicit ReverseHaloOp(std::shared_ptr<HaloExchange> e) : exchange(std::move(e)) {}
    [[nodiscard]] at::Tensor forward(const at::Tensor& full) const override {
      const auto n = exchange->plan().owned();
      auto owned = full.narrow(0, 0, n).clone();
      exchange->start_reverse(full.narrow(0, n, full.numel() - n).contiguous());
      exchange->finish_reverse(owned);
      return owned;
    }
    [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
      const auto owned = g.contiguous();
      return at::cat({owned, exchange->ghosts_of(owned)});
    }
  };

  DSparseTensor(Mesh mesh, std::shared_ptr<const RowLayout> layout, detail::Triples t)
      : mesh_(std::move(mesh)), layout_(std::move(layout)), n_(layout_->global_size()) {
    const auto n_owned = layout_->local_size();
    const auto owned_col = layout_->is_owned(t.cols);
    const auto ghosts = std::get<0>(at::_unique(t.cols.masked_select(~owned_col), /*sorted=*/true));
    plan_ = HaloPlan::build(layout_, ghosts);
    exchange_ = std::make_shared<HaloExchange>(plan_);
    // Global ghost index -> ghost slot (the plan orders ghosts by owner, then index).
    const auto [sorted_ghosts, slot_of_sorted] = plan_->ghosts.sort();
    auto local_col = at::empty_like(t.cols);
    local_col.masked_scatter_(owned_col, layout_->local_index(t.cols.masked_select(owned_col)));
    local_col.masked_scatter_(~owned_col, slot_of_sorted.index_select(
                                              0, at::searchsorted(sorted_ghosts, t.cols.masked_select(~owned_col))) +
                                              n_owned);
    local_ = detail::coo_to_csr(t.values, layout_->local_index(t.rows), local_col, n_owned, plan_->local_size());
    split_blocks();
  }

  /// The diagonal / off-diagonal split of `local_` (structure once; values via refresh_blocks).
  void split_blocks() {
    const auto n_owned = layout_->local_size();
    const auto [v, r, c] = detail::csr_to_coo(local_);
    const auto in_diag = c < n_owned;
    diag_pos_ = in_diag.nonzero().flatten();
    off_pos_ = (~in_diag).nonzero().flatten();
    const auto off_r = r.index_select(0, off_pos_);
    off_rows_ = std::get<0>(at::_unique(off_r, /*sorted=*/true)).contiguous();
    diag_ = detail::coo_to_csr(at::zeros({diag_pos_.numel()}, v.options()), r.index_select(0, diag_pos_),
                               c.index_select(0, diag_pos_), n_owned, n_owned);
    off_ = detail::coo_to_csr(at::zeros({off_pos_.numel()}, v.options()), at::searchsorted(off_rows_, off_r),
                              c.index_select(0, off_pos_) - n_owned, off_rows_.numel(), plan_->ghost_count());
    diag_ = detail::compact_rowptr(std::move(diag_));
    off_ = detail::compact_rowptr(std::move(off_));
    refresh_blocks();
  }
  void refresh_blocks() {
    const auto v = local_.values.detach();
    diag_.values = v.index_select(0, diag_pos_).contiguous();
    off_.values = v.index_select(0, off_pos_).contiguous();
  }

  at::Tensor& ghost_buffer(const at::Tensor& like) const {
    if (!ghost_buffer_.defined() || ghost_buffer_.scalar_type() != like.scalar_type())
      ghost_buffer_ = at::empty({plan_->ghost_count()}, like.options().requires_grad(false));
    return ghost_buffer_;
  }

  /// The values of `b`, after checking it has this matrix's structure (same halo plan: the
  /// results of value operations on one matrix, or the same assembly).
  [[nodiscard]] const at::Tensor& same_structure(const DSparseTensor& b, const char* op) const {
    if (plan_ != b.plan_ || !at::equal(local_.col, b.local_.col) || !at::equal(local_.rowptr, b.local_.rowptr))
      throw Error(std::string("DSparseTensor ") + op +
                  ": the matrices have different structures (partition or stored pattern)");
    return b.values();
  }

  /// Largest or smallest stored real value over all ranks; ranks without entries take part with
  /// the neutral element. A matrix without any stored entry is an error on every rank.
  [[nodiscard]] double extreme(MPI_Op op) const {
    if (local_.values.is_complex()) throw Error("DSparseTensor::max/min: complex values are not ordered");
    const bool is_max = op == MPI_MAX;
    double v = nnz() == 0 ? (is_max ? -HUGE_VAL : HUGE_VAL)
                          : (is_max ? values().max() : values().min()).item<double>();
    if (global_nnz() == 0) throw Error("DSparseTensor::max/min: the matrix stores no entries");
    comm::check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, op, layout_->comm()), "MPI_Allreduce");
    return v;
  }

  void check_vector(const DVector& x, const char* op) const {
    if (!x.defined()) throw Error(std::string("DSparseTensor::") + op + ": undefined vector");
    if (x.layout() != layout_ && !x.layout()->same_as(*layout_))
      throw Error(std::string("DSparseTensor::") + op + ": the vector's partition differs from the matrix's (" +
                  std::to_string(x.size()) + " rows vs " + std::to_string(n_) +
                  "); make it with scatter(), vector() or zeros() of this matrix");
  }

  /// Global size and dtype must be the same on every rank: a fault string, empty when they agree.
  static std::string agree_across_ranks(MPI_Comm comm, std::int64_t n, at::ScalarType dtype) {
    std::array<std::int64_t, 4> v{n, -n, static_cast<std::int64_t>(dtype), -static_cast<std::int64_t>(dtype)};
    comm::check(MPI_Allreduce(MPI_IN_PLACE, v.data(), 4, MPI_INT64_T, MPI_MAX, comm), "MPI_Allreduce");
    if (v[0] != -v[1]) return "DSparseTensor::from_local: ranks disagree on the global shape";
    if (v[2] != -v[3]) return "DSparseTensor::from_local: ranks pass values of different dtypes";
    return {};
  }

  Mesh mesh_;
  std::shared_ptr<const RowLayout> layout_;
  std::int64_t n_ = 0;
  std::shared_ptr<const HaloPlan> plan_;
  std::shared_ptr<HaloExchange> exchange_;
  Csr local_;     // owned rows x (owned + ghost) columns, the differentiable values
  Csr diag_;      // owned x owned
  Csr off_;       // rows off_rows_ x ghosts
  at::Tensor off_rows_, diag_pos_, off_pos_;
  mutable at::Tensor ghost_buffer_;
  /// The last solve's preconditioner (empty in a copy: `with_values` copies).
  mutable detail::PreconditionerCache preconditioner_cache_;
};

}  // namespace einshard::sparse
