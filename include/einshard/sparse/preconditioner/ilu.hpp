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

/// The sweeps' layout of a factor computed in A's pattern (`lu`, with `diag` the position of each
/// row's diagonal entry).
inline IncompleteFactor split_factor(const Csr& lu, const at::Tensor& diag, at::Tensor inv_diag, bool cholesky) {
  IncompleteFactor f;
  f.inv_diag = std::move(inv_diag);
  f.cholesky = cholesky;
  const auto n = lu.rows;
  const auto empty = [&](std::int64_t entries) {
    return Csr{n, n, at::zeros({n + 1}, at::kLong), at::empty({entries}, lu.col.options()),
               at::empty({entries}, lu.values.options())};
  };
  const auto* rp = lu.rowptr.data_ptr<std::int64_t>();
  const auto* dg = diag.data_ptr<std::int64_t>();
  std::int64_t below = 0;
  for (std::int64_t i = 0; i < n; ++i) below += dg[i] - rp[i];
  f.lower = empty(below);
  f.upper = empty(cholesky ? 0 : lu.nnz() - below - n);
  dispatch_csr(lu, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    const auto* ci = lu.col.data_ptr<I>();
    const auto* val = lu.values.data_ptr<V>();
    const auto copy_rows = [&](Csr& out, auto&& row_of, auto&& first, auto&& last) {
      auto* orp = out.rowptr.data_ptr<std::int64_t>();
      auto* oci = out.col.data_ptr<I>();
      auto* oval = out.values.data_ptr<V>();
      orp[0] = 0;
      for (std::int64_t t = 0; t < n; ++t) {
        const auto i = row_of(t);
        const auto b = first(i), e = last(i);
        std::copy(ci + b, ci + e, oci + orp[t]);
        std::copy(val + b, val + e, oval + orp[t]);
        orp[t + 1] = orp[t] + (e - b);
      }
    };
    copy_rows(f.lower, [](std::int64_t t) { return t; }, [&](std::int64_t i) { return rp[i]; },
              [&](std::int64_t i) { return dg[i]; });
    if (!cholesky)
      copy_rows(f.upper, [&](std::int64_t t) { return n - 1 - t; }, [&](std::int64_t i) { return dg[i] + 1; },
                [&](std::int64_t i) { return rp[i + 1]; });
  });
  // Both or neither 32-bit, so that one dispatch serves both sweeps.
  if (lu.nnz() <= std::numeric_limits<std::int32_t>::max()) {
    f.lower.rowptr = f.lower.rowptr.to(at::kInt);
    f.upper.rowptr = f.upper.rowptr.to(at::kInt);
  }
  return f;
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

/// The block of `a` in columns [0, n) (only the lower triangle, column ≤ row, when `lower`), with
/// the same index type; rows keep their sorted column order. `a` itself (shared, not copied) when
/// it has no other columns: the factorisations copy the values they overwrite.
inline Csr leading_block(const Csr& a, std::int64_t n, bool lower) {
  if (!lower && a.cols <= n && a.rowptr.scalar_type() == at::kLong) return a;
  Csr out;
  out.rows = a.rows;
  out.cols = n;
  out.rowptr = at::empty({a.rows + 1}, at::kLong);
  dispatch_csr(a, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    const auto* rp = a.rowptr.data_ptr<std::int64_t>();
    const auto* ci = a.col.data_ptr<I>();
    const auto* av = a.values.data_ptr<V>();
    auto* orp = out.rowptr.data_ptr<std::int64_t>();
    // Columns are sorted, so a row's kept entries are a prefix of it.
    orp[0] = 0;
    for (std::int64_t i = 0; i < a.rows; ++i) {
      const std::int64_t limit = lower ? std::min(n, i + 1) : n;
      std::int64_t k = rp[i];
      while (k < rp[i + 1] && static_cast<std::int64_t>(ci[k]) < limit) ++k;
      orp[i + 1] = orp[i] + (k - rp[i]);
    }
    out.col = at::empty({orp[a.rows]}, a.col.options());
    out.values = at::empty({orp[a.rows]}, a.values.options());
    auto* oci = out.col.data_ptr<I>();
    auto* oav = out.values.data_ptr<V>();
    for (std::int64_t i = 0; i < a.rows; ++i)
      for (std::int64_t k = 0; k < orp[i + 1] - orp[i]; ++k) {
        oci[orp[i] + k] = ci[rp[i] + k];
        oav[orp[i] + k] = av[rp[i] + k];
      }
  });
  return out;
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

