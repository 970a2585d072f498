#pragma once
/// @file
/// Fused vector kernels of the Krylov methods: each streams its vectors once and returns the dot
/// products the next reduction needs, where separate BLAS-1 calls (PETSc's VecAXPY, VecDot, ...)
/// would read the same vectors several times. Real and complex; dots accumulate in the vectors'
/// type and come back as complex<double>.

#include <ATen/ATen.h>

#include <array>
#include <complex>
#include <cstdint>
#include <type_traits>

#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"
#include "einshard/sparse/matrix/isa.hpp"

namespace einshard::sparse::detail {

template <class F>
void dispatch_values(at::ScalarType t, F&& f) {
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(t, "einshard::sparse::krylov", [&] { f(scalar_t{}); });
}

#if EINSHARD_KERNEL_LANES
/// cg_update's pass over real values in VB-byte vectors of V; the two sums in double lanes (a
/// float product widened as the scalar loop widens it), so the pass is bound by memory, not by the
/// latency of one running sum: float32 values then take about half a float64 pass's time, where
/// the scalar loop ran both at the speed of its additions. With `Diagonal`: z = d .* r.
template <int VB, bool Diagonal, class V>
EINSHARD_KERNEL_INLINE void cg_update_lanes(V* __restrict x, V* __restrict r, const V* __restrict p,
                                            const V* __restrict q, V a, const V* __restrict d, V* __restrict z,
                                            std::int64_t n, double* out) {
  constexpr int width = VB / static_cast<int>(sizeof(V));
  constexpr int halves = static_cast<int>(sizeof(double) / sizeof(V));  // double vectors per V vector
  typedef V vec __attribute__((vector_size(VB)));
  typedef double dvec __attribute__((vector_size(VB)));
  dvec rz[halves] = {}, rr[halves] = {};
  std::int64_t i = 0;
  for (; i + width <= n; i += width) {
    vec xi, ri, pi, qi;
    __builtin_memcpy(&xi, x + i, sizeof xi);  // unaligned loads and stores
    __builtin_memcpy(&pi, p + i, sizeof pi);
    __builtin_memcpy(&ri, r + i, sizeof ri);
    __builtin_memcpy(&qi, q + i, sizeof qi);
    xi += a * pi;
    ri -= a * qi;
    __builtin_memcpy(x + i, &xi, sizeof xi);
    __builtin_memcpy(r + i, &ri, sizeof ri);
    add_widened(rr, ri * ri);
    if constexpr (Diagonal) {
      vec di;
      __builtin_memcpy(&di, d + i, sizeof di);
      const vec zi = di * ri;
      __builtin_memcpy(z + i, &zi, sizeof zi);
      add_widened(rz, ri * zi);
    }
  }
  double sz = 0.0, sr = 0.0;
  for (int h = 0; h < halves; ++h)
    for (int l = 0; l < width / halves; ++l) {
      sz += rz[h][l];
      sr += rr[h][l];
    }
  for (; i < n; ++i) {
    x[i] += a * p[i];
    const V ri = r[i] - a * q[i];
    r[i] = ri;
    sr += static_cast<double>(ri * ri);
    if constexpr (Diagonal) {
      const V zi = d[i] * ri;
      z[i] = zi;
      sz += static_cast<double>(ri * zi);
    }
  }
  out[0] = Diagonal ? sz : sr;
  out[1] = sr;
}

template <bool Diagonal, class V>
void cg_update_portable(V* x, V* r, const V* p, const V* q, V a, const V* d, V* z, std::int64_t n, double* out) {
  cg_update_lanes<16, Diagonal>(x, r, p, q, a, d, z, n, out);
}

#if EINSHARD_KERNELS_X86
template <bool Diagonal, class V>
__attribute__((target("avx2,fma"))) void cg_update_avx2(V* x, V* r, const V* p, const V* q, V a, const V* d, V* z,
                                                         std::int64_t n, double* out) {
  cg_update_lanes<32, Diagonal>(x, r, p, q, a, d, z, n, out);
}
#endif
#endif

/// x += alpha p; r -= alpha q; then z = d .* r when `d` is defined (a diagonal preconditioner;
/// z may be undefined otherwise). Returns {<r, z or r>, <r, r>} of the updated r.
std::array<std::complex<double>, 2> cg_update(at::Tensor& x, at::Tensor& r, const at::Tensor& p,
                                              const at::Tensor& q, double alpha, const at::Tensor& d,
                                              at::Tensor& z);

#if EINSHARD_KERNEL_LANES
/// What one_reduction_step does with u (Chronopoulos–Gear) or m (pipelined) besides the updates.
enum class PreconditionedCopy { none, copy, diagonal };  // general M (the caller applies it), M = I, M = diag

/// one_reduction_step's pass over the first len - len % width entries of real values, in VB-byte
/// vectors as cg_update_lanes: its sums <r, u>, <w, u>, <r, r> in double lanes. A scalar loop's two
/// or three running sums made the pass wait on their additions: a Chronopoulos–Gear iteration on
/// 16,384 rows took 63–76 µs at one rank against the standard CG's 43–49, and 40–48 µs in lanes.
/// Returns the entries it covered; out gets the three sums.
template <int VB, bool Pipelined, PreconditionedCopy C, class V>
EINSHARD_KERNEL_INLINE std::int64_t one_reduction_lanes(V* __restrict x, V* __restrict r, V* __restrict u,
                                                        V* __restrict w, V* __restrict p, V* __restrict s,
                                                        V* __restrict z, V* __restrict q, V* __restrict m,
                                                        const V* __restrict n, V a, V b, const V* __restrict d,
                                                        std::int64_t len, double* out) {
  constexpr int width = VB / static_cast<int>(sizeof(V));
  constexpr int halves = static_cast<int>(sizeof(double) / sizeof(V));
  typedef V vec __attribute__((vector_size(VB)));
  typedef double dvec __attribute__((vector_size(VB)));
  dvec ru[halves] = {}, wu[halves] = {}, rr[halves] = {};
  std::int64_t i = 0;
  for (; i + width <= len; i += width) {
    vec wi, si, ui, pi, xi, ri;  // unaligned loads and stores
    __builtin_memcpy(&wi, w + i, sizeof wi);
    __builtin_memcpy(&si, s + i, sizeof si);
    __builtin_memcpy(&ui, u + i, sizeof ui);
    __builtin_memcpy(&pi, p + i, sizeof pi);
    __builtin_memcpy(&xi, x + i, sizeof xi);
    __builtin_memcpy(&ri, r + i, sizeof ri);
    si = wi + b * si;
    pi = ui + b * pi;
    xi += a * pi;
    ri -= a * si;
    __builtin_memcpy(s + i, &si, sizeof si);
    __builtin_memcpy(p + i, &pi, sizeof pi);
    __builtin_memcpy(x + i, &xi, sizeof xi);
    __builtin_memcpy(r + i, &ri, sizeof ri);
    add_widened(rr, ri * ri);
    if constexpr (Pipelined) {
      vec zi, qi, ni, mi;
      __builtin_memcpy(&zi, z + i, sizeof zi);
      __builtin_memcpy(&ni, n + i, sizeof ni);
      zi = ni + b * zi;
      __builtin_memcpy(&qi, q + i, sizeof qi);
      __builtin_memcpy(&mi, m + i, sizeof mi);
      qi = mi + b * qi;
      ui -= a * qi;
      wi -= a * zi;
      __builtin_memcpy(z + i, &zi, sizeof zi);
      __builtin_memcpy(q + i, &qi, sizeof qi);
      __builtin_memcpy(u + i, &ui, sizeof ui);
      __builtin_memcpy(w + i, &wi, sizeof wi);
      if constexpr (C == PreconditionedCopy::diagonal) {
        vec di;
        __builtin_memcpy(&di, d + i, sizeof di);
        mi = di * wi;
      }
      if constexpr (C != PreconditionedCopy::none) {
        if constexpr (C == PreconditionedCopy::copy) mi = wi;
        __builtin_memcpy(m + i, &mi, sizeof mi);
      }
      add_widened(ru, ri * ui);
      add_widened(wu, wi * ui);
    } else if constexpr (C != PreconditionedCopy::none) {
      if constexpr (C == PreconditionedCopy::diagonal) {
        vec di;
        __builtin_memcpy(&di, d + i, sizeof di);
        ui = di * ri;
        add_widened(ru, ri * ui);
      } else {
        ui = ri;
      }
      __builtin_memcpy(u + i, &ui, sizeof ui);
    }
  }
  out[0] = out[1] = out[2] = 0.0;
  for (int h = 0; h < halves; ++h)
    for (int l = 0; l < VB / 8; ++l) {
      out[0] += ru[h][l];
      out[1] += wu[h][l];
      out[2] += rr[h][l];
    }
  return i;
}

template <bool Pipelined, PreconditionedCopy C, class V>
std::int64_t one_reduction_portable(V* x, V* r, V* u, V* w, V* p, V* s, V* z, V* q, V* m, const V* n, V a, V b,
                                    const V* d, std::int64_t len, double* out) {
  return one_reduction_lanes<16, Pipelined, C>(x, r, u, w, p, s, z, q, m, n, a, b, d, len, out);
}

#if EINSHARD_KERNELS_X86
template <bool Pipelined, PreconditionedCopy C, class V>
__attribute__((target("avx2,fma"))) std::int64_t one_reduction_avx2(V* x, V* r, V* u, V* w, V* p, V* s, V* z, V* q,
                                                                     V* m, const V* n, V a, V b, const V* d,
                                                                     std::int64_t len, double* out) {
  return one_reduction_lanes<32, Pipelined, C>(x, r, u, w, p, s, z, q, m, n, a, b, d, len, out);
}
#endif
#endif

/// The step of both one-reduction CGs in one pass: s = w + β s; p = u + β p; x += α p; r −= α s.
/// Chronopoulos–Gear (`Pipelined` false) then sets u = d .* r (a diagonal M) or u = r (M the
/// identity; otherwise the caller applies M) and returns {<r, u> (0 for a general M), <r, r>, 0}.
/// Ghysels–Vanroose (`Pipelined` true) also carries A p's chain: z = n + β z; q = m + β q;
/// u −= α q; w −= α z; then m = d .* w or m = w (likewise), and returns {<r, u>, <w, u>, <r, r>}
/// in that order. `z`, `q`, `m`, `n` are read only when `Pipelined`.
template <bool Pipelined>
std::array<std::complex<double>, 3> one_reduction_step(at::Tensor& x, at::Tensor& r, at::Tensor& u, at::Tensor& w,
                                                       at::Tensor& p, at::Tensor& s, at::Tensor* z, at::Tensor* q,
                                                       at::Tensor* m, const at::Tensor* n, double alpha, double beta,
                                                       const at::Tensor& d, bool identity) {
  if (uses_generic(x)) return generic_one_reduction_step<Pipelined>(x, r, u, w, p, s, z, q, m, n, alpha, beta, d, identity);
  std::array<std::complex<double>, 3> out{};
  dispatch_values(x.scalar_type(), [&](auto v0) {
    using V = decltype(v0);
    const auto len = x.numel();
    auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict rv = r.data_ptr<V>();
    auto* __restrict uv = u.data_ptr<V>();
    auto* __restrict wv = w.data_ptr<V>();
    auto* __restrict pv = p.data_ptr<V>();
    auto* __restrict sv = s.data_ptr<V>();
    V* __restrict zv = nullptr;
    V* __restrict qv = nullptr;
    V* __restrict mv = nullptr;
    const V* __restrict nv = nullptr;
    if constexpr (Pipelined) {
      zv = z->data_ptr<V>();
      qv = q->data_ptr<V>();
      mv = m->data_ptr<V>();
      nv = n->data_ptr<V>();
    }
    const auto* __restrict dv = d.defined() ? d.data_ptr<V>() : nullptr;
    const V a = static_cast<V>(alpha), b = static_cast<V>(beta);
    using A = accumulator_t<V>;
    A ru{}, wu{}, rr{};
    std::int64_t start = 0;
#if EINSHARD_KERNEL_LANES
    if constexpr (std::is_floating_point_v<V>) {
      double sums[3];
      const bool avx2 = kernel_isa() == KernelIsa::avx2;
      const auto run = [&](auto copy) {
        constexpr auto C = decltype(copy)::value;
#if EINSHARD_KERNELS_X86
        if (avx2) return one_reduction_avx2<Pipelined, C>(xv, rv, uv, wv, pv, sv, zv, qv, mv, nv, a, b, dv, len, sums);
#endif
        return one_reduction_portable<Pipelined, C>(xv, rv, uv, wv, pv, sv, zv, qv, mv, nv, a, b, dv, len, sums);
      };
      using PC = PreconditionedCopy;
      start = dv         ? run(std::integral_constant<PC, PC::diagonal>{})
              : identity ? run(std::integral_constant<PC, PC::copy>{})
                         : run(std::integral_constant<PC, PC::none>{});
      ru = sums[0], wu = sums[1], rr = sums[2];
    }
#endif
    for (std::int64_t i = start; i < len; ++i) {
      const V si = wv[i] + b * sv[i];
      const V pi = uv[i] + b * pv[i];
      V qi{}, zi{};
      if constexpr (Pipelined) {
        zi = nv[i] + b * zv[i];
        qi = mv[i] + b * qv[i];
        zv[i] = zi;
        qv[i] = qi;
      }
      sv[i] = si;
      pv[i] = pi;
      xv[i] += a * pi;
      const V ri = rv[i] - a * si;
      rv[i] = ri;
      rr += static_cast<A>(conj_if_complex(ri) * ri);
      if constexpr (Pipelined) {
        const V ui = uv[i] - a * qi;
        const V wi = wv[i] - a * zi;
        uv[i] = ui;
        wv[i] = wi;
        if (dv)
          mv[i] = dv[i] * wi;
        else if (identity)
          mv[i] = wi;
        ru += static_cast<A>(conj_if_complex(ri) * ui);
        wu += static_cast<A>(conj_if_complex(wi) * ui);
      } else if (dv) {
        const V ui = dv[i] * ri;
        uv[i] = ui;
        ru += static_cast<A>(conj_if_complex(ri) * ui);
      } else if (identity) {
        uv[i] = ri;
      }
    }
    if constexpr (!Pipelined)
      if (identity && !dv) ru = rr;
    out = {widen(ru), widen(Pipelined ? wu : rr), widen(Pipelined ? rr : A{})};
  });
  return out;
}

/// Chronopoulos–Gear step (see `one_reduction_step`): {<r, u>, <r, r>}.
std::array<std::complex<double>, 2> cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s,
                                                at::Tensor& u, at::Tensor& w, double alpha, double beta,
                                                const at::Tensor& d, bool identity);

