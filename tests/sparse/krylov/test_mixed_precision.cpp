// Mixed precision (Precision::mixed: single-precision inner solves; Precision::single_values:
// float64 iterations over the matrix's float32 values), refined to a float64 tolerance. Every result is checked by its true residual, computed densely on one process in float64, and
// against the dense solve; the rounds, the fallback to float64 when float32 cannot reach the
// tolerance, gradients, and the inputs it refuses.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>

#include "collective_error.hpp"
#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_mixed_precision {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::assemble;
using es::testing::my_share;
using es::testing::random_vector;
using es::testing::relative_error;
using es::testing::world_mesh;

/// ‖b − A x‖ / ‖b‖ in float64 on the full system.
double true_relative_residual(const es::testing::Coo& a, const at::Tensor& x, const at::Tensor& b) {
  return ((b - at::mv(es::testing::dense(a), x)).norm() / b.norm()).item<double>();
}

}  // namespace

TEST_CASE("mixed precision reaches a float64 tolerance with every method and preconditioner",
          "[sparse][krylov][mixed_precision]") {
  const auto mesh = world_mesh();
  const auto spd = es::testing::poisson2d(23, 19);
  const auto unsym = es::testing::convection_diffusion(23, 19, 0.6);
  struct Case {
    const es::testing::Coo& coo;
    sp::SolveOptions options;
  };
  using P = sp::Preconditioner;
  const std::vector<Case> cases{
      {spd, {.method = sp::Method::cg, .rtol = 1e-10}},
      {spd, {.method = sp::Method::cg, .preconditioner = P::jacobi, .rtol = 1e-10}},
      {spd, {.method = sp::Method::cg, .preconditioner = P::chebyshev, .rtol = 1e-10}},
      {spd, {.method = sp::Method::cg, .preconditioner = P::block_jacobi, .rtol = 1e-10}},
      {spd, {.method = sp::Method::cg, .preconditioner = P::jacobi, .rtol = 1e-10,
             .cg_variant = sp::CgVariant::pipelined}},
#if defined(EINSHARD_HAS_HYPRE)
      {spd, {.method = sp::Method::cg, .preconditioner = P::amg, .rtol = 1e-10}},
#endif
      {spd, {.method = sp::Method::minres, .rtol = 1e-10}},
      {unsym, {.method = sp::Method::gmres, .preconditioner = P::block_jacobi, .rtol = 1e-10}},
      {unsym, {.method = sp::Method::bicgstab, .preconditioner = P::jacobi, .rtol = 1e-10}},
      {unsym, {.method = sp::Method::fgmres, .preconditioner = P::neumann, .rtol = 1e-10}},
  };
  const auto b = random_vector(spd.n, 5);
  for (const auto& c : cases) {
    CAPTURE(sp::to_string(c.options.method), static_cast<int>(c.options.preconditioner));
    const auto share = my_share(c.coo);
    const auto D = assemble(share, share.values, mesh);
    auto options = c.options;
    options.precision = sp::Precision::mixed;
    int monitored = 0;
    options.monitor = [&](int, double) { ++monitored; };
    const auto s = D.solve(D.scatter(b), options);
    CHECK(s.info.converged);
    CHECK(s.info.refinements >= 2);  // float32 alone cannot reach 1e-10
    CHECK(s.info.residual_history.size() == static_cast<std::size_t>(s.info.iterations + 1));
    CHECK(monitored == s.info.iterations + 1);
    const auto x = s.x.full_tensor();
    CHECK(x.scalar_type() == at::kDouble);
    // The reported residual is the true one, and it meets the tolerance against the float64 matrix.
    const double res = true_relative_residual(c.coo, x, b);
    CHECK(res <= 1e-10);
    CHECK(std::abs(s.info.residual_norm / s.info.rhs_norm - res) <= 1e-3 * res + 1e-15);
    CHECK(relative_error(x, at::linalg_solve(es::testing::dense(c.coo), b)) < 1e-7);
  }
}

