#pragma once
/// @file
/// Rank-invariant random vectors: entry (g, j) of a random block is a function of the seed, the
/// global row g and the column j only (a counter-based generator, splitmix64), so any partition at
/// any world size draws the same global block without any rank generating or holding all of it.

#include <ATen/ATen.h>

#include <cstdint>

#include "einshard/sparse/matrix/row_layout.hpp"

namespace einshard::sparse::detail {

inline std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The owned rows of a global (n, m) block: uniform in [-1, 1) (`rademacher` false) or +-1.
inline at::Tensor counter_random(const RowLayout& layout, std::int64_t m, std::uint64_t seed, bool rademacher,
                                 at::ScalarType dtype) {
  const auto& owned = layout.owned();
  auto out = at::empty({owned.numel(), m}, at::kDouble);
  const auto* g = owned.data_ptr<std::int64_t>();
  auto* o = out.data_ptr<double>();
  const auto stream = splitmix64(seed ^ 0x5eed5eed5eedULL);
  for (std::int64_t i = 0; i < owned.numel(); ++i)
    for (std::int64_t j = 0; j < m; ++j) {
      const auto bits = splitmix64(stream ^ splitmix64(static_cast<std::uint64_t>(g[i]) * 0x100000001b3ULL +
                                                       static_cast<std::uint64_t>(j)));
      o[i * m + j] = rademacher ? ((bits >> 63) != 0 ? 1.0 : -1.0)
                                : static_cast<double>(bits >> 11) * 0x1.0p-52 - 1.0;
    }
  return out.to(dtype);
}

}  // namespace einshard::sparse::detail
