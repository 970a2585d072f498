#pragma once
/// @file
/// Many matrices with one sparsity pattern (parameter sweeps, ensembles): `BatchSparseTensor` on
/// one process, and `DBatchSparseTensor`, its batch axis split over the ranks of a mesh (torch-sla's
/// BatchShard). The pattern is replicated and only the values are split, so products and solves
/// need no communication; only gathering the batch does.

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/comm/agreement.hpp"
#include "einshard/comm/autograd.hpp"
#include "einshard/comm/ops.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/csr_autograd.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/krylov/options.hpp"
#include "einshard/sparse/matrix/sparse_tensor.hpp"
#if EINSHARD_DEFINE_SPARSE  // only the definitions below need these
#include "einshard/sparse/matrix/block_kernels.hpp"
#include "einshard/sparse/krylov/methods.hpp"
#include "einshard/sparse/preconditioner/factory.hpp"
#include "einshard/sparse/krylov/solve_autograd.hpp"
#endif

namespace einshard::sparse {

/// The solutions of a batch of systems, one row per system, and how each solve went.
struct BatchSolveResult {
  at::Tensor x;                ///< (batch, n)
  std::vector<SolveInfo> info;  ///< one per system, in batch order
};

class BatchSparseTensor;
class DBatchSparseTensor;
DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh);

namespace detail {

/// Throws unless `x` is (batch, length), or (batch, length, k) when `columns`, on `device` (the values').
inline void check_batched(const at::Tensor& x, std::int64_t batch, std::int64_t length, const at::Device& device,
                          const std::string& what, bool columns = true) {
  const auto expected = "(" + std::to_string(batch) + ", " + std::to_string(length);
  if (!x.defined() || (x.dim() != 2 && !(columns && x.dim() == 3)) || x.size(0) != batch || x.size(1) != length)
    throw Error(what + ": expected a tensor of shape " + expected + ")" +
                (columns ? " or " + expected + ", k)" : std::string()) + ", got " +
                (x.defined() ? "shape " + std::string(c10::str(x.sizes())) : std::string("an undefined tensor")));
  if (x.device() != device)
    throw Error(what + ": expected a tensor on " + device.str() + " (the values' device), got one on " + x.device().str());
}

/// `x` (batch, n) or (batch, n, k), solved already for `rhs` with `values` (batch, nnz) on one
/// shared `pattern`, recorded for autograd: the backward gets λ = `adjoint_solve`(∂L/∂x) for every
/// system, then ∂L/∂rhs = λ and ∂L/∂values_b = −λ_b[row] conj(x_b[col]) (solve_autograd.hpp).
at::Tensor record_batch_solution(const at::Tensor& rhs, const at::Tensor& values, const at::Tensor& x,
                                 const Csr& pattern, std::function<at::Tensor(const at::Tensor&)> adjoint_solve);

}  // namespace detail

/// A batch of (rows, cols) sparse matrices sharing one pattern: a `Csr` pattern and values of shape
/// (batch, nnz) in the pattern's (row, col) order. Products and `to_dense` are differentiable
/// w.r.t. the values given at construction and the vectors. A batch may be empty (an empty slice
/// of a `DBatchSparseTensor`).
class BatchSparseTensor {
 public:
  /// COO triples shared by the batch, `values` (batch, nnz_coo) with one row per matrix; duplicate
  /// (row, col) pairs are summed within each matrix. Same checks as `SparseTensor`'s constructor.
  BatchSparseTensor(const at::Tensor& values, const at::Tensor& row, const at::Tensor& col,
                    std::array<std::int64_t, 2> shape);

  /// `pattern`'s structure with a batch of values: (batch, pattern.nnz()), in the order of
  /// `pattern.values()`.
  static BatchSparseTensor from_pattern(const SparseTensor& pattern, const at::Tensor& values) {
    Csr p = pattern.csr();
    p.values = at::Tensor();
    return BatchSparseTensor(std::move(p), pattern.row_indices(), values);
  }

