// Rectangular DSparseTensor (range and domain partitions, matvec, rmatvec) and LSQR / LSMR
// against a dense least-squares solve on one process: over- and underdetermined, damped, complex,
// x0, uneven and empty shards, the same iteration count as the one-process run of the method, and
// bad input raised identically on every rank. Also SciPy's own numbers on a fixed problem, the
// seed's cases through `solve` (method lsqr / lsmr in a SolverConfig, its advection-diffusion
// matrix with duplicate entries on an rcb partition), and gradients of every least-squares entry.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_least_squares {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::rel;
using es::testing::sum_over_ranks;
using es::testing::world_mesh;

es::Mesh self_mesh() { return es::Mesh(MPI_COMM_SELF, {1}, {"x"}); }

/// A seeded m x n sparse matrix (about `density` of the entries, plus a scaled identity band so
/// it has full rank and a moderate condition number), dense, identical on every rank.
at::Tensor random_rect(std::int64_t m, std::int64_t n, double density, std::uint64_t seed,
                       at::ScalarType dtype = at::kDouble) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto a = at::randn({m, n}, gen, dtype) * (at::rand({m, n}, gen, at::kDouble) < density).to(dtype);
  const auto k = std::min(m, n);
  const auto i = at::arange(k, at::kLong);
  const auto band = m >= n ? i * (m / n) : i;          // spread the band over the long side
  const auto col = m >= n ? i : i * (n / m);
  a.index_put_({band, col}, a.index({band, col}) + 3.0);
  return a;
}

int comm_size(MPI_Comm c) { int s = 0; MPI_Comm_size(c, &s); return s; }
int comm_rank(MPI_Comm c) { int s = 0; MPI_Comm_rank(c, &s); return s; }

/// The matrix `a` assembled by from_local. `skew`: each rank owns the rows r, r + p, r + 2p, ...
/// (non-contiguous, uneven) and hands in those of the next rank (so entries travel to their
/// owner); the columns go unevenly: rank 0 owns none, the last rank half, the others share the
/// rest in blocks. Otherwise both partitions are contiguous blocks.
sp::DSparseTensor distribute(const at::Tensor& a, const es::Mesh& mesh, bool skew) {
  const int p = comm_size(mesh.comm()), r = comm_rank(mesh.comm());
  const auto m = a.size(0), n = a.size(1);
  const auto nz = a.nonzero();
  const auto rows = nz.select(1, 0).contiguous(), cols = nz.select(1, 1).contiguous();
  const auto vals = a.index({rows, cols});
  // Each entry handed in once: by the rank after its row's residue.
  const auto pick = (at::remainder(rows, p) == (r + 1) % p).nonzero().flatten();
  const auto v = vals.index_select(0, pick), i = rows.index_select(0, pick), j = cols.index_select(0, pick);
  if (!skew) return sp::DSparseTensor::from_local(v, i, j, {m, n}, mesh);
  const auto owned_rows = at::arange(std::min<std::int64_t>(r, m), m, p, at::kLong);  // none past row m - 1
  at::Tensor owned_cols = at::arange(n, at::kLong);
  if (p == 2) owned_cols = r == 0 ? at::arange(0, at::kLong) : at::arange(n, at::kLong);
  if (p > 2) {
    const auto rest = n - n / 2, q = static_cast<std::int64_t>(p - 2);
    owned_cols = r == 0       ? at::arange(0, at::kLong)
                 : r == p - 1 ? at::arange(rest, n, at::kLong)
                              : at::arange(rest * (r - 1) / q, rest * r / q, at::kLong);
  }
  return sp::DSparseTensor::from_local(v, i, j, {m, n}, mesh, {.owned_rows = owned_rows, .owned_cols = owned_cols});
}

/// argmin ‖A x − b‖² + damp² ‖x‖² (the minimum-norm one), densely on one process.
at::Tensor dense_lstsq(const at::Tensor& a, const at::Tensor& b, double damp) {
  const auto n = a.size(1);
  const auto aa = at::cat({a, damp * at::eye(n, a.options())});
  const auto bb = at::cat({b, at::zeros({n}, b.options())});
  return at::linalg_pinv(aa).matmul(bb);
}

