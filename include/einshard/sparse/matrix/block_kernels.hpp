#pragma once
/// @file
/// Products of a CSR block with k vectors at once, stored row-major as an (n, k) block: each
/// stored entry is read once for all k columns, which is where several right-hand sides gain over
/// k single products (the matrix is most of an SpMV's traffic).

#include <ATen/ATen.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <c10/util/complex.h>

#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"
#include "einshard/sparse/matrix/isa.hpp"

namespace einshard::sparse::detail {

/// Re(conj(a) b) as a double.
template <class V>
inline double re_dot(const V& a, const V& b) {
  if constexpr (c10::is_complex<V>::value)
    return static_cast<double>((conj_if_complex(a) * b).real());
  else
    return static_cast<double>(a * b);
}

/// What one column window of a block product reads and writes: Y[:, j0 + [0, W)] = A [X; G] over
/// the interior rows of [row0, row1) (`boundary_phase` false: those not in `boundary`) or the
/// `boundary` rows at positions [q0, q1), all blocks row-major with leading dimension ld;
/// dots[j0 + j] += Re <wt_j, y_j> when wt is set.
template <class V>
struct SpmmWindow {
  const V* x;
  const V* g;
  V* y;
  const V* wt;
  double* dots;
  std::int64_t ld, j0, owned;
  const std::int64_t* boundary;
  std::int64_t nb;
  bool boundary_phase;
  std::int64_t row0, row1, q0, q1;
};


/// acc += sum over entries [e0, e1) of a_e B[ci_e − shift, [0, W)], B of leading dimension ld: W
/// multiply-adds per entry, in vector registers (Lanes) or, for complex values, an array.
#if EINSHARD_KERNEL_LANES
template <int W, int VB, class View, class V>
EINSHARD_KERNEL_INLINE void spmm_add(const View& m, std::int64_t e0, std::int64_t e1, const V* __restrict base,
                                    std::int64_t shift, std::int64_t ld, typename Lanes<V, W, VB>::Acc& acc) {
  using L = Lanes<V, W, VB>;
  for (std::int64_t e = e0; e < e1; ++e) {
    const V v = m.av[e];
    const V* __restrict src = base + (static_cast<std::int64_t>(m.ci[e]) - shift) * ld;
    for (int c = 0; c < L::count; ++c) {
      typename L::vec t;
      __builtin_memcpy(&t, src + c * L::width, sizeof t);  // an unaligned load
      acc.v[c] += v * t;
    }
  }
}
#endif
template <int W, int VB, class View, class V>
EINSHARD_KERNEL_INLINE void spmm_add(const View& m, std::int64_t e0, std::int64_t e1, const V* __restrict base,
                                    std::int64_t shift, std::int64_t ld, V* __restrict acc) {
  for (std::int64_t e = e0; e < e1; ++e) {
    const V v = m.av[e];
    const V* __restrict src = base + (static_cast<std::int64_t>(m.ci[e]) - shift) * ld;
    for (int j = 0; j < W; ++j) acc[j] += v * src[j];
  }
}

/// Row i's entries into acc: on a boundary row the owned columns from X, then the ghost columns
/// from G at ci − owned.
template <int W, int VB, bool Boundary, class View, class V, class Acc>
EINSHARD_KERNEL_INLINE void spmm_row_sum(const View& m, const SpmmWindow<V>& s, std::int64_t i, const V* x, const V* g,
                                        Acc& acc) {
  const std::int64_t e0 = m.rp[i], e1 = m.rp[i + 1];
  if constexpr (Boundary) {
    const auto split = first_ghost(m, i, s.owned);
    spmm_add<W, VB>(m, e0, split, x, 0, s.ld, acc);
    spmm_add<W, VB>(m, split, e1, g, s.owned, s.ld, acc);
  } else {
    (void)g;
    spmm_add<W, VB>(m, e0, e1, x, 0, s.ld, acc);
  }
}

/// Row i of the window: Y[i, j0 + [0, W)] = A[i, :] [X; G], with its dots against wt added into
/// d (a Lanes accumulator of doubles for real V, kept in registers across rows; W doubles else).
template <int W, int VB, bool Dot, bool Boundary, class View, class V, class Dots>
EINSHARD_KERNEL_INLINE void spmm_row(const View& m, const SpmmWindow<V>& s, std::int64_t i, const V* __restrict x,
                                    const V* __restrict g, Dots& d) {
  V* __restrict yr = s.y + i * s.ld + s.j0;
  const V* __restrict wr = Dot ? s.wt + i * s.ld + s.j0 : nullptr;
#if EINSHARD_KERNEL_LANES
  if constexpr (!c10::is_complex<V>::value) {
    using L = Lanes<V, W, VB>;
    typename L::Acc acc = {};
    spmm_row_sum<W, VB, Boundary>(m, s, i, x, g, acc);
    for (int c = 0; c < L::count; ++c) __builtin_memcpy(yr + c * L::width, &acc.v[c], sizeof acc.v[c]);
    if constexpr (Dot) {
      for (int c = 0; c < L::count; ++c) {
        typename L::vec w;
        __builtin_memcpy(&w, wr + c * L::width, sizeof w);
        if constexpr (std::is_same_v<V, double>)
          d.v[c] += w * acc.v[c];
        else  // float products, double dots (as the width-generic loop keeps them)
          for (int l = 0; l < L::width; ++l) {
            constexpr int dw = Lanes<double, W, VB>::width;
            const int j = c * L::width + l;
            d.v[j / dw][j % dw] += static_cast<double>(w[l] * acc.v[c][l]);
          }
      }
    }
  } else
#endif
  {
    V acc[W] = {};
    spmm_row_sum<W, VB, Boundary>(m, s, i, x, g, acc);
    for (int j = 0; j < W; ++j) yr[j] = acc[j];
    if constexpr (Dot)
      for (int j = 0; j < W; ++j) d[j] += re_dot(wr[j], acc[j]);
  }
}

/// One window of W columns over the interior or the boundary rows (no lambdas: a callee the
/// compiler declines to inline would lose the caller's instruction set).
template <int W, int VB, bool Dot, class View, class V>
EINSHARD_KERNEL_INLINE void spmm_window_body(const View& m, const SpmmWindow<V>& s) {
#if EINSHARD_KERNEL_LANES
  using D = std::conditional_t<c10::is_complex<V>::value, double[W], typename Lanes<double, W, VB>::Acc>;
#else
  using D = double[W];
#endif
  D d = {};
  const V* x = s.x + s.j0;
  if (!s.boundary_phase) {
    std::int64_t begin = s.row0;
    for (std::int64_t q = s.q0; begin < s.row1; ++q) {
      const std::int64_t end = q < s.nb ? std::min(s.boundary[q], s.row1) : s.row1;
      for (std::int64_t i = begin; i < end; ++i) spmm_row<W, VB, Dot, false>(m, s, i, x, x, d);
      begin = end + 1;
    }
  } else {
    const V* g = s.g + s.j0;
    for (std::int64_t q = s.q0; q < s.q1; ++q) spmm_row<W, VB, Dot, true>(m, s, s.boundary[q], x, g, d);
  }
  if constexpr (Dot) {
    double out[W];
    std::memcpy(out, &d, sizeof out);
    for (int j = 0; j < W; ++j) s.dots[s.j0 + j] += out[j];
  }
}

template <int W, class View, class V>
void spmm_window_portable(const View& m, const SpmmWindow<V>& s) {
  s.wt ? spmm_window_body<W, 16, true>(m, s) : spmm_window_body<W, 16, false>(m, s);
}

#if EINSHARD_KERNELS_X86
/// The same body compiled for AVX2 + FMA (the build's flags may be generic x86-64): called only
/// where `avx2_kernels_available()` says the CPU has both.
template <int W, class View, class V>
__attribute__((target("avx2,fma"))) void spmm_window_avx2(const View& m, const SpmmWindow<V>& s) {
  s.wt ? spmm_window_body<W, 32, true>(m, s) : spmm_window_body<W, 32, false>(m, s);
}
#endif

template <int W, class View, class V>
void spmm_window(const View& m, const SpmmWindow<V>& s, KernelIsa isa) {
#if EINSHARD_KERNELS_X86
  if constexpr (!c10::is_complex<V>::value)  // complex products stay portable (fewer instantiations)
    if (isa == KernelIsa::avx2) return spmm_window_avx2<W>(m, s);
#endif
  (void)isa;
  spmm_window_portable<W>(m, s);
}

/// spmv_halo (csr.hpp) for k vectors: Y = A [X; G] for X of shape (owned, k), G (ghosts, k) and Y
/// (a.rows, k), all contiguous, over the interior rows (`boundary_phase` false: X only) or the
/// `boundary` rows (owned columns from X, ghost column owned + j from G's row j). With `wt` defined
/// (the shape of Y), also adds Re <wt_j, Y_j> over these rows to dots[j]: the product's own dot,
/// as the single-vector kernels return it.
///
/// The columns go through fixed-width windows of 16, 8, 4, 2 and 1, each entry's W multiply-adds
/// kept in vector registers, with AVX2 + FMA for real values where the CPU has them (`kernel_isa`).
/// When k needs several windows (k = 32: two of 16; k = 3: 2 and 1), the rows go in tiles and
/// every window runs over a tile before the next tile: the tile's entries stay in L1 between
/// windows, so the matrix streams from memory once for all k columns, and each row of X and Y is
/// read or written whole. (A loop over a run-time number of columns kept its sums in memory: at
/// k = 2 the block product took longer than two single ones.)
void spmm_halo(const Csr& a, const at::Tensor& boundary, std::int64_t owned, const at::Tensor& x,
               const at::Tensor& g, at::Tensor& y, bool boundary_phase, const at::Tensor& wt = {},
               double* dots = nullptr);

// The block kernels below go once over the rows with a row's k values (contiguous) inner: the
// accumulators are per column, so the inner loop vectorizes without reassociating a sum, and
// every cache line of a block is used whole (a pass per chunk of columns would stride over the
// rows, and the adjacent-line prefetch would fetch each row's other lines once per pass). A row's
// columns go in windows of 8, 4, 2 and 1 (`over_windows`), each, for float64, in explicit vector
// lanes (`Cols`), in an AVX2 + FMA build where the CPU has it (`run_block_rows`): GCC 12 at -O2
// left the loop over a run-time k scalar, and packed a fixed count of 8 for some passes and not
// others, and the block's vector passes took as long per column as a single solve's with fewer
// bytes. Other dtypes take the same windows as plain loops.

/// Loads, stores and the lane count of a window of W float64 in VB-byte vectors.
template <int W, int VB>
struct Cols;
#if EINSHARD_KERNEL_LANES
template <int W, int VB>
struct Cols {
  using L = Lanes<double, W, VB>;
  using vec = typename L::vec;
  static constexpr int count = L::count;
  static constexpr int width = L::width;
  // By reference, not by value: a 32-byte vector returned by a function not compiled for AVX has
  // another ABI, and GCC warns (-Wpsabi) even where the function is always inlined.
  EINSHARD_KERNEL_INLINE static void load(vec& v, const double* p, int c) {
    __builtin_memcpy(&v, p + c * width, sizeof v);  // unaligned
  }
  EINSHARD_KERNEL_INLINE static void store(double* p, int c, const vec& v) {
    __builtin_memcpy(p + c * width, &v, sizeof v);
  }
};
#endif

/// Whether a window of V runs in explicit lanes.
template <class V>
inline constexpr bool kLaneWindows = EINSHARD_KERNEL_LANES && std::is_same_v<V, double>;

/// body.window<W, VB>(i, j0) over row i's columns [0, k) in windows of W = 8, 4, 2, 1.
template <int VB, class Body>
EINSHARD_KERNEL_INLINE void over_windows(const Body& body, std::int64_t i, std::int64_t k) {
  std::int64_t j = 0;
  for (; j + 8 <= k; j += 8) body.template window<8, VB>(i, j);
  if (j + 4 <= k) {
    body.template window<4, VB>(i, j);
    j += 4;
  }
  if (j + 2 <= k) {
    body.template window<2, VB>(i, j);
    j += 2;
  }
  if (j < k) body.template window<1, VB>(i, j);
}

template <int VB, class Body>
EINSHARD_KERNEL_INLINE void block_rows_body(const Body& body) {
  for (std::int64_t i = 0; i < body.n; ++i) over_windows<VB>(body, i, body.k);
}

template <class Body>
void block_rows_portable(const Body& body) {
  block_rows_body<16>(body);
}

#if EINSHARD_KERNELS_X86
template <class Body>
__attribute__((target("avx2,fma"))) void block_rows_avx2(const Body& body) {
  block_rows_body<32>(body);
}
#endif

template <class Body>
void run_block_rows(const Body& body) {
#if EINSHARD_KERNELS_X86
  if constexpr (!c10::is_complex<typename Body::value_type>::value)  // complex stays portable (fewer instantiations)
    if (kernel_isa() == KernelIsa::avx2) return block_rows_avx2(body);
#endif
  block_rows_portable(body);
}

/// block_dots' rows: acc[j] += Re <a_ij, b_ij>.
template <class V>
struct BlockDotsRows {
  using value_type = V;
  const V* a;
  const V* b;
  double* acc;
  std::int64_t n, k;
  template <int W, int VB>
  EINSHARD_KERNEL_INLINE void window(std::int64_t i, std::int64_t j0) const {
    const V* ar = a + i * k + j0;
    const V* br = b + i * k + j0;
    double* s = acc + j0;
    if constexpr (kLaneWindows<V>) {
      using C = Cols<W, VB>;
      for (int c = 0; c < C::count; ++c) {
        typename C::vec sv, av, bv;
        C::load(sv, s, c);
        C::load(av, ar, c);
        C::load(bv, br, c);
        C::store(s, c, sv + av * bv);
      }
    } else {
      for (int j = 0; j < W; ++j) s[j] += re_dot(ar[j], br[j]);
    }
  }
};

/// block_cg_update's rows: r_ij −= α_j q_ij, rz[j] += r_ij d_i r_ij, rr[j] += r_ij².
template <class V>
struct BlockCgUpdateRows {
  using value_type = V;
  V* r;
  const V* q;
  const V* alpha;
  const V* d;
  double* rz;
  double* rr;
  std::int64_t n, k;
  template <int W, int VB>
  EINSHARD_KERNEL_INLINE void window(std::int64_t i, std::int64_t j0) const {
    const V di = d ? d[i] : V(1);
    V* rw = r + i * k + j0;
    const V* qw = q + i * k + j0;
    const V* aw = alpha + j0;
    double* zs = rz + j0;
    double* rs = rr + j0;
    if constexpr (kLaneWindows<V>) {
      using C = Cols<W, VB>;
      for (int c = 0; c < C::count; ++c) {
        typename C::vec ri, av, qv, zv, sv;
        C::load(ri, rw, c);
        C::load(av, aw, c);
        C::load(qv, qw, c);
        C::load(zv, zs, c);
        C::load(sv, rs, c);
        ri -= av * qv;
        C::store(rw, c, ri);
        C::store(zs, c, zv + ri * (di * ri));
        C::store(rs, c, sv + ri * ri);
      }
    } else {
      for (int j = 0; j < W; ++j) {
        const V ri = rw[j] - aw[j] * qw[j];
        rw[j] = ri;
        zs[j] += re_dot(ri, di * ri);
        rs[j] += re_dot(ri, ri);
      }
    }
  }
};

/// block_cg_direction's rows: x_ij += α_j p_ij; p_ij = on_j (d_i z_ij + β_j p_ij).
template <class V>
struct BlockCgDirectionRows {
  using value_type = V;
  V* x;
  V* p;
  const V* z;
  const V* d;
  const V* alpha;
  const V* beta;
  const V* on;
  std::int64_t n, k;
  template <int W, int VB>
  EINSHARD_KERNEL_INLINE void window(std::int64_t i, std::int64_t j0) const {
    const V di = d ? d[i] : V(1);
    const auto o = i * k + j0;
    V* xw = x + o;
    V* pw = p + o;
    const V* zw = z + o;
    if constexpr (kLaneWindows<V>) {
      using C = Cols<W, VB>;
      for (int c = 0; c < C::count; ++c) {
        typename C::vec pj, xv, zv, av, bv, ov;
        C::load(pj, pw, c);
        C::load(xv, xw, c);
        C::load(zv, zw, c);
        C::load(av, alpha + j0, c);
        C::load(bv, beta + j0, c);
        C::load(ov, on + j0, c);
        C::store(xw, c, xv + av * pj);
        C::store(pw, c, ov * (di * zv + bv * pj));
      }
    } else {
      for (int j = 0; j < W; ++j) {
        const V pj = pw[j];
        xw[j] += alpha[j0 + j] * pj;
        pw[j] = on[j0 + j] * (di * zw[j] + beta[j0 + j] * pj);
      }
    }
  }
};

/// block_cgcg_update's rows (see there); `write_u` false: u untouched and ru not summed.
template <class V>
struct BlockCgcgRows {
  using value_type = V;
  V* x;
  V* r;
  V* p;
  V* s;
  V* u;
  const V* w;
  const V* alpha;
  const V* beta;
  const V* d;
  bool write_u;
  double* ru;
  double* rr;
  std::int64_t n, k;
  template <int W, int VB>
  EINSHARD_KERNEL_INLINE void window(std::int64_t i, std::int64_t j0) const {
    const V di = d ? d[i] : V(1);
    const auto o = i * k + j0;
    V *xw = x + o, *rw = r + o, *pw = p + o, *sw = s + o, *uw = u + o;
    const V* ww = w + o;
    const V* aw = alpha + j0;
    const V* bw = beta + j0;
    if constexpr (kLaneWindows<V>) {
      using C = Cols<W, VB>;
      for (int c = 0; c < C::count; ++c) {
        typename C::vec a, b, pi, si, xv, ri, sum;
        C::load(a, aw, c);
        C::load(b, bw, c);
        C::load(pi, pw, c);
        C::load(si, sw, c);
        C::load(xv, uw, c);
        pi = xv + b * pi;
        C::load(xv, ww, c);
        si = xv + b * si;
        C::store(pw, c, pi);
        C::store(sw, c, si);
        C::load(xv, xw, c);
        C::store(xw, c, xv + a * pi);
        C::load(ri, rw, c);
        ri -= a * si;
        C::store(rw, c, ri);
        C::load(sum, rr + j0, c);
        C::store(rr + j0, c, sum + ri * ri);
        if (write_u) {
          const auto ui = di * ri;
          C::store(uw, c, ui);
          C::load(sum, ru + j0, c);
          C::store(ru + j0, c, sum + ri * ui);
        }
      }
    } else {
      for (int j = 0; j < W; ++j) {
        const V pi = uw[j] + bw[j] * pw[j];
        const V si = ww[j] + bw[j] * sw[j];
        pw[j] = pi;
        sw[j] = si;
        xw[j] += aw[j] * pi;
        const V ri = rw[j] - aw[j] * si;
        rw[j] = ri;
        rr[j0 + j] += re_dot(ri, ri);
        if (write_u) {
          const V ui = di * ri;
          uw[j] = ui;
          ru[j0 + j] += re_dot(ri, ui);
        }
      }
    }
  }
};

/// Re <a_j, b_j> of every column j of two (n, k) blocks, in one pass.
std::vector<double> block_dots(const at::Tensor& a, const at::Tensor& b);


/// Block CG's residual update in one pass: r_j −= α_j q_j. Returns {Re<r_j, d .* r_j>...,
/// ‖r_j‖²...} (d: (n,) diagonal preconditioner; the identity when undefined). x's update waits for
/// `block_cg_direction`, which reads p anyway, and z = d .* r is not stored: the direction pass
/// forms it again where it is needed (each saves a block's read or write per step). With a general
/// preconditioner the caller forms z and its dots afterwards.
std::vector<double> block_cg_update(at::Tensor& r, const at::Tensor& q, const std::vector<double>& alpha,
                                    const at::Tensor& d);


/// The rest of a block CG step in one pass: x_j += α_j p_j (the step `block_cg_update` made on r),
/// then p_j = d .* z_j + β_j p_j for the active columns (d undefined: the identity) and p_j = 0 for
/// a stopped one.
void block_cg_direction(at::Tensor& x, at::Tensor& p, const at::Tensor& z, const at::Tensor& d,
                        const std::vector<double>& alpha, const std::vector<double>& beta,
                        const std::vector<char>& active);


/// Block Chronopoulos–Gear step in one pass, per column j: p = u + β p; s = w + β s; x += α p;
/// r −= α s; then u = d .* r (d: a diagonal M), u = r (`identity`), or u untouched (a general M,
/// applied by the caller). Returns {Re<r_j, u_j>..., ‖r_j‖²...} (the first k zero for a general M).
/// A stopped column has α = β = 0: x and r stay as they are.
std::vector<double> block_cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s, at::Tensor& u,
                                      const at::Tensor& w, const std::vector<double>& alpha,
                                      const std::vector<double>& beta, const at::Tensor& d, bool identity);

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE void spmm_halo(const Csr& a, const at::Tensor& boundary, std::int64_t owned, const at::Tensor& x,
                               const at::Tensor& g, at::Tensor& y, bool boundary_phase, const at::Tensor& wt,
                               double* dots) {
  const std::int64_t k = x.size(1);
  const auto isa = kernel_isa();
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* __restrict xv = x.data_ptr<V>();
    const V* __restrict gv = boundary.numel() > 0 ? g.data_ptr<V>() : nullptr;
    auto* __restrict yv = y.data_ptr<V>();
    const V* wv = wt.defined() ? wt.data_ptr<V>() : nullptr;
    const auto* b = boundary.data_ptr<std::int64_t>();
    const auto nb = boundary.numel();
    SpmmWindow<V> s{xv, gv, yv, wv, dots, k, 0, owned, b, nb, boundary_phase, 0, a.rows, 0, nb};
    // One window (k = 1, 2, 4, 8, 16) runs over every row at once; several go tile by tile.
    const bool tiled = (k & (k - 1)) != 0 || k > 16;
    const std::int64_t tile = tiled ? 128 : std::max<std::int64_t>(a.rows, nb);
    const auto run_windows = [&] {
      for (s.j0 = 0; s.j0 < k;) {
        const auto left = k - s.j0;
        const int width = left >= 16 ? 16 : left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        switch (width) {
          case 16: spmm_window<16>(m, s, isa); break;
          case 8: spmm_window<8>(m, s, isa); break;
          case 4: spmm_window<4>(m, s, isa); break;
          case 2: spmm_window<2>(m, s, isa); break;
          default: spmm_window<1>(m, s, isa);
        }
        s.j0 += width;
      }
    };
    if (!boundary_phase) {
      for (std::int64_t r0 = 0; r0 < a.rows; r0 += tile) {
        s.row0 = r0;
        s.row1 = std::min(r0 + tile, a.rows);
        s.q0 = std::lower_bound(b, b + nb, r0) - b;
        run_windows();
      }
    } else {
      for (std::int64_t q0 = 0; q0 < nb; q0 += tile) {
        s.q0 = q0;
        s.q1 = std::min(q0 + tile, nb);
        run_windows();
      }
    }
  });
}