  // ---- properties ------------------------------------------------------------------------------
  [[nodiscard]] std::int64_t batch_size() const { return values_.size(0); }
  /// (batch, rows, cols).
  [[nodiscard]] std::array<std::int64_t, 3> shape() const { return {batch_size(), pattern_.rows, pattern_.cols}; }
  [[nodiscard]] std::int64_t rows() const { return pattern_.rows; }
  [[nodiscard]] std::int64_t cols() const { return pattern_.cols; }
  /// Stored entries of each matrix.
  [[nodiscard]] std::int64_t nnz() const { return pattern_.col.numel(); }
  [[nodiscard]] at::ScalarType dtype() const { return values_.scalar_type(); }
  [[nodiscard]] bool is_square() const { return pattern_.rows == pattern_.cols; }
  /// (batch, nnz), in the order of `row_indices()` and `col_indices()` (int64, shared by the batch).
  [[nodiscard]] const at::Tensor& values() const { return values_; }
  [[nodiscard]] const at::Tensor& row_indices() const { return row_; }
  [[nodiscard]] at::Tensor col_indices() const { return pattern_.col.to(at::kLong); }

  /// Matrix `b` of the batch (differentiable w.r.t. its values).
  [[nodiscard]] SparseTensor item(std::int64_t b) const {
    if (b < 0 || b >= batch_size())
      throw Error("BatchSparseTensor::item: index " + std::to_string(b) + " is out of range [0, " +
                  std::to_string(batch_size()) + ")");
    return SparseTensor::from_csr(detail::with_values(pattern_, values_.select(0, b)));
  }

  /// The same pattern with other values: (any batch, nnz).
  [[nodiscard]] BatchSparseTensor with_values(const at::Tensor& values) const { return {pattern_, row_, values}; }

  /// (batch, rows, cols).
  [[nodiscard]] at::Tensor to_dense() const {
    return at::zeros({batch_size(), rows() * cols()}, values_.options())
        .index_copy(1, row_ * cols() + col_indices(), values_)
        .view({batch_size(), rows(), cols()});
  }

  // ---- products --------------------------------------------------------------------------------
  /// A_b x_b for each b: x of shape (batch, cols) or (batch, cols, k), the result (batch, rows) or
  /// (batch, rows, k) in the promotion of both dtypes.
  [[nodiscard]] at::Tensor matvec(const at::Tensor& x) const;

  // ---- solvers ---------------------------------------------------------------------------------
  /// Solves A_b x_b = rhs_b for each b by `options.method` (`options` as for `DSparseTensor::solve`,
  /// applied to each system; the monitor sees each system in turn). `rhs` (batch, rows), or
  /// (batch, rows, k) for k right-hand sides per system (one block solve each, `info[b].columns`);
  /// `x0`, when defined, initial guesses of rhs's shape (`options.x0` is for distributed vectors and
  /// must be unset).
  /// Differentiable in `rhs` and the values: the backward is one adjoint solve per system by the
  /// same method (see `adjoint_solve`). Runs on MPI_COMM_SELF: no communication.
  [[nodiscard]] BatchSolveResult solve(const at::Tensor& rhs, const SolveOptions& options = {},
                                       const at::Tensor& x0 = {}) const {
    return solve_as(rhs, options, x0, "BatchSparseTensor::solve");
  }

 private:
  friend class DBatchSparseTensor;
  friend DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh);

  BatchSparseTensor(Csr pattern, at::Tensor row, const at::Tensor& values);

  [[nodiscard]] BatchSolveResult solve_as(const at::Tensor& rhs, const SolveOptions& options, const at::Tensor& x0,
                                          const std::string& what) const;

  /// One system of the batch: `values_i` on `pattern` (this batch's, or its transpose for an
  /// adjoint), right-hand side `b_i` (rows) or (rows, k), optional initial guess.
  [[nodiscard]] static SolveResult solve_item(const Csr& pattern, const at::Tensor& values_i, const at::Tensor& b_i,
                                              const at::Tensor& x0_i, const SolveOptions& options,
                                              const std::string& what);

  /// λ_i = A_i⁻ᴴ g_i for every system (the backward of `solve`), by the forward's method and
  /// preconditioner kind (built on A_iᴴ; CG and MINRES assume A_i = A_iᴴ and keep A_i; a custom
  /// preconditioner is kept only by them). The tolerance is relative only, max(rtol, atol / ‖b_i‖),
  /// so the gradient scales with g however small g is.
  [[nodiscard]] at::Tensor adjoint_solve(const at::Tensor& g, const SolveOptions& options,
                                         const std::vector<double>& rhs_norms, const std::string& what) const;

  Csr pattern_;     // rowptr, col; values undefined (they live in values_)
  at::Tensor row_;  // the row of each stored entry (int64), for COO views
  at::Tensor values_;
};

