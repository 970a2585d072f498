#pragma once
/// @file
/// The truncated Neumann series preconditioner over the distributed operator.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cmath>
#include <span>
#include <string>

#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/preconditioner/jacobi.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// Truncated Neumann series (torch-sla's "polynomial"): z = Σ_{k<d} (I − S A)^k S r, evaluated as
/// d − 1 damped Richardson steps from z = S r (z += S (r − A z)), each one distributed matvec.
/// S = w D⁻¹ with 1/w = τ = ‖D⁻¹A‖_∞ = max_i Σ_j |a_ij / a_ii| (`neumann_jacobi`, the default),
/// or S = I/τ with τ = ‖A‖_∞ as torch-sla. The Jacobi scaling makes it invariant to a symmetric
/// diagonal rescaling of A and keeps the sign of a negative-definite A (torch-sla's I/‖A‖_∞ then
/// gives an M of the wrong sign); for a constant diagonal, as Poisson's, the two coincide. τ runs
/// over the whole rows (halo columns included), so it is the global ∞-norm: a bound on the spectral
/// radius of D⁻¹A (resp. A), which keeps M SPD for SPD A. torch-sla takes it from the owned×owned
/// block only, which can underestimate it. Setup: O(nnz) and one all-reduce.
class NeumannOp final : public PreconditionerOp {
 public:
  NeumannOp(const LocalRows& rows, Matvec matvec, const PreconditionerOptions& opts)
      : matvec_(std::move(matvec)), degree_(opts.neumann_degree), jacobi_(opts.neumann_jacobi) {
    at::Tensor row_scale;
    agreed_setup(rows.comm, [&] {
      if (opts.neumann_degree < 1)
        throw Error("neumann options: expected neumann_degree ≥ 1, found " + std::to_string(opts.neumann_degree));
      check_rows(rows);
    });
    if (jacobi_) row_scale = inverse_diagonal(rows, "neumann");
    // max_i Σ_j |s_i a_ij| over this rank's rows, and the row count: a matrix of no rows needs no τ.
    double local[2] = {0.0, static_cast<double>(rows.n_owned)};
    if (rows.n_owned > 0) {
      const auto [values, row, col] = csr_to_coo(rows.a);
      const auto magnitude = values.abs().to(at::kDouble);
      auto norms = at::zeros({rows.n_owned}, magnitude.options()).index_add_(0, row, magnitude);
      if (jacobi_) norms.mul_(row_scale.abs().to(at::kDouble));
      local[0] = norms.max().item<double>();
      if (!std::isfinite(local[0])) local[0] = HUGE_VAL;  // MPI_MAX need not propagate a NaN
    }
    comm::all_reduce_values(std::span<double>(local, 2), comm::Reduction::max, rows.comm);
    tau_ = local[0];
    if (local[1] > 0 && !(tau_ > 0 && std::isfinite(tau_)))
      throw Error("neumann preconditioner setup: expected a nonzero finite ∞-norm" +
                  std::string(jacobi_ ? " of D⁻¹A" : " of A") + ", found " + std::to_string(tau_));
    if (!(tau_ > 0)) tau_ = 1;
    scale_ = jacobi_ ? row_scale.div(tau_)
                     : at::full({rows.n_owned}, 1.0 / tau_, rows.a.values.options());
    tmp_ = at::empty({rows.n_owned}, rows.a.values.options());
  }

  void apply(const at::Tensor& r, at::Tensor& z) const override {
    at::Tensor rhs = r;
    if (degree_ > 1 && z.is_same(r)) rhs = r.clone();  // r is read at every step
    at::mul_out(z, rhs, scale_);
    for (int k = 1; k < degree_; ++k) {
      matvec_(z, tmp_);
      tmp_.neg_().add_(rhs);
      z.addcmul_(tmp_, scale_);
    }
  }
  [[nodiscard]] std::string name() const override {
    return "neumann(" + std::to_string(degree_) + (jacobi_ ? ", jacobi)" : ")");
  }
  /// With one term M⁻¹ is the diagonal S, which the Krylov methods fuse into their updates.
  [[nodiscard]] at::Tensor diagonal() const override { return degree_ == 1 ? scale_ : at::Tensor(); }
  [[nodiscard]] double tau() const { return tau_; }

 private:
  Matvec matvec_;
  int degree_;
  bool jacobi_;
  double tau_ = 1;
  at::Tensor scale_;
  mutable at::Tensor tmp_;
};

}  // namespace einshard::sparse::detail
