#pragma once
/// @file
/// `Csr`: compressed sparse rows, the storage every sparse kernel of einshard runs on, and its
/// kernels (product, transposed product, row ranges for the interior/boundary split of a halo
/// SpMV). Indices are 32-bit when the column count fits: half the index bytes streamed per product.

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/diagonal_runs.hpp"
#include "einshard/sparse/matrix/isa.hpp"

namespace einshard::sparse {

/// A matrix (or a block of rows of one) in CSR: `rowptr` (int64, rows + 1), `col` (int32 when
/// `cols` fits, else int64), `values` (nnz). Rows are sorted by column, without duplicates.
struct Csr {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  at::Tensor rowptr;
  at::Tensor col;
  at::Tensor values;

  [[nodiscard]] std::int64_t nnz() const { return values.defined() ? values.numel() : 0; }
  [[nodiscard]] at::ScalarType dtype() const { return values.scalar_type(); }
};

namespace detail {

inline at::ScalarType index_type_for(std::int64_t cols) {
  return cols <= std::numeric_limits<std::int32_t>::max() ? at::kInt : at::kLong;
}

/// A 1-D CPU tensor that takes a vector's storage over instead of copying it.
template <class T>
at::Tensor to_tensor(std::vector<T>&& v) {
  auto* held = new std::vector<T>(std::move(v));
  return at::from_blob(held->data(), {static_cast<std::int64_t>(held->size())}, [held](void*) { delete held; },
                       at::TensorOptions(c10::CppTypeToScalarType<T>::value));
}

/// COO triples to CSR: sorted by (row, column), duplicates summed (assembly adds the element
/// contributions of shared nodes). `row` in [0, rows), `col` in [0, cols) — checked.
Csr coo_to_csr(const at::Tensor& values, const at::Tensor& row, const at::Tensor& col,
               std::int64_t rows, std::int64_t cols);
/// coo_to_csr's range check of the indices (the same Error on every path).
void check_coo_bounds(std::int64_t rmin, std::int64_t rmax, std::int64_t cmin, std::int64_t cmax, std::int64_t rows,
                      std::int64_t cols);
/// coo_to_csr of int64 indices on the host: a counting pass by row and a sort of each row's columns
/// instead of one sort of every (row, col) key; entries already in CSR order (a product's rows,
/// most generators) pass through as they are.
Csr coo_to_csr_host(const at::Tensor& values, const at::Tensor& r, const at::Tensor& c, std::int64_t rows,
                    std::int64_t cols);

/// `a` with 32-bit row pointers when its entry count fits (4 bytes less per row for every product:
/// about 5 % of a 5-point matrix's traffic). Only the `dispatch_view` kernels accept such a Csr.
inline Csr compact_rowptr(Csr a) {
  if (a.nnz() <= std::numeric_limits<std::int32_t>::max()) a.rowptr = a.rowptr.to(at::kInt);
  return a;
}

/// Sorts one row's entries in place: rows are short (insertion sort), long ones std::sort.
template <class It, class Less = std::less<>>
void sort_row(It first, It last, Less less = {}) {
  if (last - first > 32) {
    std::sort(first, last, less);
    return;
  }
  for (auto p = first + 1; p < last; ++p)
    for (auto q = p; q > first && less(q[0], q[-1]); --q) std::iter_swap(q, q - 1);
}

/// CSR back to COO (row, col as int64; values shared).
std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_to_coo(const Csr& a);

template <class F>
void dispatch_csr(const Csr& a, F&& f) {
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(a.dtype(), "einshard::sparse", [&] {
    using value_t = scalar_t;
    if (a.col.scalar_type() == at::kInt)
      f(value_t{}, std::int32_t{});
    else
      f(value_t{}, std::int64_t{});
  });
}

/// Typed raw pointers of a Csr, for kernels: `dispatch_view(a, [&](auto m) { ... m.rp, m.ci,
/// m.av ... })`, with `typename decltype(m)::value_type` the value type. The row pointers may be
/// 32-bit (`compact_rowptr`) in the blocks of the distributed product's hot loop.
template <class V, class I, class P = std::int64_t>
struct CsrView {
  using value_type = V;
  std::int64_t rows;
  const P* __restrict rp;
  const I* __restrict ci;
  const V* __restrict av;
};

/// Row i of the matrix times x (values widened to x's type: see dispatch_vector). Rows of up to
/// seven entries (5- and 7-point stencils, 2-D linear elements) are unrolled by
/// their length: a loop over five entries spends as many instructions on its own counting as on
/// the entries, and the loads of a short row, not memory, bound a single product from cache.
/// Longer rows (3-D and quadratic elements, systems: 14-80 entries) sum their even and odd
/// entries apart: one running sum waits an addition's latency per entry (the elasticity and 3-D
/// convection matrices' products 10-15 % faster on one core).
template <class View, class V>
EINSHARD_KERNEL_INLINE V row_times(const View& m, std::int64_t i, const V* __restrict x) {
  const auto begin = static_cast<std::int64_t>(m.rp[i]);
  const auto len = static_cast<std::int64_t>(m.rp[i + 1]) - begin;
  const auto* __restrict a = m.av + begin;
  const auto* __restrict c = m.ci + begin;
  // Each case a straight sum with constant offsets (a function or lambda per term is not always
  // inlined into the large dispatching functions that call this, and then costs a call per entry).
#define EINSHARD_ROW_TERM(k) static_cast<V>(a[k]) * x[c[k]]
  switch (len) {
    case 0: return V{};
    case 1: return EINSHARD_ROW_TERM(0);
    case 2: return EINSHARD_ROW_TERM(0) + EINSHARD_ROW_TERM(1);
    case 3: return EINSHARD_ROW_TERM(0) + EINSHARD_ROW_TERM(1) + EINSHARD_ROW_TERM(2);
    case 4: return EINSHARD_ROW_TERM(0) + EINSHARD_ROW_TERM(1) + EINSHARD_ROW_TERM(2) + EINSHARD_ROW_TERM(3);
    case 5:
      return EINSHARD_ROW_TERM(0) + EINSHARD_ROW_TERM(1) + EINSHARD_ROW_TERM(2) + EINSHARD_ROW_TERM(3) +
             EINSHARD_ROW_TERM(4);
    case 6:
      return EINSHARD_ROW_TERM(0) + EINSHARD_ROW_TERM(1) + EINSHARD_ROW_TERM(2) + EINSHARD_ROW_TERM(3) +
             EINSHARD_ROW_TERM(4) + EINSHARD_ROW_TERM(5);
    case 7:
      return EINSHARD_ROW_TERM(0) + EINSHARD_ROW_TERM(1) + EINSHARD_ROW_TERM(2) + EINSHARD_ROW_TERM(3) +
             EINSHARD_ROW_TERM(4) + EINSHARD_ROW_TERM(5) + EINSHARD_ROW_TERM(6);
    default: {
      V s0{}, s1{};
      std::int64_t k = 0;
      for (; k + 2 <= len; k += 2) {
        s0 += EINSHARD_ROW_TERM(k);
        s1 += EINSHARD_ROW_TERM(k + 1);
      }
      if (k < len) s0 += EINSHARD_ROW_TERM(k);
      return s0 + s1;
    }
  }
#undef EINSHARD_ROW_TERM
}

template <class F>
void dispatch_view(const Csr& a, F&& f) {
  dispatch_csr(a, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    if (a.rowptr.scalar_type() == at::kInt)
      f(CsrView<V, I, std::int32_t>{a.rows, a.rowptr.data_ptr<std::int32_t>(), a.col.data_ptr<I>(), a.values.data_ptr<V>()});
    else
      f(CsrView<V, I>{a.rows, a.rowptr.data_ptr<std::int64_t>(), a.col.data_ptr<I>(), a.values.data_ptr<V>()});
  });
}

/// f(view) of a float32 or float64 Csr on the host, int64 row pointers, its columns and values in
/// their own widths: the passes of a multigrid setup over a matrix's rows read it as stored, with
/// no widened copy of the matrix's size. Other dtypes are an Error.
template <class F>
void dispatch_real_view(const Csr& a, F&& f) {
  const auto rp = a.rowptr.to(at::kCPU, at::kLong).contiguous();
  const auto with_values = [&](auto v0) {
    using V = decltype(v0);
    const auto* av = a.values.data_ptr<V>();
    if (a.col.scalar_type() == at::kInt)
      f(CsrView<V, std::int32_t>{a.rows, rp.data_ptr<std::int64_t>(), a.col.data_ptr<std::int32_t>(), av});
    else
      f(CsrView<V, std::int64_t>{a.rows, rp.data_ptr<std::int64_t>(), a.col.data_ptr<std::int64_t>(), av});
  };
  if (!a.values.device().is_cpu()) throw Error("dispatch_real_view: expected a matrix on the host");
  if (a.values.scalar_type() == at::kFloat)
    with_values(float{});
  else if (a.values.scalar_type() == at::kDouble)
    with_values(double{});
  else
    throw Error(std::string("dispatch_real_view: expected float32 or float64 values, found ") +
                c10::toString(a.values.scalar_type()));
}

/// f(X{}) with X the element type of the vectors a matrix of values V multiplies: V, or V's double-
/// precision type when `x` holds it. The second is the float32 copy of a float64 matrix applied to
/// float64 vectors (`Precision::single_values`): each stored entry streams 4 bytes of value instead
/// of 8 while the vectors and every sum stay in float64.
template <class V, class F>
void dispatch_vector(const at::Tensor& x, F&& f) {
  if constexpr (std::is_same_v<V, float>) {
    if (x.scalar_type() == at::kDouble) return f(double{});
  } else if constexpr (std::is_same_v<V, c10::complex<float>>) {
    if (x.scalar_type() == at::kComplexDouble) return f(c10::complex<double>{});
  }
  f(V{});
}

/// y[i] = alpha * sum_j A[i, j] x[j] + beta * y[i] for rows i in [begin, end). `y` may be a row
/// block of the result, indexed from `begin`. beta == 0 overwrites (NaN in y does not leak).
void spmv_rows(const Csr& a, const at::Tensor& x, at::Tensor& y, std::int64_t begin,
               std::int64_t end, double alpha = 1.0, double beta = 0.0);

/// y = A x for all rows (y allocated when undefined).
at::Tensor spmv(const Csr& a, const at::Tensor& x);

template <class V>
std::complex<double> widen(const V& v) {
  if constexpr (c10::is_complex<V>::value)
    return {static_cast<double>(v.real()), static_cast<double>(v.imag())};
  else
    return {static_cast<double>(v), 0.0};
}
/// The accumulator of a sum over a rank's rows of values V: double precision for single-precision
/// values too, since a float32 running sum over 10⁵ rows keeps three or four digits, too few for a
/// Krylov method's scalars. The loops it serves do not vectorize their sum either way.
template <class V>
using accumulator_t = std::conditional_t<c10::is_complex<V>::value, c10::complex<double>, double>;

template <class V>
EINSHARD_KERNEL_INLINE V conj_if_complex(const V& v) {
  if constexpr (c10::is_complex<V>::value)
    return std::conj(v);
  else
    return v;
}

/// y = A x over all rows, fused with the partial inner product <w, y> (w conjugated) when `w` is
/// defined: a Krylov method gets the product and its dot in one pass over y.
std::complex<double> spmv_dot(const Csr& a, const at::Tensor& x, at::Tensor& y,
                              const at::Tensor& w);

/// The rows of a rank's local CSR `a` (columns [0, owned) its own, then the ghost slots) that store
/// a ghost column: those whose last stored column is >= owned, since each row is sorted (and so
/// holds its owned columns first, then its ghosts). A halo product computes every other row while
/// the exchange runs, then these; O(rows), reading one column per row.
at::Tensor boundary_rows(const Csr& a, std::int64_t owned);

/// f(begin, end) for each run of rows of [0, rows) between the ascending rows b[0..nb) (the
/// interior rows of a halo product, in order).
template <class F>
inline void interior_runs(std::int64_t rows, const std::int64_t* b, std::int64_t nb, F&& f) {
  std::int64_t begin = 0;
  for (std::int64_t k = 0; k < nb; begin = b[k++] + 1)
    if (b[k] > begin) f(begin, b[k]);
  if (rows > begin) f(begin, rows);
}

/// The positions k in `boundary` whose row stores an owned column too (starts[k] past the row's
/// first entry).
at::Tensor mixed_rows(const Csr& a, const at::Tensor& boundary, const at::Tensor& starts);

/// f(k, begin, end) for each run of consecutive rows [begin, end) among the ascending rows
/// b[0..nb), k the position of `begin` in b: the boundary rows of a product then need no b[k]
/// per row (with short rows that load costs as much as the row).
template <class F>
inline void consecutive_runs(const std::int64_t* b, std::int64_t nb, F&& f) {
  for (std::int64_t k = 0; k < nb;) {
    auto end = k + 1;
    while (end < nb && b[end] == b[end - 1] + 1) ++end;
    f(k, b[k], b[k] + (end - k));
    k = end;
  }
}

/// First entry of row i at or past `owned` (a boundary row's first ghost column).
template <class View>
inline std::int64_t first_ghost(const View& m, std::int64_t i, std::int64_t owned) {
  auto e = static_cast<std::int64_t>(m.rp[i]);
  const auto end = static_cast<std::int64_t>(m.rp[i + 1]);
  while (e < end && static_cast<std::int64_t>(m.ci[e]) < owned) ++e;
  return e;
}

/// first_ghost of each row of `boundary`, found once at assembly: the single-vector halo products
/// split each boundary row there without scanning its columns again (their rows are short, so
/// the scan costs as much as the row).
at::Tensor ghost_starts(const Csr& a, const at::Tensor& boundary, std::int64_t owned);

/// put(acc, i, (A x)[i]) for the rows [begin, end), taken in pairs with the even row's term on
/// acc0 and the odd one's on acc1: one running sum would cost an addition's latency per row. A
/// function of its own: inlined into spmv_halo's dispatching lambdas, its loop ran 1.3x slower
/// (GCC 12).
template <class View, class V, class A, class Put>
EINSHARD_KERNEL_NOINLINE void rows_in_pairs(const View& m, std::int64_t begin, std::int64_t end, const V* __restrict x,
                                            A& acc0, A& acc1, const Put& put) {
  A s0 = acc0, s1 = acc1;
  std::int64_t i = begin;
  for (; i + 2 <= end; i += 2) {
    const V y0 = row_times(m, i, x), y1 = row_times(m, i + 1, x);
    put(s0, i, y0);
    put(s1, i + 1, y1);
  }
  if (i < end) put(s0, i, row_times(m, i, x));
  acc0 = s0;
  acc1 = s1;
}

/// One half of y = A [x; g], a halo product on the whole local CSR (no separate diagonal and
/// off-diagonal copies: the blocks are the owned and ghost columns of each row). `boundary_phase`
/// false: the rows not in `boundary` (they read x only; run it while the exchange brings g);
/// true: the `boundary` rows, their owned columns from x and ghost column owned + j from g[j]
/// (`starts`: each boundary row's first ghost entry, ghost_starts).
/// Returns the partial <w, y> over these rows (w conjugated) when `w` is defined. With `update`:
/// y = A [x; g] + *update * y instead (y's old values read), returning the partial ‖y‖² (w unused).
/// `runs` (active: float32 or float64 values on the CPU): interior rows taken by diagonals
/// (diagonal_runs.hpp), except with `update`.
std::complex<double> spmv_halo(const Csr& a, const at::Tensor& boundary, const at::Tensor& starts,
                               std::int64_t owned, const at::Tensor& x, const at::Tensor& g, at::Tensor& y,
                               const at::Tensor& w, bool boundary_phase, const double* update = nullptr,
                               const DiagonalRuns* runs = nullptr);

/// The transpose of spmv_halo's product, in the same two halves: `ghost_phase` true: g[j] +=
/// A[i, owned + j] y[i] over the boundary rows (what goes back to the ghosts' owners: run it
/// first; g is zeroed here); false: x = the owned columns' part of Aᵀ y over all rows (x is
/// zeroed here). Aᴴ when `conjugate`. `starts` as spmv_halo's; `mixed`: the positions in
/// `boundary` of the rows that also store owned columns (mixed_rows), the only boundary rows the
/// owned half visits: where most rows are all ghosts (a rectangular matrix whose row and column
/// partitions do not line up), walking the others would cost as much as the product (PETSc skips
/// them by its compressed rows).
void spmv_transpose_halo(const Csr& a, const at::Tensor& boundary, const at::Tensor& starts,
                         const at::Tensor& mixed, std::int64_t owned, const at::Tensor& y, at::Tensor& x,
                         at::Tensor& g, bool ghost_phase, bool conjugate = false);

/// x += A^T y (A^H y when `conjugate`) over rows [begin, end): scatter each row into the columns.
void spmv_transpose_add(const Csr& a, const at::Tensor& y, at::Tensor& x,
                        std::int64_t begin, std::int64_t end, bool conjugate = false);

/// x = A^T y (A^H y when `conjugate`).
at::Tensor spmv_transpose(const Csr& a, const at::Tensor& y, bool conjugate = false);

/// The diagonal (duplicates were summed at assembly); zero where a row stores none.
at::Tensor diagonal(const Csr& a, std::int64_t col_offset = 0);

/// The transpose as a CSR.
Csr transpose(const Csr& a);

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE void spmv_rows(const Csr& a, const at::Tensor& x, at::Tensor& y, std::int64_t begin,
                               std::int64_t end, double alpha, double beta) {
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict yv = y.data_ptr<V>();
    const V al = static_cast<V>(alpha), be = static_cast<V>(beta);
    const bool plain = alpha == 1.0 && beta == 0.0;
    for (std::int64_t i = begin; i < end; ++i) {
      const V s = row_times(m, i, xv);
      yv[i] = plain ? s : (beta == 0.0 ? al * s : al * s + be * yv[i]);
    }
  });
}

