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

}  // namespace detail

/// The messages of rank `me` when rank r holds box `from[r]` of a tensor and is to hold box
/// `to[r]` (every element of a `to` box lies in exactly one `from` box).
inline Schedule schedule_boxes(std::span<const Box> from, std::span<const Box> to, int me) {
  const auto m = static_cast<std::size_t>(me);
  Schedule s{{}, {}, from[m].size, to[m].size};
  for (std::size_t peer = 0; peer < from.size(); ++peer) {
    auto send = detail::intersect(from[m], to[peer], from[m]);
    if (send.numel() > 0) s.sends.push_back({static_cast<int>(peer), std::move(send)});
    auto recv = detail::intersect(from[peer], to[m], to[m]);
    if (recv.numel() > 0) s.recvs.push_back({static_cast<int>(peer), std::move(recv)});
  }
  return s;
}

/// The messages of rank `me` (of `world` ranks) to go from layout `from` to layout `to` (same axes,
/// same order).
inline Schedule schedule_redistribute(const Layout& from, const Layout& to,
                                      std::span<const std::int64_t> global, const ShardSizes& shards,
                                      const MeshShape& mesh, const CoordinatesOf& coords_of, int me,
                                      int world) {
  std::uint32_t sharded = 0;  // mesh dimensions `from` shards over
  for (const auto& a : from.axes) sharded |= a.group.bits();
  auto same_replica = [&](std::span<const int> p, std::span<const int> q) {
    for (std::size_t d = 0; d < mesh.sizes.size(); ++d)
      if (!((sharded >> d) & 1u) && p[d] != q[d]) return false;
    return true;
  };
  // Ranks of other replicas hold and want nothing from this one: empty boxes.
  const auto mine = coords_of(me);
  const Box none{std::vector<std::int64_t>(from.axes.size(), 0), std::vector<std::int64_t>(from.axes.size(), 0)};
  std::vector<Box> held, wanted;
  for (int peer = 0; peer < world; ++peer) {
    const auto theirs = coords_of(peer);
    const bool replica = same_replica(mine, theirs);
    held.push_back(replica ? detail::box_of(from, global, shards, mesh, theirs) : none);
    wanted.push_back(replica ? detail::box_of(to, global, shards, mesh, theirs) : none);
  }
  return schedule_boxes(held, wanted, me);
}

}  // namespace einshard::plan
