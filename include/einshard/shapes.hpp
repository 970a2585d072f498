#pragma once
/// @file
/// Split metadata (`shapes`) and the one split rule every split, gather and partition uses.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/parser.hpp"

namespace einshard {

/// The split rule of the original: chunk = ceil(size/P); if that would leave the last rank with
/// nothing or less, use floor(size/P) and give the remainder to the last rank.
/// `(10,4) -> [3,3,3,1]`, `(9,4) -> [2,2,2,3]`, `(3,4) -> [0,0,0,3]`, `(7,2) -> [4,3]`.
inline std::vector<std::int64_t> compute_split_shapes(std::int64_t size, std::int64_t parts) {
  if (parts <= 0) throw Error("compute_split_shapes: the number of parts must be positive");
  if (size < 0) throw Error("compute_split_shapes: the size must not be negative");
  std::int64_t chunk = (size + parts - 1) / parts;
  if (size - chunk * (parts - 1) <= 0) chunk = size / parts;
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts), chunk);
  out.back() = size - chunk * (parts - 1);
  return out;
}

/// Split shapes of one mesh dimension: one list for every axis, or one list per axis.
struct DimShapes {
  std::vector<std::int64_t> all;
  std::map<std::string, std::vector<std::int64_t>, std::less<>> by_axis;

  DimShapes() = default;
  DimShapes(std::vector<std::int64_t> shapes) : all(std::move(shapes)) {}  // NOLINT
  DimShapes(std::initializer_list<std::int64_t> shapes) : all(shapes) {}   // NOLINT
  DimShapes(std::initializer_list<std::pair<const std::string, std::vector<std::int64_t>>> axes)
      : by_axis(axes) {}
  /// Built at run time (from a configuration, a generator): one list per axis.
  explicit DimShapes(std::map<std::string, std::vector<std::int64_t>, std::less<>> axes)
      : by_axis(std::move(axes)) {}
};

/// The three forms of the `shapes` option: one list for every mesh dimension and axis
/// (`Shapes(std::vector<int64_t>{...})`), a list per mesh dimension (`Shapes{{"sp", s}}`), or a list
/// per mesh dimension and axis (`Shapes{{"dp", {{"a", sa}, {"b", sb}}}}`). Built in a loop, the same:
/// `shapes["sp"] = sizes;` or `shapes["dp"].by_axis["a"] = sa;`.
class Shapes {
 public:
  Shapes() = default;
  explicit Shapes(std::vector<std::int64_t> all) : all_(std::move(all)) {}
  Shapes(std::initializer_list<std::pair<const std::string, DimShapes>> by_dim) : by_dim_(by_dim) {}
  /// Built at run time: one entry per mesh dimension (or compound group).
  explicit Shapes(std::map<std::string, DimShapes, std::less<>> by_dim) : by_dim_(std::move(by_dim)) {}

  /// The entry of mesh dimension (or group) `dim`, made empty if there is none.
  DimShapes& operator[](std::string_view dim) {
    if (all_) throw Error("Shapes: these shapes give one list for every mesh dimension; they take no entry for '" +
                          std::string(dim) + "'");
    auto it = by_dim_.find(dim);
    if (it == by_dim_.end()) it = by_dim_.emplace(std::string(dim), DimShapes()).first;
    return it->second;
  }

  [[nodiscard]] bool empty() const noexcept { return !all_ && by_dim_.empty(); }

  /// The whole metadata as text (for cache keys: equal metadata, equal text).
  [[nodiscard]] std::string key() const {
    std::string k;
    auto list = [&](const std::vector<std::int64_t>& v) {
      k += '[';
      for (auto x : v) k += std::to_string(x) + ',';
      k += ']';
    };
    if (all_) list(*all_);
    for (const auto& [dim, d] : by_dim_) {
      k += dim + ':';
      list(d.all);
      for (const auto& [axis, v] : d.by_axis) {
        k += axis + '=';
        list(v);
      }
      k += ';';
    }
    return k;
  }

  /// The shapes of `axis` on mesh dimension `dim` (whose group has `parts` ranks), or nullopt when no
  /// shapes were given at all. Missing entries and wrong lengths are errors.
  [[nodiscard]] std::optional<std::vector<std::int64_t>> resolve(std::string_view dim,
                                                                 std::string_view axis,
                                                                 std::int64_t parts) const {
    if (empty()) return std::nullopt;
    const std::vector<std::int64_t>* found = nullptr;
    if (all_) {
      found = &*all_;
    } else {
      // A compound group may be keyed in any spelling ("sp-dp" for "dp-sp").
      auto d = by_dim_.find(dim);
      if (d == by_dim_.end())
        d = std::find_if(by_dim_.begin(), by_dim_.end(),
                         [&](const auto& kv) { return notation::detail::same_mesh(kv.first, dim); });
      if (d == by_dim_.end())
        throw Error("Missing split shapes for mesh dimension '" + std::string(dim) + "'");
      if (d->second.by_axis.empty()) {
        found = &d->second.all;
      } else {
        const auto a = d->second.by_axis.find(axis);
        if (a == d->second.by_axis.end())
          throw Error("Missing split shapes for axis '" + std::string(axis) +
                      "' on mesh dimension '" + std::string(dim) + "'");
        found = &a->second;
      }
    }
    if (static_cast<std::int64_t>(found->size()) != parts)
      throw Error("split shapes for axis '" + std::string(axis) + "' on mesh dimension '" +
                  std::string(dim) + "' have " + std::to_string(found->size()) +
                  " entries, but the mesh dimension has " + std::to_string(parts) + " ranks");
    for (auto v : *found)
      if (v < 0)
        throw Error("split shapes for axis '" + std::string(axis) + "' contain a negative size");
    return *found;
  }

 private:
  std::optional<std::vector<std::int64_t>> all_;
  std::map<std::string, DimShapes, std::less<>> by_dim_;
};

}  // namespace einshard
