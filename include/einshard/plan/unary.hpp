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
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"

namespace einshard::plan {

namespace detail {

inline bool overlap(const MeshShape& mesh, const std::string& a, const std::string& b) {
  const auto ca = mesh.components(a), cb = mesh.components(b);
  return std::any_of(ca.begin(), ca.end(),
                     [&](int d) { return std::find(cb.begin(), cb.end(), d) != cb.end(); });
}

/// A layout the all-to-all engine can read from or write to: no mesh dimension shards two axes.
inline void require_disjoint_groups(const Layout& l, const MeshShape& mesh) {
  for (std::size_t i = 0; i < l.axes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (!l.axes[i].group.empty() && !l.axes[j].group.empty() &&
          overlap(mesh, l.axes[i].group, l.axes[j].group))
        throw Error("einshard: axes '" + l.axes[j].axis + "' and '" + l.axes[i].axis +
                    "' are sharded over the same mesh dimension in '" + l.str() +
                    "'; such a layout holds only diagonal blocks and cannot be repartitioned");
}

}  // namespace detail

inline std::vector<Step> plan_unary(const Layout& in, const Layout& out, const MeshShape& mesh) {
  // Same axes on both sides: a distributed unary op moves data, it does not reduce axes.
  auto names = [](const Layout& l) {
    std::vector<std::string> n;
    for (const auto& p : l.axes) n.push_back(p.axis);
    std::sort(n.begin(), n.end());
    return n;
  };
  if (names(in) != names(out))
    throw Error("einshard: a distributed unary operation needs the same axes on both sides ('" +
                in.str() + "' -> '" + out.str() + "'); sum an axis away locally first");

  std::vector<Step> steps;
  Layout cur = in;
  auto push = [&](StepKind kind, std::string group, std::string axis, const Layout& next) {
    steps.push_back({kind, std::move(group), std::move(axis), cur, next, {}});
    cur = next;
  };

  // Partial sums are over sets of mesh dimensions (masks).
  auto mask = [&](const std::string& g) { return mesh.mask(g); };
  auto minus = [](std::vector<bool> a, const std::vector<bool>& b) {
    for (std::size_t d = 0; d < a.size(); ++d) a[d] = a[d] && !b[d];
    return a;
  };
  auto plus = [](std::vector<bool> a, const std::vector<bool>& b) {
    for (std::size_t d = 0; d < a.size(); ++d) a[d] = a[d] || b[d];
    return a;
  };
  auto within = [](const std::vector<bool>& a, const std::vector<bool>& b) {  // a is a non-empty subset of b
    bool any = false;
    for (std::size_t d = 0; d < a.size(); ++d) {
      if (a[d] && !b[d]) return false;
      any = any || a[d];
    }
    return any;
  };
  auto none = [](const std::vector<bool>& a) { return std::none_of(a.begin(), a.end(), [](bool b) { return b; }); };

  // 1. Partial sums the output does not keep: reduce-scatter straight into an axis the output
  //    shards over (part of) them, then one all-reduce over all the rest together.
  auto reduce = minus(mask(in.partial), mask(out.partial));
  for (const auto& a : in.axes) {
    const auto& to = out.group(a.axis);
    if (!a.group.empty() || to.empty() || !within(mask(to), reduce)) continue;
    auto next = cur;
    next.axes[static_cast<std::size_t>(next.find(a.axis))].group = to;
    next.partial = mesh.group(minus(mask(cur.partial), mask(to)));
    push(StepKind::reduce_scatter, to, a.axis, next);
    reduce = minus(reduce, mask(to));
  }
  if (!none(reduce)) {
    auto next = cur;
    next.partial = mesh.group(minus(mask(cur.partial), reduce));
    push(StepKind::all_reduce, mesh.group(reduce), "", next);
  }

  // 2. Shards that become partial sums over their own group (the all-gather whose backward
  //    reduce-scatters).
  auto add = minus(mask(out.partial), mask(cur.partial));
  for (const auto& a : cur.axes) {
    if (a.group.empty() || !out.group(a.axis).empty() || !within(mask(a.group), add)) continue;
    auto next = cur;
    next.axes[static_cast<std::size_t>(next.find(a.axis))].group.clear();
    next.partial = mesh.group(plus(mask(cur.partial), mask(a.group)));
    add = minus(add, mask(a.group));
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
    detail::require_disjoint_groups(cur, mesh);  // gathering diagonal blocks would not rebuild it
    for (const auto& axis : gathers) {
      auto next = cur;
      const auto i = static_cast<std::size_t>(next.find(axis));
      const auto group = next.axes[i].group;
      next.axes[i].group.clear();
      push(StepKind::gather, group, axis, next);
    }
  } else {
    auto next = cur;
    for (auto& a : next.axes) a.group = out.group(a.axis);
    detail::require_disjoint_groups(cur, mesh);
    detail::require_disjoint_groups(next, mesh);
    push(StepKind::redistribute, "", "", next);
  }

  // 4. Partial sums the output adds (Megatron's f: identity forward, all-reduce backward).
  if (!none(add)) {
    auto next = cur;
    next.partial = mesh.group(plus(mask(cur.partial), add));
    push(StepKind::add_partial, mesh.group(add), "", next);
  }

  // 5. Axis order.
  std::vector<std::int64_t> perm;
  for (const auto& a : out.axes) perm.push_back(cur.find(a.axis));
  if (!std::is_sorted(perm.begin(), perm.end())) {
    Layout next = out;
    next.partial = cur.partial;
    steps.push_back({StepKind::permute, "", "", cur, next, perm});
  }
  return steps;
}

}  // namespace einshard::plan
