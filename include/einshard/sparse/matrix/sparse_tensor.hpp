#pragma once
/// @file
/// `SparseTensor`: a sparse matrix on one process. COO in (duplicates summed), CSR inside; the
/// products run the CSR kernels. Everything that computes on the values — products, elementwise
/// ops, reductions, transpose, conversions — is differentiable w.r.t. the values given at
/// construction (and the vector of a product), as in torch-sla's SparseTensor.

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/csr_autograd.hpp"

namespace einshard::sparse {

/// A (rows, cols) sparse matrix with float32, float64 or complex values, stored as a `Csr` with
/// sorted columns and no duplicate entries. The sparsity pattern is fixed: elementwise ops act on
/// the stored values only (`A + 1` adds 1 to each stored entry, like torch-sla), and two matrices
/// combine only when their patterns are identical.
class SparseTensor {
 public:
  /// An empty 0 x 0 float64 matrix (something to assign to).
  SparseTensor()
      : SparseTensor(detail::coo_to_csr(at::zeros({0}, at::kDouble), at::zeros({0}, at::kLong),
                                        at::zeros({0}, at::kLong), 0, 0)) {}

  /// COO triples; duplicate (row, col) pairs are summed. `row`/`col` are integer tensors, checked
  /// to lie in [0, rows) and [0, cols).
  SparseTensor(const at::Tensor& values, const at::Tensor& row, const at::Tensor& col,
               std::array<std::int64_t, 2> shape)
      : SparseTensor(checked_coo_to_csr(values, row, col, shape)) {}

  /// Takes the CSR as is: it must already be sorted by column within rows without duplicates (as
  /// `detail::coo_to_csr` builds it).
  static SparseTensor from_csr(Csr a) {
    if (!a.rowptr.defined() || !a.col.defined() || !a.values.defined() ||
        a.rowptr.numel() != a.rows + 1 || a.col.numel() != a.values.numel() || a.values.dim() != 1)
      throw Error("SparseTensor::from_csr: expected rowptr of length rows + 1 = " +
                  std::to_string(a.rows + 1) + " and 1-D col and values of one length (nnz), found " +
                  (a.rowptr.defined() && a.col.defined() && a.values.defined()
                       ? "lengths " + std::to_string(a.rowptr.numel()) + ", " + std::to_string(a.col.numel()) +
                             " and values of shape " + std::string(c10::str(a.values.sizes()))
                       : std::string("an undefined tensor")));
    check_dtype(a.values.scalar_type());
    return SparseTensor(std::move(a));
  }

  /// The nonzero entries of a 2-D tensor (differentiable w.r.t. `dense` at those entries).
  static SparseTensor from_dense(const at::Tensor& dense) {
    if (dense.dim() != 2)
      throw Error("SparseTensor::from_dense: expected a 2-D tensor, found shape " +
                  std::string(c10::str(dense.sizes())));
    const auto nz = dense.nonzero();
    const auto row = nz.select(1, 0), col = nz.select(1, 1);
    return SparseTensor(dense.index({row, col}), row, col, {dense.size(0), dense.size(1)});
  }

  // ---- properties ------------------------------------------------------------------------------
  [[nodiscard]] std::array<std::int64_t, 2> shape() const { return {csr_.rows, csr_.cols}; }
  [[nodiscard]] std::int64_t rows() const { return csr_.rows; }
  [[nodiscard]] std::int64_t cols() const { return csr_.cols; }
  [[nodiscard]] std::int64_t nnz() const { return csr_.nnz(); }
  [[nodiscard]] at::ScalarType dtype() const { return csr_.dtype(); }
  [[nodiscard]] bool is_square() const { return csr_.rows == csr_.cols; }
  [[nodiscard]] const Csr& csr() const& { return csr_; }
  /// From a temporary: the storage itself, so that no reference to it outlives it.
  [[nodiscard]] Csr csr() && { return std::move(csr_); }

  /// The stored values in (row, col) order: the coalesced COO together with `row_indices()` and
  /// `col_indices()` (int64).
  [[nodiscard]] const at::Tensor& values() const { return csr_.values; }
  [[nodiscard]] at::Tensor row_indices() const { return std::get<1>(detail::csr_to_coo(csr_)); }
  [[nodiscard]] at::Tensor col_indices() const { return csr_.col.to(at::kLong); }

