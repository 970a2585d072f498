// Several right-hand sides at once: D.solve(B), B an (n_local, k) block, against k single solves of
// its columns (einshard's normal D.solve(b), same method, preconditioner and iteration count), in
// one launch; and, where PETSc was found (EINSHARD_BENCH_PETSC), against PETSc on the same rows:
// KSPMatSolve of the (n, k) dense block and k KSPSolves of its columns (KSPCG / KSPGMRES(restart)
// with PCJACOBI, the unpreconditioned norm, right preconditioning for GMRES; `cg` and `gmres`
// variants only).
//
// Problem: the 2-D 5-point Poisson matrix on a g × g grid (--stencil 5, the default), or a 3-D
// stencil on a g³ grid (--stencil 7: the six face neighbours; 27: all 26), float64, rows in
// contiguous blocks, each rank assembling its own. B is uniform random, k columns for each k of
// `--k` (default 8).
//
// Each method runs with Jacobi for exactly `--iters` iterations (rtol = atol = 0): CG in both
// reduction organisations ("standard": two all-reduces per step; "single_reduction": one),
// GMRES(--restart) with its basis in float64 ("gmres") or float32 ("gmres_reduced":
// GmresBasis::reduced for the block; its singles are einshard's GMRES with a float64 basis),
// BiCGStab and MINRES. The all-reduces are counted through MPI's profiling interface
// (MPI_Allreduce and MPI_Iallreduce are defined in this file) and reported per step: the block's
// for all k columns, the singles' summed over their k solves. `--isa avx2,portable` runs
// the block with each of the block product's instruction sets (AVX2 where the CPU has it; the
// portable body is what a CPU without AVX2 runs); the singles are the same either way.
//
// With --rtol r, nothing is timed: each variant's block and its k single solves run to rtol r and
// one line per variant ("sparse_multi_rhs_convergence") gives the iterations (mean and largest
// over the columns) and the largest true relative residual ‖b − A x‖ / ‖b‖ of each side.
// --convection c makes the 2-D matrix nonsymmetric (c on each east neighbour, −c on each west).
//
// A sample is the maximum over the ranks of one side's elapsed time (MPI_Barrier first); the sides
// (block, singles, and PETSc's two) run in an order rotating from rep to rep after one untimed
// solve each; medians over `--reps`. JSON lines on rank 0:
//
//   {"bench":"sparse_multi_rhs","variant":"standard"|"single_reduction"|"gmres"|"gmres_reduced"|"bicgstab"|"minres",
//    "ranks":P,"grid":g,"stencil":5|7|27,"n":unknowns,"isa":"avx2"|"portable","restart":m,
//    "reorthogonalize":"if_needed"|"never","k":k,
//    "iterations":...,"block_ms":...,"singles_ms":...,"throughput_ratio":singles / block,
//    "petsc_matsolve_ms":...,"petsc_singles_ms":...,"vs_petsc":best PETSc / block (-1: no PETSc),
//    "allreduces_per_step_block":...,"allreduces_per_step_singles":...,"block_columns":--block-columns,"reps":...}
//
//   mpirun -n P einshard_bench_sparse_multi_rhs [--grid 300] [--stencil 5|7|27] [--iters 100] [--reps 3]
//        [--k 8,16,32] [--variants standard,single_reduction,gmres,gmres_reduced,bicgstab,minres] [--restart 30]
//        [--reorthogonalize if_needed|never] [--convection c] [--rtol r]
//        [--isa avx2,portable] [--petsc 1|0] [--block-columns w (0: fitted to the cache)]
//
// GMRES's block basis is restart + 1 blocks of (n_local, 8): leave it out on a large grid, or
// shorten --restart. bench/sparse/run.sh --suite multi_rhs runs the published set of cases.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/sparse.hpp>

#include "../common.hpp"
#include "allreduce_count.hpp"
#if EINSHARD_BENCH_PETSC
#include "petsc_support.hpp"
#endif

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::median;
using einshard_bench::timed;
using einshard_bench::world_rank;
using einshard_bench::world_size;

