#pragma once
/// @file
/// The shape of a mesh (dimension names and sizes) and the rules for naming its groups: what the
/// planner needs of a mesh, without MPI.

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"

namespace einshard {

/// Names and sizes of a mesh's dimensions. A group is one dimension (`"sp"`) or a compound of
/// several joined by '-' (`"dp-sp"`, the same group as `"sp-dp"`).
struct MeshShape {
  std::vector<std::string> names;
  std::vector<int> sizes;

  /// Mesh dimension indices of a group, sorted in mesh order. Empty, unknown and repeated
  /// components are errors.
  [[nodiscard]] std::vector<int> components(std::string_view group) const {
    std::vector<int> dims;
    std::size_t begin = 0;
    while (true) {
      const auto end = group.find('-', begin);
      const auto part = group.substr(begin, end == std::string_view::npos ? end : end - begin);
      if (part.empty())
        throw Error("Mesh: empty component in mesh group '" + std::string(group) + "'");
      const auto it = std::find(names.begin(), names.end(), part);
      if (it == names.end())
        throw Error("Mesh: unknown mesh dimension '" + std::string(part) + "' (mesh has " +
                    joined_names() + ")");
      const int d = static_cast<int>(it - names.begin());
      if (std::find(dims.begin(), dims.end(), d) != dims.end())
        throw Error("Mesh: repeated component '" + std::string(part) + "' in mesh group '" +
                    std::string(group) + "'");
      dims.push_back(d);
      if (end == std::string_view::npos) break;
      begin = end + 1;
    }
    std::sort(dims.begin(), dims.end());
    return dims;
  }

  /// The group's name with its components in mesh order: one spelling per group.
  [[nodiscard]] std::string canonical(std::string_view group) const {
    std::string out;
    for (int d : components(group)) out += (out.empty() ? "" : "-") + names[static_cast<std::size_t>(d)];
    return out;
  }

  /// Number of ranks in a group.
  [[nodiscard]] int size(std::string_view group) const {
    int n = 1;
    for (int d : components(group)) n *= sizes[static_cast<std::size_t>(d)];
    return n;
  }

  /// The coordinate within a group of the rank at mesh coordinates `coords` (row-major over the
  /// group's dimensions, which is also the rank's rank in the group's communicator).
  template <class Coords>
  [[nodiscard]] int coordinate(std::string_view group, const Coords& coords) const {
    int c = 0;
    for (int d : components(group))
      c = c * sizes[static_cast<std::size_t>(d)] + coords[static_cast<std::size_t>(d)];
    return c;
  }

  /// The dimensions of a group as a mask over the mesh ("" is the empty mask).
  [[nodiscard]] std::vector<bool> mask(std::string_view group) const {
    std::vector<bool> m(sizes.size(), false);
    if (!group.empty())
      for (int d : components(group)) m[static_cast<std::size_t>(d)] = true;
    return m;
  }

  /// The canonical name of the group of the masked dimensions ("" for none).
  [[nodiscard]] std::string group(const std::vector<bool>& mask) const {
    std::string g;
    for (std::size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) g += (g.empty() ? "" : "-") + names[d];
    return g;
  }

  [[nodiscard]] std::string joined_names() const {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }
};

}  // namespace einshard