  [[nodiscard]] at::Tensor to_dense() const {
    const auto [values, row, col] = detail::csr_to_coo(csr_);
    return at::zeros({csr_.rows, csr_.cols}, values.options()).index_put({row, col}, values);
  }

  // ---- products --------------------------------------------------------------------------------
  /// A x for x of shape (cols,) or (cols, k). The result dtype is the promotion of both.
  [[nodiscard]] at::Tensor matvec(const at::Tensor& x) const {
    return detail::csr_matvec(csr_, promoted_values(x), x);
  }
  /// A^T y (no conjugation) for y of shape (rows,) or (rows, k).
  [[nodiscard]] at::Tensor rmatvec(const at::Tensor& y) const {
    return detail::csr_rmatvec(csr_, promoted_values(y), y);
  }

  // ---- structure -------------------------------------------------------------------------------
  [[nodiscard]] SparseTensor transpose() const {
    const auto [values, row, col] = detail::csr_to_coo(csr_);
    return SparseTensor(detail::coo_to_csr(values, col, row, csr_.cols, csr_.rows));
  }
  /// The conjugate transpose.
  [[nodiscard]] SparseTensor adjoint() const { return transpose().conj(); }

  [[nodiscard]] SparseTensor to(at::ScalarType dtype) const {
    check_dtype(dtype);
    return with_values(csr_.values.to(dtype));
  }

  /// The main diagonal, length min(rows, cols); zero where no entry is stored.
  [[nodiscard]] at::Tensor diagonal() const {
    const auto [values, row, col] = detail::csr_to_coo(csr_);
    const auto on = (row == col).nonzero().squeeze(1);
    return at::zeros({std::min(csr_.rows, csr_.cols)}, values.options())
        .index_add(0, row.index_select(0, on), values.index_select(0, on));
  }

  /// |A - A^T| <= atol + rtol |A^T| entrywise, over the union of both patterns (so an explicit zero
  /// facing a missing entry counts as symmetric). False for a non-square matrix.
  [[nodiscard]] bool is_symmetric(double atol = 1e-8, double rtol = 1e-5) const {
    return matches_transpose(atol, rtol, false);
  }
  /// As `is_symmetric`, against the conjugate transpose.
  [[nodiscard]] bool is_hermitian(double atol = 1e-8, double rtol = 1e-5) const {
    return matches_transpose(atol, rtol, true);
  }

  // ---- elementwise on the stored values -------------------------------------------------------
  [[nodiscard]] SparseTensor abs() const { return with_values(csr_.values.abs()); }
  [[nodiscard]] SparseTensor sqrt() const { return with_values(csr_.values.sqrt()); }
  [[nodiscard]] SparseTensor square() const { return with_values(csr_.values.square()); }
  [[nodiscard]] SparseTensor exp() const { return with_values(csr_.values.exp()); }
  [[nodiscard]] SparseTensor log() const { return with_values(csr_.values.log()); }
  [[nodiscard]] SparseTensor conj() const {
    return with_values(csr_.values.conj().resolve_conj());
  }
  [[nodiscard]] SparseTensor pow(const at::Scalar& exponent) const {
    return with_values(csr_.values.pow(exponent));
  }

  /// The same pattern with other values (nnz of them, in the order of `values()`).
  [[nodiscard]] SparseTensor with_values(const at::Tensor& values) const {
    if (values.dim() != 1 || values.numel() != nnz())
      throw Error("SparseTensor::with_values: expected " + std::to_string(nnz()) +
                  " values (the nnz), found shape " + std::string(c10::str(values.sizes())));
    check_dtype(values.scalar_type());
    return SparseTensor(detail::with_values(csr_, values));
  }

