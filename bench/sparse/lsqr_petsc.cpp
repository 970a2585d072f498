// Distributed LSQR and LSMR: einshard (DSparseTensor::lsqr, lsmr) against PETSc's KSPLSQR on the
// same rectangular matrix, rows, columns and right-hand side, in one launch; and the cost of the
// differentiable solve's backward against its forward.
//
// Problem: A is (2N) x N, N = g², float64: rows [0, N) the 2-D 5-point Poisson matrix on a g × g
// grid, rows [N, 2N) the forward difference u_i − u_{i+1} (u_i alone at the end): an
// overdetermined, inconsistent system. b = 1. Rows and columns are split in contiguous blocks
// (einshard's `simple` partition of 2N and of N), given explicitly to both libraries (from_local's
// owned_rows / owned_cols, PETSc's local row and column sizes). Each rank assembles its own rows.
//
// Both run exactly `--iters` iterations: einshard with atol = btol = conlim = 0 and maxiter =
// iters, PETSc with KSPSetTolerances(0, 0, default, iters) and no preconditioner. The all-reduces
// each solve makes are counted through MPI's profiling interface (MPI_Allreduce and
// MPI_Iallreduce defined in this file, see allreduce_calls()); reported per iteration.
//
// Backward: x = D.solve(b).x on the Poisson part (N x N) with b a leaf, CG + Jacobi at rtol 1e-8
// and GMRES(30) + Jacobi at rtol 1e-8, then loss = <w, x>, loss.backward(): the backward is one
// solve with Aᴴ (GMRES: with the assembled Aᴴ, built on the first backward and kept). Reported:
// forward and backward medians and their ratio.
//
// A sample is the maximum over the ranks of one variant's elapsed time (MPI_Barrier first);
// variants alternate within each rep; medians over `--reps`. JSON lines on rank 0:
//
//   {"bench":"sparse_lsqr","method":"lsqr"|"lsmr","ranks":P,"grid":g,"m":2N,"n":N,"iterations":...,
//    "einshard_ms_per_it":...,"petsc_lsqr_ms_per_it":...,"ratio":einshard time / PETSc time per
//    iteration,"einshard_allreduce_per_it":...,"petsc_allreduce_per_it":...,"x_rel_diff":...}
//   {"bench":"sparse_lsqr_products","ranks":P,"grid":g,"matvec_ratio":einshard A v / MatMult,
//    "rmatvec_ratio":einshard Aᴴ u / MatMultTranspose, and each side's ms per product}
//   {"bench":"sparse_solve_backward","method":"cg"|"gmres","ranks":P,"grid":g,"k":0|8,"forward_ms":...,
//    "backward_ms":...,"backward_over_forward":...,"forward_iterations":...}
//
//   mpirun -n P einshard_bench_sparse_lsqr [--grid 500] [--iters 200] [--reps 5] [--backward-grid 200]
//        [--cases lsqr,backward|products]
//
// `--cases products`: only the sparse_lsqr_products line (the LSQR case's products, no solves).
// Several right-hand sides as one block against single solves: multi_rhs.cpp.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <petscksp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/sparse.hpp>

#include "../common.hpp"
#include "allreduce_count.hpp"
#include "petsc_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::median;
using einshard_bench::timed;
using einshard_bench::world_rank;
using einshard_bench::world_size;

namespace {

struct Config {
  std::int64_t grid = 500;
  int iters = 200;
  int reps = 5;
  std::int64_t backward_grid = 200;
  bool lsqr = true, backward = true;
  bool products_only = false;  ///< --cases products: the two products of the LSQR case, no solves
};

Config parse(int argc, char** argv) {
  Config c;
  einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& next) {
    if (a == "--grid") c.grid = std::stoll(next());
    else if (a == "--iters") c.iters = std::stoi(next());
    else if (a == "--reps") c.reps = std::stoi(next());
    else if (a == "--backward-grid") c.backward_grid = std::stoll(next());
    else if (a == "--cases") {
      const auto v = next();
      c.lsqr = v.find("lsqr") != std::string::npos;
      c.backward = v.find("backward") != std::string::npos;
      c.products_only = !c.lsqr && v.find("products") != std::string::npos;
      c.lsqr = c.lsqr || c.products_only;
    } else {
      return false;
    }
    return true;
  });
  return c;
}

