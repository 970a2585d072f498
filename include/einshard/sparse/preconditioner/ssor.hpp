#pragma once
/// @file
/// SSOR on each rank's owned×owned block, as PETSc's parallel PCSOR.

#include <ATen/ATen.h>
#include <mpi.h>

#include <string>

#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/preconditioner/ilu.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// Per-rank SSOR: one symmetric SOR sweep on the owned×owned block (halo columns dropped, as
/// PETSc's parallel PCSOR, which is local SOR too), stored as an ILU-shaped factor
/// (ssor_factor) and applied by block Jacobi's two sweeps. Setup and apply are O(nnz); SOR's
/// sweeps are sequential in the rows, which is why the distributed form is per rank: it is SSOR
/// on one rank and block SSOR on several. Symmetric (Hermitian) for symmetric A, definite when the
/// diagonal has one sign, so CG and MINRES may use it; the sign of the diagonal is kept as Jacobi's.
class SsorOp final : public PreconditionerOp {
 public:
  SsorOp(const LocalRows& rows, double omega) : omega_(omega) {
    agreed_setup(rows.comm, [&] {
      if (!(omega > 0 && omega < 2))
        throw Error("ssor options: expected 0 < ssor_omega < 2, found " + std::to_string(omega));
      (void)nonzero_diagonal(rows, "ssor");
      factor_ = ssor_factor(rows.a, omega);
    });
  }
  void apply(const at::Tensor& r, at::Tensor& z) const override { incomplete_solve(factor_, r, z); }
  [[nodiscard]] std::string name() const override {
    std::ostringstream os;
    os << "ssor(" << omega_ << ")";
    return os.str();
  }
  [[nodiscard]] const IncompleteFactor& factor() const { return factor_; }

 private:
  double omega_;
  IncompleteFactor factor_;
};

}  // namespace einshard::sparse::detail
