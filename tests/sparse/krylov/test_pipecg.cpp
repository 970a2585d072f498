// Pipelined CG (CgVariant::pipelined) against plain CG and a dense one-process solve: every
// preconditioner, every partition, the residual-replacement safeguard, and the stop test's edge
// cases; single-reduction CG beside them.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "collective_error.hpp"
#include "einshard/sparse.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

es::Mesh world_mesh() { return es::Mesh(MPI_COMM_WORLD, {es::testing::world().size}, {"x"}); }

using es::testing::relative_error;

sp::DSparseTensor distribute(const es::testing::Coo& coo, const at::Tensor& coords, const es::Mesh& mesh,
                             sp::PartitionMethod method = sp::PartitionMethod::simple) {
  return sp::DSparseTensor::partition(sp::SparseTensor(coo.values, coo.rows, coo.cols, {coo.n, coo.n}), mesh,
                                      {.method = method, .coords = coords});
}

}  // namespace

TEST_CASE("Pipelined and single-reduction CG match plain CG with every preconditioner", "[sparse][cg][pipecg]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 19, ny = 14;
  const auto coo = es::testing::poisson2d(nx, ny);
  const auto b = es::testing::random_vector(coo.n, 41);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  using P = sp::Preconditioner;
  std::vector<P> kinds{P::none, P::jacobi, P::l1_jacobi, P::block_jacobi, P::chebyshev};
#if defined(EINSHARD_HAS_HYPRE)
  kinds.push_back(P::amg);
#endif
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb})
    for (auto pc : kinds) {
      const auto D = distribute(coo, es::testing::grid_coords(nx, ny), mesh, method);
      const sp::SolveOptions plain{.preconditioner = pc, .rtol = 1e-10};
      const auto standard = D.solve(D.scatter(b), plain);
      REQUIRE(standard.info.converged);
      for (auto variant : {sp::CgVariant::single_reduction, sp::CgVariant::pipelined}) {
        CAPTURE(static_cast<int>(method), sp::to_string(pc), static_cast<int>(variant));
        int monitored = 0;
        auto o = plain;
        o.cg_variant = variant;
        o.monitor = [&](int, double) { ++monitored; };
        const auto s = D.solve(D.scatter(b), o);
        CHECK(s.info.converged);
        CHECK(s.info.reason == sp::StopReason::converged_rtol);
        CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
        // The accuracy attained is plain CG's: the reported norm is the true residual's.
        const auto true_r = (D.scatter(b) - D.matvec(s.x)).norm().item<double>();
        CHECK(true_r <= 1e-10 * s.info.rhs_norm);
        CHECK(std::abs(s.info.iterations - standard.info.iterations) <= 2);
        CHECK(s.info.residual_history.size() == static_cast<std::size_t>(s.info.iterations + 1));
        CHECK(monitored == s.info.iterations + 1);
        // The same residuals as plain CG, to rounding, while they are well above it.
        for (int k = 0; k < std::min(s.info.iterations, standard.info.iterations) / 2; ++k) {
          const auto ks = static_cast<std::size_t>(k);
          CHECK(std::abs(s.info.residual_history[ks] - standard.info.residual_history[ks]) <=
                1e-6 * standard.info.residual_history[ks]);
        }
      }
    }
}

TEST_CASE("Pipelined CG's residual replacement keeps a long solve accurate", "[sparse][cg][pipecg]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 40, ny = 30;
  const auto coo = es::testing::anisotropic2d(nx, ny, 0.02);  // ill conditioned: a few hundred iterations
  const auto b = es::testing::random_vector(coo.n, 42);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  const auto D = distribute(coo, es::testing::grid_coords(nx, ny), mesh, sp::PartitionMethod::rcb);
  const auto standard = D.solve(D.scatter(b), {.rtol = 1e-11});
  REQUIRE(standard.info.converged);
  for (int period : {0, 25}) {
    CAPTURE(period);
    const auto s = D.solve(D.scatter(b), {.rtol = 1e-11, .cg_variant = sp::CgVariant::pipelined,
                                          .residual_replacement = period});
    CAPTURE(s.info.iterations, sp::to_string(s.info.reason), standard.info.iterations, s.info.residual_norm, s.info.rhs_norm);
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
    CHECK((D.scatter(b) - D.matvec(s.x)).norm().item<double>() <= 1e-11 * s.info.rhs_norm);
    CHECK(s.info.iterations <= standard.info.iterations + standard.info.iterations / 5 + 5);
  }
}

