#pragma once
/// @file
/// The shape of a mesh (dimension names and sizes) and the rules for naming its groups: what the
/// planner needs of a mesh, without MPI.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/group.hpp"

namespace einshard {

/// Names and sizes of a mesh's dimensions. A group is one dimension (`"sp"`) or a compound of
/// several joined by '-' (`"dp-sp"`, the same group as `"sp-dp"`); `group` resolves its text into a
/// `Group` once, and everything after works on that value.
struct MeshShape {
  std::vector<std::string> names;
  std::vector<int> sizes;

  /// The group named `text` (`"sp"`, `"dp-sp"`, `"sp-dp"`; "" is the empty group), or nothing when
  /// it names none: an empty, unknown or repeated component, which `*why` (when given) describes.
  [[nodiscard]] std::optional<Group> find_group(std::string_view text, std::string* why = nullptr) const {
    std::uint32_t bits = 0;
    for (std::size_t begin = 0; !text.empty();) {
      const auto end = text.find('-', begin);
      const auto part = text.substr(begin, end == std::string_view::npos ? end : end - begin);
      const auto it = std::find(names.begin(), names.end(), part);
      const auto d = it - names.begin();
      if (part.empty() || it == names.end() || ((bits >> d) & 1u)) {
        if (why)
          *why = "mesh group '" + std::string(text) + "': expected " +
                 (part.empty()         ? "a mesh dimension between each '-', found an empty component"
                  : it == names.end() ? "dimensions of the mesh (" + joined_names() + "), found unknown mesh dimension '" +
                                            std::string(part) + "'"
                                      : "each dimension once, found repeated component '" + std::string(part) + "'");
        return std::nullopt;
      }
      bits |= 1u << d;
      if (end == std::string_view::npos) break;
      begin = end + 1;
    }
    return group(bits);
  }

  /// The group named `text`, resolved once: the planners and executors work on the value.
  [[nodiscard]] Group group(std::string_view text) const {
    std::string why;
    auto g = find_group(text, &why);
    if (!g) throw Error(why);
    return std::move(*g);
  }

  /// Mesh dimension indices of a (non-empty) group, in mesh order.
  [[nodiscard]] std::vector<int> components(std::string_view text) const {
    if (text.empty()) throw Error("mesh group '': expected a mesh dimension, found an empty component");
    const auto g = group(text);
    std::vector<int> dims;
    for (std::size_t d = 0; d < names.size(); ++d)
      if (g.contains(static_cast<int>(d))) dims.push_back(static_cast<int>(d));
    return dims;
  }

  /// The group of the dimensions whose bits are set.
  [[nodiscard]] Group group(std::uint32_t bits) const {
    std::string name;
    for (std::size_t d = 0; d < names.size(); ++d)
      if ((bits >> d) & 1u) name += (name.empty() ? "" : "-") + names[d];
    return {bits, std::move(name)};
  }

  /// The group's name with its components in mesh order: one spelling per group.
  [[nodiscard]] std::string canonical(std::string_view text) const { return group(text).name(); }

  /// Number of ranks in a group (1 for the empty group).
  [[nodiscard]] int size(const Group& g) const {
    int n = 1;
    for (std::size_t d = 0; d < sizes.size(); ++d)
      if (g.contains(static_cast<int>(d))) n *= sizes[d];
    return n;
  }
  [[nodiscard]] int size(std::string_view text) const { return size(group(text)); }

  /// The coordinate within a group of the rank at mesh coordinates `coords` (row-major over the
  /// group's dimensions, which is also the rank's rank in the group's communicator).
  template <class Coords>
  [[nodiscard]] int coordinate(const Group& g, const Coords& coords) const {
    int c = 0;
    for (std::size_t d = 0; d < sizes.size(); ++d)
      if (g.contains(static_cast<int>(d))) c = c * sizes[d] + coords[d];
    return c;
  }

  /// Group operations that name a result: union and difference.
  [[nodiscard]] Group unite(const Group& a, const Group& b) const { return group(a.bits() | b.bits()); }
  [[nodiscard]] Group minus(const Group& a, const Group& b) const { return group(a.bits() & ~b.bits()); }

  [[nodiscard]] std::string joined_names() const {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }
};

}  // namespace einshard
