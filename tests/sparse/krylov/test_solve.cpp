// What the solve pipeline does for every method: the stop test across methods (b = 0, x0, maxiter,
// atol), custom preconditioners (callables on DVectors), scoped defaults (SolverConfig), several
// right-hand sides (k coupled recurrences against k single solves, a breakdown in one column),
// seeded random systems with every method and preconditioner, and the differentiable solve:
// gradients in b and in the stored values against a dense solve on one process and against finite
// differences, for one right-hand side and for a block.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "collective_error.hpp"
#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "random_sparse.hpp"
#include "random_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_solve {

namespace es = einshard;
namespace sp = einshard::sparse;
namespace rt = einshard::testing::random;

namespace {

using es::testing::assemble;
using es::testing::convection_diffusion;
using es::testing::distribute;
using es::testing::max_abs;
using es::testing::my_share;
using es::testing::random_vector;
using es::testing::rel;
using es::testing::relative_error;
using es::testing::shifted_laplacian;
using es::testing::sum_over_ranks;
using es::testing::world_mesh;
using rt::distribute;
using rt::method_name;
using rt::random_matrix;

/// A small Hermitian positive definite matrix: 2-D Poisson plus a skew imaginary part.
es::testing::Coo hermitian_poisson() {
  const auto hp = es::testing::poisson2d(6, 5);
  const auto shift = at::complex(at::zeros_like(hp.values), 0.05 * ((hp.cols > hp.rows).to(at::kDouble) -
                                                                  (hp.cols < hp.rows).to(at::kDouble)));
  return {(hp.values.to(at::kComplexDouble) + shift).contiguous(), hp.rows, hp.cols, hp.n};
}

}  // namespace

