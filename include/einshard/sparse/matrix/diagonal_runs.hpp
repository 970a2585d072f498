#pragma once
/// @file
/// `DiagonalRuns`: the runs of consecutive rows of a rank's CSR whose entries sit at the same
/// offsets from the diagonal (a structured grid's stencil assembled as a matrix: the interior of
/// each grid line), with their values stored by diagonal, and the product over such a run. There
/// the product needs no column indices and reads x and each diagonal's values as contiguous
/// vectors, where CSR loads an index per entry and x through it: a 5-point product 1.5-2x faster
/// from cache and from memory. Rows outside runs (and every row of an unstructured mesh's matrix,
/// which forms no runs) stay with the CSR loops. The cost: the run rows' values held twice.

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "einshard/sparse/matrix/isa.hpp"

namespace einshard::sparse::detail {

/// Runs of rows [begin, end) of a local CSR, each row storing `points` entries at columns
/// row + offsets[first .. first + points). `values` (the CSR's dtype) holds run r's entry k of row
/// begin + j at values[at + k * (end - begin) + j]; undefined where the product does not use the
/// runs (values neither float32 nor float64, or off the CPU).
struct DiagonalRuns {
  struct Run {
    std::int64_t begin, end, first, points, at;
  };
  std::vector<Run> runs;
  std::vector<std::int64_t> offsets;
  at::Tensor values;

