// eigsh (LOBPCG, sharded basis): eigenvalues against the analytic spectrum of the 2-D Laplacian and
// a dense eigh on one process, for LA, SA and true-magnitude LM and SM, simple and RCB partitions;
// eigenvectors checked as eigenvectors; eigenvalue gradients against the dense formula x x^T.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "operations_support.hpp"

namespace test_eigsh {

namespace es = einshard;
namespace sp = einshard::sparse;
using es::testing::Coo;

namespace {

/// The eigenvalues of the nx x ny Dirichlet Laplacian, ascending.
at::Tensor laplacian_spectrum(std::int64_t nx, std::int64_t ny) {
  std::vector<double> e;
  for (std::int64_t i = 1; i <= nx; ++i)
    for (std::int64_t j = 1; j <= ny; ++j)
      e.push_back(4.0 - 2.0 * std::cos(M_PI * i / (nx + 1)) - 2.0 * std::cos(M_PI * j / (ny + 1)));
  return std::get<0>(at::tensor(e, at::kDouble).sort());
}

/// The wanted k of `spectrum` in eigsh's order.
at::Tensor select(const at::Tensor& spectrum, sp::Which which, std::int64_t k) {
  using W = sp::Which;
  at::Tensor order;
  switch (which) {
    case W::largest_algebraic: order = at::argsort(spectrum, 0, true); break;
    case W::smallest_algebraic: order = at::argsort(spectrum, 0, false); break;
    case W::largest_magnitude: order = at::argsort(spectrum.abs(), 0, true); break;
    case W::smallest_magnitude: order = at::argsort(spectrum.abs(), 0, false); break;
  }
  return spectrum.index_select(0, order.narrow(0, 0, k));
}

using es::testing::max_abs;

/// Eigenpairs of D (dense copy A): the values as expected, the vectors orthonormal eigenvectors.
void check_pairs(const sp::EigshResult& e, const at::Tensor& A, const at::Tensor& expected, double tol) {
  INFO("iterations " << e.iterations << ", matvecs " << e.matvecs);
  CHECK(e.converged);
  REQUIRE(e.eigenvalues.numel() == expected.numel());
  CHECK(max_abs(e.eigenvalues - expected) < tol * std::max(1.0, max_abs(expected)));
  const auto V = e.eigenvectors.full_tensor();
  REQUIRE(V.size(1) == expected.numel());
  CHECK(max_abs(at::matmul(V.transpose(0, 1), V) - at::eye(V.size(1), at::kDouble)) < 1e-8);
  CHECK(max_abs(at::matmul(A, V) - V * e.eigenvalues.detach().unsqueeze(0)) < 1e-6);
}

}  // namespace

TEST_CASE("eigsh: 2-D Laplacian, LA and SA against the analytic spectrum, simple and RCB", "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  const std::int64_t nx = 8, ny = 6;
  const auto coo = es::testing::poisson2d(nx, ny);
  const auto A = es::testing::dense(coo);
  const auto spectrum = laplacian_spectrum(nx, ny);
  using M = sp::PartitionMethod;
  for (auto which : {sp::Which::smallest_algebraic, sp::Which::largest_algebraic}) {
    std::vector<at::Tensor> found;
    for (auto method : {M::simple, M::rcb}) {
      const auto D = es::testing::distribute(coo, mesh, method, es::testing::grid_coords(nx, ny));
      const auto e = D.eigsh({.k = 3, .which = which, .tol = 1e-9, .maxiter = 500});
      check_pairs(e, A, select(spectrum, which, 3), 1e-9);
      found.push_back(e.eigenvalues);
    }
    CHECK(max_abs(found[0] - found[1]) < 1e-8);  // rank- and partition-invariant
  }
}

TEST_CASE("eigsh: true magnitudes on an indefinite matrix (LM, SM) against dense eigh", "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  // Eigenvalues of both signs around 0; LM and SM differ from LA and SA here.
  auto coo = es::testing::poisson2d(5, 4);
  coo.values = at::where(coo.rows == coo.cols, coo.values - 3.1, coo.values);
  const auto A = es::testing::dense(coo);
  const auto spectrum = at::linalg_eigvalsh(A);
  using M = sp::PartitionMethod;
  for (auto which : {sp::Which::largest_magnitude, sp::Which::smallest_magnitude}) {
    for (auto method : {M::simple, M::rcb}) {
      const auto D = es::testing::distribute(coo, mesh, method, es::testing::grid_coords(5, 4));
      const auto e = D.eigsh({.k = 2, .which = which, .tol = 1e-9, .maxiter = 300});
      check_pairs(e, A, select(spectrum, which, 2), 1e-8);
    }
  }
  CHECK(select(spectrum, sp::Which::smallest_magnitude, 2).abs().max().item<double>() < 0.5);  // interior values
}

TEST_CASE("eigsh: SM on a singular matrix returns its zero eigenvalues", "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  // Two 5 x 4 grids that share no edge, each with the graph Laplacian (rows sum to zero): the
  // eigenvalue 0 twice (the constants of each grid), then the grids' smallest nonzero values.
  auto one = es::testing::poisson2d(5, 4);
  const auto off = one.rows != one.cols;
  const auto degree = at::bincount(one.rows.masked_select(off), {}, one.n).to(at::kDouble);
  one.values = at::where(off, one.values, degree.index_select(0, one.rows));
  const Coo coo{at::cat({one.values, one.values}), at::cat({one.rows, one.rows + one.n}),
                at::cat({one.cols, one.cols + one.n}), 2 * one.n};
  const auto A = es::testing::dense(coo);
  const auto spectrum = at::linalg_eigvalsh(A);
  REQUIRE(spectrum.abs().lt(1e-12).sum().item<std::int64_t>() == 2);
  using M = sp::PartitionMethod;
  for (auto method : {M::simple, M::rcb}) {
    auto xy = es::testing::grid_coords(5, 4);
    xy = at::cat({xy, xy + 10.0});
    const auto D = es::testing::distribute(coo, mesh, method, xy);
    const auto e = D.eigsh({.k = 3, .which = sp::Which::smallest_magnitude, .tol = 1e-9, .maxiter = 300});
    check_pairs(e, A, select(spectrum, sp::Which::smallest_magnitude, 3), 1e-8);
    CHECK(max_abs(e.eigenvalues.narrow(0, 0, 2)) < 1e-8);
  }
}

TEST_CASE("eigsh: a Jacobi preconditioner, a non-constant diagonal, uneven and empty shards", "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  auto coo = es::testing::poisson2d(7, 3);  // 21 rows: uneven at 2, 4 and 8 ranks
  coo.values = at::where(coo.rows == coo.cols, coo.values + at::remainder(coo.rows, 5).to(at::kDouble), coo.values);
  const auto A = es::testing::dense(coo);
  const auto D = es::testing::distribute(coo, mesh, sp::PartitionMethod::simple, {});
  const auto diag = D.scatter(A.diagonal().contiguous()).local();
  const auto e = D.eigsh({.k = 2, .which = sp::Which::smallest_algebraic, .tol = 1e-10,
                          .preconditioner = [diag](const at::Tensor& r) { return r / diag.unsqueeze(1); }});
  check_pairs(e, A, select(at::linalg_eigvalsh(A), sp::Which::smallest_algebraic, 2), 1e-9);
  // n = 3 on up to 8 ranks: empty shards, block size capped at n.
  const auto small = es::testing::poisson2d(3, 1);
  const auto S = es::testing::distribute(small, mesh, sp::PartitionMethod::simple, {});
  const auto es3 = S.eigsh({.k = 1, .which = sp::Which::largest_algebraic});
  CHECK(std::abs(es3.eigenvalues.item<double>() - (4.0 + std::sqrt(2.0))) < 1e-8);
}

TEST_CASE("eigsh: eigenvalue gradients w.r.t. the stored values equal x x^T sampled on the pattern", "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  auto coo = es::testing::poisson2d(6, 5);
  const auto D0 = es::testing::distribute(coo, mesh, sp::PartitionMethod::simple, {});
  const auto values = D0.values().detach().clone().requires_grad_(true);
  const auto D = D0.with_values(values);
  const auto e = D.eigsh({.k = 2, .which = sp::Which::smallest_algebraic, .tol = 1e-10});
  e.eigenvalues.select(0, 0).backward();
  // Dense reference: lambda_min is simple; d lambda / d a_ij = v_i v_j.
  const auto [w, V] = at::linalg_eigh(es::testing::dense(coo));
  const auto v = V.select(1, 0);
  const auto entries = sp::detail::global_entries(D);
  const auto expected = v.index_select(0, entries.rows) * v.index_select(0, entries.cols);
  REQUIRE(values.grad().defined());
  CHECK(max_abs(values.grad() - expected) < 1e-7);
}

TEST_CASE("eigsh: bad k raises the same error on every rank", "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  const auto D = es::testing::distribute(es::testing::poisson2d(4, 4), mesh, sp::PartitionMethod::simple, {});
  for (std::int64_t k : {0, 17}) {
    const auto e = es::testing::error_of([&] { (void)D.eigsh({.k = k}); });
    CHECK(e.find("eigsh: expected 1 <= k <= n = 16") != std::string::npos);
    CHECK(es::testing::agrees_on_every_rank(e));
  }
  const auto coo = es::testing::poisson2d(4, 4);
  const auto R = sp::DSparseTensor::partition(sp::SparseTensor(coo.values, coo.rows, coo.cols, {16, 19}), mesh);
  for (const auto& e : {es::testing::error_of([&] { (void)R.eigsh({.k = 2}); }),
                        es::testing::error_of([&] { (void)R.logdet(); })}) {
    CHECK(e.find("expected a square") != std::string::npos);
    CHECK(e.find("(16, 19)") != std::string::npos);
    CHECK(es::testing::agrees_on_every_rank(e));
  }
}

TEST_CASE("eigsh: the seed's own cases (dense SPD M M^T + n I for k = 1, 4, 8; a clustered top; identity T)",
          "[sparse][eigsh]") {
  const auto mesh = es::testing::world_mesh();
  const auto dense_coo = [](const at::Tensor& A) {
    const auto nz = A.nonzero();
    return Coo{A.index({nz.select(1, 0), nz.select(1, 1)}), nz.select(1, 0).contiguous(), nz.select(1, 1).contiguous(),
               A.size(0)};
  };
  const std::int64_t n = 100;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  const auto Mr = at::randn({n, n}, gen, at::kDouble);
  const auto A = at::matmul(Mr, Mr.transpose(0, 1)) + static_cast<double>(n) * at::eye(n, at::kDouble);
  const auto spectrum = std::get<0>(at::linalg_eigh(A));
  const auto D = es::testing::distribute(dense_coo(A), mesh, sp::PartitionMethod::simple, {});
  for (auto which : {sp::Which::largest_algebraic, sp::Which::smallest_algebraic})
    for (std::int64_t k : {1, 4, 8}) {
      // The seed's bars: eigenvalues to 1e-6 relative, orthonormal vectors, ||A V - V L|| / ||A V||
      // under 1e-4 (at maxiter 400; SA with k = 1 runs a block of 3 and stops at maxiter here).
      const auto e = D.eigsh({.k = k, .which = which, .tol = 1e-10, .maxiter = 400});
      INFO("k " << k << ", iterations " << e.iterations);
      const auto want = select(spectrum, which, k);
      CHECK(max_abs((e.eigenvalues.detach() - want) / want.abs().clamp_min(1.0)) < 1e-6);
      const auto V = e.eigenvectors.full_tensor();
      CHECK(max_abs(at::matmul(V.transpose(0, 1), V) - at::eye(k, at::kDouble)) < 1e-10);
      const auto AV = at::matmul(A, V);
      CHECK((AV - V * e.eigenvalues.detach().unsqueeze(0)).norm().item<double>() / AV.norm().item<double>() < 1e-4);
    }
  // The identity as the preconditioner gives the same answer as none.
  const auto plain = D.eigsh({.k = 3, .which = sp::Which::largest_algebraic, .tol = 1e-10, .maxiter = 400});
  const auto with_t = D.eigsh({.k = 3, .which = sp::Which::largest_algebraic, .tol = 1e-10, .maxiter = 400,
                               .preconditioner = [](const at::Tensor& r) { return r; }});
  CHECK(max_abs(plain.eigenvalues - with_t.eigenvalues) < 1e-8);
  // Near-degenerate top four (the case where a test on eigenvalue changes stops too early): the
  // true Ritz residuals meet the tolerance.
  const std::int64_t m = 400;
  auto gq = at::make_generator<at::CPUGeneratorImpl>(123);
  const auto Q = std::get<0>(at::linalg_qr(at::randn({m, m}, gq, at::kDouble)));
  auto eig = at::logspace(0.0, 4.0, m, 10.0, at::kDouble);
  const auto fifth = eig[m - 5].item<double>();
  for (std::int64_t i = 0; i < 4; ++i) eig[m - 4 + i] = fifth * (1.0 + 0.001 * static_cast<double>(i));
  auto B = at::matmul(Q * eig.unsqueeze(0), Q.transpose(0, 1));
  B = 0.5 * (B + B.transpose(0, 1));
  const auto DB = es::testing::distribute(dense_coo(B), mesh, sp::PartitionMethod::simple, {});
  const double tol = 1e-8;
  const auto e = DB.eigsh({.k = 6, .which = sp::Which::largest_algebraic, .tol = tol, .maxiter = 300});
  CHECK(e.converged);
  const auto V = e.eigenvectors.full_tensor();
  const auto R = at::matmul(B, V) - V * e.eigenvalues.detach().unsqueeze(0);
  CHECK((R.norm(2, {0}) / e.eigenvalues.detach().abs().clamp_min(1e-10)).max().item<double>() < 10 * tol);
}

}  // namespace test_eigsh
