// Weak scaling of einshard's tensor notation, for real mpirun and for SimGrid SMPI's simulated
// clusters (bench/scale/run.sh notation): the same data per rank at every P.
//
//   mesh            einshard::Mesh over MPI_COMM_WORLD, 1-D ("tp": P)
//   mesh2           a 2-D Mesh ("p" x "q", balanced) for the pencil FFT
//   contract_first  the first call of "b k/tp, k/tp n -> b n" (a contraction over a sharded axis:
//                   partial sums, one all-reduce): the operands' agreement and the planning
//   contract        the same call again (cached: replayed), per call
//   repart_first    the first call of "a/tp b -> a b/tp" (a sharded axis moving to another: an
//                   all-to-all), then `repart` per call
//   rowrepart_first the same move inside each row of a 2-D mesh ("a/q b -> a b/q": q ranks), then
//                   `rowrepart` per call
//   mlp_first       the first tensor-parallel MLP step, forward and backward: the column-parallel
//                   "b e, f/tp e -> b f/tp", GELU, the row-parallel "b f/tp, e f/tp -> b e" (an
//                   all-reduce forward; the input's gradient an all-reduce backward), then `mlp`
//                   per step
//   halo_first      the first einhalo of a 2-D grid sharded over both mesh dimensions, "x/p y/q",
//                   one periodic ghost row on each side of both axes (four neighbours), then `halo`
//                   per call: the stencil loop's exchange, agreement included
//   halo_prepare    the same exchange prepared once (es::prepare_halo: agreement and planning),
//                   then `halo_prepared` per call: the ghost rows only, no collective
//   window, conv, roll
//                   (phase `stencil`, not run by default) einwindow, einconv and einroll of the
//                   halo's block with 2 channels, each repeated per call (agreement included), then
//                   `*_prepare` once (es::prepare_window, prepare_conv, prepare_roll) and
//                   `*_prepared` per call: the rows only, no collective
//   fft_first       the first 3-D complex FFT over pencils, "x/p y/q z -> kx ky/p kz/q" (two
//                   transposes, each an all-to-all within one mesh dimension), then `fft` per call
//
// Sizes per rank (weak scaling): contraction b 16, k 16 per rank, n 16; repartition a 2 per rank
// and b 2 per rank (its all-to-all moves 2 x 2 elements to every other rank: what a rank holds is
// 4P elements, the fixed quantity is the block per pair); MLP batch 8, embedding 32, 32 hidden
// features per rank; FFT --fft-per-rank complex elements per rank (default 512; the global sides
// powers of two, their product --fft-per-rank x P); halo 32 x 32 doubles per rank.
//
//   --reps k          repeated calls timed per phase (default 10)
//   --repart-reps k   repeated calls of the repartition over all P ranks (default 2: each is P^2
//                     simulated messages)
//   --fft-per-rank n  elements per rank of the FFT (a power of two; default 512)
//   --phases LIST     comma-separated subset of contract,repart,mlp,rowrepart,halo,stencil,fft
//                     (default all but stencil)
//   --counts 1        also print the per-phase MPI counts of mpi_count.hpp and the memory of
//                     memory_count.hpp (default 1)
//   SCALE_TRACE=1     (environment) rank 0 names each phase on stderr as it starts
//
// Output, rank 0, JSON lines: one {"bench":"notation_scaling",...} with every phase's time
// (MPI_Wtime: simulated seconds under SMPI; repeated phases per call), then one
// {"bench":"notation_scaling_model",...} per notation with the planner's per-rank figures
// (es::last_plan(): bytes sent and received, collectives, forward and backward; rank 0's, and
// max_*: the maximum over ranks, which is what the counts report), then (with
// --counts) one {"bench":"notation_scaling_counts",...,"phase":...} per phase.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "einshard/einshard.hpp"
#include "memory_count.hpp"
#include "mpi_count.hpp"

namespace es = einshard;