/// A `BatchSparseTensor` whose batch axis is split over the ranks of a mesh by the contiguous rule
/// of the simple partition (blocks of ceil(batch / ranks), trailing ranks possibly empty). Each rank
/// stores the pattern and the values of its slice [first, last) of the batch. Products and solves
/// act on the local slice without communication; `gather`, `full_values` and `full_tensor` gather
/// the batch. Make one with `partition_batch`.
class DBatchSparseTensor {
 public:
  // ---- properties ------------------------------------------------------------------------------
  /// This rank's slice [first, last) of the global batch (first == last when empty).
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> batch_range() const {
    return {first_, first_ + local_.batch_size()};
  }
  [[nodiscard]] std::int64_t global_batch_size() const { return global_batch_; }
  [[nodiscard]] std::int64_t local_batch_size() const { return local_.batch_size(); }
  /// (global batch, rows, cols).
  [[nodiscard]] std::array<std::int64_t, 3> shape() const { return {global_batch_, local_.rows(), local_.cols()}; }
  [[nodiscard]] std::int64_t rows() const { return local_.rows(); }
  [[nodiscard]] std::int64_t cols() const { return local_.cols(); }
  [[nodiscard]] bool is_square() const { return local_.is_square(); }
  /// Stored entries of each matrix (the pattern is the same on every rank).
  [[nodiscard]] std::int64_t nnz() const { return local_.nnz(); }
  [[nodiscard]] at::ScalarType dtype() const { return local_.dtype(); }
  [[nodiscard]] int num_partitions() const { return static_cast<int>(sizes_.size()); }
  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  /// This rank's slice (possibly empty).
  [[nodiscard]] const BatchSparseTensor& local() const { return local_; }

  // ---- batched vectors -------------------------------------------------------------------------
  /// This rank's slice of a global (batch, ...) tensor every rank holds (differentiable; no
  /// communication).
  [[nodiscard]] at::Tensor scatter(const at::Tensor& global) const {
    if (!global.defined() || global.dim() < 1 || global.size(0) != global_batch_)
      throw Error("DBatchSparseTensor::scatter: expected a tensor with a leading batch dimension of " +
                  std::to_string(global_batch_) + ", got " +
                  (global.defined() ? "shape " + std::string(c10::str(global.sizes())) : std::string("undefined")));
    return global.narrow(0, first_, local_batch_size());
  }
  /// The global (batch, ...) tensor from every rank's slice (batch_range() leading rows), on every
  /// rank. Collective; differentiable (backward keeps this rank's slice of the gradient). Slices of
  /// the wrong length, or trailing shapes or dtypes that differ between ranks, raise the same Error
  /// on every rank.
  [[nodiscard]] at::Tensor gather(const at::Tensor& local) const;

  /// The values of the whole batch, (global batch, nnz), on every rank. Collective; differentiable.
  [[nodiscard]] at::Tensor full_values() const {
    return comm::apply_op(local_.values(), c10::make_intrusive<comm::GatherOp>(pieces(), false));
  }
  /// The whole batch on every rank. Collective; differentiable.
  [[nodiscard]] BatchSparseTensor full_tensor() const { return local_.with_values(full_values()); }

  // ---- products and solves (local slice, no communication) -------------------------------------
  /// A_b x_b for the local slice: `x_local` (local batch, cols) or (local batch, cols, k).
  /// Differentiable. No communication, so an x of the wrong shape raises on the ranks that pass it
  /// (every rank, when the mistake is everywhere).
  [[nodiscard]] at::Tensor matvec(const at::Tensor& x_local) const {
    detail::check_batched(x_local, local_batch_size(), cols(), local_.values().device(),
                          "DBatchSparseTensor::matvec (this rank's slice [" + std::to_string(first_) + ", " +
                              std::to_string(first_ + local_batch_size()) + ") of the batch)");
    return local_.matvec(x_local);
  }

  /// Solves the local slice's systems on this rank (`BatchSparseTensor::solve`, any method):
  /// `rhs_local` (local batch, rows) or (local batch, rows, k), `x0_local` optional initial guesses
  /// of the same shape. Bad
  /// input or a preconditioner setup fault on any rank raises the same Error on every rank (one
  /// all-reduce at the end; the iterations themselves do not communicate).
  [[nodiscard]] BatchSolveResult solve_batch(const at::Tensor& rhs_local, const SolveOptions& options = {},
                                             const at::Tensor& x0_local = {}) const;

