#pragma once
/// @file
/// Classical Gram–Schmidt over a Krylov basis stored row by row, in the solve's precision or a
/// lower one (`GmresBasis::reduced`: float32 for float64, complex64 for complex128), the
/// arithmetic in the solve's precision either way. A sweep goes once over w in tiles: a tile's
/// update w −= Σ c_i v_i and then its dots <v_i, w> read each tile of the basis from memory once
/// (the second read hits the cache), so a Gram–Schmidt pass's update and the next pass's dots cost
/// one pass over the basis, not two.

#include <ATen/ATen.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "einshard/sparse/krylov/block.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/block_kernels.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/isa.hpp"
#include "einshard/sparse/matrix/kernels.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"

namespace einshard::sparse::detail {

/// Entries of w per tile: as many as keep the basis's tile (rows of it) within about half of a
/// 1 MiB L2 for the update's second read, and long runs per row for the prefetcher (at least 256,
/// at most 4096: w's tile, 32 KiB at most in float64, stays in L1 or L2).
inline std::int64_t gram_schmidt_tile(std::int64_t rows, std::size_t value_bytes) {
  const auto fit = static_cast<std::int64_t>((512 << 10) / (std::max<std::int64_t>(rows, 1) * value_bytes));
  return std::clamp<std::int64_t>(fit / 64 * 64, 256, 4096);
}

/// The storage dtype of a basis for a solve of dtype `t`: `t` itself, or its single-precision
/// counterpart when `reduced` (float32 and complex64 stay what they are).
inline at::ScalarType basis_dtype(at::ScalarType t, bool reduced) {
  if (!reduced) return t;
  return t == at::kDouble ? at::kFloat : t == at::kComplexDouble ? at::kComplexFloat : t;
}

/// acc[l] += Σ over e ≡ l (mod lanes) of conj(v_e) w_e over [0, len): independent partial sums,
/// so the loop vectorizes without reassociating a sum.
template <int Lanes, class V, class S>
EINSHARD_KERNEL_INLINE V gram_schmidt_dot(const S* __restrict v, const V* __restrict w, std::int64_t len) {
  V acc[Lanes] = {};
  std::int64_t e = 0;
  for (; e + Lanes <= len; e += Lanes)
    for (int l = 0; l < Lanes; ++l) acc[l] += conj_if_complex(static_cast<V>(v[e + l])) * w[e + l];
  for (; e < len; ++e) acc[0] += conj_if_complex(static_cast<V>(v[e])) * w[e];
  V sum = acc[0];
  for (int l = 1; l < Lanes; ++l) sum += acc[l];
  return sum;
}

/// gram_schmidt_dot of four rows v, v + ld, v + 2 ld, v + 3 ld with one w, added to out[0..4):
/// each load of w serves four rows, and the four rows' sums are independent chains, so the FMAs'
/// latency is hidden (one row's sum alone ran at about a third of a BLAS dot's speed).
template <int Lanes, class V, class S>
EINSHARD_KERNEL_INLINE void gram_schmidt_dot4(const S* __restrict v, std::int64_t ld, const V* __restrict w,
                                             std::int64_t len, V* __restrict out) {
  const S* __restrict v0 = v;
  const S* __restrict v1 = v + ld;
  const S* __restrict v2 = v + 2 * ld;
  const S* __restrict v3 = v + 3 * ld;
  V a0[Lanes] = {}, a1[Lanes] = {}, a2[Lanes] = {}, a3[Lanes] = {};
  std::int64_t e = 0;
  for (; e + Lanes <= len; e += Lanes)
    for (int l = 0; l < Lanes; ++l) {
      const V we = w[e + l];
      a0[l] += conj_if_complex(static_cast<V>(v0[e + l])) * we;
      a1[l] += conj_if_complex(static_cast<V>(v1[e + l])) * we;
      a2[l] += conj_if_complex(static_cast<V>(v2[e + l])) * we;
      a3[l] += conj_if_complex(static_cast<V>(v3[e + l])) * we;
    }
  for (; e < len; ++e) {
    const V we = w[e];
    a0[0] += conj_if_complex(static_cast<V>(v0[e])) * we;
    a1[0] += conj_if_complex(static_cast<V>(v1[e])) * we;
    a2[0] += conj_if_complex(static_cast<V>(v2[e])) * we;
    a3[0] += conj_if_complex(static_cast<V>(v3[e])) * we;
  }
  for (int l = 0; l < Lanes; ++l) {
    out[0] += a0[l];
    out[1] += a1[l];
    out[2] += a2[l];
    out[3] += a3[l];
  }
}

template <class V, class S>
EINSHARD_KERNEL_INLINE void gram_schmidt_sweep_body(const S* __restrict basis, std::int64_t ld, std::int64_t rows,
                                                V* __restrict w, std::int64_t n, const V* __restrict coef,
                                                V* __restrict dots) {
  constexpr int lanes = 8;
  const auto tile = gram_schmidt_tile(rows, sizeof(S));
  for (std::int64_t t0 = 0; t0 < n; t0 += tile) {
    const auto len = std::min(tile, n - t0);
    V* __restrict wt = w + t0;
    if (coef) {
      // Four rows at a time: w's tile is loaded and stored once per four. The entries go in runs
      // of `lanes`, a fixed count GCC's straight-line vectorizer packs: at -O2 (GCC 12's cheap
      // cost model) a loop of unknown length stays scalar, which ran this update at a third of
      // the speed of the dots. (Inlined in unoptimized builds too, the test suites': a call per
      // entry made GMRES there 30x slower.)
      const auto update = [&](std::int64_t e, const S* __restrict v0, const S* __restrict v1,
                              const S* __restrict v2, const S* __restrict v3, V c0, V c1, V c2,
                              V c3) EINSHARD_KERNEL_LAMBDA_INLINE {
        wt[e] -= c0 * static_cast<V>(v0[e]) + c1 * static_cast<V>(v1[e]) + c2 * static_cast<V>(v2[e]) +
                 c3 * static_cast<V>(v3[e]);
      };
      std::int64_t i = 0;
      for (; i + 4 <= rows; i += 4) {
        const S* __restrict v0 = basis + i * ld + t0;
        const S* __restrict v1 = v0 + ld;
        const S* __restrict v2 = v1 + ld;
        const S* __restrict v3 = v2 + ld;
        const V c0 = coef[i], c1 = coef[i + 1], c2 = coef[i + 2], c3 = coef[i + 3];
        std::int64_t e = 0;
        for (; e + lanes <= len; e += lanes)
          for (int l = 0; l < lanes; ++l) update(e + l, v0, v1, v2, v3, c0, c1, c2, c3);
        for (; e < len; ++e) update(e, v0, v1, v2, v3, c0, c1, c2, c3);
      }
      for (; i < rows; ++i) {
        const S* __restrict v = basis + i * ld + t0;
        const V c = coef[i];
        std::int64_t e = 0;
        for (; e + lanes <= len; e += lanes)
          for (int l = 0; l < lanes; ++l) wt[e + l] -= c * static_cast<V>(v[e + l]);
        for (; e < len; ++e) wt[e] -= c * static_cast<V>(v[e]);
      }
    }
    if (!dots) continue;
    std::int64_t i = 0;
    for (; i + 4 <= rows; i += 4) gram_schmidt_dot4<lanes>(basis + i * ld + t0, ld, wt, len, dots + i);
    for (; i < rows; ++i) dots[i] += gram_schmidt_dot<lanes>(basis + i * ld + t0, wt, len);
    dots[rows] += gram_schmidt_dot<lanes>(wt, wt, len);
  }
}

template <class V, class S>
void gram_schmidt_sweep_portable(const S* basis, std::int64_t ld, std::int64_t rows, V* w, std::int64_t n,
                                 const V* coef, V* dots) {
  gram_schmidt_sweep_body(basis, ld, rows, w, n, coef, dots);
}

#if EINSHARD_KERNELS_X86
/// The same body for AVX2 + FMA, where `kernel_isa()` says the CPU has them.
template <class V, class S>
__attribute__((target("avx2,fma"))) void gram_schmidt_sweep_avx2(const S* basis, std::int64_t ld, std::int64_t rows,
                                                                 V* w, std::int64_t n, const V* coef, V* dots) {
  gram_schmidt_sweep_body(basis, ld, rows, w, n, coef, dots);
}
#endif

template <class V, class S>
void gram_schmidt_sweep_typed(const S* basis, std::int64_t ld, std::int64_t rows, V* w, std::int64_t n,
                              const V* coef, V* dots) {
#if EINSHARD_KERNELS_X86
  if constexpr (!c10::is_complex<V>::value)
    if (kernel_isa() == KernelIsa::avx2) return gram_schmidt_sweep_avx2(basis, ld, rows, w, n, coef, dots);
#endif
  gram_schmidt_sweep_portable(basis, ld, rows, w, n, coef, dots);
}

/// One sweep over w (n values, contiguous) and the first `rows` rows of `basis` ((≥ rows, n), rows
/// contiguous): w −= Σ_i coef_i v_i when `coef` is given, then, when `dots` is given (rows + 1
/// values), dots_i = <v_i, w> (v conjugated) of the updated w and dots_rows = <w, w>, this rank's
/// part.
inline void gram_schmidt_sweep(const at::Tensor& basis, std::int64_t rows, at::Tensor& w,
                               const std::complex<double>* coef, std::complex<double>* dots) {
  const auto n = w.numel();
  if (uses_generic(w)) {
    const at::NoGradGuard no_grad;
    const auto v = basis.narrow(0, 0, rows).to(w.scalar_type());
    if (coef) {
      const std::vector<std::complex<double>> c(coef, coef + rows);
      w.sub_(at::mv(v.t(), tensor_like(c, w)));
    }
    if (dots) {
      auto d = host_complex(at::mv(v.conj(), w));
      d.push_back(host_complex(at::vdot(w, w).reshape({1}))[0]);
      std::copy(d.begin(), d.end(), dots);
    }
    return;
  }
  dispatch_values(w.scalar_type(), [&](auto v0) {
    using V = decltype(v0);
    const auto run = [&](auto s0) {
      using S = decltype(s0);
      std::vector<V> c, d(dots ? static_cast<std::size_t>(rows + 1) : 0);
      if (coef) c = as_values<V>(std::vector<std::complex<double>>(coef, coef + rows));
      gram_schmidt_sweep_typed<V, S>(basis.data_ptr<S>(), basis.stride(0), rows, w.data_ptr<V>(), n,
                                     coef ? c.data() : nullptr, dots ? d.data() : nullptr);
      for (std::size_t i = 0; i < d.size(); ++i) dots[i] = widen(d[i]);
    };
    if (basis.scalar_type() == w.scalar_type())
      run(V{});
    else if constexpr (std::is_same_v<V, double>)
      run(float{});
    else if constexpr (std::is_same_v<V, c10::complex<double>>)
      run(c10::complex<float>{});
  });
}

}  // namespace einshard::sparse::detail