TEST_CASE("BiCGStab, GMRES, MINRES: b = 0, x0, maxiter, atol", "[sparse][krylov]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 9, ny = 7;
  const auto coo = convection_diffusion(nx, ny, 0.2);
  const auto sym = shifted_laplacian(nx, ny, 0.0);
  const auto b = random_vector(coo.n, 45);
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

TEST_CASE("custom preconditioners: a callable equals the built-in one, bad ones fail on every rank",
          "[sparse][custom_preconditioner]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(11, 8);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto db = D.scatter(random_vector(coo.n, 5));
  const auto ref = at::linalg_solve(es::testing::dense(coo), random_vector(coo.n, 5));
  // Jacobi written as a callable: the same iterations as the built-in one, in every method.
  const auto inv_diag = D.zeros().like(at::full({D.layout()->local_size()}, 0.25, at::kDouble));
  const sp::PreconditionerFn jacobi = [&](const sp::DVector& r) { return r * inv_diag; };
  for (const auto m : {sp::Method::cg, sp::Method::bicgstab, sp::Method::gmres, sp::Method::minres, sp::Method::fgmres}) {
    CAPTURE(sp::to_string(m));
    const auto builtin = D.solve(db, {.method = m, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-9});
    const auto custom = D.solve(db, {.method = m, .rtol = 1e-9, .custom_preconditioner = jacobi});
    CHECK(custom.info.converged);
    CHECK(std::abs(custom.info.iterations - builtin.info.iterations) <= 1);
    CHECK(rel(custom.x.full_tensor(), ref) < 1e-7);
  }
  // A callable that returns the wrong length on one rank only: the same Error everywhere.
  const sp::PreconditionerFn bad = [&](const sp::DVector& r) {
    return es::testing::world().rank == 0 ? sp::DVector(std::make_shared<const sp::RowLayout>(
                                                            at::arange(0, at::kLong), 0, MPI_COMM_SELF),
                                                        at::zeros({0}, at::kDouble))
                                          : r;
  };
  CHECK_THROWS_WITH(D.solve(db, {.method = sp::Method::gmres, .custom_preconditioner = bad}),
                    Catch::Contains("expected custom_preconditioner to return a DVector"));
  CHECK_THROWS_WITH(D.solve(db, {.preconditioner = sp::Preconditioner::jacobi, .custom_preconditioner = jacobi}),
                    Catch::Contains("not both"));
}

TEST_CASE("SolverConfig: scoped defaults, nested, explicit options win", "[sparse][solver_config]") {
  const auto mesh = world_mesh();
  const auto coo = convection_diffusion(8, 7, 0.4);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  const auto db = D.scatter(random_vector(coo.n, 9));
  {
    const sp::SolverConfig scope({.method = sp::Method::gmres, .rtol = 1e-10});
    const sp::SolveOptions o{};
    CHECK(o.method == sp::Method::gmres);
    CHECK(o.rtol == 1e-10);
    CHECK(o.maxiter == 10000);
    const auto r = D.solve(db);  // CG would not be asked for a nonsymmetric matrix; GMRES is
    CHECK(r.info.converged);
    CHECK(r.info.residual_norm <= 1e-10 * r.info.rhs_norm);
    {
      const sp::SolverConfig inner({.preconditioner = sp::Preconditioner::jacobi, .maxiter = 3});
      const sp::SolveOptions i{};
      CHECK(i.method == sp::Method::gmres);  // from the outer scope
      CHECK(i.preconditioner == sp::Preconditioner::jacobi);
      CHECK(i.maxiter == 3);
      const auto s = D.solve(db);
      CHECK(s.info.reason == sp::StopReason::maxiter);
      const auto e = D.solve(db, {.maxiter = 500});  // explicit wins
      CHECK(e.info.converged);
    }
    CHECK(sp::SolveOptions{}.maxiter == 10000);
    CHECK(sp::SolveOptions{}.preconditioner == sp::Preconditioner::none);
  }
  CHECK(sp::SolveOptions{}.method == sp::Method::cg);
  CHECK(sp::SolveOptions{}.rtol == 1e-5);
}

TEST_CASE("the differentiable solve: gradients in b and values equal a dense solve's and finite differences",
          "[sparse][solve_autograd]") {
  const auto mesh = world_mesh();
  struct Case {
    es::testing::Coo coo;
    sp::SolveOptions options;
  };
  const auto spd = es::testing::poisson2d(7, 6);
  const auto unsym = convection_diffusion(7, 6, 0.6);
  const std::vector<Case> cases{
      {spd, {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12}},
      {spd, {.method = sp::Method::minres, .rtol = 1e-12}},
      {unsym, {.method = sp::Method::gmres, .preconditioner = sp::Preconditioner::block_jacobi, .rtol = 1e-12}},
      {unsym, {.method = sp::Method::bicgstab, .rtol = 1e-12}},
      {unsym, {.method = sp::Method::fgmres, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12}},
  };
  const auto weights = random_vector(spd.n, 13);
  for (const auto& c : cases) {
    CAPTURE(sp::to_string(c.options.method));
    const auto share = my_share(c.coo);
    // Distributed: b (global, every rank) and this rank's share of the values are leaves.
    const auto b = random_vector(c.coo.n, 11).requires_grad_(true);
    const auto v = share.values.clone().requires_grad_(true);
    const auto D = assemble(share, v, mesh);
    const auto r = D.solve(D.scatter(b), c.options);
    REQUIRE(r.info.converged);
    const auto loss = (r.x.full_tensor() * weights).sum();
    loss.backward();
    // Dense on one process.
    const auto bd = b.detach().clone().requires_grad_(true);
    const auto dense = es::testing::dense(c.coo).requires_grad_(true);
    (at::linalg_solve(dense, bd) * weights).sum().backward();
    CHECK(std::abs(loss.item<double>() - (at::linalg_solve(dense, bd) * weights).sum().item<double>()) < 1e-9);
    // Each rank holds the gradient of what it owns (its rows of b, its share of the values).
    CHECK(rel(sum_over_ranks(b.grad()), bd.grad()) < 1e-8);
    if (v.numel() > 0)  // a rank past the last block owns nothing (8 ranks, 42 rows)
      CHECK(rel(v.grad(), dense.grad().index({share.rows, share.cols})) < 1e-7);
    // Central differences along one direction of the values, on every rank at once.
    const double h = 1e-6;
    const auto dir = at::randn({v.numel()}, at::make_generator<at::CPUGeneratorImpl>(7 + es::testing::world().rank),
                               at::kDouble);
    const auto loss_at = [&](double t) {
      at::NoGradGuard guard;
      const auto Dt = assemble(share, share.values + t * dir, mesh);
      return (Dt.solve(Dt.scatter(b.detach()), c.options).x.full_tensor() * weights).sum().item<double>();
    };
    const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
    double directional = (v.grad() * dir).sum().item<double>();
    MPI_Allreduce(MPI_IN_PLACE, &directional, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(std::abs(fd - directional) < 1e-4 * std::max(1.0, std::abs(directional)));
  }
  // An adjoint solve that cannot converge in maxiter: the same Error on every rank in backward.
  const auto share = my_share(unsym);
  const auto v = share.values.clone().requires_grad_(true);
  const auto D = assemble(share, v, mesh);
  const auto x = D.solve(D.scatter(random_vector(unsym.n, 2)), {.method = sp::Method::gmres, .rtol = 1e-12, .maxiter = 2}).x;
  CHECK_THROWS_WITH((x.full_tensor() * weights).sum().backward(), Catch::Contains("adjoint solve by gmres did not converge"));
}

TEST_CASE("several right-hand sides: D.solve(B) with an (n_local, k) block", "[sparse][multi_rhs]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(9, 8);
  const auto share = my_share(coo);
  const auto D = assemble(share, share.values, mesh);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(23);
  auto B = at::randn({coo.n, 4}, gen, at::kDouble);
  B.select(1, 2).zero_();                      // a zero column: x = 0 exactly
  B.select(1, 3).mul_(1e-3);                   // a small one converges on its own schedule
  const auto dense = es::testing::dense(coo);
  const auto ref = at::linalg_solve(dense, B);
  const auto dB = D.scatter(B);
  REQUIRE(dB.local().dim() == 2);
  for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::block_jacobi}) {
    CAPTURE(sp::to_string(pc));
    const auto s = D.solve(dB, {.preconditioner = pc, .rtol = 1e-10});
    REQUIRE(s.info.columns.size() == 4);
    CHECK(s.info.converged);
    CHECK(s.info.columns[2].reason == sp::StopReason::zero_rhs);
    const auto x = s.x.full_tensor();
    CHECK(x.sizes() == B.sizes());
    CHECK(rel(x, ref) < 1e-8);
    CHECK(at::equal(x.select(1, 2), at::zeros({coo.n}, at::kDouble)));
    // Each column takes the iterations of its own single solve.
    for (std::int64_t j : {0, 1, 3}) {
      const auto single = D.solve(D.scatter(B.select(1, j).contiguous()), {.preconditioner = pc, .rtol = 1e-10});
      CHECK(std::abs(s.info.columns[static_cast<std::size_t>(j)].iterations - single.info.iterations) <= 1);
    }
    CHECK(s.info.iterations == std::max({s.info.columns[0].iterations, s.info.columns[1].iterations,
                                         s.info.columns[3].iterations}));
  }
  // x0 as a block, another method (block GMRES), maxiter.
  const auto warm = D.solve(dB, {.rtol = 1e-10, .x0 = D.scatter(ref)});
  for (const auto& c : warm.info.columns) CHECK(c.iterations == 0);
  const auto g = D.solve(dB, {.method = sp::Method::gmres, .rtol = 1e-10});
  CHECK(g.info.converged);
  CHECK(rel(g.x.full_tensor(), ref) < 1e-8);
  const auto t = D.solve(dB, {.maxiter = 2});
  CHECK_FALSE(t.info.converged);
  CHECK(t.info.reason == sp::StopReason::maxiter);
  CHECK_THROWS_WITH(D.solve(dB, {.x0 = D.scatter(ref.select(1, 0).contiguous())}), Catch::Contains("x0 must be a block"));
  // Differentiable in the block (columns through the recorded single solve).
  const auto Bg = B.clone().requires_grad_(true);
  const auto w = at::randn({coo.n, 4}, gen, at::kDouble);
  (D.solve(D.scatter(Bg), {.rtol = 1e-12}).x.full_tensor() * w).sum().backward();
  const auto Bd = B.clone().requires_grad_(true);
  (at::linalg_solve(dense, Bd) * w).sum().backward();
  CHECK(rel(sum_over_ranks(Bg.grad()), Bd.grad()) < 1e-8);
}

