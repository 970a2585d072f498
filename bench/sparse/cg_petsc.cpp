// Distributed CG and SpMV: einshard (DSparseTensor::solve, matvec) against PETSc (KSPCG, MatMult)
// on the same matrix, rows and right-hand side, in one launch; plus the machine's STREAM triad
// measured in the same run, the bound a bandwidth-limited SpMV is held to.
//
// Problem: the 2-D 5-point Poisson matrix on a g × g grid (Dirichlet; N = g², ≈ 5N stored
// entries), float64, b = 1. Rows are split in contiguous blocks of ceil(N / P), einshard's
// `simple` partition, given explicitly to both libraries (DSparseTensor::from_local's
// `owned_rows`, PETSc's local sizes). Each rank assembles only its own rows on both sides.
//
// CG: both run exactly `--iters` iterations (rtol = atol = 0, maxiter = iters; PETSc:
// KSPSetTolerances(0, 0, default, iters)), both testing the unpreconditioned residual norm every
// iteration (PETSc: KSP_NORM_UNPRECONDITIONED), zero initial guess. Preconditioners: none (PETSc
// PCNONE), jacobi (PCJACOBI), and on request block_jacobi (PCBJACOBI: one block per rank, ILU(0)
// inside: PETSc's default sub-solver, the same preconditioner as einshard's), ssor (PCSOR with
// SOR_LOCAL_SYMMETRIC_SWEEP, ω = 1, one sweep: PETSc's parallel SOR is per rank too, the same M
// as einshard's) and neumann (PCKSP running KSPRICHARDSON with scale 1/τ, τ = ‖D⁻¹A‖_∞, and
// PCJACOBI for `neumann_degree` = 2 iterations from zero: the same polynomial, through PETSc's
// nested KSP, as PETSc has no polynomial PC of its own but Chebyshev). Both set the
// preconditioner up once and reuse it (PETSc: KSPSetUp; einshard: the matrix keeps its last
// solve's); the time per iteration below is the whole solve call ("einshard_setup_ms" says what
// einshard's setup cost in it; "ratio_iter_only" leaves it out). `--method bicgstab|gmres` runs
// that method on both sides instead (PETSc KSPBCGS / KSPGMRES with restart 30, right
// preconditioning: the unpreconditioned norm, as einshard's; PETSc's default classical Gram–Schmidt
// without refinement, einshard's with DGKS refinement unless `--gmres-one-pass`). A short warm-up
// solve of each comes first; the first timed rep checks that both ran every iteration and compares
// their solutions (x_rel_diff: the same algorithm in a different summation order).
//
// History (--cases history): both solve to --history-rtol from x = 0, `--reps` times in rotating
// order (the setup kept from a warm-up solve on both sides), and report the iterations, the median
// time to solution and its ratio, with every residual norm of the last rep.
//
// SpMV: `--spmv-reps` products per sample: einshard's D.matvec(x) (a new DVector per call),
// einshard's solver hot path D.apply(x, y) into a kept y, and PETSc's MatMult. GB/s counts the
// same minimal traffic for all: 8 + 4 bytes per stored entry (value, 32-bit column index) and
// 8 + 8 per row (x read once, y written); row pointers and halo copies are not counted.
// STREAM triad: a = b + s c on three arrays of `--triad-mib` MiB per rank, every rank at once,
// 24 bytes per element (no write-allocate), summed over the ranks.
//
// Every rep runs the variants of every case back to back, the order rotating each rep; a sample
// is the maximum over the ranks of one variant's elapsed time (MPI_Barrier before each). Reported:
// medians over `--reps` samples. Output: JSON lines on rank 0.
//
//   {"bench":"sparse_cg","kernels":"native"|"generic","ranks":P,"grid":g,"n":N,"precond":...,"iterations":200,
//    "einshard_ms_per_it":...,"petsc_ms_per_it":...,"einshard_mrow_it_s":...,"petsc_mrow_it_s":...,
//    "ratio":einshard/PETSc throughput (of the medians),"ratio_paired":median of the same-rep
//    ratios,"einshard_iter_only_ms_per_it":...,"ratio_iter_only":...,"einshard_setup_ms":...,
//    "x_rel_diff":...}
//   {"bench":"sparse_cg_solve","ranks":P,"precond":...,"einshard_iterations":...,"petsc_iterations":...,
//    "einshard_s":...,"petsc_s":...,"ratio":PETSc time / einshard time (>1: einshard faster),"ratio_paired":...}
//   {"bench":"sparse_spmv","kernels":...,"ranks":P,...,"einshard_matvec_gbs":...,"einshard_apply_gbs":...,
//    "petsc_gbs":...,"triad_gbs":...,"matvec_vs_triad":...,"apply_vs_triad":...,"petsc_vs_triad":...,
//    "ratio":einshard matvec / PETSc}
//
//   mpirun -n P einshard_bench_sparse_cg [--grid 2000] [--iters 200] [--reps 5]
//        [--precond none,jacobi[,block_jacobi,amg,ssor,neumann]] [--cases cg,spmv[,history]] [--history-rtol 1e-8]
//        [--method cg|bicgstab|gmres]
//        [--gmres-one-pass]
//        [--spmv-reps 20] [--triad-mib 128]
//        [--quick]
//
// --quick: grid 300, 3 reps (a smoke test). --cases: which parts to run (default cg,spmv; history
// adds the residual histories of both solvers to --history-rtol, default 1e-8, as
// {"bench":"sparse_cg_history","solver":"einshard"|"petsc",...,"residuals":[...]}).
// Environment: EINSHARD_NUM_THREADS (torch intra-op threads per rank, default 1).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <petscksp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/sparse.hpp>

