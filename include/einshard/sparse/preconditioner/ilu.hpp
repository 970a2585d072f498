#pragma once
/// @file
/// Incomplete factorisations without fill on a square CSR block, and their triangular solves:
/// ILU(0) (A ≈ L U, L unit lower, U upper, both with the pattern of A) and IC(0) (A ≈ L Lᵀ, L with
/// the lower pattern of A). The block-Jacobi preconditioner (block_jacobi.hpp) runs them on each
/// rank's owned×owned block. Memory and work are O(nnz of the block) plus one O(n) work row:
/// no dense block is ever formed. SSOR is stored as the same kind of factor (ssor_factor), so its
/// two sweeps are incomplete_solve's.

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/isa.hpp"

namespace einshard::sparse::detail {

/// An incomplete factor as its two triangular sweeps read it: the strictly lower entries in one
/// CSR, the strictly upper ones in another with the last row first, and the inverted pivots. Each
/// sweep then streams only its own triangle, forward through memory, as PETSc's AIJ factors do:
/// over one CSR in A's pattern each sweep pulls the other triangle's entries in with its cache
/// lines (1.2x the time of a whole apply on a 3-D finite-element matrix of 14 entries per row).
/// ILU(0): `lower` holds L (its unit diagonal implied), `upper` U off
/// its diagonal. IC(0): `lower` holds L off its diagonal, `upper` nothing. Row pointers are 32-bit
/// where the entry count fits.
struct IncompleteFactor {
  Csr lower;
  Csr upper;            ///< row t holds row n − 1 − t
  at::Tensor inv_diag;  ///< 1 / the pivots (ILU: U's diagonal; IC: L's diagonal)
  bool cholesky = false;
};

/// The factor's layout for the leading square block of `a` (its first `a.rows` columns: the
/// columns after them, a rank's ghost columns, are left out), with its values still to be
/// written: row i's entries left of column i go to `lower` and, unless `cholesky`, those right of
/// it to `upper`. Columns are sorted within rows, so each row splits at two positions, found by
/// one scan of its columns: `diag[i]`, its first entry in a column ≥ i (the diagonal when the row
/// stores one), and `end[i]`, its first in a column ≥ `a.rows`. The factorisations write the
/// values straight into this layout: no copy of A's values, no second copy into the sweeps' one.
struct SplitRows {
  IncompleteFactor f;
  std::vector<std::int64_t> diag, end;
};

template <class I>
SplitRows split_rows(const Csr& a, const std::int64_t* rp, bool cholesky) {
  const auto n = a.rows;
  const auto* ci = a.col.data_ptr<I>();
  const auto at_or_after = [&](std::int64_t k, std::int64_t i, std::int64_t column) {
    while (k < rp[i + 1] && static_cast<std::int64_t>(ci[k]) < column) ++k;
    return k;
  };
  SplitRows s;
  s.diag.resize(static_cast<std::size_t>(n));
  s.end.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto d = at_or_after(rp[i], i, i);
    s.diag[static_cast<std::size_t>(i)] = d;
    s.end[static_cast<std::size_t>(i)] = at_or_after(d, i, n);
  }
  auto& f = s.f;
  f.cholesky = cholesky;
  f.inv_diag = at::empty({n}, a.values.options());
  // A triangle whose row r holds A's entries [first(r), last(r)).
  const auto triangle = [&](auto&& first, auto&& last) {
    auto rowptr = at::empty({n + 1}, at::kLong);
    auto* trp = rowptr.data_ptr<std::int64_t>();
    trp[0] = 0;
    for (std::int64_t r = 0; r < n; ++r) trp[r + 1] = trp[r] + (last(r) - first(r));
    Csr t{n, n, rowptr, at::empty({trp[n]}, a.col.options()), at::empty({trp[n]}, a.values.options())};
    auto* tci = t.col.data_ptr<I>();
    for (std::int64_t r = 0; r < n; ++r) std::copy(ci + first(r), ci + last(r), tci + trp[r]);
    return t;
  };
  const auto pos = [](const std::vector<std::int64_t>& v, std::int64_t i) { return v[static_cast<std::size_t>(i)]; };
  f.lower = triangle([&](std::int64_t i) { return rp[i]; }, [&](std::int64_t i) { return pos(s.diag, i); });
  // Last row first: the backward sweep then reads forward through memory. IC(0) keeps no upper
  // triangle: its rows are empty.
  const auto past_diagonal = [&](std::int64_t i) {
    const auto d = pos(s.diag, i);
    if (cholesky) return pos(s.end, i);
    return d < pos(s.end, i) && static_cast<std::int64_t>(ci[d]) == i ? d + 1 : d;
  };
  f.upper = triangle([&](std::int64_t r) { return past_diagonal(n - 1 - r); },
                     [&](std::int64_t r) { return pos(s.end, n - 1 - r); });
  return s;
}