TEST_CASE("several right-hand sides with every method: k coupled recurrences equal k single solves",
          "[sparse][multi_rhs]") {
  const auto mesh = world_mesh();
  const auto spd = es::testing::poisson2d(9, 8);
  const auto unsym = convection_diffusion(9, 8, 0.5);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  auto B = at::randn({spd.n, 5}, gen, at::kDouble);
  B.select(1, 2).zero_();                       // x = 0 exactly
  B.select(1, 3).mul_(1e-3);                    // converges on its own schedule
  B.select(1, 4).copy_(B.select(1, 0) * -2.0);  // the same Krylov space as column 0
  struct Case {
    const es::testing::Coo* coo;
    sp::Method method;
    int restart;
  };
  for (const auto& c : {Case{&unsym, sp::Method::gmres, 30}, Case{&unsym, sp::Method::gmres, 6},
                        Case{&unsym, sp::Method::fgmres, 7}, Case{&unsym, sp::Method::bicgstab, 30},
                        Case{&spd, sp::Method::minres, 30}}) {
    const auto share = my_share(*c.coo);
    const auto D = assemble(share, share.values, mesh);
    const auto ref = at::linalg_solve(es::testing::dense(*c.coo), B);
    const auto dB = D.scatter(B);
    for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::block_jacobi}) {
      CAPTURE(sp::to_string(c.method), c.restart, sp::to_string(pc));
      const sp::SolveOptions o{.method = c.method, .preconditioner = pc, .rtol = 1e-10, .restart = c.restart};
      const auto s = D.solve(dB, o);
      REQUIRE(s.info.columns.size() == 5);
      CHECK(s.info.converged);
      CHECK(s.info.columns[2].reason == sp::StopReason::zero_rhs);
      const auto x = s.x.full_tensor();
      CHECK(rel(x, ref) < 1e-7);
      CHECK(at::equal(x.select(1, 2), at::zeros({spd.n}, at::kDouble)));
      for (std::int64_t j : {0, 1, 3, 4}) {
        const auto& col = s.info.columns[static_cast<std::size_t>(j)];
        const auto single = D.solve(D.scatter(B.select(1, j).contiguous()), o);
        CAPTURE(j);
        CHECK(col.converged);
        CHECK(std::abs(col.iterations - single.info.iterations) <= 1);
        CHECK(col.residual_history.size() == static_cast<std::size_t>(col.iterations) + 1);
        CHECK(rel(x.select(1, j), single.x.full_tensor()) < 1e-7);
      }
    }
    // A warm start at the solution, and maxiter reached by every column that iterates.
    const sp::SolveOptions o{.method = c.method, .rtol = 1e-10, .restart = c.restart};
    auto warm = o;
    warm.x0 = D.scatter(ref);
    for (const auto& col : D.solve(dB, warm).info.columns) CHECK(col.iterations == 0);
    auto few = o;
    few.maxiter = 3;
    const auto t = D.solve(dB, few);
    CHECK_FALSE(t.info.converged);
    CHECK(t.info.reason == sp::StopReason::maxiter);
    for (std::int64_t j : {0, 1, 3, 4}) CHECK(t.info.columns[static_cast<std::size_t>(j)].iterations == 3);
    CHECK(at::isfinite(t.x.full_tensor()).all().item<bool>());
    // A NaN in one column: that column stops with `nan` on every rank, the others converge.
    auto Bn = B.clone();
    Bn.index_put_({spd.n / 2, 1}, std::nan(""));
    const auto n = D.solve(D.scatter(Bn), o);
    CHECK(n.info.columns[1].reason == sp::StopReason::nan);
    CHECK_FALSE(n.info.converged);
    for (std::int64_t j : {0, 3, 4}) CHECK(n.info.columns[static_cast<std::size_t>(j)].converged);
    CHECK(rel(n.x.full_tensor().select(1, 0), ref.select(1, 0)) < 1e-7);
  }
  // Complex values (Hermitian positive definite: every method applies).
  const auto herm = hermitian_poisson();
  const auto hshare = my_share(herm);
  const auto Dh = sp::DSparseTensor::from_local(hshare.values, hshare.rows, hshare.cols, {herm.n, herm.n}, mesh);
  const auto Bc = at::complex(at::randn({herm.n, 3}, gen, at::kDouble), at::randn({herm.n, 3}, gen, at::kDouble));
  const auto dense_h = at::zeros({herm.n, herm.n}, at::kComplexDouble).index_put_({herm.rows, herm.cols}, herm.values);
  const auto ref_c = at::linalg_solve(dense_h, Bc);
  for (const auto m : {sp::Method::cg, sp::Method::gmres, sp::Method::fgmres, sp::Method::bicgstab, sp::Method::minres}) {
    CAPTURE(sp::to_string(m));
    const auto s = Dh.solve(Dh.scatter(Bc), {.method = m, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-11});
    CHECK(s.info.converged);
    CHECK((s.x.full_tensor() - ref_c).abs().max().item<double>() < 1e-8 * ref_c.abs().max().item<double>());
  }
}

TEST_CASE("a block of one column: the vector method's solution and record, as a block's", "[sparse][multi_rhs]") {
  const auto mesh = world_mesh();
  const auto spd = es::testing::poisson2d(9, 8);
  const auto unsym = convection_diffusion(9, 8, 0.5);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(37);
  const auto b = at::randn({spd.n, 1}, gen, at::kDouble);
  for (const auto* coo : {&spd, &unsym}) {
    const auto share = my_share(*coo);
    const auto D = assemble(share, share.values, mesh);
    const auto ref = at::linalg_solve(es::testing::dense(*coo), b);
    for (const auto m : {sp::Method::cg, sp::Method::gmres, sp::Method::bicgstab, sp::Method::minres}) {
      if (coo == &unsym && (m == sp::Method::cg || m == sp::Method::minres)) continue;
      CAPTURE(sp::to_string(m));
      const sp::SolveOptions o{.method = m, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10};
      const auto block = D.solve(D.scatter(b), o);
      const auto single = D.solve(D.scatter(b.squeeze(1).contiguous()), o);
      REQUIRE(block.x.local().dim() == 2);
      CHECK(block.x.full_tensor().sizes() == b.sizes());
      CHECK(rel(block.x.full_tensor(), ref) < 1e-7);
      CHECK(at::equal(block.x.full_tensor().squeeze(1), single.x.full_tensor()));
      REQUIRE(block.info.columns.size() == 1);
      const auto& col = block.info.columns[0];
      CHECK(col.converged);
      CHECK(col.iterations == single.info.iterations);
      CHECK(col.residual_history == single.info.residual_history);
      CHECK(block.info.iterations == single.info.iterations);
      CHECK(block.info.converged);
      // A warm start given as a column too.
      auto warm = o;
      warm.x0 = D.scatter(ref);
      CHECK(D.solve(D.scatter(b), warm).info.columns[0].iterations == 0);
    }
  }
}

