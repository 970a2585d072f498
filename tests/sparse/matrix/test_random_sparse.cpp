// Seeded randomized tests of the distributed sparse part: random patterns (empty rows, unsymmetric,
// duplicates, couplings between rows far apart so that a row's columns live on ranks that are not
// its neighbours) x partitions (every partition method, and from_local with random ownership --
// ranks owning nothing, rows scattered over ranks -- and entries handed in by random ranks) x the
// world sizes ctest runs: products and transposed products against a dense one-process reference
// (the solves: krylov/test_solve.cpp). A failing case prints a one-line reproducer
// (tests/support/random_support.hpp).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/sparse.hpp>

#include "random_sparse.hpp"
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

namespace test_random_sparse {

namespace es = einshard;
namespace sp = einshard::sparse;
namespace rt = einshard::testing::random;
using einshard::testing::Coo;

namespace {

using es::testing::max_abs;
using rt::distribute;
using rt::method_name;
using rt::random_matrix;

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

}  // namespace test_random_sparse
