#pragma once
/// @file
/// One autograd node for every communication step, of the notation and of the sparse part alike: a `CommOp` says what its forward and its
/// backward do, and `apply` records it in the autograd graph, so the backward communication runs in
/// `loss.backward()` exactly paired with the forward one.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <utility>

#include "einshard/config.hpp"

// Compiled (config.hpp), the autograd node and <torch/csrc/autograd/custom_function.h> (a second
// of every translation unit that includes it) stay inside einshard_compiled.
#if !EINSHARD_DECLARE_ONLY
#include <torch/csrc/autograd/custom_function.h>
#endif

namespace einshard::comm {

/// A forward/backward pair. Held by the autograd graph until backward has run.
struct CommOp : torch::CustomClassHolder {
  [[nodiscard]] virtual at::Tensor forward(const at::Tensor& x) const = 0;
  [[nodiscard]] virtual at::Tensor backward(const at::Tensor& grad) const = 0;
};

#if !EINSHARD_DECLARE_ONLY
namespace detail {

struct CommFunction : torch::autograd::Function<CommFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const c10::intrusive_ptr<CommOp>& op) {
    ctx->saved_data["op"] = at::IValue::make_capsule(op);
    return op->forward(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto op = c10::static_intrusive_pointer_cast<CommOp>(ctx->saved_data["op"].toCapsule());
    // Gradients are materialized (an unused output's gradient arrives as zeros), so every rank
    // enters the backward collective.
    return {op->backward(grads[0]), at::Tensor()};
  }
};

}  // namespace detail
#endif  // !EINSHARD_DECLARE_ONLY

/// Whether an operation on `x` is recorded for backward (grad mode on and `x` needs a gradient).
inline bool records(const at::Tensor& x) { return at::GradMode::is_enabled() && x.requires_grad(); }

/// Runs `op` forward on `x`; differentiable through `op`'s backward. When nothing is recorded the
/// forward runs directly: the autograd wrapper has a fixed cost per step even under no grad.
EINSHARD_INLINE at::Tensor apply_op(const at::Tensor& x, const c10::intrusive_ptr<CommOp>& op);

#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor apply_op(const at::Tensor& x, const c10::intrusive_ptr<CommOp>& op) {
  if (!records(x)) return op->forward(x);
  return detail::CommFunction::apply(x, op);
}

#endif  // !EINSHARD_DECLARE_ONLY

}  // namespace einshard::comm
