#pragma once
/// @file
/// `Group`: a set of mesh dimensions (`dp`, `dp-sp`, the partial dimensions of a tensor), resolved
/// against a mesh's names once (`MeshShape::group`) and from then on a value: union, difference,
/// overlap and subset are bit operations, and the canonical name (components in mesh order) is
/// kept for messages and plans.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace einshard {

struct MeshShape;

class Group {
 public:
  /// The most mesh dimensions a group can name.
  static constexpr int max_dims = 32;

  /// The empty group (no dimension): "held whole" for an axis, "not partial" for a tensor.
  Group() = default;

  /// Bit d set: mesh dimension d is in the group.
  [[nodiscard]] std::uint32_t bits() const noexcept { return bits_; }
  /// "dp-sp": the components in mesh order; "" for the empty group.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] bool empty() const noexcept { return bits_ == 0; }
  [[nodiscard]] bool contains(int dim) const noexcept { return (bits_ >> dim) & 1u; }
  [[nodiscard]] bool overlaps(const Group& o) const noexcept { return (bits_ & o.bits_) != 0; }
  /// Every dimension of this group is in `o`.
  [[nodiscard]] bool within(const Group& o) const noexcept { return (bits_ & ~o.bits_) == 0; }

  friend bool operator==(const Group& a, const Group& b) noexcept { return a.bits_ == b.bits_; }
  /// By bits: an order for maps keyed by group.
  friend bool operator<(const Group& a, const Group& b) noexcept { return a.bits_ < b.bits_; }
  /// Compares the canonical name: `group == "dp-sp"` (a test's or a message's spelling).
  friend bool operator==(const Group& a, std::string_view name) noexcept { return a.name_ == name; }

 private:
  friend struct MeshShape;
  Group(std::uint32_t bits, std::string name) : bits_(bits), name_(std::move(name)) {}

  std::uint32_t bits_ = 0;
  std::string name_;
};

}  // namespace einshard