 private:
  friend DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh);

  DBatchSparseTensor(Mesh mesh, BatchSparseTensor local, std::int64_t first, std::int64_t global_batch,
                     std::vector<std::int64_t> sizes)
      : mesh_(std::move(mesh)),
        local_(std::move(local)),
        first_(first),
        global_batch_(global_batch),
        sizes_(std::move(sizes)) {}

  [[nodiscard]] comm::Pieces pieces() const { return {mesh_.comm(), 0, sizes_, mesh_.rank()}; }

  /// Raises the same Error on every rank unless each rank's `x` is its slice of the batch (leading
  /// length its share) and the trailing shapes and dtypes agree (comm::agree checks the dtypes).
  void agree_slices(const at::Tensor& x, const std::string& what) const;
  static std::string shape_text(const comm::RankInfo& info) {
    std::string s;
    for (std::int64_t d = 0; d < info.ndim; ++d)
      s += (d ? ", " : "") + std::to_string(info.sizes[static_cast<std::size_t>(d)]);
    return s;
  }

  Mesh mesh_;
  BatchSparseTensor local_;
  std::int64_t first_ = 0;
  std::int64_t global_batch_ = 0;
  std::vector<std::int64_t> sizes_;  // every rank's slice length, in rank order
};

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

/// One system of a batch as a Krylov operator on MPI_COMM_SELF: the whole vector is owned, so the
/// product is a plain CSR product (with its fused dot).
class LocalOperator final : public Operator {
 public:
  LocalOperator(std::shared_ptr<const RowLayout> layout, Csr a) : layout_(std::move(layout)), a_(std::move(a)) {}
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return layout_; }
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    return uses_generic(x) ? generic_spmv_dot(a_, x, y, w) : spmv_dot(a_, x, y, w);
  }
  std::vector<double> apply_block(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    if (uses_generic(x)) {
      generic_product_into(aten_csr(a_, a_.values), x, y);
      return w.defined() ? to_host_real({column_dots(w, y)}) : std::vector<double>{};
    }
    std::vector<double> dots(w.defined() ? static_cast<std::size_t>(x.size(1)) : 0, 0.0);
    // Every column is owned: no boundary rows, so the interior pass is the whole product.
    spmm_halo(a_, no_boundary_, a_.cols, x, {}, y, /*boundary_phase=*/false, w, dots.data());
    return dots;
  }
  /// x = Aᴴ y, so lsqr and lsmr run on a batch item too.
  void apply_adjoint(const at::Tensor& y, at::Tensor& x) const override {
    if (uses_generic(y)) {
      x.copy_(generic_spmv_transpose(a_, y, /*conjugate=*/true));
      return;
    }
    x.zero_();
    spmv_transpose_add(a_, y, x, 0, a_.rows, /*conjugate=*/true);
  }
  [[nodiscard]] const Csr& csr() const { return a_; }

 private:
  std::shared_ptr<const RowLayout> layout_;
  Csr a_;
  at::Tensor no_boundary_ = at::empty({0}, at::kLong);
};

}  // namespace detail

EINSHARD_INLINE BatchSparseTensor::BatchSparseTensor(const at::Tensor& values, const at::Tensor& row, const at::Tensor& col,
    std::array<std::int64_t, 2> shape) {
  if (!values.defined() || values.dim() != 2 || !row.defined() || row.dim() != 1 || values.size(1) != row.numel())
    throw Error("BatchSparseTensor: expected values of shape (batch, nnz) and 1-D row and col of length nnz, got " +
                (values.defined() ? "values of shape " + std::string(c10::str(values.sizes())) : "undefined values") +
                (row.defined() ? " and row of shape " + std::string(c10::str(row.sizes())) : " and an undefined row"));
  // SparseTensor checks the indices, the dtype and the device, and sorts out the pattern.
  SparseTensor pattern(at::zeros({values.size(1)}, values.options().requires_grad(false)), row, col, shape);
  row_ = pattern.row_indices();
  pattern_ = std::move(pattern).csr();
  pattern_.values = at::Tensor();
  // Each COO entry lands on its pattern position: the (row, col) keys of a CSR are sorted.
  const auto pos = at::searchsorted(row_ * shape[1] + col_indices(), row.to(at::kLong) * shape[1] + col.to(at::kLong));
  values_ = at::zeros({values.size(0), nnz()}, values.options()).index_add(1, pos, values);
}