EINSHARD_INLINE at::Tensor spmv(const Csr& a, const at::Tensor& x) {
  if (x.dim() != 1 || x.numel() != a.cols)
    throw Error("matvec: expected a vector of length " + std::to_string(a.cols) +
                ", found shape " + std::string(c10::str(x.sizes())));
  const auto xc = x.to(a.dtype()).contiguous();
  auto y = at::empty({a.rows}, a.values.options());
  spmv_rows(a, xc, y, 0, a.rows);
  return y;
}

EINSHARD_INLINE std::complex<double> spmv_dot(const Csr& a, const at::Tensor& x, at::Tensor& y,
                                              const at::Tensor& w) {
  std::complex<double> dot{};
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* __restrict xv = x.data_ptr<V>();
    auto* __restrict yv = y.data_ptr<V>();
    if (!w.defined()) {
      for (std::int64_t i = 0; i < a.rows; ++i) {
        V s{};
        for (std::int64_t k = m.rp[i]; k < m.rp[i + 1]; ++k) s += m.av[k] * xv[m.ci[k]];
        yv[i] = s;
      }
      return;
    }
    const auto* __restrict wv = w.data_ptr<V>();
    accumulator_t<V> acc{};
    for (std::int64_t i = 0; i < a.rows; ++i) {
      const V s = row_times(m, i, xv);
      yv[i] = s;
      acc += static_cast<accumulator_t<V>>(conj_if_complex(wv[i]) * s);
    }
    dot = widen(acc);
  });
  return dot;
}