TEST_CASE("GMRES with a float32 basis (GmresBasis::reduced): dense references, the iterations of a float64 one",
          "[sparse][multi_rhs][gmres_basis]") {
  const auto mesh = world_mesh();
  const auto spd = es::testing::poisson2d(16, 15);
  const auto unsym = convection_diffusion(16, 15, 0.5);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(47);
  auto B = at::randn({spd.n, 4}, gen, at::kDouble);
  B.select(1, 1).zero_();     // x = 0 exactly
  B.select(1, 2).mul_(1e-6);  // under atol early: converges before the others
  // rtol 1e-8: the iterations of a float64 basis; the true residual is checked at 1e-11 below too,
  // past float32's rounding, where false convergence claims cost restarts.
  const double rtol = 1e-8, atol = 1e-10;
  struct Case {
    const es::testing::Coo* coo;
    sp::Method method;
    int restart;
  };
  for (const auto& c : {Case{&unsym, sp::Method::gmres, 30}, Case{&unsym, sp::Method::gmres, 8},
                        Case{&unsym, sp::Method::fgmres, 12}, Case{&spd, sp::Method::gmres, 30}}) {
    const auto share = my_share(*c.coo);
    const auto D = assemble(share, share.values, mesh);
    const auto dense = es::testing::dense(*c.coo);
    const auto ref = at::linalg_solve(dense, B);
    const auto dB = D.scatter(B);
    for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::block_jacobi}) {
      CAPTURE(sp::to_string(c.method), c.restart, sp::to_string(pc));
      const sp::SolveOptions working{.method = c.method, .preconditioner = pc, .rtol = rtol, .atol = atol,
                                     .restart = c.restart};
      auto o = working;
      o.gmres_basis = sp::GmresBasis::reduced;
      const auto s = D.solve(dB, o);
      const auto w = D.solve(dB, working);
      REQUIRE(s.info.columns.size() == 4);
      CHECK(s.info.converged);
      CHECK(s.info.columns[1].reason == sp::StopReason::zero_rhs);
      const auto x = s.x.full_tensor();
      CHECK(at::equal(x.select(1, 1), at::zeros({c.coo->n}, at::kDouble)));
      CHECK(rel(x, ref) < 1e-6);
      // Converged means by the true residual, the float32 basis notwithstanding.
      const auto residual = at::linalg_vector_norm(B - at::mm(dense, x), 2, {0});
      for (std::int64_t j : {0, 2, 3}) {
        CAPTURE(j);
        const auto& col = s.info.columns[static_cast<std::size_t>(j)];
        const double bound = std::max(atol, rtol * B.select(1, j).norm().item<double>());
        CHECK(col.converged);
        CHECK(residual[j].item<double>() <= 1.01 * bound);
        const int it = w.info.columns[static_cast<std::size_t>(j)].iterations;
        CHECK(std::abs(col.iterations - it) <= 2 + it / 10);
      }
      CHECK(s.info.columns[2].iterations < s.info.columns[0].iterations);
      // One right-hand side runs the block form with one column, reported as a vector's solve.
      const auto one = D.solve(D.scatter(B.select(1, 0).contiguous()), o);
      CHECK(one.info.converged);
      CHECK(one.info.columns.empty());
      CHECK(one.x.local().dim() == 1);
      CHECK(std::abs(one.info.iterations - s.info.columns[0].iterations) <= 1);
      CHECK(rel(one.x.full_tensor(), ref.select(1, 0)) < 1e-6);
      auto tight = o;
      tight.rtol = 1e-11;
      const auto t = D.solve(dB, tight);
      CHECK(t.info.converged);
      const auto tx = t.x.full_tensor();
      CHECK(rel(tx, ref) < 1e-9);
      const auto tres = at::linalg_vector_norm(B - at::mm(dense, tx), 2, {0});
      for (std::int64_t j : {0, 3})
        CHECK(tres[j].item<double>() <= 1.01 * tight.rtol * B.select(1, j).norm().item<double>());
    }
    // A warm start at the solution, for a block and for a vector.
    auto warm = sp::SolveOptions{.method = c.method, .rtol = rtol, .restart = c.restart,
                                 .gmres_basis = sp::GmresBasis::reduced};
    warm.x0 = D.scatter(ref);
    for (const auto& col : D.solve(dB, warm).info.columns) CHECK(col.iterations == 0);
    warm.x0 = D.scatter(ref.select(1, 0).contiguous());
    CHECK(D.solve(D.scatter(B.select(1, 0).contiguous()), warm).info.iterations == 0);
    // maxiter: every column that iterates stops there, unconverged.
    const auto few = D.solve(dB, {.method = c.method, .rtol = rtol, .maxiter = 3, .restart = c.restart,
                                  .gmres_basis = sp::GmresBasis::reduced});
    CHECK(few.info.reason == sp::StopReason::maxiter);
    for (std::int64_t j : {0, 3}) CHECK(few.info.columns[static_cast<std::size_t>(j)].iterations == 3);
  }
  // Complex128 with a complex64 basis; float32 solves store their own dtype (the same iterates).
  const auto herm = hermitian_poisson();
  const auto hshare = my_share(herm);
  const auto Dh = sp::DSparseTensor::from_local(hshare.values, hshare.rows, hshare.cols, {herm.n, herm.n}, mesh);
  const auto Bc = at::complex(at::randn({herm.n, 3}, gen, at::kDouble), at::randn({herm.n, 3}, gen, at::kDouble));
  const auto dense_h = at::zeros({herm.n, herm.n}, at::kComplexDouble).index_put_({herm.rows, herm.cols}, herm.values);
  const auto ref_c = at::linalg_solve(dense_h, Bc);
  const auto sc = Dh.solve(Dh.scatter(Bc), {.method = sp::Method::gmres, .preconditioner = sp::Preconditioner::jacobi,
                                            .rtol = 1e-11, .gmres_basis = sp::GmresBasis::reduced});
  CHECK(sc.info.converged);
  CHECK((sc.x.full_tensor() - ref_c).abs().max().item<double>() < 1e-8 * ref_c.abs().max().item<double>());
  const auto share32 = my_share(spd);
  const auto D32 = assemble(share32, share32.values.to(at::kFloat), mesh);
  const auto B32 = D32.scatter(B.to(at::kFloat));
  sp::SolveOptions o32{.method = sp::Method::gmres, .rtol = 1e-4};
  const auto plain = D32.solve(B32, o32);
  o32.gmres_basis = sp::GmresBasis::reduced;
  const auto same = D32.solve(B32, o32);
  CHECK(plain.info.converged);
  CHECK(at::equal(plain.x.full_tensor(), same.x.full_tensor()));
}