EINSHARD_INLINE at::Tensor BatchSparseTensor::matvec(const at::Tensor& x) const {
  detail::check_batched(x, batch_size(), cols(), values_.device(), "BatchSparseTensor::matvec");
  const auto t = at::promote_types(dtype(), x.scalar_type());
  auto out_shape = x.sizes().vec();
  out_shape[1] = rows();
  const auto values = t == dtype() ? values_ : values_.to(t);
  // Nothing to multiply, but the (empty) result stays in the autograd graph of both operands, so
  // a loss built on it can run backward on every rank.
  if (batch_size() == 0) return at::zeros(out_shape, values.options()) + values.sum() + x.sum();
  // unbind, not select: its backward stacks the items' gradients in one node.
  const auto v = values.unbind(0);
  const auto xs = x.unbind(0);
  std::vector<at::Tensor> ys;
  ys.reserve(v.size());
  for (std::size_t b = 0; b < v.size(); ++b) ys.push_back(detail::csr_matvec(pattern_, v[b], xs[b]));
  return at::stack(ys);
}

EINSHARD_INLINE BatchSparseTensor::BatchSparseTensor(Csr pattern, at::Tensor row, const at::Tensor& values)
    : pattern_(std::move(pattern)), row_(std::move(row)), values_(values) {
  if (!values.defined() || values.dim() != 2 || values.size(1) != nnz())
    throw Error("BatchSparseTensor: expected values of shape (batch, " + std::to_string(nnz()) + "), got " +
                (values.defined() ? "shape " + std::string(c10::str(values.sizes())) : std::string("undefined")));
  const auto t = values.scalar_type();
  if (t != at::kFloat && t != at::kDouble && t != at::kComplexFloat && t != at::kComplexDouble)
    throw Error(std::string("BatchSparseTensor: values must be float32, float64, complex64 or complex128, got ") +
                c10::toString(t));
  if (values.is_meta()) throw Error("BatchSparseTensor: values must hold data, got a tensor on the meta device");
}

EINSHARD_INLINE BatchSolveResult BatchSparseTensor::solve_as(const at::Tensor& rhs, const SolveOptions& options, const at::Tensor& x0,
    const std::string& what) const {
  if (!is_square())
    throw Error(what + ": the matrices must be square, got (" + std::to_string(rows()) + ", " +
                std::to_string(cols()) + ")");
  detail::check_batched(rhs, batch_size(), rows(), values_.device(), what + " (right-hand sides)");
  if (x0.defined()) {
    detail::check_batched(x0, batch_size(), rows(), values_.device(), what + " (initial guesses)");
    if (x0.sizes() != rhs.sizes())
      throw Error(what + ": the initial guesses must have the right-hand sides' shape " +
                  std::string(c10::str(rhs.sizes())) + ", got " + std::string(c10::str(x0.sizes())));
  }
  if (options.x0) throw Error(what + ": pass the initial guesses as the x0 tensor argument, not SolveOptions::x0");

  const auto t = at::promote_types(dtype(), rhs.scalar_type());
  BatchSolveResult out{at::empty(rhs.sizes(), values_.options().dtype(t).requires_grad(false)), {}};
  out.info.reserve(static_cast<std::size_t>(batch_size()));
  const auto values = values_.detach().to(t);
  const auto b = rhs.detach().to(t);
  std::vector<double> rhs_norms;
  for (std::int64_t i = 0; i < batch_size(); ++i) {
    auto r = solve_item(pattern_, values.select(0, i), b.select(0, i),
                        x0.defined() ? x0.select(0, i).detach().to(t) : at::Tensor(), options, what);
    out.x.select(0, i).copy_(r.x.local());
    rhs_norms.push_back(r.info.rhs_norm);
    out.info.push_back(std::move(r.info));
  }
  if (at::GradMode::is_enabled() && (rhs.requires_grad() || values_.requires_grad()))
    out.x = detail::record_batch_solution(rhs.to(t), values_.to(t), out.x, pattern_,
                                          [self = *this, options, rhs_norms, what](const at::Tensor& g) {
                                            return self.adjoint_solve(g, options, rhs_norms, what);
                                          });
  return out;
}

