#pragma once
/// @file
/// Agreeing before moving data: one small all-gather of every rank's metadata (a fingerprint of the
/// call, dtype, local shape and any error it found locally). Every rank then sees the same facts,
/// so a fault found anywhere raises the same `Error` on every rank, and nobody is left waiting in a
/// collective. The same exchange tells every rank every shard's size, so gathers need no `shapes`.

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/error.hpp"

namespace einshard::exec {

/// Error codes a rank can find in its own input before any communication.
enum class LocalFault : std::int64_t { none = 0, rank_mismatch = 1, too_many_dims = 2, not_cpu = 3 };

struct RankInfo {
  static constexpr std::size_t max_dims = 24;
  std::int64_t fingerprint = 0;
  std::int64_t dtype = 0;
  std::int64_t ndim = 0;
  std::int64_t fault = 0;
  std::array<std::int64_t, max_dims> sizes{};

  static constexpr std::size_t words = 4 + max_dims;
};

inline RankInfo describe(const at::Tensor& x, std::int64_t fingerprint, LocalFault fault) {
  RankInfo r;
  r.fingerprint = fingerprint;
  r.dtype = static_cast<std::int64_t>(x.scalar_type());
  r.ndim = x.dim();
  if (fault == LocalFault::none && !x.device().is_cpu()) fault = LocalFault::not_cpu;
  if (fault == LocalFault::none && static_cast<std::size_t>(x.dim()) > RankInfo::max_dims)
    fault = LocalFault::too_many_dims;
  r.fault = static_cast<std::int64_t>(fault);
  for (std::int64_t d = 0; d < x.dim() && static_cast<std::size_t>(d) < RankInfo::max_dims; ++d)
    r.sizes[static_cast<std::size_t>(d)] = x.size(d);
  return r;
}

/// All ranks' descriptions (collective over `comm`), after checking what must agree: the call
/// (fingerprint), dtype and rank. `what` names the call in messages; `expected_dims` explains a
/// rank-mismatch fault.
inline std::vector<RankInfo> agree(MPI_Comm comm, const RankInfo& mine, std::string_view what,
                                   const std::string& expected_dims) {
  std::array<std::int64_t, RankInfo::words> packed{mine.fingerprint, mine.dtype, mine.ndim, mine.fault};
  std::copy(mine.sizes.begin(), mine.sizes.end(), packed.begin() + 4);
  const auto all = comm::all_gather_values(packed, comm);
  std::vector<RankInfo> ranks(all.size() / RankInfo::words);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto* p = all.data() + r * RankInfo::words;
    ranks[r].fingerprint = p[0];
    ranks[r].dtype = p[1];
    ranks[r].ndim = p[2];
    ranks[r].fault = p[3];
    std::copy(p + 4, p + RankInfo::words, ranks[r].sizes.begin());
  }
  const auto prefix = std::string(what) + ": ";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto rank = std::to_string(r);
    switch (static_cast<LocalFault>(ranks[r].fault)) {
      case LocalFault::none: break;
      case LocalFault::rank_mismatch:
        throw Error(prefix + "the tensor on rank " + rank + " has " + std::to_string(ranks[r].ndim) +
                    " dimensions, but the notation names " + expected_dims);
      case LocalFault::too_many_dims:
        throw Error(prefix + "the tensor on rank " + rank + " has more than " +
                    std::to_string(RankInfo::max_dims) + " dimensions");
      case LocalFault::not_cpu:
        throw Error(prefix + "the tensor on rank " + rank +
                    " is not a CPU tensor; this version communicates CPU tensors only");
    }
  }
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r].fingerprint != ranks[0].fingerprint)
      throw Error(prefix + "rank " + std::to_string(r) +
                  " called a different operation than rank 0 (notation or operand differ)");
    if (ranks[r].dtype != ranks[0].dtype)
      throw Error(prefix + "dtype differs between ranks: " +
                  c10::toString(static_cast<at::ScalarType>(ranks[0].dtype)) + " on rank 0, " +
                  c10::toString(static_cast<at::ScalarType>(ranks[r].dtype)) + " on rank " +
                  std::to_string(r));
    if (ranks[r].ndim != ranks[0].ndim)
      throw Error(prefix + "tensor rank differs between ranks: " + std::to_string(ranks[0].ndim) +
                  " dimensions on rank 0, " + std::to_string(ranks[r].ndim) + " on rank " +
                  std::to_string(r));
  }
  return ranks;
}

}  // namespace einshard::exec