/// Row pointers in 32 bits where the entry count fits, both or neither, so that one dispatch
/// serves both sweeps.
inline void compact_factor(IncompleteFactor& f) {
  if (f.lower.nnz() + f.upper.nnz() <= std::numeric_limits<std::int32_t>::max()) {
    f.lower.rowptr = f.lower.rowptr.to(at::kInt);
    f.upper.rowptr = f.upper.rowptr.to(at::kInt);
  }
}

template <class F>
void dispatch_real_csr(const Csr& a, const char* what, F&& f) {
  if (a.dtype() != at::kFloat && a.dtype() != at::kDouble)
    throw Error(std::string(what) + ": expected a float32 or float64 matrix, found " +
                c10::toString(a.dtype()));
  dispatch_csr(a, [&](auto v0, auto i0) {
    if constexpr (!c10::is_complex<decltype(v0)>::value) f(v0, i0);
  });
}

/// A pivot fails when it is not finite or not larger in magnitude than machine epsilon times the
/// largest entry of its row of A (relative, so scaling A does not change the verdict); IC(0)
/// also needs it positive. PETSc's default zero-pivot test is absolute (1e-12 in double);
/// a relative one keeps a 1e-20-scaled matrix factorable.
template <class V>
bool pivot_fails(V pivot, V row_scale, bool need_positive) {
  const V tol = std::numeric_limits<V>::epsilon() * row_scale;
  if (!std::isfinite(pivot)) return true;
  return need_positive ? !(pivot > tol) : !(std::abs(pivot) > tol);
}

/// Typed pointers into A's block and the factor being written, and the current row scattered into
/// a dense work row of n entries (zero outside the row's pattern where a factorisation reads it
/// there). The dense row makes the elimination's inner loop branch-free, as PETSc's AIJ
/// factorisations are: an update lands in its column's slot whether or not the row stores that
/// column, and a slot outside the pattern is never read back (ILU(0) drops it; IC(0) clears the
/// row's slots after each row and reads zeros there).
template <class V, class I>
struct FactorView {
  std::int64_t n;
  const std::int64_t* rp;  ///< A's rows: columns `ci`, values `av`
  const I* ci;
  const V* av;
  const std::int64_t* diag;  ///< split_rows's positions in A
  const std::int64_t* end;
  const std::int64_t* lrp;  ///< the factor's strictly lower rows
  const I* lci;
  V* lval;
  const std::int64_t* urp;  ///< its strictly upper rows, A's row i at n − 1 − i
  const I* uci;
  V* uval;
  V* inv;
  std::vector<V> row;
};

