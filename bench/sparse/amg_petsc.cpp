// Time to solution with algebraic multigrid: einshard CG + amg (hypre BoomerAMG over all ranks)
// against PETSc CG + BoomerAMG (PCHYPRE) and PETSc CG + GAMG on the same matrix, rows and
// right-hand side, in one launch; einshard CG + Jacobi as the speed-up anchor; and pipelined CG
// (einshard CgVariant::pipelined against PETSc KSPPIPECG, and against einshard's plain CG) per
// iteration.
//
// Problems: the 2-D 5-point Poisson matrix on a g × g grid or the 3-D 7-point one on g × g × g
// (Dirichlet), float64, b = 1, x0 = 0, rows in contiguous blocks of ceil(N / P) on both sides,
// each rank assembling only its own rows. Stop test: ‖r‖ ≤ rtol ‖b‖ on the unpreconditioned
// residual (PETSc: KSP_NORM_UNPRECONDITIONED), checked every iteration.
//
// Time to solution: what a user waits for once the matrix exists: preconditioner setup plus the
// iterations. einshard: D.solve on a fresh copy of the matrix every rep (with_values, made before
// the clock starts, so no setup is reused); PETSc: KSPSetUp (the hypre conversion and setup, or
// GAMG's) and KSPSolve timed, on a KSP created and configured before the clock starts. setup_s is
// the preconditioner's setup on both sides, solve_s the rest (as KSPSolve: the first
// preconditioner application included). Solvers (`--solvers`):
//   es_amg        einshard CG + amg with its defaults, which follow the matrix (AmgOptions::resolved:
//                 ≤ 6 entries per row, the 2-D 5-point matrix: Falgout, classical, no truncation,
//                 θ = 0.25; more, the 3-D 7-point one: HMIS, extended+i with 4 entries, θ = 0.5, one
//                 level of aggressive coarsening; l1 Gauss–Seidel forward/backward in both), then
//                 --theta and --amg
//   es_amg_alt    einshard CG + amg with es_amg's settings changed by --amg-alt (same keys as
//                 --amg), to compare two settings of einshard in one launch
//   es_amg_f      einshard CG + amg with PETSc's PCHYPRE settings (Falgout, classical, no
//                 truncation, hybrid symmetric Gauss–Seidel in C/F order)
//   es_jacobi     einshard CG + Jacobi (the anchor of the speed-up)
//   es_sa         einshard CG + smoothed_aggregation (einshard's own AMG) with its defaults
//   es_amg_mixed, es_jacobi_mixed, es_sa_mixed
//                 es_amg, es_jacobi and es_sa with Precision::mixed: float32 inner solves refined
//                 to rtol on the float64 matrix (hypre's V-cycle stays float64, on converted
//                 vectors; smoothed aggregation's hierarchy is the float32 copy's, its cycle float32)
//   es_amg_values, es_jacobi_values
//                 es_amg and es_jacobi with Precision::single_values: the products read float32
//                 values into float64 vectors, refined on the float64 matrix
//   es_amg_float32, es_jacobi_float32
//                 es_amg and es_jacobi on a float32 copy of the matrix, b and x float32 (reach
//                 rtol 1e-5 or so, not 1e-8): AMG's hierarchy is then made from a float64 host
//                 copy and each cycle staged through it, the path of a matrix on a device
//   petsc_jacobi  PETSc CG + PCJACOBI (es_jacobi_mixed's anchor)
//   petsc_hypre   PETSc CG + PCHYPRE BoomerAMG with PETSc's settings (the same as es_amg_f)
//   petsc_hypre_x PETSc CG + PCHYPRE BoomerAMG with einshard's default settings (the same
//                 hierarchy and cycle as es_amg)
//   petsc_gamg    PETSc CG + PCGAMG (smoothed aggregation, its defaults)
//   petsc_gamg_t  PETSc CG + PCGAMG, tuned: threshold 0.02 (drop weak edges before aggregating)
//                 and the graph squared on every level (aggressive coarsening throughout), the
//                 settings PETSc's manual suggests for cheaper setups of 3-D elliptic problems
// `--petsc-options "-name value,-name value"` sets further PETSc options (prefixes: each solver's
// name and "_", e.g. -petsc_gamg_pc_gamg_threshold).
// A sample is the slowest rank's time; every rep runs each solver once, the order rotating from rep
// to rep (the machine's load drifts); medians over `--reps` (es_jacobi: its first `--jacobi-reps`),
// after `--warmup` untimed runs of every solver (default 1: the first run in a process would
// otherwise pay for the heap growing, and rotation puts es_amg first in rep 0). The lists
// *_reps_s give every rep's sample in rep order, with the CPU seconds (slowest rank), the minor
// page faults (all ranks) and the iterations; amg_summary's paired_ratio is the median over reps
// of es / PETSc within one rep (the two ran back to back, under the same load). Every solution's
// true residual ‖b − A x‖ / ‖b‖ is computed by PETSc's MatMult on its own matrix (true_residual).
// mixed_summary compares each mixed solver with its float64 PETSc anchor: es_jacobi_mixed and
// es_jacobi_values with petsc_jacobi, es_amg_mixed and es_amg_values with the fastest PETSc AMG,
// as the amg_summary's ratios.
//
// Pipelined CG (`--cases pipecg`): `--iters` iterations exactly (rtol = atol = 0), Jacobi, einshard
// standard / pipelined CG and PETSc KSPCG / KSPPIPECG, interleaved per rep; ms per iteration.
//
//   {"bench":"amg_solve","problem":...,"ranks":P,"n":N,"solver":...,"iterations":k,"setup_s":...,
//    "solve_s":...,"total_s":...,"levels":...,"complexity":...,"total_reps_s":[...],"setup_reps_s":[...],
//    "solve_reps_s":[...],"cpu_reps_s":[...],"page_faults_reps":[...],"iterations_reps":[...],
//    "true_residual":...}
//   {"bench":"amg_summary","ranks":P,"n":N,"best_es":"es_amg","best_es_s":...,"best_petsc":"petsc_gamg",
//    "best_petsc_s":...,"ratio_vs_best_petsc":es/petsc (≤ 1: einshard is faster),"paired_ratio":...,
//    "paired_ratios":[...],"speedup_vs_es_jacobi":...}
//   {"bench":"mixed_summary","ranks":P,"n":N,"solver":"es_amg_mixed","anchor":"petsc_hypre_x","es_s":...,
//    "anchor_s":...,"ratio":es/anchor,"paired_ratio":...,"float64_s":the same einshard solver in float64}
//   {"bench":"pipecg","ranks":P,"n":N,"es_cg_ms_it":...,"es_pipecg_ms_it":...,"petsc_cg_ms_it":...,
//    "petsc_pipecg_ms_it":...,"ratio_vs_petsc_pipecg":...,"ratio_vs_es_cg":...}
//
//   mpirun -n P einshard_bench_sparse_amg [--problem poisson2d|poisson3d] [--grid 1000] [--rtol 1e-8]
//        [--reps 3] [--warmup 1] [--jacobi-reps 1] [--solvers es_amg,es_amg_f,es_jacobi,petsc_hypre,petsc_hypre_x,petsc_gamg,petsc_gamg_t]
//        [--theta 0.25] [--amg coarsen=hmis,interp=ext+i,pmax=4,agg=0,smoother=l1gs,sweeps=1] [--amg-alt ...]
//        [--petsc-options "-petsc_gamg_pc_gamg_threshold 0.05"] [--partition slabs|boxes] [--scale 1]
//        [--cases amg,pipecg] [--iters 200]
//
// `--amg` changes es_amg's settings and petsc_hypre_x's alike (so the pair stays the same hierarchy):
// coarsen hmis|pmis|falgout, interp ext+i|classical|direct|multipass|standard, pmax (entries per
// row), agg (levels of aggressive coarsening), smoother l1gs|hgs|l1jacobi|cheby, sweeps, theta
// (as --theta, but also for --amg-alt), levels (max levels), and agg_interp
// multipass|2s-ext+i|2s-std|2s-ext, es_amg's alone: PETSc 3.18's PCHYPRE has no option for it, so
// petsc_hypre_x keeps multipass.
//
// `--partition boxes` gives einshard's solvers a box of the grid per rank (MPI_Dims_create's
// factors of P), the partition a geometric partitioner would give, instead of PETSc's contiguous
// slabs: for the iteration count against ranks on einshard's side alone (PETSc keeps the slabs,
// so its rows then differ from einshard's).
//
// `--scale s` multiplies every value by s on both sides (1/h², or 0.1: values float32 cannot hold,
// so the mixed-precision solvers' float32 copy differs from the matrix).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <petscksp.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <tuple>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <einshard/sparse.hpp>

