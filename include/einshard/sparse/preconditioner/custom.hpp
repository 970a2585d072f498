#pragma once
/// @file
/// A preconditioner you bring (`PreconditionerFn`, a callable on DVectors) as the Krylov kernels
/// apply it. Each application checks what the callable returned and agrees on it across the ranks
/// (one small all-reduce), so a wrong result is the same Error on every rank instead of a hang.

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/preconditioner/options.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse {

namespace detail {

class CustomPreconditionerOp final : public PreconditionerOp {
 public:
  CustomPreconditionerOp(PreconditionerFn fn, std::shared_ptr<const RowLayout> layout)
      : fn_(std::move(fn)), layout_(std::move(layout)) {}

  void apply(const at::Tensor& r, at::Tensor& z) const override {
    std::string fault;
    DVector out;
    try {
      out = fn_(DVector(layout_, r));
      if (!out.defined() || out.local().dim() != 1 || out.local().numel() != r.numel())
        fault = "DSparseTensor::solve: expected custom_preconditioner to return a DVector in the matrix's partition (" +
                std::to_string(r.numel()) + " owned entries here), found " +
                (out.defined() ? "shape " + std::string(c10::str(out.local().sizes())) : std::string("an undefined one"));
    } catch (const Error& e) {
      fault = std::string("DSparseTensor::solve: expected custom_preconditioner to return, found it threw: ") + e.what();
    }
    comm::raise_if_any(layout_->comm(), fault);
    z.copy_(out.local().detach());
  }
  [[nodiscard]] std::string name() const override { return "custom"; }

 private:
  PreconditionerFn fn_;
  std::shared_ptr<const RowLayout> layout_;
};

}  // namespace detail
}  // namespace einshard::sparse
