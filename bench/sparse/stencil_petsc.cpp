// CG per iteration on a structured grid, three ways in one launch: einshard's matrix-free
// StencilOperator, einshard's assembled DSparseTensor (CSR) of the same rows, and PETSc's KSPCG on
// an assembled AIJ matrix of the same rows (MPIAIJ; SEQAIJ on one rank).
//
// Problem: the Dirichlet Poisson matrix, 2-D 5-point on g² (--dims 2) or 3-D 7-point on g³
// (--dims 3), float64, b = 1. The grid is split in slabs along its first dimension (ceil(g / P)
// planes per rank, the StencilOperator's default), and the same rows are given to the other two:
// DSparseTensor::from_local's `owned_rows`, PETSc's local sizes. Each rank assembles only its own
// rows.
//
// All three run exactly `--iters` iterations (rtol = atol = 0; PETSc KSPSetTolerances(0, 0,
// default, iters)), testing the unpreconditioned residual norm every iteration (PETSc
// KSP_NORM_UNPRECONDITIONED), from x = 0, with the preconditioners of `--precond` (none: PCNONE,
// jacobi: PCJACOBI). A sample is the slowest rank's time of one solve call; each rep runs the
// three in an order rotating from rep to rep, after one untimed solve each; medians over `--reps`.
// The first rep compares the stencil's solution with the CSR's (x_rel_diff: the same iteration
// summed in another order). JSON lines on rank 0:
//
//   {"bench":"sparse_stencil_cg","ranks":P,"dims":2|3,"grid":g,"n":N,"precond":...,"iterations":...,
//    "stencil_ms_per_it":...,"csr_ms_per_it":...,"petsc_ms_per_it":...,"stencil_mrow_it_s":...,
//    "vs_petsc":PETSc time / stencil time (the throughput ratio),"vs_csr":CSR time / stencil time,
//    "x_rel_diff":...,"reps":...}
//
//   mpirun -n P einshard_bench_sparse_stencil [--dims 2] [--grid 1000] [--iters 200] [--reps 3]
//        [--precond none,jacobi]
//
// bench/sparse/run.sh --suite stencil runs the published cases.

#include <ATen/ATen.h>
#include <mpi.h>
#include <petscksp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/sparse.hpp>

#include "petsc_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::median;
using einshard_bench::timed;
using einshard_bench::world_rank;
using einshard_bench::world_size;

namespace {

struct Config {
  int dims = 2;
  std::int64_t grid = 1000;
  int iters = 200;
  int reps = 3;
  std::string precond = "none,jacobi";
};

Config parse(int argc, char** argv) {
  Config c;
  einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& next) {
    if (a == "--dims") c.dims = std::stoi(next());
    else if (a == "--grid") c.grid = std::stoll(next());
    else if (a == "--iters") c.iters = std::stoi(next());
    else if (a == "--reps") c.reps = std::stoi(next());
    else if (a == "--precond") c.precond = next();
    else return false;
    return true;
  });
  if (c.dims != 2 && c.dims != 3) throw std::runtime_error("--dims: expected 2 or 3");
  if (c.reps < 1) throw std::runtime_error("--reps must be at least 1");
  return c;
}