  friend SparseTensor operator-(const SparseTensor& a) { return a.with_values(-a.csr_.values); }
  friend SparseTensor operator+(const SparseTensor& a, const at::Scalar& s) {
    return a.with_values(a.csr_.values + s);
  }
  friend SparseTensor operator+(const at::Scalar& s, const SparseTensor& a) { return a + s; }
  friend SparseTensor operator-(const SparseTensor& a, const at::Scalar& s) {
    return a.with_values(a.csr_.values - s);
  }
  friend SparseTensor operator-(const at::Scalar& s, const SparseTensor& a) {
    return a.with_values(at::rsub(a.csr_.values, s));
  }
  friend SparseTensor operator*(const SparseTensor& a, const at::Scalar& s) {
    return a.with_values(a.csr_.values * s);
  }
  friend SparseTensor operator*(const at::Scalar& s, const SparseTensor& a) { return a * s; }
  friend SparseTensor operator/(const SparseTensor& a, const at::Scalar& s) {
    return a.with_values(a.csr_.values / s);
  }
  friend SparseTensor operator/(const at::Scalar& s, const SparseTensor& a) {
    return a.with_values(at::reciprocal(a.csr_.values) * s);
  }
  /// Sum and difference of two matrices with the identical pattern (else einshard::Error).
  friend SparseTensor operator+(const SparseTensor& a, const SparseTensor& b) {
    a.check_same_pattern(b, "+");
    return a.with_values(a.csr_.values + b.csr_.values);
  }
  friend SparseTensor operator-(const SparseTensor& a, const SparseTensor& b) {
    a.check_same_pattern(b, "-");
    return a.with_values(a.csr_.values - b.csr_.values);
  }
  /// A x: `matvec`.
  friend at::Tensor operator*(const SparseTensor& a, const at::Tensor& x) { return a.matvec(x); }

  // ---- reductions over the stored values (torch-sla §1.8) -------------------------------------
  /// Sum of the stored values (0-d).
  [[nodiscard]] at::Tensor sum() const { return csr_.values.sum(); }
  /// axis 0 (or -2): column sums, length cols; axis 1 (or -1): row sums, length rows.
  [[nodiscard]] at::Tensor sum(std::int64_t axis) const {
    const auto [values, row, col] = detail::csr_to_coo(csr_);
    const bool columns = normalize_axis(axis) == 0;
    return at::zeros({columns ? csr_.cols : csr_.rows}, values.options())
        .index_add(0, columns ? col : row, values);
  }
  /// Mean of the stored values (NaN when nothing is stored, as torch's mean of nothing).
  [[nodiscard]] at::Tensor mean() const { return csr_.values.mean(); }
  /// Per-column (axis 0) or per-row (axis 1) sum divided by that line's stored count (at least 1).
  [[nodiscard]] at::Tensor mean(std::int64_t axis) const {
    const bool columns = normalize_axis(axis) == 0;
    const auto counts =
        columns ? at::bincount(col_indices(), {}, csr_.cols)
                : csr_.rowptr.slice(0, 1) - csr_.rowptr.slice(0, 0, csr_.rows);
    return sum(axis) / counts.clamp_min(1).to(at::toRealValueType(dtype()));
  }
  [[nodiscard]] at::Tensor prod() const { return csr_.values.prod(); }
  [[nodiscard]] at::Tensor max() const {
    check_not_empty("max");
    return csr_.values.max();
  }
  [[nodiscard]] at::Tensor min() const {
    check_not_empty("min");
    return csr_.values.min();
  }
  /// "fro": sqrt of the sum of |v|^2; "1": largest column sum of |v|; "inf": largest row sum of
  /// |v|. A real 0-d tensor.
  [[nodiscard]] at::Tensor norm(std::string_view ord = "fro") const {
    const auto a = abs();
    if (ord == "fro") return a.csr_.values.square().sum().sqrt();
    if (ord == "1" || ord == "inf") {
      const auto lines = a.sum(ord == "1" ? 0 : 1);
      return lines.numel() == 0 ? at::zeros({}, lines.options()) : lines.max();
    }
    throw Error("SparseTensor::norm: expected ord \"fro\", \"1\" or \"inf\", found \"" + std::string(ord) + "\"");
  }

 private:
  explicit SparseTensor(Csr a) : csr_(std::move(a)) {}

  static void check_dtype(at::ScalarType t) {
    if (t != at::kFloat && t != at::kDouble && t != at::kComplexFloat && t != at::kComplexDouble)
      throw Error(
          std::string("SparseTensor: expected values of float32, float64, complex64 or complex128, found ") +
          c10::toString(t));
  }

