// Library objects that hold MPI resources and outlive MPI_Finalize: a DSparseTensor whose last
// solve kept an AMG hierarchy (hypre's matrices and a duplicated communicator), its row layout's
// duplicated communicator and its mesh's communicators. A program that lets them die after
// MPI_Finalize (a matrix in main's scope, a static) must exit cleanly, as with Boost.MPI, not abort
// in MPI_Comm_free. The process's exit status is the test: ctest runs it under mpiexec.

#include <mpi.h>

#include <cstdio>
#include <optional>

#include "einshard/einshard.hpp"
#include "einshard/sparse.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
#if defined(EINSHARD_HAS_HYPRE)
  const auto kind = sp::Preconditioner::amg;
#else
  const auto kind = sp::Preconditioner::chebyshev;  // a cached operator all the same
#endif
  std::optional<sp::DSparseTensor> kept;
  std::optional<sp::DSparseTensor> kept_copy;
  {
    es::Mesh mesh(MPI_COMM_WORLD, {es::comm::size_of(MPI_COMM_WORLD)}, {"r"});
    // 1-D Laplacian, each rank its simple block of rows.
    const std::int64_t n = 64;
    const auto [first, last] = sp::simple_rows(n, MPI_COMM_WORLD);
    std::vector<double> v;
    std::vector<std::int64_t> r, c;
    for (auto i = first; i < last; ++i)
      for (auto j : {i - 1, i, i + 1})
        if (j >= 0 && j < n) {
          r.push_back(i);
          c.push_back(j);
          v.push_back(i == j ? 2.0 : -1.0);
        }
    const auto A = sp::DSparseTensor::from_local(at::tensor(v, at::kDouble), at::tensor(r, at::kLong),
                                                 at::tensor(c, at::kLong), {n, n}, mesh);
    const auto s = A.solve(A.scatter(at::ones({n}, at::kDouble)),
                           {.method = sp::Method::cg, .preconditioner = kind, .rtol = 1e-8});
    if (!s.info.converged) {
      std::fprintf(stderr, "outlive_finalize: the solve did not converge\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    kept = A;  // with the AMG hierarchy of its last solve
    kept_copy = A + 0.0;
    (void)kept->solve(kept->scatter(at::ones({n}, at::kDouble)),
                      {.method = sp::Method::cg, .preconditioner = kind, .rtol = 1e-8});
  }
  MPI_Finalize();
  kept.reset();       // frees hypre's objects and the duplicated communicators after MPI_Finalize
  kept_copy.reset();
  return 0;
}