/// Pipelined CG step (Ghysels–Vanroose; see `one_reduction_step`): {<r, u>, <w, u>, <r, r>}.
std::array<std::complex<double>, 3> pipecg_update(at::Tensor& x, at::Tensor& r, at::Tensor& u, at::Tensor& w,
                                                  at::Tensor& z, at::Tensor& q, at::Tensor& s, at::Tensor& p,
                                                  at::Tensor& m, const at::Tensor& n, double alpha, double beta,
                                                  const at::Tensor& d, bool identity);

/// One pass over n entries of 1-D vectors: `make(V{})` returns the body f(i, acc) for entry i,
/// accumulating ND dots into acc[0..ND) (V-typed); the dots come back as complex<double>. Four
/// interleaved sets of accumulators: a single chain of additions is bound by their latency (the
/// 5x of `local_dot`'s note), four independent ones are not. Coefficients the body reads are
/// moved into it, since `make` returns before the pass.
template <int ND, class Make>
std::array<std::complex<double>, ND> vector_pass(at::ScalarType t, std::int64_t n, Make&& make) {
  std::array<std::complex<double>, ND> out{};
  dispatch_values(t, [&](auto v0) {
    using V = decltype(v0);
    const auto body = make(v0);
    constexpr int slots = ND > 0 ? ND : 1;
    V a0[slots] = {}, a1[slots] = {}, a2[slots] = {}, a3[slots] = {};
    std::int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      body(i, a0);
      body(i + 1, a1);
      body(i + 2, a2);
      body(i + 3, a3);
    }
    for (; i < n; ++i) body(i, a0);
    for (int d = 0; d < ND; ++d) out[static_cast<std::size_t>(d)] = widen((a0[d] + a1[d]) + (a2[d] + a3[d]));
  });
  return out;
}