EINSHARD_INLINE SolveResult BatchSparseTensor::solve_item(const Csr& pattern, const at::Tensor& values_i, const at::Tensor& b_i,
                                            const at::Tensor& x0_i, const SolveOptions& options,
                                            const std::string& what) {
  const auto layout = RowLayout::simple(pattern.rows, MPI_COMM_SELF);
  const detail::LocalOperator A(layout, detail::with_values(pattern, values_i));
  const auto start = comm::wall_time();
  auto precond = detail::custom_preconditioner(options, layout, what);
  if (!precond && options.preconditioner != Preconditioner::none)
    precond = detail::make_preconditioner(
        options.preconditioner, detail::LocalRows{A.csr(), pattern.rows, MPI_COMM_SELF},
        [&A](const at::Tensor& x, at::Tensor& y) { A.apply(x, y, {}); }, options.preconditioner_options);
  const auto setup = comm::wall_time() - start;
  auto item_options = options;
  if (x0_i.defined()) item_options.x0 = DVector(layout, x0_i.contiguous());
  const DVector bi(layout, b_i.contiguous());
  auto r = detail::run_method(A, bi, precond.get(), item_options);
  r.info.setup_seconds = setup;
  return r;
}

EINSHARD_INLINE at::Tensor BatchSparseTensor::adjoint_solve(const at::Tensor& g, const SolveOptions& options,
                                       const std::vector<double>& rhs_norms, const std::string& what) const {
  const bool hermitian = options.method == Method::cg || options.method == Method::minres;
  Csr transposed = pattern_;
  at::Tensor perm;
  if (!hermitian) {
    // Aᵀ's pattern, and where each of its entries sits in A's order (the pattern has no duplicates).
    auto t = SparseTensor(at::arange(nnz(), at::kDouble), pattern_.col.to(at::kLong), row_, {cols(), rows()}).csr();
    perm = t.values.to(at::kLong);
    t.values = at::Tensor();
    transposed = std::move(t);
  }
  auto o = options;
  o.x0.reset();
  o.monitor = {};
  o.residual_history = false;
  if (!hermitian) o.custom_preconditioner = {};
  o.atol = 0.0;
  const auto values = values_.detach().to(g.scalar_type());
  auto lambda = at::empty_like(g);
  for (std::int64_t i = 0; i < batch_size(); ++i) {
    const double bn = rhs_norms[static_cast<std::size_t>(i)];
    o.rtol = std::max(options.rtol, bn > 0.0 ? options.atol / bn : 0.0);
    auto v = values.select(0, i);
    if (!hermitian) v = v.index_select(0, perm).conj().resolve_conj();
    const auto r = solve_item(transposed, v, g.select(0, i), {}, o, what + " (backward)");
    if (!r.info.converged)
      throw Error(what + " (backward): the adjoint solve of system " + std::to_string(i) + " by " +
                  to_string(o.method) + " did not converge (" + to_string(r.info.reason) + " after " +
                  std::to_string(r.info.iterations) + " iterations); loosen rtol or raise maxiter");
    lambda.select(0, i).copy_(r.x.local());
  }
  return lambda;
}

EINSHARD_INLINE at::Tensor DBatchSparseTensor::gather(const at::Tensor& local) const {
  const auto x = local.defined() ? local : at::empty({0});
  agree_slices(x, "DBatchSparseTensor::gather");
  return comm::apply_op(x, c10::make_intrusive<comm::GatherOp>(pieces(), false));
}

EINSHARD_INLINE BatchSolveResult DBatchSparseTensor::solve_batch(const at::Tensor& rhs_local, const SolveOptions& options,
    const at::Tensor& x0_local) const {
  BatchSolveResult result;
  std::string fault;
  try {
    result = local_.solve_as(rhs_local, options, x0_local,
                             "DBatchSparseTensor::solve_batch (this rank's slice [" + std::to_string(first_) +
                                 ", " + std::to_string(first_ + local_batch_size()) + ") of the batch)");
  } catch (const std::exception& e) {
    fault = e.what();
  }
  comm::raise_if_any(mesh_.comm(), fault);
  return result;
}