#include "../common.hpp"
#include "petsc_amg_options.hpp"
#include "petsc_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::as_tensor;
using einshard_bench::assemble_aij;
using einshard_bench::max_over_ranks;
using einshard_bench::median;
using einshard_bench::set_petsc_options;
using einshard_bench::poisson_rows_at;
using einshard_bench::poisson_rows;
using einshard_bench::Rows;
using einshard_bench::split;
using einshard_bench::timed;

namespace {

struct Config {
  std::string problem = "poisson2d";
  std::int64_t grid = 1000;
  double rtol = 1e-8;
  int reps = 3, jacobi_reps = 1, iters = 200;
  int warmup = 1;  // untimed runs of every solver before the reps (first-touch page faults, heap growth)
  double theta = -1;  // < 0: einshard's default for the matrix
  std::string amg_spec;  // --amg: es_amg's and petsc_hypre_x's settings (empty: einshard's defaults)
  std::string amg_alt_spec;  // --amg-alt: es_amg_alt's settings, on top of es_amg's
  std::string petsc_options;  // --petsc-options: "-name value" items, comma-separated
  std::vector<std::string> solvers{"es_amg", "es_amg_f", "es_jacobi", "petsc_hypre", "petsc_hypre_x", "petsc_gamg",
                                    "petsc_gamg_t"};
  bool amg = true, pipecg = false;
  std::string partition = "slabs";  // einshard's rows: slabs (PETSc's) or boxes
  double scale = 1.0;                // every value times this (1/h² makes them inexact in float32)
};

Config parse(int argc, char** argv) {
  Config c;
  einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& value) {
    if (a == "--problem") c.problem = value();
    else if (a == "--grid") c.grid = std::stoll(value());
    else if (a == "--rtol") c.rtol = std::stod(value());
    else if (a == "--reps") c.reps = std::stoi(value());
    else if (a == "--jacobi-reps") c.jacobi_reps = std::stoi(value());
    else if (a == "--warmup") c.warmup = std::stoi(value());
    else if (a == "--iters") c.iters = std::stoi(value());
    else if (a == "--theta") c.theta = std::stod(value());
    else if (a == "--amg") c.amg_spec = value();
    else if (a == "--amg-alt") c.amg_alt_spec = value();
    else if (a == "--petsc-options") c.petsc_options = value();
    else if (a == "--solvers") c.solvers = split(value());
    else if (a == "--partition") c.partition = value();
    else if (a == "--scale") c.scale = std::stod(value());
    else if (a == "--cases") {
      const auto cases = split(value());
      c.amg = std::find(cases.begin(), cases.end(), "amg") != cases.end();
      c.pipecg = std::find(cases.begin(), cases.end(), "pipecg") != cases.end();
    } else
      return false;
    return true;
  });
  if (c.partition != "slabs" && c.partition != "boxes")
    throw std::runtime_error("--partition: expected slabs or boxes, got " + c.partition);
  if (c.problem != "poisson2d" && c.problem != "poisson3d")
    throw std::runtime_error("--problem: expected poisson2d or poisson3d, got " + c.problem);
  return c;
}


