#pragma once
/// @file
/// Products of a CSR block with k vectors at once, stored row-major as an (n, k) block: each
/// stored entry is read once for all k columns, which is where several right-hand sides gain over
/// k single products (the matrix is most of an SpMV's traffic).

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "einshard/sparse/csr.hpp"

namespace einshard::sparse::detail {

/// y[rows[i], :] (+)= (A x)[i, :] for x of shape (a.cols, k), y of shape (·, k), both contiguous;
/// `rows` undefined: row i itself. `accumulate`: add instead of overwrite.
inline void spmm_rows(const Csr& a, const at::Tensor& rows, const at::Tensor& x, at::Tensor& y, bool accumulate) {
  const std::int64_t k = x.size(1);
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict yv = y.data_ptr<V>();
    const std::int64_t* ri = rows.defined() ? rows.data_ptr<std::int64_t>() : nullptr;
    std::vector<V> acc(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < a.rows; ++i) {
      std::fill(acc.begin(), acc.end(), V{});
      for (std::int64_t e = m.rp[i]; e < m.rp[i + 1]; ++e) {
        const V v = m.av[e];
        const V* xr = xv + static_cast<std::int64_t>(m.ci[e]) * k;
        for (std::int64_t j = 0; j < k; ++j) acc[static_cast<std::size_t>(j)] += v * xr[j];
      }
      V* yr = yv + (ri ? ri[i] : i) * k;
      if (accumulate)
        for (std::int64_t j = 0; j < k; ++j) yr[j] += acc[static_cast<std::size_t>(j)];
      else
        for (std::int64_t j = 0; j < k; ++j) yr[j] = acc[static_cast<std::size_t>(j)];
    }
  });
}

}  // namespace einshard::sparse::detail
