#pragma once
/// @file
/// A X for a block X of m vectors sharing the matrix's row partition (owned slice (n_local, m)):
/// one halo exchange moves whole rows of the block, and each stored entry is read once for all m
/// columns, so a block product costs about one product in messages and in matrix traffic (the
/// original applies LOBPCG's basis column by column: m exchanges and m passes).

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/sparse/csr.hpp"
#include "einshard/sparse/dsparse_tensor.hpp"

namespace einshard::sparse {

namespace detail {

/// y[row(i), :] (+)= sum_k A[i, k] x[k, :] for row-major blocks x (cols, m) and y; row(i) is
/// rows[i] and the rows are added into when `rows` is defined (a row-compressed block), else i
/// and y is overwritten.
inline void spmm_rows(const Csr& a, const at::Tensor& x, at::Tensor& y, const at::Tensor& rows) {
  const auto m = x.size(1);
  dispatch_view(a, [&](auto v) {
    using V = typename decltype(v)::value_type;
    const auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict yv = y.data_ptr<V>();
    const std::int64_t* ri = rows.defined() ? rows.data_ptr<std::int64_t>() : nullptr;
    std::vector<V> acc(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < v.rows; ++i) {
      std::fill(acc.begin(), acc.end(), V{});
      for (auto k = v.rp[i]; k < v.rp[i + 1]; ++k) {
        const V s = v.av[k];
        const V* xr = xv + static_cast<std::int64_t>(v.ci[k]) * m;
        for (std::int64_t j = 0; j < m; ++j) acc[static_cast<std::size_t>(j)] += s * xr[j];
      }
      V* yr = yv + (ri ? ri[i] : i) * m;
      if (ri)
        for (std::int64_t j = 0; j < m; ++j) yr[j] += acc[static_cast<std::size_t>(j)];
      else
        for (std::int64_t j = 0; j < m; ++j) yr[j] = acc[static_cast<std::size_t>(j)];
    }
  });
}

}  // namespace detail

inline at::Tensor DSparseTensor::apply_block(const at::Tensor& x) const {
  if (x.dim() != 2 || x.size(0) != layout_->local_size())
    throw Error("DSparseTensor::apply_block: expected an owned block (" + std::to_string(layout_->local_size()) +
                ", m), got shape " + std::string(c10::str(x.sizes())));
  const auto xc = x.detach().to(dtype()).contiguous();
  auto ghosts = at::empty({plan_->ghost_count(), xc.size(1)}, xc.options());
  exchange_->start(xc, ghosts);
  auto y = at::empty_like(xc);
  detail::spmm_rows(diag_, xc, y, {});
  exchange_->finish();
  if (off_.rows > 0) detail::spmm_rows(off_, ghosts, y, off_rows_);
  return y;
}

}  // namespace einshard::sparse
