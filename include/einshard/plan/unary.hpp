#pragma once
/// @file
/// The unary planner: which steps take a tensor from one layout to another. A pure function of the
/// two layouts and the mesh shape (no sizes, no MPI), so it is unit-testable and cacheable.
///
/// Order: reduce pending partials first (on the smallest data), then turn shards into partials,
/// then change the layout in one step, then add partials, then permute. A layout change that only
/// splits is a local slice; one that only gathers is all-gathers; anything else — a move between
/// mesh dimensions, a repartition on one dimension, several axes at once, a split mixed with a
/// gather — is one all-to-all(v) that moves each element at most once. There is no gather+split
/// fallback.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"

namespace einshard::plan {

namespace detail {

/// Whether no mesh dimension shards two axes of `l`: the layouts the all-to-all engine can read
/// from or write to (one that does holds only diagonal blocks).
inline bool disjoint_groups(const Layout& l) {
  std::uint32_t seen = 0;
  for (const auto& a : l.axes) {
    if (seen & a.group.bits()) return false;
    seen |= a.group.bits();
  }
  return true;
}

/// Why `l` cannot be repartitioned (it is not `disjoint_groups`).
inline std::string diagonal_refusal(const Layout& l) {
  for (std::size_t i = 0; i < l.axes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (l.axes[i].group.overlaps(l.axes[j].group))
        return "expected each mesh dimension to shard one axis, found '" + l.axes[j].axis + "' and '" +
               l.axes[i].axis + "' sharded over it in '" + l.str() +
               "' (such a layout holds only diagonal blocks and cannot be repartitioned)";
  return {};
}

/// The steps from `in` to `out`, or nothing when there are none; then `*refusal` (when given) says
/// why. The binary planner asks this way for every candidate it weighs, so a refused candidate
/// costs neither an exception nor a message.
inline std::optional<std::vector<Step>> try_plan_unary(const Layout& in, const Layout& out,
                                                       const MeshShape& mesh, std::string* refusal) {
  auto refuse = [&](auto&& why) -> std::optional<std::vector<Step>> {
    if (refusal) *refusal = why();
    return std::nullopt;
  };
  // Same axes on both sides: a distributed unary op moves data, it does not reduce axes.
  auto names = [](const Layout& l) {
    std::vector<std::string> n;
    for (const auto& p : l.axes) n.push_back(p.axis);
    std::sort(n.begin(), n.end());
    return n;
  };
  if (names(in) != names(out))
    return refuse([&] {
      return "expected the same axes on both sides of a distributed unary operation, found '" + in.str() +
             "' -> '" + out.str() + "' (sum an axis away locally first)";
    });

  std::vector<Step> steps;
  Layout cur = in;
  auto push = [&](StepKind kind, Group group, std::string axis, const Layout& next) {
    steps.push_back({kind, std::move(group), std::move(axis), cur, next, {}});
    cur = next;
  };

  // 1. Partial sums the output does not keep: reduce-scatter straight into an axis the output
  //    shards over (part of) them, then one all-reduce over all the rest together.
  auto reduce = mesh.minus(in.partial, out.partial);
  for (const auto& a : in.axes) {
    const auto& to = out.group(a.axis);
    if (!a.group.empty() || to.empty() || !to.within(reduce)) continue;
    auto next = cur;
    next.axes[static_cast<std::size_t>(next.find(a.axis))].group = to;
    next.partial = mesh.minus(cur.partial, to);
    push(StepKind::reduce_scatter, to, a.axis, next);
    reduce = mesh.minus(reduce, to);
  }
  if (!reduce.empty()) {
    auto next = cur;
    next.partial = mesh.minus(cur.partial, reduce);
    push(StepKind::all_reduce, reduce, "", next);
  }

  // 2. Shards that become partial sums over their own group (the all-gather whose backward
  //    reduce-scatters).
  auto add = mesh.minus(out.partial, cur.partial);
  for (const auto& a : cur.axes) {
    if (a.group.empty() || !out.group(a.axis).empty() || !a.group.within(add)) continue;
    auto next = cur;
    next.axes[static_cast<std::size_t>(next.find(a.axis))].group = {};
    next.partial = mesh.unite(cur.partial, a.group);
    add = mesh.minus(add, a.group);
    push(StepKind::gather_to_partial, a.group, a.axis, next);
  }

  // 3. The layout change.
  std::vector<std::string> splits, gathers, moves;
  for (const auto& a : cur.axes) {
    const auto& to = out.group(a.axis);
    if (a.group == to) continue;
    (a.group.empty() ? splits : to.empty() ? gathers : moves).push_back(a.axis);
  }
  if (gathers.empty() && moves.empty()) {
    for (const auto& axis : splits) {
      auto next = cur;
      next.axes[static_cast<std::size_t>(next.find(axis))].group = out.group(axis);
      push(StepKind::split, out.group(axis), axis, next);
    }
  } else if (splits.empty() && moves.empty()) {
    // Gathering diagonal blocks would not rebuild the tensor.
    if (!disjoint_groups(cur)) return refuse([&] { return diagonal_refusal(cur); });
    for (const auto& axis : gathers) {
      auto next = cur;
      const auto i = static_cast<std::size_t>(next.find(axis));
      const auto group = next.axes[i].group;
      next.axes[i].group = {};
      push(StepKind::gather, group, axis, next);
    }
  } else {
    auto next = cur;
    for (auto& a : next.axes) a.group = out.group(a.axis);
    if (!disjoint_groups(cur)) return refuse([&] { return diagonal_refusal(cur); });
    if (!disjoint_groups(next)) return refuse([&] { return diagonal_refusal(next); });
    push(StepKind::redistribute, {}, "", next);
  }

  // 4. Partial sums the output adds (Megatron's f: identity forward, all-reduce backward).
  if (!add.empty()) {
    auto next = cur;
    next.partial = mesh.unite(cur.partial, add);
    push(StepKind::add_partial, add, "", next);
  }

  // 5. Axis order.
  std::vector<std::int64_t> perm;
  for (const auto& a : out.axes) perm.push_back(cur.find(a.axis));
  if (!std::is_sorted(perm.begin(), perm.end())) {
    Layout next = out;
    next.partial = cur.partial;
    steps.push_back({StepKind::permute, {}, "", cur, next, perm});
  }
  return steps;
}

}  // namespace detail

/// The steps from `in` to `out`; an error naming the call `what` (detail::call_named) when there are none.
inline std::vector<Step> plan_unary(const Layout& in, const Layout& out, const MeshShape& mesh,
                                    std::string_view what = {}) {
  std::string refusal;
  auto steps = detail::try_plan_unary(in, out, mesh, &refusal);
  if (!steps) throw Error(detail::call_named(what) + ": " + refusal);
  return std::move(*steps);
}

}  // namespace einshard::plan