/// Rows [lo, hi) of the (2N) x N matrix, COO with global indices, ascending columns per row.
struct Rows {
  std::vector<std::int64_t> row, col, rowptr{0};
  std::vector<double> val;
};
Rows rect_rows(std::int64_t g, std::int64_t lo, std::int64_t hi) {
  const auto n = g * g;
  Rows r;
  for (std::int64_t i = lo; i < hi; ++i) {
    auto add = [&](std::int64_t j, double v) {
      r.row.push_back(i);
      r.col.push_back(j);
      r.val.push_back(v);
    };
    if (i < n) {
      einshard_bench::poisson_row(g, i, add);
    } else {
      const auto j = i - n;
      add(j, 1);
      if (j + 1 < n) add(j + 1, -1);
    }
    r.rowptr.push_back(static_cast<std::int64_t>(r.val.size()));
  }
  return r;
}

using einshard_bench::as_tensor;

struct PetscLsqr {
  Mat A = nullptr;
  Vec b = nullptr, x = nullptr;
  KSP ksp = nullptr;

  PetscLsqr(const Rows& rows, std::int64_t lo, std::int64_t nloc, std::int64_t m, std::int64_t n, int iters) {
    A = einshard_bench::petsc_matrix(rows.rowptr, rows.col, rows.val, lo, nloc, m, n, 5, 5);
    PETSC(MatCreateVecs(A, &x, &b));
    PETSC(VecSet(b, 1.0));
    PETSC(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PETSC(KSPSetOperators(ksp, A, A));
    PETSC(KSPSetType(ksp, KSPLSQR));
    PC pc = nullptr;
    PETSC(KSPGetPC(ksp, &pc));
    PETSC(PCSetType(pc, PCNONE));
    PETSC(KSPSetTolerances(ksp, 0.0, 0.0, PETSC_DEFAULT, iters));
    PETSC(KSPSetUp(ksp));
  }
  int solve() { return einshard_bench::ksp_solve(ksp, b, x); }
  at::Tensor solution() const {
    const PetscScalar* p = nullptr;
    PetscInt n = 0;
    VecGetLocalSize(x, &n);
    VecGetArrayRead(x, &p);
    auto t = at::from_blob(const_cast<PetscScalar*>(p), {static_cast<std::int64_t>(n)}, at::kDouble).clone();
    VecRestoreArrayRead(x, &p);
    return t;
  }
  ~PetscLsqr() {
    KSPDestroy(&ksp);
    VecDestroy(&x);
    VecDestroy(&b);
    MatDestroy(&A);
  }
};

void run_lsqr(const Config& cfg) {
  const auto g = cfg.grid, n = g * g, m = 2 * n;
  const auto [lo, hi] = sp::simple_rows(m, MPI_COMM_WORLD);
  const auto [clo, chi] = sp::simple_rows(n, MPI_COMM_WORLD);
  const auto rows = rect_rows(g, lo, hi);
  int P = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const auto mesh = es::Mesh(MPI_COMM_WORLD, {P}, {"x"});
  const auto vals = at::from_blob(const_cast<double*>(rows.val.data()), {static_cast<std::int64_t>(rows.val.size())},
                                  at::kDouble).clone();
  const auto D = sp::DSparseTensor::from_local(vals, as_tensor(rows.row), as_tensor(rows.col), {m, n}, mesh,
                                               {.owned_rows = at::arange(lo, hi, at::kLong),
                                                .owned_cols = at::arange(clo, chi, at::kLong)});
  const auto b = D.vector(at::ones({hi - lo}, at::kDouble));
  PetscLsqr petsc(rows, lo, chi - clo, m, n, cfg.iters);
  const sp::LeastSquaresOptions o{.atol = 0.0, .btol = 0.0, .conlim = 0.0, .maxiter = cfg.iters,
                                  .residual_history = false};
  {
    // The two products alone, each side's own, `--iters` of each per sample: where a gap in the
    // iteration comes from (halo exchange and local product of A v, reverse exchange of Aᴴ u).
    // The solvers' own entry points (Operator::apply / apply_adjoint, into preallocated slices).
    auto u = at::ones({hi - lo}, at::kDouble), v = at::ones({chi - clo}, at::kDouble);
    Vec pu = nullptr, pv = nullptr;
    MatCreateVecs(petsc.A, &pv, &pu);
    VecSet(pv, 1.0);
    VecSet(pu, 1.0);
    std::vector<double> es_mv, pe_mv, es_rmv, pe_rmv;
    for (int rep = 0; rep <= cfg.reps; ++rep) {
      const double a = timed([&] { for (int i = 0; i < cfg.iters; ++i) (void)D.apply(v, u, {}); });
      const double p = timed([&] { for (int i = 0; i < cfg.iters; ++i) MatMult(petsc.A, pv, pu); });
      const double c = timed([&] { for (int i = 0; i < cfg.iters; ++i) D.apply_adjoint(u, v); });
      const double d = timed([&] { for (int i = 0; i < cfg.iters; ++i) MatMultTranspose(petsc.A, pu, pv); });
      if (rep == 0) continue;  // warm-up
      es_mv.push_back(a), pe_mv.push_back(p), es_rmv.push_back(c), pe_rmv.push_back(d);
    }
    VecDestroy(&pu);
    VecDestroy(&pv);
    if (world_rank() == 0)
      std::printf("{\"bench\":\"sparse_lsqr_products\",\"ranks\":%d,\"grid\":%lld,\"matvec_ratio\":%.3f,"
                  "\"rmatvec_ratio\":%.3f,\"einshard_matvec_ms\":%.4f,\"petsc_matmult_ms\":%.4f,"
                  "\"einshard_rmatvec_ms\":%.4f,\"petsc_matmulttranspose_ms\":%.4f}\n",
                  P, static_cast<long long>(g), median(es_mv) / median(pe_mv), median(es_rmv) / median(pe_rmv),
                  median(es_mv) / cfg.iters * 1e3, median(pe_mv) / cfg.iters * 1e3,
                  median(es_rmv) / cfg.iters * 1e3, median(pe_rmv) / cfg.iters * 1e3);
    std::fflush(stdout);
  }
  if (cfg.products_only) return;
  for (const std::string method : {"lsqr", "lsmr"}) {
    const auto run_es = [&] { return method == "lsqr" ? D.lsqr(b, o) : D.lsmr(b, o); };
    // Warm-up, and the all-reduce counts of one solve each.
    auto calls0 = allreduce_calls();
    const auto warm = run_es();
    const double es_calls = allreduce_calls() - calls0;
    calls0 = allreduce_calls();
    const int petsc_its = petsc.solve();
    const double petsc_calls = allreduce_calls() - calls0;
    std::vector<double> t_es, t_pe, paired;
    for (int rep = 0; rep < cfg.reps; ++rep) {
      const double a = timed([&] { (void)run_es(); });
      const double p = timed([&] { (void)petsc.solve(); });
      t_es.push_back(a);
      t_pe.push_back(p);
      paired.push_back(a / p);
    }
    // Same algorithm, different summation order: the iterates agree to rounding amplified by
    // the conditioning (LSQR and LSMR differ as methods, so only LSQR is compared).
    double diff = 0.0, ref = 0.0;
    if (method == "lsqr") {
      const auto d = (warm.x.local() - petsc.solution());
      diff = d.abs().max().item<double>();
      ref = petsc.solution().abs().max().item<double>();
      MPI_Allreduce(MPI_IN_PLACE, &diff, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &ref, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    const double es_it = median(t_es) / warm.info.iterations, pe_it = median(t_pe) / petsc_its;
    if (world_rank() == 0)
      std::printf("{\"bench\":\"sparse_lsqr\",\"method\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"m\":%lld,\"n\":%lld,"
                  "\"iterations\":%d,\"petsc_iterations\":%d,\"einshard_ms_per_it\":%.4f,\"petsc_lsqr_ms_per_it\":%.4f,"
                  "\"ratio\":%.3f,\"ratio_paired\":%.3f,\"einshard_allreduce_per_it\":%.2f,"
                  "\"petsc_allreduce_per_it\":%.2f,\"x_rel_diff\":%.2e,\"reps\":%d}\n",
                  method.c_str(), P, static_cast<long long>(g), static_cast<long long>(m), static_cast<long long>(n),
                  warm.info.iterations, petsc_its, es_it * 1e3, pe_it * 1e3, es_it / pe_it, median(paired),
                  es_calls / warm.info.iterations, petsc_calls / petsc_its, ref > 0 ? diff / ref : 0.0, cfg.reps);
    std::fflush(stdout);
  }
}

/// The Poisson part alone (rows < N of rect_rows), square, contiguous rows.
sp::DSparseTensor poisson(std::int64_t g, const es::Mesh& mesh) {
  const auto n = g * g;
  const auto [lo, hi] = sp::simple_rows(n, MPI_COMM_WORLD);
  const auto rows = rect_rows(g, lo, hi);
  const auto vals = at::from_blob(const_cast<double*>(rows.val.data()), {static_cast<std::int64_t>(rows.val.size())},
                                  at::kDouble).clone();
  return sp::DSparseTensor::from_local(vals, as_tensor(rows.row), as_tensor(rows.col), {n, n}, mesh);
}

void run_backward(const Config& cfg) {
  const auto g = cfg.backward_grid;
  const int P = world_size();
  const auto D = poisson(g, es::Mesh(MPI_COMM_WORLD, {P}, {"x"}));
  const auto n_local = D.layout()->local_size();
  const auto w = at::linspace(0.5, 1.5, n_local, at::kDouble);
  for (const std::int64_t k : {std::int64_t{0}, std::int64_t{8}})  // 0: one vector; 8: an (n_local, 8) block
  for (const auto method : {sp::Method::cg, sp::Method::gmres}) {
    const sp::SolveOptions o{.method = method, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-8,
                             .residual_history = false};
    std::vector<double> t_fwd, t_bwd;
    int its = 0;
    const auto wk = k == 0 ? w : w.unsqueeze(1).expand({n_local, k}).contiguous();
    for (int rep = 0; rep <= cfg.reps; ++rep) {  // rep 0: warm-up (and GMRES's Aᴴ assembly)
      const auto b = (k == 0 ? at::ones({n_local}, at::kDouble)
                             : at::linspace(1.0, 2.0, n_local * k, at::kDouble).view({n_local, k}))
                         .requires_grad_(true);
      sp::DVector x;
      const double f = timed([&] {
        auto r = D.solve(D.vector(b), o);
        its = r.info.iterations;
        x = r.x;
      });
      const auto loss = (x.local() * wk).sum();
      const double bw = timed([&] { loss.backward(); });
      if (rep > 0) {
        t_fwd.push_back(f);
        t_bwd.push_back(bw);
      }
    }
    if (world_rank() == 0)
      std::printf("{\"bench\":\"sparse_solve_backward\",\"method\":\"%s\",\"ranks\":%d,\"grid\":%lld,"
                  "\"k\":%lld,\"forward_ms\":%.3f,\"backward_ms\":%.3f,\"backward_over_forward\":%.3f,"
                  "\"forward_iterations\":%d,\"reps\":%d}\n",
                  sp::to_string(method), P, static_cast<long long>(g), static_cast<long long>(k), median(t_fwd) * 1e3,
                  median(t_bwd) * 1e3,
                  median(t_bwd) / median(t_fwd), its, cfg.reps);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return einshard_bench::petsc_main(argc, argv, "einshard_bench_sparse_lsqr", parse, [](const Config& cfg) {
    if (cfg.lsqr) run_lsqr(cfg);
    if (cfg.backward) run_backward(cfg);
    return 0;
  });
}
