// CG in its three reduction schemes (standard, single-reduction, pipelined) and block CG against a
// dense one-process solve: every preconditioner, every partition method (rank invariance), reuse of
// the matrix's preconditioner, pipelined CG's residual replacement, the edge cases of the stop test,
// and block CG's columns against their single solves.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "collective_error.hpp"
#include "einshard/shapes.hpp"
#include "einshard/sparse.hpp"
#include "einshard/sparse/krylov/column_groups.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_cg {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::distribute;
using es::testing::random_vector;
using es::testing::relative_error;
using es::testing::world_mesh;

sp::DSparseTensor poisson(std::int64_t nx, std::int64_t ny, const es::Mesh& mesh,
                          sp::PartitionMethod method = sp::PartitionMethod::simple, double scale = 1.0) {
  const auto coo = es::testing::poisson2d(nx, ny);
  const sp::SparseTensor A(coo.values * scale, coo.rows, coo.cols, {coo.n, coo.n});
  return sp::DSparseTensor::partition(A, mesh, {.method = method, .coords = es::testing::grid_coords(nx, ny)});
}

}  // namespace

TEST_CASE("CG solves 2-D Poisson with every preconditioner and both variants", "[sparse][cg]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 17, ny = 13;
  const auto D = poisson(nx, ny, mesh);
  const auto b = random_vector(nx * ny, 21);
  const auto ref = at::linalg_solve(es::testing::dense(es::testing::poisson2d(nx, ny)), b);
  using P = sp::Preconditioner;
  int unprecond = 0;
  for (auto variant : {sp::CgVariant::standard, sp::CgVariant::single_reduction})
    for (auto pc : {P::none, P::jacobi, P::l1_jacobi, P::block_jacobi, P::chebyshev}) {
      CAPTURE(static_cast<int>(variant), static_cast<int>(pc));
      int monitored = 0;
      const auto s = D.solve(D.scatter(b), {.preconditioner = pc, .rtol = 1e-11,
                                            .monitor = [&](int, double) { ++monitored; },
                                            .cg_variant = variant});
      CHECK(s.info.converged);
      CHECK(s.info.reason == sp::StopReason::converged_rtol);
      CHECK(relative_error(s.x.full_tensor(), ref) < 1e-9);
      CHECK(s.info.residual_history.size() == static_cast<std::size_t>(s.info.iterations + 1));
      CHECK(monitored == s.info.iterations + 1);
      CHECK(s.info.residual_norm <= 1e-11 * s.info.rhs_norm);
      // The recursive residual the test stops on is the true one, to rounding.
      const auto true_r = (D.scatter(b) - D.matvec(s.x)).norm().item<double>();
      CHECK(true_r <= 1e-9 * s.info.rhs_norm);
      if (pc == P::none && variant == sp::CgVariant::standard) unprecond = s.info.iterations;
      if (pc == P::block_jacobi || pc == P::chebyshev) CHECK(s.info.iterations < unprecond);
    }
}

TEST_CASE("CG reuses the matrix's preconditioner between solves, and only while it applies", "[sparse][cg]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 13, ny = 11;
  const auto D = poisson(nx, ny, mesh);
  const auto dense = es::testing::dense(es::testing::poisson2d(nx, ny));
  const auto b = random_vector(nx * ny, 31), c = random_vector(nx * ny, 32);
  using P = sp::Preconditioner;
  for (auto pc : {P::jacobi, P::block_jacobi, P::chebyshev}) {
    CAPTURE(static_cast<int>(pc));
    const sp::SolveOptions o{.preconditioner = pc, .rtol = 1e-11};
    const auto first = D.solve(D.scatter(b), o);
    CHECK_FALSE(first.info.preconditioner_reused);
    // A second right-hand side: the same setup, no new one; the solution still the dense one's.
    const auto second = D.solve(D.scatter(c), o);
    CHECK(second.info.preconditioner_reused);
    CHECK(relative_error(second.x.full_tensor(), at::linalg_solve(dense, c)) < 1e-9);
    // The same right-hand side again: bit-identical to the first solve.
    CHECK(at::equal(D.solve(D.scatter(b), o).x.local(), first.x.local()));
    // Other options, then other values (a new matrix): set up afresh, and correct for that matrix.
    auto other = o;
    other.preconditioner_options.chebyshev_degree = 2;
    other.preconditioner_options.ic0 = true;
    CHECK_FALSE(D.solve(D.scatter(b), other).info.preconditioner_reused);
    const auto scaled = D * 2.0;
    const auto s = scaled.solve(scaled.scatter(b), o);
    CHECK_FALSE(s.info.preconditioner_reused);
    CHECK(relative_error(s.x.full_tensor(), at::linalg_solve(2.0 * dense, b)) < 1e-9);
    CHECK(scaled.solve(scaled.scatter(c), o).info.preconditioner_reused);
  }
}

