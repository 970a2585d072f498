#pragma once
/// @file
/// Jacobi and l1-Jacobi: z = s ⊙ r for a fixed vector s (the inverse diagonal or the inverse l1
/// row norms), fused by the Krylov methods into their vector updates; and the identity (`none`).

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

class IdentityOp final : public PreconditionerOp {
 public:
  void apply(const at::Tensor& r, at::Tensor& z) const override {
    if (!z.is_same(r)) z.copy_(r);
  }
  [[nodiscard]] std::string name() const override { return "none"; }
};

/// Whether every rank's `scale` holds one and the same positive real value (a rank without rows
/// agrees with any; no rows anywhere is not uniform). Collective over `comm`: one all-reduce.
inline bool uniform_positive(const at::Tensor& scale, MPI_Comm comm) {
  if (scale.is_complex()) return false;  // the dtype is the matrix's: the same on every rank
  constexpr double none = std::numeric_limits<double>::infinity();
  std::array<double, 2> low_and_negated_high{none, none};
  if (scale.numel() > 0) {
    const auto [low, high] = at::aminmax(scale);
    low_and_negated_high = {low.item<double>(), -high.item<double>()};
  }
  comm::all_reduce_values(std::span<double>(low_and_negated_high), comm::Reduction::min, comm);
  const auto [low, negated_high] = low_and_negated_high;
  return low > 0 && low == -negated_high;
}

/// z = s ⊙ r for a fixed vector s (Jacobi and l1-Jacobi). Collective construction (`uniform`).
class DiagonalOp final : public PreconditionerOp {
 public:
  DiagonalOp(at::Tensor scale, std::string name, MPI_Comm comm)
      : scale_(std::move(scale)), name_(std::move(name)), uniform_(uniform_positive(scale_, comm)) {}
  void apply(const at::Tensor& r, at::Tensor& z) const override { at::mul_out(z, r, scale_); }
  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] at::Tensor diagonal() const override { return scale_; }
  [[nodiscard]] bool uniform() const override { return uniform_; }

 private:
  at::Tensor scale_;
  std::string name_;
  bool uniform_;
};

/// The owned diagonal (duplicates were summed at assembly), or this rank's fault naming `who`
/// when a row stores a zero one or none (local: call it inside agreed_setup).
inline at::Tensor nonzero_diagonal(const LocalRows& rows, const std::string& who) {
  check_rows(rows);
  auto d = uses_generic(rows.a.values) ? generic_diagonal(rows.a) : diagonal(rows.a);
  const auto fault = first_bad_row(d == 0, who + " preconditioner setup: expected a nonzero diagonal, found a zero one in");
  if (!fault.empty()) throw Error(fault);
  return d;
}

/// 1 / a_ii over the owned rows. The sign is kept, so a negative-definite A gets a
/// negative-definite M, which CG handles like the positive case (the reference clamps the diagonal
/// to ≥ 1e-30, which breaks exactly those matrices). Only an exactly zero diagonal is a fault.
inline at::Tensor inverse_diagonal(const LocalRows& rows, const std::string& who = "jacobi") {
  at::Tensor inv;
  agreed_setup(rows.comm, [&] { inv = nonzero_diagonal(rows, who).reciprocal(); });
  return inv;
}

/// l1-Jacobi: d_i = Σ_j |a_ij| over every stored column of the row, owned and halo, the full ℓ1
/// row norm of hypre's l1-scaled Jacobi (hypre_ParCSRComputeL1Norms, option 1) and of the
/// reference's "jacobi_l1". d_i ≥ |a_ii| + Σ_{j≠i} |a_ij|, so for symmetric A the matrix D − A is
/// diagonally dominant, hence positive semidefinite: the smoother converges without damping, and M
/// is SPD for any A (also indefinite, e.g. for MINRES). Only an all-zero row is a fault.
inline at::Tensor inverse_l1_norms(const LocalRows& rows) {
  at::Tensor inv;
  agreed_setup(rows.comm, [&] {
    check_rows(rows);
    const auto [values, row, col] = csr_to_coo(rows.a);
    const auto magnitude = values.abs();
    const auto norms = at::zeros({rows.n_owned}, magnitude.options()).index_add_(0, row, magnitude);
    const auto fault = first_bad_row(norms == 0, "l1_jacobi preconditioner setup: expected nonzero rows, found an all-zero one at");
    if (!fault.empty()) throw Error(fault);
    inv = norms.reciprocal().to(rows.a.dtype());
  });
  return inv;
}

}  // namespace einshard::sparse::detail
