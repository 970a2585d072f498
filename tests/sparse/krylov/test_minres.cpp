// MINRES against a dense one-process solve: a symmetric indefinite system (where CG breaks down)
// with and without Jacobi on two partitions, its monotone residual estimate, and an indefinite
// preconditioner reported as a breakdown on every rank.

#include <catch2/catch.hpp>

#include <mpi.h>

#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_minres {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::distribute;
using es::testing::random_vector;
using es::testing::shifted_laplacian;
using es::testing::world_mesh;

/// The relative error of the largest entry (es::testing::rel).
constexpr auto& relative_error = es::testing::rel;

}  // namespace

TEST_CASE("MINRES solves a symmetric indefinite system, where CG breaks down", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 13, ny = 10;
  const auto coo = shifted_laplacian(nx, ny, 1.3);
  const auto b = random_vector(coo.n, 44);
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

}  // namespace test_minres
