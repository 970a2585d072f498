// Weak and strong scaling of einshard's sparse headline work on the 2-D 5-point / 3-D 7-point
// Poisson matrix, for real mpirun and for SimGrid SMPI's simulated clusters (bench/scale/run.sh):
//
//   mesh       einshard::Mesh over MPI_COMM_WORLD, 1-D (what the sparse part uses)
//   mesh3      a 3-D Mesh (px, py, pz), every group's communicator (7 MPI_Cart_sub)
//   assemble   DSparseTensor::from_local of this rank's rows (the layout's directory, the
//              entries to their owners, the halo plan's handshake)
//   halo_first the exchange's construction and first exchange (its buffers), untimed
//   halo       the sparse halo exchange (HaloExchange of the matrix's HaloPlan), per exchange
//   rhs        the right-hand side, a DVector of ones, untimed
//   cg_first   CG, 2 iterations: the preconditioner's setup (reported as setup_s: with --precond
//              amg BoomerAMG's hierarchy), the solver's first vectors
//   cg         CG, a fixed number of iterations (rtol 0): time per iteration
//   solve      CG to --rtol (0: skipped), the preconditioner's setup reused: iterations and time
//   save, load with --save DIR: DSparseTensor::save of the matrix into DIR (a file per rank and
//              rank 0's metadata) and DSparseTensor::load of it at the same world size
//
// Partition: the ranks form a px x py (x pz) grid (MPI_Dims_create's rule); rank r owns one box of the
// grid points, numbered box by box (global row = r * box_points + the point's index in its box),
// so every rank owns one contiguous range of rows (the simple partition) and has at most 4 (6)
// neighbours: what a structured-grid code hands to from_local.
//
//   --dim 2|3       the grid's dimension (default 2)
//   --box b         weak scaling: each rank owns a b^dim box (default 64)
//   --grid n        strong scaling: the global grid is n^dim (each of px, py, pz must divide n)
//   --iters k       CG iterations timed (default 50)
//   --halo-reps k   halo exchanges timed (default 50)
//   --rtol r        the solve to tolerance (default 0: skipped)
//   --precond p     jacobi (default) or amg: hypre BoomerAMG with einshard's defaults, which needs a
//                   hypre built for the runner (run.sh amg builds one with smpicc for SMPI)
//   --cg v          CG's variant: standard (2 all-reduces per iteration), single_reduction (1) or
//                   pipelined (1 nonblocking, overlapped with the preconditioner and the product)
//   --counts 1      also print the per-phase MPI counts of mpi_count.hpp and the memory of
//                   memory_count.hpp (default 1)
//   --save DIR      time save and load through DIR (default: skipped)
//   --mesh3 1       time the 3-D Mesh too (default 1; 0 skips it: under SMPI its communicators
//                   cost the simulator O(P^2) real time each, minutes at 1,024 ranks)
//   SCALE_TRACE=1   (environment) rank 0 names each phase on stderr as it starts
//
// Output, rank 0, JSON lines: one {"bench":"poisson_scaling",...} with every phase's time (MPI_Wtime:
// simulated seconds under SMPI) and the wall time of the run on this machine, then (with --counts)
// one {"bench":"poisson_scaling_counts",...,"phase":...} per phase.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "memory_count.hpp"
#include "mpi_count.hpp"

namespace sp = einshard::sparse;

