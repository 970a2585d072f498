// LinearOperator: a matrix-free stencil (einhalo) solved by the same code as its assembled matrix
// with every method, with and without a preconditioner, by LSQR and LSMR through its adjoint product
// and with several right-hand sides; and bad input (no adjoint, products that fail or return the
// wrong shape on one rank, a rectangular operator) raised the same on every rank.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>
#include <vector>

#include "einshard/ops/halo.hpp"
#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_operator {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::random_vector;
using es::testing::world_mesh;

/// The relative error of the largest entry (es::testing::rel).
constexpr auto& relative_error = es::testing::rel;

/// poisson2d's matrix without the matrix: the grid (ny rows y of nx points x, unknown y·nx + x) split
/// along y as einshard splits "h/x w", the neighbours' rows by one einhalo (zeros outside the grid:
/// Dirichlet), and the assembled DSparseTensor of the same rows for reference.
struct StencilLaplacian {
  sp::DSparseTensor D;
  sp::LinearOperator A;
};
StencilLaplacian stencil_laplacian(const es::Mesh& mesh, std::int64_t nx, std::int64_t ny) {
  const auto h = es::einshard<"h w -> h/x w">(at::zeros({ny, nx}, at::kDouble), {.mesh = mesh}).size(0);
  std::int64_t first = 0;
  MPI_Exscan(&h, &first, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (es::testing::world().rank == 0) first = 0;  // MPI_Exscan leaves rank 0's undefined
  const auto a = es::testing::poisson2d_rows(nx, ny, first * nx, (first + h) * nx);
  auto D = sp::DSparseTensor::from_local(a.values, a.rows, a.cols, {a.n, a.n}, mesh,
                                         {.owned_rows = at::arange(first * nx, (first + h) * nx, at::kLong)});
  const es::Options halo{.mesh = mesh, .boundary = es::Boundary::constant};
  auto laplacian = [h, nx, halo](const sp::DVector& x) {
    using at::indexing::Slice;
    const auto g = es::einhalo<"h/x w">(x.local().view({h, nx}), {{"h", 1}, {"w", 1}}, halo);
    const auto c = g.index({Slice(1, -1), Slice(1, -1)});
    const auto y = 4 * c - g.index({Slice(0, -2), Slice(1, -1)}) - g.index({Slice(2), Slice(1, -1)}) -
                   g.index({Slice(1, -1), Slice(0, -2)}) - g.index({Slice(1, -1), Slice(2)});
    return x.like(y.reshape({-1}));
  };
  sp::LinearOperator A(D.layout(), laplacian, laplacian);  // symmetric: Aᴴ = A
  return {std::move(D), std::move(A)};
}

int spread(int v) {
  int lo = 0, hi = 0;
  MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return hi - lo;
}

}  // namespace

TEST_CASE("LinearOperator: a matrix-free stencil solves as its assembled matrix, every method", "[sparse][krylov][operator]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 9, ny = 7;  // 8 ranks: one owns no grid row
  const auto stencil = stencil_laplacian(mesh, nx, ny);
  const auto& D = stencil.D;
  const auto& A = stencil.A;
  const auto ref_b = random_vector(nx * ny, 51);
  const auto ref = at::linalg_solve(es::testing::dense(es::testing::poisson2d(nx, ny)), ref_b);
  const auto b = D.scatter(ref_b);
  // The products agree to rounding (the stencil sums in another order).
  CHECK(relative_error(A.matvec(b).full_tensor(), D.matvec(b).full_tensor()) < 1e-14);
  CHECK(relative_error((A * b).full_tensor(), A.rmatvec(b).full_tensor()) == 0.0);
  const sp::PreconditionerFn jacobi = [](const sp::DVector& r) { return 0.25 * r; };
  for (auto m : {sp::Method::cg, sp::Method::gmres, sp::Method::fgmres, sp::Method::minres, sp::Method::bicgstab})
    for (bool precondition : {false, true}) {
      CAPTURE(sp::to_string(m), precondition);
      const sp::SolveOptions o{.method = m, .rtol = 1e-11,
                               .custom_preconditioner = precondition ? jacobi : sp::PreconditionerFn{}};
      const auto s = A.solve(b, o);
      auto od = o;
      od.custom_preconditioner = {};
      od.preconditioner = precondition ? sp::Preconditioner::jacobi : sp::Preconditioner::none;
      const auto sd = D.solve(b, od);
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
      CHECK(relative_error(s.x.full_tensor(), sd.x.full_tensor()) < 1e-9);
      CHECK(std::abs(s.info.iterations - sd.info.iterations) <= 1);
      CHECK(spread(s.info.iterations) == 0);
    }
  // Least squares through the adjoint product: LSQR's and LSMR's iterates are the matrix's.
  const auto lq = A.lsqr(b, {.atol = 1e-12, .btol = 1e-12}), ld = D.lsqr(b, {.atol = 1e-12, .btol = 1e-12});
  CHECK(lq.istop == ld.istop);
  CHECK(std::abs(lq.info.iterations - ld.info.iterations) <= 1);
  CHECK(relative_error(lq.x.full_tensor(), ref) < 1e-8);
  const auto lm = A.lsmr(b, {.damp = 0.1, .atol = 1e-12, .btol = 1e-12}),
             lmd = D.lsmr(b, {.damp = 0.1, .atol = 1e-12, .btol = 1e-12});
  // At atol = btol = 1e-12 LSMR's iterate is within about 2e-8 of the damped solution, and the
  // two products' rounding (stencil, CSR; native or generic kernels) moves it within that.
  const auto Ad = es::testing::dense(es::testing::poisson2d(nx, ny));
  const auto damped = at::linalg_solve(at::mm(Ad.t(), Ad) + 0.01 * at::eye(nx * ny, at::kDouble), at::mv(Ad.t(), ref_b));
  CHECK(std::abs(lm.info.iterations - lmd.info.iterations) <= 1);
  CHECK(relative_error(lm.x.full_tensor(), damped) < 5e-8);
  CHECK(relative_error(lmd.x.full_tensor(), damped) < 5e-8);
  CHECK(relative_error(lm.x.full_tensor(), lmd.x.full_tensor()) < 5e-8);
  // Several right-hand sides: block CG and block GMRES (k coupled recurrences, fused reductions).
  const auto B = at::stack({ref_b, random_vector(nx * ny, 52), at::zeros({nx * ny}, at::kDouble)}, 1);
  for (auto m : {sp::Method::cg, sp::Method::gmres}) {
    const auto X = A.solve(D.scatter(B), {.method = m, .rtol = 1e-11});
    const auto XD = D.solve(D.scatter(B), {.method = m, .rtol = 1e-11});
    CHECK(X.info.columns.size() == 3);
    CHECK(X.info.converged);
    CHECK(relative_error(X.x.full_tensor(), XD.x.full_tensor()) < 1e-9);
    CHECK(X.info.columns[2].reason == sp::StopReason::zero_rhs);
  }
}