EINSHARD_INLINE void DBatchSparseTensor::agree_slices(const at::Tensor& x, const std::string& what) const {
  const std::array<comm::RankInfo, 1> mine{comm::describe(x, 0, comm::LocalFault::none)};
  const std::array<std::string, 1> dims{"(batch, ...)"};
  const auto all = comm::agree(mesh_.comm(), mine, what, dims);
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto& info = all[r][0];
    if (info.ndim < 1 || info.sizes[0] != sizes_[r])
      throw Error(what + ": rank " + std::to_string(r) + " passed a tensor of shape (" + shape_text(info) +
                  "); its slice of the batch has " + std::to_string(sizes_[r]) + " items");
    for (std::int64_t d = 1; d < info.ndim; ++d)
      if (info.sizes[static_cast<std::size_t>(d)] != all[0][0].sizes[static_cast<std::size_t>(d)])
        throw Error(what + ": the trailing shapes differ between ranks: (" + shape_text(all[0][0]) +
                    ") on rank 0, (" + shape_text(info) + ") on rank " + std::to_string(r));
  }
}
/// Splits the batch of `A` (identical on every rank) over the ranks of `mesh`: rank r keeps
/// matrices [r c, min((r + 1) c, batch)) with c = ceil(batch / ranks), so trailing ranks may hold
/// none. Gradients reach `A.values()` in this rank's slice. Collective: an empty batch, or batch
/// sizes, shapes, patterns or dtypes that differ between ranks, raise the same Error on every rank.
EINSHARD_INLINE DBatchSparseTensor partition_batch(const BatchSparseTensor& A, const Mesh& mesh) {
  if (!mesh) throw Error("partition_batch: needs a mesh");
  const MPI_Comm comm = mesh.comm();
  // A cheap fingerprint of the pattern: ranks holding different patterns disagree on it.
  const auto rowptr_sum = A.pattern_.rowptr.sum().item<std::int64_t>();
  const auto col_sum = A.nnz() ? (A.pattern_.col.to(at::kLong) * at::arange(1, A.nnz() + 1, at::kLong))
                                     .sum()
                                     .item<std::int64_t>()
                               : 0;
  const std::array<std::int64_t, 6> facts{A.batch_size(), A.rows(), A.cols(), A.nnz(),
                                          static_cast<std::int64_t>(A.dtype()), rowptr_sum ^ (col_sum * 31)};
  std::array<std::int64_t, 12> range{};
  for (std::size_t i = 0; i < facts.size(); ++i) {
    range[i] = facts[i];
    range[i + facts.size()] = -facts[i];
  }
  comm::all_reduce_values(std::span<std::int64_t>(range), comm::Reduction::max, comm);
  const auto differs = [&](std::size_t i) { return range[i] != -range[i + facts.size()]; };
  // Decided from the reduced facts, so every rank throws the same message.
  if (differs(0))
    throw Error("partition_batch: the ranks pass batches of different sizes (from " +
                std::to_string(-range[6]) + " to " + std::to_string(range[0]) + ")");
  if (differs(1) || differs(2) || differs(3) || differs(5))
    throw Error("partition_batch: the ranks pass matrices of different shapes or sparsity patterns");
  if (differs(4)) throw Error("partition_batch: the ranks pass values of different dtypes");
  if (A.batch_size() == 0) throw Error("partition_batch: the batch is empty (batch size 0)");

  const int p = comm::size_of(comm), me = comm::rank_of(comm);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    sizes[static_cast<std::size_t>(r)] =
        detail::block_first(A.batch_size(), p, r + 1) - detail::block_first(A.batch_size(), p, r);
  const auto first = detail::block_first(A.batch_size(), p, me);
  auto local = A.with_values(A.values().narrow(0, first, sizes[static_cast<std::size_t>(me)]));
  return {mesh, std::move(local), first, A.batch_size(), std::move(sizes)};
}

EINSHARD_INLINE at::Tensor detail::record_batch_solution(const at::Tensor& rhs, const at::Tensor& values,
                                                        const at::Tensor& x, const Csr& pattern,
                                                        std::function<at::Tensor(const at::Tensor&)> adjoint_solve) {
  auto adjoint = c10::make_intrusive<AdjointSolver>();
  adjoint->pattern = pattern;
  adjoint->solve = std::move(adjoint_solve);
  adjoint->batch = true;
  return SolveFunction::apply(rhs, values, x, adjoint);
}
#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
