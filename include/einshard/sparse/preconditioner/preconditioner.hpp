#pragma once
/// @file
/// Preconditioners of the distributed Krylov solvers: z = M⁻¹ r on each rank's owned slice.
///
/// | kind           | M⁻¹                                                   | setup            | apply          |
/// |----------------|-------------------------------------------------------|------------------|----------------|
/// | `none`         | identity                                              | –                | copy           |
/// | `jacobi`       | 1 / a_ii (sign kept)                                  | local            | 1 multiply     |
/// | `l1_jacobi`    | 1 / Σ_j \|a_ij\| over owned and halo columns          | local            | 1 multiply     |
/// | `block_jacobi` | (L U)⁻¹ of ILU(0) (or (L Lᵀ)⁻¹ of IC(0)) of the owned×owned block | local | 2 sweeps |
/// | `chebyshev`    | q(D⁻¹A) D⁻¹, q the Chebyshev approximation of 1/λ     | Lanczos, collective | degree distributed matvecs |
/// | `ssor`         | (2−ω)(D/ω+U)⁻¹(D/ω)(D/ω+L)⁻¹ of the owned×owned block | local            | 2 sweeps       |
/// | `neumann`      | Σ_{k<d} (I − S A)^k S, S = D⁻¹/‖D⁻¹A‖_∞ (or I/‖A‖_∞)  | 1 all-reduce     | d − 1 distributed matvecs |
/// | `amg`          | one BoomerAMG V-cycle over all ranks (hypre, amg.hpp) | collective | collective |
///
/// Jacobi, l1-Jacobi, block Jacobi and SSOR ignore the coupling to other ranks (block Jacobi and
/// SSOR drop the halo columns; l1-Jacobi counts them in its row norm), so they need no
/// communication when applied; Chebyshev and Neumann use the full distributed operator. Setup
/// faults (a zero diagonal, a failed pivot, a bad option) found on any rank raise the same `Error`
/// on every rank of `rows.comm`.
///
/// This header holds what every kind shares: the operator interface (`PreconditionerOp`), the rows
/// a setup reads, and the rule that a setup fault on any rank is an Error on every rank. One
/// header per kind beside it; `factory.hpp` makes one from its `Preconditioner` value.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/preconditioner/options.hpp"

namespace einshard::sparse::detail {

/// The owned rows of this rank in local column numbering: columns [0, n_owned) are the owned
/// entries of x (in the order of the rows), [n_owned, a.cols) the halo.
struct LocalRows {
  const Csr& a;
  std::int64_t n_owned;
  MPI_Comm comm;
};

/// The distributed y = A x on owned slices (collective over the matrix's communicator).
using Matvec = std::function<void(const at::Tensor& x_owned, at::Tensor& y_owned)>;

/// z = M⁻¹ r. `r` and `z` are owned-length, contiguous, of the matrix's dtype; `z` is written.
struct PreconditionerOp {
  virtual ~PreconditionerOp() = default;
  virtual void apply(const at::Tensor& r, at::Tensor& z) const = 0;
  [[nodiscard]] virtual std::string name() const = 0;
  /// M⁻¹ as a vector when it is diagonal (undefined otherwise), so a Krylov method can fuse it
  /// into its vector updates instead of applying it in a pass of its own.
  [[nodiscard]] virtual at::Tensor diagonal() const { return {}; }
  /// Whether M⁻¹ = c I for one c > 0 on every rank (Jacobi of a matrix whose diagonal is one
  /// constant, as a constant-coefficient stencil's is): CG's iterates are then those without M (α
  /// grows by 1/c, p shrinks by c), so CG leaves it out and streams one vector less per row. The
  /// same answer on every rank.
  [[nodiscard]] virtual bool uniform() const { return false; }
  /// A multigrid hierarchy's levels and operator complexity (Σ nnz(A_l) / nnz(A_0)) for
  /// `SolveInfo`; {0, 0} for a preconditioner without one.
  [[nodiscard]] virtual std::pair<int, double> hierarchy() const { return {0, 0.0}; }
};

/// What CG applies of `m`: nothing (null) when M⁻¹ = c I (`PreconditionerOp::uniform`), since CG's
/// iterates are then those without it; `m` otherwise.
inline const PreconditionerOp* for_cg(const PreconditionerOp* m) { return m != nullptr && m->uniform() ? nullptr : m; }

/// A preconditioner applied in its own dtype (and on its own device) to vectors of another: AMG
/// (hypre runs in float64 on the host) for a float32 matrix or one on a device, and in a
/// single-precision phase of mixed CG; custom preconditioners (written for the matrix's dtype)
/// there too; those made for the single-precision copy in the working-precision phase.
class PrecisionAdapter final : public PreconditionerOp {
 public:
  PrecisionAdapter(std::shared_ptr<const PreconditionerOp> op, at::ScalarType own,
                   std::optional<at::Device> device = std::nullopt)
      : op_(std::move(op)), own_(own), device_(device) {}
  void apply(const at::Tensor& r, at::Tensor& z) const override {
    const auto own = r.options().dtype(own_).device(device_.value_or(r.device()));
    auto zw = at::empty(r.sizes(), own);
    op_->apply(r.to(own), zw);
    z.copy_(zw);
  }
  [[nodiscard]] std::string name() const override { return op_->name(); }
  [[nodiscard]] at::Tensor diagonal() const override { return op_->diagonal(); }
  [[nodiscard]] bool uniform() const override { return op_->uniform(); }
  [[nodiscard]] std::pair<int, double> hierarchy() const override { return op_->hierarchy(); }