EINSHARD_INLINE at::Tensor boundary_rows(const Csr& a, std::int64_t owned) {
  std::vector<std::int64_t> out;
  if (a.cols <= owned) return at::empty({0}, at::kLong);  // no ghost slots (one rank)
  const auto rowptr = a.rowptr.to(at::kLong).contiguous();
  const auto* rp = rowptr.data_ptr<std::int64_t>();
  dispatch_csr(a, [&](auto, auto i0) {
    using I = decltype(i0);
    const auto* ci = a.col.data_ptr<I>();
    for (std::int64_t i = 0; i < a.rows; ++i)
      if (rp[i + 1] > rp[i] && static_cast<std::int64_t>(ci[rp[i + 1] - 1]) >= owned) out.push_back(i);
  });
  return at::tensor(out, at::kLong).view({static_cast<std::int64_t>(out.size())});
}

EINSHARD_INLINE at::Tensor mixed_rows(const Csr& a, const at::Tensor& boundary, const at::Tensor& starts) {
  const auto rowptr = a.rowptr.to(at::kLong).contiguous();
  const auto first = rowptr.index_select(0, boundary);
  return (starts > first).nonzero().flatten().contiguous();
}

EINSHARD_INLINE at::Tensor ghost_starts(const Csr& a, const at::Tensor& boundary, std::int64_t owned) {
  auto out = at::empty({boundary.numel()}, at::kLong);
  auto* o = out.data_ptr<std::int64_t>();
  const auto* b = boundary.data_ptr<std::int64_t>();
  dispatch_view(a, [&](auto m) {
    for (std::int64_t k = 0; k < boundary.numel(); ++k) o[k] = first_ghost(m, b[k], owned);
  });
  return out;
}

