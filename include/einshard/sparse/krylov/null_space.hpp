#pragma once
/// @file
/// Singular symmetric systems whose null space the caller knows (`SolveOptions::null_space`): the
/// constants of a pure Neumann problem, the rigid body modes of a floating structure. As PETSc's
/// MatSetNullSpace: b's component in the null space is removed before iterating (for a symmetric
/// A the range is the null space's orthogonal complement, so an inconsistent b is solved in the
/// least-squares sense), every application of a general preconditioner is projected onto the
/// complement, so the iterates gather no component along the null space however it pushes them
/// (the identity and a diagonal cannot amplify rounding's: they run unprojected, run_method), and
/// x is returned with none (the minimum-norm solution). Without it CG on a
/// singular A converges only for an exactly consistent b and returns x plus an arbitrary null
/// vector; with any inconsistency it diverges.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "einshard/comm/collectives.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// An orthonormal basis Q of the span of the caller's vectors (this rank's rows of it) and the
/// projection onto its orthogonal complement.
class NullSpace {
 public:
  /// `vectors`: (owned rows, m), or a vector for m = 1. Orthonormalized by Cholesky QR, twice
  /// (once loses orthogonality as the square of the basis's condition number: rigid body modes of
  /// coordinates far from the origin are nearly dependent). Collective; a fault on any rank (the
  /// shape, the dtype, m differing between ranks, dependent columns) is an Error on every rank.
  NullSpace(const at::Tensor& vectors, const RowLayout& layout, const at::Tensor& like, const std::string& what)
      : comm_(layout.comm()) {
    std::string fault;
    if (!vectors.defined() || (vectors.dim() != 1 && vectors.dim() != 2))
      fault = "expected this rank's rows of the null space as an (owned rows, m) tensor";
    else if (vectors.size(0) != layout.local_size())
      fault = "expected " + std::to_string(layout.local_size()) + " rows (this rank's), got " +
              std::to_string(vectors.size(0));
    else if (!at::isFloatingType(vectors.scalar_type()) && !at::isComplexType(vectors.scalar_type()))
      fault = "expected floating-point vectors, got " + std::string(c10::toString(vectors.scalar_type()));
    else if (vectors.is_complex() && !like.is_complex())
      fault = "complex vectors for a real system";
    const std::int64_t m = fault.empty() ? (vectors.dim() == 1 ? 1 : vectors.size(1)) : 0;
    if (fault.empty() && m == 0) fault = "expected at least one vector, got none";
    comm::raise_if_any(comm_, fault.empty() ? fault : what + ": null_space: " + fault);
    std::int64_t extremes[2] = {m, -m};  // the largest m and minus the smallest, in one call
    comm::all_reduce_values(std::span<std::int64_t>(extremes), comm::Reduction::max, comm_);
    if (extremes[0] != -extremes[1])
      throw Error(what + ": null_space: the ranks hold different numbers of vectors; give every rank the same m");
    q_ = vectors.detach().reshape({vectors.size(0), m}).to(like.device(), like.scalar_type()).contiguous();
    for (int pass = 0; pass < 2; ++pass) orthonormalize(m, what);
  }

  /// v − Q (Qᴴ v), in place, for v (owned rows) or (owned rows, k): one all-reduce of m (m·k)
  /// values. Returns Qᴴ v, the removed part's coefficients (summed, on v's device).
  at::Tensor remove(at::Tensor& v) const {
    const auto coefficients = comm::all_reduce(at::matmul(q_.conj().transpose(0, 1), v), comm_);
    if (v.dim() == 1)
      v.addmv_(q_, coefficients, 1, -1);
    else
      v.addmm_(q_, coefficients, 1, -1);
    return coefficients;
  }

 private:
  /// Q ← Q L⁻ᴴ with L Lᴴ = Qᴴ Q summed over the ranks (m² values), in double precision.
  void orthonormalize(std::int64_t m, const std::string& what) {
    const auto work = q_.is_complex() ? at::kComplexDouble : at::kDouble;
    const auto q = q_.to(work);
    const auto g = comm::all_reduce(at::matmul(q.conj().transpose(0, 1), q), comm_).cpu();
    const auto [l, info] = at::linalg_cholesky_ex(g);
    const double largest = at::real(at::diagonal(g)).max().item<double>();
    const bool dependent = info.item<int>() != 0 || !(largest > 0.0) ||
                           !(at::real(at::diagonal(l)).min().item<double>() > 1e-7 * std::sqrt(largest));
    if (comm::any_rank(dependent, comm_))
      throw Error(what + ": null_space: its " + std::to_string(m) +
                  " vectors are linearly dependent (or one is zero) over the ranks; give a basis");
    q_ = at::linalg_solve_triangular(l.conj().transpose(0, 1).to(q.device()), q, /*upper=*/true, /*left=*/false)
             .to(q_.scalar_type())
             .contiguous();
  }

  at::Tensor q_;
  MPI_Comm comm_;
};

/// The caller's preconditioner (or the identity) followed by the projection onto the null
/// space's complement. A general operator to the methods: the fused Jacobi kernels do not apply.
class ProjectedPreconditioner final : public PreconditionerOp {
 public:
  ProjectedPreconditioner(const PreconditionerOp* inner, const NullSpace& null_space)
      : inner_(inner), null_space_(null_space) {}
  void apply(const at::Tensor& r, at::Tensor& z) const override {
    if (inner_ != nullptr)
      inner_->apply(r, z);
    else if (!z.is_same(r))
      z.copy_(r);
    (void)null_space_.remove(z);
  }
  [[nodiscard]] std::string name() const override {
    return (inner_ != nullptr ? inner_->name() : std::string("none")) + " (null space projected out)";
  }
  [[nodiscard]] std::pair<int, double> hierarchy() const override {
    return inner_ != nullptr ? inner_->hierarchy() : std::pair<int, double>{0, 0.0};
  }

 private:
  const PreconditionerOp* inner_;
  const NullSpace& null_space_;
};

}  // namespace einshard::sparse::detail
