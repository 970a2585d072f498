#pragma once
/// @file
/// `Options`: the one options struct of every tensor operation, filled with designated initializers.

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/plan/policy.hpp"
#include "einshard/shapes.hpp"

namespace einshard {

/// A factor size, or one size per member when keyed by a family name (`{"window", {4, 4}}`); a
/// single value given for a family applies to every member.
struct SizeValue {
  std::vector<std::int64_t> values;
  SizeValue() = default;  // so that `o.sizes["p"] = 4` compiles
  SizeValue(std::int64_t v) : values{v} {}                               // NOLINT
  SizeValue(std::initializer_list<std::int64_t> v) : values(v) {}        // NOLINT
  SizeValue(std::vector<std::int64_t> v) : values(std::move(v)) {}       // NOLINT
};
using Sizes = std::map<std::string, SizeValue, std::less<>>;
/// Axis families: `{"spatial", {"h", "w"}}`; `*spatial` in a run-time notation expands to `h w`.
using Families = std::map<std::string, std::vector<std::string>, std::less<>>;
/// Ordered pairs (input axis, output axis); the order matters (the last is a real FFT's half axis).
using AxisMap = std::vector<std::pair<std::string, std::string>>;

enum class Boundary { constant, periodic, replicate };

/// An integer given for every axis (`.stride = 2`) or per axis (`.stride = {{"h", 2}}`).
struct PerAxis {
  std::optional<std::int64_t> all;
  std::map<std::string, std::int64_t, std::less<>> by_axis;
  PerAxis(std::int64_t v) : all(v) {}  // NOLINT
  PerAxis(std::initializer_list<std::pair<const std::string, std::int64_t>> v) : by_axis(v) {}  // NOLINT
};

/// Padding of a convolution: a width for every side, or per axis (left, right).
struct Padding {
  std::optional<std::int64_t> all;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>, std::less<>> by_axis;
  Padding(std::int64_t v) : all(v) {}  // NOLINT
  Padding(std::initializer_list<std::pair<const std::string, std::pair<std::int64_t, std::int64_t>>> v)  // NOLINT
      : by_axis(v) {}
};

/// Options of every tensor operation. A field an operation does not use is an error if set.
struct Options {
  Mesh mesh{};              ///< needed when data moves between ranks
  Shapes shapes{};          ///< split metadata for uneven shards
  Sizes sizes{};            ///< factor sizes of groups `(h p)`, by axis or family
  Families families{};      ///< axis families for run-time notations
  AxisMap axes{};           ///< FFT axes (input -> output names)
  std::optional<bool> inverse{};
  std::optional<bool> real{};
  std::optional<std::string> norm{};
  std::map<std::string, std::int64_t, std::less<>> signal_sizes{};
  std::optional<Boundary> boundary{};
  std::optional<double> fill{};
  std::optional<at::Tensor> bias{};
  std::optional<PerAxis> stride{};
  std::optional<Padding> padding{};
  std::optional<PerAxis> dilation{};
  std::optional<std::int64_t> groups{};
  std::optional<Policy> policy{};
};

namespace detail {

/// Rejects options the operation `op` does not use; `used` lists the field names it does.
inline void check_unused_options(const Options& o, std::string_view op,
                                 std::initializer_list<std::string_view> used) {
  auto allowed = [&](std::string_view f) {
    return std::find(used.begin(), used.end(), f) != used.end();
  };
  auto reject = [&](bool set, std::string_view field) {
    if (set && !allowed(field))
      throw Error(std::string(op) + ": option '." + std::string(field) +
                  "' is not used by this operation");
  };
  reject(!o.shapes.empty(), "shapes");
  reject(!o.sizes.empty(), "sizes");
  reject(!o.families.empty(), "families");
  reject(!o.axes.empty(), "axes");
  reject(o.inverse.has_value(), "inverse");
  reject(o.real.has_value(), "real");
  reject(o.norm.has_value(), "norm");
  reject(!o.signal_sizes.empty(), "signal_sizes");
  reject(o.boundary.has_value(), "boundary");
  reject(o.fill.has_value(), "fill");
  reject(o.bias.has_value(), "bias");
  reject(o.stride.has_value(), "stride");
  reject(o.padding.has_value(), "padding");
  reject(o.dilation.has_value(), "dilation");
  reject(o.groups.has_value(), "groups");
  reject(o.policy.has_value(), "policy");
}

}  // namespace detail
}  // namespace einshard
