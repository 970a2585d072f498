#pragma once
/// @file
/// Gradient obligations of a `[param]` operand, read off its plan. The binary planner marks an
/// operand partial over every mesh dimension the computation is spread along but the operand does
/// not vary along (Megatron's f: identity forward, all-reduce backward), because each rank's
/// gradient of it is only that rank's contribution. For a parameter, that all-reduce is better
/// left to the model's bucketed reduction (`reduce_grads`, the hooks): one collective per bucket
/// instead of one per use. `defer_parameter_partial` takes it out of the operand's steps and
/// returns its group: the parameter's inferred gradient groups. Pure.

#include <string>
#include <vector>

#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard::plan {

/// `steps` take `operand` to its compute layout. Removes the partial they add over mesh dimensions
/// the operand itself is replicated over (replanning the steps without it) and returns the group
/// of those dimensions ("" when there are none). Partials over dimensions the operand is sharded
/// over stay: their backward is a reduce-scatter into the operand's own shards.
inline std::string defer_parameter_partial(std::vector<Step>& steps, const Layout& operand, const MeshShape& mesh) {
  if (steps.empty()) return {};
  Layout target = steps.back().after;
  auto varies = mesh.mask(operand.partial);
  for (const auto& a : operand.axes)
    if (!a.group.empty())
      for (int d : mesh.components(a.group)) varies[static_cast<std::size_t>(d)] = true;
  auto partial = mesh.mask(target.partial);
  std::vector<bool> deferred(partial.size(), false);
  for (std::size_t d = 0; d < partial.size(); ++d)
    if (partial[d] && !varies[d]) deferred[d] = true, partial[d] = false;
  const auto group = mesh.group(deferred);
  if (group.empty()) return {};
  target.partial = mesh.group(partial);
  steps = plan_unary(operand, target, mesh);
  return group;
}

}  // namespace einshard::plan