/// Factors the leading square block of `a` by `body(view)` straight into the sweeps' layout;
/// `body` returns the first row whose pivot fails, or -1; on success `f` is the factor.
template <class F>
std::int64_t factor_split(const Csr& a, IncompleteFactor& f, bool cholesky, const char* what, F&& body) {
  const auto rowptr = a.rowptr.to(at::kLong);  // a copy only where they are 32-bit
  std::int64_t failed = -1;
  dispatch_real_csr(a, what, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    const auto* rp = rowptr.data_ptr<std::int64_t>();
    auto s = split_rows<I>(a, rp, cholesky);
    FactorView<V, I> m{a.rows,
                       rp,
                       a.col.data_ptr<I>(),
                       a.values.data_ptr<V>(),
                       s.diag.data(),
                       s.end.data(),
                       s.f.lower.rowptr.template data_ptr<std::int64_t>(),
                       s.f.lower.col.template data_ptr<I>(),
                       s.f.lower.values.template data_ptr<V>(),
                       s.f.upper.rowptr.template data_ptr<std::int64_t>(),
                       s.f.upper.col.template data_ptr<I>(),
                       s.f.upper.values.template data_ptr<V>(),
                       s.f.inv_diag.template data_ptr<V>(),
                       std::vector<V>(static_cast<std::size_t>(a.rows), V(0))};
    failed = body(m);
    if (failed < 0) {
      compact_factor(s.f);
      f = std::move(s.f);
    }
  });
  return failed;
}

/// ILU(0) of the leading square block of `a` (Saad, Iterative Methods, Algorithm 10.4, the IKJ
/// variant): for each row i and each k < i in its pattern, l_ik = a_ik / u_kk, then
/// a_ij -= l_ik u_kj for the j > k of row k that row i also holds; updates outside the pattern are
/// dropped. Fills `f`. Returns the first row whose pivot fails (or which stores no diagonal
/// entry), -1 when none does; the factorisation stops there.
inline std::int64_t factor_ilu0(const Csr& a, IncompleteFactor& f) {
  return factor_split(a, f, false, "ILU(0)", [](auto& m) {
    using V = std::remove_pointer_t<decltype(m.lval)>;
    const auto n = m.n;
    auto* row = m.row.data();
    for (std::int64_t i = 0; i < n; ++i) {
      const auto b = m.rp[i], d = m.diag[static_cast<std::size_t>(i)], e = m.end[static_cast<std::size_t>(i)];
      if (d == e || static_cast<std::int64_t>(m.ci[d]) != i) return i;  // no diagonal entry
      V scale{};
      for (std::int64_t k = b; k < e; ++k) {
        row[m.ci[k]] = m.av[k];
        scale = std::max(scale, static_cast<V>(std::abs(m.av[k])));
      }
      for (std::int64_t kk = b; kk < d; ++kk) {
        const auto k = static_cast<std::int64_t>(m.ci[kk]);
        const V lik = row[k] * m.inv[k];
        row[k] = lik;
        const auto t = n - 1 - k;  // row k of U
        for (auto jj = m.urp[t]; jj < m.urp[t + 1]; ++jj) row[m.uci[jj]] -= lik * m.uval[jj];
      }
      V* l = m.lval + m.lrp[i];
      for (std::int64_t kk = b; kk < d; ++kk) l[kk - b] = row[m.ci[kk]];
      const auto t = n - 1 - i;
      for (auto jj = m.urp[t]; jj < m.urp[t + 1]; ++jj) m.uval[jj] = row[m.uci[jj]];
      const V pivot = row[i];
      if (pivot_fails(pivot, scale, false)) return i;
      m.inv[i] = V(1) / pivot;
    }
    return std::int64_t{-1};
  });
}

