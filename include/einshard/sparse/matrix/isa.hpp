#pragma once
/// @file
/// The instruction set of the hand-written CPU kernels (block products, Gram–Schmidt sweeps, the
/// single-vector CG steps): `avx2` (AVX2 + FMA) where the CPU has it and the compiler can target
/// it, else `portable` (the build's own flags: SSE2 on a generic x86-64 build). A header-only
/// library cannot ask its users for -mavx2, so each kernel is compiled twice from one body (a
/// `target("avx2,fma")` copy beside the portable one) and picks at run time; and GCC's vectors
/// (`Lanes`) carry the sums of a reduction in independent lanes, which a loop of scalar sums
/// cannot use without reassociating them.

#include <algorithm>
#include <type_traits>

namespace einshard::sparse::detail {

/// The kernels' instruction set (above).
enum class KernelIsa { portable, avx2 };

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define EINSHARD_KERNELS_X86 1
#else
#define EINSHARD_KERNELS_X86 0
#endif

/// Whether this CPU runs the `avx2` kernels (asked once).
inline bool avx2_kernels_available() {
#if EINSHARD_KERNELS_X86
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

/// Forces the portable kernels (tests run both paths on a CPU with AVX2, since CI machines without
/// it run only the portable one); process-wide, not thread-safe against a running kernel.
inline bool& force_portable_kernels() {
  static bool force = false;
  return force;
}

/// The instruction set the next kernel uses.
inline KernelIsa kernel_isa() {
  return avx2_kernels_available() && !force_portable_kernels() ? KernelIsa::avx2 : KernelIsa::portable;
}

#if defined(__GNUC__) || defined(__clang__)
#define EINSHARD_KERNEL_INLINE inline __attribute__((always_inline))
#define EINSHARD_KERNEL_NOINLINE __attribute__((noinline))
#define EINSHARD_KERNEL_LAMBDA_INLINE __attribute__((always_inline))  // after a lambda's parameters
#else
#define EINSHARD_KERNEL_INLINE inline
#define EINSHARD_KERNEL_NOINLINE
#define EINSHARD_KERNEL_LAMBDA_INLINE
#endif

#if defined(__GNUC__) || defined(__clang__)
/// W values of a real V as `count` vectors of the target's register width VB bytes (GCC/Clang
/// vector extensions; 16: SSE2 or NEON, 32: AVX2): an array of native vectors with constant
/// indices stays in registers. (One W-wide vector wider than a register is split through the
/// stack; W scalars in an array GCC's straight-line vectorizer packs into mixed widths.)
template <class V, int W, int VB, class = void>
struct Lanes {};  // no `Acc` for complex V: that overload of spmm_add drops out
template <class V, int W, int VB>
struct Lanes<V, W, VB, std::enable_if_t<std::is_floating_point_v<V>>> {
  static constexpr int width = std::min<int>(VB / static_cast<int>(sizeof(V)), W);
  static constexpr int count = W / width;
  typedef V vec __attribute__((vector_size(width * sizeof(V))));
  struct Acc {
    vec v[count];
  };
};
/// acc += v in double lanes: a vector of double added as it is, a vector of float widened in its
/// two halves (acc[0] the low, acc[1] the high), as a scalar loop widens each float product. By
/// reference and inlined: a vector argument of a function compiled without AVX changes its ABI.
template <class D, class V>
EINSHARD_KERNEL_INLINE void add_widened(D* acc, const V& v) {
  using E = std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>;
  if constexpr (std::is_same_v<E, double>) {
    acc[0] += v;
  } else {
    typedef E half __attribute__((vector_size(sizeof(V) / 2)));
    half lo, hi;
    __builtin_memcpy(&lo, &v, sizeof lo);
    __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    acc[0] += __builtin_convertvector(lo, D);
    acc[1] += __builtin_convertvector(hi, D);
  }
}
#define EINSHARD_KERNEL_LANES 1
#else
#define EINSHARD_KERNEL_LANES 0
#endif

}  // namespace einshard::sparse::detail