EINSHARD_INLINE std::vector<double> block_dots(const at::Tensor& a, const at::Tensor& b) {
  if (uses_generic(a)) return generic_block_dots(a, b);
  const auto n = a.size(0), k = a.size(1);
  std::vector<double> out(static_cast<std::size_t>(k), 0.0);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(a.scalar_type(), "einshard::sparse::block_dots", [&] {
    using V = scalar_t;
    const auto* __restrict av = a.data_ptr<V>();
    const auto* __restrict bv = b.data_ptr<V>();
    run_block_rows(BlockDotsRows<V>{av, bv, out.data(), n, k});
  });
  return out;
}

EINSHARD_INLINE std::vector<double> block_cg_update(at::Tensor& r, const at::Tensor& q, const std::vector<double>& alpha,
                                                    const at::Tensor& d) {
  if (uses_generic(r)) return generic_block_cg_update(r, q, alpha, d);
  const auto n = r.size(0), k = r.size(1);
  std::vector<double> out(static_cast<std::size_t>(2 * k), 0.0);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(r.scalar_type(), "einshard::sparse::block_cg_update", [&] {
    using V = scalar_t;
    auto* __restrict rv = r.data_ptr<V>();
    const auto* __restrict qv = q.data_ptr<V>();
    const V* dv = d.defined() ? d.data_ptr<V>() : nullptr;
    std::vector<V> av(alpha.begin(), alpha.end());
    run_block_rows(BlockCgUpdateRows<V>{rv, qv, av.data(), dv, out.data(), out.data() + k, n, k});
  });
  return out;
}

