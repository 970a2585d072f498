#pragma once
/// @file
/// Products of a CSR block with k vectors at once, stored row-major as an (n, k) block: each
/// stored entry is read once for all k columns, which is where several right-hand sides gain over
/// k single products (the matrix is most of an SpMV's traffic).

#include <ATen/ATen.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <vector>

#include <c10/util/complex.h>

#include "einshard/sparse/csr.hpp"

namespace einshard::sparse::detail {

/// Columns are processed in chunks of `chunk` with the accumulators in a local array, which the
/// compiler keeps in registers (a std::vector or the output itself could alias the inputs and
/// would force a store per entry).
inline constexpr std::int64_t chunk = 8;

/// Re(conj(a) b) as a double.
template <class V>
inline double re_dot(const V& a, const V& b) {
  if constexpr (c10::is_complex<V>::value)
    return static_cast<double>((conj_if_complex(a) * b).real());
  else
    return static_cast<double>(a * b);
}

/// spmv_halo (csr.hpp) for k vectors: Y = A [X; G] for X of shape (owned, k), G (ghosts, k) and Y
/// (a.rows, k), all contiguous, over the interior rows (`boundary_phase` false: X only) or the
/// `boundary` rows (owned columns from X, ghost column owned + j from G's row j). With `wt` defined
/// (the shape of Y), also adds Re <wt_j, Y_j> over these rows to dots[j]: the product's own dot,
/// as the single-vector kernels return it.
inline void spmm_halo(const Csr& a, const at::Tensor& boundary, std::int64_t owned, const at::Tensor& x,
                      const at::Tensor& g, at::Tensor& y, bool boundary_phase, const at::Tensor& wt = {},
                      double* dots = nullptr) {
  const std::int64_t k = x.size(1);
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* __restrict xv = x.data_ptr<V>();
    const V* __restrict gv = boundary.numel() > 0 ? g.data_ptr<V>() : nullptr;
    auto* __restrict yv = y.data_ptr<V>();
    const V* wv = wt.defined() ? wt.data_ptr<V>() : nullptr;
    const auto* b = boundary.data_ptr<std::int64_t>();
    const auto nb = boundary.numel();
    for (std::int64_t j0 = 0; j0 < k; j0 += chunk) {
      const auto w = std::min(chunk, k - j0);
      double d[chunk] = {};
      // Entries [e0, e1) of a row into acc, their rows of `base` at column index - shift.
      const auto add = [&](V* acc, const V* base, std::int64_t e0, std::int64_t e1, std::int64_t shift) {
        if (w == chunk) {
          for (std::int64_t e = e0; e < e1; ++e) {
            const V v = m.av[e];
            const V* xr = base + (static_cast<std::int64_t>(m.ci[e]) - shift) * k + j0;
            for (std::int64_t j = 0; j < chunk; ++j) acc[j] += v * xr[j];
          }
        } else {
          for (std::int64_t e = e0; e < e1; ++e) {
            const V v = m.av[e];
            const V* xr = base + (static_cast<std::int64_t>(m.ci[e]) - shift) * k + j0;
            for (std::int64_t j = 0; j < w; ++j) acc[j] += v * xr[j];
          }
        }
      };
      const auto store = [&](std::int64_t i, const V* acc) {
        const auto t = i * k + j0;
        for (std::int64_t j = 0; j < w; ++j) yv[t + j] = acc[j];
        if (wv)
          for (std::int64_t j = 0; j < w; ++j) d[j] += re_dot(wv[t + j], acc[j]);
      };
      if (!boundary_phase) {
        interior_runs(a.rows, b, nb, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) {
            V acc[chunk] = {};
            add(acc, xv, m.rp[i], m.rp[i + 1], 0);
            store(i, acc);
          }
        });
      } else {
        for (std::int64_t q = 0; q < nb; ++q) {
          const auto i = b[q];
          const auto split = first_ghost(m, i, owned);
          V acc[chunk] = {};
          add(acc, xv, m.rp[i], split, 0);
          add(acc, gv, split, m.rp[i + 1], owned);
          store(i, acc);
        }
      }
      if (wv)
        for (std::int64_t j = 0; j < w; ++j) dots[j0 + j] += d[j];
    }
  });
}

/// Re <a_j, b_j> of every column j of two (n, k) blocks, in one pass.
inline std::vector<double> block_dots(const at::Tensor& a, const at::Tensor& b) {
  const auto n = a.size(0), k = a.size(1);
  std::vector<double> out(static_cast<std::size_t>(k), 0.0);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(a.scalar_type(), "einshard::sparse::block_dots", [&] {
    const auto* __restrict av = a.data_ptr<scalar_t>();
    const auto* __restrict bv = b.data_ptr<scalar_t>();
    for (std::int64_t j0 = 0; j0 < k; j0 += chunk) {
      const auto w = std::min(chunk, k - j0);
      double acc[chunk] = {};
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < w; ++j) acc[j] += re_dot(av[i * k + j0 + j], bv[i * k + j0 + j]);
      for (std::int64_t j = 0; j < w; ++j) out[static_cast<std::size_t>(j0 + j)] = acc[j];
    }
  });
  return out;
}

