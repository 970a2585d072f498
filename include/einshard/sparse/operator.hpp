#pragma once
/// @file
/// `detail::Operator`: what a Krylov method needs of a matrix — its row partition and a product
/// y = A x on owned slices that also returns the local part of <w, y>, so a solver gets the
/// product and the dot of the same iteration in one pass; the least-squares methods also need
/// the domain partition and the adjoint product x = Aᴴ y.

#include <ATen/ATen.h>

#include <complex>
#include <memory>

#include "einshard/error.hpp"

#include "einshard/sparse/layout.hpp"

namespace einshard::sparse::detail {

class Operator {
 public:
  virtual ~Operator() = default;
  [[nodiscard]] virtual const std::shared_ptr<const RowLayout>& layout() const = 0;
  /// y = A x (x, y: owned slices, contiguous, the operator's dtype); returns this rank's partial
  /// sum of conj(w_i) y_i when `w` is defined (zero otherwise). Collective.
  virtual std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const = 0;
  /// Y = A X for k vectors at once, X and Y (owned, k) row-major; by default one product per
  /// column (an operator that can do better, as DSparseTensor with one halo exchange for all k,
  /// overrides it). Collective.
  virtual void apply_block(const at::Tensor& x, at::Tensor& y) const {
    for (std::int64_t j = 0; j < x.size(1); ++j) {
      auto yj = at::empty({y.size(0)}, y.options());
      apply(x.select(1, j).contiguous(), yj, {});
      y.select(1, j).copy_(yj);
    }
  }
  /// The partition of x (the columns); the row partition unless the operator is rectangular.
  [[nodiscard]] virtual const std::shared_ptr<const RowLayout>& domain_layout() const { return layout(); }
  /// x = Aᴴ y (y: owned slice of the range, x: of the domain). Collective.
  virtual void apply_adjoint(const at::Tensor& /*y*/, at::Tensor& /*x*/) const {
    throw Error("Operator::apply_adjoint: this operator has no adjoint product");
  }
};

}  // namespace einshard::sparse::detail