TEST_CASE("CG is rank invariant: every partition method gives the one-process solution", "[sparse][cg][partition]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 15, ny = 11;
  const auto b = random_vector(nx * ny, 4);
  const auto ref = at::linalg_solve(es::testing::dense(es::testing::poisson2d(nx, ny)), b);
  using M = sp::PartitionMethod;
  for (auto method : {M::simple, M::rcb, M::hilbert, M::metis}) {
    CAPTURE(static_cast<int>(method));
    const auto D = poisson(nx, ny, mesh, method);
    const auto s = D.solve(D.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
  }
}

TEST_CASE("CG stop test edge cases", "[sparse][cg]") {
  const auto mesh = world_mesh();
  const auto D = poisson(9, 7, mesh);
  const auto n = D.rows();
  const auto b = random_vector(n, 2);
  SECTION("b = 0 gives x = 0 exactly, never NaN, even from a nonzero x0") {
    const auto s = D.solve(D.zeros(), {.x0 = D.scatter(b)});
    CHECK(s.info.converged);
    CHECK(s.info.reason == sp::StopReason::zero_rhs);
    CHECK(s.info.iterations == 0);
    CHECK(s.x.full_tensor().abs().max().item<double>() == 0.0);
  }
  SECTION("an exact x0 converges in zero iterations") {
    const auto exact = D.solve(D.scatter(b), {.rtol = 1e-13}).x;
    const auto s = D.solve(D.scatter(b), {.rtol = 1e-8, .x0 = exact});
    CHECK(s.info.converged);
    CHECK(s.info.iterations == 0);
  }
  SECTION("atol stops first when it is the larger bound") {
    const auto s = D.solve(D.scatter(b), {.rtol = 1e-14, .atol = 1e-2});
    CHECK(s.info.reason == sp::StopReason::converged_atol);
    CHECK(s.info.residual_norm <= 1e-2);
  }
  SECTION("maxiter is reported, not hidden") {
    const auto s = D.solve(D.scatter(b), {.rtol = 1e-14, .maxiter = 3});
    CHECK_FALSE(s.info.converged);
    CHECK(s.info.reason == sp::StopReason::maxiter);
    CHECK(s.info.iterations == 3);
  }
  SECTION("a negative definite matrix with Jacobi (negative diagonal) converges") {
    const auto N = poisson(9, 7, mesh, sp::PartitionMethod::simple, -1.0);
    const auto ref = at::linalg_solve(-es::testing::dense(es::testing::poisson2d(9, 7)), b);
    for (auto variant : {sp::CgVariant::standard, sp::CgVariant::single_reduction}) {
      const auto s = N.solve(N.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12, .cg_variant = variant});
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), ref) < 1e-9);
    }
  }
  SECTION("an indefinite matrix is a breakdown, reported the same on every rank") {
    const auto coo = es::testing::poisson2d(9, 7);
    const auto shifted = coo.values - 4.0 * (coo.rows == coo.cols).to(at::kDouble) * 1.5;  // diagonal 4 -> -2
    const auto I = sp::DSparseTensor::partition(sp::SparseTensor(shifted, coo.rows, coo.cols, {n, n}), mesh);
    const auto s = I.solve(I.scatter(b), {.rtol = 1e-12});
    CHECK_FALSE(s.info.converged);
    CHECK(s.info.reason == sp::StopReason::breakdown);
    int it = s.info.iterations, lo = 0, hi = 0;
    MPI_Allreduce(&it, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&it, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi);
  }
  SECTION("float32 converges to float32 accuracy") {
    const auto F = D.to(at::kFloat);
    const auto s = F.solve(F.scatter(b.to(at::kFloat)), {.rtol = 1e-5});
    CHECK(s.info.converged);
    const auto ref = at::linalg_solve(es::testing::dense(es::testing::poisson2d(9, 7)), b);
    CHECK(relative_error(s.x.full_tensor().to(at::kDouble), ref) < 1e-4);
  }
  SECTION("a right-hand side of another partition is refused") {
    if (es::testing::world().size > 1) {
      const auto R = poisson(9, 7, mesh, sp::PartitionMethod::rcb);
      if (!R.layout()->same_as(*D.layout()))
        CHECK_THROWS_WITH(D.solve(R.scatter(b)), Catch::Contains("expected a vector of the matrix's partition"));
    }
  }
}

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
      const auto D = distribute(coo, mesh, method, nx, ny);
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
  const auto D = distribute(coo, mesh, sp::PartitionMethod::rcb, nx, ny);
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
  const auto D = distribute(coo, mesh, sp::PartitionMethod::simple, 9, 7);
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
    const auto N = distribute(neg, mesh, sp::PartitionMethod::simple, 9, 7);
    const auto s = N.solve(N.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12,
                                          .cg_variant = pipelined});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), at::linalg_solve(es::testing::dense(neg), b)) < 1e-9);
  }
  SECTION("an indefinite matrix is a breakdown at the same iteration on every rank") {
    auto shifted = coo;
    shifted.values = coo.values - 6.0 * (coo.rows == coo.cols).to(at::kDouble);
    const auto I = distribute(shifted, mesh, sp::PartitionMethod::simple, 9, 7);
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

TEST_CASE("block CG with one all-reduce per step: each column as its own single-reduction CG", "[sparse][cg][multi_rhs]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 11, ny = 7;
  const auto D = poisson(nx, ny, mesh, sp::PartitionMethod::rcb);
  const auto dense = es::testing::dense(es::testing::poisson2d(nx, ny));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  auto B = at::randn({nx * ny, 5}, gen, at::kDouble);
  B.select(1, 1).zero_();     // x = 0 exactly
  B.select(1, 4).mul_(1e-4);  // converges on its own schedule
  const auto ref = at::linalg_solve(dense, B);
  using P = sp::Preconditioner;
  for (const auto variant : {sp::CgVariant::single_reduction, sp::CgVariant::pipelined})
    for (const auto pc : {P::none, P::jacobi, P::block_jacobi}) {
      CAPTURE(static_cast<int>(variant), sp::to_string(pc));
      const sp::SolveOptions o{.preconditioner = pc, .rtol = 1e-10, .cg_variant = variant};
      const auto s = D.solve(D.scatter(B), o);
      REQUIRE(s.info.columns.size() == 5);
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
      CHECK(s.info.columns[1].reason == sp::StopReason::zero_rhs);
      CHECK(at::equal(s.x.full_tensor().select(1, 1), at::zeros({nx * ny}, at::kDouble)));
      for (std::int64_t j : {0, 2, 3, 4}) {
        auto oj = o;
        oj.cg_variant = sp::CgVariant::single_reduction;
        const auto single = D.solve(D.scatter(B.select(1, j).contiguous()), oj);
        const auto& c = s.info.columns[static_cast<std::size_t>(j)];
        CHECK(std::abs(c.iterations - single.info.iterations) <= 1);
        CHECK(c.residual_history.size() == static_cast<std::size_t>(c.iterations) + 1);
      }
    }
  // x0 as a block: no iterations; an indefinite matrix breaks down per column, on every rank.
  const auto warm = D.solve(D.scatter(B), {.rtol = 1e-8, .x0 = D.scatter(ref), .cg_variant = sp::CgVariant::single_reduction});
  for (const auto& c : warm.info.columns) CHECK(c.iterations == 0);
  auto coo = es::testing::poisson2d(nx, ny);
  coo.values = coo.values - 2.5 * (coo.rows == coo.cols).to(at::kDouble);
  const auto I = sp::DSparseTensor::partition(sp::SparseTensor(coo.values, coo.rows, coo.cols, {coo.n, coo.n}), mesh);
  const auto bad = I.solve(I.scatter(B), {.rtol = 1e-12, .cg_variant = sp::CgVariant::single_reduction});
  CHECK_FALSE(bad.info.converged);
  CHECK(bad.info.columns[0].reason == sp::StopReason::breakdown);
  CHECK(bad.info.columns[1].reason == sp::StopReason::zero_rhs);
}

TEST_CASE("CG leaves out a Jacobi of a constant diagonal (its iterates) and applies a varying one", "[sparse][cg]") {
  const auto mesh = world_mesh();
  const auto world = es::testing::world();
  const std::int64_t nx = 15, ny = 11, n = nx * ny;
  // Rank 0 owns no row (with several ranks), the others contiguous blocks of the rest.
  const auto owned = [&] {
    if (world.size == 1) return at::arange(n, at::kLong);
    if (world.rank == 0) return at::empty({0}, at::kLong);
    const auto sizes = es::compute_split_shapes(n, world.size - 1);
    std::int64_t first = 0;
    for (int r = 1; r < world.rank; ++r) first += sizes[static_cast<std::size_t>(r - 1)];
    return at::arange(first, first + sizes[static_cast<std::size_t>(world.rank - 1)], at::kLong);
  }();
  const auto coo = es::testing::poisson2d(nx, ny);
  const auto mine = at::isin(coo.rows, owned).nonzero().flatten();
  const auto make = [&](const at::Tensor& values) {
    return sp::DSparseTensor::from_local(values.index_select(0, mine), coo.rows.index_select(0, mine),
                                         coo.cols.index_select(0, mine), {n, n}, mesh, {.owned_rows = owned});
  };
  // 0.3 A: 1 / 1.2 on the diagonal is not a power of two, so applying it would round differently.
  const auto uniform = make(coo.values * 0.3);
  const auto on_diagonal = (coo.rows == coo.cols).to(at::kDouble);
  const auto varying_values = coo.values * 0.3 + on_diagonal * coo.rows.remainder(7).to(at::kDouble);
  const auto varying = make(varying_values);
  const auto b = random_vector(n, 5);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const auto B = at::randn({n, 3}, gen, at::kDouble);
  const auto dense_varying = es::testing::dense({varying_values, coo.rows, coo.cols, n});
  using P = sp::Preconditioner;
  for (const auto variant : {sp::CgVariant::standard, sp::CgVariant::single_reduction, sp::CgVariant::pipelined}) {
    CAPTURE(static_cast<int>(variant));
    const sp::SolveOptions none{.rtol = 1e-10, .cg_variant = variant};
    auto jacobi = none;
    jacobi.preconditioner = P::jacobi;
    const auto plain = uniform.solve(uniform.scatter(b), none);
    const auto scaled = uniform.solve(uniform.scatter(b), jacobi);
    REQUIRE(plain.info.converged);
    CHECK(scaled.info.iterations == plain.info.iterations);
    CHECK(at::equal(scaled.x.local(), plain.x.local()));
    CHECK(scaled.info.residual_history == plain.info.residual_history);
    const auto block_plain = uniform.solve(uniform.scatter(B), none);
    const auto block_scaled = uniform.solve(uniform.scatter(B), jacobi);
    CHECK(at::equal(block_scaled.x.local(), block_plain.x.local()));
    // A varying diagonal is applied: the dense solution, other iterates than without it.
    const auto applied = varying.solve(varying.scatter(b), jacobi);
    const auto without = varying.solve(varying.scatter(b), none);
    CHECK(applied.info.converged);
    CHECK(relative_error(applied.x.full_tensor(), at::linalg_solve(dense_varying, b)) < 1e-8);
    CHECK(applied.info.residual_history != without.info.residual_history);
    const auto block_applied = varying.solve(varying.scatter(B), jacobi);
    CHECK(relative_error(block_applied.x.full_tensor(), at::linalg_solve(dense_varying, B)) < 1e-8);
  }
}

TEST_CASE("column groups: the widest that fits a rank's share of the cache", "[sparse][multi_rhs][unit]") {
  using sp::detail::column_group_width;
  constexpr std::int64_t cache = 32 << 20;
  CHECK(column_group_width(32, 100000, 5, 8, cache) == 8);   // 5 blocks of 10⁵ x 8 doubles: 32 MB
  CHECK(column_group_width(8, 100000, 5, 8, cache) == 8);    // all of them fit
  CHECK(column_group_width(32, 1000, 5, 8, cache) == 32);
  CHECK(column_group_width(32, 1000000, 5, 8, cache) == 32); // not even one column fits
  CHECK(column_group_width(32, 100000, 5, 8, 0) == 32);      // the cache unknown
  CHECK(column_group_width(3, 300000, 5, 8, cache) == 2);
  CHECK(column_group_width(16, 100000, 34, 8, cache) == 1);  // GMRES(30)'s basis
  CHECK(column_group_width(32, 200000, 5, 4, cache) == 8);   // float32: float64's 4 twice
}

TEST_CASE("block solves in column groups: the whole block's iterates, column by column", "[sparse][multi_rhs]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 12, ny = 9;
  const auto D = poisson(nx, ny, mesh, sp::PartitionMethod::rcb, 0.3);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
  auto B = at::randn({nx * ny, 5}, gen, at::kDouble);
  B.select(1, 2).zero_();
  const auto X0 = 0.1 * at::randn({nx * ny, 5}, gen, at::kDouble);
  using M = sp::Method;
  for (const auto method : {M::cg, M::gmres, M::bicgstab, M::minres})
    for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::block_jacobi})
      for (const bool warm : {false, true}) {
        if (method == M::minres && pc == sp::Preconditioner::block_jacobi) continue;  // ILU(0): not SPD
        CAPTURE(sp::to_string(method), sp::to_string(pc), warm);
        sp::SolveOptions whole{.method = method, .preconditioner = pc, .rtol = 1e-9, .block_columns = 5};
        if (warm) whole.x0 = D.scatter(X0);
        const auto all = D.solve(D.scatter(B), whole);
        for (const int width : {1, 2, 4}) {
          auto grouped = whole;
          grouped.block_columns = width;
          const auto g = D.solve(D.scatter(B), grouped);
          // The same recurrences; a group of one column runs the vector kernels (other roundings,
          // which BiCGStab amplifies: both converged, their difference within the tolerance's).
          CHECK(relative_error(g.x.full_tensor(), all.x.full_tensor()) < (method == M::bicgstab ? 1e-7 : 1e-12));
          REQUIRE(g.info.columns.size() == 5);
          for (std::size_t j = 0; j < 5; ++j) {
            CHECK(std::abs(g.info.columns[j].iterations - all.info.columns[j].iterations) <= 1);
            CHECK(g.info.columns[j].reason == all.info.columns[j].reason);
            CHECK(g.info.columns[j].residual_history.size() == static_cast<std::size_t>(g.info.columns[j].iterations) + 1);
          }
          CHECK(std::abs(g.info.iterations - all.info.iterations) <= 1);
          CHECK(g.info.converged == all.info.converged);
        }
        CHECK(all.info.converged);
        CHECK(all.info.columns[2].reason == sp::StopReason::zero_rhs);
      }
  // The default (0) chooses the same width on every rank; a negative one is an error everywhere.
  const auto chosen = D.solve(D.scatter(B), {.rtol = 1e-9});
  CHECK(relative_error(chosen.x.full_tensor(), D.solve(D.scatter(B), {.rtol = 1e-9, .block_columns = 1}).x.full_tensor()) < 1e-12);
  const auto message = es::testing::collective_error([&] { (void)D.solve(D.scatter(B), {.block_columns = -1}); },
                                                     MPI_COMM_WORLD);
  CHECK_THAT(message, Catch::Contains(".block_columns must be 0") && Catch::Contains("got -1"));
}

}  // namespace test_cg