/// Block CG's update in one pass: x_j += α_j p_j, r_j −= α_j q_j. Returns {Re<r_j, d .* r_j>...,
/// ‖r_j‖²...} (d: (n,) diagonal preconditioner; the identity when undefined). z = d .* r is not
/// stored: `block_cg_direction` forms it again where it is needed, saving a block's write and read.
/// With a general preconditioner the caller forms z and its dots afterwards.
inline std::vector<double> block_cg_update(at::Tensor& x, at::Tensor& r, const at::Tensor& p, const at::Tensor& q,
                                           const std::vector<double>& alpha, const at::Tensor& d) {
  const auto n = x.size(0), k = x.size(1);
  std::vector<double> out(static_cast<std::size_t>(2 * k), 0.0);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(x.scalar_type(), "einshard::sparse::block_cg_update", [&] {
    using V = scalar_t;
    auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict rv = r.data_ptr<V>();
    const auto* __restrict pv = p.data_ptr<V>();
    const auto* __restrict qv = q.data_ptr<V>();
    const V* dv = d.defined() ? d.data_ptr<V>() : nullptr;
    for (std::int64_t j0 = 0; j0 < k; j0 += chunk) {
      const auto w = std::min(chunk, k - j0);
      V a[chunk] = {};
      for (std::int64_t j = 0; j < w; ++j) a[j] = static_cast<V>(alpha[static_cast<std::size_t>(j0 + j)]);
      double rz[chunk] = {}, rr[chunk] = {};
      for (std::int64_t i = 0; i < n; ++i) {
        const V di = dv ? dv[i] : V(1);
        for (std::int64_t j = 0; j < w; ++j) {
          const auto e = i * k + j0 + j;
          xv[e] += a[j] * pv[e];
          const V ri = rv[e] - a[j] * qv[e];
          rv[e] = ri;
          rz[j] += re_dot(ri, di * ri);
          rr[j] += re_dot(ri, ri);
        }
      }
      for (std::int64_t j = 0; j < w; ++j) {
        out[static_cast<std::size_t>(j0 + j)] = rz[j];
        out[static_cast<std::size_t>(k + j0 + j)] = rr[j];
      }
    }
  });
  return out;
}

/// p_j = d .* z_j + β_j p_j for the active columns (d undefined: the identity); p_j = 0 for a
/// stopped one.
inline void block_cg_direction(at::Tensor& p, const at::Tensor& z, const at::Tensor& d, const std::vector<double>& beta,
                               const std::vector<char>& active) {
  const auto n = p.size(0), k = p.size(1);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(p.scalar_type(), "einshard::sparse::block_cg_direction", [&] {
    using V = scalar_t;
    auto* __restrict pv = p.data_ptr<V>();
    const auto* __restrict zv = z.data_ptr<V>();
    const V* dv = d.defined() ? d.data_ptr<V>() : nullptr;
    for (std::int64_t j0 = 0; j0 < k; j0 += chunk) {
      const auto w = std::min(chunk, k - j0);
      V b[chunk] = {}, on[chunk] = {};
      for (std::int64_t j = 0; j < w; ++j) {
        b[j] = static_cast<V>(beta[static_cast<std::size_t>(j0 + j)]);
        on[j] = active[static_cast<std::size_t>(j0 + j)] ? V(1) : V(0);
      }
      for (std::int64_t i = 0; i < n; ++i) {
        const V di = dv ? dv[i] : V(1);
        for (std::int64_t j = 0; j < w; ++j) {
          const auto e = i * k + j0 + j;
          pv[e] = on[j] * (di * zv[e] + b[j] * pv[e]);
        }
      }
    }
  });
}

/// Block Chronopoulos–Gear step in one pass, per column j: p = u + β p; s = w + β s; x += α p;
/// r −= α s; then u = d .* r (d: a diagonal M), u = r (`identity`), or u untouched (a general M,
/// applied by the caller). Returns {Re<r_j, u_j>..., ‖r_j‖²...} (the first k zero for a general M).
/// A stopped column has α = β = 0: x and r stay as they are.
inline std::vector<double> block_cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s, at::Tensor& u,
                                             const at::Tensor& w, const std::vector<double>& alpha,
                                             const std::vector<double>& beta, const at::Tensor& d, bool identity) {
  const auto n = x.size(0), k = x.size(1);
  std::vector<double> out(static_cast<std::size_t>(2 * k), 0.0);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(x.scalar_type(), "einshard::sparse::block_cgcg_update", [&] {
    using V = scalar_t;
    auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict rv = r.data_ptr<V>();
    auto* __restrict pv = p.data_ptr<V>();
    auto* __restrict sv = s.data_ptr<V>();
    auto* __restrict uv = u.data_ptr<V>();
    const auto* __restrict wv = w.data_ptr<V>();
    const V* dv = d.defined() ? d.data_ptr<V>() : nullptr;
    const bool write_u = dv != nullptr || identity;
    for (std::int64_t j0 = 0; j0 < k; j0 += chunk) {
      const auto c = std::min(chunk, k - j0);
      V a[chunk] = {}, b[chunk] = {};
      for (std::int64_t j = 0; j < c; ++j) {
        a[j] = static_cast<V>(alpha[static_cast<std::size_t>(j0 + j)]);
        b[j] = static_cast<V>(beta[static_cast<std::size_t>(j0 + j)]);
      }
      double ru[chunk] = {}, rr[chunk] = {};
      for (std::int64_t i = 0; i < n; ++i) {
        const V di = dv ? dv[i] : V(1);
        for (std::int64_t j = 0; j < c; ++j) {
          const auto e = i * k + j0 + j;
          const V pi = uv[e] + b[j] * pv[e];
          const V si = wv[e] + b[j] * sv[e];
          pv[e] = pi;
          sv[e] = si;
          xv[e] += a[j] * pi;
          const V ri = rv[e] - a[j] * si;
          rv[e] = ri;
          rr[j] += re_dot(ri, ri);
          if (write_u) {
            const V ui = di * ri;
            uv[e] = ui;
            ru[j] += re_dot(ri, ui);
          }
        }
      }
      for (std::int64_t j = 0; j < c; ++j) {
        out[static_cast<std::size_t>(j0 + j)] = ru[j];
        out[static_cast<std::size_t>(k + j0 + j)] = rr[j];
      }
    }
  });
  return out;
}

}  // namespace einshard::sparse::detail
