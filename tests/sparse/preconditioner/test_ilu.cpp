// ILU(0) and IC(0) kernels (sparse/ilu.hpp) against dense references computed by the definition.
// The preconditioner operators themselves are collective: tests/sparse/preconditioner/test_preconditioner.cpp.

#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>
#include <vector>

#include "einshard/sparse/preconditioner/ilu.hpp"

namespace test_ilu {

namespace sp = einshard::sparse;

namespace {

// The CSR of the stored entries of a dense matrix (`pattern` true), zeros included if stored.
sp::Csr to_csr(const at::Tensor& dense, const at::Tensor& pattern) {
  const auto idx = pattern.nonzero();
  const auto row = idx.select(1, 0), col = idx.select(1, 1);
  return sp::detail::coo_to_csr(dense.index({row, col}), row, col, dense.size(0), dense.size(1));
}

at::Tensor to_dense(const sp::Csr& a) {
  const auto [values, row, col] = sp::detail::csr_to_coo(a);
  auto out = at::zeros({a.rows, a.cols}, values.options());
  out.index_put_({row, col}, values);
  return out;
}

at::Tensor pattern_of(const sp::Csr& a) { return to_dense({a.rows, a.cols, a.rowptr, a.col, at::ones_like(a.values)}) != 0; }

// 2-D 5-point Poisson on an nx × ny grid (Dirichlet), dense.
at::Tensor poisson_2d(std::int64_t nx, std::int64_t ny, at::ScalarType dtype = at::kDouble) {
  const auto n = nx * ny;
  auto a = at::zeros({n, n}, dtype);
  for (std::int64_t y = 0; y < ny; ++y)
    for (std::int64_t x = 0; x < nx; ++x) {
      const auto i = y * nx + x;
      a[i][i] = 4;
      if (x > 0) a[i][i - 1] = -1;
      if (x + 1 < nx) a[i][i + 1] = -1;
      if (y > 0) a[i][i - nx] = -1;
      if (y + 1 < ny) a[i][i + nx] = -1;
    }
  return a;
}

// ILU(0) by its dense definition: Gaussian elimination (IKJ) in which every update of a position
// outside the pattern is dropped. Returns L (unit lower) and U.
std::pair<at::Tensor, at::Tensor> dense_ilu0(const at::Tensor& a, const at::Tensor& pattern) {
  auto w = a.to(at::kDouble).clone();
  auto* p = w.data_ptr<double>();
  const auto pat = pattern.to(at::kBool).contiguous();
  const auto* keep = pat.data_ptr<bool>();
  const auto n = a.size(0);
  for (std::int64_t i = 1; i < n; ++i)
    for (std::int64_t k = 0; k < i; ++k) {
      if (!keep[i * n + k]) continue;
      p[i * n + k] /= p[k * n + k];
      for (std::int64_t j = k + 1; j < n; ++j)
        if (keep[i * n + j]) p[i * n + j] -= p[i * n + k] * p[k * n + j];
    }
  auto lower = w.tril(-1) + at::eye(n, at::kDouble);
  return {lower, w.triu()};
}

// The entries an IncompleteFactor stores, dense, in A's places: L's strictly lower ones, the
// pivots, and (ILU) U's strictly upper ones, whose rows it holds last row first.
at::Tensor stored(const sp::detail::IncompleteFactor& f) {
  auto w = to_dense(f.lower).to(at::kDouble) + at::diag(1 / f.inv_diag.to(at::kDouble));
  if (!f.cholesky) w += to_dense(f.upper).to(at::kDouble).flip(0);
  return w;
}

// Where it stores them.
at::Tensor stored_pattern(const sp::detail::IncompleteFactor& f) {
  auto p = pattern_of(f.lower).logical_or(at::eye(f.lower.rows, at::kBool));
  if (!f.cholesky) p = p.logical_or(pattern_of(f.upper).flip(0));
  return p;
}

// The factors held by an IncompleteFactor, dense: (L, U) for ILU, (L, Lᵀ) for IC.
std::pair<at::Tensor, at::Tensor> factors(const sp::detail::IncompleteFactor& f) {
  const auto w = stored(f);
  if (f.cholesky) return {w, w.t()};
  return {w.tril(-1) + at::eye(f.lower.rows, at::kDouble), w.triu()};
}

}  // namespace

TEST_CASE("ILU(0) of a tridiagonal matrix is its exact LU factorisation", "[sparse][ilu][unit]") {
  const std::int64_t n = 12;
  auto a = at::zeros({n, n}, at::kDouble);
  for (std::int64_t i = 0; i < n; ++i) {
    a[i][i] = 3.0 + 0.1 * static_cast<double>(i);
    if (i > 0) a[i][i - 1] = -1.0 - 0.05 * static_cast<double>(i);  // unsymmetric
    if (i + 1 < n) a[i][i + 1] = -0.7;
  }
  const auto csr = to_csr(a, a != 0);
  const auto values = csr.values.clone();
  // Factoring reads the matrix and leaves it be.
  sp::detail::IncompleteFactor f;
  REQUIRE(sp::detail::factor_ilu0(csr, f) == -1);
  CHECK(at::equal(csr.values, values));
  const auto [l, u] = factors(f);
  // LU without pivoting, the exact factorisation: no fill exists for a tridiagonal matrix.
  CHECK(at::allclose(at::matmul(l, u), a, 1e-14, 1e-14));
  const auto [l_ref, u_ref] = dense_ilu0(a, at::ones({n, n}, at::kBool));  // no dropping at all
  CHECK(at::allclose(l, l_ref, 1e-14, 1e-14));
  CHECK(at::allclose(u, u_ref, 1e-14, 1e-14));
  // And the solve is exact.
  const auto b = at::randn({n}, at::kDouble);
  auto z = at::empty({n}, at::kDouble);
  sp::detail::incomplete_solve(f, b, z);
  CHECK(at::allclose(at::mv(a, z), b, 1e-12, 1e-12));
}

TEST_CASE("ILU(0) of 2-D Poisson matches the dense ILU(0) by definition", "[sparse][ilu][unit]") {
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const auto a = poisson_2d(6, 5, dtype);
    const auto n = a.size(0);
    const auto csr = to_csr(a, a != 0);
    sp::detail::IncompleteFactor f;
    REQUIRE(sp::detail::factor_ilu0(csr, f) == -1);
    CHECK(f.lower.values.scalar_type() == dtype);
    CHECK(f.upper.values.scalar_type() == dtype);
    CHECK(at::equal(stored_pattern(f), a != 0));  // no fill
    const auto [l, u] = factors(f);
    const auto [l_ref, u_ref] = dense_ilu0(a, a != 0);
    const double tol = dtype == at::kDouble ? 1e-13 : 1e-5;
    CHECK(at::allclose(l, l_ref, tol, tol));
    CHECK(at::allclose(u, u_ref, tol, tol));
    // The defining property: L U equals A on the pattern (and only there: Poisson has fill).
    const auto lu = at::matmul(l, u);
    const auto pat = a != 0;
    CHECK(at::allclose(lu.masked_select(pat), a.to(at::kDouble).masked_select(pat), tol, tol));
    CHECK(!at::allclose(lu, a.to(at::kDouble), tol, tol));
    // The solve is (L U)⁻¹ r.
    const auto r = at::randn({n}, dtype);
    auto z = at::empty({n}, dtype);
    sp::detail::incomplete_solve(f, r, z);
    CHECK(at::allclose(z.to(at::kDouble), at::linalg_solve(lu, r.to(at::kDouble)), tol, tol));
  }
}