#include "petsc_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::as_tensor;
using einshard_bench::assemble_aij;
using einshard_bench::max_over_ranks;
using einshard_bench::poisson_rows;
using einshard_bench::Rows;
using einshard_bench::split;
using einshard_bench::world_rank;
using einshard_bench::world_size;

namespace {

struct Config {
  std::int64_t grid = 2000;
  int iters = 200;
  int reps = 5;
  int spmv_reps = 20;
  double triad_mib = 128;
  std::vector<std::string> precond{"none", "jacobi"};
  bool cg = true, spmv = true;
  bool history = false;       ///< --cases history: residual histories to --history-rtol
  double history_rtol = 1e-8;
  std::string method = "cg";  ///< the Krylov method of the solve case: cg, bicgstab or gmres
  bool one_pass = false;      ///< gmres: one Gram–Schmidt pass (PETSc's default) instead of DGKS
};

/// The kernels einshard's side runs on these CPU tensors: "native", or "generic" under
/// EINSHARD_SPARSE_KERNELS=generic (the ATen path of every other device).
const char* kernels() { return sp::kernels_for(at::empty({0}, at::kDouble)) == "generic" ? "generic" : "native"; }

Config parse(int argc, char** argv) {
  Config c;
  einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& value) {
    if (a == "--grid") c.grid = std::stoll(value());
    else if (a == "--iters") c.iters = std::stoi(value());
    else if (a == "--reps") c.reps = std::stoi(value());
    else if (a == "--spmv-reps") c.spmv_reps = std::stoi(value());
    else if (a == "--triad-mib") c.triad_mib = std::stod(value());
    else if (a == "--precond") c.precond = split(value());
    else if (a == "--method") c.method = value();
    else if (a == "--gmres-one-pass") c.one_pass = true;
    else if (a == "--cases") {
      const auto cases = split(value());
      c.cg = std::find(cases.begin(), cases.end(), "cg") != cases.end();
      c.spmv = std::find(cases.begin(), cases.end(), "spmv") != cases.end();
      c.history = std::find(cases.begin(), cases.end(), "history") != cases.end();
    }
    else if (a == "--history-rtol") c.history_rtol = std::stod(value());
    else if (a == "--quick") {
      c.grid = 300;
      c.reps = 3;
      c.triad_mib = 32;
    } else {
      return false;
    }
    return true;
  });
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Runs both in an order that alternates with the rep, so neither side always runs on a cache or
/// a time slice the other left behind.
template <class A, class B>
void in_turn(int rep, A&& a, B&& b) {
  if (rep % 2 == 0) {
    a();
    b();
  } else {
    b();
    a();
  }
}

