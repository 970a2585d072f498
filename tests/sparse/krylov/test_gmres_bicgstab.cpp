// The nonsymmetric methods, BiCGStab, GMRES(m) and FGMRES, against a dense one-process solve:
// convection-diffusion with every preconditioner that applies and two partitions, restarts and one
// Gram-Schmidt pass, a complex system, the seed's convection-diffusion 64² in a SolverConfig, and
// FGMRES with a fixed preconditioner (as GMRES) and with an inner solve as its preconditioner.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_gmres_bicgstab {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::assemble;
using es::testing::convection_diffusion;
using es::testing::distribute;
using es::testing::my_share;
using es::testing::random_vector;
using es::testing::rel;
using es::testing::world_mesh;

/// The relative error of the largest entry (rel).
constexpr auto& relative_error = es::testing::rel;

}  // namespace

TEST_CASE("BiCGStab and GMRES solve a nonsymmetric system with every preconditioner", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 14, ny = 11;
  const auto coo = convection_diffusion(nx, ny, 0.6);
  const auto ref_b = random_vector(coo.n, 41);
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
  const auto b = random_vector(coo.n, 42);
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
  // One pass to a tight tolerance: the basis loses orthogonality, so "converged" must come from the
  // true residual ‖b − A x‖, not from the estimate.
  for (int restart : {60, 7}) {
    CAPTURE(restart);
    const auto tight = D.solve(D.scatter(b), {.method = sp::Method::gmres, .rtol = 1e-12, .restart = restart,
                                              .reorthogonalize = sp::Reorthogonalize::never});
    const auto x = tight.x.full_tensor();
    const double true_res = (b - at::mv(es::testing::dense(coo), x)).norm().item<double>();
    CHECK(tight.info.converged);
    // The dense product rounds differently from the distributed one: 1% of slack on a 1e-12 residual.
    CHECK(true_res <= 1.01e-12 * b.norm().item<double>());
    CHECK(tight.info.residual_norm <= 1e-12 * b.norm().item<double>());
  }
}

TEST_CASE("BiCGStab and GMRES on a complex system", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 9, ny = 8;
  auto coo = convection_diffusion(nx, ny, 0.3);
  // A complex shift of the diagonal: complex nonsymmetric, well conditioned.
  coo.values = coo.values.to(at::kComplexDouble) +
               c10::complex<double>(0, 0.5) * (coo.rows == coo.cols).to(at::kComplexDouble);
  const auto b = random_vector(coo.n, 43, at::kComplexDouble);
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

TEST_CASE("the seed's Krylov cases: convdiff 64² (Péclet 10) by BiCGStab, GMRES(50), FGMRES(50) in a SolverConfig",
          "[sparse][krylov][solver_config]") {
  // The seed's Synthetic["convdiff_2d_64_peclet_10"]: kron(I, T) + kron(T, I) with T = tridiag(−1, 2, −1),
  // plus 10 (kron(I, D) + kron(D, I)), D the backward difference (−1 below the diagonal, 1 on it):
  // N = 4096, nonsymmetric, unscaled. Its test: residual < 1e-5 relative with restart 50, maxiter 4000.
  const std::int64_t n = 64;
  auto a = es::testing::poisson2d(n, n);
  const auto west = a.cols == a.rows - 1, south = a.cols == a.rows - n, diag = a.rows == a.cols;
  a.values = a.values + 10.0 * (2.0 * diag.to(at::kDouble) - west.to(at::kDouble) - south.to(at::kDouble));
  const auto mesh = world_mesh();
  const auto D = distribute(a, mesh, sp::PartitionMethod::simple, n, n);
  const auto b = random_vector(a.n, 17);
  const auto db = D.scatter(b);
  for (const auto method : {sp::Method::bicgstab, sp::Method::gmres, sp::Method::fgmres}) {
    for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::block_jacobi}) {
      CAPTURE(sp::to_string(method), sp::to_string(pc));
      const sp::SolverConfig scope({.method = method, .preconditioner = pc, .rtol = 1e-10, .maxiter = 4000, .restart = 50});
      const auto s = D.solve(db);
      CHECK(s.info.converged);
      const auto res = (db - D.matvec(s.x)).full_tensor();
      // The seed asserts 1e-5; the true residual follows the recursive one to rtol here.
      CHECK(res.norm().item<double>() < 1e-8 * b.norm().item<double>());
    }
  }
}

TEST_CASE("FGMRES: a fixed preconditioner as GMRES, an inner solve as preconditioner", "[sparse][fgmres]") {
  const auto mesh = world_mesh();
  const auto coo = convection_diffusion(12, 9, 0.5);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto b = random_vector(coo.n, 3);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  const auto db = D.scatter(b);
  // With a fixed preconditioner FGMRES builds the same Krylov space as right-preconditioned GMRES.
  for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::block_jacobi}) {
    const auto g = D.solve(db, {.method = sp::Method::gmres, .preconditioner = pc, .rtol = 1e-10, .restart = 12});
    const auto f = D.solve(db, {.method = sp::Method::fgmres, .preconditioner = pc, .rtol = 1e-10, .restart = 12});
    CHECK(f.info.converged);
    CHECK(std::abs(f.info.iterations - g.info.iterations) <= 1);
    CHECK(rel(f.x.full_tensor(), ref) < 1e-8);
  }
  // A preconditioner that is itself an iteration (a few GMRES steps, different on every call):
  // fewer outer iterations than none.
  int calls = 0;
  const sp::PreconditionerFn inner = [&](const sp::DVector& r) {
    ++calls;
    return D.solve(r, {.method = sp::Method::gmres, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-2,
                       .maxiter = 4, .residual_history = false})
        .x;
  };
  const auto plain = D.solve(db, {.method = sp::Method::fgmres, .rtol = 1e-10});
  const auto f = D.solve(db, {.method = sp::Method::fgmres, .rtol = 1e-10, .custom_preconditioner = inner});
  CHECK(f.info.converged);
  CHECK(f.info.iterations < plain.info.iterations / 2);
  CHECK(calls == f.info.iterations);
  CHECK(rel(f.x.full_tensor(), ref) < 1e-8);
}

}  // namespace test_gmres_bicgstab