TEST_CASE("ILU(0) of an unsymmetric pattern matches the dense definition", "[sparse][ilu][unit]") {
  at::manual_seed(7);
  const std::int64_t n = 40;
  auto pattern = (at::rand({n, n}, at::kDouble) < 0.12).logical_or(at::eye(n, at::kBool));
  auto a = at::randn({n, n}, at::kDouble) * pattern;
  a += at::eye(n, at::kDouble) * 8;  // diagonally dominant enough for stable pivots
  const auto csr = to_csr(a, pattern);
  sp::detail::IncompleteFactor f;
  REQUIRE(sp::detail::factor_ilu0(csr, f) == -1);
  const auto [l, u] = factors(f);
  const auto [l_ref, u_ref] = dense_ilu0(a, pattern);
  CHECK(at::allclose(l, l_ref, 1e-12, 1e-12));
  CHECK(at::allclose(u, u_ref, 1e-12, 1e-12));
  CHECK(at::allclose(at::matmul(l, u).masked_select(pattern), a.masked_select(pattern), 1e-12, 1e-12));
}

TEST_CASE("IC(0) of 2-D Poisson: L Lᵀ matches A on the pattern and L is ILU(0) rescaled",
          "[sparse][ilu][unit]") {
  const auto a = poisson_2d(5, 7);
  const auto n = a.size(0);
  const auto csr = to_csr(a, a != 0);
  sp::detail::IncompleteFactor ic;
  REQUIRE(sp::detail::factor_ic0(csr, ic) == -1);  // the upper triangle is not read
  CHECK(at::equal(stored_pattern(ic), (a != 0).tril()));
  const auto [l, lt] = factors(ic);
  const auto llt = at::matmul(l, lt);
  CHECK(at::allclose(llt.masked_select(a != 0), a.masked_select(a != 0), 1e-13, 1e-13));
  // For symmetric A, IC(0) is ILU(0) with U = D Lᵀ: L_IC = L_ILU D^½.
  const auto [l_ilu, u_ilu] = dense_ilu0(a, a != 0);
  CHECK(at::allclose(l, at::matmul(l_ilu, at::diag(u_ilu.diagonal().sqrt())), 1e-13, 1e-13));
  const auto r = at::randn({n}, at::kDouble);
  auto z = at::empty({n}, at::kDouble);
  sp::detail::incomplete_solve(ic, r, z);
  CHECK(at::allclose(z, at::linalg_solve(llt, r), 1e-12, 1e-12));
  // In place (z aliasing r) gives the same.
  auto w = r.clone();
  sp::detail::incomplete_solve(ic, w, w);
  CHECK(at::allclose(w, z, 1e-15, 0));
}