/// Typed pointers into a factor computed in place, and the current row scattered into a dense
/// work row of n entries (zero outside the row's pattern where a factorisation reads it there).
/// The dense row makes the elimination's inner loop branch-free, as PETSc's AIJ factorisations
/// are: an update lands in its column's slot whether or not the row stores that column, and a
/// slot outside the pattern is never read back (ILU(0) drops it; IC(0) clears the row's slots
/// after each row and reads zeros there).
template <class V, class I>
struct FactorView {
  std::int64_t n;
  const std::int64_t* rp;
  const I* ci;
  V* val;
  std::int64_t* dg;
  V* inv;
  std::vector<V> row;
};

/// Factors a copy of `a` in place by `body(view)`, which returns the first row whose pivot fails,
/// or -1; on success `f` is the factor in the sweeps' layout.
template <class F>
std::int64_t factor_in_place(const Csr& a, IncompleteFactor& f, bool cholesky, const char* what, F&& body) {
  Csr lu = a;
  lu.values = a.values.clone();
  const auto diag = at::empty({a.rows}, at::kLong);
  auto inv_diag = at::empty({a.rows}, a.values.options());
  std::int64_t failed = -1;
  dispatch_real_csr(a, what, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    FactorView<V, I> m{a.rows, lu.rowptr.data_ptr<std::int64_t>(), lu.col.data_ptr<I>(),
                       lu.values.data_ptr<V>(), diag.data_ptr<std::int64_t>(), inv_diag.data_ptr<V>(),
                       std::vector<V>(static_cast<std::size_t>(a.rows), V(0))};
    failed = body(m);
  });
  if (failed < 0) f = split_factor(lu, diag, std::move(inv_diag), cholesky);
  return failed;
}

/// ILU(0) of a square block (Saad, Iterative Methods, Algorithm 10.4, the IKJ variant): for each
/// row i and each k < i in its pattern, l_ik = a_ik / u_kk, then a_ij -= l_ik u_kj for the j > k
/// of row k that row i also holds; updates outside the pattern are dropped. Fills `f`. Returns
/// the first row whose pivot fails (or which stores no diagonal entry), -1 when none does; the
/// factorisation stops there.
inline std::int64_t factor_ilu0(const Csr& block, IncompleteFactor& f) {
  return factor_in_place(block, f, false, "ILU(0)", [](auto& m) {
    using V = std::remove_pointer_t<decltype(m.val)>;
    auto& [n, rp, ci, val, dg, inv, row] = m;
    std::int64_t failed = -1;
    for (std::int64_t i = 0; i < n && failed < 0; ++i) {
      dg[i] = -1;
      V scale{};
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k) {
        row[static_cast<std::size_t>(ci[k])] = val[k];
        if (static_cast<std::int64_t>(ci[k]) == i) dg[i] = k;
        scale = std::max(scale, static_cast<V>(std::abs(val[k])));
      }
      for (std::int64_t kk = rp[i]; kk < rp[i + 1] && static_cast<std::int64_t>(ci[kk]) < i; ++kk) {
        const auto k = static_cast<std::int64_t>(ci[kk]);
        const V lik = row[static_cast<std::size_t>(k)] * inv[k];
        row[static_cast<std::size_t>(k)] = lik;
        for (std::int64_t jj = dg[k] + 1; jj < rp[k + 1]; ++jj) row[static_cast<std::size_t>(ci[jj])] -= lik * val[jj];
      }
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k) val[k] = row[static_cast<std::size_t>(ci[k])];
      if (dg[i] < 0 || pivot_fails(val[dg[i]], scale, false))
        failed = i;
      else
        inv[i] = V(1) / val[dg[i]];
    }
    return failed;
  });
}

