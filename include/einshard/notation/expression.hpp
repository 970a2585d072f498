#pragma once
/// @file
/// The parsed form of a notation: flat tables of axes, items, partials and operand specs.
///
/// Every name is an (offset, length) slice of the source text rather than a `string_view`, so the
/// compile-time form (`StaticExpression`) is a structural value, and copies never dangle.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace einshard::notation {

/// A slice of the source text.
struct Slice {
  std::uint32_t begin = 0;
  std::uint32_t length = 0;
  [[nodiscard]] constexpr bool empty() const noexcept { return length == 0; }
};

/// One named axis, optionally sharded over a mesh dimension (`a/sp`, `a/dp-sp`).
struct Axis {
  Slice name;
  Slice mesh;  ///< empty: the axis is not sharded
};

enum class ItemKind : std::uint8_t { axis, group, ellipsis };

/// One entry of an operand's axis list: a plain axis, a factored group `(h p)` or `...`.
/// Axes of a group are consecutive in the axis table.
struct Item {
  ItemKind kind = ItemKind::axis;
  std::uint32_t first_axis = 0;
  std::uint32_t axis_count = 0;  ///< 1 for a plain axis, 0 for an ellipsis
  std::uint32_t column = 0;      ///< 0-based offset in the source
};

/// `[param, grad=..., init_sync=...]` on an input operand.
struct Annotation {
  bool param = false;
  Slice grad;       ///< empty when absent
  Slice init_sync;  ///< empty when absent
};

/// One operand (input or output): its items, its partial mesh dimensions (`// tp`, `// (sp,dp)`)
/// and its annotation. Axes of an operand are consecutive in the axis table.
struct Spec {
  std::uint32_t first_item = 0;
  std::uint32_t item_count = 0;
  std::uint32_t first_axis = 0;
  std::uint32_t axis_count = 0;
  std::uint32_t first_partial = 0;
  std::uint32_t partial_count = 0;
  std::uint32_t column = 0;
  bool has_ellipsis = false;
  Annotation annotation;
};

/// A non-owning view of a parsed expression: the inputs are `specs[0 .. n-2]`, the output is the
/// last spec. Accessors turn slices back into names.
struct ExpressionView {
  std::string_view source;
  std::span<const Axis> axes;
  std::span<const Item> items;
  std::span<const Slice> partials;
  std::span<const Spec> specs;

  [[nodiscard]] constexpr std::size_t input_count() const noexcept { return specs.size() - 1; }
  [[nodiscard]] constexpr const Spec& input(std::size_t i) const noexcept { return specs[i]; }
  [[nodiscard]] constexpr const Spec& output() const noexcept { return specs.back(); }
  [[nodiscard]] constexpr std::string_view text(Slice s) const noexcept {
    return source.substr(s.begin, s.length);
  }
  [[nodiscard]] constexpr std::string_view name(const Axis& a) const noexcept { return text(a.name); }
  [[nodiscard]] constexpr std::string_view mesh(const Axis& a) const noexcept { return text(a.mesh); }
  [[nodiscard]] constexpr std::span<const Item> items_of(const Spec& s) const noexcept {
    return items.subspan(s.first_item, s.item_count);
  }
  [[nodiscard]] constexpr std::span<const Axis> axes_of(const Spec& s) const noexcept {
    return axes.subspan(s.first_axis, s.axis_count);
  }
  [[nodiscard]] constexpr std::span<const Axis> axes_of(const Item& i) const noexcept {
    return axes.subspan(i.first_axis, i.axis_count);
  }
  [[nodiscard]] constexpr std::span<const Slice> partials_of(const Spec& s) const noexcept {
    return partials.subspan(s.first_partial, s.partial_count);
  }
};

/// The growable tables the parser fills. Used transiently at compile time and kept (next to an
/// owned copy of the source) for run-time strings.
struct Expression {
  std::vector<Axis> axes;
  std::vector<Item> items;
  std::vector<Slice> partials;
  std::vector<Spec> specs;

  [[nodiscard]] constexpr ExpressionView view(std::string_view source) const noexcept {
    return {source, axes, items, partials, specs};
  }
};

}  // namespace einshard::notation