EINSHARD_INLINE std::complex<double> spmv_halo(const Csr& a, const at::Tensor& boundary, const at::Tensor& starts,
                                               std::int64_t owned, const at::Tensor& x, const at::Tensor& g, at::Tensor& y,
                                               const at::Tensor& w, bool boundary_phase, const double* update,
                                               const DiagonalRuns* runs) {
  std::complex<double> dot{};
  dispatch_view(a, [&](auto m) {
    dispatch_vector<typename decltype(m)::value_type>(x, [&](auto x0) {
      using V = decltype(x0);
      const auto* __restrict xv = x.data_ptr<V>();
      auto* __restrict yv = y.data_ptr<V>();
      const V* wv = w.defined() && !update ? w.data_ptr<V>() : nullptr;
      const V keep = update ? static_cast<V>(*update) : V{};
      const auto* b = boundary.data_ptr<std::int64_t>();
      const auto nb = boundary.numel();
      using A = accumulator_t<V>;
      A acc0{}, acc1{};  // even and odd rows' terms of the returned sum (rows_in_pairs)
      // Row i's result: stored, and its term of the returned sum `acc`; one of the three forms,
      // chosen once per call.
      const auto store = [yv](A&, std::int64_t i, V s) { yv[i] = s; };
      const auto dotted = [yv, wv](A& acc, std::int64_t i, V s) {
        acc += static_cast<A>(conj_if_complex(wv[i]) * s);
        yv[i] = s;
      };
      const auto updated = [yv, keep](A& acc, std::int64_t i, V s) {
        s += keep * yv[i];
        acc += static_cast<A>(conj_if_complex(s) * s);
        yv[i] = s;
      };
      const auto put = [&](A& acc, std::int64_t i, V s) {
        if (update)
          updated(acc, i, s);
        else if (wv)
          dotted(acc, i, s);
        else
          store(acc, i, s);
      };
      if (!boundary_phase) {
        const auto csr_rows = [&](std::int64_t begin, std::int64_t end) {
          if (update) return rows_in_pairs(m, begin, end, xv, acc0, acc1, updated);
          if (wv) return rows_in_pairs(m, begin, end, xv, acc0, acc1, dotted);
          rows_in_pairs(m, begin, end, xv, acc0, acc1, store);
        };
        std::size_t next = 0;  // the first run not yet taken (runs lie inside interior stretches, ascending)
        interior_runs(a.rows, b, nb, [&](std::int64_t begin, std::int64_t end) {
          if constexpr (std::is_floating_point_v<V>) {
            if (runs != nullptr && runs->active() && update == nullptr) {
              const auto* values = runs->values.data_ptr<std::remove_cv_t<std::remove_reference_t<decltype(*m.av)>>>();
              for (; next < runs->runs.size() && runs->runs[next].begin < end; ++next) {
                const auto& r = runs->runs[next];
                if (r.begin > begin) csr_rows(begin, r.begin);
                acc0 += diagonal_run_product(*runs, r, values, xv, yv, wv);
                begin = r.end;
              }
            }
          }
          if (end > begin) csr_rows(begin, end);
        });
      } else {
        const V* __restrict gv = nb > 0 ? g.data_ptr<V>() : nullptr;  // ghost column owned + j is g[j]
        consecutive_runs(b, nb, [&](std::int64_t k, std::int64_t begin, std::int64_t end) {
          const auto* st = starts.data_ptr<std::int64_t>() + k - begin;  // st[i]: row i's first ghost entry
          for (std::int64_t i = begin; i < end; ++i) {
            const auto split = st[i];
            V s{};
            for (std::int64_t e = m.rp[i]; e < split; ++e) s += static_cast<V>(m.av[e]) * xv[m.ci[e]];
            for (std::int64_t e = split; e < m.rp[i + 1]; ++e)
              s += static_cast<V>(m.av[e]) * gv[static_cast<std::int64_t>(m.ci[e]) - owned];
            put(acc0, i, s);
          }
        });
      }
      dot = widen(acc0 + acc1);
    });
  });
  return dot;
}