TEST_CASE("the differentiable block solve: one block adjoint solve, gradients equal a dense solve's",
          "[sparse][multi_rhs][solve_autograd]") {
  const auto mesh = world_mesh();
  const auto spd = es::testing::poisson2d(7, 6);
  const auto unsym = convection_diffusion(7, 6, 0.6);
  const std::int64_t k = 3;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  const auto B0 = at::randn({spd.n, k}, gen, at::kDouble);
  const auto weights = at::randn({spd.n, k}, gen, at::kDouble);
  struct Case {
    const es::testing::Coo* coo;
    sp::SolveOptions options;
  };
  for (const auto& c : {Case{&spd, {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12}},
                        Case{&spd, {.method = sp::Method::minres, .rtol = 1e-12}},
                        Case{&unsym, {.method = sp::Method::gmres, .preconditioner = sp::Preconditioner::block_jacobi, .rtol = 1e-12}},
                        Case{&unsym, {.method = sp::Method::bicgstab, .rtol = 1e-12}}}) {
    CAPTURE(sp::to_string(c.options.method));
    const auto share = my_share(*c.coo);
    const auto Bg = B0.clone().requires_grad_(true);
    const auto v = share.values.clone().requires_grad_(true);
    const auto D = assemble(share, v, mesh);
    const auto r = D.solve(D.scatter(Bg), c.options);
    REQUIRE(r.info.converged);
    const auto loss = (r.x.full_tensor() * weights).sum();
    loss.backward();
    const auto Bd = B0.clone().requires_grad_(true);
    const auto dense = es::testing::dense(*c.coo).requires_grad_(true);
    const auto dloss = (at::linalg_solve(dense, Bd) * weights).sum();
    dloss.backward();
    CHECK(std::abs(loss.item<double>() - dloss.item<double>()) < 1e-9 * std::max(1.0, std::abs(dloss.item<double>())));
    CHECK(rel(sum_over_ranks(Bg.grad()), Bd.grad()) < 1e-8);
    if (v.numel() > 0) CHECK(rel(v.grad(), dense.grad().index({share.rows, share.cols})) < 1e-7);
    // Central differences along one direction of the values.
    const double h = 1e-6;
    const auto dir = at::randn({v.numel()}, at::make_generator<at::CPUGeneratorImpl>(5 + es::testing::world().rank),
                               at::kDouble);
    const auto loss_at = [&](double t) {
      at::NoGradGuard guard;
      const auto Dt = assemble(share, share.values + t * dir, mesh);
      return (Dt.solve(Dt.scatter(B0), c.options).x.full_tensor() * weights).sum().item<double>();
    };
    const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
    double directional = (v.grad() * dir).sum().item<double>();
    MPI_Allreduce(MPI_IN_PLACE, &directional, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(std::abs(fd - directional) < 1e-4 * std::max(1.0, std::abs(directional)));
  }
}

namespace {

/// `a` (n x n) with a 2 x 2 block appended at rows/cols n, n + 1: [[0, s], [−s, 0]] when
/// `rotation` (an invariant plane where ⟨v, A v⟩ = 0 for every v), or −s I (negative definite).
es::testing::Coo with_block(const es::testing::Coo& a, double s, bool rotation) {
  const auto n = a.n;
  const auto r = at::tensor({n, n + 1}, at::kLong);
  const auto c = rotation ? at::tensor({n + 1, n}, at::kLong) : at::tensor({n, n + 1}, at::kLong);
  const auto v = rotation ? at::tensor({s, -s}, at::kDouble) : at::tensor({-s, -s}, at::kDouble);
  return {at::cat({a.values, v}), at::cat({a.rows, r}), at::cat({a.cols, c}), n + 2};
}

/// An eigenvector of the nx x ny 5-point Laplacian: sin(π x / (nx + 1)) sin(2π y / (ny + 1)).
at::Tensor laplacian_eigenvector(std::int64_t nx, std::int64_t ny) {
  const double pi = std::acos(-1.0);
  const auto i = at::arange(nx * ny, at::kLong);
  const auto x = (at::remainder(i, nx) + 1).to(at::kDouble), y = (at::div(i, nx, "floor") + 1).to(at::kDouble);
  return at::sin(pi * x / static_cast<double>(nx + 1)) * at::sin(2 * pi * y / static_cast<double>(ny + 1));
}

}  // namespace

TEST_CASE("a breakdown in one column of a block solve stops that column only", "[sparse][multi_rhs][breakdown]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 6, ny = 5, n0 = nx * ny;
  const auto pad = [](const at::Tensor& v) { return at::cat({v, at::zeros({2}, at::kDouble)}); };
  const auto e = [&](std::int64_t i) { return at::zeros({n0 + 2}, at::kDouble).index_fill_(0, at::tensor({i}), 1.0); };
  // Columns: 0 and 3 generic (in the well-behaved block), 1 in the 2 x 2 block alone, 2 zero,
  // 4 an eigenvector of the well-behaved block (a lucky breakdown: solved in one step).
  const auto make_b = [&](const at::Tensor& special) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
    return at::stack({pad(at::randn({n0}, gen, at::kDouble)), special, at::zeros({n0 + 2}, at::kDouble),
                      pad(at::randn({n0}, gen, at::kDouble)), pad(laplacian_eigenvector(nx, ny))},
                     1);
  };
  struct Case {
    sp::Method method;
    bool rotation;  // the 2 x 2 block: a rotation, or −2 I
    bool column1_breaks;
  };
  // BiCGStab on the rotation plane: ⟨r̂, A r⟩ = 0 at the first step (a serious breakdown); GMRES
  // spans the plane in two steps (a lucky one). CG on the negative block: ⟨p, A p⟩ < 0 (breakdown);
  // MINRES solves it.
  for (const auto& c : {Case{sp::Method::bicgstab, true, true}, Case{sp::Method::gmres, true, false},
                        Case{sp::Method::cg, false, true}, Case{sp::Method::minres, false, false}}) {
    CAPTURE(sp::to_string(c.method));
    const auto coo = with_block(es::testing::poisson2d(nx, ny), c.rotation ? 3.0 : 2.0, c.rotation);
    const auto share = my_share(coo);
    const auto D = assemble(share, share.values, mesh);
    const auto B = make_b(e(n0));
    const auto ref = at::linalg_solve(es::testing::dense(coo), B);
    const auto s = D.solve(D.scatter(B), {.method = c.method, .rtol = 1e-10});
    REQUIRE(s.info.columns.size() == 5);
    const auto x = s.x.full_tensor();
    CHECK(at::isfinite(x).all().item<bool>());
    const auto& col1 = s.info.columns[1];
    if (c.column1_breaks) {
      CHECK(col1.reason == sp::StopReason::breakdown);
      CHECK_FALSE(col1.converged);
      CHECK_FALSE(s.info.converged);
      CHECK(s.info.reason == sp::StopReason::breakdown);
    } else {
      CHECK(col1.converged);
      CHECK(col1.iterations <= 2);
      CHECK((x.select(1, 1) - ref.select(1, 1)).abs().max().item<double>() < 1e-8);
    }
    CHECK(s.info.columns[2].reason == sp::StopReason::zero_rhs);
    CHECK(at::equal(x.select(1, 2), at::zeros({n0 + 2}, at::kDouble)));
    CHECK(s.info.columns[4].converged);
    CHECK(s.info.columns[4].iterations == 1);
    for (std::int64_t j : {0, 3, 4}) {
      CAPTURE(j);
      CHECK(s.info.columns[static_cast<std::size_t>(j)].converged);
      CHECK(rel(x.select(1, j), ref.select(1, j)) < 1e-8);
      // The single solve of the column takes the same path.
      const auto single = D.solve(D.scatter(B.select(1, j).contiguous()), {.method = c.method, .rtol = 1e-10});
      CHECK(std::abs(s.info.columns[static_cast<std::size_t>(j)].iterations - single.info.iterations) <= 1);
    }
    // The breaking column alone gives the same reason.
    const auto alone = D.solve(D.scatter(B.select(1, 1).contiguous()), {.method = c.method, .rtol = 1e-10});
    CHECK(alone.info.reason == col1.reason);
  }
}