namespace {

double wall() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Grid {
  int dim = 2;
  std::array<int, 3> procs{1, 1, 1}, coords{0, 0, 0};
  std::array<std::int64_t, 3> box{1, 1, 1}, global{1, 1, 1};
  [[nodiscard]] std::int64_t box_points() const { return box[0] * box[1] * box[2]; }
  [[nodiscard]] int owner(std::array<std::int64_t, 3> p) const {
    int r = 0;
    for (int d = 0; d < 3; ++d) r = r * procs[d] + static_cast<int>(p[d] / box[d]);
    return r;
  }
  [[nodiscard]] std::int64_t row(std::array<std::int64_t, 3> p) const {
    std::int64_t local = 0;
    for (int d = 0; d < 3; ++d) local = local * box[d] + p[d] % box[d];
    return static_cast<std::int64_t>(owner(p)) * box_points() + local;
  }
};

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  MPI_Init(&argc, &argv);
  einshard_scale::count_memory();
  const double wall0 = wall();
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  Grid g;
  std::int64_t box = 64, grid = 0;
  int iters = 50, halo_reps = 50, counts = 1, mesh3 = 1;
  double rtol = 0;
  std::string variant = "standard", precond = "jacobi";
  std::string save_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dim") g.dim = std::stoi(argv[i + 1]);
    if (a == "--box") box = std::stoll(argv[i + 1]);
    if (a == "--grid") grid = std::stoll(argv[i + 1]);
    if (a == "--iters") iters = std::stoi(argv[i + 1]);
    if (a == "--halo-reps") halo_reps = std::stoi(argv[i + 1]);
    if (a == "--rtol") rtol = std::stod(argv[i + 1]);
    if (a == "--cg") variant = argv[i + 1];
    if (a == "--precond") precond = argv[i + 1];
    if (a == "--counts") counts = std::stoi(argv[i + 1]);
    if (a == "--mesh3") mesh3 = std::stoi(argv[i + 1]);
    if (a == "--save") save_dir = argv[i + 1];
  }
  // Balanced factors of P, largest first (MPI_Dims_create's rule, computed here so that every MPI
  // gives the same boxes).
  {
    std::vector<int> primes;
    for (int q = P, f = 2; q > 1;) {
      if (q % f == 0) primes.push_back(f), q /= f;
      else ++f;
    }
    for (auto it = primes.rbegin(); it != primes.rend(); ++it)
      *std::min_element(g.procs.begin(), g.procs.begin() + g.dim) *= *it;
    std::sort(g.procs.begin(), g.procs.begin() + g.dim, std::greater<>());
  }
  {
    int r = rank;
    for (int d = 2; d >= 0; --d) {
      g.coords[static_cast<std::size_t>(d)] = r % g.procs[static_cast<std::size_t>(d)];
      r /= g.procs[static_cast<std::size_t>(d)];
    }
  }
  for (int d = 0; d < g.dim; ++d) {
    if (grid > 0) {
      if (grid % g.procs[d] != 0) {
        if (rank == 0)
          std::fprintf(stderr, "poisson_scaling: --grid %lld is not divisible by %d ranks along dimension %d\n",
                       static_cast<long long>(grid), g.procs[d], d);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      g.box[d] = grid / g.procs[d];
    } else {
      g.box[d] = box;
    }
    g.global[d] = g.box[d] * g.procs[d];
  }
  const std::int64_t N = g.global[0] * g.global[1] * g.global[2];
  const std::int64_t B = g.box_points();
  const double stencil = 2.0 * g.dim;

  double mesh_s = 0, mesh3_s = 0, triples_s = 0, assemble_s = 0, halo_s = 0, cg_s = 0, solve_s = 0, save_s = 0,
         load_s = 0, setup_s = 0;
  double wall_mesh = 0, wall_assemble = 0, wall_halo = 0, wall_cg = 0, wall_solve = 0;
  int solve_iters = 0, cg_done = 0;
  std::int64_t neighbours = 0, ghosts = 0, held = 0;  // held: the matrix's bytes on this rank
  {
    const auto timed = [&](const char* name, double& sim, double* real, auto&& f) {
      einshard_scale::phase("sync");
      MPI_Barrier(MPI_COMM_WORLD);
      einshard_scale::phase(name);
      if (rank == 0 && std::getenv("SCALE_TRACE")) std::fprintf(stderr, "poisson_scaling: %s\n", name);
      const double w = wall(), t = MPI_Wtime();
      f();
      double dt = MPI_Wtime() - t;
      einshard_scale::phase("sync");
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      sim = dt;
      if (real) *real = wall() - w;
    };
    einshard::Mesh mesh;
    timed("mesh", mesh_s, &wall_mesh, [&] { mesh = einshard::Mesh(MPI_COMM_WORLD, {P}, {"x"}); });
    if (mesh3) timed("mesh3", mesh3_s, nullptr, [&] {
      const einshard::Mesh m3(MPI_COMM_WORLD, {g.procs[0], g.procs[1], g.procs[2]}, {"a", "b", "c"});
    });
    // This rank's rows: its box, stencil entries with Dirichlet boundaries (neighbours outside dropped).
    std::vector<std::int64_t> r, c;
    std::vector<double> v;
    timed("triples", triples_s, nullptr, [&] {
      r.reserve(static_cast<std::size_t>(B * (2 * g.dim + 1)));
      c.reserve(r.capacity());
      v.reserve(r.capacity());
      std::array<std::int64_t, 3> lo{}, p{};
      for (int d = 0; d < 3; ++d) lo[d] = g.coords[d] * g.box[d];
      for (p[0] = lo[0]; p[0] < lo[0] + g.box[0]; ++p[0])
        for (p[1] = lo[1]; p[1] < lo[1] + g.box[1]; ++p[1])
          for (p[2] = lo[2]; p[2] < lo[2] + g.box[2]; ++p[2]) {
            const auto i = g.row(p);
            r.push_back(i), c.push_back(i), v.push_back(stencil);
            for (int d = 0; d < g.dim; ++d)
              for (int s : {-1, 1}) {
                auto q = p;
                q[d] += s;
                if (q[d] < 0 || q[d] >= g.global[d]) continue;
                r.push_back(i), c.push_back(g.row(q)), v.push_back(-1.0);
              }
          }
    });
    const auto m = static_cast<std::int64_t>(r.size());
    std::optional<sp::DSparseTensor> A;
    timed("assemble", assemble_s, &wall_assemble, [&] {
      A.emplace(sp::DSparseTensor::from_local(at::from_blob(v.data(), {m}, at::kDouble),
                                        at::from_blob(r.data(), {m}, at::kLong),
                                        at::from_blob(c.data(), {m}, at::kLong), {N, N}, mesh));
    });
    // The triples are the program's, not the matrix's: 24 bytes per entry that a simulation of
    // thousands of ranks would otherwise hold through every phase after the assembly.
    std::vector<std::int64_t>().swap(r);
    std::vector<std::int64_t>().swap(c);
    std::vector<double>().swap(v);
    neighbours = static_cast<std::int64_t>(A->halo().recv_ranks.size());
    ghosts = A->halo().ghost_count();
    // The halo exchange on its own.
    {
      double untimed = 0;
      std::optional<sp::HaloExchange> exchange;
      at::Tensor owned, ghost;
      timed("halo_first", untimed, nullptr, [&] {  // warm: buffers
        exchange.emplace(std::make_shared<sp::HaloPlan>(A->halo()));
        owned = at::ones({A->layout()->local_size()}, at::kDouble);
        ghost = at::empty({A->halo().ghost_count()}, at::kDouble);
        exchange->start(owned, ghost);
        exchange->finish();
      });
      timed("halo", halo_s, &wall_halo, [&] {
        for (int k = 0; k < halo_reps; ++k) {
          exchange->start(owned, ghost);
          exchange->finish();
        }
      });
    }
    std::optional<sp::DVector> rhs;
    double untimed = 0;
    timed("rhs", untimed, nullptr,
          [&] { rhs.emplace(A->layout(), at::ones({A->layout()->local_size()}, at::kDouble)); });
    const sp::DVector& b = *rhs;
    sp::SolveOptions fixed;
    fixed.method = sp::Method::cg;
    fixed.cg_variant = variant == "pipelined"          ? sp::CgVariant::pipelined
                       : variant == "single_reduction" ? sp::CgVariant::single_reduction
                                                       : sp::CgVariant::standard;
    fixed.preconditioner = precond == "amg" ? sp::Preconditioner::amg : sp::Preconditioner::jacobi;
    fixed.rtol = 0.0;
    fixed.atol = 0.0;
    fixed.residual_history = false;
    fixed.maxiter = 2;
    // warm: the preconditioner, the scratch vectors
    timed("cg_first", untimed, nullptr, [&] { setup_s = A->solve(b, fixed).info.setup_seconds; });
    fixed.maxiter = iters;
    timed("cg", cg_s, &wall_cg, [&] { cg_done = A->solve(b, fixed).info.iterations; });
    held = A->held_bytes();  // after products: the halo's buffers are in
    if (rtol > 0) {
      auto tol = fixed;
      tol.rtol = rtol;
      tol.maxiter = 100000;
      timed("solve", solve_s, &wall_solve, [&] { solve_iters = A->solve(b, tol).info.iterations; });
    }
    if (!save_dir.empty()) {
      timed("save", save_s, nullptr, [&] { A->save(save_dir); });
      std::optional<sp::DSparseTensor> L;
      timed("load", load_s, nullptr, [&] { L.emplace(sp::DSparseTensor::load(save_dir, mesh)); });
      if (L->nnz() != A->nnz()) {
        std::fprintf(stderr, "poisson_scaling: the loaded matrix has %lld entries, the saved one %lld\n",
                     static_cast<long long>(L->nnz()), static_cast<long long>(A->nnz()));
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }
  std::int64_t mx[4] = {neighbours, ghosts, held, -held};
  MPI_Allreduce(MPI_IN_PLACE, mx, 4, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  char extra[256];
  std::snprintf(extra, sizeof extra, ",\"dim\":%d,\"mode\":\"%s\",\"rows\":%lld,\"cg_variant\":\"%s\",\"precond\":\"%s\"",
                g.dim, grid > 0 ? "strong" : "weak", static_cast<long long>(N), variant.c_str(), precond.c_str());
  const double total_wall = wall() - wall0;
  if (rank == 0) {
    std::printf(
        "{\"bench\":\"poisson_scaling\",\"ranks\":%d%s,\"rows_per_rank\":%lld,\"procs\":[%d,%d,%d],"
        "\"neighbours_max\":%lld,\"ghosts_max\":%lld,\"mesh_s\":%.6g,\"mesh3_s\":%.6g,\"triples_s\":%.6g,"
        "\"assemble_s\":%.6g,\"halo_us\":%.4g,\"halo_reps\":%d,\"cg_iters\":%d,\"cg_iter_us\":%.4g,\"solve_iters\":%d,\"solve_s\":%.6g,\"setup_s\":%.6g,"
        "\"wall_s\":%.2f,\"wall_mesh_s\":%.2f,\"wall_assemble_s\":%.2f,\"wall_halo_s\":%.2f,\"wall_cg_s\":%.2f,"
        "\"wall_solve_s\":%.2f,\"save_s\":%.6g,\"load_s\":%.6g,\"held_bytes_max\":%lld,\"held_bytes_min\":%lld}\n",
        P, extra, static_cast<long long>(B), g.procs[0], g.procs[1], g.procs[2], static_cast<long long>(mx[0]),
        static_cast<long long>(mx[1]), mesh_s, mesh3_s, triples_s, assemble_s, 1e6 * halo_s / halo_reps, halo_reps, cg_done,
        cg_done > 0 ? 1e6 * cg_s / cg_done : 0.0, solve_iters, solve_s, setup_s, total_wall, wall_mesh, wall_assemble,
        wall_halo, wall_cg, wall_solve, save_s, load_s, static_cast<long long>(mx[2]), static_cast<long long>(-mx[3]));
    std::fflush(stdout);
  }
  if (counts) einshard_scale::report("poisson_scaling", extra);
  MPI_Finalize();
  return 0;
}