EINSHARD_INLINE void spmv_transpose_halo(const Csr& a, const at::Tensor& boundary, const at::Tensor& starts,
                                         const at::Tensor& mixed, std::int64_t owned, const at::Tensor& y, at::Tensor& x,
                                         at::Tensor& g, bool ghost_phase, bool conjugate) {
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* __restrict yv = y.data_ptr<V>();
    const auto* b = boundary.data_ptr<std::int64_t>();
    const auto* st = starts.data_ptr<std::int64_t>();
    const auto nb = boundary.numel();
    const auto entry = [&](std::int64_t e) { return conjugate ? conj_if_complex(m.av[e]) : m.av[e]; };
    if (ghost_phase) {
      if (nb == 0) return;
      auto* __restrict gv = g.data_ptr<V>();
      std::fill(gv, gv + g.numel(), V{});
      consecutive_runs(b, nb, [&](std::int64_t k, std::int64_t begin, std::int64_t end) {
        const auto* s = st + k - begin;
        for (std::int64_t i = begin; i < end; ++i) {
          const V yi = yv[i];
          for (auto e = s[i]; e < m.rp[i + 1]; ++e) gv[static_cast<std::int64_t>(m.ci[e]) - owned] += entry(e) * yi;
        }
      });
      return;
    }
    auto* __restrict xv = x.data_ptr<V>();
    std::fill(xv, xv + x.numel(), V{});
    interior_runs(a.rows, b, nb, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const V yi = yv[i];
        for (std::int64_t e = m.rp[i]; e < m.rp[i + 1]; ++e) xv[m.ci[e]] += entry(e) * yi;
      }
    });
    const auto* mk = mixed.data_ptr<std::int64_t>();
    for (std::int64_t j = 0; j < mixed.numel(); ++j) {
      const auto k = mk[j], i = b[k];
      const V yi = yv[i];
      for (std::int64_t e = m.rp[i]; e < st[k]; ++e) xv[m.ci[e]] += entry(e) * yi;
    }
  });
}

