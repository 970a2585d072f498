#pragma once
/// @file
/// Agreeing before moving data: one small all-gather of every rank's metadata about every operand
/// (a fingerprint of the call, dtype, device kind, local shape, and any fault it found locally). Every rank then
/// sees the same facts, so a fault found anywhere raises the same `Error` on every rank and nobody
/// is left waiting in a collective. The same exchange tells every rank every shard's size, so
/// gathers need no `shapes`. Used by the notation's executor and by the sparse part.

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <functional>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

/// Faults a rank can find in its own input before any communication.
/// `unsupported_device`: neither CPU nor CUDA (a meta tensor, say), which no backend can move.
enum class LocalFault : std::int64_t { none = 0, rank_mismatch = 1, too_many_dims = 2, unsupported_device = 3 };

/// What a rank says about one operand.
struct RankInfo {
  static constexpr std::size_t max_dims = 24;
  static constexpr std::size_t words = 5 + max_dims;
  std::int64_t fingerprint = 0;
  std::int64_t dtype = 0;
  std::int64_t device = 0;  ///< c10::DeviceType: every operand on every rank must agree
  std::int64_t ndim = 0;
  std::int64_t fault = 0;
  std::array<std::int64_t, max_dims> sizes{};
  friend bool operator==(const RankInfo&, const RankInfo&) = default;
};

inline RankInfo describe(const at::Tensor& x, std::int64_t fingerprint, LocalFault fault) {
  RankInfo r;
  r.fingerprint = fingerprint;
  r.dtype = static_cast<std::int64_t>(x.scalar_type());
  r.device = static_cast<std::int64_t>(x.device().type());
  r.ndim = x.dim();
  if (fault == LocalFault::none && !x.device().is_cpu() && !x.device().is_cuda())
    fault = LocalFault::unsupported_device;
  if (fault == LocalFault::none && static_cast<std::size_t>(x.dim()) > RankInfo::max_dims)
    fault = LocalFault::too_many_dims;
  r.fault = static_cast<std::int64_t>(fault);
  for (std::int64_t d = 0; d < x.dim() && static_cast<std::size_t>(d) < RankInfo::max_dims; ++d)
    r.sizes[static_cast<std::size_t>(d)] = x.size(d);
  return r;
}

inline std::string device_name(std::int64_t type) {
  return c10::DeviceTypeName(static_cast<c10::DeviceType>(type), /*lower_case=*/true);
}

/// One description as `RankInfo::words` integers (the wire form of every agreement exchange).
inline void pack(std::vector<std::int64_t>& out, const RankInfo& m) {
  out.insert(out.end(), {m.fingerprint, m.dtype, m.device, m.ndim, m.fault});
  out.insert(out.end(), m.sizes.begin(), m.sizes.end());
}
inline RankInfo unpack(const std::int64_t* p) {
  RankInfo info;
  info.fingerprint = p[0];
  info.dtype = p[1];
  info.device = p[2];
  info.ndim = p[3];
  info.fault = p[4];
  std::copy(p + 5, p + RankInfo::words, info.sizes.begin());
  return info;
}

/// `infos[r][i]`: rank r's description of operand i.
using Agreed = std::vector<std::vector<RankInfo>>;

/// Every rank's descriptions of its operands (collective over `comm`), and each rank's `flag`:
/// one word a caller rides on the same exchange (the notation's pending records, exec/fold.hpp).
inline Agreed gather_infos(MPI_Comm comm, std::span<const RankInfo> mine, std::int64_t flag = 0,
                           std::vector<std::int64_t>* flags = nullptr) {
  std::vector<std::int64_t> packed;
  for (const auto& m : mine) pack(packed, m);
  packed.push_back(flag);
  const auto all = all_gather_values(packed, comm);
  const auto n = mine.size();
  const auto stride = n * RankInfo::words + 1;
  Agreed ranks(all.size() / stride, std::vector<RankInfo>(n));
  if (flags) flags->assign(ranks.size(), 0);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      ranks[r][i] = unpack(all.data() + r * stride + i * RankInfo::words);
    }
    if (flags) (*flags)[r] = all[r * stride + stride - 1];
  }
  return ranks;
}

