#pragma once
/// @file
/// `detail::Operator`: what a Krylov method needs of a matrix — its row partition and a product
/// y = A x on owned slices that also returns the local part of <w, y>, so a solver gets the
/// product and the dot of the same iteration in one pass.

#include <ATen/ATen.h>

#include <complex>
#include <memory>

#include "einshard/sparse/layout.hpp"

namespace einshard::sparse::detail {

class Operator {
 public:
  virtual ~Operator() = default;
  [[nodiscard]] virtual const std::shared_ptr<const RowLayout>& layout() const = 0;
  /// y = A x (x, y: owned slices, contiguous, the operator's dtype); returns this rank's partial
  /// sum of conj(w_i) y_i when `w` is defined (zero otherwise). Collective.
  virtual std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const = 0;
};

}  // namespace einshard::sparse::detail