  [[nodiscard]] bool active() const { return values.defined() && !runs.empty(); }
};

/// Shortest run kept: shorter ones save less than the switch between loops costs.
inline constexpr std::int64_t kMinDiagonalRun = 32;
/// Longest row of a run (a 27-point stencil fits).
inline constexpr std::int64_t kMaxDiagonalPoints = 32;

/// The runs among the `rows` rows of a CSR (`rowptr`, `col`) that store no ghost column
/// (`boundary`: the ascending rows that do; they need the halo and stay with the CSR loops).
/// Structure only; fill_diagonal_runs writes the values. O(nnz), once per matrix structure.
inline DiagonalRuns find_diagonal_runs(const at::Tensor& rowptr_in, const at::Tensor& col, std::int64_t rows,
                                       const at::Tensor& boundary) {
  DiagonalRuns out;
  const auto rowptr = rowptr_in.to(at::kLong).contiguous();
  const auto* rp = rowptr.data_ptr<std::int64_t>();
  const auto* b = boundary.data_ptr<std::int64_t>();
  const auto nb = boundary.numel();
  std::vector<std::int64_t> pattern, current;
  AT_DISPATCH_INDEX_TYPES(col.scalar_type(), "einshard::sparse::diagonal_runs", [&] {
    const auto* ci = col.data_ptr<index_t>();
    std::int64_t start = 0, k = 0, at = 0;
    const auto close = [&](std::int64_t end) {
      if (!current.empty() && end - start >= kMinDiagonalRun) {
        const auto points = static_cast<std::int64_t>(current.size());
        out.runs.push_back({start, end, static_cast<std::int64_t>(out.offsets.size()), points, at});
        out.offsets.insert(out.offsets.end(), current.begin(), current.end());
        at += points * (end - start);
      }
      current.clear();
    };
    for (std::int64_t i = 0; i < rows; ++i) {
      const bool interior = k == nb || b[k] != i;
      if (!interior) ++k;
      const auto len = rp[i + 1] - rp[i];
      pattern.clear();
      if (interior && len > 0 && len <= kMaxDiagonalPoints)
        for (auto e = rp[i]; e < rp[i + 1]; ++e) pattern.push_back(static_cast<std::int64_t>(ci[e]) - i);
      if (pattern.empty() || pattern != current) {
        close(i);
        current = pattern;
        start = i;
      }
    }
    close(rows);
  });
  return out;
}

/// Writes `runs.values` from the CSR's (`rowptr`, `values`; after every change of the values), or
/// leaves it undefined where the run product does not apply.
inline void fill_diagonal_runs(DiagonalRuns& runs, const at::Tensor& rowptr_in, const at::Tensor& csr_values) {
  runs.values = at::Tensor();
  const auto t = csr_values.scalar_type();
  if (runs.runs.empty() || !csr_values.device().is_cpu() || (t != at::kFloat && t != at::kDouble)) return;
  const auto& last = runs.runs.back();
  auto values = at::empty({last.at + last.points * (last.end - last.begin)}, csr_values.options());
  const auto rowptr = rowptr_in.to(at::kLong).contiguous();
  const auto* rp = rowptr.data_ptr<std::int64_t>();
  const auto av_t = csr_values.contiguous();
  AT_DISPATCH_FLOATING_TYPES(csr_values.scalar_type(), "einshard::sparse::diagonal_runs", [&] {
    const auto* av = av_t.data_ptr<scalar_t>();
    auto* out = values.data_ptr<scalar_t>();
    for (const auto& r : runs.runs) {
      const auto rows = r.end - r.begin;
      for (std::int64_t j = 0; j < rows; ++j)
        for (std::int64_t k = 0; k < r.points; ++k) out[r.at + k * rows + j] = av[rp[r.begin + j] + k];
    }
  });
  runs.values = values;
}

#if EINSHARD_KERNEL_LANES
/// y[j] = Σ_k c[k * rows + j] x[j + off[k]] over a run's rows (x, y, w from the run's first row),
/// in VB-byte vectors of X, the values C widened to X; returns Σ w[j] y[j] (with `Dot`), summed in
/// double lanes. P > 0: that many points, unrolled; 0: `points` of them.
template <int VB, int P, bool Dot, class X, class C>
EINSHARD_KERNEL_INLINE double diagonal_run_lanes(const C* __restrict c, const std::int64_t* __restrict off, int points,
                                                 std::int64_t rows, const X* __restrict x, X* __restrict y,
                                                 const X* __restrict w) {
  constexpr int width = VB / static_cast<int>(sizeof(X));
  typedef X vec __attribute__((vector_size(VB)));
  typedef C cvec __attribute__((vector_size(width * sizeof(C))));
  typedef double dvec __attribute__((vector_size(VB)));
  constexpr int halves = static_cast<int>(sizeof(double) / sizeof(X));
  const int count = P > 0 ? P : points;
  dvec acc[halves] = {};
  std::int64_t j = 0;
  for (; j + width <= rows; j += width) {
    vec s = {};
#pragma GCC unroll 32
    for (int k = 0; k < count; ++k) {
      cvec ck;
      vec xk;
      __builtin_memcpy(&ck, c + k * rows + j, sizeof ck);  // unaligned loads and stores
      __builtin_memcpy(&xk, x + j + off[k], sizeof xk);
      s += __builtin_convertvector(ck, vec) * xk;
    }
    __builtin_memcpy(y + j, &s, sizeof s);
    if constexpr (Dot) {
      vec wj;
      __builtin_memcpy(&wj, w + j, sizeof wj);
      add_widened(acc, wj * s);
    }
  }
  double dot = 0.0;
  for (int h = 0; h < halves; ++h)
    for (int l = 0; l < VB / 8; ++l) dot += acc[h][l];
  for (; j < rows; ++j) {
    X s{};
    for (int k = 0; k < count; ++k) s += static_cast<X>(c[k * rows + j]) * x[j + off[k]];
    y[j] = s;
    if constexpr (Dot) dot += static_cast<double>(w[j] * s);
  }
  return dot;
}

template <int P, bool Dot, class X, class C>
double diagonal_run_portable(const C* c, const std::int64_t* off, int points, std::int64_t rows, const X* x, X* y,
                             const X* w) {
  return diagonal_run_lanes<16, P, Dot>(c, off, points, rows, x, y, w);
}

#if EINSHARD_KERNELS_X86
template <int P, bool Dot, class X, class C>
__attribute__((target("avx2,fma"))) double diagonal_run_avx2(const C* c, const std::int64_t* off, int points,
                                                             std::int64_t rows, const X* x, X* y, const X* w) {
  return diagonal_run_lanes<32, P, Dot>(c, off, points, rows, x, y, w);
}
#endif

/// y = A x over run `r`'s rows, x the owned columns (a run reads no ghost); returns the partial
/// <w, y> over them when `w` is given.
template <class X, class C>
double diagonal_run_product(const DiagonalRuns& runs, const DiagonalRuns::Run& r, const C* values, const X* x, X* y,
                            const X* w) {
  const auto rows = r.end - r.begin;
  const auto* c = values + r.at;
  const auto* off = runs.offsets.data() + r.first;
  const int points = static_cast<int>(r.points);
  const bool avx2 = kernel_isa() == KernelIsa::avx2;
  const auto go = [&](auto p, auto dot) {
    constexpr int P = decltype(p)::value;
    constexpr bool D = decltype(dot)::value;
    const auto* xr = x + r.begin;
    auto* yr = y + r.begin;
    const auto* wr = D ? w + r.begin : nullptr;
#if EINSHARD_KERNELS_X86
    if (avx2) return diagonal_run_avx2<P, D>(c, off, points, rows, xr, yr, wr);
#endif
    return diagonal_run_portable<P, D>(c, off, points, rows, xr, yr, wr);
  };
  const auto with_points = [&](auto dot) {
    switch (points) {
      case 5: return go(std::integral_constant<int, 5>{}, dot);
      case 7: return go(std::integral_constant<int, 7>{}, dot);
      default: return go(std::integral_constant<int, 0>{}, dot);
    }
  };
  return w != nullptr ? with_points(std::true_type{}) : with_points(std::false_type{});
}
#endif

}  // namespace einshard::sparse::detail
