#pragma once
/// @file
/// The preconditioner a `Preconditioner` value names, made for one matrix's local rows (AMG,
/// whose hierarchy spans the ranks, is made from the distributed matrix: amg.hpp).

#include <ATen/ATen.h>
#include <mpi.h>

#include <memory>
#include <string>

#include "einshard/error.hpp"
#include "einshard/sparse/preconditioner/block_jacobi.hpp"
#include "einshard/sparse/preconditioner/chebyshev.hpp"
#include "einshard/sparse/preconditioner/jacobi.hpp"
#include "einshard/sparse/preconditioner/neumann.hpp"
#include "einshard/sparse/preconditioner/options.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/preconditioner/ssor.hpp"
#include "einshard/sparse/preconditioner/amg.hpp"

namespace einshard::sparse::detail {

/// The preconditioner `kind` for these rows (collective over `rows.comm` for every kind but
/// `none`; `matvec` is used by `chebyshev` and `neumann` only). The returned operator refers to `matvec`'s
/// state, not to `rows`.
inline std::unique_ptr<PreconditionerOp> make_preconditioner(Preconditioner kind, const LocalRows& rows,
                                                             const Matvec& matvec,
                                                             const PreconditionerOptions& opts) {
  switch (kind) {
    case Preconditioner::none: return std::make_unique<IdentityOp>();
    case Preconditioner::jacobi: return std::make_unique<DiagonalOp>(inverse_diagonal(rows), "jacobi", rows.comm);
    case Preconditioner::l1_jacobi: return std::make_unique<DiagonalOp>(inverse_l1_norms(rows), "l1_jacobi", rows.comm);
    case Preconditioner::block_jacobi:
      require_host(rows, "block_jacobi", "ILU(0)/IC(0) factors by row loops: ATen has no incomplete factorization");
      return std::make_unique<BlockJacobiOp>(rows, opts.ic0);
    case Preconditioner::chebyshev: return std::make_unique<ChebyshevOp>(rows, matvec, opts);
    case Preconditioner::ssor:
      require_host(rows, "ssor", "sequential sweeps by row loops");
      return std::make_unique<SsorOp>(rows, opts.ssor_omega);
    case Preconditioner::neumann: return std::make_unique<NeumannOp>(rows, matvec, opts);
    case Preconditioner::amg:
    case Preconditioner::smoothed_aggregation:
      // Their hierarchies span the ranks: they need the global numbering of the halo columns,
      // which only the distributed matrix knows (DSparseTensor::solve builds them).
      throw Error("make_preconditioner: expected a kind built from a rank's local rows, found " + to_string(kind) +
                  " (its hierarchy spans the ranks: DSparseTensor::solve builds it from the distributed matrix)");
  }
  throw Error("make_preconditioner: expected a Preconditioner kind, found " + std::to_string(static_cast<int>(kind)));
}

}  // namespace einshard::sparse::detail
