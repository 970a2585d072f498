// What the PETSc-anchored sparse benchmarks (cg_petsc.cpp, amg_petsc.cpp) share: PETSc error
// checks, comma lists, the torch thread count, one rank's rows of the Poisson matrices, PETSc's AIJ
// copy of them, and main's MPI/PETSc bracket.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <petscksp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace einshard_bench {

inline void petsc_check(PetscErrorCode code, const char* what) {
  if (code != 0) throw std::runtime_error(std::string("PETSc call failed: ") + what);
}
#define PETSC(call) ::einshard_bench::petsc_check((call), #call)

/// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

/// Torch intra-op threads per rank: $EINSHARD_NUM_THREADS, default 1.
inline int threads_from_env() {
  const char* v = std::getenv("EINSHARD_NUM_THREADS");
  const int t = v ? std::atoi(v) : 1;
  return t > 0 ? t : 1;
}

/// This rank's rows [lo, hi) of the Dirichlet Poisson matrix on a g × g grid (5-point) or, with
/// `three`, a g × g × g grid (7-point): COO with global indices and a local CSR view of the same
/// entries, columns ascending in each row (as PETSc's MatSetValues likes them).
struct Rows {
  std::int64_t lo = 0, hi = 0;
  std::vector<std::int64_t> rowptr{0}, row, col;
  std::vector<double> val;
};

inline Rows poisson_rows(std::int64_t g, std::int64_t lo, std::int64_t hi, bool three = false) {
  Rows r;
  r.lo = lo;
  r.hi = hi;
  const std::int64_t plane = g * g;
  for (std::int64_t i = lo; i < hi; ++i) {
    const auto x = i % g, y = (i / g) % g, z = three ? i / plane : 0;
    const auto add = [&](bool inside, std::int64_t j, double v) {
      if (!inside) return;
      r.row.push_back(i);
      r.col.push_back(j);
      r.val.push_back(v);
    };
    add(three && z > 0, i - plane, -1);
    add(y > 0, i - g, -1);
    add(x > 0, i - 1, -1);
    add(true, i, three ? 6 : 4);
    add(x + 1 < g, i + 1, -1);
    add(y + 1 < g, i + g, -1);
    add(three && z + 1 < g, i + plane, -1);
    r.rowptr.push_back(static_cast<std::int64_t>(r.val.size()));
  }
  return r;
}

inline at::Tensor as_tensor(const std::vector<std::int64_t>& v) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
}

/// The rows as a PETSc AIJ matrix (MPIAIJ, SEQAIJ on one rank) of n × n, assembled.
inline Mat assemble_aij(const Rows& rows, std::int64_t n) {
  Mat A = nullptr;
  const auto nloc = static_cast<PetscInt>(rows.hi - rows.lo);
  PETSC(MatCreate(PETSC_COMM_WORLD, &A));
  PETSC(MatSetSizes(A, nloc, nloc, static_cast<PetscInt>(n), static_cast<PetscInt>(n)));
  PETSC(MatSetType(A, MATAIJ));
  PETSC(MatSeqAIJSetPreallocation(A, 7, nullptr));
  PETSC(MatMPIAIJSetPreallocation(A, 7, nullptr, 4, nullptr));
  std::vector<PetscInt> cols;
  for (std::int64_t i = 0; i < rows.hi - rows.lo; ++i) {
    const auto begin = rows.rowptr[static_cast<std::size_t>(i)], end = rows.rowptr[static_cast<std::size_t>(i) + 1];
    cols.assign(rows.col.begin() + begin, rows.col.begin() + end);
    const PetscInt row = static_cast<PetscInt>(rows.lo + i);
    PETSC(MatSetValues(A, 1, &row, static_cast<PetscInt>(end - begin), cols.data(), rows.val.data() + begin,
                       INSERT_VALUES));
  }
  PETSC(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PETSC(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  return A;
}

/// main's bracket: MPI, `parse(argc, argv)`, torch threads, PETSc, `run(config)`; an exception is
/// printed with the program's `name` and aborts every rank.
template <class Parse, class Run>
int petsc_main(int argc, char** argv, const char* name, Parse&& parse, Run&& run) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    const auto cfg = parse(argc, argv);
    at::set_num_threads(threads_from_env());
    petsc_check(PetscInitializeNoArguments(), "PetscInitializeNoArguments");
    try {
      code = run(cfg);
    } catch (...) {
      PetscFinalize();
      throw;
    }
    petsc_check(PetscFinalize(), "PetscFinalize");
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "%s (rank %d): %s\n", name, rank, e.what());
    code = 1;
  }
  if (code != 0) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
}

}  // namespace einshard_bench
