#pragma once
/// @file
/// `DiagonalRuns`: the runs of consecutive rows of a rank's CSR whose entries sit at the same
/// offsets from the diagonal (a structured grid's stencil assembled as a matrix: the interior of
/// each grid line), with their values copied point by point, and the product over such a run
/// (offset_line, which the matrix-free stencils share). There the product needs no column indices
/// and reads x and each point's values as contiguous vectors, where CSR loads an index per entry
/// and x through it: a 5-point product about 1.8x faster from memory. Rows outside runs (and every
/// row of an unstructured mesh's matrix, which forms no runs) stay with the CSR loops. The cost:
/// the run rows' values held twice.

#include <ATen/ATen.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "einshard/sparse/matrix/isa.hpp"

namespace einshard::sparse::detail {

/// Runs of rows [begin, end) of a local CSR, each row storing `points` entries at columns
/// row + offsets[first .. first + points). `values` (the CSR's dtype) holds a run's entries in
/// blocks of kRunBlock rows, point after point: entry k of row begin + j at values[at + (j / B) *
/// B * points + k * B + j % B], B = kRunBlock (one stream through memory, where a run of 100 rows
/// stored diagonal by diagonal is 7 short streams the prefetcher keeps losing); undefined where
/// the product does not use the runs (values neither float32 nor float64, or off the CPU).
struct DiagonalRuns {
  struct Run {
    std::int64_t begin, end, first, points, at;
  };
  std::vector<Run> runs;
  std::vector<std::int64_t> offsets;
  at::Tensor values;