EINSHARD_INLINE void block_cg_direction(at::Tensor& x, at::Tensor& p, const at::Tensor& z, const at::Tensor& d,
                                        const std::vector<double>& alpha, const std::vector<double>& beta,
                                        const std::vector<char>& active) {
  if (uses_generic(p)) return generic_block_cg_direction(x, p, z, d, alpha, beta, active);
  const auto n = p.size(0), k = p.size(1);
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(p.scalar_type(), "einshard::sparse::block_cg_direction", [&] {
    using V = scalar_t;
    auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict pv = p.data_ptr<V>();
    const auto* __restrict zv = z.data_ptr<V>();
    const V* dv = d.defined() ? d.data_ptr<V>() : nullptr;
    std::vector<V> as(alpha.begin(), alpha.end()), bs(static_cast<std::size_t>(k)), ons(static_cast<std::size_t>(k));
    for (std::int64_t j = 0; j < k; ++j) {
      const auto c = static_cast<std::size_t>(j);
      ons[c] = active[c] ? V(1) : V(0);
      bs[c] = static_cast<V>(beta[c]);
    }
    run_block_rows(BlockCgDirectionRows<V>{xv, pv, zv, dv, as.data(), bs.data(), ons.data(), n, k});
  });
}

EINSHARD_INLINE std::vector<double> block_cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s, at::Tensor& u,
                                                      const at::Tensor& w, const std::vector<double>& alpha,
                                                      const std::vector<double>& beta, const at::Tensor& d, bool identity) {
  if (uses_generic(x)) return generic_block_cgcg_update(x, r, p, s, u, w, alpha, beta, d, identity);
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
    std::vector<V> as(alpha.begin(), alpha.end()), bs(beta.begin(), beta.end());
    run_block_rows(BlockCgcgRows<V>{xv, rv, pv, sv, uv, wv, as.data(), bs.data(), dv, write_u, out.data(),
                                      out.data() + k, n, k});
  });
  return out;
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse::detail
