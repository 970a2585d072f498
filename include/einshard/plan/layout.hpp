#pragma once
/// @file
/// Where a tensor's data lives: each axis whole or sharded over a mesh group, plus the groups over
/// which the tensor is a partial sum. Pure values, built from notation specs.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/expression.hpp"

namespace einshard::plan {

/// One axis: its name and the mesh group sharding it; empty when every rank holds it whole.
struct Placement {
  std::string axis;
  Group group;
  friend bool operator==(const Placement&, const Placement&) = default;
};

struct Layout {
  std::vector<Placement> axes;
  /// Every mesh dimension the tensor is a partial sum over; empty when it is not partial.
  /// `// (sp, dp)` and `// dp-sp` are one and the same: a sum over both dimensions.
  Group partial;

  [[nodiscard]] std::ptrdiff_t find(std::string_view axis) const {
    for (std::size_t i = 0; i < axes.size(); ++i)
      if (axes[i].axis == axis) return static_cast<std::ptrdiff_t>(i);
    return -1;
  }
  [[nodiscard]] const Group& group(std::string_view axis) const {
    return axes[static_cast<std::size_t>(find(axis))].group;
  }
  friend bool operator==(const Layout&, const Layout&) = default;

  /// "a/dp b // tp": the layout in notation form, for messages and plans.
  [[nodiscard]] std::string str() const {
    std::string out;
    for (const auto& p : axes) {
      if (!out.empty()) out += ' ';
      out += p.axis;
      if (!p.group.empty()) out += "/" + p.group.name();
    }
    if (!partial.empty()) out += " // " + partial.name();
    return out;
  }
};

/// The name of an axis covered by an ellipsis, counted from the right (as torch aligns them), so
/// the ellipses of different operands name the same axes.
inline std::string ellipsis_axis(std::int64_t from_right) { return "...." + std::to_string(from_right); }

namespace detail {

/// The call a planner's error names: `what` as its caller spells it ("einshard 'a/tp b -> a b/tp'"),
/// else the notation `source`. Built only when there is an error.
inline std::string call_named(std::string_view what, std::string_view source = {}) {
  if (!what.empty()) return std::string(what);
  return source.empty() ? std::string("einshard") : "einshard '" + std::string(source) + "'";
}

}  // namespace detail

/// The layout of an operand of a distributed operation, its ellipsis standing for `ellipsis_dims`
/// whole axes. Groups are checked against the mesh and spelled canonically. `what` names the call
/// in an error (detail::call_named).
inline Layout layout_of(const notation::ExpressionView& e, const notation::Spec& s,
                        std::int64_t ellipsis_dims, const MeshShape& mesh, std::string_view what = {}) {
  Layout l;
  for (const auto& item : e.items_of(s)) {
    if (item.kind == notation::ItemKind::group) {
      std::string group;
      for (const auto& a : e.axes_of(item)) group += (group.empty() ? "(" : " ") + std::string(e.name(a));
      throw Error(detail::call_named(what, e.source) + ": expected plain axes in a distributed operation, found '" +
                  group + ")' (factored groups are local only: reshape before or after the distributed step)");
    }
    if (item.kind == notation::ItemKind::ellipsis) {
      for (std::int64_t i = ellipsis_dims; i > 0; --i) l.axes.push_back({ellipsis_axis(i - 1), {}});
      continue;
    }
    const auto& a = e.axes_of(item)[0];
    const auto name = std::string(e.name(a));
    if (l.find(name) >= 0)
      throw Error(detail::call_named(what, e.source) + ": expected each axis once in an operand, found '" + name +
                  "' twice");
    l.axes.push_back({name, mesh.group(a.mesh.empty() ? std::string_view() : e.mesh(a))});
  }
  for (const auto& p : e.partials_of(s)) {
    const auto g = mesh.group(e.text(p));
    if (g.overlaps(l.partial))
      throw Error(detail::call_named(what, e.source) +
                  ": expected the partial groups of an operand on distinct mesh dimensions, found '" +
                  l.partial.name() + "' and '" + g.name() + "' sharing '" +
                  mesh.group(l.partial.bits() & g.bits()).name() + "'");
    l.partial = mesh.unite(l.partial, g);
  }
  return l;
}

}  // namespace einshard::plan
