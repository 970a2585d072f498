#pragma once
/// @file
/// The all-to-all(v) engine's schedule: which box of its tensor each rank sends to which rank, and
/// which box of the new tensor it receives from which rank. Pure (no MPI): every rank derives the
/// same messages from the same layouts and sizes, so sends and receives always match.
///
/// A rank holds, per layout, a box: the whole extent of unsharded axes and its shard of sharded ones.
/// Each element a receiver needs comes from exactly one sender: the holder that agrees with the
/// receiver on every mesh dimension the source layout does not shard (its "replica" of the data),
/// which is the receiver itself whenever it already holds the element.

#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"

namespace einshard::plan {

/// A box (per-dimension start and extent) of a tensor.
struct Box {
  std::vector<std::int64_t> start, size;
  [[nodiscard]] std::int64_t numel() const {
    return std::accumulate(size.begin(), size.end(), std::int64_t{1}, std::multiplies<>());
  }
};

/// One message of a redistribution: the box of the local tensor sent to (or received from) `peer`.
struct Transfer {
  int peer;
  Box box;
};

struct Schedule {
  std::vector<Transfer> sends, recvs;
  std::vector<std::int64_t> in_shape, out_shape;  ///< this rank's tensor before and after
};

/// Sizes of the shards of an axis over a group, by group coordinate.
using ShardSizes = std::function<const std::vector<std::int64_t>&(std::size_t axis, const Group& group)>;
/// Mesh coordinates of a rank of the mesh communicator.
using CoordinatesOf = std::function<std::span<const int>(int rank)>;

namespace detail {

inline Box box_of(const Layout& l, std::span<const std::int64_t> global, const ShardSizes& shards,
                  const MeshShape& mesh, std::span<const int> coords) {
  Box b;
  for (std::size_t i = 0; i < l.axes.size(); ++i) {
    const auto& g = l.axes[i].group;
    if (g.empty()) {
      b.start.push_back(0);
      b.size.push_back(global[i]);
      continue;
    }
    const auto& sizes = shards(i, g);
    const auto c = static_cast<std::size_t>(mesh.coordinate(g, coords));
    b.start.push_back(std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(c),
                                      std::int64_t{0}));
    b.size.push_back(sizes[c]);
  }
  return b;
}

/// The part of `a` inside `b`, relative to `origin`'s start; empty extents when they miss.
inline Box intersect(const Box& a, const Box& b, const Box& origin) {
  Box r;
  for (std::size_t d = 0; d < a.start.size(); ++d) {
    const auto lo = std::max(a.start[d], b.start[d]);
    const auto hi = std::min(a.start[d] + a.size[d], b.start[d] + b.size[d]);
    r.start.push_back(lo - origin.start[d]);
    r.size.push_back(std::max<std::int64_t>(hi - lo, 0));
  }
  return r;
}

/// The messages of the rank at index `m` when the rank `peer_of(k)` holds box `from[k]` and is to
/// hold box `to[k]`.
template <class PeerOf>
Schedule schedule_among(std::span<const Box> from, std::span<const Box> to, std::size_t m,
                        const PeerOf& peer_of) {
  Schedule s{{}, {}, from[m].size, to[m].size};
  for (std::size_t k = 0; k < from.size(); ++k) {
    auto send = intersect(from[m], to[k], from[m]);
    if (send.numel() > 0) s.sends.push_back({peer_of(k), std::move(send)});
    auto recv = intersect(from[k], to[m], to[m]);
    if (recv.numel() > 0) s.recvs.push_back({peer_of(k), std::move(recv)});
  }
  return s;
}

}  // namespace detail

/// The messages of rank `me` when rank r holds box `from[r]` of a tensor and is to hold box
/// `to[r]` (every element of a `to` box lies in exactly one `from` box).
inline Schedule schedule_boxes(std::span<const Box> from, std::span<const Box> to, int me) {
  return detail::schedule_among(from, to, static_cast<std::size_t>(me),
                                [](std::size_t k) { return static_cast<int>(k); });
}

/// The messages of rank `me` (of `world` ranks) to go from layout `from` to layout `to` (same axes,
/// same order).
inline Schedule schedule_redistribute(const Layout& from, const Layout& to,
                                      std::span<const std::int64_t> global, const ShardSizes& shards,
                                      const MeshShape& mesh, const CoordinatesOf& coords_of, int me,
                                      int world) {
  // The mesh dimensions on which a peer must share this rank's coordinate to exchange anything
  // with it: those `from` does not shard (another replica holds and wants nothing from this one),
  // and those of a group that cuts the same axis in both layouts (shard c meets only shard c).
  // Only those peers get boxes: a move inside the rows of a p x q mesh prepares O(q), not O(P).
  std::uint32_t sharded = 0, kept = 0;
  for (std::size_t i = 0; i < from.axes.size(); ++i) {
    sharded |= from.axes[i].group.bits();
    if (!from.axes[i].group.empty() && from.axes[i].group == to.axes[i].group)
      kept |= from.axes[i].group.bits();
  }
  for (std::size_t d = 0; d < mesh.sizes.size(); ++d)
    if (!((sharded >> d) & 1u)) kept |= 1u << d;
  const auto mine = coords_of(me);
  std::vector<int> peers;
  std::vector<Box> held, wanted;
  std::size_t m = 0;
  for (int peer = 0; peer < world; ++peer) {
    const auto theirs = coords_of(peer);
    bool exchanges = true;
    for (std::size_t d = 0; d < mesh.sizes.size() && exchanges; ++d)
      exchanges = !((kept >> d) & 1u) || mine[d] == theirs[d];
    if (!exchanges) continue;
    if (peer == me) m = peers.size();
    peers.push_back(peer);
    held.push_back(detail::box_of(from, global, shards, mesh, theirs));
    wanted.push_back(detail::box_of(to, global, shards, mesh, theirs));
  }
  return detail::schedule_among(held, wanted, m, [&](std::size_t k) { return peers[k]; });
}

}  // namespace einshard::plan