EINSHARD_INLINE void spmv_transpose_add(const Csr& a, const at::Tensor& y, at::Tensor& x,
                                        std::int64_t begin, std::int64_t end, bool conjugate) {
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* yv = y.data_ptr<V>();
    auto* xv = x.data_ptr<V>();
    for (std::int64_t i = begin; i < end; ++i) {
      const V yi = yv[i];
      for (std::int64_t k = m.rp[i]; k < m.rp[i + 1]; ++k) {
        xv[m.ci[k]] += (conjugate ? conj_if_complex(m.av[k]) : m.av[k]) * yi;
      }
    }
  });
}

EINSHARD_INLINE at::Tensor spmv_transpose(const Csr& a, const at::Tensor& y, bool conjugate) {
  if (y.dim() != 1 || y.numel() != a.rows)
    throw Error("rmatvec: expected a vector of length " + std::to_string(a.rows) +
                ", found shape " + std::string(c10::str(y.sizes())));
  const auto yc = y.to(a.dtype()).contiguous();
  auto x = at::zeros({a.cols}, a.values.options());
  spmv_transpose_add(a, yc, x, 0, a.rows, conjugate);
  return x;
}

EINSHARD_INLINE at::Tensor diagonal(const Csr& a, std::int64_t col_offset) {
  auto d = at::zeros({a.rows}, a.values.options());
  dispatch_view(a, [&](auto m) {
    using V = typename decltype(m)::value_type;
    auto* dv = d.data_ptr<V>();
    for (std::int64_t i = 0; i < a.rows; ++i)
      for (std::int64_t k = m.rp[i]; k < m.rp[i + 1]; ++k)
        if (static_cast<std::int64_t>(m.ci[k]) == i + col_offset) dv[i] += m.av[k];
  });
  return d;
}

