#pragma once
/// @file
/// Every size a distributed call needs, known identically on every rank: global extents of axes and
/// shard sizes of every (axis, group), read off the agreed metadata or, for layouts the call
/// creates, taken from the `shapes` metadata or the split rule.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/shapes.hpp"

namespace einshard::exec {

struct SizeTable {
  std::map<std::string, std::int64_t, std::less<>> global;
  std::map<std::pair<std::string, Group>, std::vector<std::int64_t>> shards;

  [[nodiscard]] const std::vector<std::int64_t>& of(const std::string& axis, const Group& group) const {
    return shards.at({axis, group});
  }
};

namespace detail {

/// Records the extents of one axis of an operand, `sizes[c]` at coordinate c of its group (one
/// entry when the axis is whole): given shapes must match, and an axis shared with an operand
/// measured before must have the same extent and cut. `operand` names the operand in messages.
inline void record(SizeTable& t, const plan::Placement& p, std::vector<std::int64_t> sizes, const std::string& operand,
                   const Mesh& mesh, const Shapes& shapes, const std::string& what) {
  const auto& [axis, group] = p;
  if (!group.empty())
    if (const auto given = shapes.resolve(group.name(), axis, mesh.size(group)); given && *given != sizes)
      for (std::size_t c = 0; c < sizes.size(); ++c)
        if (sizes[c] != (*given)[c])
          throw Error(what + ": the shard of axis '" + axis + "'" + operand + " at coordinate " +
                      std::to_string(c) + " of '" + group.name() + "' has " + std::to_string(sizes[c]) +
                      " elements, but the shapes metadata says " + std::to_string((*given)[c]));
  std::int64_t total = 0;
  for (auto s : sizes) total += s;
  if (const auto it = t.global.find(axis); it != t.global.end() && it->second != total)
    throw Error(what + ": axis '" + axis + "' has " + std::to_string(it->second) +
                " elements in one operand but " + std::to_string(total) + operand);
  t.global[axis] = total;
  if (group.empty()) return;
  const auto [it, inserted] = t.shards.emplace(std::pair{axis, group}, sizes);
  if (!inserted && it->second != sizes)
    throw Error(what + ": axis '" + axis + "' is split differently over '" + group.name() +
                "' in the two operands");
}

inline std::string of_operand(std::size_t operands, std::size_t i) {
  return operands == 1 ? std::string() : " of input " + std::to_string(i + 1);
}

}  // namespace detail

/// Reads operand `i`'s sizes off every rank's descriptions: replicas must hold equal pieces, given
/// shapes must match, and an axis shared with an operand measured before must have the same extent.
inline void measure(SizeTable& t, const plan::Layout& l, const comm::Agreed& ranks, std::size_t i,
                    const Mesh& mesh, const Shapes& shapes, const std::string& what) {
  const auto operand = detail::of_operand(ranks[0].size(), i);
  for (std::size_t d = 0; d < l.axes.size(); ++d) {
    const auto& [axis, group] = l.axes[d];
    const auto parts = group.empty() ? 1 : mesh.size(group);
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), -1);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const auto c = group.empty() ? 0 : mesh.shape().coordinate(group, mesh.coordinates_of(static_cast<int>(r)));
      auto& s = sizes[static_cast<std::size_t>(c)];
      const auto extent = ranks[r][i].sizes[d];
      if (s >= 0 && s != extent)
        throw Error(what + ": axis '" + axis + "'" + operand + " has extent " + std::to_string(s) +
                    " on one rank but " + std::to_string(extent) + " on rank " + std::to_string(r) +
                    (group.empty() ? " (it is not sharded, so every rank must hold all of it)"
                                   : ", which holds the same shard over '" + group.name() + "'"));
      s = extent;
    }
    detail::record(t, l.axes[d], std::move(sizes), operand, mesh, shapes, what);
  }
}

/// The same from what the ranks agreed on: on the summary's path, each axis's extents come from
/// the summary (O(group size), no rank's record), and replicas agree by construction.
inline void measure(SizeTable& t, const plan::Layout& l, const AgreedOperands& a, std::size_t i,
                    const Mesh& mesh, const Shapes& shapes, const std::string& what) {
  if (!a.summarized()) return measure(t, l, a.ranks, i, mesh, shapes, what);
  const auto operand = detail::of_operand(a.mine.size(), i);
  for (std::size_t d = 0; d < l.axes.size(); ++d)
    detail::record(t, l.axes[d], exec::detail::shard_extents(a.summary, i, d, l.axes[d], mesh.shape(), shapes),
                   operand, mesh, shapes, what);
}

/// Shard sizes for every (axis, group) of `l` not known yet: from the shapes metadata, else the
/// split rule.
inline void resolve(SizeTable& t, const plan::Layout& l, const Mesh& mesh, const Shapes& shapes,
                    const std::string& what) {
  for (const auto& [axis, group] : l.axes) {
    if (group.empty() || t.shards.contains({axis, group})) continue;
    const auto parts = mesh.size(group);
    const auto n = t.global.at(axis);
    auto sizes = shapes.resolve(group.name(), axis, parts).value_or(compute_split_shapes(n, parts));
    std::int64_t total = 0;
    for (auto s : sizes) total += s;
    if (total != n)
      throw Error(what + ": the shapes metadata for axis '" + axis + "' on '" + group.name() + "' sums to " +
                  std::to_string(total) + ", but the axis has " + std::to_string(n) + " elements");
    t.shards[{axis, group}] = std::move(sizes);
  }
}

}  // namespace einshard::exec
