#pragma once
/// @file
/// The binary planner: how to compute `x, y -> z` when the operands and the result are sharded.
///
/// A plan fixes a *compute layout*: for every axis of the contraction, the mesh group it is sharded
/// over while the local einsum runs (or none). Then
///   - each operand moves to its compute layout (unary steps: split, gather, all-to-all, ...);
///   - an operand that does not vary along some mesh dimension the computation is spread over is
///     marked partial there (identity forward, all-reduce backward: Megatron's f), because each
///     rank's gradient of it is only that rank's contribution;
///   - the local einsum's result is partial over the groups of the summed (contracted or input-only)
///     sharded axes and of the inputs' partials;
///   - the result moves to the requested output layout (reduce-scatter, all-reduce, all-to-all, ...).
/// Every candidate compute layout (each axis: none, or a group it has in x, y or z) is costed with
/// the rank-independent model of cost.hpp, and the policy picks the cheapest; all ranks choose the
/// same plan. The candidates are kept for `explain`.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/plan/cost.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/local.hpp"
#include "einshard/plan/policy_scope.hpp"
#include "einshard/plan/step.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard::plan {

struct BinaryCandidate {
  Layout compute;  ///< every axis of the contraction with its compute group (no partials)
  std::vector<Step> x_steps, y_steps, z_steps;
  Layout result;   ///< the local einsum's output layout
  Estimate estimate;
  double score = 0;
};

/// A compute layout the planner ruled out, and why.
struct RejectedCandidate {
  Layout compute;
  std::string reason;
};

struct BinaryPlan {
  BinaryCandidate chosen;
  std::string equation;  ///< the local einsum, over the compute layouts of x and y
  std::vector<BinaryCandidate> alternatives;  ///< every valid candidate, cheapest first
  std::vector<RejectedCandidate> rejected;    ///< every invalid one, in enumeration order
};

namespace detail {

/// Mesh dimensions (bits) along which a layout's data varies (sharded axes or partial groups).
inline std::uint32_t varies(const Layout& l) {
  std::uint32_t v = l.partial.bits();
  for (const auto& a : l.axes) v |= a.group.bits();
  return v;
}

/// The operand `l` moved to the compute groups, plus a partial over every mesh dimension the
/// computation varies along (`used`) but the operand does not.
inline Layout operand_target(const Layout& l, const Layout& compute, std::uint32_t used,
                             const MeshShape& mesh) {
  Layout t = l;
  for (auto& a : t.axes) a.group = compute.group(a.axis);
  t.partial = mesh.group(t.partial.bits() | (used & ~varies(t)));
  return t;
}

}  // namespace detail

