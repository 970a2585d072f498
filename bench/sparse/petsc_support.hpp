// What the PETSc-anchored sparse benchmarks (cg_petsc.cpp, amg_petsc.cpp, lsqr_petsc.cpp) share:
// PETSc error checks, comma lists, the torch thread count, the Poisson rows both libraries are
// given, an AIJ matrix from one rank's rows (square or rectangular), and main's MPI/PETSc bracket.
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

#include "../common.hpp"

namespace einshard_bench {

inline void petsc_check(PetscErrorCode code, const char* what) {
  if (code != 0) throw std::runtime_error(std::string("PETSc call failed: ") + what);
}
#define PETSC(call) ::einshard_bench::petsc_check((call), #call)

/// One KSPSolve, returning PETSc's iteration count (every benchmark's PETSc side times this).
inline int ksp_solve(KSP ksp, Vec b, Vec x) {
  PETSC(KSPSolve(ksp, b, x));
  PetscInt its = 0;
  PETSC(KSPGetIterationNumber(ksp, &its));
  return static_cast<int>(its);
}

inline double max_over_ranks(double t) {
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

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

/// This rank's rows [lo, hi) of the Dirichlet Poisson matrix on a g × g grid (5-point) or, with
/// `three`, a g × g × g grid (7-point): COO with global indices and a local CSR view of the same
/// entries, columns ascending in each row (as PETSc's MatSetValues likes them).
struct Rows {
  std::int64_t lo = 0, hi = 0;
  std::vector<std::int64_t> rowptr{0}, row, col;
  std::vector<double> val;
};

/// The rows `ids` of the same matrix, in that order (any set of rows: a partition's).
inline Rows poisson_rows_at(std::int64_t g, const std::vector<std::int64_t>& ids, bool three = false) {
  Rows r;
  for (const std::int64_t i : ids) {
    poisson_row(
        g, i,
        [&](std::int64_t j, double v) {
          r.row.push_back(i);
          r.col.push_back(j);
          r.val.push_back(v);
        },
        three);
    r.rowptr.push_back(static_cast<std::int64_t>(r.val.size()));
  }
  return r;
}

inline Rows poisson_rows(std::int64_t g, std::int64_t lo, std::int64_t hi, bool three = false) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = lo; i < hi; ++i) ids.push_back(i);
  Rows r = poisson_rows_at(g, ids, three);
  r.lo = lo;
  r.hi = hi;
  return r;
}

inline at::Tensor as_tensor(const std::vector<std::int64_t>& v) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
}

/// Rows [first, first + rowptr.size() - 1) (local CSR, global column indices) of an m x n AIJ
/// matrix (MPIAIJ; SEQAIJ on one rank) with `nloc` owned columns, assembled; at most `d_nz`
/// entries per row in the diagonal block and `o_nz` outside it (preallocation).
inline Mat petsc_matrix(const std::vector<std::int64_t>& rowptr, const std::vector<std::int64_t>& col,
                        const std::vector<double>& val, std::int64_t first, std::int64_t nloc, std::int64_t m,
                        std::int64_t n, PetscInt d_nz, PetscInt o_nz) {
  const auto mloc = static_cast<std::int64_t>(rowptr.size()) - 1;
  Mat A = nullptr;
  PETSC(MatCreate(PETSC_COMM_WORLD, &A));
  PETSC(MatSetSizes(A, static_cast<PetscInt>(mloc), static_cast<PetscInt>(nloc), static_cast<PetscInt>(m),
                    static_cast<PetscInt>(n)));
  PETSC(MatSetType(A, MATAIJ));
  PETSC(MatSeqAIJSetPreallocation(A, d_nz, nullptr));
  PETSC(MatMPIAIJSetPreallocation(A, d_nz, nullptr, o_nz, nullptr));
  std::vector<PetscInt> cols;
  for (std::int64_t i = 0; i < mloc; ++i) {
    const auto begin = rowptr[static_cast<std::size_t>(i)], end = rowptr[static_cast<std::size_t>(i) + 1];
    cols.assign(col.begin() + begin, col.begin() + end);
    const auto row = static_cast<PetscInt>(first + i);
    PETSC(MatSetValues(A, 1, &row, static_cast<PetscInt>(end - begin), cols.data(), val.data() + begin,
                       INSERT_VALUES));
  }
  PETSC(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PETSC(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  return A;
}

/// The square Poisson rows as a PETSc AIJ matrix of n × n, assembled.
inline Mat assemble_aij(const Rows& rows, std::int64_t n) {
  return petsc_matrix(rows.rowptr, rows.col, rows.val, rows.lo, rows.hi - rows.lo, n, n, 7, 4);
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