namespace {

struct Config {
  std::int64_t grid = 300;
  int stencil = 5;  ///< 5: 2-D 5-point on grid²; 7 or 27: 3-D 7- or 27-point on grid³
  int iters = 100;
  int reps = 3;
  /// Methods to run (comma-separated names of the JSON's "variant").
  std::string variants = "standard,single_reduction,gmres,bicgstab,minres";
  int restart = 30;
  /// GMRES's second Gram–Schmidt pass (block and singles): if_needed (DGKS, einshard's default) or
  /// never (one pass, as PETSc's KSPGMRES by default).
  std::string reorthogonalize = "if_needed";
  /// Block-product instruction sets: avx2 (where the CPU has it; elsewhere portable instead)
  /// and/or portable.
  std::string isa = "avx2";
  /// Block widths, comma-separated.
  std::string k = "8";
  /// Whether to run PETSc beside (where it was found).
  bool petsc = true;
  /// 2-D 5-point only: c added to each east neighbour and subtracted from each west one (a
  /// nonsymmetric convection–diffusion matrix; GMRES variants only).
  double convection = 0.0;
  /// > 0: instead of timing, solve to this rtol and report iterations and true residuals.
  double rtol = 0.0;
  /// The block's `SolveOptions::block_columns` (0: groups that fit the cache; k: one block).
  int block_columns = 0;
};

Config parse(int argc, char** argv) {
  Config c;
  einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& next) {
    if (a == "--grid") c.grid = std::stoll(next());
    else if (a == "--stencil") c.stencil = std::stoi(next());
    else if (a == "--iters") c.iters = std::stoi(next());
    else if (a == "--reps") c.reps = std::stoi(next());
    else if (a == "--variants") c.variants = next();
    else if (a == "--restart") c.restart = std::stoi(next());
    else if (a == "--reorthogonalize") c.reorthogonalize = next();
    else if (a == "--isa") c.isa = next();
    else if (a == "--k") c.k = next();
    else if (a == "--petsc") c.petsc = next() != "0";
    else if (a == "--convection") c.convection = std::stod(next());
    else if (a == "--rtol") c.rtol = std::stod(next());
    else if (a == "--block-columns") c.block_columns = std::stoi(next());
    else return false;
    return true;
  });
  if (c.stencil != 5 && c.stencil != 7 && c.stencil != 27)
    throw std::runtime_error("--stencil: expected 5, 7 or 27, found " + std::to_string(c.stencil));
  if (c.reps < 1) throw std::runtime_error("--reps must be at least 1");
  if (c.convection != 0.0 && c.stencil != 5)
    throw std::runtime_error("--convection: only with --stencil 5");
  if (c.reorthogonalize != "if_needed" && c.reorthogonalize != "never")
    throw std::runtime_error("--reorthogonalize: expected if_needed or never, found " + c.reorthogonalize);
  return c;
}

bool listed(const std::string& list, const std::string& name) {
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

at::Tensor as_tensor(const std::vector<std::int64_t>& v) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
}

/// The matrix: 2-D 5-point Poisson on g², or a 3-D stencil on g³ (7-point: the six face
/// neighbours; 27-point: all 26), −1 to each neighbour and their count on the diagonal for the
/// 3-D ones (SPD; a row streams 5, 7 or 27 entries). Rows in contiguous blocks.
struct Problem {
  sp::DSparseTensor D;
  std::vector<std::int64_t> rowptr, col;  ///< this rank's rows, local CSR with global columns
  std::vector<double> val;
  std::int64_t lo = 0;
};

Problem matrix(std::int64_t g, int points, double convection, const es::Mesh& mesh) {
  const auto n = points == 5 ? g * g : g * g * g;
  const auto [lo, hi] = sp::simple_rows(n, MPI_COMM_WORLD);
  std::vector<std::int64_t> r, c, rowptr{0};
  std::vector<double> v;
  const auto add = [&](std::int64_t i, std::int64_t j, double value) {
    r.push_back(i);
    c.push_back(j);
    v.push_back(value);
  };
  for (auto i = lo; i < hi; ++i) {
    if (points == 5) {
      einshard_bench::poisson_row(g, i, [&](std::int64_t j, double value) {
        add(i, j, value + (j == i + 1 ? convection : j == i - 1 ? -convection : 0.0));
      });
      rowptr.push_back(static_cast<std::int64_t>(v.size()));
      continue;
    }
    const auto x = i % g, y = (i / g) % g, z = i / (g * g);
    for (std::int64_t dz = -1; dz <= 1; ++dz)
      for (std::int64_t dy = -1; dy <= 1; ++dy)
        for (std::int64_t dx = -1; dx <= 1; ++dx) {
          const auto X = x + dx, Y = y + dy, Z = z + dz;
          const auto away = std::abs(dx) + std::abs(dy) + std::abs(dz);
          if (X < 0 || Y < 0 || Z < 0 || X >= g || Y >= g || Z >= g || (points == 7 && away > 1)) continue;
          add(i, (Z * g + Y) * g + X, away == 0 ? points - 1.0 : -1.0);
        }
    rowptr.push_back(static_cast<std::int64_t>(v.size()));
  }
  const auto vals = at::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, at::kDouble).clone();
  return {sp::DSparseTensor::from_local(vals, as_tensor(r), as_tensor(c), {n, n}, mesh), std::move(rowptr),
          std::move(c), std::move(v), lo};
}

