#pragma once
/// @file
/// Gradient obligations of a `[param]` operand, read off its plan. The binary planner marks an
/// operand partial over every mesh dimension the computation is spread along but the operand does
/// not vary along (Megatron's f: identity forward, all-reduce backward), because each rank's
/// gradient of it is only that rank's contribution. For a parameter, that all-reduce is better
/// left to the model's bucketed reduction (`reduce_grads`, the hooks): one collective per bucket
/// instead of one per use. `defer_parameter_partial` takes it out of the operand's steps and
/// returns its group: the parameter's inferred gradient groups. Pure.

#include <cstdint>
#include <vector>

#include "einshard/group.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard::plan {

/// `steps` take `operand` to its compute layout. Removes the partial they add over mesh dimensions
/// the operand itself is replicated over (replanning the steps without it) and returns the group
/// of those dimensions (empty when there are none). Partials over dimensions the operand is
/// sharded over stay: their backward is a reduce-scatter into the operand's own shards.
inline Group defer_parameter_partial(std::vector<Step>& steps, const Layout& operand, const MeshShape& mesh) {
  if (steps.empty()) return {};
  Layout target = steps.back().after;
  std::uint32_t varies = operand.partial.bits();
  for (const auto& a : operand.axes) varies |= a.group.bits();
  const std::uint32_t deferred = target.partial.bits() & ~varies;
  if (!deferred) return {};
  target.partial = mesh.group(target.partial.bits() & ~deferred);
  steps = plan_unary(operand, target, mesh);
  return mesh.group(deferred);
}

}  // namespace einshard::plan
