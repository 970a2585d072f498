#pragma once
/// @file
/// `param_shard_metadata`: which slice of the global parameter a rank holds, from its state, the
/// global shape and the mesh coordinates (compound groups rank row-major, as `Mesh::coordinate`),
/// with the library's one split rule or given `shapes` for uneven shards. What a checkpoint
/// writer or a loader of a full model needs to cut the right piece.

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/model/parameter_state.hpp"
#include "einshard/shapes.hpp"

namespace einshard {

struct ParamShardMetadata {
  std::vector<std::int64_t> global_shape;
  std::vector<std::pair<std::int64_t, std::int64_t>> local_slices;  ///< [begin, end) per dimension
  std::vector<std::int64_t> local_shape;
  std::vector<std::string> shard_dims;  ///< the group sharding each dimension ("" when whole)
};

namespace detail {

inline ParamShardMetadata shard_metadata(const ParameterState& s, std::span<const std::int64_t> global_shape,
                                         std::span<const int> coords, const Shapes& shapes) {
  constexpr const char* op = "param_shard_metadata";
  const auto n = static_cast<std::int64_t>(s.axes.size());
  const auto rank = static_cast<std::int64_t>(global_shape.size());
  if (s.ellipsis ? rank < n : rank != n)
    throw Error(std::string(op) + ": layout '" + s.layout() + "' names " + std::to_string(n) +
                (s.ellipsis ? " or more" : "") + " dimensions, but the global shape has " +
                std::to_string(rank));
  if (coords.size() != s.mesh.sizes.size())
    throw Error(std::string(op) + ": expected " + std::to_string(s.mesh.sizes.size()) +
                " mesh coordinates, got " + std::to_string(coords.size()));
  ParamShardMetadata m;
  m.global_shape.assign(global_shape.begin(), global_shape.end());
  const auto covered = rank - n;  // dimensions the ellipsis stands for
  for (std::int64_t d = 0; d < rank; ++d) {
    const auto size = global_shape[static_cast<std::size_t>(d)];
    if (size < 0) throw Error(std::string(op) + ": negative global extent " + std::to_string(size));
    const std::int64_t at = static_cast<std::int64_t>(s.ellipsis_at);
    const bool in_ellipsis = s.ellipsis && d >= at && d < at + covered;
    const plan::Placement* p = nullptr;
    if (!in_ellipsis) p = &s.axes[static_cast<std::size_t>(s.ellipsis && d >= at ? d - covered : d)];
    if (!p || p->group.empty()) {
      m.local_slices.emplace_back(0, size);
      m.local_shape.push_back(size);
      m.shard_dims.emplace_back();
      continue;
    }
    const auto parts = s.mesh.size(p->group);
    const auto c = s.mesh.coordinate(p->group, coords);
    auto split = shapes.resolve(p->group.name(), p->axis, parts);
    const auto sizes = split ? *split : compute_split_shapes(size, parts);
    std::int64_t total = 0, begin = 0;
    for (std::int64_t i = 0; i < parts; ++i) {
      if (i == c) begin = total;
      total += sizes[static_cast<std::size_t>(i)];
    }
    if (total != size)
      throw Error(std::string(op) + ": split shapes of axis '" + p->axis + "' sum to " +
                  std::to_string(total) + ", but its global extent is " + std::to_string(size));
    const auto local = sizes[static_cast<std::size_t>(c)];
    m.local_slices.emplace_back(begin, begin + local);
    m.local_shape.push_back(local);
    m.shard_dims.push_back(p->group.name());
  }
  return m;
}

}  // namespace detail

/// Pure form: `coords` are this rank's mesh coordinates (one per mesh dimension). `global_shape` is
/// any range of extents (`{8, 4}`, a vector, `tensor.sizes()`).
template <class Shape = std::initializer_list<std::int64_t>>
ParamShardMetadata param_shard_metadata(const ParameterState& s, const Shape& global_shape,
                                        std::span<const int> coords, const Shapes& shapes = {}) {
  const std::vector<std::int64_t> g(std::begin(global_shape), std::end(global_shape));
  return detail::shard_metadata(s, g, coords, shapes);
}

/// This rank's slice of a parameter of global shape `global_shape` on `mesh`.
template <class Shape = std::initializer_list<std::int64_t>>
ParamShardMetadata param_shard_metadata(const ParameterState& s, const Shape& global_shape, const Mesh& mesh,
                                        const Shapes& shapes = {}) {
  if (s.mesh.names != mesh.names() || s.mesh.sizes != mesh.sizes())
    throw Error("param_shard_metadata: the state's mesh (" + s.mesh.joined_names() +
                ") is not this mesh (" + mesh.shape().joined_names() + ")");
  const std::vector<std::int64_t> g(std::begin(global_shape), std::end(global_shape));
  return detail::shard_metadata(s, g, mesh.coordinates_of(mesh.rank()), shapes);
}

}  // namespace einshard
