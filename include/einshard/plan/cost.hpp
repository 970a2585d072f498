#pragma once
/// @file
/// The cost model the planners choose with: rank-independent estimates (every rank must make the
/// same choice) of bytes, collectives, peak memory and arithmetic, forward and backward, turned
/// into a score by a policy. The machine constants are calibrated against bench/ on this kind of
/// machine (docs/performance.md).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/policy.hpp"
#include "einshard/plan/step.hpp"

namespace einshard::plan {


/// Average bytes a rank holds of a tensor in layout `l` (shards taken as even).
inline double average_bytes(const Layout& l, const std::map<std::string, std::int64_t, std::less<>>& global,
                            const MeshShape& mesh, std::int64_t element) {
  double n = static_cast<double>(element);
  for (const auto& [axis, group] : l.axes)
    n *= static_cast<double>(global.at(axis)) / (group.empty() ? 1 : mesh.size(group));
  return n;
}

/// Estimate of a list of unary steps.
inline Estimate estimate(const std::vector<Step>& steps,
                         const std::map<std::string, std::int64_t, std::less<>>& global,
                         const MeshShape& mesh, std::int64_t element) {
  Estimate total;
  for (const auto& s : steps) {
    const double in = average_bytes(s.before, global, mesh, element);
    const double out = average_bytes(s.after, global, mesh, element);
    const double P = s.group.empty() ? 1 : mesh.size(s.group);
    const double f = (P - 1) / P;
    // Along an inner dimension an all-gather stages its pieces and concatenates them, and a
    // reduce-scatter packs them rank-major first: one copy of the whole (comm/collectives.hpp).
    const bool inner = s.kind != StepKind::redistribute && s.kind != StepKind::permute && !s.axis.empty() &&
                       s.before.find(s.axis) > 0;
    const double gather_copy = inner ? 1 : 0;
    Estimate e;
    switch (s.kind) {
      case StepKind::all_reduce: e = {2 * f * in, 0, 1, 0, in, 0}; break;
      case StepKind::add_partial: e = {0, 2 * f * in, 0, 1, in, 0}; break;
      case StepKind::reduce_scatter: e = {f * in, f * in, 1, 1, in, 0, gather_copy * in, gather_copy * in}; break;
      case StepKind::gather_to_partial:
        e = {f * out, f * out, 1, 1, out, 0, gather_copy * out, gather_copy * out};
        break;
      case StepKind::split: e = {0, f * in, 0, 1, out, 0, out, gather_copy * in}; break;
      case StepKind::gather: e = {f * out, 0, 1, 0, out, 0, gather_copy * out, in}; break;
      case StepKind::redistribute: {
        // The share of its new piece a rank already holds: all of a whole or unchanged axis, one
        // shard's worth of an axis it held sharded otherwise.
        auto held = [&](const Layout& from, const Layout& to) {
          double h = 1;
          for (std::size_t i = 0; i < from.axes.size(); ++i)
            if (!from.axes[i].group.empty() && from.axes[i].group != to.axes[i].group)
              h /= mesh.size(from.axes[i].group);
          return h;
        };
        // Boxes that are not one contiguous run are packed by the sender and unpacked by the
        // receiver: charged as one copy of what moves.
        const double there = out * (1 - held(s.before, s.after)), back = in * (1 - held(s.after, s.before));
        e = {there, back, 1, 1, out, 0, there, back};
        break;
      }
      case StepKind::permute: break;
    }
    total += e;
  }
  return total;
}

}  // namespace einshard::plan