TEST_CASE("single_values: float64 iterations over float32 values, refined to a float64 tolerance",
          "[sparse][krylov][mixed_precision]") {
  // Values float32 cannot hold (a tenth of the stencil), so the copy differs from the matrix.
  const auto mesh = world_mesh();
  auto spd = es::testing::poisson2d(23, 19);
  spd.values = spd.values * 0.1;
  auto unsym = es::testing::convection_diffusion(23, 19, 0.6);
  unsym.values = unsym.values * 0.1;
  using P = sp::Preconditioner;
  struct Case {
    const es::testing::Coo& coo;
    sp::SolveOptions options;
  };
  const std::vector<Case> cases{
      {spd, {.method = sp::Method::cg, .rtol = 1e-10}},
      {spd, {.method = sp::Method::cg, .preconditioner = P::jacobi, .rtol = 1e-10}},
      {spd, {.method = sp::Method::cg, .preconditioner = P::block_jacobi, .rtol = 1e-10}},
#if defined(EINSHARD_HAS_HYPRE)
      {spd, {.method = sp::Method::cg, .preconditioner = P::amg, .rtol = 1e-10}},
#endif
      {spd, {.method = sp::Method::minres, .rtol = 1e-10}},
      {unsym, {.method = sp::Method::gmres, .preconditioner = P::jacobi, .rtol = 1e-10}},
      {unsym, {.method = sp::Method::bicgstab, .preconditioner = P::jacobi, .rtol = 1e-10}},
  };
  const auto b = random_vector(spd.n, 5);
  for (const auto& c : cases) {
    CAPTURE(sp::to_string(c.options.method), static_cast<int>(c.options.preconditioner));
    const auto share = my_share(c.coo);
    const auto D = assemble(share, share.values, mesh);
    const auto working = D.solve(D.scatter(b), c.options);
    REQUIRE(working.info.converged);
    auto options = c.options;
    options.precision = sp::Precision::single_values;
    const auto s = D.solve(D.scatter(b), options);
    CHECK(s.info.converged);
    CHECK(s.info.refinements >= 1);
    CHECK(s.info.residual_history.size() == static_cast<std::size_t>(s.info.iterations + 1));
    const auto x = s.x.full_tensor();
    CHECK(x.scalar_type() == at::kDouble);
    const double res = true_relative_residual(c.coo, x, b);
    CHECK(res <= 1e-10);
    CHECK(std::abs(s.info.residual_norm / s.info.rhs_norm - res) <= 1e-3 * res + 1e-15);
    // The recurrence is float64's: CG takes the float64 solve's iterations, give or take one or two.
    INFO("iterations " << s.info.iterations << " against " << working.info.iterations);
    if (c.options.method == sp::Method::cg) CHECK(std::abs(s.info.iterations - working.info.iterations) <= 2);
    CHECK(s.info.iterations <= working.info.iterations * 5 / 4 + 2);
    if (c.options.method == sp::Method::cg) {
      // A float32 recurrence from the first iteration took 15-30 % more iterations on such
      // matrices; started in float64 until the residual allows float32's rounding, it keeps
      // close to the float64 count.
      options.precision = sp::Precision::mixed;
      const auto m = D.solve(D.scatter(b), options);
      INFO("mixed: " << m.info.iterations);
      CHECK(m.info.converged);
      CHECK(true_relative_residual(c.coo, m.x.full_tensor(), b) <= 1e-10);
      CHECK(m.info.iterations <= working.info.iterations * 11 / 10 + 2);
    }
  }
}

TEST_CASE("mixed precision CG takes the float64 solve's iterations", "[sparse][krylov][mixed_precision]") {
  // Large enough for CG's superlinear phase (κ ≈ 1.5·10³) and b smooth, as a PDE's load: a float32
  // recurrence from the first iteration costs 12-21 % more iterations here (143 and 155 against
  // 128).
  const auto mesh = world_mesh();
  auto coo = es::testing::poisson2d(60, 50);
  coo.values = coo.values * 0.1;
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto b = D.scatter(at::ones({coo.n}, at::kDouble));
  const sp::SolveOptions options{.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-8};
  const auto working = D.solve(b, options);
  REQUIRE(working.info.converged);
  for (const auto precision : {sp::Precision::mixed, sp::Precision::single_values}) {
    auto o = options;
    o.precision = precision;
    const auto s = D.solve(b, o);
    INFO(sp::to_string(precision) << ": " << s.info.iterations << " iterations against " << working.info.iterations);
    CHECK(s.info.converged);
    CHECK(true_relative_residual(coo, s.x.full_tensor(), at::ones({coo.n}, at::kDouble)) <= 1e-8);
    CHECK(s.info.iterations <= working.info.iterations * 21 / 20 + 2);
  }
}

