// Time to solution on finite-element matrices (bench/sparse/real/generate.py: elasticity, Poisson,
// anisotropic diffusion, convection–diffusion on unstructured meshes, read from Matrix Market
// files): einshard against PETSc GAMG and PETSc + BoomerAMG on the same rows and right-hand side,
// in one launch.
//
// Rows: contiguous blocks of whole nodes (meta.json's `functions` rows each), the same on both
// sides; every rank reads the file and keeps its rows. Stop test: ‖r‖ ≤ rtol ‖b‖ on the
// unpreconditioned residual, x0 = 0. Symmetric problems: CG; the others GMRES(30), right-
// preconditioned on both sides. A singular problem (meta's "null_space": the constants or the
// rigid body modes of coords.mtx) is solved with its null space on both sides (SolveOptions::
// null_space; MatSetNullSpace and MatSetTransposeNullSpace), ‖b‖ then b's consistent part's.
// Time to solution: preconditioner setup plus iterations, the
// slowest rank's; medians of `--reps` after `--warmup` untimed runs of every solver, the order
// rotating from rep to rep (the machine is shared). Solvers (`--solvers`):
//   es_default   einshard amg with no option set (AmgOptions{}: the defaults it picks)
//   es_functions einshard amg with functions = meta's alone: unknown-wise coarsening, no
//                coordinates (elasticity only)
//   es_systems   einshard amg with functions = meta's, nodal and the rigid body modes of coords.mtx
//                (elasticity only)
//   es_2d, es_3d einshard amg with the settings its defaults pick for a 5-point (2-D) or a 7-point
//                (3-D) stencil, forced: AmgOptions{}.resolved(5) and resolved(7)
//   es_amg       einshard amg with `--amg` (amg_petsc.cpp's keys, and functions, nodal; the
//                rigid body modes are added with nodal where the problem has coords)
//   es_sa        einshard smoothed_aggregation with functions = meta's and, where the problem has
//                coords, the rigid body modes as its near-null space; `--amg` keys apply too
//   es_ilu       einshard block_jacobi (ILU(0) per rank)
//   es_..._one_pass  any of the above with GMRES's Gram–Schmidt in one pass (Reorthogonalize::never,
//                PETSc's default), for the nonsymmetric problems
//   es_..._reduced   any of the above (after _one_pass, if both) with GMRES's basis in float32
//                (GmresBasis::reduced)
//   petsc_gamg   PETSc PCGAMG, with the block size and MatNullSpaceCreateRigidBody's near-null space
//                where the problem has coords
//   petsc_hypre  PETSc PCHYPRE BoomerAMG with einshard's resolved default settings (the hierarchy
//                of es_default); with coords also the block size (hypre's functions) and nodal
//                coarsening 4 without aggressive levels. PETSc 3.18's vec_interp_variant (the
//                rigid body modes) stops its setup with hypre error 12 on these matrices, so it is
//                not used
//   petsc_hypre_default  PETSc PCHYPRE BoomerAMG with PETSc's settings (and the block size)
//   petsc_ilu    PETSc PCBJACOBI + ILU(0)
// `--write-solutions` writes each solver's last solution to x_<solver>_np<P>.mtx in the problem
// folder, for generate.py --check to compute the true residual from the files alone.
//
//   {"bench":"real_solve","problem":...,"ranks":P,"n":N,"solver":...,"converged":true,"iterations":k,"setup_s":...,
//    "solve_s":...,"total_s":...,"levels":...,"complexity":...,"total_reps_s":[...]}
//   {"bench":"real_summary","problem":...,"ranks":P,"best_es":...,"best_es_s":...,"best_petsc":...,
//    "best_petsc_s":...,"ratio_vs_best_petsc":es/petsc (≤ 1: einshard is sooner),"paired_ratio":...,
//    "systems_vs_scalar_iterations":es_systems/es_default}
//
//   mpirun -n P einshard_bench_sparse_real --dir build/bench-real/problems/elasticity3d_p1
//        [--solvers es_default,es_systems,petsc_gamg,petsc_hypre] [--reps 3] [--warmup 1] [--rtol 1e-8]
//        [--write-solutions] [--amg theta=0.5,agg=0,functions=3] [--petsc-options "-name value,..."]

#include <ATen/ATen.h>
#include <mpi.h>
#include <petscksp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/sparse.hpp>