/// IC(0) of the leading square block of `a`, from its lower triangle (the upper one is never
/// read, so an unsymmetric A is factored as if it were symmetric). Row-oriented:
/// l_ik = (a_ik − Σ_{j<k} l_ij l_kj) / l_kk over j in both rows' patterns, then
/// l_ii = sqrt(a_ii − Σ_{j<i} l_ij²). For symmetric A this is ILU(0) with U = D Lᵀ rescaled
/// (L_IC = L_ILU D^½), the same preconditioner at half the storage. Returns the first row whose
/// pivot a_ii − Σ l_ij² fails (is not positive: A is not SPD enough for IC(0)), -1 when none does.
inline std::int64_t factor_ic0(const Csr& a, IncompleteFactor& f) {
  return factor_split(a, f, true, "IC(0)", [](auto& m) {
    using V = std::remove_pointer_t<decltype(m.lval)>;
    auto* row = m.row.data();
    for (std::int64_t i = 0; i < m.n; ++i) {
      const auto b = m.rp[i], d = m.diag[static_cast<std::size_t>(i)];
      const bool has_diag = d < m.end[static_cast<std::size_t>(i)] && static_cast<std::int64_t>(m.ci[d]) == i;
      V scale = has_diag ? static_cast<V>(std::abs(m.av[d])) : V(0);
      for (std::int64_t k = b; k < d; ++k) {
        row[m.ci[k]] = m.av[k];
        scale = std::max(scale, static_cast<V>(std::abs(m.av[k])));
      }
      V* l = m.lval + m.lrp[i];
      V pivot{};
      for (std::int64_t kk = b; kk < d; ++kk) {
        const auto k = static_cast<std::int64_t>(m.ci[kk]);
        // Row i's slots left of column k hold its finished l_ij; the others are zero.
        V s = row[k];
        for (auto jj = m.lrp[k]; jj < m.lrp[k + 1]; ++jj) s -= row[m.lci[jj]] * m.lval[jj];
        const V lik = s * m.inv[k];
        row[k] = lik;
        l[kk - b] = lik;
        pivot += lik * lik;
      }
      for (std::int64_t k = b; k < d; ++k) row[m.ci[k]] = V(0);
      if (!has_diag) return i;
      pivot = m.av[d] - pivot;
      if (pivot_fails(pivot, scale, true)) return i;
      m.inv[i] = V(1) / std::sqrt(pivot);
    }
    return std::int64_t{-1};
  });
}

/// SSOR of the leading square block of `a` as an ILU-shaped factor: M = (D/ω + L)(D/ω)⁻¹(D/ω + U) / (2 − ω) is
/// L̃ Ũ with L̃ = I + L (D/ω)⁻¹ (unit lower: l̃_ij = a_ij ω / a_jj) and Ũ = (D/ω + U) / (2 − ω)
/// (ũ_ij = a_ij / (2 − ω), 1 / ũ_ii = ω (2 − ω) / a_ii), so incomplete_solve applies
/// M⁻¹ = (2 − ω) (D/ω + U)⁻¹ (D/ω) (D/ω + L)⁻¹, one symmetric SOR sweep from zero, with the
/// (2 − ω) of the stationary iteration folded into the stored values. No elimination: O(nnz).
/// For Hermitian A, U = Lᴴ and D is real, so M is Hermitian, definite with D's sign.
/// The block must store a nonzero diagonal in every row (the caller checks, with the rows named).
inline IncompleteFactor ssor_factor(const Csr& a, double omega) {
  const auto rowptr = a.rowptr.to(at::kLong);  // a copy only where they are 32-bit
  IncompleteFactor f;
  dispatch_csr(a, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    const auto n = a.rows;
    const auto* rp = rowptr.data_ptr<std::int64_t>();
    const auto* ci = a.col.data_ptr<I>();
    const auto* av = a.values.data_ptr<V>();
    auto s = split_rows<I>(a, rp, false);
    auto* inv = s.f.inv_diag.template data_ptr<V>();
    std::vector<V> scale(static_cast<std::size_t>(n));  // ω / a_jj, the lower columns' factor
    for (std::int64_t i = 0; i < n; ++i) {
      const auto d = s.diag[static_cast<std::size_t>(i)];
      if (d == s.end[static_cast<std::size_t>(i)] || static_cast<std::int64_t>(ci[d]) != i || av[d] == V(0))
        throw Error("ssor_factor: expected a nonzero diagonal in every row, found none in row " + std::to_string(i));
      scale[static_cast<std::size_t>(i)] = V(omega) / av[d];
      inv[i] = V(omega * (2 - omega)) / av[d];
    }
    auto* lval = s.f.lower.values.template data_ptr<V>();
    auto* uval = s.f.upper.values.template data_ptr<V>();
    const auto* urp = s.f.upper.rowptr.template data_ptr<std::int64_t>();
    for (std::int64_t i = 0, l = 0; i < n; ++i) {
      const auto d = s.diag[static_cast<std::size_t>(i)];
      for (std::int64_t k = rp[i]; k < d; ++k) lval[l++] = av[k] * scale[static_cast<std::size_t>(ci[k])];
      auto* u = uval + urp[n - 1 - i];
      for (std::int64_t k = d + 1; k < s.end[static_cast<std::size_t>(i)]; ++k) *u++ = av[k] / V(2 - omega);
    }
    compact_factor(s.f);
    f = std::move(s.f);
  });
  return f;
}

