#pragma once
/// @file
/// Collectives and point-to-point transfers on torch tensors of any dtype and device, contiguous or
/// not. The bytes travel through the communicator's backend (comm/backend.hpp: MPI, direct or staged
/// through host buffers, or NCCL); the packing here is the same for all of them.
/// Uneven pieces move only their real bytes (no padding), and the one algorithm choice that depends
/// on the machine (how to reduce-scatter) is a visible, switchable setting.
///
/// Every function here is collective over `comm` unless it says otherwise, and decides its control
/// flow only from arguments every rank agrees on (the planner guarantees that), so no rank can skip
/// a call another one makes.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "einshard/comm/backend.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/comm/pool.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/plan/redistribute.hpp"

namespace einshard::comm {

/// How a reduce-scatter runs. `native` calls MPI_Reduce_scatter (the default, the faster of the two
/// through einshard in docs/performance.md). `allreduce_slice` sums the
/// whole tensor and keeps a slice: raw MPI_Allreduce can beat raw MPI_Reduce_scatter on large
/// messages, but the whole-tensor result and the slice copy cost more than that gains here.
enum class ReduceScatterAlgorithm { native, allreduce_slice };

/// Process-wide algorithm choices (read by the planner's cost model and by explain()).
struct Algorithms {
  ReduceScatterAlgorithm reduce_scatter = ReduceScatterAlgorithm::native;
};
inline Algorithms& algorithms() {
  static Algorithms a;
  return a;
}

/// Sum of `x` over `comm`; every rank gets the result (a new tensor).
inline at::Tensor all_reduce(const at::Tensor& x, MPI_Comm comm) {
  const auto in = x.contiguous();
  auto out = pooled_empty(in.sizes(), in.options());
  if (in.numel() == 0) return out;
  backend_for(in, comm).all_reduce(in, out, comm);
  return out;
}

namespace detail {

struct Split3 {
  std::int64_t outer = 1, inner = 1;
};
inline Split3 around(at::IntArrayRef shape, std::int64_t dim) {
  Split3 s;
  for (std::int64_t i = 0; i < dim; ++i) s.outer *= shape[static_cast<std::size_t>(i)];
  for (auto i = static_cast<std::size_t>(dim) + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

inline std::vector<std::int64_t> offsets(std::span<const std::int64_t> sizes) {
  std::vector<std::int64_t> off(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), off.begin() + 1);
  return off;
}

}  // namespace detail

namespace detail {

/// Scratch memory of this thread, grow-only and reused across calls: the packed and staged buffers
/// of the collectives below. Allocating them per call cost more than the copies themselves (a
/// fresh block of 32 MiB or more is page-faulted in on every call, docs/performance.md); the price
/// is that the largest size asked for stays allocated. Valid until the next call on this thread.
/// Device tensors get a fresh block from torch's caching allocator, which already reuses memory
/// (and knows the stream that still uses it).
inline at::Tensor scratch(std::int64_t numel, const at::Tensor& like) {
  if (!like.device().is_cpu()) return at::empty({numel}, like.options().requires_grad(false));
  thread_local at::Tensor bytes;
  const auto n = std::max<std::int64_t>(numel * like.element_size(), 1);
  if (!bytes.defined() || bytes.numel() < n) {
    bytes = at::Tensor();  // release the old block before taking the larger one
    bytes = at::empty({n}, at::TensorOptions(at::kByte));
  }
  return bytes.narrow(0, 0, numel * like.element_size()).view(like.scalar_type());
}

}  // namespace detail

/// Concatenation along `dim` of every rank's piece; `sizes[r]` is rank r's extent along `dim` (all
/// other extents equal). Along the outermost non-trivial dimension the pieces land in place; along
/// an inner one they are gathered contiguous into a staging buffer and concatenated from there
/// (strided MPI datatypes lose OpenMPI's single-copy transport, docs/performance.md).
inline at::Tensor all_gather(const at::Tensor& x, std::int64_t dim, std::span<const std::int64_t> sizes,
                             MPI_Comm comm) {
  dim = at::maybe_wrap_dim(dim, x.dim());
  const auto in = x.contiguous();
  const auto P = static_cast<std::size_t>(size_of(comm));
  if (sizes.size() != P) throw Error("all_gather: one size per rank is needed");
  const auto off = detail::offsets(sizes);
  auto shape = in.sizes().vec();
  shape[static_cast<std::size_t>(dim)] = off.back();
  auto out = pooled_empty(shape, in.options());
  const auto [outer, inner] = detail::around(shape, dim);
  if (out.numel() == 0) return out;
  std::vector<int> counts(P), displs(P);
  for (std::size_t r = 0; r < P; ++r) {
    counts[r] = count(sizes[r] * outer * inner);
    displs[r] = count(off[r] * outer * inner);
  }
  const auto staged = outer == 1 ? out : detail::scratch(out.numel(), in);
  backend_for(in, comm).all_gatherv(in, staged, counts, displs, comm);
  if (outer == 1) return out;
  std::vector<at::Tensor> pieces;
  pieces.reserve(P);
  for (std::size_t r = 0; r < P; ++r) {
    shape[static_cast<std::size_t>(dim)] = sizes[r];
    pieces.push_back(staged.narrow(0, off[r] * outer * inner, sizes[r] * outer * inner).view(shape));
  }
  at::cat_out(out, pieces, dim);
  return out;
}

/// Sum over `comm` of every rank's full tensor, of which rank r keeps the piece `sizes[r]` long along
/// `dim` (pieces in rank order). Along an inner dimension the pieces are first copied rank-major
/// into the thread's scratch buffer (MPI reduces contiguous blocks only): one local copy instead of
/// summing the whole tensor everywhere and slicing.
inline at::Tensor reduce_scatter(const at::Tensor& x, std::int64_t dim,
                                 std::span<const std::int64_t> sizes, MPI_Comm comm) {
  dim = at::maybe_wrap_dim(dim, x.dim());
  const auto P = static_cast<std::size_t>(size_of(comm));
  const auto me = static_cast<std::size_t>(rank_of(comm));
  if (sizes.size() != P) throw Error("reduce_scatter: one size per rank is needed");
  const auto off = detail::offsets(sizes);
  if (off.back() != x.size(dim))
    throw Error("reduce_scatter: pieces sum to " + std::to_string(off.back()) +
                " but the tensor has " + std::to_string(x.size(dim)) + " along the dimension");
  if (algorithms().reduce_scatter == ReduceScatterAlgorithm::allreduce_slice)
    return all_reduce(x, comm).narrow(dim, off[me], sizes[me]).clone();
  const auto [outer, inner] = detail::around(x.sizes(), dim);
  auto shape = x.sizes().vec();
  shape[static_cast<std::size_t>(dim)] = sizes[me];
  auto out = pooled_empty(shape, x.options());
  if (x.numel() == 0) return out;
  at::Tensor send;
  if (outer == 1) {
    send = x.contiguous();
  } else {
    send = detail::scratch(x.numel(), x);
    for (std::size_t r = 0; r < P; ++r) {
      shape[static_cast<std::size_t>(dim)] = sizes[r];
      send.narrow(0, off[r] * outer * inner, sizes[r] * outer * inner)
          .view(shape)
          .copy_(x.narrow(dim, off[r], sizes[r]));
    }
  }
  std::vector<int> counts(P);
  for (std::size_t r = 0; r < P; ++r) counts[r] = count(sizes[r] * outer * inner);
  backend_for(send, comm).reduce_scatterv(send, out, counts, comm);
  return out;
}

/// `x` from group rank `root` to every rank (`x` must have the same shape and dtype everywhere).
inline at::Tensor broadcast(const at::Tensor& x, int root, MPI_Comm comm) {
  auto out = rank_of(comm) == root ? x.contiguous().clone() : at::empty_like(x, at::MemoryFormat::Contiguous);
  if (out.numel() == 0) return out;
  backend_for(out, comm).broadcast(out, root, comm);
  return out;
}

/// Every rank's 1-D `x` (of any length) concatenated in rank order on rank `root`, and an empty
/// tensor elsewhere. For the fallbacks that gather a whole object to one process; host memory.
inline at::Tensor gather_to_root(const at::Tensor& x, int root, MPI_Comm comm) {
  const auto in = x.cpu().contiguous();
  const auto counts = all_gather_values(std::array<int, 1>{count(in.numel())}, comm);
  std::vector<int> displs(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  const bool here = rank_of(comm) == root;
  auto out = at::empty({here ? static_cast<std::int64_t>(displs.back()) + counts.back() : 0}, in.options());
  const auto type = datatype(in.scalar_type());
  check(MPI_Gatherv(in.const_data_ptr(), count(in.numel()), type, out.data_ptr(), counts.data(), displs.data(), type,
                    root, comm),
        "MPI_Gatherv");
  return out;
}

using plan::Box;
using plan::Transfer;

namespace detail {

inline at::Tensor view_box(const at::Tensor& t, const Box& box) {
  auto v = t;
  for (std::size_t d = 0; d < box.size.size(); ++d)
    v = v.narrow(static_cast<std::int64_t>(d), box.start[d], box.size[d]);
  return v;
}

/// Where `box` starts in the contiguous tensor `t` (bytes), if its elements are one contiguous run
/// there (every dimension after its first non-unit one is whole); -1 otherwise.
inline std::int64_t contiguous_offset(const at::Tensor& t, const Box& box) {
  std::size_t d = 0;
  while (d < box.size.size() && box.size[d] == 1) ++d;
  for (auto e = d + 1; e < box.size.size(); ++e)
    if (box.size[e] != t.size(static_cast<std::int64_t>(e))) return -1;
  std::int64_t offset = 0;
  for (std::size_t e = 0; e < box.size.size(); ++e) offset += box.start[e] * t.stride(static_cast<std::int64_t>(e));
  return offset * t.element_size();
}

}  // namespace detail

/// Moves boxes between ranks: every `send` box of `x` goes to its peer, every `recv` box of the new
/// tensor of shape `out_shape` comes from its peer; a transfer with this rank as peer is a local
/// copy. Both sides describe each message identically (the planner derives them from the same
/// layouts), so sends and receives match. A box that is one contiguous run of its tensor travels in
/// place; the others are packed into (sender) or unpacked from (receiver) the thread's reused
/// scratch buffer, because OpenMPI moves strided datatypes much slower than contiguous bytes
/// (docs/performance.md). Only the pairs that exchange data post messages, all packed first.
/// `into`, when given, is the result (of `out_shape` and x's dtype, not overlapping x): the caller's
/// output tensor, filled without a copy.
inline at::Tensor exchange_boxes(const at::Tensor& x, at::IntArrayRef out_shape,
                                 const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                                 MPI_Comm comm, int tag = 7101, const at::Tensor& into = {}) {
  // Elements no message covers are zero: the reverse of a schedule that drops elements (a clipped
  // range's backward) gives them no gradient.
  std::int64_t covered = 0;
  for (const auto& r : recvs) covered += r.box.numel();
  auto out = into.defined() ? into : pooled_empty(out_shape, x.options());
  if (covered != c10::multiply_integers(out_shape)) out.zero_();
  const int me = rank_of(comm);
  const bool x_flat = x.is_contiguous();
  auto remote = [&](const Transfer& t) { return t.peer != me && t.box.numel() != 0; };
  // Byte offsets in place (or -1: packed), then one scratch block for every packed box.
  std::vector<std::int64_t> send_at, recv_at;
  send_at.reserve(sends.size());
  recv_at.reserve(recvs.size());
  std::int64_t packed = 0;
  for (const auto& s : sends) {
    send_at.push_back(remote(s) && x_flat ? detail::contiguous_offset(x, s.box) : -1);
    if (remote(s) && send_at.back() < 0) packed += s.box.numel();
  }
  for (const auto& r : recvs) {
    recv_at.push_back(remote(r) ? detail::contiguous_offset(out, r.box) : -1);
    if (remote(r) && recv_at.back() < 0) packed += r.box.numel();
  }
  const auto buffer = packed > 0 ? detail::scratch(packed, x) : at::Tensor();
  std::int64_t used = 0;
  auto take = [&](const Box& box) {
    auto piece = buffer.narrow(0, used, box.numel()).view(box.size);
    used += box.numel();
    return piece;
  };
  std::vector<Message> outgoing, incoming;
  outgoing.reserve(sends.size());
  incoming.reserve(recvs.size());
  std::vector<std::pair<at::Tensor, std::size_t>> unpack;  // packed receives and their transfer
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    const auto& r = recvs[i];
    if (!remote(r)) continue;
    void* target = nullptr;
    if (recv_at[i] >= 0) {
      target = static_cast<char*>(out.data_ptr()) + recv_at[i];
    } else {
      unpack.emplace_back(take(r.box), i);
      target = unpack.back().first.data_ptr();
    }
    incoming.push_back({r.peer, target, r.box.numel()});
  }
  for (std::size_t i = 0; i < sends.size(); ++i) {
    const auto& s = sends[i];
    if (!remote(s)) continue;
    void* source = nullptr;
    if (send_at[i] >= 0) {
      source = static_cast<char*>(const_cast<void*>(x.const_data_ptr())) + send_at[i];
    } else {
      auto piece = take(s.box);
      piece.copy_(detail::view_box(x, s.box));
      source = piece.data_ptr();
    }
    outgoing.push_back({s.peer, source, s.box.numel()});
  }
  // The local piece moves while the messages are in flight.
  auto local = [&] {
    for (const auto& s : sends) {
      if (s.peer != me || s.box.numel() == 0) continue;
      for (const auto& r : recvs)
        if (r.peer == me) detail::view_box(out, r.box).copy_(detail::view_box(x, s.box));
    }
  };
  backend_for(x, comm).exchange(outgoing, incoming, x, tag, comm,
                                [](void* f) { (*static_cast<decltype(local)*>(f))(); }, &local);
  for (const auto& [piece, i] : unpack) detail::view_box(out, recvs[i].box).copy_(piece);
  return out;
}

}  // namespace einshard::comm