/// A fingerprint of a call site's text and every rank's descriptions: equal on every rank that
/// agreed on them together.
inline std::int64_t digest(std::string_view site, const Agreed& ranks) {
  auto h = static_cast<std::uint64_t>(std::hash<std::string_view>{}(site));
  auto mix = [&](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ull; };
  for (const auto& rank : ranks)
    for (const auto& info : rank) {
      mix(info.dtype);
      mix(info.ndim);
      for (std::int64_t d = 0; d < info.ndim; ++d) mix(info.sizes[static_cast<std::size_t>(d)]);
    }
  return static_cast<std::int64_t>(h & 0x7fffffffffffffffull);
}

/// Whether a call agreed before may run again without agreeing: every rank says its operands are
/// `same` as then and names the same agreed call (`fingerprint`, equal on every rank that agreed
/// together). One all-reduce of three integers, O(log P) latency, where `gather_infos` moves every
/// rank's descriptions to every rank. Collective over `comm`; the same answer everywhere.
[[nodiscard]] inline bool still_agreed(bool same, std::int64_t fingerprint, MPI_Comm comm) {
  std::array<std::int64_t, 3> v{same ? 0 : 1, fingerprint, -fingerprint};
  all_reduce_values(std::span<std::int64_t>(v), Reduction::max, comm);
  return v[0] == 0 && v[1] == -v[2];
}

/// Checks what must agree in gathered descriptions: the call (fingerprint), dtypes and ranks, and
/// that no rank found a fault. `what` names the call in messages; `expected_dims[i]` explains a
/// rank-mismatch fault of operand i (a callable, or a list: called only for that error). Every rank
/// reads the same descriptions, so every rank raises the same error.
template <class ExpectedDims>
void check_agreed(const Agreed& ranks, std::string_view what, const ExpectedDims& expected_dims) {
  const auto n = ranks.empty() ? 0 : ranks[0].size();
  auto prefix = [&] { return std::string(what) + ": "; };  // built only for an error
  auto operand = [&](std::size_t i) {
    return n == 1 ? std::string("the tensor") : "input " + std::to_string(i + 1);
  };
  auto on = [](std::size_t r) { return " on rank " + std::to_string(r); };
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const auto& info = ranks[r][i];
      switch (static_cast<LocalFault>(info.fault)) {
        case LocalFault::none: break;
        case LocalFault::rank_mismatch:
          throw Error(prefix() + operand(i) + on(r) + " has " + std::to_string(info.ndim) +
                      " dimensions, but the notation names " + std::string(expected_dims(i)));
        case LocalFault::too_many_dims:
          throw Error(prefix() + operand(i) + on(r) + " has more than " +
                      std::to_string(RankInfo::max_dims) + " dimensions");
        case LocalFault::unsupported_device:
          throw Error(prefix() + operand(i) + on(r) + " is on " + device_name(info.device) +
                      "; einshard moves CPU and CUDA tensors only");
      }
    }
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (ranks[r][i].device != ranks[0][0].device)
        throw Error(prefix() + operand(i) + " on rank " + std::to_string(r) + " is on " +
                    device_name(ranks[r][i].device) + ", but " + operand(0) + " on rank 0 is on " +
                    device_name(ranks[0][0].device) +
                    ": every input of one call must be on one device kind, on every rank");
  for (std::size_t r = 1; r < ranks.size(); ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const auto& a = ranks[0][i];
      const auto& b = ranks[r][i];
      if (b.fingerprint != a.fingerprint)  // no notation in the message: it differs between ranks
        throw Error("einshard: expected every rank to call the operation of rank 0, found a different operation on rank " +
                    std::to_string(r) + " (its notation or number of operands differ)");
      if (b.dtype != a.dtype)
        throw Error(prefix() + "the dtype of " + operand(i) + " differs between ranks: " +
                    c10::toString(static_cast<at::ScalarType>(a.dtype)) + " on rank 0, " +
                    c10::toString(static_cast<at::ScalarType>(b.dtype)) + on(r));
      if (b.ndim != a.ndim)
        throw Error(prefix() + "the rank of " + operand(i) + " differs between ranks: " +
                    std::to_string(a.ndim) + " dimensions on rank 0, " + std::to_string(b.ndim) + on(r));
    }
}

/// All ranks' descriptions of all operands (collective over `comm`), after `check_agreed`.
inline Agreed agree(MPI_Comm comm, std::span<const RankInfo> mine, std::string_view what,
                    std::span<const std::string> expected_dims) {
  auto ranks = gather_infos(comm, mine);
  check_agreed(ranks, what, [&](std::size_t i) { return expected_dims[i]; });
  return ranks;
}

}  // namespace einshard::comm
