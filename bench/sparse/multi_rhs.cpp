// Several right-hand sides at once: D.solve(B), B an (n_local, k) block, against k single solves of
// its columns (einshard's normal D.solve(b), same method, preconditioner and iteration count), in
// one launch. No other library is involved: the anchor is einshard's own single solve.
//
// Problem: the 2-D 5-point Poisson matrix on a g × g grid (--stencil 5, the default), or a 3-D
// stencil on a g³ grid (--stencil 7: the six face neighbours; 27: all 26), float64, rows in
// contiguous blocks, each rank assembling its own. B is uniform random, k = 8 columns.
//
// Each method runs with Jacobi for exactly `--iters` iterations (rtol = atol = 0): CG in both
// reduction organisations ("standard": two all-reduces per step; "single_reduction": one),
// GMRES(--restart), BiCGStab and MINRES. The all-reduces are counted through MPI's profiling
// interface (MPI_Allreduce and MPI_Iallreduce are defined in this file) and reported per step: the
// block's for all k columns, the singles' summed over their k solves. `--isa avx2,portable` runs
// the block with each of the block product's instruction sets (AVX2 where the CPU has it; the
// portable body is what a CPU without AVX2 runs); the singles are the same either way.
//
// A sample is the maximum over the ranks of one side's elapsed time (MPI_Barrier first); block and
// singles alternate within each rep after one untimed block solve; medians over `--reps`. JSON
// lines on rank 0:
//
//   {"bench":"sparse_multi_rhs","variant":"standard"|"single_reduction"|"gmres"|"bicgstab"|"minres",
//    "ranks":P,"grid":g,"stencil":5|7|27,"n":unknowns,"isa":"avx2"|"portable","restart":m,"k":8,
//    "iterations":...,"block_ms":...,"singles_ms":...,"throughput_ratio":singles / block,
//    "allreduces_per_step_block":...,"allreduces_per_step_singles":...,"reps":...}
//
//   mpirun -n P einshard_bench_sparse_multi_rhs [--grid 300] [--stencil 5|7|27] [--iters 100] [--reps 3]
//        [--variants standard,single_reduction,gmres,bicgstab,minres] [--restart 30] [--isa avx2,portable]
//
// GMRES's block basis is restart + 1 blocks of (n_local, 8): leave it out on a large grid, or
// shorten --restart. bench/sparse/run.sh --suite multi_rhs runs the published set of cases.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/sparse.hpp>

#include "../common.hpp"
#include "allreduce_count.hpp"

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
  /// Block-product instruction sets: avx2 (where the CPU has it; elsewhere portable instead)
  /// and/or portable.
  std::string isa = "avx2";
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return std::string(argv[++i]);
    };
    if (a == "--grid") c.grid = std::stoll(next());
    else if (a == "--stencil") c.stencil = std::stoi(next());
    else if (a == "--iters") c.iters = std::stoi(next());
    else if (a == "--reps") c.reps = std::stoi(next());
    else if (a == "--variants") c.variants = next();
    else if (a == "--restart") c.restart = std::stoi(next());
    else if (a == "--isa") c.isa = next();
    else throw std::runtime_error("unknown argument " + a);
  }
  if (c.stencil != 5 && c.stencil != 7 && c.stencil != 27)
    throw std::runtime_error("--stencil: expected 5, 7 or 27, found " + std::to_string(c.stencil));
  if (c.reps < 1) throw std::runtime_error("--reps must be at least 1");
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
sp::DSparseTensor matrix(std::int64_t g, int points, const es::Mesh& mesh) {
  const auto n = points == 5 ? g * g : g * g * g;
  const auto [lo, hi] = sp::simple_rows(n, MPI_COMM_WORLD);
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  const auto add = [&](std::int64_t i, std::int64_t j, double value) {
    r.push_back(i);
    c.push_back(j);
    v.push_back(value);
  };
  for (auto i = lo; i < hi; ++i) {
    if (points == 5) {
      einshard_bench::poisson_row(g, i, [&](std::int64_t j, double value) { add(i, j, value); });
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
  }
  const auto vals = at::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, at::kDouble).clone();
  return sp::DSparseTensor::from_local(vals, as_tensor(r), as_tensor(c), {n, n}, mesh);
}

