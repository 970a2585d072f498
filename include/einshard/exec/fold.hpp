#pragma once
/// @file
/// The agreement folded into the data movement, for a repeated call (exec/replay.hpp): the first
/// all-reduce of the call carries a small header after its payload (how many ranks found a fault,
/// and a checksum of the call's fingerprint), summed in the same MPI_Allreduce, so the check costs
/// no rendezvous of its own. A call that moves no data forward has no collective to carry it: a
/// rank whose operands differ from those the call was prepared for keeps a *pending* record, which
/// every later collective of the notation on that mesh carries (the next folded all-reduce, the
/// next agreement, and the backward all-reduce of the call itself, `GuardedAddPartialOp`), and the
/// ranks resolve it together there.
///
/// Why the header is exact: its entries are small integers, summed in the payload's own dtype
/// (float or double only), and kept below 2^(mantissa bits) / ranks, so every partial sum is exact
/// whatever order MPI adds in. The fingerprint check is symmetric: with f_r in [0, m) on rank r,
/// P·Σf² = (Σf)² holds iff every f_r is equal (Cauchy–Schwarz), and every rank reads the same sums.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/comm/autograd.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/comm/ops.hpp"
#include "einshard/comm/pool.hpp"
#include "einshard/config.hpp"

namespace einshard::exec {

/// A rank's operands differed from those a call that moves no data was prepared for: what it had.
struct Pending {
  MPI_Comm mesh = MPI_COMM_NULL;
  std::int64_t fingerprint = 0;  ///< the prepared call's (Replay::fingerprint)
  std::vector<comm::RankInfo> infos;
};

/// This thread's pending records, oldest first.
inline std::vector<Pending>& pending() {
  thread_local std::vector<Pending> p;
  return p;
}
inline bool has_pending(MPI_Comm mesh) {
  for (const auto& p : pending())
    if (p.mesh == mesh) return true;
  return false;
}

/// Resolves every rank's pending records on `mesh` together (collective over `mesh`, entered by
/// every rank once any of them flagged a fault): raises the error the prepared call would have
/// raised on those operands, on every rank, or, when the operands are consistent after all (every
/// rank changed its batch size), prepares the call anew. Preparing a call makes the ops below, so
/// the definition comes after them, with the replays (exec/replay.hpp, which ops/einshard.hpp
/// includes wherever calls run; compiled, einshard_compiled defines it once).
EINSHARD_INLINE void resolve_pending(MPI_Comm mesh);

/// What the next folded all-reduce on this thread carries, and what it found.
struct FoldState {
  bool armed = false;       ///< the next `FoldingAllReduceOp` forward carries the header
  std::int64_t fault = 0;   ///< this rank's contribution: 1 when it found a fault
  std::int64_t check = 0;   ///< this rank's fingerprint digit (below `digits(P)`)
  bool failed = false;      ///< set by the folded all-reduce: some rank faulted or fingerprints differ
};
inline FoldState& fold_state() {
  thread_local FoldState s;
  return s;
}

/// Thrown by a folded all-reduce that found a fault (the same on every rank): the replay catches it
/// and every rank falls back to the full agreement together.
struct FoldFailed {};

namespace detail {

/// Fingerprint digits (exclusive bound) the header of `dtype` can sum exactly over `ranks`; 0 for
/// dtypes the fold does not carry.
inline std::int64_t digits(at::ScalarType dtype, int ranks) {
  const int mantissa = dtype == at::kFloat ? 24 : dtype == at::kDouble ? 53 : 0;
  if (mantissa == 0) return 0;
  const double bound = std::floor(std::sqrt(std::ldexp(1.0, std::min(mantissa, 60)) / ranks)) - 1;
  return static_cast<std::int64_t>(std::min(bound, 1048576.0));
}

template <class T>
bool sum_with_header(T* buf, std::int64_t n, std::int64_t fault, std::int64_t check, MPI_Comm comm) {
  buf[n] = static_cast<T>(fault);
  buf[n + 1] = static_cast<T>(check);
  buf[n + 2] = static_cast<T>(check * check);
  comm::all_reduce_values(std::span<T>(buf, static_cast<std::size_t>(n + 3)), comm::Reduction::sum, comm);
  const auto faults = static_cast<std::int64_t>(buf[n]);
  const auto s1 = static_cast<std::int64_t>(buf[n + 1]), s2 = static_cast<std::int64_t>(buf[n + 2]);
  return faults == 0 && comm::size_of(comm) * s2 == s1 * s1;
}

}  // namespace detail

namespace detail {

/// A contiguous CPU tensor of `sizes` over the first elements of `storage`, made without the
/// dispatcher (narrow and view through it cost more than a tiny all-reduce itself).
inline at::Tensor over(const c10::Storage& storage, at::ScalarType dtype, at::IntArrayRef sizes) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                    c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

}  // namespace detail

/// Sum over `comm` of `x` (or, when `x` is undefined, of zeros: a rank that must not compute still
/// joins with the `numel` elements the call was prepared for), with the header summed alongside.
/// Returns whether every rank reported no fault and the same `check`; the sum lands in `out`.
inline bool all_reduce_with_header(const at::Tensor& x, std::int64_t numel, at::ScalarType dtype,
                                   std::int64_t fault, std::int64_t check, MPI_Comm comm, at::Tensor& out) {
  const auto element = static_cast<std::int64_t>(c10::elementSize(dtype));
  const auto bytes = (numel + 3) * element;
  // Large buffers come from the block pool (comm/pool.hpp), small ones straight from the allocator.
  const auto storage = bytes >= comm::BlockPool::min_bytes
                           ? comm::BlockPool::instance().empty({numel + 3}, at::TensorOptions(dtype)).storage()
                           : c10::Storage(c10::Storage::use_byte_size_t(), bytes, c10::GetAllocator(c10::DeviceType::CPU), false);
  auto* data = static_cast<char*>(storage.mutable_data());
  if (!x.defined()) std::memset(data, 0, static_cast<std::size_t>(numel * element));
  else if (x.is_contiguous()) std::memcpy(data, x.const_data_ptr(), static_cast<std::size_t>(numel * element));
  else detail::over(storage, dtype, x.sizes()).copy_(x);
  const bool ok = dtype == at::kFloat
                      ? detail::sum_with_header(reinterpret_cast<float*>(data), numel, fault, check, comm)
                      : detail::sum_with_header(reinterpret_cast<double*>(data), numel, fault, check, comm);
  if (x.defined()) out = detail::over(storage, dtype, x.sizes());
  return ok;
}

/// The all-reduce step of a plan. Plain, except when the replay has armed this thread's fold state:
/// then it is the call's first collective and carries the call's check (exec/replay.hpp).
struct FoldingAllReduceOp final : comm::CommOp {
  MPI_Comm comm;
  explicit FoldingAllReduceOp(MPI_Comm c) : comm(c) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override {
    auto& s = fold_state();
    if (!s.armed) return comm::all_reduce(x, comm);
    s.armed = false;
    at::Tensor out;
    if (!all_reduce_with_header(x, x.numel(), x.scalar_type(), s.fault, s.check, comm, out)) {
      s.failed = true;
      throw FoldFailed{};
    }
    return out;
  }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override { return g; }
};

/// Whole -> partial over a group that spans the mesh, in a program that moves no data forward
/// (Megatron's f, the column-parallel input): its backward all-reduce is the first collective after
/// the forward, so it carries whether this rank holds a pending record. A rank with one joins with
/// zeros of the size the call was prepared for (`numel`), so the counts agree whatever its
/// operands were; then every rank resolves the records together, and either raises the same error
/// or, the operands being consistent after all, sums the real gradients.
struct GuardedAddPartialOp final : comm::CommOp {
  MPI_Comm comm, mesh;
  std::int64_t numel;
  bool copy;
  GuardedAddPartialOp(MPI_Comm c, MPI_Comm mesh_comm, std::int64_t expected, bool copy_result)
      : comm(c), mesh(mesh_comm), numel(expected), copy(copy_result) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return copy ? x.clone() : x; }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
    const auto dtype = g.scalar_type();
    if (detail::digits(dtype, 1) == 0) {  // a dtype the header cannot ride on: a separate flag
      if (comm::any_rank(has_pending(mesh) || g.numel() != numel, comm)) resolve_pending(mesh);
      return comm::all_reduce(g, comm);
    }
    // A gradient of another size than prepared: the call ran deferred on operands that were agreed
    // since (every rank's, so every rank's gradient differs alike); the flag sends all to the plain sum.
    const bool mine = has_pending(mesh) || g.numel() != numel;
    at::Tensor out;
    if (all_reduce_with_header(mine ? at::Tensor() : g.contiguous(), numel, dtype, mine ? 1 : 0, 0, comm, out))
      return out;
    resolve_pending(mesh);  // raises on every rank, or the operands were consistent:
    return comm::all_reduce(g, comm);
  }
};

}  // namespace einshard::exec