EINSHARD_INLINE Csr transpose(const Csr& a) {
  const auto [values, row, col] = csr_to_coo(a);
  return coo_to_csr(values, col, row, a.cols, a.rows);
}

EINSHARD_INLINE Csr coo_to_csr(const at::Tensor& values, const at::Tensor& row, const at::Tensor& col,
                               std::int64_t rows, std::int64_t cols) {
  if (values.dim() != 1 || row.dim() != 1 || col.dim() != 1 || values.numel() != row.numel() ||
      values.numel() != col.numel())
    throw Error("SparseTensor: expected 1-D values, row and col of one length, found lengths " +
                std::to_string(values.numel()) + ", " + std::to_string(row.numel()) + " and " +
                std::to_string(col.numel()));
  auto r = row.to(at::kLong).contiguous();
  auto c = col.to(at::kLong).contiguous();
  if (r.device().is_cpu() && c.device().is_cpu()) return coo_to_csr_host(values, r, c, rows, cols);
  if (r.numel() > 0) {
    const auto rmin = r.min().item<std::int64_t>(), rmax = r.max().item<std::int64_t>();
    const auto cmin = c.min().item<std::int64_t>(), cmax = c.max().item<std::int64_t>();
    check_coo_bounds(rmin, rmax, cmin, cmax, rows, cols);
  }
  // One sort on the linear key orders by (row, col); unique_consecutive finds the duplicates.
  const auto key = r * cols + c;
  const auto [sorted, perm] = key.sort();
  const auto [ukey, inverse, counts] = at::unique_consecutive(sorted, /*return_inverse=*/true);
  auto v = at::zeros({ukey.numel()}, values.options());
  v.index_add_(0, inverse, values.index_select(0, perm));
  const auto urow = at::div(ukey, cols, "floor");
  Csr out;
  out.rows = rows;
  out.cols = cols;
  out.col = (ukey - urow * cols).to(index_type_for(cols));
  out.values = v;
  out.rowptr = at::zeros({rows + 1}, r.options());
  if (rows > 0) out.rowptr.slice(0, 1).copy_(at::bincount(urow, {}, rows).cumsum(0));
  return out;
}

EINSHARD_INLINE void check_coo_bounds(std::int64_t rmin, std::int64_t rmax, std::int64_t cmin, std::int64_t cmax,
                                      std::int64_t rows, std::int64_t cols) {
  if (rmin < 0 || rmax >= rows)
    throw Error("SparseTensor: expected row indices in [0, " + std::to_string(rows) + "), found " +
                std::to_string(rmin < 0 ? rmin : rmax));
  if (cmin < 0 || cmax >= cols)
    throw Error("SparseTensor: expected column indices in [0, " + std::to_string(cols) + "), found " +
                std::to_string(cmin < 0 ? cmin : cmax));
}