TEST_CASE("mixed precision: a complex128 system, an initial guess, and b = 0", "[sparse][krylov][mixed_precision]") {
  const auto mesh = world_mesh();
  auto coo = es::testing::convection_diffusion(11, 9, 0.3);
  coo.values = coo.values.to(at::kComplexDouble) +
               c10::complex<double>(0, 0.5) * (coo.rows == coo.cols).to(at::kComplexDouble);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto b = random_vector(coo.n, 43, at::kComplexDouble);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  const auto s = D.solve(D.scatter(b), {.method = sp::Method::gmres, .preconditioner = sp::Preconditioner::jacobi,
                                        .rtol = 1e-11, .precision = sp::Precision::mixed});
  CHECK(s.info.converged);
  CHECK(s.x.full_tensor().scalar_type() == at::kComplexDouble);
  CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
  const auto values = D.solve(D.scatter(b), {.method = sp::Method::gmres, .preconditioner = sp::Preconditioner::jacobi,
                                             .rtol = 1e-11, .precision = sp::Precision::single_values});
  CHECK(values.info.converged);
  CHECK(values.x.full_tensor().scalar_type() == at::kComplexDouble);
  CHECK(relative_error(values.x.full_tensor(), ref) < 1e-8);

  // Started at the answer: converged before any round.
  const auto at_answer = D.solve(D.scatter(b), {.method = sp::Method::gmres, .rtol = 1e-6, .x0 = D.scatter(ref),
                                                .precision = sp::Precision::mixed});
  CHECK(at_answer.info.converged);
  CHECK(at_answer.info.refinements == 0);
  CHECK(at_answer.info.iterations == 0);

  const auto zero = D.solve(D.scatter(at::zeros_like(b)), {.method = sp::Method::gmres, .precision = sp::Precision::mixed});
  CHECK(zero.info.reason == sp::StopReason::zero_rhs);
  CHECK(zero.x.full_tensor().abs().max().item<double>() == 0.0);
}

TEST_CASE("mixed precision finishes in float64 where float32 cannot reach the tolerance",
          "[sparse][krylov][mixed_precision]") {
  // The Neumann Laplacian (rows summing to zero, singular) shifted by 1e-8: κ(A) ≈ 1e9, and the
  // shift is below float32's rounding of the diagonal, so the float32 copy is singular. Its
  // rounds stall on the near-null component of the residual; the solve finishes in float64 rounds
  // from the iterate reached. b = A x with x of order one keeps the float64 solve within reach of
  // the tolerance (its floor is rounding times ‖A‖ ‖x‖ / ‖b‖).
  const auto mesh = world_mesh();
  auto coo = es::testing::poisson2d(12, 11);
  const auto diag = coo.rows == coo.cols;
  const auto neighbours = at::zeros({coo.n}, at::kDouble).index_add_(0, coo.rows, (~diag).to(at::kDouble));
  coo.values = at::where(diag, neighbours.index({coo.rows}) + 1e-8, coo.values);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto b = at::mv(es::testing::dense(coo), random_vector(coo.n, 3));
  sp::SolveOptions options{.method = sp::Method::gmres, .rtol = 1e-10, .maxiter = 2000, .restart = 200};
  // float32 alone stops short of 1e-10 against the float64 matrix...
  const auto single = D.to(at::kFloat);
  const auto s32 = single.solve(single.scatter(b.to(at::kFloat)), options);
  CHECK(true_relative_residual(coo, s32.x.full_tensor().to(at::kDouble), b) > 1e-8);
  // ...the mixed solve reaches it.
  options.precision = sp::Precision::mixed;
  const auto s = D.solve(D.scatter(b), options);
  CHECK(s.info.converged);
  CHECK(true_relative_residual(coo, s.x.full_tensor(), b) <= 2e-10);
  CHECK(s.info.residual_history.size() == static_cast<std::size_t>(s.info.iterations + 1));
  // CG's reliable updates stall the same way and finish with float64 CG, whether the float32 copy
  // carries the whole recurrence or only the products' values.
  for (const auto precision : {sp::Precision::mixed, sp::Precision::single_values}) {
    const auto cg = D.solve(D.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10,
                                           .maxiter = 5000, .precision = precision});
    INFO(sp::to_string(precision) << ": " << sp::to_string(cg.info.reason) << " after " << cg.info.iterations
                                  << ", refinements " << cg.info.refinements);
    CHECK(cg.info.converged);
    CHECK(true_relative_residual(coo, cg.x.full_tensor(), b) <= 2e-10);
    CHECK(cg.info.residual_history.size() == static_cast<std::size_t>(cg.info.iterations + 1));
  }
}