#include "../common.hpp"
#include "petsc_amg_options.hpp"
#include "petsc_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::max_over_ranks;
using einshard_bench::median;
using einshard_bench::split;
using einshard_bench::timed;

namespace {

struct Config {
  std::string dir;
  double rtol = 1e-8;
  int reps = 3, warmup = 1;
  bool write_solutions = false;
  std::string amg_spec, petsc_options;
  std::vector<std::string> solvers{"es_default", "es_systems", "petsc_gamg", "petsc_hypre"};
};

Config parse(int argc, char** argv) {
  Config c;
  einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& value) {
    if (a == "--dir") c.dir = value();
    else if (a == "--rtol") c.rtol = std::stod(value());
    else if (a == "--reps") c.reps = std::stoi(value());
    else if (a == "--warmup") c.warmup = std::stoi(value());
    else if (a == "--solvers") c.solvers = split(value());
    else if (a == "--write-solutions") c.write_solutions = true;
    else if (a == "--amg") c.amg_spec = value();
    else if (a == "--petsc-options") c.petsc_options = value();
    else return false;
    return true;
  });
  if (c.dir.empty()) throw std::runtime_error("--dir: a problem folder of generate.py is needed");
  return c;
}

/// A number or boolean field of generate.py's flat meta.json.
std::string meta_field(const std::string& text, const std::string& key) {
  const auto at = text.find("\"" + key + "\":");
  if (at == std::string::npos) return {};
  auto begin = at + key.size() + 3;
  while (begin < text.size() && text[begin] == ' ') ++begin;
  return text.substr(begin, text.find_first_of(",}", begin) - begin);
}

/// A Matrix Market array file (column-major) as a (rows, cols) float64 tensor.
at::Tensor read_array(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::string line;
  do std::getline(in, line);
  while (!line.empty() && line[0] == '%');
  std::int64_t rows = 0, cols = 0;
  std::istringstream(line) >> rows >> cols;
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (auto& x : v) in >> x;
  return at::from_blob(v.data(), {cols, rows}, at::kDouble).t().clone(at::MemoryFormat::Contiguous);
}

void write_array(const std::string& path, const at::Tensor& x) {
  std::ofstream out(path);
  out << "%%MatrixMarket matrix array real general\n" << x.numel() << " 1\n";
  out.precision(17);
  const auto c = x.contiguous();
  for (std::int64_t i = 0; i < c.numel(); ++i) out << c.data_ptr<double>()[i] << '\n';
}

struct Sample {
  std::vector<double> setup, solve, total;
  bool converged = true;  // every rep; one that did not is left out of the summary
  int iterations = 0, levels = 0;
  double complexity = 0;
};