/// y = a x + c y in one pass, returning this rank's ‖y‖² of the result (a, c real).
double axpby_norm(double a, const at::Tensor& x, double c, at::Tensor& y);

/// <a, b> (a conjugated) of this rank's slices. BLAS's dot (torch's vdot): a plain loop's
/// floating-point reduction does not vectorize without reassociation and ran 5x slower.
std::complex<double> local_dot(const at::Tensor& a, const at::Tensor& b);

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE std::array<std::complex<double>, 2> cg_update(at::Tensor& x, at::Tensor& r, const at::Tensor& p,
                                                              const at::Tensor& q, double alpha, const at::Tensor& d,
                                                              at::Tensor& z) {
  if (uses_generic(x)) return generic_cg_update(x, r, p, q, alpha, d, z);
  std::array<std::complex<double>, 2> out{};
  dispatch_values(x.scalar_type(), [&](auto v0) {
    using V = decltype(v0);
    const auto n = x.numel();
    auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict rv = r.data_ptr<V>();
    const auto* __restrict pv = p.data_ptr<V>();
    const auto* __restrict qv = q.data_ptr<V>();
    const V a = static_cast<V>(alpha);
#if EINSHARD_KERNEL_LANES
    if constexpr (std::is_floating_point_v<V>) {
      const auto* dv = d.defined() ? d.data_ptr<V>() : nullptr;
      auto* zv = d.defined() ? z.data_ptr<V>() : nullptr;
      double sums[2];
      const bool avx2 = kernel_isa() == KernelIsa::avx2;
      const auto run = [&](auto diagonal) {
        constexpr bool D = decltype(diagonal)::value;
#if EINSHARD_KERNELS_X86
        if (avx2) return cg_update_avx2<D>(xv, rv, pv, qv, a, dv, zv, n, sums);
#endif
        cg_update_portable<D>(xv, rv, pv, qv, a, dv, zv, n, sums);
      };
      if (dv)
        run(std::true_type{});
      else
        run(std::false_type{});
      out = {std::complex<double>(sums[0], 0.0), std::complex<double>(sums[1], 0.0)};
      return;
    }
#endif
    using A = accumulator_t<V>;
    A rz{}, rr{};
    if (d.defined()) {
      const auto* __restrict dv = d.data_ptr<V>();
      auto* __restrict zv = z.data_ptr<V>();
      for (std::int64_t i = 0; i < n; ++i) {
        xv[i] += a * pv[i];
        const V ri = rv[i] - a * qv[i];
        rv[i] = ri;
        const V zi = dv[i] * ri;
        zv[i] = zi;
        rz += static_cast<A>(conj_if_complex(ri) * zi);
        rr += static_cast<A>(conj_if_complex(ri) * ri);
      }
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        xv[i] += a * pv[i];
        const V ri = rv[i] - a * qv[i];
        rv[i] = ri;
        rr += static_cast<A>(conj_if_complex(ri) * ri);
      }
      rz = rr;
    }
    out = {widen(rz), widen(rr)};
  });
  return out;
}