/// es_amg's settings: einshard's defaults, θ from --theta, then the `--amg` list; the fields not
/// given stay unset, for einshard to choose from the matrix.
sp::AmgOptions amg_settings(const Config& c, sp::AmgOptions o = {}, const std::string* spec = nullptr) {
  if (!spec) spec = &c.amg_spec;
  if (c.theta >= 0) o.strong_threshold = c.theta;
  return einshard_bench::apply_amg_spec(o, *spec);
}

/// PETSc's side: the same rows as an AIJ matrix, and a KSP per configuration.
struct Petsc {
  Mat A = nullptr;
  Vec b = nullptr, x = nullptr;

  Petsc(const Rows& rows, std::int64_t n) : A(assemble_aij(rows, n)) {
    PETSC(MatCreateVecs(A, &x, &b));
    PETSC(VecSet(b, 1.0));
  }
  ~Petsc() {
    VecDestroy(&x);
    VecDestroy(&b);
    MatDestroy(&A);
  }

  /// A KSP `type` with preconditioner `pc` and the options of `prefix` (set beforehand).
  KSP make(const char* type, const char* pc_type, const std::string& prefix, double rtol, int maxiter) const {
    KSP ksp = nullptr;
    PETSC(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PETSC(KSPSetOptionsPrefix(ksp, prefix.c_str()));
    PETSC(KSPSetOperators(ksp, A, A));
    PETSC(KSPSetType(ksp, type));
    PC pc = nullptr;
    PETSC(KSPGetPC(ksp, &pc));
    PETSC(PCSetType(pc, pc_type));
    PETSC(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
    PETSC(KSPSetTolerances(ksp, rtol, 0.0, PETSC_DEFAULT, maxiter));
    PETSC(KSPSetFromOptions(ksp));
    return ksp;
  }
  /// ‖b − A x‖ / ‖b‖ of a solution given whole (`x_full`: every rank's copy, in the grid's
  /// numbering), by MatMult on PETSc's rows of it.
  [[nodiscard]] double true_residual(const at::Tensor& x_full) const {
    PetscInt first = 0, last = 0;
    PETSC(MatGetOwnershipRange(A, &first, &last));
    Vec xe = nullptr, r = nullptr;
    PETSC(VecDuplicate(x, &xe));
    PETSC(VecDuplicate(b, &r));
    PetscScalar* p = nullptr;
    PETSC(VecGetArray(xe, &p));
    const auto xc = x_full.slice(0, first, last).to(at::kDouble).contiguous();
    std::copy(xc.data_ptr<double>(), xc.data_ptr<double>() + xc.numel(), p);
    PETSC(VecRestoreArray(xe, &p));
    const double out = residual_of(xe, r);
    VecDestroy(&xe);
    VecDestroy(&r);
    return out;
  }
  /// The same for PETSc's own last solution.
  [[nodiscard]] double true_residual() const {
    Vec r = nullptr;
    PETSC(VecDuplicate(b, &r));
    const double out = residual_of(x, r);
    VecDestroy(&r);
    return out;
  }
  [[nodiscard]] double residual_of(Vec xv, Vec r) const {
    PETSC(MatMult(A, xv, r));
    PETSC(VecAYPX(r, -1.0, b));
    PetscReal rn = 0, bn = 0;
    PETSC(VecNorm(r, NORM_2, &rn));
    PETSC(VecNorm(b, NORM_2, &bn));
    return static_cast<double>(rn / bn);
  }
  /// Setup and solve from x = 0; returns {setup s, solve s, iterations} (this rank's times).
  std::array<double, 3> solve(KSP ksp) const {
    PETSC(VecSet(x, 0.0));
    const double t0 = MPI_Wtime();
    PETSC(KSPSetUp(ksp));
    const double t1 = MPI_Wtime();
    PETSC(KSPSolve(ksp, b, x));
    const double t2 = MPI_Wtime();
    PetscInt its = 0;
    PETSC(KSPGetIterationNumber(ksp, &its));
    KSPConvergedReason reason;
    PETSC(KSPGetConvergedReason(ksp, &reason));
    if (reason < 0) throw std::runtime_error("PETSc KSP did not converge (reason " + std::to_string(reason) + ")");
    return {t1 - t0, t2 - t1, static_cast<double>(its)};
  }
};

struct Sample {
  std::vector<double> setup, solve, total;
  std::vector<double> faults, cpu, its;  // page faults (all ranks) and CPU seconds (slowest rank) of each rep
  std::vector<double> residuals;  // ‖b − A x‖ / ‖b‖ of each rep's solution (PETSc's MatMult)
  int iterations = 0, levels = 0;
  double complexity = 0;
};

/// "0.123,0.456": the per-rep samples, in rep order (to see drift and first-run effects).
std::string list(const std::vector<double>& v, const char* format = "%.3f") {
  std::string out;
  for (const double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, x);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

/// This process's minor page faults so far and its CPU seconds (user + system).
std::array<double, 2> usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return {static_cast<double>(u.ru_minflt), seconds(u.ru_utime) + seconds(u.ru_stime)};
}

/// The rows of rank `rank`'s box of the g × g (× g) grid cut into MPI_Dims_create's factors of
/// P, ascending.
std::vector<std::int64_t> box_rows(std::int64_t g, int rank, int p, bool three) {
  std::array<int, 3> dims{0, 0, 1};
  MPI_Dims_create(p, three ? 3 : 2, dims.data());
  const std::array<int, 3> at{rank % dims[0], (rank / dims[0]) % dims[1], rank / (dims[0] * dims[1])};
  const auto span = [&](int d) {
    const std::int64_t extent = d == 2 && !three ? 1 : g;
    return std::pair{extent * at[d] / dims[d], extent * (at[d] + 1) / dims[d]};
  };
  const auto [x0, x1] = span(0);
  const auto [y0, y1] = span(1);
  const auto [z0, z1] = span(2);
  std::vector<std::int64_t> ids;
  for (auto z = z0; z < z1; ++z)
    for (auto y = y0; y < y1; ++y)
      for (auto x = x0; x < x1; ++x) ids.push_back((z * g + y) * g + x);
  return ids;
}

int run(const Config& cfg) {
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const bool three = cfg.problem == "poisson3d";
  const std::int64_t g = cfg.grid, n = three ? g * g * g : g * g;
  const std::int64_t block = (n + p - 1) / p;
  const std::int64_t lo = std::min<std::int64_t>(rank * block, n), hi = std::min<std::int64_t>(lo + block, n);
  Rows rows = poisson_rows(g, lo, hi, three);
  for (auto& v : rows.val) v *= cfg.scale;
  es::Mesh mesh(MPI_COMM_WORLD, {p}, {"rows"});
  // einshard's rows: the same slabs as PETSc's, or (--partition boxes) a box of the grid per rank,
  // as a geometric partitioner would give (PETSc keeps the slabs: it needs contiguous rows).
  const bool boxes = cfg.partition == "boxes";
  const auto box = boxes ? box_rows(g, rank, p, three) : std::vector<std::int64_t>{};
  Rows boxed = boxes ? poisson_rows_at(g, box, three) : Rows{};
  for (auto& v : boxed.val) v *= cfg.scale;
  const Rows& es_rows = boxes ? boxed : rows;
  const auto values = at::from_blob(const_cast<double*>(es_rows.val.data()),
                                    {static_cast<std::int64_t>(es_rows.val.size())}, at::kDouble).clone();
  const auto D = sp::DSparseTensor::from_local(values, as_tensor(es_rows.row), as_tensor(es_rows.col), {n, n}, mesh,
                                               {.owned_rows = boxes ? as_tensor(box) : at::arange(lo, hi, at::kLong)});
  Petsc petsc(rows, n);
  // petsc_hypre_x gets what einshard chooses for es_amg's request on this matrix.
  const auto es_request = amg_settings(cfg);
  double nnz = static_cast<double>(rows.val.size());
  MPI_Allreduce(MPI_IN_PLACE, &nnz, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const auto es_amg = es_request.resolved(nnz / static_cast<double>(n));
  set_petsc_options(es_amg, cfg.petsc_options);
  auto b = D.zeros();
  b.local().fill_(1.0);

  if (cfg.amg) {
    std::map<std::string, Sample> samples;
    const auto sample = [&](const std::string& name, bool keep) {
      Sample scratch;
      auto& s = keep ? samples[name] : scratch;
      double setup = 0, solve = 0, total = 0;
      const auto usage0 = usage();
      if (name.rfind("es_", 0) == 0) {
        const bool jacobi = name.rfind("es_jacobi", 0) == 0, aggregation = name.rfind("es_sa", 0) == 0;
        const auto ends = [&](std::string_view suffix) {
          return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
        };
        sp::SolveOptions o{.preconditioner = jacobi        ? sp::Preconditioner::jacobi
                                             : aggregation ? sp::Preconditioner::smoothed_aggregation
                                                           : sp::Preconditioner::amg,
                           .rtol = cfg.rtol, .maxiter = 100000, .residual_history = false,
                           .precision = ends("_mixed")    ? sp::Precision::mixed
                                        : ends("_values") ? sp::Precision::single_values
                                                          : sp::Precision::working};
        o.preconditioner_options.amg = name == "es_amg_alt" ? amg_settings(cfg, es_request, &cfg.amg_alt_spec)
                                       : aggregation        ? sp::AmgOptions{}
                                                            : es_request;
        if (name == "es_amg_f")
          o.preconditioner_options.amg = {.coarsening = sp::AmgCoarsening::falgout,
                                          .interpolation = sp::AmgInterpolation::classical,
                                          .strong_threshold = cfg.theta >= 0 ? cfg.theta : 0.25,
                                          .max_elements = 0, .smoother = sp::AmgSmoother::hybrid_gauss_seidel,
                                          .aggressive_levels = 0,
                                          .cf_order = true};
        const bool single = ends("_float32");
        const auto fresh = D.with_values(single ? D.values().to(at::kFloat) : D.values().clone());  // no setup to reuse
        const auto rhs = single ? fresh.vector(b.local().to(at::kFloat)) : b;
        sp::SolveResult r;
        double wall = 0;
        total = timed([&] {
          const double t0 = MPI_Wtime();
          r = fresh.solve(rhs, o);
          wall = MPI_Wtime() - t0;
        });
        if (!r.info.converged) throw std::runtime_error(name + " did not converge: " + sp::to_string(r.info.reason));
        // PETSc's split: setup is what PCSetUp does, solve everything after it (KSPSolve's first
        // preconditioner application and vector set-up included), where einshard's own
        // SolveInfo::seconds starts after the first application.
        setup = r.info.setup_seconds;
        solve = wall - setup;
        s.iterations = r.info.iterations;
        s.levels = r.info.levels;
        s.complexity = r.info.operator_complexity;
        s.residuals.push_back(petsc.true_residual(r.x.full_tensor().to(at::kDouble)));
      } else {
        const char* pc = name == "petsc_jacobi" ? PCJACOBI : name.rfind("petsc_gamg", 0) == 0 ? PCGAMG : PCHYPRE;
        KSP ksp = petsc.make(KSPCG, pc, name + "_", cfg.rtol, 100000);
        std::array<double, 3> t{};
        total = timed([&] { t = petsc.solve(ksp); });
        s.residuals.push_back(petsc.true_residual());
        PETSC(KSPDestroy(&ksp));
        setup = t[0];
        solve = t[1];
        s.iterations = static_cast<int>(t[2]);
      }
      s.setup.push_back(max_over_ranks(setup));
      s.solve.push_back(max_over_ranks(solve));
      s.total.push_back(total);
      const auto usage1 = usage();
      double faults = usage1[0] - usage0[0];
      MPI_Allreduce(MPI_IN_PLACE, &faults, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      s.faults.push_back(faults);
      s.cpu.push_back(max_over_ranks(usage1[1] - usage0[1]));
      s.its.push_back(s.iterations);
    };
    const auto count = cfg.solvers.size();
    // The first run in a process pays for touching fresh pages and growing the heap (glibc raises
    // its mmap threshold as large blocks are freed), which a median over few reps would charge to
    // whichever solver runs first; the warm-up runs every solver once before the clock counts.
    for (int rep = 0; rep < cfg.warmup; ++rep)
      for (const auto& name : cfg.solvers)
        if (name != "es_jacobi") sample(name, false);
    for (int rep = 0; rep < cfg.reps; ++rep)
      for (std::size_t v = 0; v < count; ++v) {
        const auto& name = cfg.solvers[(v + static_cast<std::size_t>(rep)) % count];
        if (name != "es_jacobi" || rep < cfg.jacobi_reps) sample(name, true);
      }
    for (const auto& name : cfg.solvers) {
      const auto& s = samples[name];
      if (rank == 0) {
        std::printf("{\"bench\":\"amg_solve\",\"problem\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"n\":%lld,\"solver\":\"%s\","
                    "\"rtol\":%.0e,\"theta\":%.2f,\"iterations\":%d,\"setup_s\":%.3f,\"solve_s\":%.3f,\"total_s\":%.3f,"
                    "\"levels\":%d,\"complexity\":%.3f,\"reps\":%zu,\"warmup\":%d,\"total_reps_s\":[%s],"
                    "\"setup_reps_s\":[%s],\"solve_reps_s\":[%s],"
                    "\"cpu_reps_s\":[%s],\"page_faults_reps\":[%s],\"iterations_reps\":[%s],\"true_residual\":%.2e}\n",
                    cfg.problem.c_str(), p, static_cast<long long>(g), static_cast<long long>(n), name.c_str(), cfg.rtol,
                    *es_amg.strong_threshold, s.iterations, median(s.setup), median(s.solve), median(s.total), s.levels, s.complexity,
                    s.total.size(), cfg.warmup, list(s.total).c_str(), list(s.setup).c_str(),
                    list(s.solve).c_str(), list(s.cpu).c_str(), list(s.faults, "%.0f").c_str(),
                    list(s.its, "%.0f").c_str(), s.residuals.empty() ? 0.0 : *std::max_element(s.residuals.begin(), s.residuals.end()));
        std::fflush(stdout);
      }
    }
    if (rank == 0 && samples.count("es_amg")) {
      // The best of each side (einshard: the default options or PETSc's settings).
      const auto best_of = [&](const char* prefix) {
        std::pair<std::string, double> best{"", 0.0};
        for (const auto& [name, s] : samples)
          if (name.rfind(prefix, 0) == 0 && name.find("jacobi") == std::string::npos &&
              name.find("_mixed") == std::string::npos && name.find("_values") == std::string::npos &&
              (best.first.empty() || median(s.total) < best.second))
            best = {name, median(s.total)};
        return best;
      };
      const auto [es_best, es_s] = best_of("es_");
      const auto [best, best_s] = best_of("petsc");
      // The same ratio rep by rep: the two ran next to each other in every rep, so a rep's
      // ratio sees the same load on both sides, which the ratio of medians does not.
      std::vector<double> paired;
      if (!best.empty())
        for (std::size_t rep = 0; rep < samples[es_best].total.size(); ++rep)
          paired.push_back(samples[es_best].total[rep] / samples[best].total[rep]);
      const double jacobi_s = samples.count("es_jacobi") ? median(samples["es_jacobi"].total) : 0.0;
      std::printf("{\"bench\":\"amg_summary\",\"problem\":\"%s\",\"ranks\":%d,\"n\":%lld,\"best_es\":\"%s\",\"best_es_s\":%.3f,"
                  "\"best_petsc\":\"%s\",\"best_petsc_s\":%.3f,\"ratio_vs_best_petsc\":%.3f,"
                  "\"paired_ratio\":%.3f,\"paired_ratios\":[%s],"
                  "\"es_jacobi_s\":%.3f,\"speedup_vs_es_jacobi\":%.1f}\n",
                  cfg.problem.c_str(), p, static_cast<long long>(n), es_best.c_str(), es_s, best.c_str(), best_s,
                  best.empty() ? 0.0 : es_s / best_s, paired.empty() ? 0.0 : median(paired), list(paired).c_str(),
                  jacobi_s, jacobi_s > 0 ? jacobi_s / es_s : 0.0);
      std::fflush(stdout);
    }
    if (rank == 0) {
      // Each mixed solver against its float64 PETSc anchor, and against itself in float64.
      const auto fastest_petsc_amg = [&] {
        std::pair<std::string, double> best{"", 0.0};
        for (const auto& [name, s] : samples)
          if (name.rfind("petsc_", 0) == 0 && name != "petsc_jacobi" && (best.first.empty() || median(s.total) < best.second))
            best = {name, median(s.total)};
        return best.first;
      };
      for (const auto& [mixed, anchor, float64] :
           {std::tuple<std::string, std::string, std::string>{"es_jacobi_mixed", "petsc_jacobi", "es_jacobi"},
            {"es_jacobi_values", "petsc_jacobi", "es_jacobi"},
            {"es_amg_mixed", fastest_petsc_amg(), "es_amg"},
            {"es_sa_mixed", fastest_petsc_amg(), "es_sa"},
            {"es_amg_values", fastest_petsc_amg(), "es_amg"}}) {
        if (!samples.count(mixed) || anchor.empty() || !samples.count(anchor)) continue;
        const auto& m = samples[mixed].total;
        const auto& a = samples[anchor].total;
        std::vector<double> paired;
        for (std::size_t rep = 0; rep < std::min(m.size(), a.size()); ++rep) paired.push_back(m[rep] / a[rep]);
        const double f64 = samples.count(float64) ? median(samples[float64].total) : 0.0;
        std::printf("{\"bench\":\"mixed_summary\",\"problem\":\"%s\",\"ranks\":%d,\"n\":%lld,\"solver\":\"%s\","
                    "\"anchor\":\"%s\",\"es_s\":%.3f,\"anchor_s\":%.3f,\"ratio\":%.3f,\"paired_ratio\":%.3f,"
                    "\"paired_ratios\":[%s],\"float64_s\":%.3f}\n",
                    cfg.problem.c_str(), p, static_cast<long long>(n), mixed.c_str(), anchor.c_str(), median(m),
                    median(a), median(m) / median(a), median(paired), list(paired).c_str(), f64);
        std::fflush(stdout);
      }
    }
  }

  if (cfg.pipecg) {
    // Fixed iteration count, Jacobi on both sides, setup outside the clock (reused).
    sp::SolveOptions o{.preconditioner = sp::Preconditioner::jacobi, .rtol = 0, .atol = 0, .maxiter = cfg.iters,
                       .residual_history = false};
    auto pipelined = o;
    pipelined.cg_variant = sp::CgVariant::pipelined;
    KSP cg = petsc.make(KSPCG, PCJACOBI, "fixed_cg_", 0.0, cfg.iters);
    KSP pipe = petsc.make(KSPPIPECG, PCJACOBI, "fixed_pipecg_", 0.0, cfg.iters);
    PETSC(KSPSetUp(cg));
    PETSC(KSPSetUp(pipe));
    (void)D.solve(b, o);  // warm-up; sets up and keeps Jacobi
    std::vector<std::vector<double>> t(4);
    for (int rep = 0; rep < cfg.reps + 1; ++rep) {
      std::vector<std::function<void()>> runs = {
          [&] { (void)D.solve(b, o); },
          [&] { (void)D.solve(b, pipelined); },
          [&] { PETSC(VecSet(petsc.x, 0.0)); PETSC(KSPSolve(cg, petsc.b, petsc.x)); },
          [&] { PETSC(VecSet(petsc.x, 0.0)); PETSC(KSPSolve(pipe, petsc.b, petsc.x)); },
      };
      for (std::size_t v = 0; v < runs.size(); ++v) {
        const auto which = (v + static_cast<std::size_t>(rep)) % runs.size();
        const double dt = timed(runs[which]);
        if (rep > 0) t[which].push_back(dt * 1e3 / cfg.iters);
      }
    }
    PETSC(KSPDestroy(&cg));
    PETSC(KSPDestroy(&pipe));
    if (rank == 0) {
      const double es_cg = median(t[0]), es_pipe = median(t[1]), pe_cg = median(t[2]), pe_pipe = median(t[3]);
      std::printf("{\"bench\":\"pipecg\",\"problem\":\"%s\",\"ranks\":%d,\"n\":%lld,\"iterations\":%d,"
                  "\"es_cg_ms_it\":%.4f,\"es_pipecg_ms_it\":%.4f,\"petsc_cg_ms_it\":%.4f,\"petsc_pipecg_ms_it\":%.4f,"
                  "\"ratio_vs_petsc_pipecg\":%.3f,\"ratio_vs_es_cg\":%.3f,\"reps\":%d}\n",
                  cfg.problem.c_str(), p, static_cast<long long>(n), cfg.iters, es_cg, es_pipe, pe_cg, pe_pipe,
                  es_pipe / pe_pipe, es_pipe / es_cg, cfg.reps);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return einshard_bench::petsc_main(argc, argv, "einshard_bench_sparse_amg", parse, run);
}