double sum_over_ranks(double t) {
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return t;
}

/// Seconds of `f` on the slowest rank.
double timed(const std::function<void()>& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  f();
  return max_over_ranks(MPI_Wtime() - t0);
}

/// PETSc's side: the same rows as an MPIAIJ (SEQAIJ on one rank) matrix and a CG solver.
struct Petsc {
  Mat A = nullptr;
  Vec b = nullptr, x = nullptr, y = nullptr;
  KSP ksp = nullptr;

  Petsc(const Rows& rows, std::int64_t n) : A(assemble_aij(rows, n)) {
    PETSC(MatCreateVecs(A, &x, &b));
    PETSC(VecDuplicate(b, &y));
    PETSC(VecSet(b, 1.0));
  }

  void configure(const std::string& precond, int iters, const std::string& method, double neumann_tau) {
    if (ksp) PETSC(KSPDestroy(&ksp));
    PETSC(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PETSC(KSPSetOperators(ksp, A, A));
    PETSC(KSPSetType(ksp, method == "cg" ? KSPCG : method == "bicgstab" ? KSPBCGS : KSPGMRES));
    // PETSc's BiCGStab and GMRES test the unpreconditioned norm only with right preconditioning,
    // which is einshard's.
    if (method != "cg") PETSC(KSPSetPCSide(ksp, PC_RIGHT));
    if (method == "gmres") PETSC(KSPGMRESSetRestart(ksp, 30));
    PC pc = nullptr;
    PETSC(KSPGetPC(ksp, &pc));
    PETSC(PCSetType(pc, precond == "none"      ? PCNONE
                        : precond == "jacobi"  ? PCJACOBI
                        : precond == "amg"     ? PCHYPRE  // BoomerAMG with PETSc's settings (amg_like_petsc)
                        : precond == "ssor"    ? PCSOR
                        : precond == "neumann" ? PCKSP
                                               : PCBJACOBI));
    if (precond == "ssor") {
      PETSC(PCSORSetSymmetric(pc, SOR_LOCAL_SYMMETRIC_SWEEP));
      PETSC(PCSORSetOmega(pc, 1.0));
      PETSC(PCSORSetIterations(pc, 1, 1));
    }
    if (precond == "neumann") {
      KSP inner = nullptr;
      PC jacobi = nullptr;
      PETSC(PCKSPGetKSP(pc, &inner));
      PETSC(KSPSetType(inner, KSPRICHARDSON));
      PETSC(KSPRichardsonSetScale(inner, 1.0 / neumann_tau));
      PETSC(KSPGetPC(inner, &jacobi));
      PETSC(PCSetType(jacobi, PCJACOBI));
      PETSC(KSPSetNormType(inner, KSP_NORM_NONE));
      PETSC(KSPSetTolerances(inner, 0.0, 0.0, PETSC_DEFAULT, sp::PreconditionerOptions{}.neumann_degree));
    }
    PETSC(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
    PETSC(KSPSetTolerances(ksp, 0.0, 0.0, PETSC_DEFAULT, iters));
    PETSC(KSPSetUp(ksp));
  }

  int solve() { return einshard_bench::ksp_solve(ksp, b, x); }

  ~Petsc() {
    if (ksp) KSPDestroy(&ksp);
    VecDestroy(&y);
    VecDestroy(&x);
    VecDestroy(&b);
    MatDestroy(&A);
  }
};

/// ‖a − b‖ / ‖b‖ over all ranks, b a PETSc vector.
double relative_difference(const at::Tensor& a, Vec b) {
  const PetscScalar* p = nullptr;
  PETSC(VecGetArrayRead(b, &p));
  const auto n = a.numel();
  const auto* q = a.data_ptr<double>();
  double d[2] = {0, 0};
  for (std::int64_t i = 0; i < n; ++i) {
    d[0] += (q[i] - p[i]) * (q[i] - p[i]);
    d[1] += p[i] * p[i];
  }
  PETSC(VecRestoreArrayRead(b, &p));
  MPI_Allreduce(MPI_IN_PLACE, d, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return std::sqrt(d[0] / std::max(d[1], 1e-300));
}

sp::Method method_of(const std::string& name) {
  if (name == "cg") return sp::Method::cg;
  if (name == "bicgstab") return sp::Method::bicgstab;
  if (name == "gmres") return sp::Method::gmres;
  throw std::runtime_error("--method: expected cg, bicgstab or gmres, got " + name);
}

/// τ = ‖D⁻¹A‖_∞ of the rows of all ranks, as einshard's neumann computes it.
double neumann_tau(const Rows& rows) {
  double tau = 0;
  for (std::size_t i = 0; i + 1 < rows.rowptr.size(); ++i) {
    double diag = 0, sum = 0;
    for (auto k = rows.rowptr[i]; k < rows.rowptr[i + 1]; ++k) {
      const auto ku = static_cast<std::size_t>(k);
      sum += std::abs(rows.val[ku]);
      if (rows.col[ku] == rows.row[ku]) diag = rows.val[ku];
    }
    tau = std::max(tau, sum / std::abs(diag));
  }
  return max_over_ranks(tau);
}

/// einshard's amg with PETSc's PCHYPRE settings (Falgout, classical, no truncation, hybrid
/// symmetric Gauss–Seidel in C/F order): the same BoomerAMG hierarchy and cycle on both sides, so
/// the residual histories should coincide.
sp::SolveOptions with_preconditioner(sp::SolveOptions o, const std::string& name) {
  o.preconditioner = sp::preconditioner_from_string(name);
  if (name == "amg")
    o.preconditioner_options.amg = {.coarsening = sp::AmgCoarsening::falgout,
                                    .interpolation = sp::AmgInterpolation::classical, .strong_threshold = 0.25,
                                    .max_elements = 0, .smoother = sp::AmgSmoother::hybrid_gauss_seidel,
                                    .aggressive_levels = 0, .cf_order = true};
  return o;
}

/// The STREAM triad on this rank's three arrays.
struct Triad {
  std::vector<double> a, b, c;
  explicit Triad(std::size_t n) : a(n, 0.0), b(n, 1.0), c(n, 2.0) {}
  void run(int times) {
    const double s = 3.0;
    double* __restrict pa = a.data();
    const double* __restrict pb = b.data();
    const double* __restrict pc = c.data();
    const std::size_t n = a.size();
    for (int t = 0; t < times; ++t)
      for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  }
};

int run(const Config& cfg) {
  const int rank = world_rank(), p = world_size();
  const std::int64_t g = cfg.grid, n = g * g;
  const std::int64_t block = (n + p - 1) / p;  // the simple partition
  const std::int64_t lo = std::min<std::int64_t>(rank * block, n), hi = std::min<std::int64_t>(lo + block, n);
  const Rows rows = poisson_rows(g, lo, hi);
  const double nnz = sum_over_ranks(static_cast<double>(rows.val.size()));

  es::Mesh mesh(MPI_COMM_WORLD, {p}, {"rows"});
  const auto values = at::from_blob(const_cast<double*>(rows.val.data()), {static_cast<std::int64_t>(rows.val.size())},
                                    at::kDouble).clone();
  const auto D = sp::DSparseTensor::from_local(values, as_tensor(rows.row), as_tensor(rows.col), {n, n}, mesh,
                                               {.owned_rows = at::arange(lo, hi, at::kLong)});
  Petsc petsc(rows, n);
  const double tau = neumann_tau(rows);

  if (rank == 0) {
    const char* version = nullptr;
    char buffer[256];
    PetscGetVersion(buffer, sizeof buffer);
    version = buffer;
    std::printf("{\"bench\":\"sparse_config\",\"ranks\":%d,\"grid\":%lld,\"n\":%lld,\"nnz\":%.0f,"
                "\"iterations\":%d,\"reps\":%d,\"threads\":%d,\"petsc\":\"%s\"}\n",
                p, static_cast<long long>(g), static_cast<long long>(n), nnz, cfg.iters, cfg.reps,
                at::get_num_threads(), version);
    std::fflush(stdout);
  }

  // ---- CG -----------------------------------------------------------------------------------
  auto b = D.zeros();
  b.local().fill_(1.0);
  for (const auto& name : cfg.cg ? cfg.precond : std::vector<std::string>{}) {
    auto opts = with_preconditioner({.method = method_of(cfg.method), .rtol = 0, .atol = 0, .maxiter = cfg.iters,
                                     .residual_history = false},
                                    name);
    if (cfg.one_pass) opts.reorthogonalize = sp::Reorthogonalize::never;
    petsc.configure(name, cfg.iters, cfg.method, tau);
    // Warm-up (a few iterations of each: first touches, caches), then the timed reps; the first
    // rep's results are checked: both ran every iteration and their solutions agree.
    {
      auto short_opts = opts;
      short_opts.maxiter = std::min(cfg.iters, 5);
      (void)D.solve(b, short_opts);
      petsc.configure(name, short_opts.maxiter, cfg.method, tau);
      petsc.solve();
      petsc.configure(name, cfg.iters, cfg.method, tau);
    }
    double diff = -1;
    std::vector<double> t_es, t_es_iter, t_es_setup, t_petsc;
    at::Tensor x_es;
    for (int rep = 0; rep < cfg.reps; ++rep) {
      auto einshard = [&] {
        double setup = 0, iterations = 0;
        sp::SolveResult r;
        t_es.push_back(timed([&] {
          r = D.solve(b, opts);
          setup = r.info.setup_seconds;
          iterations = r.info.seconds;
        }));
        t_es_setup.push_back(max_over_ranks(setup));
        t_es_iter.push_back(max_over_ranks(iterations));
        if (rep > 0) return;
        if (r.info.iterations != cfg.iters)
          throw std::runtime_error("einshard " + cfg.method + " (" + name + ") ran " + std::to_string(r.info.iterations) +
                                   " iterations, expected " + std::to_string(cfg.iters));
        x_es = r.x.local();
      };
      auto reference = [&] {
        int its = 0;
        t_petsc.push_back(timed([&] { its = petsc.solve(); }));
        if (rep == 0 && its != cfg.iters)
          throw std::runtime_error("PETSc " + cfg.method + " (" + name + ") ran " + std::to_string(its) + " iterations, expected " +
                                   std::to_string(cfg.iters));
      };
      in_turn(rep, einshard, reference);
      if (rep == 0) diff = relative_difference(x_es, petsc.x);
    }
    const double es_it = median(t_es) / cfg.iters, pe_it = median(t_petsc) / cfg.iters;
    std::vector<double> paired;  // same-rep ratios: robust to load that drifts between reps
    for (std::size_t i = 0; i < t_es.size(); ++i) paired.push_back(t_petsc[i] / t_es[i]);
    const double rows_it = static_cast<double>(n);
    if (rank == 0) {
      std::printf("{\"bench\":\"sparse_cg\",\"kernels\":\"%s\",\"method\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"n\":%lld,\"precond\":\"%s\","
                  "\"iterations\":%d,\"einshard_ms_per_it\":%.4f,\"petsc_ms_per_it\":%.4f,"
                  "\"einshard_mrow_it_s\":%.1f,\"petsc_mrow_it_s\":%.1f,\"ratio\":%.3f,\"ratio_paired\":%.3f,"
                  "\"einshard_iter_only_ms_per_it\":%.4f,\"ratio_iter_only\":%.3f,\"einshard_setup_ms\":%.2f,"
                  "\"x_rel_diff\":%.2e,\"reps\":%d}\n",
                  kernels(), (cfg.method + (cfg.one_pass ? "-one-pass" : "")).c_str(), p, static_cast<long long>(g), static_cast<long long>(n), name.c_str(), cfg.iters,
                  es_it * 1e3,
                  pe_it * 1e3, rows_it / es_it / 1e6, rows_it / pe_it / 1e6, pe_it / es_it, median(paired),
                  median(t_es_iter) / cfg.iters * 1e3, pe_it * cfg.iters / median(t_es_iter),
                  median(t_es_setup) * 1e3, diff, cfg.reps);
      std::fflush(stdout);
    }
  }

  // ---- Time to solution and convergence histories (--cases history) -----------------------------
  // Both solve to rtol = --history-rtol on the unpreconditioned residual from x = 0, recording every
  // residual norm: the same algorithm in a different summation order, so the curves should lie on
  // each other until round-off separates them. One JSON line per solver, the norms in an array, and
  // one sparse_cg_solve line with the iterations and median times of `--reps` paired solves.
  for (const auto& name : cfg.history ? cfg.precond : std::vector<std::string>{}) {
    const int maxiter = 20 * static_cast<int>(g) + 100;
    const auto opts = with_preconditioner(
        {.method = method_of(cfg.method), .rtol = cfg.history_rtol, .atol = 0, .maxiter = maxiter}, name);
    petsc.configure(name, maxiter, cfg.method, tau);
    PETSC(KSPSetTolerances(petsc.ksp, cfg.history_rtol, 0.0, PETSC_DEFAULT, maxiter));
    std::vector<PetscReal> h(static_cast<std::size_t>(maxiter) + 1);
    PETSC(KSPSetResidualHistory(petsc.ksp, h.data(), static_cast<PetscInt>(h.size()), PETSC_TRUE));
    sp::SolveResult r = D.solve(b, opts);  // warm-up: builds the setup the timed solves reuse
    int petsc_its = petsc.solve();
    std::vector<double> t_es, t_petsc;
    for (int rep = 0; rep < cfg.reps; ++rep) {
      auto einshard = [&] { t_es.push_back(timed([&] { r = D.solve(b, opts); })); };
      auto reference = [&] { t_petsc.push_back(timed([&] { petsc_its = petsc.solve(); })); };
      in_turn(rep, einshard, reference);
    }
    const PetscReal* ph = nullptr;
    PetscInt hn = 0;
    PETSC(KSPGetResidualHistory(petsc.ksp, &ph, &hn));
    if (rank != 0) continue;
    std::vector<double> paired;
    for (std::size_t i = 0; i < t_es.size(); ++i) paired.push_back(t_petsc[i] / t_es[i]);
    std::printf("{\"bench\":\"sparse_cg_solve\",\"method\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"precond\":\"%s\","
                "\"rtol\":%.1e,\"einshard_iterations\":%d,\"petsc_iterations\":%d,\"einshard_s\":%.4f,"
                "\"petsc_s\":%.4f,\"ratio\":%.3f,\"ratio_paired\":%.3f,\"converged\":%s,\"reps\":%d}\n",
                cfg.method.c_str(), p, static_cast<long long>(g), name.c_str(), cfg.history_rtol, r.info.iterations,
                petsc_its, median(t_es), median(t_petsc), median(t_petsc) / median(t_es), median(paired),
                r.info.converged ? "true" : "false", cfg.reps);
    auto line = [&](const char* solver, const double* v, std::size_t count) {
      std::printf("{\"bench\":\"sparse_cg_history\",\"solver\":\"%s\",\"method\":\"%s\",\"ranks\":%d,"
                  "\"grid\":%lld,\"precond\":\"%s\",\"rtol\":%.1e,\"iterations\":%zu,\"residuals\":[",
                  solver, cfg.method.c_str(), p, static_cast<long long>(g), name.c_str(), cfg.history_rtol,
                  count == 0 ? 0 : count - 1);
      for (std::size_t k = 0; k < count; ++k) std::printf("%s%.6e", k ? "," : "", v[k]);
      std::printf("]}\n");
    };
    line("einshard", r.info.residual_history.data(), r.info.residual_history.size());
    line("petsc", ph, static_cast<std::size_t>(hn));
    std::fflush(stdout);
  }

  // ---- SpMV and STREAM triad --------------------------------------------------------------------
  if (!cfg.spmv) return 0;
  auto xe = D.zeros();
  xe.local().copy_(at::arange(lo, hi, at::kDouble).mul_(1e-3).sin_());
  {
    PetscScalar* px = nullptr;
    PETSC(VecGetArray(petsc.x, &px));
    std::copy(xe.local().data_ptr<double>(), xe.local().data_ptr<double>() + (hi - lo), px);
    PETSC(VecRestoreArray(petsc.x, &px));
  }
  auto ye = at::empty({hi - lo}, at::kDouble);
  {
    const auto check = D.matvec(xe);
    PETSC(MatMult(petsc.A, petsc.x, petsc.y));
    const double diff = relative_difference(check.local(), petsc.y);
    if (diff > 1e-14) throw std::runtime_error("SpMV: einshard and PETSc differ by " + std::to_string(diff));
  }
  Triad triad(static_cast<std::size_t>(cfg.triad_mib * 1024 * 1024 / 8));
  triad.run(1);
  const int k = cfg.spmv_reps;
  std::vector<std::function<void()>> variants = {
      [&] { for (int i = 0; i < k; ++i) (void)D.matvec(xe); },
      [&] { for (int i = 0; i < k; ++i) (void)D.apply(xe.local(), ye, {}); },
      [&] { for (int i = 0; i < k; ++i) PETSC(MatMult(petsc.A, petsc.x, petsc.y)); },
      [&] { triad.run(k); },
  };
  std::vector<std::vector<double>> samples(variants.size());
  for (int rep = 0; rep < cfg.reps + 1; ++rep)
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const auto which = (v + static_cast<std::size_t>(rep)) % variants.size();
      const double t = timed(variants[which]);
      if (rep > 0) samples[which].push_back(t);  // rep 0 warms up
    }
  std::vector<double> paired;
  for (std::size_t i = 0; i < samples[0].size(); ++i) paired.push_back(samples[2][i] / samples[0][i]);
  const double spmv_bytes = (12.0 * nnz + 16.0 * static_cast<double>(n)) * k;
  const double triad_bytes = 24.0 * static_cast<double>(triad.a.size()) * p * k;
  const double gbs_matvec = spmv_bytes / median(samples[0]) / 1e9, gbs_apply = spmv_bytes / median(samples[1]) / 1e9,
               gbs_petsc = spmv_bytes / median(samples[2]) / 1e9, gbs_triad = triad_bytes / median(samples[3]) / 1e9;
  if (rank == 0) {
    std::printf("{\"bench\":\"sparse_spmv\",\"kernels\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"n\":%lld,\"products\":%d,"
                "\"einshard_matvec_gbs\":%.2f,\"einshard_apply_gbs\":%.2f,\"petsc_gbs\":%.2f,\"triad_gbs\":%.2f,"
                "\"matvec_vs_triad\":%.3f,\"apply_vs_triad\":%.3f,\"petsc_vs_triad\":%.3f,\"ratio\":%.3f,"
                "\"ratio_apply\":%.3f,\"ratio_paired\":%.3f,\"reps\":%d}\n",
                kernels(), p, static_cast<long long>(g), static_cast<long long>(n), k, gbs_matvec, gbs_apply, gbs_petsc,
                gbs_triad, gbs_matvec / gbs_triad, gbs_apply / gbs_triad, gbs_petsc / gbs_triad,
                gbs_matvec / gbs_petsc, gbs_apply / gbs_petsc, median(paired), cfg.reps);
    std::fflush(stdout);
  }
  // Keep the triad's result observable.
  if (triad.a[triad.a.size() / 2] != 7.0) throw std::runtime_error("triad: wrong result");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return einshard_bench::petsc_main(argc, argv, "einshard_bench_sparse_cg", parse, run);
}
