#pragma once
/// @file
/// The last preconditioner a matrix built, reused by its next solve when nothing it read has changed.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/preconditioner/amg_options.hpp"
#include "einshard/sparse/preconditioner/options.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// The last preconditioner a matrix built, kept for its next solve: time-stepping and Newton loops
/// solve with one matrix many times, and an ILU(0) or Chebyshev setup costs several products
/// (PETSc makes reuse an opt-in, KSPSetReusePreconditioner; here it is safe by construction, the
/// key holding everything the setup read).
class PreconditionerCache {
 public:

  /// The preconditioner for `kind` and `opts` on a matrix with local `values`, and whether it was
  /// reused; `make` builds it. Collective over `comm`: every rank reuses, or every rank builds
  /// (a setup may itself be collective).
  template <class Make>
  std::pair<std::shared_ptr<const PreconditionerOp>, bool> get(Preconditioner kind, const PreconditionerOptions& opts,
                                                               const at::Tensor& values, MPI_Comm comm, Make&& make) {
    const Key key{static_cast<int>(kind), opts.ic0, opts.chebyshev_degree, opts.chebyshev_lower, opts.eig_iterations,
                  values.unsafeGetTensorImpl(), values._version(), static_cast<int>(values.scalar_type()), opts.amg,
                  opts.ssor_omega, opts.neumann_degree, opts.neumann_jacobi};
    std::lock_guard lock(mutex_);
    if (comm::every_rank(op_ != nullptr && key == key_, comm)) return {op_, true};
    op_.reset();  // free the old setup before building the new one
    op_ = make();
    key_ = key;
    return {op_, false};
  }

 private:
  using Key = std::tuple<int, bool, int, double, int, const void*, std::uint32_t, int, AmgOptions, double, int, bool>;
  std::mutex mutex_;
  Key key_{};
  std::shared_ptr<const PreconditionerOp> op_;
};

}  // namespace einshard::sparse::detail