  [[nodiscard]] bool active() const { return values.defined() && !runs.empty(); }
};

/// Rows of a block of a run's values: a multiple of every vector width of the kernels.
inline constexpr std::int64_t kRunBlock = 8;
/// Shortest run kept: one block. Runs that short still pay: a 3-D 7-point product on a 10³ box
/// (lines of 8 interior rows) takes 0.81x the time of the CSR loops, on 16³ to 32³ 0.6-0.7x.
inline constexpr std::int64_t kMinDiagonalRun = kRunBlock;
/// Longest row of a run (a 27-point stencil fits).
inline constexpr std::int64_t kMaxDiagonalPoints = 32;

/// The runs among the `rows` rows of a CSR (`rowptr`, `col`) that store no ghost column
/// (`boundary`: the ascending rows that do; they need the halo and stay with the CSR loops).
/// Structure only; fill_diagonal_runs writes the values. O(nnz), once per matrix structure.
DiagonalRuns find_diagonal_runs(const at::Tensor& rowptr_in, const at::Tensor& col, std::int64_t rows,
                                const at::Tensor& boundary);

/// Writes `runs.values` from the CSR's (`rowptr`, `values`; after every change of the values), or
/// leaves it undefined where the run product does not apply.
void fill_diagonal_runs(DiagonalRuns& runs, const at::Tensor& rowptr_in, const at::Tensor& csr_values);

/// Where a line's coefficient c_k(j) of point k and row j is: c[k] for every j (`constant`: a
/// stencil's constants), c[k * stride + j] (`strided`: one array per point), or a DiagonalRuns
/// block, c[(j / B) * B * points + k * B + j % B] (`blocked`, B = kRunBlock).
enum class Coefficients { constant, strided, blocked };

template <Coefficients L, class C>
EINSHARD_KERNEL_INLINE const C* coefficient_at(const C* c, std::int64_t stride, int points, int k, std::int64_t j) {
  if constexpr (L == Coefficients::constant) return c + k;
  if constexpr (L == Coefficients::strided) return c + k * stride + j;
  return c + (j / kRunBlock) * kRunBlock * points + k * kRunBlock + j % kRunBlock;
}

/// A line of rows at fixed offsets: y[j] = Σ_k c_k(j) x[j + off[k]] for j in [begin, end), the
/// coefficients as `L` says. Returns Σ w[j] y[j] with `Dot`. P > 0: that many points; 0: `points`
/// of them. One row at a time (offset_line_lanes' remainder, and the whole line where the compiler
/// has no vector extensions).
template <int P, bool Dot, Coefficients L, class X, class C>
EINSHARD_KERNEL_INLINE double offset_line_scalar(const C* __restrict c, std::int64_t stride,
                                                 const std::int64_t* __restrict off, int points, std::int64_t begin,
                                                 std::int64_t end, const X* __restrict x, X* __restrict y,
                                                 const X* __restrict w) {
  const int count = P > 0 ? P : points;
  double dot = 0.0;
  for (std::int64_t j = begin; j < end; ++j) {
    X s{};
    for (int k = 0; k < count; ++k) s += static_cast<X>(*coefficient_at<L>(c, stride, count, k, j)) * x[j + off[k]];
    y[j] = s;
    if constexpr (Dot) dot += static_cast<double>(w[j] * s);
  }
  return dot;
}

#if EINSHARD_KERNEL_LANES
/// offset_line_scalar in VB-byte vectors of X (the coefficients C widened to X), Σ w[j] y[j] in
/// double lanes, the P points unrolled: GCC 12 at -O2 leaves the scalar loop scalar.
template <int VB, int P, bool Dot, Coefficients L, class X, class C>
EINSHARD_KERNEL_INLINE double offset_line_lanes(const C* __restrict c, std::int64_t stride,
                                                const std::int64_t* __restrict off, int points, std::int64_t rows,
                                                const X* __restrict x, X* __restrict y, const X* __restrict w) {
  constexpr int width = VB / static_cast<int>(sizeof(X));
  static_assert(kRunBlock % width == 0, "a vector of rows lies inside one block of a run");
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
      vec xk;
      __builtin_memcpy(&xk, x + j + off[k], sizeof xk);  // unaligned loads and stores
      if constexpr (L == Coefficients::constant) {
        s += static_cast<X>(c[k]) * xk;
      } else {
        cvec ck;
        __builtin_memcpy(&ck, coefficient_at<L>(c, stride, count, k, j), sizeof ck);
        s += __builtin_convertvector(ck, vec) * xk;
      }
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
  return dot + offset_line_scalar<P, Dot, L>(c, stride, off, points, j, rows, x, y, w);
}

template <int P, bool Dot, Coefficients L, class X, class C>
double offset_line_portable(const C* c, std::int64_t stride, const std::int64_t* off, int points, std::int64_t rows,
                            const X* x, X* y, const X* w) {
  return offset_line_lanes<16, P, Dot, L>(c, stride, off, points, rows, x, y, w);
}

#if EINSHARD_KERNELS_X86
template <int P, bool Dot, Coefficients L, class X, class C>
__attribute__((target("avx2,fma"))) double offset_line_avx2(const C* c, std::int64_t stride, const std::int64_t* off,
                                                            int points, std::int64_t rows, const X* x, X* y,
                                                            const X* w) {
  return offset_line_lanes<32, P, Dot, L>(c, stride, off, points, rows, x, y, w);
}
#endif

#endif

/// offset_line_scalar over [0, rows) in vectors of the instruction set of kernel_isa() where the
/// compiler has them; returns <w, y> when `w` is given.
template <int P, Coefficients L, class X, class C>
double offset_line(const C* c, std::int64_t stride, const std::int64_t* off, int points, std::int64_t rows,
                   const X* x, X* y, const X* w) {
  [[maybe_unused]] const bool avx2 = kernel_isa() == KernelIsa::avx2;
  const auto go = [&](auto dot) {
    constexpr bool D = decltype(dot)::value;
#if EINSHARD_KERNEL_LANES
#if EINSHARD_KERNELS_X86
    if (avx2) return offset_line_avx2<P, D, L>(c, stride, off, points, rows, x, y, w);
#endif
    return offset_line_portable<P, D, L>(c, stride, off, points, rows, x, y, w);
#else
    return offset_line_scalar<P, D, L>(c, stride, off, points, 0, rows, x, y, w);
#endif
  };
  return w != nullptr ? go(std::true_type{}) : go(std::false_type{});
}

/// y = A x over run `r`'s rows, x the owned columns (a run reads no ghost); returns the partial
/// <w, y> over them when `w` is given.
template <class X, class C>
double diagonal_run_product(const DiagonalRuns& runs, const DiagonalRuns::Run& r, const C* values, const X* x, X* y,
                            const X* w) {
  const auto rows = r.end - r.begin;
  const auto* c = values + r.at;
  const auto* off = runs.offsets.data() + r.first;
  const int points = static_cast<int>(r.points);
  const auto* wr = w != nullptr ? w + r.begin : nullptr;
  switch (points) {
    case 5: return offset_line<5, Coefficients::blocked>(c, 0, off, points, rows, x + r.begin, y + r.begin, wr);
    case 7: return offset_line<7, Coefficients::blocked>(c, 0, off, points, rows, x + r.begin, y + r.begin, wr);
    default: return offset_line<0, Coefficients::blocked>(c, 0, off, points, rows, x + r.begin, y + r.begin, wr);
  }
}

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE DiagonalRuns find_diagonal_runs(const at::Tensor& rowptr_in, const at::Tensor& col, std::int64_t rows,
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
        at += points * ((end - start + kRunBlock - 1) / kRunBlock * kRunBlock);
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

EINSHARD_INLINE void fill_diagonal_runs(DiagonalRuns& runs, const at::Tensor& rowptr_in, const at::Tensor& csr_values) {
  runs.values = at::Tensor();
  const auto t = csr_values.scalar_type();
  if (runs.runs.empty() || !csr_values.device().is_cpu() || (t != at::kFloat && t != at::kDouble)) return;
  const auto& last = runs.runs.back();
  const auto last_rows = (last.end - last.begin + kRunBlock - 1) / kRunBlock * kRunBlock;
  auto values = at::zeros({last.at + last.points * last_rows}, csr_values.options());
  const auto rowptr = rowptr_in.to(at::kLong).contiguous();
  const auto* rp = rowptr.data_ptr<std::int64_t>();
  const auto av_t = csr_values.contiguous();
  AT_DISPATCH_FLOATING_TYPES(csr_values.scalar_type(), "einshard::sparse::diagonal_runs", [&] {
    const auto* av = av_t.data_ptr<scalar_t>();
    auto* out = values.data_ptr<scalar_t>();
    for (const auto& r : runs.runs) {
      const auto rows = r.end - r.begin;
      for (std::int64_t j = 0; j < rows; ++j)
        for (std::int64_t k = 0; k < r.points; ++k)
          out[r.at + j / kRunBlock * kRunBlock * r.points + k * kRunBlock + j % kRunBlock] = av[rp[r.begin + j] + k];
    }
  });
  runs.values = values;
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse::detail