TEST_CASE("the adjoint solve does not care how small the incoming gradient is", "[sparse][solve_autograd]") {
  // The seed's test_adjoint_scale_invariance: grad(c g) = c grad(g) down to c = 1e-12, with an
  // absolute tolerance set on the forward solve (a floor that must not reach the adjoint).
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(8, 7);
  const auto share = my_share(coo);
  const auto g = random_vector(coo.n, 29);
  for (const auto m : {sp::Method::cg, sp::Method::gmres, sp::Method::bicgstab}) {
    CAPTURE(sp::to_string(m));
    const auto grad_at = [&](double c) {
      const auto v = share.values.clone().requires_grad_(true);
      const auto D = assemble(share, v, mesh);
      const auto x = D.solve(D.scatter(at::ones({coo.n}, at::kDouble)), {.method = m, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10,
                                        .atol = 1e-10});
      x.x.full_tensor().backward(g * c);
      return sum_over_ranks(at::zeros({coo.n}, at::kDouble).index_add_(0, share.rows, v.grad()));
    };
    const auto reference = grad_at(1.0);
    REQUIRE(reference.abs().max().item<double>() > 0.0);
    for (const double c : {1e-4, 1e-8, 1e-12}) {
      CAPTURE(c);
      CHECK((grad_at(c) / c - reference).norm().item<double>() < 1e-6 * reference.norm().item<double>());
    }
  }
  // The batch's adjoint too.
  const auto values = coo.values.unsqueeze(0).repeat({2, 1}).contiguous();
  const auto grad_batch = [&](double c) {
    const auto v = values.clone().requires_grad_(true);
    const sp::BatchSparseTensor A(v, coo.rows, coo.cols, {coo.n, coo.n});
    const auto x = A.solve(at::ones({2, coo.n}, at::kDouble), {.method = sp::Method::cg, .rtol = 1e-10, .atol = 1e-10}).x;
    x.backward(g.unsqueeze(0).repeat({2, 1}) * c);
    return v.grad().clone();
  };
  const auto ref = grad_batch(1.0);
  for (const double c : {1e-8, 1e-12})
    CHECK((grad_batch(c) / c - ref).norm().item<double>() < 1e-6 * ref.norm().item<double>());
}

TEST_CASE("random sparse systems: every method and preconditioner solves like a dense solve", "[sparse][random]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  using P = sp::Preconditioner;
  static const sp::Method methods[] = {sp::Method::cg, sp::Method::minres, sp::Method::bicgstab, sp::Method::gmres};
  static const P preconditioners[] = {P::none, P::jacobi, P::l1_jacobi, P::block_jacobi, P::chebyshev};
  int ran = 0;
  for (const auto& c : rt::cases(3000)) {
    auto rng = c.rng();
    const std::int64_t n = rt::uniform(rng, 1, 40);
    const int method = rt::uniform(rng, 0, 3);
    const bool symmetric = method < 2;
    const auto a = random_matrix(rng, n, true, symmetric);
    // Chebyshev needs the symmetric positive definite case (it estimates a real spectrum).
    const auto pc = preconditioners[rt::uniform(rng, 0, symmetric ? 4 : 3)];
    const int m = rt::uniform(rng, 0, 5);
    INFO(c.reproducer(w.size, "n " + std::to_string(n) + ", nnz " + std::to_string(a.values.numel()) + ", " +
                                  method_name(m) + ", method " + std::to_string(method) + ", " + sp::to_string(pc)));
    const auto D = distribute(rng, a, m, mesh);
    const auto A = es::testing::dense(a);
    at::manual_seed(c.seed);
    const auto b = at::randn({n}, at::kDouble);
    const auto ref = at::linalg_solve(A, b);
    const auto s = D.solve(D.scatter(b), {.method = methods[method], .preconditioner = pc, .rtol = 1e-11, .maxiter = 500});
    INFO("iterations " << s.info.iterations << ", " << sp::to_string(s.info.reason));
    CHECK(s.info.converged);
    CHECK(max_abs(s.x.full_tensor() - ref) <= 1e-8 * (1 + max_abs(ref)));
    // Every rank stopped at the same iteration for the same reason.
    int mine[2] = {s.info.iterations, static_cast<int>(s.info.reason)}, lo[2], hi[2];
    MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, hi, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo[0] == hi[0]);
    CHECK(lo[1] == hi[1]);
    ++ran;
  }
  CHECK(ran > 0);
}