int run(const Config& cfg) {
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  std::ifstream meta_in(cfg.dir + "/meta.json");
  const std::string meta((std::istreambuf_iterator<char>(meta_in)), std::istreambuf_iterator<char>());
  const auto name = meta_field(meta, "name");
  const std::string problem = name.size() > 2 ? name.substr(1, name.size() - 2) : cfg.dir;
  const int functions = std::stoi(meta_field(meta, "functions"));
  const bool symmetric = meta_field(meta, "symmetric") == "true";
  const bool has_coords = std::ifstream(cfg.dir + "/coords.mtx").good();
  // A singular A whose null space is the constants (pure Neumann) or the rigid body modes (a
  // floating body): einshard's null_space, PETSc's MatSetNullSpace and MatSetTransposeNullSpace
  // (which removes b's component in it).
  const bool constants = meta_field(meta, "null_space") == "\"constants\"";
  const bool floating = meta_field(meta, "null_space") == "\"rigid_body\"";

  // Every rank reads the whole file and keeps its block of whole nodes.
  const auto whole = sp::read_matrix_market(cfg.dir + "/A.mtx");
  const std::int64_t n = whole.rows(), nodes = n / functions;
  const std::int64_t block = (nodes + p - 1) / p;
  const std::int64_t lo = std::min(rank * block, nodes) * functions, hi = std::min((rank + 1) * block, nodes) * functions;
  const auto& csr = whole.csr();
  const auto rp = csr.rowptr.to(at::kLong).contiguous(), ci = csr.col.to(at::kLong).contiguous();
  const auto first = rp[lo].item<std::int64_t>(), last = rp[hi].item<std::int64_t>();
  const auto cols = ci.slice(0, first, last).contiguous();
  const auto vals = csr.values.slice(0, first, last).contiguous();
  const auto row_ptr = (rp.slice(0, lo, hi + 1) - first).contiguous();
  const auto rows = at::repeat_interleave(at::arange(lo, hi, at::kLong), row_ptr.diff());
  const auto b_all = read_array(cfg.dir + "/b.mtx").reshape({-1});
  const auto coords = has_coords ? read_array(cfg.dir + "/coords.mtx") : at::Tensor();

  es::Mesh mesh(MPI_COMM_WORLD, {p}, {"rows"});
  const auto D = sp::DSparseTensor::from_local(vals, rows, cols, {n, n}, mesh, {.owned_rows = at::arange(lo, hi, at::kLong)});
  auto b = D.zeros();
  b.local().copy_(b_all.slice(0, lo, hi));
  const auto my_coords = has_coords ? coords.slice(0, lo / functions, hi / functions) : at::Tensor();
  const auto modes = has_coords ? sp::rigid_body_modes(my_coords, functions) : at::Tensor();

  // PETSc: the same rows.
  std::vector<std::int64_t> prow(row_ptr.data_ptr<std::int64_t>(), row_ptr.data_ptr<std::int64_t>() + row_ptr.numel());
  std::vector<std::int64_t> pcol(cols.data_ptr<std::int64_t>(), cols.data_ptr<std::int64_t>() + cols.numel());
  std::vector<double> pval(vals.data_ptr<double>(), vals.data_ptr<double>() + vals.numel());
  std::int64_t widest = 0;
  for (std::size_t i = 0; i + 1 < prow.size(); ++i) widest = std::max(widest, prow[i + 1] - prow[i]);
  Mat A = einshard_bench::petsc_matrix(prow, pcol, pval, lo, hi - lo, n, n, static_cast<PetscInt>(widest),
                                       static_cast<PetscInt>(widest));
  if (functions > 1) PETSC(MatSetBlockSize(A, functions));
  MatNullSpace near = nullptr;
  if (has_coords) {
    Vec xyz = nullptr;
    const auto dim = my_coords.size(1);
    PETSC(VecCreateMPI(PETSC_COMM_WORLD, static_cast<PetscInt>(my_coords.numel()), PETSC_DETERMINE, &xyz));
    PETSC(VecSetBlockSize(xyz, static_cast<PetscInt>(dim)));
    PetscScalar* a = nullptr;
    PETSC(VecGetArray(xyz, &a));
    std::copy_n(my_coords.contiguous().data_ptr<double>(), my_coords.numel(), a);
    PETSC(VecRestoreArray(xyz, &a));
    PETSC(MatNullSpaceCreateRigidBody(xyz, &near));
    PETSC(MatSetNearNullSpace(A, near));
    PETSC(VecDestroy(&xyz));
  }
  MatNullSpace null_space = nullptr;
  if (constants) PETSC(MatNullSpaceCreate(PETSC_COMM_WORLD, PETSC_TRUE, 0, nullptr, &null_space));
  if (floating) {
    null_space = near;
    PETSC(PetscObjectReference(reinterpret_cast<PetscObject>(near)));
  }
  if (null_space) {
    PETSC(MatSetNullSpace(A, null_space));
    PETSC(MatSetTransposeNullSpace(A, null_space));
  }
  Vec pb = nullptr, px = nullptr;
  PETSC(MatCreateVecs(A, &px, &pb));
  {
    PetscScalar* a = nullptr;
    PETSC(VecGetArray(pb, &a));
    std::copy_n(b.local().data_ptr<double>(), hi - lo, a);
    PETSC(VecRestoreArray(pb, &a));
  }
  // petsc_hypre: the hierarchy einshard's defaults choose for this matrix.
  const auto defaults = sp::AmgOptions{}.resolved(static_cast<double>(whole.nnz()) / static_cast<double>(n));
  einshard_bench::set_petsc_options(defaults, cfg.petsc_options);
  const std::string hx = "-petsc_hypre_x_pc_hypre_boomeramg_";
  if (has_coords) {
    for (const auto& [key, value] : std::map<std::string, std::string>{{"nodal_coarsen", "4"}, {"agg_nl", "0"}})
      einshard_bench::set_option(hx + key, value);
  }
  einshard_bench::set_option("-petsc_ilu_sub_pc_type", "ilu");

  sp::AmgOptions systems{.functions = functions, .nodal = functions > 1, .near_null_space = modes};
  std::map<std::string, Sample> samples;
  std::map<std::string, at::Tensor> solutions;
  const auto sample = [&](const std::string& solver, bool keep) {
    Sample scratch;
    auto& s = keep ? samples[solver] : scratch;
    double setup = 0, total = 0;
    if (solver.rfind("es_", 0) == 0) {
      // "<solver>_one_pass": GMRES with one Gram–Schmidt pass (PETSc's default), convergence
      // confirmed by the true residual.
      const auto suffix = [](std::string& name, const std::string& end) {
        const bool has = name.size() > end.size() && name.ends_with(end);
        if (has) name.resize(name.size() - end.size());
        return has;
      };
      std::string base = solver;
      const bool reduced = suffix(base, "_reduced");
      const bool one = suffix(base, "_one_pass");
      sp::SolveOptions o{.method = symmetric ? sp::Method::cg : sp::Method::gmres,
                         .preconditioner = base == "es_ilu"  ? sp::Preconditioner::block_jacobi
                                           : base == "es_sa" ? sp::Preconditioner::smoothed_aggregation
                                                             : sp::Preconditioner::amg,
                         .rtol = cfg.rtol, .maxiter = 1000, .residual_history = false};
      if (one) o.reorthogonalize = sp::Reorthogonalize::never;
      if (reduced) o.gmres_basis = sp::GmresBasis::reduced;
      if (constants) o.null_space = at::ones({hi - lo, 1}, at::kDouble);
      if (floating) o.null_space = modes;
      if (base == "es_systems") o.preconditioner_options.amg = systems;
      if (base == "es_functions") o.preconditioner_options.amg = sp::AmgOptions{.functions = functions};
      if (base == "es_amg") {
        auto amg = einshard_bench::apply_amg_spec({}, cfg.amg_spec);
        if (amg.nodal && has_coords) amg.near_null_space = modes;
        o.preconditioner_options.amg = amg;
      }
      if (base == "es_sa") {
        auto sa = einshard_bench::apply_amg_spec({.functions = functions}, cfg.amg_spec);
        if (has_coords) sa.near_null_space = modes;
        o.preconditioner_options.amg = sa;
      }
      if (base == "es_2d" || base == "es_3d") o.preconditioner_options.amg = sp::AmgOptions{}.resolved(base == "es_2d" ? 5 : 7);
      const auto fresh = D.with_values(D.values().clone());  // no setup to reuse
      sp::SolveResult r;
      total = timed([&] { r = fresh.solve(b, o); });
      s.converged = s.converged && r.info.converged;
      setup = r.info.setup_seconds;
      s.iterations = r.info.iterations;
      s.levels = r.info.levels;
      s.complexity = r.info.operator_complexity;
      if (cfg.write_solutions) solutions[solver] = r.x.full_tensor();
    } else {
      KSP ksp = nullptr;
      PETSC(KSPCreate(PETSC_COMM_WORLD, &ksp));
      const auto prefix = solver == "petsc_hypre" ? std::string("petsc_hypre_x_")
                          : solver == "petsc_hypre_default" ? std::string("petsc_hypre_") : solver + "_";
      PETSC(KSPSetOptionsPrefix(ksp, prefix.c_str()));
      PETSC(KSPSetOperators(ksp, A, A));
      PETSC(KSPSetType(ksp, symmetric ? KSPCG : KSPGMRES));
      if (!symmetric) PETSC(KSPSetPCSide(ksp, PC_RIGHT));
      PC pc = nullptr;
      PETSC(KSPGetPC(ksp, &pc));
      PETSC(PCSetType(pc, solver == "petsc_gamg" ? PCGAMG : solver == "petsc_ilu" ? PCBJACOBI : PCHYPRE));
      PETSC(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
      PETSC(KSPSetTolerances(ksp, cfg.rtol, 0.0, PETSC_DEFAULT, 1000));
      PETSC(KSPSetFromOptions(ksp));
      PETSC(VecSet(px, 0.0));
      double t1 = 0;
      total = timed([&] {
        const double t0 = MPI_Wtime();
        PETSC(KSPSetUp(ksp));
        t1 = MPI_Wtime() - t0;
        PETSC(KSPSolve(ksp, pb, px));
      });
      setup = t1;
      PetscInt its = 0;
      PETSC(KSPGetIterationNumber(ksp, &its));
      KSPConvergedReason reason;
      PETSC(KSPGetConvergedReason(ksp, &reason));
      PETSC(KSPDestroy(&ksp));
      s.converged = s.converged && reason > 0;
      s.iterations = static_cast<int>(its);
      if (cfg.write_solutions) {
        const PetscScalar* a = nullptr;
        PETSC(VecGetArrayRead(px, &a));
        auto x = D.zeros();
        std::copy_n(a, hi - lo, x.local().data_ptr<double>());
        PETSC(VecRestoreArrayRead(px, &a));
        solutions[solver] = x.full_tensor();
      }
    }
    setup = max_over_ranks(setup);
    s.setup.push_back(setup);
    s.total.push_back(total);
    s.solve.push_back(total - setup);
  };
  std::vector<std::string> solvers;
  for (const auto& s : cfg.solvers)
    if ((s != "es_systems" && s != "es_functions") || has_coords) solvers.push_back(s);
  for (int rep = 0; rep < cfg.warmup; ++rep)
    for (const auto& s : solvers) sample(s, false);
  for (int rep = 0; rep < cfg.reps; ++rep)
    for (std::size_t v = 0; v < solvers.size(); ++v) sample(solvers[(v + static_cast<std::size_t>(rep)) % solvers.size()], true);

  if (rank == 0) {
    for (const auto& s : solvers) {
      const auto& m = samples[s];
      std::string reps;
      for (const double t : m.total) reps += (reps.empty() ? "" : ",") + std::to_string(t);
      std::printf("{\"bench\":\"real_solve\",\"problem\":\"%s\",\"ranks\":%d,\"n\":%lld,\"solver\":\"%s\",\"rtol\":%.0e,"
                  "\"converged\":%s,\"iterations\":%d,\"setup_s\":%.3f,\"solve_s\":%.3f,\"total_s\":%.3f,\"levels\":%d,\"complexity\":%.3f,"
                  "\"total_reps_s\":[%s]}\n",
                  problem.c_str(), p, static_cast<long long>(n), s.c_str(), cfg.rtol, m.converged ? "true" : "false", m.iterations, median(m.setup),
                  median(m.solve), median(m.total), m.levels, m.complexity, reps.c_str());
      if (cfg.write_solutions) write_array(cfg.dir + "/x_" + s + "_np" + std::to_string(p) + ".mtx", solutions[s]);
    }
    const auto best_of = [&](const char* prefix) {
      std::pair<std::string, double> best{"", 0.0};
      for (const auto& [s, m] : samples)
        if (s.rfind(prefix, 0) == 0 && m.converged && (best.first.empty() || median(m.total) < best.second)) best = {s, median(m.total)};
      return best;
    };
    const auto [es_best, es_s] = best_of("es_");
    const auto [pe_best, pe_s] = best_of("petsc");
    std::vector<double> paired;
    if (!es_best.empty() && !pe_best.empty())
      for (std::size_t r = 0; r < samples[es_best].total.size(); ++r)
        paired.push_back(samples[es_best].total[r] / samples[pe_best].total[r]);
    const double its_ratio = samples.count("es_systems") && samples.count("es_default")
                                 ? static_cast<double>(samples["es_systems"].iterations) / samples["es_default"].iterations
                                 : 0.0;
    std::printf("{\"bench\":\"real_summary\",\"problem\":\"%s\",\"ranks\":%d,\"n\":%lld,\"best_es\":\"%s\",\"best_es_s\":%.3f,"
                "\"best_petsc\":\"%s\",\"best_petsc_s\":%.3f,\"ratio_vs_best_petsc\":%.3f,\"paired_ratio\":%.3f,"
                "\"systems_vs_scalar_iterations\":%.3f}\n",
                problem.c_str(), p, static_cast<long long>(n), es_best.c_str(), es_s, pe_best.c_str(), pe_s,
                pe_s > 0 ? es_s / pe_s : 0.0, paired.empty() ? 0.0 : median(paired), its_ratio);
    std::fflush(stdout);
  }
  if (near) PETSC(MatNullSpaceDestroy(&near));
  if (null_space) PETSC(MatNullSpaceDestroy(&null_space));
  PETSC(VecDestroy(&px));
  PETSC(VecDestroy(&pb));
  PETSC(MatDestroy(&A));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return einshard_bench::petsc_main(argc, argv, "einshard_bench_sparse_real", parse, run); }