TEST_CASE("the factors of rows with ghost columns are those of their leading square block",
          "[sparse][ilu][unit]") {
  // 3 owned rows, columns 3..4 are halo: they take no part in ILU(0), IC(0) or SSOR.
  const auto a = at::tensor({4., -1., 0., -1., 0., -1., 4., -1., 0., -2., 0., -1., 4., -3., 0.}, at::kDouble)
                     .view({3, 5});
  const auto block = a.slice(1, 0, 3).contiguous();
  for (const bool int32 : {false, true}) {
    auto rows = to_csr(a, a != 0);
    auto square = to_csr(block, block != 0);
    if (int32) {  // 32-bit row pointers, as the distributed product's blocks store them
      rows = sp::detail::compact_rowptr(rows);
      square = sp::detail::compact_rowptr(square);
    }
    sp::detail::IncompleteFactor f, g;
    REQUIRE(sp::detail::factor_ilu0(rows, f) == -1);
    REQUIRE(sp::detail::factor_ilu0(square, g) == -1);
    CHECK(at::equal(stored(f), stored(g)));
    CHECK(at::equal(stored_pattern(f), block != 0));
    const auto [l_ref, u_ref] = dense_ilu0(block, block != 0);
    const auto [l, u] = factors(f);
    CHECK(at::allclose(l, l_ref, 1e-14, 1e-14));
    CHECK(at::allclose(u, u_ref, 1e-14, 1e-14));
    REQUIRE(sp::detail::factor_ic0(rows, f) == -1);
    REQUIRE(sp::detail::factor_ic0(square, g) == -1);
    CHECK(at::equal(stored(f), stored(g)));
    CHECK(at::equal(stored_pattern(f), (block != 0).tril()));
    CHECK(at::equal(stored(sp::detail::ssor_factor(rows, 1.3)), stored(sp::detail::ssor_factor(square, 1.3))));
  }
}

TEST_CASE("zero and non-positive pivots are reported with their row", "[sparse][ilu][unit]") {
  sp::detail::IncompleteFactor f;
  // Row 2 has no diagonal entry at all.
  auto a = at::tensor({2., 1., 0., 1., 2., 1., 0., 1., 0.}, at::kDouble).view({3, 3});
  CHECK(sp::detail::factor_ilu0(to_csr(a, a != 0), f) == 2);
  // Row 1's pivot cancels: 1 - 1·1/1 = 0.
  auto b = at::tensor({1., 1., 1., 1.}, at::kDouble).view({2, 2});
  CHECK(sp::detail::factor_ilu0(to_csr(b, b != 0), f) == 1);
  // An indefinite symmetric matrix breaks IC(0) at its second pivot, not ILU(0).
  auto c = at::tensor({1., 2., 2., 1.}, at::kDouble).view({2, 2});
  CHECK(sp::detail::factor_ic0(to_csr(c, c != 0), f) == 1);
  CHECK(sp::detail::factor_ilu0(to_csr(c, c != 0), f) == -1);
  // A negative-definite matrix breaks IC(0) at once; ILU(0) is fine with negative pivots.
  auto d = -poisson_2d(3, 3);
  CHECK(sp::detail::factor_ic0(to_csr(d, d != 0), f) == 0);
  CHECK(sp::detail::factor_ilu0(to_csr(d, d != 0), f) == -1);
  // Relative test: a tiny but well-scaled matrix factors.
  auto e = poisson_2d(3, 3) * 1e-200;
  CHECK(sp::detail::factor_ilu0(to_csr(e, e != 0), f) == -1);
  CHECK_THROWS_AS(sp::detail::factor_ilu0(to_csr(a.to(at::kComplexDouble), a != 0), f), einshard::Error);
}

}  // namespace test_ilu
