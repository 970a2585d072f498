#pragma once
/// @file
/// Planning of a local (communication-free) einshard: which expressions are local, and the
/// `torch::einsum` equation plus the group reshapes that run them. Pure functions, no torch, no MPI.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/notation/parser.hpp"

namespace einshard::plan {

/// True when the expression needs no communication: no partials anywhere, and every sharded axis
/// is carried unchanged (same name, same mesh dimension) by every operand and the output, so each
/// rank's einsum on its shards is exactly its shard of the global result, forward and backward.
constexpr bool is_local(const notation::ExpressionView& e) noexcept {
  for (const auto& s : e.specs)
    if (s.partial_count != 0) return false;
  for (const auto& s : e.specs)
    for (const auto& a : e.axes_of(s)) {
      for (const auto& t : e.specs) {
        bool found = false;
        for (const auto& b : e.axes_of(t)) {
          if (e.name(b) != e.name(a)) continue;
          if (!notation::detail::same_mesh(e.mesh(b), e.mesh(a))) return false;  // resharded
          found = true;
        }
        if (!a.mesh.empty() && !found) return false;  // a sharded axis some operand lacks
      }
    }
  return true;
}

/// One entry of an operand's layout: a plain axis, a factored group or the ellipsis, with the ids
/// (into `LocalPlan::axis_names`) of its axes.
struct LayoutItem {
  notation::ItemKind kind;
  std::vector<std::uint32_t> ids;
};

struct OperandLayout {
  std::vector<LayoutItem> items;
  bool has_groups = false;
  bool has_ellipsis = false;
  /// Dimensions the items name (a group counts once), not counting what the ellipsis covers.
  std::int64_t rank = 0;
  /// A single plain axis: a 0-d tensor is accepted for it (`loss -> loss` on a scalar).
  [[nodiscard]] bool single_axis() const noexcept {
    return items.size() == 1 && items[0].kind == notation::ItemKind::axis;
  }
};

/// What the local executor needs: the einsum equation over distinct axes and how to reshape
/// factored groups apart (inputs) and together (output).
struct LocalPlan {
  std::string equation;
  std::vector<std::string> axis_names;  ///< by id; the einsum letter of id i is `letter(i)`
  std::vector<OperandLayout> inputs;
  OperandLayout output;
  bool has_groups = false;  ///< some operand needs a reshape around the einsum
};

/// torch::einsum accepts the 52 ASCII letters as subscripts.
inline constexpr std::size_t max_local_axes = 52;
constexpr char letter(std::size_t id) noexcept {
  return id < 26 ? static_cast<char>('a' + id) : static_cast<char>('A' + (id - 26));
}

/// Builds the plan of a local expression (`is_local(e)` must hold). Axes are identified by name.
EINSHARD_INLINE LocalPlan make_local_plan(const notation::ExpressionView& e);

#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE LocalPlan make_local_plan(const notation::ExpressionView& e) {
  LocalPlan plan;
  auto id_of = [&](std::string_view name) -> std::uint32_t {
    for (std::size_t i = 0; i < plan.axis_names.size(); ++i)
      if (plan.axis_names[i] == name) return static_cast<std::uint32_t>(i);
    plan.axis_names.emplace_back(name);
    return static_cast<std::uint32_t>(plan.axis_names.size() - 1);
  };
  auto layout = [&](const notation::Spec& s) {
    OperandLayout out;
    out.has_ellipsis = s.has_ellipsis;
    for (const auto& item : e.items_of(s)) {
      LayoutItem li{item.kind, {}};
      for (const auto& a : e.axes_of(item)) li.ids.push_back(id_of(e.name(a)));
      out.has_groups = out.has_groups || item.kind == notation::ItemKind::group;
      out.rank += item.kind == notation::ItemKind::ellipsis ? 0 : 1;
      out.items.push_back(std::move(li));
    }
    return out;
  };
  for (std::size_t i = 0; i < e.input_count(); ++i) plan.inputs.push_back(layout(e.input(i)));
  plan.output = layout(e.output());
  plan.has_groups = plan.output.has_groups;
  for (const auto& l : plan.inputs) plan.has_groups = plan.has_groups || l.has_groups;
  if (plan.axis_names.size() > max_local_axes)
    throw Error("einshard '" + std::string(e.source) + "': expected at most 52 distinct axes in a local contraction (torch::einsum's letters), found " +
                std::to_string(plan.axis_names.size()));

  auto append = [&](const OperandLayout& l) {
    for (const auto& item : l.items) {
      if (item.kind == notation::ItemKind::ellipsis) plan.equation += "...";
      for (auto id : item.ids) plan.equation += letter(id);
    }
  };
  for (std::size_t i = 0; i < plan.inputs.size(); ++i) {
    if (i) plan.equation += ',';
    append(plan.inputs[i]);
  }
  plan.equation += "->";
  append(plan.output);
  return plan;
}

#endif  // !EINSHARD_DECLARE_ONLY

}  // namespace einshard::plan
