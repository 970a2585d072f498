// BiCGStab, GMRES(m) and MINRES against a dense one-process solve: nonsymmetric
// (convection-diffusion, complex) and symmetric indefinite matrices, every preconditioner that
// applies, restarts, x0, b = 0, maxiter, rank invariance across partition methods, and the
// breakdowns reported identically on every rank.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

es::Mesh world_mesh() { return es::Mesh(MPI_COMM_WORLD, {es::testing::world().size}, {"x"}); }

at::Tensor global_vector(std::int64_t n, std::uint64_t seed, at::ScalarType dtype = at::kDouble) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({n}, gen, dtype);
}

double relative_error(const at::Tensor& x, const at::Tensor& ref) {
  return (x - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

/// 2-D convection-diffusion: the 5-point Laplacian plus a central difference of c·∂x (nonsymmetric).
es::testing::Coo convection_diffusion(std::int64_t nx, std::int64_t ny, double c) {
  auto a = es::testing::poisson2d(nx, ny);
  const auto east = a.cols == a.rows + 1, west = a.cols == a.rows - 1;
  a.values = a.values + c * east.to(at::kDouble) - c * west.to(at::kDouble);
  return a;
}

/// The Laplacian shifted by -sigma: symmetric, indefinite for sigma inside its spectrum.
es::testing::Coo shifted_laplacian(std::int64_t nx, std::int64_t ny, double sigma) {
  auto a = es::testing::poisson2d(nx, ny);
  a.values = a.values - sigma * (a.rows == a.cols).to(at::kDouble);
  return a;
}

sp::DSparseTensor distribute(const es::testing::Coo& a, const es::Mesh& mesh, sp::PartitionMethod method,
                             std::int64_t nx, std::int64_t ny) {
  const sp::SparseTensor A(a.values, a.rows, a.cols, {a.n, a.n});
  return sp::DSparseTensor::partition(A, mesh, {.method = method, .coords = es::testing::grid_coords(nx, ny)});
}

}  // namespace

TEST_CASE("BiCGStab and GMRES solve a nonsymmetric system with every preconditioner", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 14, ny = 11;
  const auto coo = convection_diffusion(nx, ny, 0.6);
  const auto ref_b = global_vector(coo.n, 41);
  const auto ref = at::linalg_solve(es::testing::dense(coo), ref_b);
  using P = sp::Preconditioner;
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
    const auto D = distribute(coo, mesh, method, nx, ny);
    for (auto m : {sp::Method::bicgstab, sp::Method::gmres})
      for (auto pc : {P::none, P::jacobi, P::l1_jacobi, P::block_jacobi}) {
        CAPTURE(sp::to_string(m), static_cast<int>(pc), static_cast<int>(method));
        const auto s = D.solve(D.scatter(ref_b), {.method = m, .preconditioner = pc, .rtol = 1e-11});
        CHECK(s.info.converged);
        CHECK(s.info.reason == sp::StopReason::converged_rtol);
        CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
        CHECK(s.info.residual_history.size() == static_cast<std::size_t>(s.info.iterations + 1));
        // The residual the test stopped on is the true one (GMRES: right preconditioning).
        const auto true_r = (D.scatter(ref_b) - D.matvec(s.x)).norm().item<double>();
        CHECK(true_r <= 1e-9 * s.info.rhs_norm);
        // Every rank took the same number of iterations.
        int it = s.info.iterations, lo = 0, hi = 0;
        MPI_Allreduce(&it, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&it, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        CHECK(lo == hi);
      }
  }
}

TEST_CASE("GMRES restarts: any cycle length reaches the same solution", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 12, ny = 9;
  const auto coo = convection_diffusion(nx, ny, 0.4);
  const auto b = global_vector(coo.n, 42);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  const auto D = distribute(coo, mesh, sp::PartitionMethod::simple, nx, ny);
  int full = 0;
  for (int restart : {200, 30, 5, 1}) {
    CAPTURE(restart);
    const auto s = D.solve(D.scatter(b), {.method = sp::Method::gmres, .rtol = 1e-10, .restart = restart});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-7);
    if (restart == 200) full = s.info.iterations;
    CHECK(s.info.iterations >= full);  // restarting never helps the minimal residual
  }
  // Without restarts the residual never grows (GMRES minimizes it over a growing space).
  const auto s = D.solve(D.scatter(b), {.method = sp::Method::gmres, .rtol = 1e-10, .restart = 200});
  for (std::size_t i = 1; i < s.info.residual_history.size(); ++i)
    CHECK(s.info.residual_history[i] <= s.info.residual_history[i - 1] * (1 + 1e-12));
  CHECK_THROWS_AS(D.solve(D.scatter(b), {.method = sp::Method::gmres, .restart = 0}), es::Error);
  // One Gram–Schmidt pass (PETSc's default): converges to a moderate tolerance as well.
  const auto one = D.solve(D.scatter(b), {.method = sp::Method::gmres, .rtol = 1e-8,
                                          .reorthogonalize = sp::Reorthogonalize::never});
  CHECK(one.info.converged);
  CHECK(relative_error(one.x.full_tensor(), ref) < 1e-5);
}