using Method = sp::LeastSquaresResult (sp::DSparseTensor::*)(const sp::DVector&, const sp::LeastSquaresOptions&) const;

}  // namespace

TEST_CASE("rectangular DSparseTensor: shape, matvec and rmatvec against dense products", "[sparse][lsq]") {
  const auto mesh = world_mesh();
  for (const auto& [m, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{{31, 12}, {9, 26}}) {
    const auto a = random_rect(m, n, 0.2, 5);
    for (const bool skew : {false, true}) {
      const auto D = distribute(a, mesh, skew);
      CHECK(D.shape() == std::array<std::int64_t, 2>{m, n});
      CHECK_FALSE(D.is_square());
      CHECK(D.global_nnz() == a.ne(0).sum().item<std::int64_t>());
      auto gen = at::make_generator<at::CPUGeneratorImpl>(17);  // the same vectors on every rank
      const auto x = at::randn({n}, gen, at::kDouble), y = at::randn({m}, gen, at::kDouble);
      const auto dx = D.scatter(x), dy = D.scatter(y);
      CHECK(dx.layout() == D.domain_layout());
      CHECK(dy.layout() == D.layout());
      CHECK(rel(D.matvec(dx).full_tensor(), a.matmul(x)) < 1e-13);
      CHECK(rel(D.rmatvec(dy).full_tensor(), a.t().matmul(y)) < 1e-13);
      CHECK(rel(D.sum(0).full_tensor(), a.sum(0)) < 1e-13);
      CHECK(rel(D.sum(1).full_tensor(), a.sum(1)) < 1e-13);
      CHECK(std::abs(D.norm("1") - a.abs().sum(0).max().item<double>()) < 1e-12);
      // Gradients of both products reach the vector and the stored values.
      const auto xg = dx.local().clone().requires_grad_(true);
      const auto loss = (D.matvec(D.domain_zeros().like(xg)).full_tensor() * at::arange(m, at::kDouble)).sum();
      loss.backward();
      CHECK(rel(D.domain_zeros().like(xg.grad()).full_tensor(), a.t().matmul(at::arange(m, at::kDouble))) < 1e-13);
    }
  }
}

TEST_CASE("LSQR and LSMR match a dense least-squares solve, damped or not", "[sparse][lsq]") {
  const auto mesh = world_mesh();
  struct Case {
    std::int64_t m, n;
    double damp;
  };
  for (const auto c : {Case{40, 17, 0.0}, Case{40, 17, 0.7}, Case{11, 30, 0.0}, Case{11, 30, 0.3}}) {
    const auto a = random_rect(c.m, c.n, 0.15, 11 + static_cast<std::uint64_t>(c.m));
    const auto b = at::randn({c.m}, at::make_generator<at::CPUGeneratorImpl>(3), at::kDouble);
    const auto ref = dense_lstsq(a, b, c.damp);
    for (const auto method : {&sp::DSparseTensor::lsqr, &sp::DSparseTensor::lsmr}) {
      const bool is_lsqr = method == static_cast<Method>(&sp::DSparseTensor::lsqr);
      INFO((is_lsqr ? "lsqr" : "lsmr") << " m " << c.m << " n " << c.n << " damp " << c.damp);
      const sp::LeastSquaresOptions o{.damp = c.damp, .atol = 1e-12, .btol = 1e-12, .maxiter = 400};
      const auto D = distribute(a, mesh, true);
      const auto r = (D.*method)(D.scatter(b), o);
      CHECK(r.info.converged);
      CHECK((r.istop == 1 || r.istop == 2 || r.istop == 4 || r.istop == 5));
      CHECK(r.x.layout() == D.domain_layout());
      const auto x = r.x.full_tensor();
      CHECK(rel(x, ref) < 1e-8);
      // The estimates against the same quantities computed densely.
      const auto res = b - a.matmul(x);
      CHECK(std::abs(r.normx - x.norm().item<double>()) < 1e-6 * x.norm().item<double>());
      const double r2 = std::sqrt(res.square().sum().item<double>() + c.damp * c.damp * x.square().sum().item<double>());
      CHECK(std::abs(r.r2norm - r2) < 1e-6 * b.norm().item<double>());
      // normr is SciPy's of each method: lsqr's r1norm ‖b − A x‖, lsmr's damped normr.
      CHECK(std::abs(r.normr - (is_lsqr ? res.norm().item<double>() : r2)) < 1e-6 * b.norm().item<double>());
      CHECK(r.norma > 0.0);
      CHECK(r.conda >= 1.0);
      CHECK(r.info.residual_history.size() == static_cast<std::size_t>(r.info.iterations) + 1);
      // The one-process run of the same method takes the same path up to rounding.
      const auto S = distribute(a, self_mesh(), false);
      const auto s = (S.*method)(S.scatter(b), o);
      CHECK(std::abs(s.info.iterations - r.info.iterations) <= std::max(1, s.info.iterations / 20));
      CHECK(rel(s.x.full_tensor(), x) < 1e-9);
    }
  }
}

TEST_CASE("LSQR and LSMR on a LinearOperator: a rectangular product you bring, complex too", "[sparse][lsq][operator]") {
  const auto mesh = world_mesh();
  for (const auto dtype : {at::kDouble, at::kComplexDouble}) {
    const auto a = random_rect(33, 14, 0.2, 21, dtype);
    const auto b = at::randn({33}, at::make_generator<at::CPUGeneratorImpl>(4), dtype);
    // The matrix with uneven, non-contiguous partitions, seen only through its two products.
    const auto D = distribute(a, mesh, true);
    const auto H = D.adjoint();
    const sp::LinearOperator A(
        D.layout(), D.domain_layout(), [&D](const sp::DVector& x) { return D.matvec(x); },
        [&H](const sp::DVector& y) { return H.matvec(sp::DVector(H.domain_layout(), y.local())); });
    CHECK(A.shape() == std::array<std::int64_t, 2>{33, 14});
    const auto y = D.scatter(b);
    CHECK(rel(A.rmatvec(y).full_tensor(), a.conj().t().matmul(b)) < 1e-13);
    for (const double damp : {0.0, 0.5}) {
      CAPTURE(damp, c10::toString(dtype));
      const sp::LeastSquaresOptions o{.damp = damp, .atol = 1e-12, .btol = 1e-12};
      const auto ref = dense_lstsq(a, b, damp);
      const auto q = A.lsqr(y, o), qd = D.lsqr(y, o);
      CHECK(q.info.converged);
      CHECK(q.x.layout() == D.domain_layout());
      CHECK(rel(q.x.full_tensor(), ref) < 1e-8);
      CHECK(std::abs(q.info.iterations - qd.info.iterations) <= 1);
      const auto l = A.lsmr(y, o), ld = D.lsmr(y, o);
      CHECK(rel(l.x.full_tensor(), ref) < 1e-8);
      CHECK(std::abs(l.info.iterations - ld.info.iterations) <= 1);
    }
    // b of the domain, x0 of the range: refused by size on every rank.
    CHECK_THROWS_WITH(A.lsqr(D.domain_zeros()), Catch::Contains("operator's range (33 rows)"));
    CHECK_THROWS_WITH(A.lsmr(y, {.x0 = y}), Catch::Contains("operator's domain (14 rows)"));
    CHECK_THROWS_WITH(A.lsqr(y, {.btol = -1.0}), Catch::Contains("btol"));
  }
}

TEST_CASE("LSQR and LSMR on a complex rectangular matrix, with x0", "[sparse][lsq]") {
  const auto mesh = world_mesh();
  const std::int64_t m = 33, n = 14;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  const auto a = random_rect(m, n, 0.2, 8, at::kComplexDouble) +
                 at::complex(at::zeros({m, n}, at::kDouble), random_rect(m, n, 0.1, 9));
  const auto b = at::randn({m}, gen, at::kComplexDouble);
  const auto x0 = at::randn({n}, gen, at::kComplexDouble);
  const auto D = distribute(a, mesh, true);
  for (const auto method : {&sp::DSparseTensor::lsqr, &sp::DSparseTensor::lsmr}) {
    const auto r = (D.*method)(D.scatter(b), {.damp = 0.2, .atol = 1e-12, .btol = 1e-12});
    CHECK(r.info.converged);
    CHECK(rel(r.x.full_tensor(), dense_lstsq(a, b, 0.2)) < 1e-8);
    // With x0 the iteration solves for the correction (damping applies to it, as in SciPy), so
    // without damping the minimizer is the same.
    const auto s = (D.*method)(D.scatter(b), {.atol = 1e-12, .btol = 1e-12, .x0 = D.scatter(x0)});
    CHECK(s.info.converged);
    CHECK(rel(s.x.full_tensor(), dense_lstsq(a, b, 0.0)) < 1e-8);
  }
}

TEST_CASE("LSQR and LSMR stop codes: b = 0, maxiter, conlim, a compatible system", "[sparse][lsq]") {
  const auto mesh = world_mesh();
  const std::int64_t m = 25, n = 10;
  const auto a = random_rect(m, n, 0.3, 2);
  const auto D = distribute(a, mesh, true);
  for (const auto method : {&sp::DSparseTensor::lsqr, &sp::DSparseTensor::lsmr}) {
    // b = 0: x = 0 exactly, whatever x0 was.
    const auto z = (D.*method)(D.zeros(), {.x0 = D.scatter(at::ones({n}, at::kDouble))});
    CHECK(z.istop == 0);
    CHECK(z.info.reason == sp::StopReason::zero_rhs);
    CHECK(z.x.full_tensor().abs().max().item<double>() == 0.0);
    // maxiter.
    const auto b = at::randn({m}, at::make_generator<at::CPUGeneratorImpl>(4), at::kDouble);
    const auto t = (D.*method)(D.scatter(b), {.atol = 1e-14, .btol = 1e-14, .maxiter = 3});
    CHECK(t.istop == 7);
    CHECK(t.info.reason == sp::StopReason::maxiter);
    CHECK_FALSE(t.info.converged);
    CHECK(t.info.iterations == 3);
    // A condition limit below cond(A) stops with istop 3.
    const auto c = (D.*method)(D.scatter(b), {.atol = 1e-14, .btol = 1e-14, .conlim = 1.5});
    CHECK(c.istop == 3);
    CHECK(c.info.reason == sp::StopReason::breakdown);
    // b in the range of A: a compatible system, stopped by btol (istop 1), ‖r‖ tiny.
    const auto xs = at::randn({n}, at::make_generator<at::CPUGeneratorImpl>(5), at::kDouble);
    const auto e = (D.*method)(D.scatter(a.matmul(xs)), {.atol = 1e-10, .btol = 1e-10});
    CHECK(e.istop == 1);
    CHECK(rel(e.x.full_tensor(), xs) < 1e-7);
  }
}

TEST_CASE("rectangular matrices: bad input raises the same error on every rank", "[sparse][lsq]") {
  const auto mesh = world_mesh();
  const std::int64_t m = 20, n = 8;
  const auto a = random_rect(m, n, 0.3, 6);
  const auto D = distribute(a, mesh, false);
  const auto b = D.scatter(at::ones({m}, at::kDouble));
  // A square-only method on a rectangular matrix.
  for (const auto method : {sp::Method::cg, sp::Method::gmres, sp::Method::bicgstab, sp::Method::minres})
    CHECK_THROWS_WITH(D.solve(b, {.method = method}), Catch::Contains("needs a square matrix") &&
                                                          Catch::Contains("(20, 8)"));
  // b from the domain, x0 from the range, bad options.
  CHECK_THROWS_WITH(D.lsqr(D.domain_zeros()), Catch::Contains("range") && Catch::Contains("20 rows"));
  CHECK_THROWS_WITH(D.lsmr(b, {.x0 = b}), Catch::Contains("domain") && Catch::Contains("8 rows"));
  CHECK_THROWS_WITH(D.lsqr(b, {.damp = -1.0}), Catch::Contains("damp"));
  CHECK_THROWS_WITH(D.matvec(b), Catch::Contains("matvec") && Catch::Contains("domain"));
  CHECK_THROWS_WITH(D.rmatvec(D.domain_zeros()), Catch::Contains("rmatvec"));
  // Indices out of the column range, and a graph partitioner for a rectangular matrix.
  const auto idx = at::zeros({1}, at::kLong);
  CHECK_THROWS_WITH(sp::DSparseTensor::from_local(at::ones({1}, at::kDouble), idx, idx + n, {m, n}, mesh),
                    Catch::Contains("column index 8 is out of range [0, 8)"));
  const auto A = sp::SparseTensor::from_dense(a);
  CHECK_THROWS_WITH(sp::DSparseTensor::partition(A, mesh, {.method = sp::PartitionMethod::metis}),
                    Catch::Contains("rectangular"));
  const auto P = sp::DSparseTensor::partition(A, mesh);
  CHECK(rel(P.lsqr(P.scatter(at::ones({m}, at::kDouble)), {.atol = 1e-12, .btol = 1e-12}).x.full_tensor(),
            dense_lstsq(a, at::ones({m}, at::kDouble), 0.0)) < 1e-8);
  // A square matrix whose columns are partitioned unlike its rows: least squares only.
  const auto q = random_rect(12, 12, 0.3, 7);
  const int p = comm_size(MPI_COMM_WORLD), r = comm_rank(MPI_COMM_WORLD);
  const auto nz = q.nonzero();
  const auto rows = nz.select(1, 0).contiguous(), cols = nz.select(1, 1).contiguous();
  const auto mine = (at::remainder(rows, p) == r).nonzero().flatten();
  const auto Q = sp::DSparseTensor::from_local(q.index({rows, cols}).index_select(0, mine), rows.index_select(0, mine),
                                               cols.index_select(0, mine), {12, 12}, mesh,
                                               {.owned_cols = at::arange(std::min(p - 1 - r, 12), 12, p, at::kLong)});
  if (p > 1) CHECK_THROWS_WITH(Q.solve(Q.scatter(at::ones({12}, at::kDouble))), Catch::Contains("partitioned as the rows"));
}

namespace {

/// The fixed m x n matrix of the SciPy reference below: a_ij = sin(i + 2j) where (7i + 3j) % 5 = 0,
/// plus 2 on the diagonal; and b_i = cos(0.3 i).
at::Tensor scipy_matrix(std::int64_t m, std::int64_t n) {
  const auto i = at::arange(m, at::kDouble).unsqueeze(1), j = at::arange(n, at::kDouble).unsqueeze(0);
  auto a = at::where(at::remainder(7 * i + 3 * j, 5) == 0, at::sin(i + 2 * j), at::zeros({1}, at::kDouble));
  const auto k = at::arange(std::min(m, n), at::kLong);
  a.index_put_({k, k}, a.index({k, k}) + 2.0);
  return a.contiguous();
}

/// The entries of the rows this rank owns under from_local's default (contiguous row blocks), so
/// every value's gradient is on the rank that handed it in.
struct Share {
  at::Tensor values, rows, cols;
};
Share owner_share(const at::Tensor& a) {
  const auto [first, last] = sp::simple_rows(a.size(0), MPI_COMM_WORLD);
  const auto nz = a.nonzero();
  const auto rows = nz.select(1, 0).contiguous(), cols = nz.select(1, 1).contiguous();
  const auto pick = ((rows >= first) & (rows < last)).nonzero().flatten();
  const auto r = rows.index_select(0, pick), c = cols.index_select(0, pick);
  return {a.index({r, c}), r, c};
}

/// The seed's datasets.advection_diffusion_2d(m, peclet): (1/h²) 5-point diffusion plus upwind
/// convection Pe/h toward (i−1, j) and (i, j−1), the convection entries stored separately (duplicates).
es::testing::Coo advection_diffusion(std::int64_t m, double peclet) {
  const double h = 1.0 / static_cast<double>(m + 1), d = 1.0 / (h * h), c = peclet / h;
  std::vector<std::int64_t> r, q;
  std::vector<double> v;
  const auto add = [&](std::int64_t i, std::int64_t j, double x) { r.push_back(i); q.push_back(j); v.push_back(x); };
  for (std::int64_t y = 0; y < m; ++y)
    for (std::int64_t x = 0; x < m; ++x) {
      const auto i = y * m + x;
      add(i, i, 4 * d + 2 * c);
      if (x > 0) { add(i, i - 1, -d); add(i, i - 1, -c); }
      if (y > 0) { add(i, i - m, -d); add(i, i - m, -c); }
      if (x + 1 < m) add(i, i + 1, -d);
      if (y + 1 < m) add(i, i + m, -d);
    }
  const auto k = static_cast<std::int64_t>(v.size());
  return {at::tensor(v, at::kDouble).view({k}), at::tensor(r, at::kLong).view({k}), at::tensor(q, at::kLong).view({k}),
          m * m};
}

}  // namespace

TEST_CASE("LSQR and LSMR against SciPy's own results: istop, itn, normr, normar, norma, conda, normx, x",
          "[sparse][lsq][scipy]") {
  // The reference came from SciPy 1.x on the same matrix (scipy_matrix) with atol = btol = 1e-10:
  //   x, istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm, _ = lsqr(A, b, damp=damp, atol=1e-10, btol=1e-10)
  //   x, istop, itn, normr, normar, norma, conda, normx = lsmr(A, b, damp=damp, atol=1e-10, btol=1e-10)
  // (`normr` is SciPy's of each method: lsqr's r1norm, lsmr's damped one.)
  struct Ref {
    bool lsqr;
    std::int64_t m, n;
    double damp;
    int istop, itn;
    double normr, r2norm, normar, norma, conda, normx, x_first, x_last;
  };
  const std::vector<Ref> refs{
      {true, 50, 25, 0.5, 2, 14, 2.314153785951454, 2.465561651467104, 1.8254933827602995e-09, 13.530989938035862,
       20.610099480640294, 1.7013953240228994, 0.650191546679872, 0.14295785363461527},
      {false, 50, 25, 0.5, 2, 14, 2.465561651467104, 2.465561651467104, 1.8254802313978767e-09, 13.401033120742138,
       2.5515252987741097, 1.7013953240228994, 0.6501915466797665, 0.1429578536338914},
      {true, 50, 25, 0.0, 2, 16, 2.300525063024291, 2.300525063024291, 5.989154944154848e-11, 14.097730198136038,
       24.500024547102623, 1.8505971137825799, 0.6974738261617037, 0.16946908191065088},
      {false, 50, 25, 0.0, 2, 15, 2.300525063024291, 2.300525063024291, 2.550039617949575e-09, 13.549985124810046,
       2.6483202042215175, 1.85059711378258, 0.6974738265385185, 0.16946908161783536},
      {true, 20, 45, 0.3, 2, 19, 0.05656432985382204, 0.3509342459639019, 1.5089986787806687e-11, 12.916422345795397,
       25.673447901435413, 1.1544855592111647, 0.279537028972183, -0.18383896162819502},
      {false, 20, 45, 0.3, 2, 19, 0.3509342459639018, 0.3509342459639018, 1.5084742466718203e-11, 12.850057051039213,
       2.5214178976521775, 1.1544855592111654, 0.2795370289721762, -0.18383896162817617},
  };
  const auto mesh = world_mesh();
  for (const auto& f : refs) {
    INFO((f.lsqr ? "lsqr" : "lsmr") << " " << f.m << " x " << f.n << " damp " << f.damp);
    const auto a = scipy_matrix(f.m, f.n);
    const auto b = at::cos(0.3 * at::arange(f.m, at::kDouble));
    for (const bool skew : {false, true}) {
      const auto D = distribute(a, mesh, skew);
      const sp::LeastSquaresOptions o{.damp = f.damp, .atol = 1e-10, .btol = 1e-10};
      const auto r = f.lsqr ? D.lsqr(D.scatter(b), o) : D.lsmr(D.scatter(b), o);
      CHECK(r.istop == f.istop);
      CHECK(std::abs(r.info.iterations - f.itn) <= 1);
      CHECK(std::abs(r.normr - f.normr) < 1e-9 * f.normr);
      CHECK(std::abs(r.r2norm - f.r2norm) < 1e-9 * f.r2norm);
      CHECK(r.normar < 1e-8);  // at the tolerance: its digits are rounding
      CHECK(std::abs(r.norma - f.norma) < 1e-9 * f.norma);
      CHECK(std::abs(r.conda - f.conda) < 1e-6 * f.conda);
      CHECK(std::abs(r.normx - f.normx) < 1e-9 * f.normx);
      const auto x = r.x.full_tensor();
      CHECK(std::abs(x[0].item<double>() - f.x_first) < 1e-8);
      CHECK(std::abs(x[f.n - 1].item<double>() - f.x_last) < 1e-8);
    }
  }
}

TEST_CASE("solve with lsqr and lsmr: the seed's SolverConfig case, rectangular, several right-hand sides",
          "[sparse][lsq][solver_config]") {
  const auto mesh = world_mesh();
  // The seed's distributed test: advection-diffusion 16², an rcb partition, SolverConfig(method,
  // atol = rtol = 1e-12, maxiter = 2000), then solve(D, b).
  const auto coo = advection_diffusion(16, 20.0);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto dense = es::testing::dense(coo);
  const auto b = at::randn({coo.n}, at::make_generator<at::CPUGeneratorImpl>(0), at::kDouble);
  const auto ref = at::linalg_solve(dense, b);
  for (const auto part : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
    const auto D = sp::DSparseTensor::partition(A, mesh, {.method = part, .coords = es::testing::grid_coords(16, 16)});
    for (const auto method : {sp::Method::lsqr, sp::Method::lsmr}) {
      CAPTURE(sp::to_string(method), static_cast<int>(part));
      const sp::SolverConfig scope({.method = method, .rtol = 1e-12, .atol = 1e-12, .maxiter = 2000});
      const auto db = D.scatter(b);
      const auto s = D.solve(db);
      CHECK(s.info.converged);
      const auto res = (db - D.matvec(s.x)).full_tensor();
      CHECK(res.norm().item<double>() < 1e-6 * b.norm().item<double>());
      CHECK(es::testing::relative_error(s.x.full_tensor(), ref) < 1e-6);
      // The same as the method's own entry with the mapped options (btol := rtol).
      const sp::LeastSquaresOptions lo{.atol = 1e-12, .btol = 1e-12, .maxiter = 2000};
      const auto own = method == sp::Method::lsqr ? D.lsqr(db, lo) : D.lsmr(db, lo);
      CHECK(own.info.iterations == s.info.iterations);
      CHECK(rel(own.x.full_tensor(), s.x.full_tensor()) < 1e-12);
      // A preconditioner is refused on every rank.
      CHECK_THROWS_WITH(D.solve(db, {.preconditioner = sp::Preconditioner::jacobi}),
                        Catch::Contains("takes no preconditioner"));
    }
  }
  // Rectangular, through solve: the least-squares solution; a 3-column block, column by column.
  const auto r = random_rect(37, 15, 0.2, 31);
  const auto R = distribute(r, mesh, true);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
  const auto B = at::randn({37, 3}, gen, at::kDouble);
  B.select(1, 1).zero_();
  for (const auto method : {sp::Method::lsqr, sp::Method::lsmr}) {
    CAPTURE(sp::to_string(method));
    const auto one = R.solve(R.scatter(B.select(1, 0).contiguous()), {.method = method, .rtol = 1e-12, .atol = 1e-12});
    CHECK(one.x.layout() == R.domain_layout());
    CHECK(rel(one.x.full_tensor(), dense_lstsq(r, B.select(1, 0), 0.0)) < 1e-8);
    const auto blk = R.solve(R.scatter(B), {.method = method, .rtol = 1e-12, .atol = 1e-12});
    REQUIRE(blk.info.columns.size() == 3);
    CHECK(blk.info.columns[1].reason == sp::StopReason::zero_rhs);
    CHECK(blk.info.converged);
    const auto X = blk.x.full_tensor();
    for (std::int64_t j = 0; j < 3; ++j)
      CHECK((X.select(1, j) - dense_lstsq(r, B.select(1, j), 0.0)).abs().max().item<double>() < 1e-8);
  }
}

TEST_CASE("least-squares gradients: lsqr / lsmr with damp, rectangular solve, square solve by lsqr",
          "[sparse][lsq][solve_autograd]") {
  const auto mesh = world_mesh();
  struct Case {
    std::int64_t m, n;
    double damp;
    int entry;  // 0: D.lsqr, 1: D.lsmr, 2: D.solve(lsqr), 3: D.solve(lsmr)
  };
  const std::vector<Case> cases{{40, 17, 0.5, 0}, {40, 17, 0.5, 1}, {12, 30, 0.3, 0}, {40, 17, 0.0, 1},
                                {40, 17, 0.0, 2}, {40, 17, 0.0, 3}, {23, 23, 0.0, 2}, {23, 23, 0.0, 3}};
  for (const auto& c : cases) {
    CAPTURE(c.m, c.n, c.damp, c.entry);
    const auto a = random_rect(c.m, c.n, 0.2, 40 + static_cast<std::uint64_t>(c.m));
    const auto share = owner_share(a);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const auto b = at::randn({c.m}, gen, at::kDouble).requires_grad_(true);
    const auto weights = at::randn({c.n}, gen, at::kDouble);
    const auto v = share.values.clone().requires_grad_(true);
    const auto run = [&](const at::Tensor& values, const at::Tensor& rhs) {
      const auto D = sp::DSparseTensor::from_local(values, share.rows, share.cols, {c.m, c.n}, mesh);
      const auto db = D.scatter(rhs);
      const sp::LeastSquaresOptions lo{.damp = c.damp, .atol = 1e-13, .btol = 1e-13, .maxiter = 1000};
      const sp::SolveOptions so{.method = c.entry == 2 ? sp::Method::lsqr : sp::Method::lsmr, .rtol = 1e-13,
                                .atol = 1e-13, .maxiter = 1000};
      const auto x = c.entry == 0 ? D.lsqr(db, lo).x : c.entry == 1 ? D.lsmr(db, lo).x : D.solve(db, so).x;
      return (x.full_tensor() * weights).sum();
    };
    const auto loss = run(v, b);
    loss.backward();
    // Dense: x = (AᵀA + damp² I)⁻¹ Aᵀ b, differentiated by torch.
    const auto ad = a.clone().requires_grad_(true);
    const auto bd = b.detach().clone().requires_grad_(true);
    const auto normal = ad.t().matmul(ad) + c.damp * c.damp * at::eye(c.n, at::kDouble);
    const auto dense_loss = (at::linalg_solve(normal, ad.t().matmul(bd)) * weights).sum();
    dense_loss.backward();
    CHECK(std::abs(loss.item<double>() - dense_loss.item<double>()) < 1e-8 * std::max(1.0, std::abs(dense_loss.item<double>())));
    CHECK(rel(sum_over_ranks(b.grad()), bd.grad()) < 1e-6);
    if (v.numel() > 0) CHECK(rel(v.grad(), ad.grad().index({share.rows, share.cols})) < 1e-6);
    // Central differences along one direction of the values, every rank at once.
    const double h = 1e-6;
    const auto dir = at::randn({v.numel()}, at::make_generator<at::CPUGeneratorImpl>(3 + es::testing::world().rank),
                               at::kDouble);
    const auto at_t = [&](double t) {
      at::NoGradGuard guard;
      return run(share.values + t * dir, b.detach()).item<double>();
    };
    const double fd = (at_t(h) - at_t(-h)) / (2 * h);
    double directional = v.numel() > 0 ? (v.grad() * dir).sum().item<double>() : 0.0;
    MPI_Allreduce(MPI_IN_PLACE, &directional, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(std::abs(fd - directional) < 1e-5 * std::max(1.0, std::abs(directional)));
  }
}

}  // namespace test_least_squares