void run(const Config& cfg) {
  const std::int64_t k = 8;
  const int P = world_size();
  const es::Mesh mesh(MPI_COMM_WORLD, {P}, {"x"});
  const auto D = matrix(cfg.grid, cfg.stencil, mesh);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1 + world_rank());
  const auto B = D.vector(at::rand({D.layout()->local_size(), k}, gen, at::kDouble));
  std::vector<sp::DVector> cols;
  for (std::int64_t j = 0; j < k; ++j) cols.push_back(D.vector(B.local().select(1, j).contiguous()));
  struct Variant {
    const char* name;
    sp::Method method;
    sp::CgVariant cg;
  };
  for (const auto& [name, method, variant] :
       {Variant{"standard", sp::Method::cg, sp::CgVariant::standard},
        Variant{"single_reduction", sp::Method::cg, sp::CgVariant::single_reduction},
        Variant{"gmres", sp::Method::gmres, sp::CgVariant::standard},
        Variant{"bicgstab", sp::Method::bicgstab, sp::CgVariant::standard},
        Variant{"minres", sp::Method::minres, sp::CgVariant::standard}}) {
    if (!listed(cfg.variants, name)) continue;
    const sp::SolveOptions o{.method = method, .preconditioner = sp::Preconditioner::jacobi, .rtol = 0.0,
                             .maxiter = cfg.iters, .cg_variant = variant, .restart = cfg.restart,
                             .residual_history = false};
    for (const std::string isa : {"avx2", "portable"}) {
      // Without AVX2 the block runs portable: an avx2 request reports that instead of nothing.
      const bool avx2 = sp::detail::block_avx2_available();
      if (isa == "avx2" ? !listed(cfg.isa, isa) || !avx2 : !listed(cfg.isa, isa) && (avx2 || !listed(cfg.isa, "avx2")))
        continue;
      sp::detail::block_force_portable() = isa == "portable";
      (void)D.solve(B, o);
      std::vector<double> t_block, t_single;
      double ar_block = 0.0, ar_single = 0.0;
      for (int rep = 0; rep < cfg.reps; ++rep) {
        const double a0 = allreduce_calls();
        t_block.push_back(timed([&] { (void)D.solve(B, o); }));
        const double a1 = allreduce_calls();
        t_single.push_back(timed([&] {
          for (const auto& c : cols) (void)D.solve(c, o);
        }));
        ar_block = (a1 - a0) / cfg.iters;
        ar_single = (allreduce_calls() - a1) / cfg.iters;
      }
      sp::detail::block_force_portable() = false;
      if (world_rank() == 0)
        std::printf("{\"bench\":\"sparse_multi_rhs\",\"variant\":\"%s\",\"ranks\":%d,\"grid\":%lld,\"stencil\":%d,"
                    "\"n\":%lld,\"isa\":\"%s\",\"restart\":%d,\"k\":%lld,\"iterations\":%d,\"block_ms\":%.3f,"
                    "\"singles_ms\":%.3f,\"throughput_ratio\":%.3f,\"allreduces_per_step_block\":%.2f,"
                    "\"allreduces_per_step_singles\":%.2f,\"reps\":%d}\n",
                    name, P, static_cast<long long>(cfg.grid), cfg.stencil, static_cast<long long>(D.shape()[0]),
                    isa.c_str(), cfg.restart, static_cast<long long>(k), cfg.iters, median(t_block) * 1e3,
                    median(t_single) * 1e3, median(t_single) / median(t_block), ar_block, ar_single, cfg.reps);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
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
}
