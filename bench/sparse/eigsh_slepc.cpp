// eigsh (LOBPCG, sharded basis) against SLEPc's EPSLOBPCG on the same matrix and ranks, and
// against the original's strategy as a baseline: the same LOBPCG (einshard's detail::lobpcg) on a
// basis every rank holds whole (N x m, replicated), its product applied column by column as
// scatter -> D.matvec -> all-gather (one halo exchange and one all-gather per column).
//
// Problem: 2-D 5-point Poisson on a g x g grid (N = g^2), float64, simple (contiguous) rows given
// to both libraries; k smallest eigenvalues (`--which SA`, default) or largest (`LA`), block size m
// = 2k for all three (SLEPc: EPSLOBPCGSetBlockSize), no preconditioner (SLEPc: STPRECOND with
// PCNONE), relative residual tolerance `--tol` on both (SLEPc's EPS_CONV_REL). Each variant runs
// `--reps` times alternately; reported: medians of the slowest rank's time, einshard's column
// products, SLEPc's iteration count (each iteration applies A to one block of up to m columns),
// and the largest eigenvalue difference between einshard and SLEPc.
//
//   {"bench":"eigsh_slepc","ranks":P,"n":N,"k":k,"which":"SA","einshard_ms":...,"einshard_iterations":...,
//    "einshard_matvecs":...,"slepc_ms":...,"slepc_iterations":...,"ratio":einshard/slepc time,
//    "replicated_ms":...,"replicated_ratio":einshard/replicated,"max_eig_diff":...}
//
//   mpirun -n P einshard_bench_sparse_eigsh [--grid 100] [--k 6] [--which SA|LA] [--tol 1e-8] [--reps 3]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <slepceps.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../common.hpp"
#include "einshard/sparse.hpp"

namespace sp = einshard::sparse;
using einshard_bench::median;
using einshard_bench::timed_ms;

