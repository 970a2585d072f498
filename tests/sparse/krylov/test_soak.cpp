// Bounded resources of the sparse part: many solves, each on a new matrix (new partition, halo
// plan and preconditioner), with every rank's memory staying bounded. Small in CI; docs/testing.md
// has the offline run (EINSHARD_SOAK_SOLVES=1000).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/sparse.hpp>

#include "memory_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdint>

namespace test_soak {

namespace es = einshard;
namespace sp = einshard::sparse;
namespace et = einshard::testing;

TEST_CASE("soak: solves on new matrices keep memory bounded", "[sparse][soak]") {
  const long solves = et::soak_count("EINSHARD_SOAK_SOLVES", 60);
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  using P = sp::Preconditioner;
  auto once = [&](long i) {
    const std::int64_t nx = 4 + i % 5, ny = 3 + i % 4;
    const auto coo = et::poisson2d(nx, ny);
    const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
    const auto D = sp::DSparseTensor::partition(A, mesh, {.method = i % 2 ? sp::PartitionMethod::rcb : sp::PartitionMethod::simple,
                                                          .coords = et::grid_coords(nx, ny)});
    const auto b = at::ones({coo.n}, at::kDouble);
    const P pcs[] = {P::jacobi, P::block_jacobi, P::chebyshev};
    const auto s = D.solve(D.scatter(b), {.preconditioner = pcs[i % 3], .rtol = 1e-10});
    return s.info.converged && (D.matvec(s.x).full_tensor() - b).abs().max().item<double>() < 1e-8;
  };
  long wrong = 0;
  for (long i = 0; i < solves / 2; ++i) wrong += once(i) ? 0 : 1;
  const auto half = et::resident_bytes();
  for (long i = solves / 2; i < solves; ++i) wrong += once(i) ? 0 : 1;
  const auto end = et::resident_bytes();
  INFO("rank " << w.rank << ": resident " << half / 1024 << " KiB after " << solves / 2 << " solves, " << end / 1024
               << " KiB after " << solves);
  CHECK(wrong == 0);
  CHECK(end - half < et::soak_growth_limit());
}

}  // namespace test_soak