#if EINSHARD_BENCH_PETSC
/// PETSc's side: the same rows (AIJ), a KSP of the variant's method with PCJACOBI, the block as a
/// dense matrix and its columns as vectors.
struct Petsc {
  Mat A = nullptr, B = nullptr, X = nullptr;
  std::vector<Vec> b, x;
  KSP ksp = nullptr;

  Petsc(const Problem& p, std::int64_t n, const at::Tensor& block, const std::string& method, int restart, int iters) {
    const auto nloc = static_cast<std::int64_t>(p.rowptr.size()) - 1;
    A = einshard_bench::petsc_matrix(p.rowptr, p.col, p.val, p.lo, nloc, n, n, 27, 27);
    const auto k = block.size(1);
    PETSC(MatCreateDense(PETSC_COMM_WORLD, static_cast<PetscInt>(nloc), PETSC_DECIDE, static_cast<PetscInt>(n),
                         static_cast<PetscInt>(k), nullptr, &B));
    PETSC(MatDuplicate(B, MAT_DO_NOT_COPY_VALUES, &X));
    PetscScalar* a = nullptr;
    PETSC(MatDenseGetArray(B, &a));  // column-major, leading dimension nloc
    const auto t = block.t().contiguous();
    std::copy(t.data_ptr<double>(), t.data_ptr<double>() + t.numel(), a);
    PETSC(MatDenseRestoreArray(B, &a));
    for (std::int64_t j = 0; j < k; ++j) {
      Vec bj = nullptr, xj = nullptr;
      PETSC(MatCreateVecs(A, &xj, &bj));
      PetscScalar* v = nullptr;
      PETSC(VecGetArray(bj, &v));
      std::copy(t.data_ptr<double>() + j * nloc, t.data_ptr<double>() + (j + 1) * nloc, v);
      PETSC(VecRestoreArray(bj, &v));
      b.push_back(bj);
      x.push_back(xj);
    }
    PETSC(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PETSC(KSPSetOperators(ksp, A, A));
    PETSC(KSPSetType(ksp, method == "gmres" ? KSPGMRES : KSPCG));
    if (method == "gmres") {
      PETSC(KSPSetPCSide(ksp, PC_RIGHT));
      PETSC(KSPGMRESSetRestart(ksp, restart));
    }
    PC pc = nullptr;
    PETSC(KSPGetPC(ksp, &pc));
    PETSC(PCSetType(pc, PCJACOBI));
    PETSC(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
    PETSC(KSPSetTolerances(ksp, 0.0, 0.0, PETSC_DEFAULT, iters));
    PETSC(KSPSetUp(ksp));
  }
  void mat_solve() { PETSC(KSPMatSolve(ksp, B, X)); }
  void singles() {
    for (std::size_t j = 0; j < b.size(); ++j) (void)einshard_bench::ksp_solve(ksp, b[j], x[j]);
  }
  ~Petsc() {
    KSPDestroy(&ksp);
    for (auto& v : b) VecDestroy(&v);
    for (auto& v : x) VecDestroy(&v);
    MatDestroy(&X);
    MatDestroy(&B);
    MatDestroy(&A);
  }
};
#endif

/// --rtol: the block and its k columns' single solves to `cfg.rtol` (maxiter 10⁶), with every
/// column's iterations and true relative residual ‖b − A x‖ / ‖b‖ (one JSON line per variant).
void converge(const Config& cfg, const sp::DSparseTensor& D, const sp::DVector& B, const std::vector<sp::DVector>& cols,
              const char* name, sp::SolveOptions block, sp::SolveOptions single) {
  for (auto* o : {&block, &single}) {
    o->rtol = cfg.rtol;
    o->maxiter = 1000000;
  }
  const auto norms = [](const at::Tensor& t) {  // the global 2-norm of each column of an (n_local, k) block
    const auto sq = t.square().sum(0).contiguous();
    std::vector<double> v(sq.data_ptr<double>(), sq.data_ptr<double>() + sq.numel());
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (auto& e : v) e = std::sqrt(e);
    return v;
  };
  const auto& b = B.local();
  const auto bn = norms(b);
  const auto s = D.solve(B, block);
  const auto rb = norms(b - D.apply_block(s.x.local()));
  std::vector<at::Tensor> xs;
  std::vector<int> its;
  bool singles_converged = true;
  for (const auto& c : cols) {
    const auto r = D.solve(c, single);
    xs.push_back(r.x.local());
    its.push_back(r.info.iterations);
    singles_converged = singles_converged && r.info.converged;
  }
  const auto rs = norms(b - D.apply_block(at::stack(xs, 1)));
  double worst_b = 0.0, worst_s = 0.0, mean_b = 0.0, mean_s = 0.0;
  int most_b = 0, most_s = 0;
  const auto k = static_cast<std::size_t>(b.size(1));
  for (std::size_t j = 0; j < k; ++j) {
    worst_b = std::max(worst_b, rb[j] / bn[j]);
    worst_s = std::max(worst_s, rs[j] / bn[j]);
    most_b = std::max(most_b, s.info.columns[j].iterations);
    most_s = std::max(most_s, its[j]);
    mean_b += s.info.columns[j].iterations / static_cast<double>(k);
    mean_s += its[j] / static_cast<double>(k);
  }
  if (world_rank() == 0)
    std::printf("{\"bench\":\"sparse_multi_rhs_convergence\",\"variant\":\"%s\",\"ranks\":%d,\"grid\":%lld,"
                "\"stencil\":%d,\"convection\":%g,\"restart\":%d,\"reorthogonalize\":\"%s\",\"k\":%zu,\"rtol\":%g,"
                "\"block_converged\":%s,\"block_iterations_mean\":%.1f,\"block_iterations_max\":%d,"
                "\"block_true_relres_max\":%.3e,\"singles_converged\":%s,\"singles_iterations_mean\":%.1f,"
                "\"singles_iterations_max\":%d,\"singles_true_relres_max\":%.3e}\n",
                name, world_size(), static_cast<long long>(cfg.grid), cfg.stencil, cfg.convection, cfg.restart,
                cfg.reorthogonalize.c_str(), k, cfg.rtol, s.info.converged ? "true" : "false", mean_b, most_b, worst_b,
                singles_converged ? "true" : "false", mean_s, most_s, worst_s);
  std::fflush(stdout);
}

/// Every variant with k right-hand sides.
void run_width(const Config& cfg, const Problem& problem, std::int64_t k) {
  const auto& D = problem.D;
  const int P = world_size();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1 + world_rank());
  const auto B = D.vector(at::rand({D.layout()->local_size(), k}, gen, at::kDouble));
  std::vector<sp::DVector> cols;
  for (std::int64_t j = 0; j < k; ++j) cols.push_back(D.vector(B.local().select(1, j).contiguous()));
  struct Variant {
    const char* name;
    sp::Method method;
    sp::CgVariant cg;
    sp::GmresBasis basis;
  };
  const auto W = sp::GmresBasis::working;
  for (const auto& [name, method, variant, basis] :
       {Variant{"standard", sp::Method::cg, sp::CgVariant::standard, W},
        Variant{"single_reduction", sp::Method::cg, sp::CgVariant::single_reduction, W},
        Variant{"gmres", sp::Method::gmres, sp::CgVariant::standard, W},
        Variant{"gmres_reduced", sp::Method::gmres, sp::CgVariant::standard, sp::GmresBasis::reduced},
        Variant{"bicgstab", sp::Method::bicgstab, sp::CgVariant::standard, W},
        Variant{"minres", sp::Method::minres, sp::CgVariant::standard, W}}) {
    if (!listed(cfg.variants, name)) continue;
    // The block's options; the singles run einshard's single GMRES (its basis in float64) either way.
    sp::SolveOptions o{.method = method, .preconditioner = sp::Preconditioner::jacobi, .rtol = 0.0,
                             .maxiter = cfg.iters, .cg_variant = variant, .restart = cfg.restart,
                             .reorthogonalize = cfg.reorthogonalize == "never" ? sp::Reorthogonalize::never
                                                                              : sp::Reorthogonalize::if_needed,
                             .gmres_basis = basis, .residual_history = false};
    auto single = o;
    o.block_columns = cfg.block_columns;
    single.gmres_basis = W;
    if (cfg.rtol > 0.0) {
      converge(cfg, D, B, cols, name, o, single);
      continue;
    }
    for (const std::string isa : {"avx2", "portable"}) {
      // Without AVX2 the block runs portable: an avx2 request reports that instead of nothing.
      const bool avx2 = sp::detail::avx2_kernels_available();
      if (isa == "avx2" ? !listed(cfg.isa, isa) || !avx2 : !listed(cfg.isa, isa) && (avx2 || !listed(cfg.isa, "avx2")))
        continue;
      sp::detail::force_portable_kernels() = isa == "portable";
#if EINSHARD_BENCH_PETSC
      const bool petsc = cfg.petsc && method != sp::Method::bicgstab && method != sp::Method::minres &&
                         variant == sp::CgVariant::standard;
      std::unique_ptr<Petsc> anchor;
      if (petsc)
        anchor = std::make_unique<Petsc>(problem, D.shape()[0], B.local(), method == sp::Method::gmres ? "gmres" : "cg",
                                         cfg.restart, cfg.iters);
#else
      const bool petsc = false;
#endif
      std::vector<double> t[4];
      double ar_block = 0.0, ar_single = 0.0;
      const auto side = [&](int which) {
        switch (which) {
          case 0: {
            const double a0 = allreduce_calls();
            t[0].push_back(timed([&] { (void)D.solve(B, o); }));
            ar_block = (allreduce_calls() - a0) / cfg.iters;
            break;
          }
          case 1: {
            const double a0 = allreduce_calls();
            t[1].push_back(timed([&] {
              for (const auto& c : cols) (void)D.solve(c, single);
            }));
            ar_single = (allreduce_calls() - a0) / cfg.iters;
            break;
          }
#if EINSHARD_BENCH_PETSC
          case 2: t[2].push_back(timed([&] { anchor->mat_solve(); })); break;
          case 3: t[3].push_back(timed([&] { anchor->singles(); })); break;
#endif
          default: break;
        }
      };
      const int sides = petsc ? 4 : 2;
      for (int s = 0; s < sides; ++s) side(s);  // untimed warm-up (the samples are overwritten below)
      for (auto& v : t) v.clear();
      for (int rep = 0; rep < cfg.reps; ++rep)
        for (int s = 0; s < sides; ++s) side((s + rep) % sides);
      sp::detail::force_portable_kernels() = false;
      const double best_petsc = petsc ? std::min(median(t[2]), median(t[3])) : -1.0;
      if (world_rank() == 0)
        std::printf("{\"bench\":\"sparse_multi_rhs\",\"variant\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"stencil\":%d,"
                    "\"n\":%lld,\"isa\":\"%s\",\"restart\":%d,\"reorthogonalize\":\"%s\",\"k\":%lld,\"iterations\":%d,\"block_ms\":%.3f,"
                    "\"singles_ms\":%.3f,\"throughput_ratio\":%.3f,\"petsc_matsolve_ms\":%.3f,\"petsc_singles_ms\":%.3f,"
                    "\"vs_petsc\":%.3f,\"allreduces_per_step_block\":%.2f,"
                    "\"allreduces_per_step_singles\":%.2f,\"block_columns\":%d,\"reps\":%d}\n",
                    name, P, static_cast<long long>(cfg.grid), cfg.stencil, static_cast<long long>(D.shape()[0]),
                    isa.c_str(), cfg.restart, cfg.reorthogonalize.c_str(), static_cast<long long>(k), cfg.iters, median(t[0]) * 1e3,
                    median(t[1]) * 1e3, median(t[1]) / median(t[0]), petsc ? median(t[2]) * 1e3 : -1.0,
                    petsc ? median(t[3]) * 1e3 : -1.0, petsc ? best_petsc / median(t[0]) : -1.0, ar_block, ar_single,
                    cfg.block_columns, cfg.reps);
      std::fflush(stdout);
    }
  }
}

void run(const Config& cfg) {
  const es::Mesh mesh(MPI_COMM_WORLD, {world_size()}, {"x"});
  const auto problem = matrix(cfg.grid, cfg.stencil, cfg.convection, mesh);
  std::size_t start = 0;
  for (;;) {  // each width of --k
    const auto end = cfg.k.find(',', start);
    run_width(cfg, problem, std::stoll(cfg.k.substr(start, end == std::string::npos ? std::string::npos : end - start)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
#if EINSHARD_BENCH_PETSC
  return einshard_bench::petsc_main(argc, argv, "einshard_bench_sparse_multi_rhs", parse, [](const Config& c) {
    run(c);
    return 0;
  });
#else
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    const auto cfg = parse(argc, argv);
    at::set_num_threads(einshard_bench::threads_from_env());
    run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "einshard_bench_sparse_multi_rhs (rank %d): %s\n", world_rank(), e.what());
    code = 1;
  }
  if (code != 0) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
#endif
}
