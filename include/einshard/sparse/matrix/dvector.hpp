#pragma once
/// @file
/// `DVector`: the owned slice of a distributed vector together with its partition, so arithmetic
/// checks that partitions match and a gathered result is always in global order, whatever the
/// partition method. Reductions (dot, norm) are one all-reduce and are differentiable.

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>

#include "einshard/error.hpp"
#include "einshard/comm/autograd.hpp"
#include "einshard/comm/ops.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"

namespace einshard::sparse {

namespace detail {

/// Owned slices -> the global vector on every rank. Backward: each rank keeps the gradient of its
/// own rows (the global result is replicated, so its gradient is the same on every rank).
struct GatherRowsOp final : comm::CommOp {
  std::shared_ptr<const RowLayout> layout;
  explicit GatherRowsOp(std::shared_ptr<const RowLayout> l) : layout(std::move(l)) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return layout->gather(x); }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override { return layout->scatter(g); }
};

}  // namespace detail

class DVector {
 public:
  DVector() = default;
  /// `local`: this rank's owned entries, in the layout's (ascending global) order: (n_local,) for
  /// one vector, (n_local, k) for k of them (a block of right-hand sides or solutions).
  DVector(std::shared_ptr<const RowLayout> layout, at::Tensor local)
      : layout_(std::move(layout)), local_(std::move(local)) {
    if (!layout_) throw Error("DVector: no layout");
    check_local(local_, "DVector");
  }

  /// This rank's owned entries. Its values may be changed in place (`local().zero_()`); a new slice
  /// goes through `set_local`, which keeps the length the layout says.
  [[nodiscard]] const at::Tensor& local() const { return local_; }
  /// Replaces the owned slice (same length; e.g. `x.set_local(x.local().detach().requires_grad_())`).
  void set_local(at::Tensor local) {
    check_local(local, "DVector::set_local");
    local_ = std::move(local);
  }
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const { return layout_; }
  [[nodiscard]] std::int64_t size() const { return layout_->global_size(); }
  [[nodiscard]] std::int64_t local_size() const { return local_.size(0); }
  /// Vectors held: 1, or k for an (n_local, k) block.
  [[nodiscard]] std::int64_t columns() const { return local_.dim() == 2 ? local_.size(1) : 1; }
  [[nodiscard]] at::ScalarType dtype() const { return local_.scalar_type(); }
  [[nodiscard]] bool defined() const { return layout_ != nullptr; }

  /// The whole vector in global order, on every rank (collective; differentiable).
  [[nodiscard]] at::Tensor full_tensor() const {
    return comm::apply_op(local_, c10::make_intrusive<detail::GatherRowsOp>(layout_));
  }

  [[nodiscard]] DVector like(at::Tensor local) const { return {layout_, std::move(local)}; }
  [[nodiscard]] DVector clone() const { return like(local_.clone()); }
  [[nodiscard]] DVector to(at::ScalarType dtype) const { return like(local_.to(dtype)); }

  /// this += alpha * x, in place.
  DVector& axpy(const at::Scalar& alpha, const DVector& x) {
    check_same(x, "axpy");
    local_.add_(x.local_, alpha);
    return *this;
  }

  /// Throws unless `local` is an owned slice of this vector's layout.
  void check_local(const at::Tensor& local, const char* op) const {
    if (!local.defined() || (local.dim() != 1 && local.dim() != 2) || local.size(0) != layout_->local_size())
      throw Error(std::string(op) + ": expected an owned slice of shape (" + std::to_string(layout_->local_size()) +
                  ") or (" + std::to_string(layout_->local_size()) + ", k), got " +
                  (local.defined() ? "shape " + std::string(c10::str(local.sizes())) : std::string("an undefined tensor")));
  }

  /// Throws unless `other` has the same partition.
  void check_same(const DVector& other, const char* op) const {
    if (!layout_ || !other.layout_) throw Error(std::string("DVector ") + op + ": undefined vector");
    if (layout_ == other.layout_) return;
    if (!layout_->same_as(*other.layout_))
      throw Error(std::string("DVector ") + op + ": expected vectors of one partition, but they have different partitions (" +
                  layout_->difference(*other.layout_) + "); redistribute one first");
  }

  friend DVector operator+(const DVector& a, const DVector& b) { a.check_same(b, "+"); return a.like(a.local_ + b.local_); }
  friend DVector operator-(const DVector& a, const DVector& b) { a.check_same(b, "-"); return a.like(a.local_ - b.local_); }
  /// Elementwise product.
  friend DVector operator*(const DVector& a, const DVector& b) { a.check_same(b, "*"); return a.like(a.local_ * b.local_); }
  friend DVector operator/(const DVector& a, const DVector& b) { a.check_same(b, "/"); return a.like(a.local_ / b.local_); }
  friend DVector operator*(const at::Scalar& s, const DVector& a) { return a.like(a.local_ * s); }
  friend DVector operator*(const DVector& a, const at::Scalar& s) { return a.like(a.local_ * s); }
  friend DVector operator/(const DVector& a, const at::Scalar& s) { return a.like(a.local_ / s); }
  friend DVector operator-(const DVector& a) { return a.like(-a.local_); }

  /// Euclidean norm, replicated, as a 0-dim tensor.
  [[nodiscard]] at::Tensor norm() const {
    const auto sq = local_.is_complex() ? at::real(at::vdot(local_, local_)) : at::dot(local_, local_);
    return at::sqrt(comm::apply_op(sq, c10::make_intrusive<comm::AllReduceOp>(layout_->comm())));
  }

 private:
  std::shared_ptr<const RowLayout> layout_;
  at::Tensor local_;
};

/// <a, b> (conjugating a when complex), replicated on every rank, as a 0-dim tensor.
inline at::Tensor dot(const DVector& a, const DVector& b) {
  a.check_same(b, "dot");
  const auto& x = a.local();
  const auto partial = x.is_complex() ? at::vdot(x, b.local()) : at::dot(x, b.local());
  return comm::apply_op(partial, c10::make_intrusive<comm::AllReduceOp>(a.layout()->comm()));
}
inline at::Tensor norm(const DVector& a) { return a.norm(); }

}  // namespace einshard::sparse