EINSHARD_INLINE Csr coo_to_csr_host(const at::Tensor& values, const at::Tensor& r, const at::Tensor& c,
                                    std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = r.numel();
  const auto* ri = r.data_ptr<std::int64_t>();
  const auto* ci = c.data_ptr<std::int64_t>();
  std::int64_t rmin = std::numeric_limits<std::int64_t>::max(), rmax = std::numeric_limits<std::int64_t>::min();
  std::int64_t cmin = rmin, cmax = rmax;
  bool in_order = true;       // (row, col) strictly increasing: CSR order already, no duplicates
  bool rows_in_order = true;  // rows nondecreasing: already grouped by row
  for (std::int64_t k = 0; k < n; ++k) {
    rmin = std::min(rmin, ri[k]), rmax = std::max(rmax, ri[k]);
    cmin = std::min(cmin, ci[k]), cmax = std::max(cmax, ci[k]);
    if (k == 0) continue;
    rows_in_order = rows_in_order && ri[k] >= ri[k - 1];
    in_order = in_order && (ri[k] > ri[k - 1] || (ri[k] == ri[k - 1] && ci[k] > ci[k - 1]));
  }
  if (n > 0) check_coo_bounds(rmin, rmax, cmin, cmax, rows, cols);
  Csr out;
  out.rows = rows;
  out.cols = cols;
  out.rowptr = at::zeros({rows + 1}, at::kLong);
  auto* rp = out.rowptr.data_ptr<std::int64_t>();
  if (in_order) {
    for (std::int64_t k = 0; k < n; ++k) ++rp[ri[k] + 1];
    for (std::int64_t i = 0; i < rows; ++i) rp[i + 1] += rp[i];
    out.col = c.to(index_type_for(cols));
    out.values = values.clone(at::MemoryFormat::Contiguous);
    return out;
  }
  // Each entry to its row (a counting pass, stable; none when the rows are in order already, as a
  // product's are), each row's entries ordered by column (rows are short: insertion sort; long
  // ones std::sort), then equal columns summed into one entry.
  std::vector<std::int64_t> start(static_cast<std::size_t>(rows) + 1, 0);
  for (std::int64_t k = 0; k < n; ++k) ++start[static_cast<std::size_t>(ri[k]) + 1];
  for (std::int64_t i = 0; i < rows; ++i) start[i + 1] += start[i];
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  if (rows_in_order) {
    for (std::int64_t k = 0; k < n; ++k) perm[static_cast<std::size_t>(k)] = k;
  } else {
    std::vector<std::int64_t> next(start.begin(), start.end() - 1);
    for (std::int64_t k = 0; k < n; ++k) perm[static_cast<std::size_t>(next[ri[k]]++)] = k;
  }
  auto* pm = perm.data();
  const auto by_column = [ci](std::int64_t a, std::int64_t b) { return ci[a] < ci[b] || (ci[a] == ci[b] && a < b); };
  std::vector<std::int64_t> inverse(static_cast<std::size_t>(n));
  auto ucol = at::empty({n}, at::kLong);
  auto* uc = ucol.data_ptr<std::int64_t>();
  std::int64_t u = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    std::int64_t* first = pm + start[i];
    std::int64_t* last = pm + start[i + 1];
    sort_row(first, last, by_column);
    for (std::int64_t* p = first; p < last; ++p) {
      if (p == first || ci[*p] != ci[p[-1]]) {
        uc[u++] = ci[*p];
        ++rp[i + 1];
      }
      inverse[static_cast<std::size_t>(p - pm)] = u - 1;
    }
  }
  for (std::int64_t i = 0; i < rows; ++i) rp[i + 1] += rp[i];
  out.col = ucol.narrow(0, 0, u).to(index_type_for(cols), /*non_blocking=*/false, /*copy=*/u < n);
  if (values.requires_grad() || !values.device().is_cpu()) {  // gradients flow through index_add_
    // The tensors own the indices: autograd keeps them for the backward pass.
    const auto device = values.device();
    out.values = at::zeros({u}, values.options());
    out.values.index_add_(0, to_tensor(std::move(inverse)).to(device),
                          values.index_select(0, to_tensor(std::move(perm)).to(device)));
    return out;
  }
  const auto v = values.contiguous();
  out.values = at::zeros({u}, v.options());
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(at::kHalf, at::kBFloat16, v.scalar_type(), "coo_to_csr", [&] {
    const auto* in = v.data_ptr<scalar_t>();
    auto* sum = out.values.data_ptr<scalar_t>();
    for (std::int64_t p = 0; p < n; ++p) sum[inverse[static_cast<std::size_t>(p)]] += in[pm[p]];
  });
  return out;
}

EINSHARD_INLINE std::tuple<at::Tensor, at::Tensor, at::Tensor> csr_to_coo(const Csr& a) {
  const auto counts = a.rowptr.slice(0, 1) - a.rowptr.slice(0, 0, a.rows);
  const auto row = at::repeat_interleave(at::arange(a.rows, counts.options()), counts, {}, a.nnz());
  return {a.values, row, a.col.to(at::kLong)};
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace detail
}  // namespace einshard::sparse