/// IC(0) of a symmetric block given by its lower triangle (leading_block(..., true)); the upper
/// triangle of A is never read, so an unsymmetric A is factored as if it were symmetric.
/// Row-oriented: l_ik = (a_ik − Σ_{j<k} l_ij l_kj) / l_kk over j in both rows' patterns, then
/// l_ii = sqrt(a_ii − Σ_{j<i} l_ij²). For symmetric A this is ILU(0) with U = D Lᵀ rescaled
/// (L_IC = L_ILU D^½), the same preconditioner at half the storage. Returns the first row whose
/// pivot a_ii − Σ l_ij² fails (is not positive: A is not SPD enough for IC(0)), -1 when none does.
inline std::int64_t factor_ic0(const Csr& lower, IncompleteFactor& f) {
  return factor_in_place(lower, f, true, "IC(0)", [](auto& m) {
    using V = std::remove_pointer_t<decltype(m.val)>;
    auto& [n, rp, ci, val, dg, inv, row] = m;
    std::int64_t failed = -1;
    for (std::int64_t i = 0; i < n && failed < 0; ++i) {
      V scale{};
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k) {
        row[static_cast<std::size_t>(ci[k])] = val[k];
        scale = std::max(scale, static_cast<V>(std::abs(val[k])));
      }
      const std::int64_t last = rp[i + 1] - 1;  // the diagonal, when the row stores one
      dg[i] = last >= rp[i] && static_cast<std::int64_t>(ci[last]) == i ? last : -1;
      V pivot{};
      for (std::int64_t kk = rp[i]; kk < rp[i + 1] && static_cast<std::int64_t>(ci[kk]) < i; ++kk) {
        const auto k = static_cast<std::int64_t>(ci[kk]);
        // Row i's slots left of column k hold its finished l_ij; the others are zero.
        V s = row[static_cast<std::size_t>(k)];
        for (std::int64_t jj = rp[k]; jj < dg[k]; ++jj) s -= row[static_cast<std::size_t>(ci[jj])] * val[jj];
        const V lik = s * inv[k];
        row[static_cast<std::size_t>(k)] = lik;
        val[kk] = lik;
        pivot += lik * lik;
      }
      if (dg[i] >= 0) pivot = val[dg[i]] - pivot;
      if (dg[i] < 0 || pivot_fails(pivot, scale, true)) {
        failed = i;
      } else {
        val[dg[i]] = std::sqrt(pivot);
        inv[i] = V(1) / val[dg[i]];
      }
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k) row[static_cast<std::size_t>(ci[k])] = V(0);
    }
    return failed;
  });
}

/// SSOR of a square block as an ILU-shaped factor: M = (D/ω + L)(D/ω)⁻¹(D/ω + U) / (2 − ω) is
/// L̃ Ũ with L̃ = I + L (D/ω)⁻¹ (unit lower: l̃_ij = a_ij ω / a_jj) and Ũ = (D/ω + U) / (2 − ω)
/// (ũ_ij = a_ij / (2 − ω), 1 / ũ_ii = ω (2 − ω) / a_ii), so incomplete_solve applies
/// M⁻¹ = (2 − ω) (D/ω + U)⁻¹ (D/ω) (D/ω + L)⁻¹, one symmetric SOR sweep from zero, with the
/// (2 − ω) of the stationary iteration folded into the stored values. No elimination: O(nnz).
/// For Hermitian A, U = Lᴴ and D is real, so M is Hermitian, definite with D's sign.
/// The block must store a nonzero diagonal in every row (the caller checks, with the rows named).
inline IncompleteFactor ssor_factor(const Csr& block, double omega) {
  Csr lu = block;
  lu.values = block.values.clone();
  const auto diag = at::empty({block.rows}, at::kLong);
  auto inv_diag = at::empty({block.rows}, block.values.options());
  dispatch_csr(block, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    const auto n = block.rows;
    const auto* rp = lu.rowptr.data_ptr<std::int64_t>();
    const auto* ci = lu.col.data_ptr<I>();
    auto* val = lu.values.data_ptr<V>();
    auto* dg = diag.data_ptr<std::int64_t>();
    auto* inv = inv_diag.data_ptr<V>();
    std::vector<V> scale(static_cast<std::size_t>(n));  // ω / a_jj, the lower columns' factor
    for (std::int64_t i = 0; i < n; ++i) {
      dg[i] = -1;
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k)
        if (static_cast<std::int64_t>(ci[k]) == i) dg[i] = k;
      if (dg[i] < 0 || val[dg[i]] == V(0))
        throw Error("ssor_factor: expected a nonzero diagonal in every row, found none in row " + std::to_string(i));
      scale[static_cast<std::size_t>(i)] = V(omega) / val[dg[i]];
      inv[i] = V(omega * (2 - omega)) / val[dg[i]];
    }
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = rp[i]; k < dg[i]; ++k) val[k] *= scale[static_cast<std::size_t>(ci[k])];
      val[dg[i]] /= V(omega * (2 - omega));
      for (std::int64_t k = dg[i] + 1; k < rp[i + 1]; ++k) val[k] /= V(2 - omega);
    }
  });
  return split_factor(lu, diag, std::move(inv_diag), false);
}

/// Σ val[k] x[ci[k]] over [begin, end), a row of one triangle of the factor.
template <class V, class I, class P>
EINSHARD_KERNEL_INLINE V sparse_dot(const V* __restrict val, const I* __restrict ci, const V* x, P begin, P end) {
  V s{};
  for (P k = begin; k < end; ++k) s += val[k] * x[ci[k]];
  return s;
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