#define SLEPC_CHECK(call)                                                              \
  do {                                                                                 \
    const PetscErrorCode _e = (call);                                                  \
    if (_e != 0) {                                                                     \
      std::fprintf(stderr, "PETSc/SLEPc error %d at %s:%d\n", int(_e), __FILE__, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
    }                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  SLEPC_CHECK(SlepcInitializeNoArguments());
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::int64_t g = 100, k = 6;
  int reps = 3;
  double tol = 1e-8;
  std::string which = "SA";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--grid") g = std::stoll(argv[i + 1]);
    if (a == "--k") k = std::stoll(argv[i + 1]);
    if (a == "--reps") reps = std::stoi(argv[i + 1]);
    if (a == "--tol") tol = std::stod(argv[i + 1]);
    if (a == "--which") which = argv[i + 1];
  }
  const bool largest = which == "LA";
  const auto n = g * g;
  const auto m = 2 * k;
  {
    const einshard::Mesh mesh(MPI_COMM_WORLD, {size}, {"x"});
    const auto [lo, hi] = sp::simple_rows(n, mesh.comm());
    std::vector<std::int64_t> r, c;
    std::vector<double> v;
    for (auto i = lo; i < hi; ++i) {
      const auto x = i % g, y = i / g;
      const auto add = [&](std::int64_t j, double value) { r.push_back(i), c.push_back(j), v.push_back(value); };
      if (y > 0) add(i - g, -1);
      if (x > 0) add(i - 1, -1);
      add(i, 4);
      if (x + 1 < g) add(i + 1, -1);
      if (y + 1 < g) add(i + g, -1);
    }
    const auto nnz = static_cast<std::int64_t>(r.size());
    const auto D = sp::DSparseTensor::from_local(at::tensor(v, at::kDouble).view({nnz}), at::tensor(r, at::kLong).view({nnz}),
                                                 at::tensor(c, at::kLong).view({nnz}), {n, n}, mesh);
    // SLEPc's matrix: the same rows.
    Mat A;
    SLEPC_CHECK(MatCreateAIJ(PETSC_COMM_WORLD, PetscInt(hi - lo), PetscInt(hi - lo), PetscInt(n), PetscInt(n), 5, nullptr, 4,
                             nullptr, &A));
    for (std::size_t e = 0; e < r.size(); ++e) {
      const PetscInt row = PetscInt(r[e]), col = PetscInt(c[e]);
      SLEPC_CHECK(MatSetValues(A, 1, &row, 1, &col, &v[e], INSERT_VALUES));
    }
    SLEPC_CHECK(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
    SLEPC_CHECK(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));

    const sp::EigshOptions options{.k = k,
                                   .which = largest ? sp::Which::largest_algebraic : sp::Which::smallest_algebraic,
                                   .tol = tol,
                                   .maxiter = 5000,
                                   .block_size = m};
    sp::EigshResult mine;
    std::vector<double> slepc_eigs(static_cast<std::size_t>(k));
    PetscInt slepc_its = 0;
    sp::detail::LobpcgResult replicated;
    std::vector<double> t_mine, t_slepc, t_rep;
    for (int rep = 0; rep < reps; ++rep) {
      t_mine.push_back(timed_ms([&] { mine = D.eigsh(options); }));
      t_slepc.push_back(timed_ms([&] {
        EPS eps;
        ST st;
        KSP ksp;
        PC pc;
        SLEPC_CHECK(EPSCreate(PETSC_COMM_WORLD, &eps));
        SLEPC_CHECK(EPSSetOperators(eps, A, nullptr));
        SLEPC_CHECK(EPSSetProblemType(eps, EPS_HEP));
        SLEPC_CHECK(EPSSetType(eps, EPSLOBPCG));
        SLEPC_CHECK(EPSLOBPCGSetBlockSize(eps, PetscInt(m)));
        SLEPC_CHECK(EPSSetDimensions(eps, PetscInt(k), PETSC_DEFAULT, PETSC_DEFAULT));
        SLEPC_CHECK(EPSSetWhichEigenpairs(eps, largest ? EPS_LARGEST_REAL : EPS_SMALLEST_REAL));
        SLEPC_CHECK(EPSSetTolerances(eps, tol, 5000));
        SLEPC_CHECK(EPSSetConvergenceTest(eps, EPS_CONV_REL));
        SLEPC_CHECK(EPSGetST(eps, &st));
        SLEPC_CHECK(STSetType(st, STPRECOND));
        SLEPC_CHECK(STGetKSP(st, &ksp));
        SLEPC_CHECK(KSPGetPC(ksp, &pc));
        SLEPC_CHECK(PCSetType(pc, PCNONE));
        SLEPC_CHECK(EPSSolve(eps));
        SLEPC_CHECK(EPSGetIterationNumber(eps, &slepc_its));
        PetscInt nconv = 0;
        SLEPC_CHECK(EPSGetConverged(eps, &nconv));
        for (PetscInt i = 0; i < std::min<PetscInt>(nconv, PetscInt(k)); ++i) {
          PetscScalar re, im;
          SLEPC_CHECK(EPSGetEigenvalue(eps, i, &re, &im));
          slepc_eigs[static_cast<std::size_t>(i)] = PetscRealPart(re);
        }
        SLEPC_CHECK(EPSDestroy(&eps));
      }));
      t_rep.push_back(timed_ms([&] {
        // The original's strategy: the replicated N x m basis, one distributed product per column.
        const auto op = [&](const at::Tensor& x) {
          auto y = at::empty_like(x);
          for (std::int64_t j = 0; j < x.size(1); ++j)
            y.select(1, j).copy_(D.matvec(D.scatter(x.select(1, j).contiguous())).full_tensor());
          return y;
        };
        const auto whole = sp::RowLayout::simple(n, MPI_COMM_SELF);
        replicated = sp::detail::lobpcg(op, sp::detail::counter_random(*whole, m, 0, false, at::kDouble), k, largest, tol,
                                        5000, {}, MPI_COMM_SELF, 1);
      }));
    }
    auto sorted = slepc_eigs;
    std::sort(sorted.begin(), sorted.end());
    if (largest) std::reverse(sorted.begin(), sorted.end());
    const auto ref = at::tensor(sorted, at::kDouble);
    const double diff = (mine.eigenvalues.detach() - ref).abs().max().item<double>();
    const double rep_diff = (replicated.theta.narrow(0, 0, k) - ref).abs().max().item<double>();
    if (rank == 0)
      std::printf(
          "{\"bench\":\"eigsh_slepc\",\"ranks\":%d,\"n\":%lld,\"k\":%lld,\"which\":\"%s\",\"tol\":%g,\"einshard_ms\":%.1f,"
          "\"einshard_iterations\":%d,\"einshard_matvecs\":%lld,\"einshard_converged\":%s,\"slepc_ms\":%.1f,"
          "\"slepc_iterations\":%d,\"ratio\":%.2f,\"replicated_ms\":%.1f,\"replicated_iterations\":%d,"
          "\"replicated_ratio\":%.2f,\"max_eig_diff\":%.2e,\"replicated_eig_diff\":%.2e}\n",
          size, static_cast<long long>(n), static_cast<long long>(k), which.c_str(), tol, median(t_mine), mine.iterations,
          static_cast<long long>(mine.matvecs), mine.converged ? "true" : "false", median(t_slepc), int(slepc_its),
          median(t_mine) / median(t_slepc), median(t_rep), replicated.iterations, median(t_mine) / median(t_rep), diff,
          rep_diff);
    SLEPC_CHECK(MatDestroy(&A));
  }
  SLEPC_CHECK(SlepcFinalize());
  MPI_Finalize();
  return 0;
}