namespace {

/// The graph Laplacian of the nx x ny grid with the edges between columns cut - 1 and cut
/// removed: symmetric positive semidefinite, with one constant null vector per component (two).
es::testing::Coo split_neumann_laplacian(std::int64_t nx, std::int64_t ny, std::int64_t cut) {
  auto a = es::testing::poisson2d(nx, ny);
  const auto x_row = a.rows % nx, x_col = a.cols % nx;
  const auto crossing = ((x_row < cut) != (x_col < cut));
  const auto keep = (~crossing).nonzero().flatten();
  a = {a.values.index_select(0, keep), a.rows.index_select(0, keep), a.cols.index_select(0, keep), a.n};
  const auto off = a.rows != a.cols;
  const auto degree = at::zeros({a.n}, at::kDouble).index_add_(0, a.rows, off.to(at::kDouble));
  a.values = at::where(off, a.values, degree.index_select(0, a.rows));
  return a;
}

/// x = A⁺ b on one process, from A's eigenvectors (the reference of a singular solve).
at::Tensor pseudo_inverse_solve(const at::Tensor& dense, const at::Tensor& b) {
  const auto [lambda, v] = at::linalg_eigh(dense);
  const auto keep = lambda.abs() > 1e-9 * lambda.abs().max();
  const auto inv = at::where(keep, 1.0 / at::where(keep, lambda, at::ones_like(lambda)), at::zeros_like(lambda));
  return at::matmul(v, (b.dim() == 1 ? inv : inv.unsqueeze(-1)) * at::matmul(v.transpose(0, 1), b));
}

/// Uneven contiguous shards: rank r owns a block of weight r + 1, the last rank (of several) none.
at::Tensor uneven_rows(std::int64_t n) {
  const auto p = es::testing::world().size, r = es::testing::world().rank;
  const auto weight = [p](int q) -> std::int64_t { return p > 1 && q == p - 1 ? 0 : q + 1; };
  std::int64_t total = 0, before = 0;
  for (int q = 0; q < p; ++q) {
    if (q < r) before += weight(q);
    total += weight(q);
  }
  return at::arange(n * before / total, n * (before + weight(r)) / total, at::kLong);
}

/// The square matrix of `a`, each rank handing in (and owning) the rows of `owned`; `values` the
/// entries of those rows, in `a`'s order (a leaf for gradients when it requires them).
sp::DSparseTensor assemble_rows(const es::testing::Coo& a, const at::Tensor& owned, const es::Mesh& mesh,
                                std::optional<at::Tensor> values = std::nullopt) {
  const auto mine = at::isin(a.rows, owned).nonzero().flatten();
  return sp::DSparseTensor::from_local(values ? *values : a.values.index_select(0, mine), a.rows.index_select(0, mine),
                                       a.cols.index_select(0, mine), {a.n, a.n}, mesh, {.owned_rows = owned});
}

}  // namespace

TEST_CASE("A singular system with its null space given: the minimum-norm least-squares solution", "[sparse][solve]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 9, ny = 7, n = nx * ny;
  const auto coo = split_neumann_laplacian(nx, ny, 4);
  const auto dense = es::testing::dense(coo);
  const auto owned = uneven_rows(n);
  const auto D = assemble_rows(coo, owned, mesh);
  // A basis of the null space that is not orthonormal: all ones, and the left component's indicator.
  const auto left = (at::arange(n, at::kLong) % nx < 4).to(at::kDouble);
  const auto basis = at::stack({at::ones({n}, at::kDouble), left}, 1);
  const auto my_basis = basis.index_select(0, owned);
  const auto q = std::get<0>(at::linalg_qr(basis));
  const auto b = random_vector(n, 71);  // inconsistent: it has a component along the null space
  const auto ref = pseudo_inverse_solve(dense, b);
  const double removed = at::matmul(q.transpose(0, 1), b).norm().item<double>();
  using P = sp::Preconditioner;
  struct Case {
    sp::Method method;
    sp::CgVariant variant;
  };
  for (const auto c : {Case{sp::Method::cg, sp::CgVariant::standard}, Case{sp::Method::cg, sp::CgVariant::single_reduction},
                       Case{sp::Method::cg, sp::CgVariant::pipelined}, Case{sp::Method::minres, sp::CgVariant::standard}}) {
    std::vector<P> kinds{P::none, P::jacobi, P::block_jacobi};
#if defined(EINSHARD_HAS_HYPRE)
    kinds.push_back(P::amg);
#endif
    for (const auto pc : kinds) {
      CAPTURE(sp::to_string(c.method), static_cast<int>(c.variant), static_cast<int>(pc));
      const auto s = D.solve(D.scatter(b), {.method = c.method, .preconditioner = pc, .rtol = 1e-11,
                                            .cg_variant = c.variant, .null_space = my_basis});
      CHECK(s.info.converged);
      const auto x = s.x.full_tensor();
      CHECK(relative_error(x, ref) < 1e-8);
      CHECK(max_abs(at::matmul(basis.transpose(0, 1), x)) < 1e-9 * max_abs(ref));
      CHECK(s.info.rhs_null_space_norm == Approx(removed).epsilon(1e-10));
    }
  }
  // An initial guess with a null-space component, and a block of right-hand sides.
  const auto x0 = random_vector(n, 72) + 3.0 * left;
  const auto s = D.solve(D.scatter(b), {.rtol = 1e-11, .x0 = D.scatter(x0), .null_space = my_basis});
  CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
  const auto B = at::stack({b, random_vector(n, 73), left}, 1);
  const auto block = D.solve(D.scatter(B), {.preconditioner = P::jacobi, .rtol = 1e-11, .null_space = my_basis});
  CHECK(block.info.converged);
  CHECK(relative_error(block.x.full_tensor(), pseudo_inverse_solve(dense, B)) < 1e-8);
  CHECK(block.info.rhs_null_space_norm == Approx(at::matmul(q.transpose(0, 1), left).norm().item<double>()).epsilon(1e-10));
  // A vector for m = 1: the constants (only part of this null space: the removed norm is checked,
  // not the solve).
  const auto one = D.solve(D.scatter(b), {.maxiter = 3, .null_space = at::ones({owned.numel()}, at::kDouble)});
  const auto ones = at::ones({n, 1}, at::kDouble) / std::sqrt(static_cast<double>(n));
  CHECK(one.info.rhs_null_space_norm == Approx(at::matmul(ones.transpose(0, 1), b).abs().item<double>()).epsilon(1e-10));
}

