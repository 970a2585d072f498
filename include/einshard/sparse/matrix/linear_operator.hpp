#pragma once
/// @file
/// `LinearOperator`: an operator you bring — a matrix-free product (a stencil written with
/// `einhalo`, a composition of distributed matrices, any callable on DVectors), optionally its
/// adjoint, and its partitions — solved by the same Krylov and least-squares code as a
/// `DSparseTensor` (SciPy's `LinearOperator(shape, matvec, rmatvec)`).
///
/// ```cpp
/// sp::LinearOperator A(layout, [&](const sp::DVector& x) { return stencil(x); });
/// auto s = A.solve(b, {.method = sp::Method::cg, .custom_preconditioner = jacobi});
/// sp::LinearOperator R(range, domain, matvec, rmatvec);   // rectangular: lsqr / lsmr
/// auto q = R.lsqr(b, {.damp = 0.1});
/// ```
///
/// The callables are called collectively (every rank, same step), so they may communicate. Each
/// product checks what the callable returned (a vector of the range's owned length, or an `Error`
/// it threw) and agrees on it across the ranks (one small all-reduce per product), so a bad result
/// is the same `Error` on every rank instead of a hang. The built-in preconditioners need a
/// matrix's entries; with an operator, pass `custom_preconditioner`.

#include <ATen/ATen.h>

#include <array>
#include <complex>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"

namespace einshard::sparse {

namespace detail {
struct SolvePipeline;  // krylov/solve.hpp
}  // namespace detail

/// A product on DVectors: y = A x (`matvec`, x in the domain, y in the range) or x = Aᴴ y
/// (`rmatvec`, the adjoint, conjugate transpose for complex values, as SciPy's rmatvec; note that
/// `DSparseTensor::rmatvec` is Aᵀ, the same for real values). Collective.
using ProductFn = std::function<DVector(const DVector& x)>;

class LinearOperator final : public detail::Operator, public detail::SolveMembers<LinearOperator> {
 public:
  /// A square operator: x and A x in `layout`. `rmatvec` (Aᴴ) only for lsqr and lsmr.
  LinearOperator(std::shared_ptr<const RowLayout> layout, ProductFn matvec, ProductFn rmatvec = {})
      : LinearOperator(layout, layout, std::move(matvec), std::move(rmatvec)) {}
  /// A x in `range`, x in `domain` (a rectangular operator, or a square one whose columns are
  /// partitioned unlike its rows: least squares only).
  LinearOperator(std::shared_ptr<const RowLayout> range, std::shared_ptr<const RowLayout> domain, ProductFn matvec,
                 ProductFn rmatvec = {})
      : range_(std::move(range)), domain_(std::move(domain)), matvec_(std::move(matvec)), rmatvec_(std::move(rmatvec)) {
    if (!range_ || !domain_) throw Error("LinearOperator: needs the range and domain partitions");
    if (!matvec_) throw Error("LinearOperator: needs a matvec");
  }

  [[nodiscard]] std::array<std::int64_t, 2> shape() const { return {range_->global_size(), domain_->global_size()}; }
  [[nodiscard]] bool is_square() const { return shape()[0] == shape()[1]; }
  /// Whether an adjoint product was given (on this rank; lsqr and lsmr agree on it collectively).
  [[nodiscard]] bool has_adjoint() const { return static_cast<bool>(rmatvec_); }
  /// The range partition: A x, b of solve and lsqr.
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return range_; }
  /// The domain partition: x.
  [[nodiscard]] const std::shared_ptr<const RowLayout>& domain_layout() const override { return domain_; }

  /// y = A x, checked and agreed (see the file comment). Collective.
  [[nodiscard]] DVector matvec(const DVector& x) const {
    check(x, *domain_, "LinearOperator::matvec", "domain");
    auto y = at::empty({range_->local_size()}, x.local().options());
    call(matvec_, x.local().contiguous(), y, *domain_, "matvec");
    return {range_, y};
  }
  /// x = Aᴴ y. Collective; an Error on every rank when no rmatvec was given.
  [[nodiscard]] DVector rmatvec(const DVector& y) const {
    require_adjoint("LinearOperator::rmatvec");
    check(y, *range_, "LinearOperator::rmatvec", "range");
    auto x = at::empty({domain_->local_size()}, y.local().options());
    call(rmatvec_, y.local().contiguous(), x, *range_, "rmatvec");
    return {domain_, x};
  }
  friend DVector operator*(const LinearOperator& a, const DVector& x) { return a.matvec(x); }

  // solve, lsqr and lsmr (detail::SolveMembers, defined in krylov/solve.hpp): as a matrix's, by
  // the same code. `preconditioner` must stay `none` (pass `custom_preconditioner`); lsqr and lsmr
  // need rmatvec; the results are not recorded for autograd.

  // ---- what the Krylov code calls (owned slices, detail::Operator) ------------------------------
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    call(matvec_, x, y, *domain_, "matvec");
    return w.defined() ? detail::local_dot(w, y) : std::complex<double>{};
  }
  void apply_adjoint(const at::Tensor& y, at::Tensor& x) const override {
    require_adjoint("LinearOperator (adjoint product)");
    call(rmatvec_, y, x, *range_, "rmatvec");
  }

 private:
  friend struct detail::SolvePipeline;

  void check(const DVector& x, const RowLayout& l, const std::string& what, const char* side) const {
    detail::check_partition(x, l, what, "operator's", is_square() && domain_ == range_ ? "" : side,
                            "make it with the operator's layout() or domain_layout()");
  }

  /// Raises the same Error on every rank unless every rank was given an rmatvec.
  void require_adjoint(const std::string& what) const {
    comm::raise_if_any(range_->comm(), rmatvec_ ? std::string() : what +
                                                                      ": this operator has no adjoint product; "
                                                                      "construct it with an rmatvec (Aᴴ y)");
  }

  /// out = f(in), `in` an owned slice of `from`; `out` is written with f's result after every
  /// rank has checked its own (one all-reduce), so a fault is one Error everywhere.
  void call(const ProductFn& f, const at::Tensor& in, at::Tensor& out, const RowLayout& from, const char* name) const {
    std::string fault;
    try {
      const auto r = f(DVector(from_ptr(from), in));
      if (!r.defined() || r.local().dim() != 1 || r.local().numel() != out.numel())
        fault = std::string("LinearOperator: ") + name + " must return a vector of " + std::to_string(out.numel()) +
                " owned entries on this rank, got " +
                (r.defined() ? "shape " + std::string(c10::str(r.local().sizes())) : std::string("an undefined one"));
      else
        out.copy_(r.local().detach());
    } catch (const std::exception& e) {
      fault = std::string("LinearOperator: ") + name + " failed: " + e.what();
    }
    comm::raise_if_any(range_->comm(), fault);
  }

  [[nodiscard]] const std::shared_ptr<const RowLayout>& from_ptr(const RowLayout& l) const {
    return &l == domain_.get() ? domain_ : range_;
  }

  std::shared_ptr<const RowLayout> range_, domain_;
  ProductFn matvec_, rmatvec_;
};

}  // namespace einshard::sparse