TEST_CASE("LinearOperator: bad input raises the same error on every rank", "[sparse][krylov][operator][errors]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 6, ny = 5;
  const auto stencil = stencil_laplacian(mesh, nx, ny);
  const auto& D = stencil.D;
  const auto& A = stencil.A;
  const auto b = D.scatter(random_vector(nx * ny, 53));
  const auto product = [&D](const sp::DVector& x) { return D.matvec(x); };
  const sp::LinearOperator no_adjoint(D.layout(), product);
  CHECK_FALSE(no_adjoint.has_adjoint());
  CHECK(no_adjoint.solve(b, {.rtol = 1e-10}).info.converged);
  CHECK_THROWS_WITH(no_adjoint.lsqr(b), Catch::Contains("no adjoint product") && Catch::Contains("lsqr"));
  CHECK_THROWS_WITH(no_adjoint.lsmr(b), Catch::Contains("no adjoint product"));
  CHECK_THROWS_WITH(no_adjoint.rmatvec(b), Catch::Contains("no adjoint product"));
  // An adjoint on some ranks only: refused together, not a hang.
  const int p = es::testing::world().size, me = es::testing::world().rank;
  const sp::LinearOperator some(D.layout(), product, me == 0 ? sp::ProductFn(product) : sp::ProductFn());
  if (p > 1) CHECK_THROWS_WITH(some.lsqr(b), Catch::Contains("no adjoint product"));
  // A product that returns a block, or throws, on the last rank only (after taking part in the
  // halo exchange, which its neighbours wait for).
  const sp::LinearOperator wrong(D.layout(), [&](const sp::DVector& x) {
    auto y = D.matvec(x);
    if (me == p - 1) return sp::DVector(D.layout(), at::zeros({x.local_size(), 2}, at::kDouble));
    return y;
  });
  CHECK_THROWS_WITH(wrong.solve(b), Catch::Contains("matvec must return a vector of"));
  const sp::LinearOperator throwing(D.layout(), [&](const sp::DVector& x) {
    auto y = D.matvec(x);
    if (me == p - 1) throw es::Error("boundary data missing");
    return y;
  });
  CHECK_THROWS_WITH(throwing.solve(b, {.method = sp::Method::gmres}),
                    Catch::Contains("matvec failed: boundary data missing") &&
                        Catch::Contains(p > 1 ? "rank " + std::to_string(p - 1) : std::string()));
  // A built-in preconditioner needs entries; b of another size; square-only methods on a
  // rectangular operator.
  CHECK_THROWS_WITH(A.solve(b, {.preconditioner = sp::Preconditioner::jacobi}),
                    Catch::Contains("custom_preconditioner"));
  CHECK_THROWS_WITH(A.solve(sp::DVector(sp::RowLayout::simple(7, MPI_COMM_WORLD),
                                        sp::RowLayout::simple(7, MPI_COMM_WORLD)->scatter(at::ones({7}, at::kDouble)))),
                    Catch::Contains("operator's range (30 rows)"));
  const auto wide = sp::RowLayout::simple(2 * nx * ny, MPI_COMM_WORLD);
  const sp::LinearOperator rect(D.layout(), wide, [&](const sp::DVector& x) { return x; });
  for (auto m : {sp::Method::cg, sp::Method::gmres, sp::Method::minres})
    CHECK_THROWS_WITH(rect.solve(b, {.method = m}), Catch::Contains("needs a square operator") &&
                                                        Catch::Contains("(30, 60)"));
  CHECK_THROWS_AS(sp::LinearOperator(D.layout(), sp::ProductFn()), es::Error);
}

}  // namespace test_operator
