// Batches of same-pattern matrices, split over the ranks by the batch axis: every product, gather,
// solve and gradient against the same computation on dense tensors on one process, at batch sizes
// that leave some ranks empty (4 and 7 items on 8 ranks).

#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_batch {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::convection_diffusion;
using es::testing::rel;
using es::testing::sum_over_ranks;
using es::testing::world_mesh;

/// `batch` copies of `a` scaled by 1, 1.25, 1.5, ... as one batch, and the dense solves of
/// `rhs` (batch, n) or (batch, n, k) with them.
sp::BatchSparseTensor scaled_batch(const es::testing::Coo& a, std::int64_t batch) {
  const auto scale = 1.0 + 0.25 * at::arange(batch, at::kDouble).unsqueeze(1);
  return {(scale * a.values.unsqueeze(0)).contiguous(), a.rows, a.cols, {a.n, a.n}};
}
at::Tensor scaled_batch_solution(const es::testing::Coo& a, const at::Tensor& rhs) {
  const auto dense = es::testing::dense(a);
  std::vector<at::Tensor> refs;
  for (std::int64_t i = 0; i < rhs.size(0); ++i) refs.push_back(at::linalg_solve(dense * (1.0 + 0.25 * i), rhs[i]));
  return at::stack(refs);
}

/// Tight options for method `m` in the batch tests: jacobi where the method takes a preconditioner.
sp::SolveOptions batch_options(sp::Method m) {
  const bool lsq = m == sp::Method::lsqr || m == sp::Method::lsmr;  // they take no preconditioner
  return {.method = m, .preconditioner = lsq ? sp::Preconditioner::none : sp::Preconditioner::jacobi,
          .rtol = 1e-11, .atol = lsq ? 1e-11 : 0.0};
}

/// Dense (batch, n, n) from COO values (batch, nnz) with duplicates summed: the reference.
at::Tensor dense_batch(const at::Tensor& values, const es::testing::Coo& coo) {
  std::vector<at::Tensor> items;
  for (std::int64_t b = 0; b < values.size(0); ++b)
    items.push_back(at::zeros({coo.n, coo.n}, values.options())
                        .index_put({coo.rows, coo.cols}, values.select(0, b), /*accumulate=*/true));
  return at::stack(items);
}

/// Small integers as values, so that sums in any order are exact.
at::Tensor integer_values(std::int64_t batch, std::int64_t nnz, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(-4, 5, {batch, nnz}, gen, at::kDouble);
}

/// A_b = a_b L + d_b I on a Poisson pattern (a_b > 0, d_b >= 0: symmetric positive definite), the
/// shift listed as separate diagonal entries (duplicates).
struct SpdBatch {
  es::testing::Coo coo;
  at::Tensor values;
};
SpdBatch spd_batch(std::int64_t batch, std::int64_t nx, std::int64_t ny) {
  const auto p = es::testing::poisson2d(nx, ny);
  const auto diag = at::arange(p.n, at::kLong);
  es::testing::Coo coo{{}, at::cat({p.rows, diag}), at::cat({p.cols, diag}), p.n};
  const auto item = at::arange(batch, at::kDouble).unsqueeze(1);
  const auto scale = 1.0 + 0.5 * item, shift = 0.25 * item;
  const auto values = at::cat({scale * p.values.unsqueeze(0), shift.expand({batch, p.n})}, 1).contiguous();
  return {coo, values};
}

}  // namespace