EINSHARD_INLINE std::array<std::complex<double>, 2> cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s,
                                                                at::Tensor& u, at::Tensor& w, double alpha, double beta,
                                                                const at::Tensor& d, bool identity) {
  const auto o = one_reduction_step<false>(x, r, u, w, p, s, nullptr, nullptr, nullptr, nullptr, alpha, beta, d,
                                           identity);
  return {o[0], o[1]};
}

EINSHARD_INLINE std::array<std::complex<double>, 3> pipecg_update(at::Tensor& x, at::Tensor& r, at::Tensor& u, at::Tensor& w,
                                                                  at::Tensor& z, at::Tensor& q, at::Tensor& s, at::Tensor& p,
                                                                  at::Tensor& m, const at::Tensor& n, double alpha, double beta,
                                                                  const at::Tensor& d, bool identity) {
  return one_reduction_step<true>(x, r, u, w, p, s, &z, &q, &m, &n, alpha, beta, d, identity);
}

EINSHARD_INLINE double axpby_norm(double a, const at::Tensor& x, double c, at::Tensor& y) {
  if (uses_generic(y)) return generic_axpby_norm(a, x, c, y);
  return vector_pass<1>(y.scalar_type(), y.numel(), [&](auto v0) {
           using V = decltype(v0);
           const auto* __restrict xp = x.data_ptr<V>();
           auto* __restrict yp = y.data_ptr<V>();
           const V av = static_cast<V>(a), cv = static_cast<V>(c);
           return [=](std::int64_t i, V* acc) {
             const V yi = av * xp[i] + cv * yp[i];
             yp[i] = yi;
             acc[0] += conj_if_complex(yi) * yi;
           };
         })[0]
      .real();
}

EINSHARD_INLINE std::complex<double> local_dot(const at::Tensor& a, const at::Tensor& b) {
  const auto d = at::vdot(a, b);
  if (!d.is_complex()) return {d.item<double>(), 0.0};
  const auto c = d.item<c10::complex<double>>();
  return {c.real(), c.imag()};
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse::detail