TEST_CASE("Pipelined CG stop test edge cases", "[sparse][cg][pipecg]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(9, 7);
  const auto D = distribute(coo, es::testing::grid_coords(9, 7), mesh);
  const auto b = es::testing::random_vector(coo.n, 2);
  const auto pipelined = sp::CgVariant::pipelined;
  SECTION("b = 0 gives x = 0 exactly, even from a nonzero x0") {
    const auto s = D.solve(D.zeros(), {.x0 = D.scatter(b), .cg_variant = pipelined});
    CHECK(s.info.reason == sp::StopReason::zero_rhs);
    CHECK(s.info.iterations == 0);
    CHECK(s.x.full_tensor().abs().max().item<double>() == 0.0);
  }
  SECTION("an exact x0 converges in zero iterations; a good one in fewer") {
    const auto exact = D.solve(D.scatter(b), {.rtol = 1e-13}).x;
    CHECK(D.solve(D.scatter(b), {.rtol = 1e-8, .x0 = exact, .cg_variant = pipelined}).info.iterations == 0);
  }
  SECTION("maxiter is reported") {
    const auto s = D.solve(D.scatter(b), {.rtol = 1e-14, .maxiter = 3, .cg_variant = pipelined});
    CHECK(s.info.reason == sp::StopReason::maxiter);
    CHECK(s.info.iterations == 3);
  }
  SECTION("a negative definite matrix with Jacobi converges") {
    auto neg = coo;
    neg.values = -coo.values;
    const auto N = distribute(neg, es::testing::grid_coords(9, 7), mesh);
    const auto s = N.solve(N.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12,
                                          .cg_variant = pipelined});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), at::linalg_solve(es::testing::dense(neg), b)) < 1e-9);
  }
  SECTION("an indefinite matrix is a breakdown at the same iteration on every rank") {
    auto shifted = coo;
    shifted.values = coo.values - 6.0 * (coo.rows == coo.cols).to(at::kDouble);
    const auto I = distribute(shifted, es::testing::grid_coords(9, 7), mesh);
    const auto s = I.solve(I.scatter(b), {.rtol = 1e-12, .cg_variant = pipelined});
    CHECK_FALSE(s.info.converged);
    CHECK(s.info.reason == sp::StopReason::breakdown);
    CHECK(es::testing::same_on_every_rank(s.info.iterations, MPI_COMM_WORLD));
  }
  SECTION("float32 and complex128") {
    const auto F = D.to(at::kFloat);
    const auto sf = F.solve(F.scatter(b.to(at::kFloat)), {.rtol = 1e-5, .cg_variant = pipelined});
    CAPTURE(sf.info.iterations, sp::to_string(sf.info.reason), sf.info.residual_norm, sf.info.rhs_norm);
    CHECK(sf.info.converged);
    const auto ref = at::linalg_solve(es::testing::dense(coo), b);
    CHECK(relative_error(sf.x.full_tensor().to(at::kDouble), ref) < 1e-4);
    const auto Z = D.to(at::kComplexDouble);
    const auto bz = at::complex(b, at::flip(b, {0}));
    const auto sz = Z.solve(Z.scatter(bz), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10,
                                            .cg_variant = pipelined});
    CHECK(sz.info.converged);
    const auto refz = at::linalg_solve(es::testing::dense(coo).to(at::kComplexDouble), bz);
    CHECK(relative_error(sz.x.full_tensor(), refz) < 1e-8);
  }
}