TEST_CASE("BiCGStab and GMRES on a complex system", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 9, ny = 8;
  auto coo = convection_diffusion(nx, ny, 0.3);
  // A complex shift of the diagonal: complex nonsymmetric, well conditioned.
  coo.values = coo.values.to(at::kComplexDouble) +
               c10::complex<double>(0, 0.5) * (coo.rows == coo.cols).to(at::kComplexDouble);
  const auto b = global_vector(coo.n, 43, at::kComplexDouble);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto D = sp::DSparseTensor::partition(A, mesh);
  for (auto m : {sp::Method::bicgstab, sp::Method::gmres}) {
    CAPTURE(sp::to_string(m));
    const auto s = D.solve(D.scatter(b), {.method = m, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-11});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
  }
}

TEST_CASE("MINRES solves a symmetric indefinite system, where CG breaks down", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 13, ny = 10;
  const auto coo = shifted_laplacian(nx, ny, 1.3);
  const auto b = global_vector(coo.n, 44);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::hilbert}) {
    const auto D = distribute(coo, mesh, method, nx, ny);
    for (auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi}) {
      CAPTURE(static_cast<int>(pc), static_cast<int>(method));
      const auto s = D.solve(D.scatter(b), {.method = sp::Method::minres, .preconditioner = pc, .rtol = 1e-11});
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
      // The residual estimate MINRES stops on decreases monotonically.
      for (std::size_t i = 1; i < s.info.residual_history.size(); ++i)
        CHECK(s.info.residual_history[i] <= s.info.residual_history[i - 1] * (1 + 1e-10));
    }
    const auto cg = D.solve(D.scatter(b), {.rtol = 1e-11});
    CHECK(cg.info.reason == sp::StopReason::breakdown);
  }
  // An indefinite preconditioner is a breakdown on every rank, not a NaN.
  const auto neg = distribute(shifted_laplacian(nx, ny, 5.0), mesh, sp::PartitionMethod::simple, nx, ny);
  const auto s = neg.solve(neg.scatter(b), {.method = sp::Method::minres, .preconditioner = sp::Preconditioner::jacobi});
  CHECK_FALSE(s.info.converged);
  CHECK(s.info.reason == sp::StopReason::breakdown);
}

TEST_CASE("BiCGStab, GMRES, MINRES: b = 0, x0, maxiter, atol", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 9, ny = 7;
  const auto coo = convection_diffusion(nx, ny, 0.2);
  const auto sym = shifted_laplacian(nx, ny, 0.0);
  const auto b = global_vector(coo.n, 45);
  for (auto m : {sp::Method::bicgstab, sp::Method::gmres, sp::Method::minres}) {
    CAPTURE(sp::to_string(m));
    const auto D = distribute(m == sp::Method::minres ? sym : coo, mesh, sp::PartitionMethod::simple, nx, ny);
    const auto zero = D.solve(D.zeros(), {.method = m, .x0 = D.scatter(b)});
    CHECK(zero.info.reason == sp::StopReason::zero_rhs);
    CHECK(zero.x.full_tensor().abs().max().item<double>() == 0.0);
    const auto exact = D.solve(D.scatter(b), {.method = m, .rtol = 1e-13}).x;
    const auto warm = D.solve(D.scatter(b), {.method = m, .rtol = 1e-8, .x0 = exact});
    CHECK(warm.info.converged);
    CHECK(warm.info.iterations == 0);
    const auto capped = D.solve(D.scatter(b), {.method = m, .rtol = 1e-14, .maxiter = 3});
    CHECK_FALSE(capped.info.converged);
    CHECK(capped.info.reason == sp::StopReason::maxiter);
    CHECK(capped.info.iterations == 3);
    const auto loose = D.solve(D.scatter(b), {.method = m, .rtol = 1e-14, .atol = 1e-2});
    CHECK(loose.info.reason == sp::StopReason::converged_atol);
  }
}