/// Σ val[k] x[ci[k]] over [begin, end), a row of one triangle of the factor, in two partial sums
/// (even and odd entries): a sweep's rows wait on each other through x, and one running sum made
/// each row wait out the latency of all its additions in turn.
template <class V, class I, class P>
EINSHARD_KERNEL_INLINE V sparse_dot(const V* __restrict val, const I* __restrict ci, const V* x, P begin, P end) {
  V s0{}, s1{};
  P k = begin;
  for (; k + 1 < end; k += 2) {
    s0 += val[k] * x[ci[k]];
    s1 += val[k + 1] * x[ci[k + 1]];
  }
  if (k < end) s0 += val[k] * x[ci[k]];
  return s0 + s1;
}

/// z = (L U)⁻¹ r (ILU) or (L Lᵀ)⁻¹ r (IC): a forward and a backward sweep over the factor, in
/// place in `z` (contiguous, the factor's dtype; `z` may be `r`). Real or complex (the factors
/// of ILU(0) and IC(0) are real; SSOR's may be complex). The forward sweep reads a contiguous `r`
/// of z's dtype itself rather than from a copy in `z`: one pass over two vectors less per solve.
inline void incomplete_solve(const IncompleteFactor& f, const at::Tensor& r, at::Tensor& z) {
  const bool in_place = z.is_same(r);
  const bool read_r = !in_place && r.is_contiguous() && r.scalar_type() == z.scalar_type() && r.device() == z.device();
  if (!in_place && !read_r) z.copy_(r);
  dispatch_view(f.lower, [&](auto lo) {
    using V = typename decltype(lo)::value_type;
    using P = std::remove_cvref_t<decltype(lo.rp[0])>;
    const auto n = lo.rows;
    const auto* __restrict inv = f.inv_diag.data_ptr<V>();
    auto* x = z.data_ptr<V>();
    const V* b = read_r ? r.data_ptr<V>() : x;  // may be x: not restrict
    if (!f.cholesky) {
      for (std::int64_t i = 0; i < n; ++i)  // L y = r, unit diagonal
        x[i] = b[i] - sparse_dot(lo.av, lo.ci, x, lo.rp[i], lo.rp[i + 1]);
      const auto* __restrict urp = f.upper.rowptr.data_ptr<P>();
      const auto* __restrict uci = f.upper.col.data_ptr<std::remove_cvref_t<decltype(lo.ci[0])>>();
      const auto* __restrict uval = f.upper.values.data_ptr<V>();
      for (std::int64_t t = 0; t < n; ++t) {  // U z = y
        const auto i = n - 1 - t;
        x[i] = (x[i] - sparse_dot(uval, uci, x, urp[t], urp[t + 1])) * inv[i];
      }
    } else if constexpr (!c10::is_complex<V>::value) {  // factor_ic0 makes real factors only
      for (std::int64_t i = 0; i < n; ++i)  // L y = r
        x[i] = (b[i] - sparse_dot(lo.av, lo.ci, x, lo.rp[i], lo.rp[i + 1])) * inv[i];
      // Lᵀ z = y from the rows of L: once z_i is final, remove its share from the earlier rows.
      for (std::int64_t i = n - 1; i >= 0; --i) {
        const V zi = x[i] * inv[i];
        x[i] = zi;
        for (auto k = lo.rp[i]; k < lo.rp[i + 1]; ++k) x[lo.ci[k]] -= lo.av[k] * zi;
      }
    }
  });
}

}  // namespace einshard::sparse::detail