/// Plans `x, y -> z`. `global` holds every axis's extent; `element` the dtype's size. With
/// `free_output`, only z's axes and their order count: each candidate leaves its result sharded as
/// it was computed (partial sums reduced), as an intermediate of a longer contraction may.
inline BinaryPlan plan_binary(const Layout& x, const Layout& y, const Layout& z, const MeshShape& mesh,
                              const std::map<std::string, std::int64_t, std::less<>>& global,
                              std::int64_t element, const PlanPolicy& policy, bool free_output = false,
                              std::string_view what = {}) {
  // Axes of the contraction, in first-seen order, each with its candidate compute groups.
  std::vector<std::string> axes;
  std::vector<std::vector<Group>> options;
  auto consider = [&](const Layout& l) {
    for (const auto& a : l.axes) {
      auto it = std::find(axes.begin(), axes.end(), a.axis);
      if (it == axes.end()) {
        axes.push_back(a.axis);
        options.push_back({Group{}});
        it = axes.end() - 1;
      }
      auto& opts = options[static_cast<std::size_t>(it - axes.begin())];
      if (!a.group.empty() && std::find(opts.begin(), opts.end(), a.group) == opts.end())
        opts.push_back(a.group);
    }
  };
  consider(x);
  consider(y);
  if (!free_output) consider(z);
  if (x.partial.overlaps(y.partial))
    throw Error(detail::call_named(what) + ": expected at most one input partial over a mesh dimension, found both inputs partial ('" +
                x.str() + "' over '" + x.partial.name() + "', '" + y.str() + "' over '" + y.partial.name() +
                "'); a product of partial sums is not a partial sum: reduce one input first");
  auto in = [](const Layout& l, const std::string& a) { return l.find(a) >= 0; };
  // An output partial over a group that an input shards a summed axis over (or is partial over)
  // keeps the contraction's own partial sums there: its sum over the group is the product on every
  // candidate. Only a partial no input can produce is introduced as Megatron's f (identity
  // forward), the convention of the unary `a b -> a b // tp`.
  std::uint32_t producible = x.partial.bits() | y.partial.bits();
  for (const Layout* l : {&x, &y})
    for (const auto& a : l->axes)
      if (!in(z, a.axis)) producible |= a.group.bits();
  const std::uint32_t natural = z.partial.bits() & producible;

  BinaryPlan plan;
  // One candidate per compute layout, or none (with the reason) when the layout is invalid: a mesh
  // dimension sharding two axes or an axis of a partial input, or an output partial it cannot
  // produce naturally.
  auto candidate = [&](const Layout& compute) -> std::optional<BinaryCandidate> {
    auto reject = [&](std::string why) -> std::optional<BinaryCandidate> {
      plan.rejected.push_back({compute, std::move(why)});
      return std::nullopt;
    };
    // Whether a mesh dimension shards two axes of `l` (all of compute's when null) in the compute
    // layout, or one of them and `l`'s partial.
    auto overlapping = [&](const Layout* l) {
      std::uint32_t seen = l ? l->partial.bits() : 0;
      for (const auto& a : (l ? l->axes : compute.axes)) {
        const auto bits = compute.group(a.axis).bits();
        if (seen & bits) return true;
        seen |= bits;
      }
      return false;
    };
    if (overlapping(nullptr)) return reject("a mesh dimension would shard two axes");
    if (overlapping(&x) || overlapping(&y))
      return reject("a mesh dimension would shard an axis of an input that is partial over it");
    BinaryCandidate c;
    c.compute = compute;
    for (const auto& a : z.axes) c.result.axes.push_back({a.axis, compute.group(a.axis)});
    // Summed axes leave partial sums over their groups.
    std::uint32_t partial = x.partial.bits() | y.partial.bits();
    for (const auto& a : compute.axes)
      if (!in(z, a.axis)) partial |= a.group.bits();
    if (const auto missing = natural & ~partial)
      return reject("it does not produce the output's partial sums over '" + mesh.group(missing).name() + "'");
    for (const auto& a : c.result.axes)  // a result sharded and partial over one dimension
      if (a.group.bits() & partial)
        return reject("its result would be sharded and partial over '" + a.group.name() + "' at once");
    c.result.partial = mesh.group(partial);
    std::uint32_t used = detail::varies(c.result);
    for (const auto& a : compute.axes) used |= a.group.bits();
    Layout target = z;
    if (free_output)
      for (auto& a : target.axes) a.group = compute.group(a.axis);
    // A move the unary planner refuses (e.g. through diagonal blocks) rules a candidate out.
    std::string refusal;
    auto refused = [&] { return reject("a move to or from it is impossible: " + refusal); };
    auto xs = detail::try_plan_unary(x, detail::operand_target(x, compute, used, mesh), mesh, &refusal);
    if (!xs) return refused();
    auto ys = detail::try_plan_unary(y, detail::operand_target(y, compute, used, mesh), mesh, &refusal);
    if (!ys) return refused();
    auto zs = detail::try_plan_unary(c.result, target, mesh, &refusal);
    if (!zs) return refused();
    c.x_steps = std::move(*xs);
    c.y_steps = std::move(*ys);
    c.z_steps = std::move(*zs);
    c.estimate = estimate(c.x_steps, global, mesh, element);
    c.estimate += estimate(c.y_steps, global, mesh, element);
    c.estimate += estimate(c.z_steps, global, mesh, element);
    double flops = 2;
    for (const auto& a : compute.axes)
      flops *= static_cast<double>(global.at(a.axis)) / (a.group.empty() ? 1 : mesh.size(a.group));
    c.estimate.flops = flops;
    c.score = policy.score(c.estimate);
    return c;
  };

  std::vector<std::size_t> pick(axes.size(), 0);
  while (true) {
    Layout compute;
    for (std::size_t i = 0; i < axes.size(); ++i) compute.axes.push_back({axes[i], options[i][pick[i]]});
    if (auto c = candidate(compute)) plan.alternatives.push_back(std::move(*c));
    std::size_t i = 0;
    while (i < axes.size() && ++pick[i] == options[i].size()) pick[i++] = 0;
    if (i == axes.size()) break;
  }
  if (plan.alternatives.empty())
    throw Error(detail::call_named(what) + ": expected a valid way to compute '" + x.str() + ", " + y.str() +
                " -> " + z.str() + "' on this mesh, found none of " + std::to_string(plan.rejected.size()) +
                " candidates valid");
  std::stable_sort(plan.alternatives.begin(), plan.alternatives.end(),
                   [](const BinaryCandidate& a, const BinaryCandidate& b) { return a.score < b.score; });
  plan.chosen = plan.alternatives.front();

  // The local einsum over the operands as they arrive (their axis order is kept by the unary
  // steps, which end in the compute layout), producing z's axis order.
  auto letter_of = [&](const std::string& a) {
    const auto i = static_cast<std::size_t>(std::find(axes.begin(), axes.end(), a) - axes.begin());
    if (i >= max_local_axes)
      throw Error(detail::call_named(what) + ": expected at most 52 distinct axes in one contraction, found " +
                  std::to_string(axes.size()));
    return letter(i);
  };
  for (const auto& a : x.axes) plan.equation += letter_of(a.axis);
  plan.equation += ',';
  for (const auto& a : y.axes) plan.equation += letter_of(a.axis);
  plan.equation += "->";
  for (const auto& a : z.axes) plan.equation += letter_of(a.axis);
  return plan;
}

}  // namespace einshard::plan