  static Csr checked_coo_to_csr(const at::Tensor& values, const at::Tensor& row,
                                const at::Tensor& col, std::array<std::int64_t, 2> shape) {
    if (shape[0] < 0 || shape[1] < 0)
      throw Error("SparseTensor: expected a shape of sizes >= 0, found (" + std::to_string(shape[0]) + ", " +
                  std::to_string(shape[1]) + ")");
    if (!values.defined() || !row.defined() || !col.defined())
      throw Error("SparseTensor: expected defined values, row and col tensors, found an undefined one");
    check_dtype(values.scalar_type());
    if (at::isFloatingType(row.scalar_type()) || at::isComplexType(row.scalar_type()) ||
        at::isFloatingType(col.scalar_type()) || at::isComplexType(col.scalar_type()))
      throw Error(std::string("SparseTensor: expected integer row and col tensors, found ") +
                  c10::toString(row.scalar_type()) + " and " + c10::toString(col.scalar_type()));
    if (values.device() != row.device() || values.device() != col.device() || values.is_meta())
      throw Error("SparseTensor: expected values, row and col on one device that holds data, found them on " +
                  std::string(c10::str(values.device(), ", ", row.device(), ", ", col.device())));
    return detail::coo_to_csr(values, row, col, shape[0], shape[1]);
  }

  static std::int64_t normalize_axis(std::int64_t axis) {
    if (axis == 0 || axis == -2) return 0;
    if (axis == 1 || axis == -1) return 1;
    throw Error("SparseTensor::sum: expected axis 0, 1, -1 or -2, found " + std::to_string(axis));
  }

  /// The values in the dtype a product with `x` computes in (torch's type promotion).
  [[nodiscard]] at::Tensor promoted_values(const at::Tensor& x) const {
    const auto t = at::promote_types(dtype(), x.scalar_type());
    return t == dtype() ? csr_.values : csr_.values.to(t);
  }

  void check_same_pattern(const SparseTensor& b, const char* op) const {
    const bool same =
        csr_.rows == b.csr_.rows && csr_.cols == b.csr_.cols && nnz() == b.nnz() &&
        (csr_.rowptr.is_same(b.csr_.rowptr) || at::equal(csr_.rowptr, b.csr_.rowptr)) &&
        (csr_.col.is_same(b.csr_.col) || at::equal(csr_.col, b.csr_.col));
    if (!same)
      throw Error(std::string("SparseTensor ") + op +
                  " SparseTensor: expected identical sparsity patterns, found shapes (" +
                  std::to_string(csr_.rows) + ", " + std::to_string(csr_.cols) + ") with nnz " +
                  std::to_string(nnz()) + " and (" + std::to_string(b.csr_.rows) + ", " +
                  std::to_string(b.csr_.cols) + ") with nnz " + std::to_string(b.nnz()) +
                  (csr_.rows == b.csr_.rows && csr_.cols == b.csr_.cols && nnz() == b.nnz()
                       ? " at different positions"
                       : ""));
  }

  void check_not_empty(const char* what) const {
    if (nnz() == 0)
      throw Error(std::string("SparseTensor::") + what + ": expected stored values, found a matrix without any");
  }

  [[nodiscard]] bool matches_transpose(double atol, double rtol, bool conjugate) const {
    if (!is_square()) return false;
    // Both matrices on the union pattern: A with zeros at A^T's entries and vice versa, assembled
    // by the same sort, so their values line up entry by entry.
    const auto [v, row, col] = detail::csr_to_coo(csr_);
    const auto vt = conjugate ? v.conj().resolve_conj() : v;
    const auto rows = at::cat({row, col}), cols = at::cat({col, row});
    const auto zeros = at::zeros_like(v);
    const auto a = detail::coo_to_csr(at::cat({v, zeros}), rows, cols, csr_.rows, csr_.cols);
    const auto at_ = detail::coo_to_csr(at::cat({zeros, vt}), rows, cols, csr_.rows, csr_.cols);
    return at::allclose(a.values, at_.values, rtol, atol);
  }

  Csr csr_;
};

}  // namespace einshard::sparse