namespace {

double wall() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Balanced factors p >= q of P (MPI_Dims_create's rule).
std::pair<int, int> two_factors(int P) {
  int q = 1;
  for (int f = 1; f * f <= P; ++f)
    if (P % f == 0) q = f;
  return {P / q, q};
}

int log2_exact(std::int64_t n) {
  int e = 0;
  while ((std::int64_t{1} << e) < n) ++e;
  return e;
}

struct Model {
  std::string phase, notation, steps;  // steps: rank 0's plan
  es::StepCost fwd, bwd;               // rank 0's figures
  std::array<double, 6> max{};         // the maximum over ranks of fwd and bwd sent, received, collectives
};

std::string step_names(const es::Plan& p) {
  std::string s;
  // name[group](before -> after):forward bytes sent/backward bytes sent, per communicating step
  for (const auto& st : p.steps) {
    s += (s.empty() ? "" : " + ") + st.name;
    if (!st.group.empty()) s += "[" + st.group + "]";
    if (st.forward.bytes_sent || st.backward.bytes_sent) s += "(" + st.before + " -> " + st.after + ")";
    if (st.forward.bytes_sent || st.backward.bytes_sent)
      s += ":" + std::to_string(st.forward.bytes_sent) + "/" + std::to_string(st.backward.bytes_sent);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  MPI_Init(&argc, &argv);
  einshard_scale::count_memory();
  const double wall0 = wall();
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  int reps = 10, counts = 1;
  std::int64_t fft_per_rank = 512;
  int repart_reps = 2;
  std::string phases = "contract,repart,mlp,rowrepart,halo,fft";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") reps = std::stoi(argv[i + 1]);
    if (a == "--fft-per-rank") fft_per_rank = std::stoll(argv[i + 1]);
    if (a == "--repart-reps") repart_reps = std::stoi(argv[i + 1]);
    if (a == "--phases") phases = argv[i + 1];
    if (a == "--counts") counts = std::stoi(argv[i + 1]);
  }
  const auto want = [&](const std::string& p) { return ("," + phases + ",").find("," + p + ",") != std::string::npos; };
  const auto [pp, pq] = two_factors(P);
  // The meshes outlive MPI_Finalize (then their destructors free nothing): under SMPI with a thread
  // per rank, MPI_Comm_free of their communicators crashed the simulation at 64 ranks.
  es::Mesh mesh, mesh2;

  std::vector<std::pair<std::string, double>> times;  // phase -> simulated seconds (per call if repeated)
  std::vector<Model> models;
  double checksum = 0;
  {
    const auto timed = [&](const char* name, int calls, auto&& f) {
      einshard_scale::phase("sync");
      MPI_Barrier(MPI_COMM_WORLD);
      einshard_scale::phase(name);
      if (rank == 0 && std::getenv("SCALE_TRACE"))
        std::fprintf(stderr, "notation_scaling: %s (wall %.1f s)\n", name, wall() - wall0);
      const double t = MPI_Wtime();
      for (int k = 0; k < calls; ++k) f();
      double dt = MPI_Wtime() - t;
      einshard_scale::phase("sync");
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times.emplace_back(name, dt / calls);
    };
    const auto model = [&](const char* phase, const char* notation) {
      einshard_scale::phase("model");  // describing the plan calls no MPI; kept apart anyway
      const auto& p = es::last_plan();  // this rank's steps and costs
      Model m{phase, notation, step_names(p), p.total_forward(), p.total_backward()};
      m.max = {double(m.fwd.bytes_sent), double(m.fwd.bytes_received), double(m.fwd.collectives),
               double(m.bwd.bytes_sent), double(m.bwd.bytes_received), double(m.bwd.collectives)};
      MPI_Allreduce(MPI_IN_PLACE, m.max.data(), 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      models.push_back(std::move(m));
    };
    const auto dbl = at::TensorOptions().dtype(at::kDouble);
    timed("mesh", 1, [&] { mesh = es::Mesh(MPI_COMM_WORLD, {P}, {"tp"}); });
    const es::Options o{.mesh = mesh};
    at::manual_seed(1 + rank);

    if (want("contract")) {
      const auto x = at::randn({16, 16}, dbl), w = at::randn({16, 16}, dbl);
      at::Tensor y;
      timed("contract_first", 1, [&] { y = es::einshard<"b k/tp, k/tp n -> b n">(x, w, o); });
      timed("contract", reps, [&] { y = es::einshard<"b k/tp, k/tp n -> b n">(x, w, o); });
      model("contract", "b k/tp, k/tp n -> b n");
      checksum += y.sum().item<double>();
    }
    if (want("repart")) {
      const auto x = at::randn({2, 2 * static_cast<std::int64_t>(P)}, dbl);
      at::Tensor y;
      timed("repart_first", 1, [&] { y = es::einshard<"a/tp b -> a b/tp">(x, o); });
      timed("repart", repart_reps, [&] { y = es::einshard<"a/tp b -> a b/tp">(x, o); });
      model("repart", "a/tp b -> a b/tp");
      checksum += y.sum().item<double>();
    }
    if (want("mlp")) {
      // Batch 8, embedding 32, hidden 32 per rank; the input replicated (same on every rank).
      at::manual_seed(7);
      const auto x = at::randn({8, 32}, dbl).requires_grad_(true);
      at::manual_seed(100 + rank);
      const auto w1 = (0.2 * at::randn({32, 32}, dbl)).requires_grad_(true);
      const auto w2 = (0.2 * at::randn({32, 32}, dbl)).requires_grad_(true);
      const auto step = [&] {
        const auto h = es::einshard<"b e, f/tp e -> b f/tp">(x, w1, o);
        const auto y = es::einshard<"b f/tp, e f/tp -> b e">(at::gelu(h), w2, o);
        y.square().sum().backward();
      };
      timed("mlp_first", 1, step);
      timed("mlp", reps, step);
      model("mlp_row", "b f/tp, e f/tp -> b e");
      {  // the column-parallel half's plan (its forward moves nothing; its backward all-reduces)
        const auto h = es::einshard<"b e, f/tp e -> b f/tp">(x, w1, o);
        model("mlp_column", "b e, f/tp e -> b f/tp");
        // its backward, so that every rank's replay stays in step
        h.sum().backward();
      }
      checksum += x.grad().sum().item<double>();
    }
    if (want("rowrepart") || want("halo") || want("stencil") || want("fft"))
      timed("mesh2", 1, [&] { mesh2 = es::Mesh(MPI_COMM_WORLD, {pp, pq}, {"p", "q"}); });
    if (want("rowrepart")) {
      // The same move inside each row of the 2-D mesh (q ranks: an all-to-all of a sub-group, as
      // between sequence and heads over a sequence-parallel group); replicated over p.
      const auto x = at::randn({2, 2 * static_cast<std::int64_t>(pq)}, dbl);
      const es::Options r{.mesh = mesh2};
      at::Tensor y;
      timed("rowrepart_first", 1, [&] { y = es::einshard<"a/q b -> a b/q">(x, r); });
      timed("rowrepart", reps, [&] { y = es::einshard<"a/q b -> a b/q">(x, r); });
      model("rowrepart", "a/q b -> a b/q");
      checksum += y.sum().item<double>();
    }
    if (want("halo")) {
      const auto x = at::randn({32, 32}, dbl);
      const es::Options h{.mesh = mesh2, .boundary = es::Boundary::periodic};
      at::Tensor y;
      timed("halo_first", 1, [&] { y = es::einhalo<"x/p y/q">(x, {{"x", 1}, {"y", 1}}, h); });
      timed("halo", reps, [&] { y = es::einhalo<"x/p y/q">(x, {{"x", 1}, {"y", 1}}, h); });
      model("halo", "x/p y/q");
      checksum += y.sum().item<double>();
      std::optional<es::PreparedHalo> prepared;
      timed("halo_prepare", 1, [&] { prepared.emplace(es::prepare_halo<"x/p y/q">(x, {{"x", 1}, {"y", 1}}, h)); });
      timed("halo_prepared", reps, [&] { y = (*prepared)(x); });
      checksum += y.sum().item<double>();
    }
    if (want("stencil")) {
      const auto x = at::randn({32, 32, 2}, dbl), weight = at::randn({2, 2, 3, 3}, dbl);
      const es::Options h{.mesh = mesh2, .boundary = es::Boundary::periodic};
      const es::AxisMap windows{{"x", "kx"}, {"y", "ky"}};
      const es::Halos radius{{"x", 1}, {"y", 1}};
      const es::Shifts shifts{{"x", 1}, {"y", 1}};
      at::Tensor y;
      // `call` each time, then `make` once (preparing), then what it made per call.
      const auto compare = [&](const char* each, const char* prepare, const char* prepared, const auto& call,
                               const auto& make) {
        timed(each, reps, [&] { y = call(); });
        std::function<at::Tensor()> run;
        timed(prepare, 1, [&] { run = make(); });
        timed(prepared, reps, [&] { y = run(); });
        checksum += y.sum().item<double>();
      };
      compare(
          "window", "window_prepare", "window_prepared",
          [&] { return es::einwindow<"x/p y/q c -> x/p y/q kx ky c">(x, windows, radius, h); },
          [&] { return [p = es::prepare_window<"x/p y/q c -> x/p y/q kx ky c">(x, windows, radius, h), &x] { return p(x); }; });
      compare(
          "conv", "conv_prepare", "conv_prepared",
          [&] { return es::einconv<"x/p y/q c, o c kx ky -> x/p y/q o">(x, weight, windows, h); },
          [&] {
            return [p = es::prepare_conv<"x/p y/q c, o c kx ky -> x/p y/q o">(x, weight, windows, h), &x, &weight] {
              return p(x, weight);
            };
          });
      compare(
          "roll", "roll_prepare", "roll_prepared",
          [&] { return es::einroll<"x/p y/q c">(x, shifts, {.mesh = mesh2}); },
          [&] { return [p = es::prepare_roll<"x/p y/q c">(x, shifts, {.mesh = mesh2}), &x] { return p(x); }; });
    }
    if (want("fft")) {
      // Global sides: powers of two whose product is fft_per_rank * P, as even as they go.
      const int e = log2_exact(fft_per_rank * P);
      const std::int64_t X = std::int64_t{1} << ((e + 2) / 3), Y = std::int64_t{1} << ((e + 1) / 3),
                         Z = std::int64_t{1} << (e / 3);
      const auto cp = mesh2.coordinate("p"), cq = mesh2.coordinate("q");
      // The split rule's shard of n over g ranks at coordinate c.
      const auto shard = [](std::int64_t n, int g, int c) { return n / g + (c < n % g ? 1 : 0); };
      const auto x = at::randn({shard(X, pp, cp), shard(Y, pq, cq), Z}, at::kComplexDouble);
      const es::Options f{.mesh = mesh2, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}};
      at::Tensor y;
      timed("fft_first", 1, [&] { y = es::einfft<"x/p y/q z -> kx ky/p kz/q">(x, f); });
      timed("fft", reps, [&] { y = es::einfft<"x/p y/q z -> kx ky/p kz/q">(x, f); });
      model("fft", "x/p y/q z -> kx ky/p kz/q");
      checksum += at::real(y).sum().item<double>();
      if (rank == 0)
        std::fprintf(stderr, "notation_scaling: fft %lld x %lld x %lld over %d x %d\n", static_cast<long long>(X),
                     static_cast<long long>(Y), static_cast<long long>(Z), pp, pq);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &checksum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  char extra[160];
  std::snprintf(extra, sizeof extra,
                ",\"mode\":\"weak\",\"reps\":%d,\"repart_reps\":%d,\"mesh2\":[%d,%d],\"fft_per_rank\":%lld", reps,
                repart_reps, pp, pq, static_cast<long long>(fft_per_rank));
  const double total_wall = wall() - wall0;
  if (rank == 0) {
    std::string line = "{\"bench\":\"notation_scaling\",\"ranks\":" + std::to_string(P) + extra;
    char buf[128];
    for (const auto& [name, t] : times) {
      std::snprintf(buf, sizeof buf, ",\"%s_s\":%.6g", name.c_str(), t);
      line += buf;
    }
    std::snprintf(buf, sizeof buf, ",\"checksum\":%.6g,\"wall_s\":%.2f}", checksum, total_wall);
    line += buf;
    std::printf("%s\n", line.c_str());
    for (const auto& m : models) {
      std::printf(
          "{\"bench\":\"notation_scaling_model\",\"ranks\":%d%s,\"phase\":\"%s\",\"notation\":\"%s\",\"steps\":\"%s\","
          "\"fwd_sent\":%lld,\"fwd_received\":%lld,\"fwd_collectives\":%d,\"bwd_sent\":%lld,\"bwd_received\":%lld,"
          "\"bwd_collectives\":%d,\"max_fwd_sent\":%.0f,\"max_fwd_received\":%.0f,\"max_fwd_collectives\":%.0f,"
          "\"max_bwd_sent\":%.0f,\"max_bwd_received\":%.0f,\"max_bwd_collectives\":%.0f}\n",
          P, extra, m.phase.c_str(), m.notation.c_str(), m.steps.c_str(), static_cast<long long>(m.fwd.bytes_sent),
          static_cast<long long>(m.fwd.bytes_received), m.fwd.collectives, static_cast<long long>(m.bwd.bytes_sent),
          static_cast<long long>(m.bwd.bytes_received), m.bwd.collectives, m.max[0], m.max[1], m.max[2], m.max[3],
          m.max[4], m.max[5]);
    }
    std::fflush(stdout);
  }
  if (counts) einshard_scale::report("notation_scaling", extra);
  MPI_Finalize();
  return 0;
}
