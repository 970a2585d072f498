#pragma once
/// @file
/// Block Jacobi: ILU(0) or IC(0) of each rank's owned×owned block, applied by two triangular sweeps.

#include <ATen/ATen.h>
#include <mpi.h>

#include <string>

#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/preconditioner/ilu.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// Block Jacobi: ILU(0) or IC(0) of the owned×owned block, applied by two triangular sweeps.
class BlockJacobiOp final : public PreconditionerOp {
 public:
  BlockJacobiOp(const LocalRows& rows, bool ic0) {
    agreed_setup(rows.comm, [&] {
      check_rows(rows);
      const auto failed = ic0 ? factor_ic0(rows.a, factor_) : factor_ilu0(rows.a, factor_);
      if (failed >= 0)
        throw Error(std::string("block_jacobi preconditioner setup: expected ") + (ic0 ? "positive IC(0)" : "nonzero ILU(0)") +
                    " pivots, found a " + (ic0 ? "non-positive" : "zero") + " pivot at owned row " +
                    std::to_string(failed) +
                    (ic0 ? " (the block is not positive definite enough for IC(0); try ILU(0))"
                         : " (the owned block needs a nonzero diagonal and no zero pivot)"));
    });
  }
  void apply(const at::Tensor& r, at::Tensor& z) const override { incomplete_solve(factor_, r, z); }
  [[nodiscard]] std::string name() const override {
    return factor_.cholesky ? "block_jacobi(ic0)" : "block_jacobi(ilu0)";
  }
  [[nodiscard]] const IncompleteFactor& factor() const { return factor_; }

 private:
  IncompleteFactor factor_;
};

}  // namespace einshard::sparse::detail
