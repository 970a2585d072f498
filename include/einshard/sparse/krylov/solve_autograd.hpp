#pragma once
/// @file
/// The differentiable solve: x = A⁻¹ b recorded as one autograd node whatever the iteration count.
/// Its backward is one solve with Aᴴ (λ = A⁻ᴴ ∂L/∂x, by the caller's method, preconditioner and
/// tolerances), then ∂L/∂b = λ and ∂L/∂a_ij = −λ_i conj(x_j) on the stored pattern — torch's
/// convention for `linalg_solve`, so gradients equal a dense solve's up to the tolerance.

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <vector>
#include <utility>

#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/csr_autograd.hpp"

namespace einshard::sparse::detail {

/// What the backward needs of the matrix, as closures over it (collective calls).
struct AdjointSolver : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor& g)> solve;        ///< λ = A⁻ᴴ g, owned slices
  std::function<at::Tensor(const at::Tensor& x)> with_ghosts;  ///< owned x -> x with its halo
  Csr pattern;                                                 ///< the local rows (values unused)
  /// Set for a least-squares solve (solve() with lsqr/lsmr on a rectangular matrix, or lsqr() and
  /// lsmr()): g -> {z, λ}, λ = (AᴴA + damp² I)⁻¹ g and z = A λ (krylov/methods.hpp), used instead
  /// of `solve`; `residual` is r = b − A x (owned rows).
  std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor& g)> least_squares;
  at::Tensor residual;
  /// A batch of systems on one local pattern (solve_batch): b and x (batch, n) or (batch, n, k),
  /// values (batch, nnz); `solve` gives λ for every system, `with_ghosts` is unused.
  bool batch = false;
};

struct SolveFunction : torch::autograd::Function<SolveFunction> {
  /// `x`: the solution, solved already (detached); `b` and `values` are the differentiable inputs.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& /*b*/,
                            const at::Tensor& /*values*/, const at::Tensor& x,
                            const c10::intrusive_ptr<AdjointSolver>& adjoint) {
    ctx->saved_data["adjoint"] = at::IValue::make_capsule(adjoint);
    ctx->save_for_backward({x});
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto adjoint = c10::static_intrusive_pointer_cast<AdjointSolver>(ctx->saved_data["adjoint"].toCapsule());
    const auto x = ctx->get_saved_variables()[0];
    if (adjoint->batch) {
      const auto lambda = adjoint->solve(grads[0].contiguous());
      std::vector<at::Tensor> per_system;
      for (std::int64_t b = 0; b < x.size(0); ++b)
        per_system.push_back(sampled_product(adjoint->pattern, -lambda[b], x[b].conj()));
      const auto grad_values = per_system.empty() ? at::zeros({0, adjoint->pattern.col.numel()}, x.options())
                                                  : at::stack(per_system);
      return {lambda, grad_values, at::Tensor(), at::Tensor()};
    }
    // Both halves run on every rank whatever it needs: each is collective.
    if (adjoint->least_squares) {
      // ∂L/∂b = z, ∂L/∂a_ij = r_i conj(λ_j) − z_i conj(x_j): the square case's formula when r = 0.
      const auto [z, lambda] = adjoint->least_squares(grads[0].contiguous());
      const auto grad_values = sampled_product(adjoint->pattern, adjoint->residual, adjoint->with_ghosts(lambda).conj()) -
                               sampled_product(adjoint->pattern, z, adjoint->with_ghosts(x).conj());
      return {z, grad_values, at::Tensor(), at::Tensor()};
    }
    const auto lambda = adjoint->solve(grads[0].contiguous());
    const auto grad_values = sampled_product(adjoint->pattern, -lambda, adjoint->with_ghosts(x).conj());
    return {lambda, grad_values, at::Tensor(), at::Tensor()};
  }
};

}  // namespace einshard::sparse::detail
