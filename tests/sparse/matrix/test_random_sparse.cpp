// Seeded randomized tests of the distributed sparse part: random patterns (empty rows, unsymmetric,
// duplicates, couplings between rows far apart so that a row's columns live on ranks that are not
// its neighbours) x partitions (every partition method, and from_local with random ownership --
// ranks owning nothing, rows scattered over ranks -- and entries handed in by random ranks) x the
// world sizes ctest runs: products, transposed products and solves against a dense one-process
// reference. A failing case prints a one-line reproducer (tests/support/random_support.hpp).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/sparse.hpp>

#include "random_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace es = einshard;
namespace sp = einshard::sparse;
namespace rt = einshard::testing::random;
using einshard::testing::Coo;

namespace {

/// A random n x n pattern: each row empty with probability `empty`, else a few entries at random
/// columns (near and far), some listed twice; `solvable` adds a dominant diagonal (and makes the
/// matrix symmetric when `symmetric`).
Coo random_matrix(rt::Rng& rng, std::int64_t n, bool solvable, bool symmetric) {
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  std::normal_distribution<double> normal;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!solvable && rt::chance(rng, 0.25)) continue;  // an empty row
    for (int k = rt::uniform(rng, 0, 4); k > 0; --k) {
      const auto j = rt::chance(rng, 0.5) ? std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng)
                                          : std::clamp<std::int64_t>(i + rt::uniform(rng, -2, 2), 0, n - 1);
      const double x = normal(rng);
      const int copies = rt::chance(rng, 0.2) ? 2 : 1;  // duplicates are summed
      for (int d = 0; d < copies; ++d) {
        r.push_back(i), c.push_back(j), v.push_back(x / copies);
        if (symmetric) r.push_back(j), c.push_back(i), v.push_back(x / copies);
      }
    }
  }
  if (solvable) {  // |a_ii| > sum_j |a_ij|: nonsingular, and positive definite when symmetric
    std::vector<double> row_sum(static_cast<std::size_t>(n), 0.0);
    for (std::size_t e = 0; e < r.size(); ++e) row_sum[static_cast<std::size_t>(r[e])] += std::abs(v[e]);
    for (std::int64_t i = 0; i < n; ++i) r.push_back(i), c.push_back(i), v.push_back(row_sum[static_cast<std::size_t>(i)] + 1.0);
  }
  const auto m = static_cast<std::int64_t>(r.size());
  return {at::tensor(v, at::kDouble).view({m}), at::tensor(r, at::kLong).view({m}), at::tensor(c, at::kLong).view({m}), n};
}

const char* method_name(int m) {
  static const char* const names[] = {"simple", "rcb", "hilbert", "metis", "slicing", "from_local"};
  return names[m];
}

/// The matrix distributed by partition method `m` (5: from_local with random owners and random
/// ranks handing in each entry).
sp::DSparseTensor distribute(rt::Rng& rng, const Coo& a, int m, const es::Mesh& mesh) {
  static const sp::PartitionMethod methods[] = {sp::PartitionMethod::simple, sp::PartitionMethod::rcb,
                                                sp::PartitionMethod::hilbert, sp::PartitionMethod::metis,
                                                sp::PartitionMethod::slicing};
  const auto w = es::testing::world();
  if (m < 5) {
    at::manual_seed(rng());
    const sp::SparseTensor A(a.values, a.rows, a.cols, {a.n, a.n});
    return sp::DSparseTensor::partition(A, mesh, {.method = methods[m], .coords = at::rand({a.n, 2}, at::kDouble)});
  }
  // Every rank draws every row's owner and every entry's giver from the same stream, so all agree.
  std::vector<std::int64_t> owned, given;
  for (std::int64_t i = 0; i < a.n; ++i)
    if (rt::uniform(rng, 0, w.size - 1) == w.rank) owned.push_back(i);
  for (std::int64_t e = 0; e < a.values.numel(); ++e)
    if (rt::uniform(rng, 0, w.size - 1) == w.rank) given.push_back(e);
  const auto pick = at::tensor(given, at::kLong);
  return sp::DSparseTensor::from_local(a.values.index_select(0, pick), a.rows.index_select(0, pick),
                                       a.cols.index_select(0, pick), {a.n, a.n}, mesh,
                                       {.owned_rows = at::tensor(owned, at::kLong)});
}

using es::testing::max_abs;

}  // namespace

TEST_CASE("random sparse matrices: products and transposed products equal the dense ones", "[sparse][random]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  int ran = 0;
  for (const auto& c : rt::cases(2000)) {
    auto rng = c.rng();
    const std::int64_t n = rt::uniform(rng, 1, 40);
    const auto a = random_matrix(rng, n, false, rt::chance(rng, 0.3));
    const int m = rt::uniform(rng, 0, 5);
    const bool single = rt::chance(rng, 0.25);
    INFO(c.reproducer(w.size, "n " + std::to_string(n) + ", nnz " + std::to_string(a.values.numel()) + ", " +
                                  method_name(m) + (single ? ", float32" : ", float64")));
    auto D = distribute(rng, a, m, mesh);
    if (single) D = D.to(at::kFloat);
    const auto A = es::testing::dense(a);
    at::manual_seed(c.seed);
    const auto x = at::randn({n}, at::kDouble);
    const auto dx = D.scatter(x.to(D.values().scalar_type()));
    const double tol = single ? 1e-4 : 1e-12;
    CHECK(max_abs(D.matvec(dx).full_tensor().to(at::kDouble) - A.mv(x)) < tol * (1 + max_abs(A)));
    CHECK(max_abs(D.rmatvec(dx).full_tensor().to(at::kDouble) - A.t().mv(x)) < tol * (1 + max_abs(A)));
    CHECK(D.global_nnz() <= a.values.numel());
    ++ran;
  }
  CHECK(ran > 0);
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