int run(const Config& cfg) {
  const int P = world_size();
  const es::Mesh mesh(MPI_COMM_WORLD, {P}, {"x"});
  const bool three = cfg.dims == 3;
  const auto g = cfg.grid;
  const std::vector<std::int64_t> shape = three ? std::vector<std::int64_t>{g, g, g} : std::vector<std::int64_t>{g, g};
  const sp::StencilOperator S(three ? sp::Stencil::laplacian7() : sp::Stencil::laplacian5(), shape, mesh);
  const auto n = S.size();
  const auto owned = S.layout()->owned();
  const std::int64_t lo = owned.numel() > 0 ? owned[0].item<std::int64_t>() : 0;
  const std::int64_t hi = lo + owned.numel();
  const auto rows = einshard_bench::poisson_rows(g, lo, hi, three);
  const auto D = sp::DSparseTensor::from_local(
      at::from_blob(const_cast<double*>(rows.val.data()), {static_cast<std::int64_t>(rows.val.size())}, at::kDouble).clone(),
      einshard_bench::as_tensor(rows.row), einshard_bench::as_tensor(rows.col), {n, n}, mesh, {.owned_rows = owned});
  const auto b = S.vector(at::ones({owned.numel()}, at::kDouble));
  const auto bd = D.vector(b.local());

  Mat A = einshard_bench::assemble_aij(rows, n);
  Vec pb = nullptr, px = nullptr;
  PETSC(MatCreateVecs(A, &px, &pb));
  PETSC(VecSet(pb, 1.0));

  for (const auto& precond : einshard_bench::split(cfg.precond)) {
    if (precond != "none" && precond != "jacobi") throw std::runtime_error("--precond: none or jacobi, got " + precond);
    const sp::SolveOptions o{.method = sp::Method::cg,
                             .preconditioner = precond == "jacobi" ? sp::Preconditioner::jacobi : sp::Preconditioner::none,
                             .rtol = 0.0, .atol = 0.0, .maxiter = cfg.iters, .residual_history = false};
    KSP ksp = nullptr;
    PETSC(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PETSC(KSPSetOperators(ksp, A, A));
    PETSC(KSPSetType(ksp, KSPCG));
    PC pc = nullptr;
    PETSC(KSPGetPC(ksp, &pc));
    PETSC(PCSetType(pc, precond == "jacobi" ? PCJACOBI : PCNONE));
    PETSC(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
    PETSC(KSPSetTolerances(ksp, 0.0, 0.0, PETSC_DEFAULT, cfg.iters));
    PETSC(KSPSetUp(ksp));

    sp::SolveResult rs, rd;
    int petsc_its = 0;
    const std::vector<std::function<double()>> sides{
        [&] { return timed([&] { rs = S.solve(b, o); }); },
        [&] { return timed([&] { rd = D.solve(bd, o); }); },
        [&] { return timed([&] { petsc_its = einshard_bench::ksp_solve(ksp, pb, px); }); }};
    for (const auto& side : sides) (void)side();
    std::vector<double> t[3];
    double x_diff = 0.0;
    for (int rep = 0; rep < cfg.reps; ++rep) {
      for (int k = 0; k < 3; ++k) {
        const int which = (k + rep) % 3;
        t[which].push_back(sides[static_cast<std::size_t>(which)]());
      }
      if (rep == 0) {
        const auto d = (rs.x.local() - rd.x.local()).square().sum().item<double>();
        const auto r = rd.x.local().square().sum().item<double>();
        double both[2] = {d, r};
        MPI_Allreduce(MPI_IN_PLACE, both, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        x_diff = std::sqrt(both[0] / std::max(both[1], 1e-300));
      }
    }
    if (rs.info.iterations != cfg.iters || rd.info.iterations != cfg.iters || petsc_its != cfg.iters)
      throw std::runtime_error("a solver stopped early: " + std::to_string(rs.info.iterations) + ", " +
                               std::to_string(rd.info.iterations) + ", " + std::to_string(petsc_its));
    const double ts = median(t[0]), td = median(t[1]), tp = median(t[2]);
    if (world_rank() == 0)
      std::printf("{\"bench\":\"sparse_stencil_cg\",\"ranks\":%d,\"dims\":%d,\"grid\":%lld,\"n\":%lld,\"precond\":\"%s\","
                  "\"iterations\":%d,\"stencil_ms_per_it\":%.4f,\"csr_ms_per_it\":%.4f,\"petsc_ms_per_it\":%.4f,"
                  "\"stencil_mrow_it_s\":%.1f,\"vs_petsc\":%.3f,\"vs_csr\":%.3f,\"x_rel_diff\":%.2e,\"reps\":%d}\n",
                  P, cfg.dims, static_cast<long long>(g), static_cast<long long>(n), precond.c_str(), cfg.iters,
                  ts * 1e3 / cfg.iters, td * 1e3 / cfg.iters, tp * 1e3 / cfg.iters,
                  static_cast<double>(n) * cfg.iters / ts * 1e-6, tp / ts, td / ts, x_diff, cfg.reps);
    std::fflush(stdout);
    PETSC(KSPDestroy(&ksp));
  }
  PETSC(VecDestroy(&px));
  PETSC(VecDestroy(&pb));
  PETSC(MatDestroy(&A));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return einshard_bench::petsc_main(argc, argv, "einshard_bench_sparse_stencil", parse, run);
}