TEST_CASE("mixed precision: gradients as the working-precision solve's", "[sparse][krylov][mixed_precision][autograd]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(9, 7);
  const auto share = my_share(coo);
  const auto weights = random_vector(coo.n, 13);
  const auto gradients = [&](sp::Precision precision) {
    const auto b = random_vector(coo.n, 11).requires_grad_(true);
    const auto v = share.values.clone().requires_grad_(true);
    const auto D = assemble(share, v, mesh);
    const auto r = D.solve(D.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12,
                                          .precision = precision});
    REQUIRE(r.info.converged);
    (r.x.full_tensor() * weights).sum().backward();
    return std::pair{es::testing::sum_over_ranks(b.grad()), v.grad()};
  };
  const auto [wb, wv] = gradients(sp::Precision::working);
  for (const auto precision : {sp::Precision::mixed, sp::Precision::single_values}) {
    CAPTURE(sp::to_string(precision));
    const auto [gb, gv] = gradients(precision);
    CHECK(relative_error(gb, wb) < 1e-9);
    if (gv.numel() > 0) CHECK(relative_error(gv, wv) < 1e-9);
  }
}

TEST_CASE("mixed precision: what it refuses, the same error on every rank",
          "[sparse][krylov][mixed_precision][errors]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(6, 5);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto b = D.scatter(random_vector(coo.n, 1));
  const auto mixed = sp::SolveOptions{.precision = sp::Precision::mixed};
  const auto error = [](auto&& f) { return es::testing::collective_error(f, MPI_COMM_WORLD); };
  CHECK_THAT(error([&] { (void)D.to(at::kFloat).solve(D.to(at::kFloat).scatter(random_vector(coo.n, 1).to(at::kFloat)), mixed); }),
             Catch::Contains("needs a float64 or complex128 matrix"));
  CHECK_THAT(error([&] { (void)D.solve(b, {.method = sp::Method::lsqr, .precision = sp::Precision::mixed}); }),
             Catch::Contains("has no residual to refine"));
  CHECK_THAT(error([&] { (void)D.solve(D.scatter(at::ones({coo.n, 2}, at::kDouble)), mixed); }),
             Catch::Contains("one right-hand side at a time"));
  const sp::LinearOperator op(D.layout(), [&D](const sp::DVector& x) { return D.matvec(x); });
  CHECK_THAT(error([&] { (void)op.solve(b, mixed); }), Catch::Contains("which an operator does not have"));
  const auto values = sp::SolveOptions{.precision = sp::Precision::single_values};
  CHECK_THAT(error([&] { (void)D.solve(D.scatter(at::ones({coo.n, 2}, at::kDouble)), values); }),
             Catch::Contains("one right-hand side at a time"));
  CHECK_THAT(error([&] { (void)op.solve(b, values); }), Catch::Contains("precision single_values"));
}

}  // namespace test_mixed_precision