TEST_CASE("A singular solve's gradients: the adjoint solve projects as the forward one", "[sparse][solve]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 8, ny = 6, n = nx * ny;
  const auto coo = split_neumann_laplacian(nx, ny, 3);
  const auto owned = uneven_rows(n);
  const auto left = (at::arange(n, at::kLong) % nx < 3).to(at::kDouble);
  const auto basis = at::stack({at::ones({n}, at::kDouble), left}, 1);
  const auto q = std::get<0>(at::linalg_qr(basis));
  const auto project = [&q](const at::Tensor& v) { return v - at::matmul(q, at::matmul(q.transpose(0, 1), v)); };
  // A consistent b and a loss weight orthogonal to the null space: the derivatives of A⁺ b then
  // hold no term of the null space's own motion.
  const auto b = project(random_vector(n, 81)), w = project(random_vector(n, 82));
  const auto mine = at::isin(coo.rows, owned).nonzero().flatten();
  auto values = coo.values.index_select(0, mine).clone().requires_grad_(true);
  auto b_local = b.index_select(0, owned).clone().requires_grad_(true);
  const auto D = assemble_rows(coo, owned, mesh, values);
  const auto s = D.solve(sp::DVector(D.layout(), b_local),
                         {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-12, .null_space = basis.index_select(0, owned)});
  (s.x.local() * w.index_select(0, owned)).sum().backward();
  const auto grad = [](const at::Tensor& leaf) { return leaf.grad().defined() ? leaf.grad() : at::zeros_like(leaf); };
  const auto dense = es::testing::dense(coo);
  CHECK(relative_error(sum_over_ranks(at::zeros({n}, at::kDouble).index_add_(0, owned, grad(b_local))),
                       pseudo_inverse_solve(dense, w)) < 1e-8);
  // The values along a change of one edge's weight (inside the left component: the null space
  // stays), against central differences of the dense solve.
  const std::int64_t i = 9, j = 10;  // (1, 1) and (2, 1): both left of the cut
  const auto edge = [&](const at::Tensor& r, const at::Tensor& c) {
    return ((r == i) & (c == i)).to(at::kDouble) + ((r == j) & (c == j)).to(at::kDouble) -
           ((r == i) & (c == j)).to(at::kDouble) - ((r == j) & (c == i)).to(at::kDouble);
  };
  const double directional = sum_over_ranks((grad(values) * edge(coo.rows.index_select(0, mine), coo.cols.index_select(0, mine)))
                                                .sum()
                                                .reshape({1}))
                                 .item<double>();
  const double h = 1e-5;
  const auto change = es::testing::dense({edge(coo.rows, coo.cols), coo.rows, coo.cols, n});
  const auto loss = [&](double t) { return at::dot(w, pseudo_inverse_solve(dense + t * change, b)).item<double>(); };
  CHECK(directional == Approx((loss(h) - loss(-h)) / (2 * h)).epsilon(1e-6));
}

TEST_CASE("null_space faults are the same Error on every rank", "[sparse][solve][faults]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 6, ny = 5, n = nx * ny;
  const auto coo = split_neumann_laplacian(nx, ny, 3);
  const auto owned = uneven_rows(n);
  const auto D = assemble_rows(coo, owned, mesh);
  const auto b = D.scatter(random_vector(n, 91));
  const auto rows = owned.numel();
  const auto ones = at::ones({rows, 1}, at::kDouble);
  const auto error = [&](const sp::SolveOptions& o) {
    return es::testing::collective_error([&] { (void)D.solve(b, o); }, MPI_COMM_WORLD);
  };
  const bool first = es::testing::world().rank == 0;
  CHECK_THAT(error({.null_space = first ? at::ones({rows + 1, 1}, at::kDouble) : ones}),
             Catch::Contains("null_space") && Catch::Contains("rows"));
  CHECK_THAT(error({.null_space = at::cat({ones, ones}, 1)}), Catch::Contains("linearly dependent"));
  CHECK_THAT(error({.null_space = at::zeros({rows, 1}, at::kDouble)}), Catch::Contains("linearly dependent"));
  CHECK_THAT(error({.null_space = ones.to(at::kLong)}), Catch::Contains("floating-point"));
  CHECK_THAT(error({.null_space = ones.to(at::kComplexDouble)}), Catch::Contains("complex vectors for a real system"));
  CHECK_THAT(error({.null_space = first ? at::cat({ones, at::rand({rows, 1}, at::kDouble)}, 1) : ones}),
             Catch::Contains(es::testing::world().size > 1 ? "different numbers of vectors" : ""));
  CHECK_THAT(error({.method = sp::Method::gmres, .null_space = ones}), Catch::Contains("needs cg or minres"));
  CHECK_THAT(error({.method = sp::Method::lsqr, .null_space = ones}), Catch::Contains("minimum-norm solution without it"));
  CHECK_THAT(error({.precision = sp::Precision::mixed, .null_space = ones}), Catch::Contains("working precision"));
}

TEST_CASE("A periodic stencil's singular solve with the constants as its null space", "[sparse][solve][stencil]") {
  const auto mesh = world_mesh();
  const std::int64_t n0 = 7, n1 = 5, n = n0 * n1;
  const sp::StencilOperator A(sp::Stencil::laplacian5(), {n0, n1}, mesh, {.boundary = {sp::StencilBoundary::periodic}});
  auto dense = at::zeros({n, n}, at::kDouble);
  for (std::int64_t i = 0; i < n0; ++i)
    for (std::int64_t j = 0; j < n1; ++j) {
      const auto p = i * n1 + j;
      dense[p][p] = 4.0;
      for (const auto q : {((i + 1) % n0) * n1 + j, ((i + n0 - 1) % n0) * n1 + j, i * n1 + (j + 1) % n1,
                           i * n1 + (j + n1 - 1) % n1})
        dense[p][q] -= 1.0;
    }
  const auto b = random_vector(n, 95);
  const auto ref = pseudo_inverse_solve(dense, b);
  const auto ones = at::ones({A.layout()->local_size(), 1}, at::kDouble);
  for (const auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::chebyshev}) {
    CAPTURE(static_cast<int>(pc));
    const auto s = A.solve(A.scatter(b), {.preconditioner = pc, .rtol = 1e-11, .null_space = ones});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
    CHECK(s.info.rhs_null_space_norm == Approx(std::abs(b.sum().item<double>()) / std::sqrt(static_cast<double>(n))).epsilon(1e-10));
  }
}

}  // namespace test_solve