TEST_CASE("BatchSparseTensor sums duplicates per item; matvec and to_dense equal dense exactly", "[sparse][batch]") {
  const auto coo = es::testing::unsymmetric_with_duplicates(23);
  const std::int64_t batch = 5;
  const auto values = integer_values(batch, coo.rows.numel(), 3);
  const sp::BatchSparseTensor A(values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto dense = dense_batch(values, coo);
  CHECK(A.batch_size() == batch);
  CHECK(A.shape() == std::array<std::int64_t, 3>{batch, coo.n, coo.n});
  CHECK(A.is_square());
  CHECK(A.nnz() < coo.rows.numel());  // the duplicates were merged
  CHECK(at::equal(A.to_dense(), dense));
  for (std::int64_t b = 0; b < batch; ++b) CHECK(at::equal(A.item(b).to_dense(), dense.select(0, b)));

  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  const auto x = at::randint(-3, 4, {batch, coo.n}, gen, at::kDouble);
  CHECK(at::equal(A.matvec(x), at::bmm(dense, x.unsqueeze(2)).squeeze(2)));
  const auto xk = at::randint(-3, 4, {batch, coo.n, 3}, gen, at::kDouble);
  CHECK(at::equal(A.matvec(xk), at::bmm(dense, xk)));
  // float32 vectors promote to the values' float64, as torch does.
  CHECK(A.matvec(x.to(at::kFloat)).scalar_type() == at::kDouble);

  const auto empty = A.with_values(A.values().narrow(0, 0, 0));
  CHECK(empty.batch_size() == 0);
  const auto xe = at::zeros({0, coo.n}, at::kDouble).requires_grad_(true);
  CHECK(empty.matvec(xe).sizes() == at::IntArrayRef{0, coo.n});
  CHECK(empty.matvec(xe).requires_grad());  // an empty slice still takes part in backward
  CHECK(empty.to_dense().sizes() == at::IntArrayRef{0, coo.n, coo.n});

  const auto pattern = sp::SparseTensor(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto B = sp::BatchSparseTensor::from_pattern(pattern, A.values());
  CHECK(at::equal(B.to_dense(), dense));
  CHECK_THROWS_WITH(sp::BatchSparseTensor(values.narrow(1, 0, 3), coo.rows, coo.cols, {coo.n, coo.n}),
                    Catch::Contains("(batch, nnz)"));
  CHECK_THROWS_WITH(A.matvec(x.narrow(0, 0, 2)), Catch::Contains("expected a tensor of shape (5, 23)"));
}

TEST_CASE("DBatchSparseTensor: slices by the simple rule, exact matvec, gathered values", "[sparse][batch]") {
  const auto mesh = world_mesh();
  const auto w = es::testing::world();
  const auto coo = es::testing::unsymmetric_with_duplicates(19);
  for (std::int64_t batch : {4, 7}) {
    CAPTURE(batch, w.size);
    const auto values = integer_values(batch, coo.rows.numel(), 11 + batch);
    const sp::BatchSparseTensor A(values, coo.rows, coo.cols, {coo.n, coo.n});
    const auto D = sp::DSparseTensor::partition_batch(A, mesh);

    const std::int64_t chunk = (batch + w.size - 1) / w.size;
    const auto first = std::min<std::int64_t>(w.rank * chunk, batch);
    const auto last = std::min<std::int64_t>(first + chunk, batch);
    CHECK(D.batch_range() == std::pair<std::int64_t, std::int64_t>{first, last});
    CHECK(D.local_batch_size() == last - first);
    CHECK(D.global_batch_size() == batch);
    CHECK(D.shape() == std::array<std::int64_t, 3>{batch, coo.n, coo.n});
    CHECK(D.is_square());
    CHECK(D.nnz() == A.nnz());
    CHECK(D.num_partitions() == w.size);
    CHECK(D.dtype() == at::kDouble);
    CHECK(at::equal(D.local().values(), A.values().narrow(0, first, last - first)));

    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const auto x = at::randint(-3, 4, {batch, coo.n}, gen, at::kDouble);
    const auto y = D.gather(D.matvec(D.scatter(x)));
    CHECK(at::equal(y, at::bmm(dense_batch(values, coo), x.unsqueeze(2)).squeeze(2)));
    // Random (non-integer) values: the same kernel in the same order, so still exact.
    const auto xr = at::randn({batch, coo.n, 2}, gen, at::kDouble);
    CHECK(at::equal(D.gather(D.matvec(D.scatter(xr))), A.matvec(xr)));

    CHECK(at::equal(D.full_values(), A.values()));
    CHECK(at::equal(D.full_tensor().to_dense(), A.to_dense()));
  }
}

TEST_CASE("solve_batch: each system's CG solution equals linalg_solve", "[sparse][batch][cg]") {
  const auto mesh = world_mesh();
  for (std::int64_t batch : {4, 7}) {
    const auto [coo, values] = spd_batch(batch, 7, 5);
    const sp::BatchSparseTensor A(values, coo.rows, coo.cols, {coo.n, coo.n});
    const auto D = sp::partition_batch(A, mesh);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
    auto rhs = at::randn({batch, coo.n}, gen, at::kDouble);
    rhs.select(0, batch - 1).zero_();  // b = 0 gives x = 0
    const auto ref = at::linalg_solve(dense_batch(values, coo), rhs.unsqueeze(2)).squeeze(2);
    using P = sp::Preconditioner;
    for (auto pc : {P::none, P::jacobi, P::block_jacobi, P::chebyshev}) {
      CAPTURE(batch, static_cast<int>(pc));
      const auto s = D.solve_batch(D.scatter(rhs), {.preconditioner = pc, .rtol = 1e-12});
      REQUIRE(s.info.size() == static_cast<std::size_t>(D.local_batch_size()));
      for (std::size_t i = 0; i < s.info.size(); ++i) {
        CHECK(s.info[i].converged);
        const bool zero = D.batch_range().first + static_cast<std::int64_t>(i) == batch - 1;
        CHECK(s.info[i].reason == (zero ? sp::StopReason::zero_rhs : sp::StopReason::converged_rtol));
      }
      const auto x = D.gather(s.x);
      CHECK((x - ref).abs().max().item<double>() < 1e-9 * ref.abs().max().item<double>());
      CHECK(at::equal(x.select(0, batch - 1), at::zeros({coo.n}, at::kDouble)));
    }
    // An initial guess equal to the solution converges at once.
    const auto s = D.solve_batch(D.scatter(rhs), {.rtol = 1e-8}, D.scatter(ref));
    for (const auto& info : s.info) CHECK(info.iterations == 0);
  }
}

TEST_CASE("DBatchSparseTensor matvec gradients w.r.t. values and x equal dense ones", "[sparse][batch][autograd]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::unsymmetric_with_duplicates(13);
  for (std::int64_t batch : {4, 7}) {
    CAPTURE(batch);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(29);
    const auto v0 = at::randn({batch, coo.rows.numel()}, gen, at::kDouble);
    const auto x0 = at::randn({batch, coo.n}, gen, at::kDouble);
    const auto weight = at::randn({batch, coo.n}, gen, at::kDouble);

    const auto v = v0.clone().requires_grad_(true), x = x0.clone().requires_grad_(true);
    const auto D = sp::partition_batch(sp::BatchSparseTensor(v, coo.rows, coo.cols, {coo.n, coo.n}), mesh);
    // The loss is formed on the gathered (replicated) result, as a rank-invariant program would.
    (D.gather(D.matvec(D.scatter(x))) * weight).sum().backward();

    const auto vr = v0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
    (at::bmm(dense_batch(vr, coo), xr.unsqueeze(2)).squeeze(2) * weight).sum().backward();

    // Each rank holds the gradient of its own slice; the rest is zero.
    // Not a structured binding: the lambdas below capture them, which clang 14 cannot do.
    const auto first = D.batch_range().first, last = D.batch_range().second;
    const auto mine = [&](const at::Tensor& g) { return g.narrow(0, first, last - first); };
    CHECK(at::allclose(mine(v.grad()), mine(vr.grad()), 1e-12, 1e-12));
    CHECK(at::allclose(mine(x.grad()), mine(xr.grad()), 1e-12, 1e-12));
    const auto outside = [&](const at::Tensor& g) {
      return at::cat({g.narrow(0, 0, first), g.narrow(0, last, batch - last)}).abs().sum().item<double>();
    };
    CHECK(outside(v.grad()) == 0.0);
    CHECK(outside(x.grad()) == 0.0);

    // full_values is differentiable too: each rank's gradient is its slice of the replicated one.
    const sp::SparseTensor pattern(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
    const auto v2 = at::randn({batch, pattern.nnz()}, gen, at::kDouble).requires_grad_(true);
    const auto w2 = at::randn({batch, pattern.nnz()}, gen, at::kDouble);
    const auto D2 = sp::partition_batch(sp::BatchSparseTensor::from_pattern(pattern, v2), mesh);
    (D2.full_values() * w2).sum().backward();
    CHECK(at::equal(mine(v2.grad()), mine(w2)));
    CHECK(outside(v2.grad()) == 0.0);
  }
}

TEST_CASE("Batch errors are raised on every rank", "[sparse][batch][errors]") {
  const auto mesh = world_mesh();
  const auto w = es::testing::world();
  const auto coo = es::testing::unsymmetric_with_duplicates(11);
  const auto values = integer_values(7, coo.rows.numel(), 2);

  // An empty global batch.
  CHECK_THROWS_WITH(sp::partition_batch(sp::BatchSparseTensor(values.narrow(0, 0, 0), coo.rows, coo.cols,
                                                              {coo.n, coo.n}),
                                        mesh),
                    Catch::Contains("the batch is empty"));
  // Batch sizes that differ between ranks (only rank 0 passes 6 items).
  if (w.size > 1)
    CHECK_THROWS_WITH(sp::partition_batch(sp::BatchSparseTensor(values.narrow(0, 0, w.rank == 0 ? 6 : 7),
                                                                coo.rows, coo.cols, {coo.n, coo.n}),
                                          mesh),
                      Catch::Contains("batches of different sizes"));

  const auto D = sp::partition_batch(sp::BatchSparseTensor(values, coo.rows, coo.cols, {coo.n, coo.n}), mesh);
  const auto x = at::ones({7, coo.n}, at::kDouble);
  // Wrong length or wrong batch on every rank: no communication, and every rank raises.
  CHECK_THROWS_WITH(D.matvec(at::ones({D.local_batch_size(), coo.n + 1}, at::kDouble)),
                    Catch::Contains("DBatchSparseTensor::matvec"));
  CHECK_THROWS_WITH(D.matvec(at::ones({D.local_batch_size() + 1, coo.n}, at::kDouble)),
                    Catch::Contains("DBatchSparseTensor::matvec"));
  CHECK_THROWS_WITH(D.scatter(at::ones({6, coo.n}, at::kDouble)), Catch::Contains("batch dimension of 7"));
  // A wrong slice on rank 0 only: the collective calls raise on every rank.
  const auto bad = w.rank == 0 ? at::ones({D.local_batch_size() + 1, coo.n}, at::kDouble) : D.scatter(x);
  CHECK_THROWS_WITH(D.gather(bad), Catch::Contains("rank 0 passed a tensor of shape"));
  CHECK_THROWS_WITH(D.solve_batch(bad), Catch::Contains("right-hand sides"));
  // A preconditioner that cannot be set up on one item (a zero diagonal) fails everywhere.
  auto zero_diag = values.clone();
  zero_diag.select(0, 0).masked_fill_(coo.rows == coo.cols, 0.0);
  const auto Z = sp::partition_batch(sp::BatchSparseTensor(zero_diag, coo.rows, coo.cols, {coo.n, coo.n}), mesh);
  CHECK_THROWS(Z.solve_batch(Z.scatter(x), {.preconditioner = sp::Preconditioner::jacobi}));
}

TEST_CASE("solve_batch with every method equals linalg_solve", "[sparse][batch][solver_family]") {
  const auto mesh = world_mesh();
  const auto coo = convection_diffusion(5, 4, 0.3);
  const std::int64_t batch = 5;
  const auto D = sp::partition_batch(scaled_batch(coo, batch), mesh);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  const auto rhs = at::randn({batch, coo.n}, gen, at::kDouble);
  const auto ref = scaled_batch_solution(coo, rhs);
  for (const auto m : {sp::Method::bicgstab, sp::Method::gmres, sp::Method::fgmres, sp::Method::lsqr, sp::Method::lsmr}) {
    CAPTURE(sp::to_string(m));
    const auto s = D.solve_batch(D.scatter(rhs), batch_options(m));
    for (const auto& info : s.info) CHECK(info.converged);
    CHECK(rel(D.gather(s.x), ref) < 1e-8);
  }
}

TEST_CASE("solve_batch with several right-hand sides per system, every method", "[sparse][batch][multi_rhs]") {
  const auto mesh = world_mesh();
  const auto coo = convection_diffusion(5, 4, 0.3);
  const std::int64_t batch = 5, k = 3;
  const auto D = sp::partition_batch(scaled_batch(coo, batch), mesh);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(18);
  auto rhs = at::randn({batch, coo.n, k}, gen, at::kDouble);
  rhs.select(2, 1).select(0, 0).zero_();
  const auto ref = scaled_batch_solution(coo, rhs);
  for (const auto m : {sp::Method::bicgstab, sp::Method::gmres, sp::Method::fgmres, sp::Method::lsqr, sp::Method::lsmr}) {
    CAPTURE(sp::to_string(m));
    const auto s = D.solve_batch(D.scatter(rhs), batch_options(m));
    for (const auto& info : s.info) {
      CHECK(info.converged);
      CHECK(info.columns.size() == static_cast<std::size_t>(k));
    }
    CHECK(D.gather(s.x).sizes() == rhs.sizes());
    CHECK(rel(D.gather(s.x), ref) < 1e-8);
  }
  CHECK_THROWS_WITH(D.solve_batch(D.scatter(rhs), {}, D.scatter(rhs.select(2, 0).contiguous())),
                    Catch::Contains("initial guesses must have the right-hand sides' shape"));
}

TEST_CASE("solve_batch is differentiable: gradients in the values and the right-hand sides equal dense solves'",
          "[sparse][batch][solve_autograd]") {
  const auto mesh = world_mesh();
  const auto coo = convection_diffusion(5, 4, 0.3);
  const auto spd = es::testing::poisson2d(5, 4);
  const std::int64_t batch = 5;
  const auto scale = 1.0 + 0.25 * at::arange(batch, at::kDouble).unsqueeze(1);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(19);
  const auto rhs = at::randn({batch, coo.n}, gen, at::kDouble);
  const auto w = at::randn({batch, coo.n}, gen, at::kDouble);
  for (const auto m : {sp::Method::cg, sp::Method::minres, sp::Method::bicgstab, sp::Method::gmres, sp::Method::lsmr}) {
    CAPTURE(sp::to_string(m));
    const bool sym = m == sp::Method::cg || m == sp::Method::minres;
    const auto& a = sym ? spd : coo;
    const auto values = (scale * a.values.unsqueeze(0)).contiguous().requires_grad_(true);
    const auto b = rhs.clone().requires_grad_(true);
    const sp::BatchSparseTensor A(values, a.rows, a.cols, {a.n, a.n});
    const auto D = sp::partition_batch(A, mesh);
    const bool lsq = m == sp::Method::lsmr;
    const sp::SolveOptions o{.method = m, .preconditioner = lsq ? sp::Preconditioner::none : sp::Preconditioner::jacobi,
                             .rtol = 1e-12, .atol = 1e-12};
    const auto x = D.gather(D.solve_batch(D.scatter(b), o).x);
    (x * w).sum().backward();
    // Dense, item by item, differentiated by torch.
    const auto vd = values.detach().clone().requires_grad_(true);
    const auto bd = rhs.clone().requires_grad_(true);
    const auto dense = at::zeros({batch, a.n, a.n}, at::kDouble)
                           .index_put({at::Tensor(), a.rows, a.cols}, vd, /*accumulate=*/true);
    (at::linalg_solve(dense, bd) * w).sum().backward();
    // Each rank holds the gradient of its slice of the batch; the others are zero there.
    CHECK(rel(sum_over_ranks(b.grad()), bd.grad()) < 1e-8);
    CHECK(rel(sum_over_ranks(values.grad()), vd.grad()) < 1e-8);
  }
}

}  // namespace test_batch