 private:
  std::shared_ptr<const PreconditionerOp> op_;
  at::ScalarType own_;
  std::optional<at::Device> device_;
};

/// Runs a rank's local setup and turns any `Error` it throws into a collective one (the lowest
/// failing rank's message, prefixed by that rank, on every rank).
template <class F>
void agreed_setup(MPI_Comm comm, F&& local) {
  std::string fault;
  try {
    local();
  } catch (const Error& e) {
    fault = e.what();
  }
  comm::raise_if_any(comm, fault);
}

/// The preconditioners that run on any device: through the generic kernels (kernels.hpp), and amg
/// with its V-cycle on the host (amg.hpp).
inline constexpr const char* device_preconditioners =
    "none, jacobi, l1_jacobi, chebyshev, neumann, smoothed_aggregation or amg (its V-cycle on the host)";

/// Throws unless the rows are on the CPU: `who` runs on the host only (`why`). The device kind,
/// which every rank agreed on at assembly, is named without its index, so every rank throws the
/// same message.
inline void require_host(const LocalRows& rows, const std::string& who, const std::string& why) {
  const auto t = rows.a.values.device().type();
  if (t == c10::DeviceType::CPU) return;
  throw Error(who + " preconditioner: runs on the host only (" + why + "), found a matrix on " +
              c10::DeviceTypeName(t, /*lower_case=*/true) + "; on a device use " + device_preconditioners);
}

inline void check_rows(const LocalRows& rows) {
  if (!rows.a.values.defined() || !rows.a.rowptr.defined() || !rows.a.col.defined())
    throw Error("preconditioner setup: expected the local rows of a matrix, found an uninitialised block");
  if (rows.a.rows != rows.n_owned || rows.a.cols < rows.n_owned)
    throw Error("preconditioner setup: expected " + std::to_string(rows.n_owned) +
                " owned rows with at least as many local columns, found a " + std::to_string(rows.a.rows) + "x" + std::to_string(rows.a.cols) +
                " block");
}

/// A fault message naming the first owned row where `bad` (a bool vector) holds and how many do;
/// empty when none does.
inline std::string first_bad_row(const at::Tensor& bad, const std::string& what) {
  const auto count = bad.sum().item<std::int64_t>();
  if (count == 0) return {};
  const auto first = bad.nonzero().min().item<std::int64_t>();
  return what + " owned row " + std::to_string(first) + " (" + std::to_string(count) + " such row" +
         (count > 1 ? "s" : "") + " on this rank)";
}

}  // namespace einshard::sparse::detail
