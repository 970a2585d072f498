#pragma once
/// @file
/// One entry to every Krylov method for A x = b on a square operator (`krylov_solve`), so the
/// distributed matrix, the batch and a matrix-free operator dispatch the same way; and the
/// preconditioner a solve's options ask for (`solve_preconditioner`).

#include <memory>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/sparse/custom_preconditioner.hpp"
#include "einshard/sparse/krylov/bicgstab.hpp"
#include "einshard/sparse/krylov/block_bicgstab.hpp"
#include "einshard/sparse/krylov/block_cg.hpp"
#include "einshard/sparse/krylov/block_gmres.hpp"
#include "einshard/sparse/krylov/block_minres.hpp"
#include "einshard/sparse/krylov/cg.hpp"
#include "einshard/sparse/krylov/gmres.hpp"
#include "einshard/sparse/krylov/minres.hpp"
#include "einshard/sparse/operator.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "einshard/sparse/solver.hpp"

namespace einshard::sparse::detail {

/// `m` null: no preconditioner.
inline SolveResult krylov_solve(const Operator& A, const DVector& b, const PreconditionerOp* m, const SolveOptions& o) {
  const auto kind = o.preconditioner;
  switch (o.method) {
    case Method::cg: return cg(A, b, kind, m, o);
    case Method::bicgstab: return bicgstab(A, b, kind, m, o);
    case Method::gmres: return gmres(A, b, kind, m, o);
    case Method::minres: return minres(A, b, kind, m, o);
    case Method::fgmres: return gmres(A, b, kind, m, o, /*flexible=*/true);
  }
  throw Error("solve: unknown method");
}

/// `krylov_solve` of an (n_local, k) block `b`: every method as k coupled recurrences, one block
/// product and one all-reduce per reduction step for all k columns, columns stopping on their own
/// (`SolveInfo::columns`).
inline SolveResult krylov_solve_block(const Operator& A, const DVector& b, const PreconditionerOp* m,
                                      const SolveOptions& o) {
  const auto kind = o.preconditioner;
  switch (o.method) {
    case Method::cg: return block_cg(A, b, m, o);
    case Method::bicgstab: return block_bicgstab(A, b, kind, m, o);
    case Method::gmres: return block_gmres(A, b, kind, m, o);
    case Method::minres: return block_minres(A, b, kind, m, o);
    case Method::fgmres: return block_gmres(A, b, kind, m, o, /*flexible=*/true);
  }
  throw Error("solve: unknown method");
}

/// Throws unless `o.x0`, when given, is a block of as many columns as `b` (a solve of an (n_local, k) b).
inline void check_block_x0(const DVector& b, const SolveOptions& o, const std::string& what) {
  if (o.x0 && (o.x0->local().dim() != 2 || o.x0->columns() != b.columns()))
    throw Error(what + ": x0 must be a block of " + std::to_string(b.columns()) + " columns like b, got shape " +
                std::string(c10::str(o.x0->local().sizes())));
}

/// The custom preconditioner of `o` on `layout` (checked against `o.preconditioner`), or null
/// when `o` asks for a built-in kind (the caller builds or reuses that) or none.
inline std::shared_ptr<const PreconditionerOp> custom_preconditioner(const SolveOptions& o,
                                                                     const std::shared_ptr<const RowLayout>& layout,
                                                                     const std::string& what) {
  if (!o.custom_preconditioner) return nullptr;
  if (o.preconditioner != Preconditioner::none)
    throw Error(what + ": set preconditioner or custom_preconditioner, not both (got " +
                to_string(o.preconditioner) + " and a custom one)");
  return std::make_shared<CustomPreconditionerOp>(o.custom_preconditioner, layout);
}

}  // namespace einshard::sparse::detail
