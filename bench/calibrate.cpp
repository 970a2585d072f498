// Calibration of the planner's cost model (plan/cost.hpp) on this machine, and a check that the
// planner picks the faster plan. JSON lines on rank 0.
//
//   mpirun -n 2 build/release/bench/einshard_bench_calibrate [--quick] [--iters N]
//
// 1. Machine constants. Each collective of comm/collectives.hpp at several sizes, timed (slowest
//    rank, median of N rounds), with the bytes the cost model charges for it (cost.hpp: all-reduce
//    2(P-1)/P of the tensor, reduce-scatter (P-1)/P of the input, all-gather (P-1)/P of the output,
//    all-to-all the part of the new piece held elsewhere); a line time = latency + bytes /
//    bandwidth through all of them (least squares of the relative error) gives
//    `seconds_per_collective` and `bytes_per_second`.
//    A matrix product gives `flops_per_second`, a transposing copy `copy_bytes_per_second`.
//    Printed as {"bench":"calibrate","machine":{...}}: the values to put in plan::Machine.
// 2. Planner choices. For contractions whose best compute layout flips with the shapes, every
//    candidate the planner considered runs forward and backward (interleaved rounds, slowest rank,
//    median), next to the model's score; {"bench":"planner_choice",...,"chosen_is_fastest":...}.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/einshard.hpp>
#include <einshard/exec/contraction.hpp>  // prepares and runs contractions directly
#include <einshard/exec/replay.hpp>       // agree_operands

#include "common.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace es = einshard;
using einshard_bench::median;
using einshard_bench::timed;

namespace {

int rank_ = 0, world_ = 1;

/// Median time of each function over `rounds` interleaved rounds (the starting one rotating).
std::vector<double> interleaved(const std::vector<std::function<void()>>& fs, int rounds) {
  std::vector<std::vector<double>> t(fs.size());
  for (auto& f : fs) f();  // warm up
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < fs.size(); ++k) {
      const auto i = (k + static_cast<std::size_t>(r)) % fs.size();
      t[i].push_back(timed(fs[i]));
    }
  std::vector<double> m;
  for (auto& v : t) m.push_back(median(v));
  return m;
}

struct Point {
  std::string what;
  double mib, bytes, seconds;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  bool quick = false;
  int iters = 9;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
  }
  if (quick) iters = 3;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  const es::Mesh mesh(MPI_COMM_WORLD, {world_}, {"tp"});
  const es::Options o{.mesh = mesh};
  const double P = world_, f = (P - 1) / P;
  const auto comm = mesh.comm("tp");

  // 1. Collectives: time against the model's bytes.
  std::vector<Point> points;
  const std::vector<double> sizes = quick ? std::vector<double>{0.25, 1} : std::vector<double>{0.25, 1, 4, 16};
  {
    // Latency: a one-element all-reduce.
    const auto one = at::ones({1});
    const auto t = interleaved({[&] { (void)es::comm::all_reduce(one, comm); }}, iters * 20);
    points.push_back({"all_reduce", 0, 0, t[0]});
  }
  for (const double mib : sizes) {
    const std::int64_t rows = static_cast<std::int64_t>(mib * 1024 * 1024 / 4 / 256) / world_ * world_;
    const auto x = at::ones({rows, 256});  // this rank's tensor (whole, partial or piece)
    const double bytes = static_cast<double>(x.numel()) * 4;
    const std::vector<std::int64_t> pieces(static_cast<std::size_t>(world_), rows / world_);
    const auto piece = at::ones({rows / world_, 256});
    at::NoGradGuard no_grad;
    const auto t = interleaved(
        {[&] { (void)es::comm::all_reduce(x, comm); },
         [&] { (void)es::comm::reduce_scatter(x, 0, pieces, comm); },
         [&] { (void)es::comm::all_gather(piece, 0, pieces, comm); },
         [&] { (void)es::einshard<"a/tp b -> a b/tp">(x, o); }},
        iters);
    points.push_back({"all_reduce", mib, 2 * f * bytes, t[0]});
    points.push_back({"reduce_scatter", mib, f * bytes, t[1]});
    points.push_back({"all_gather", mib, f * bytes, t[2]});
    points.push_back({"all_to_all", mib, f * bytes, t[3]});
  }
  // Least squares of the relative error, so that small and large transfers weigh alike:
  // minimize the sum of ((latency + bytes * slope - seconds) / seconds)^2.
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  for (const auto& p : points) {
    const double u = 1 / p.seconds, v = p.bytes / p.seconds;
    a11 += u * u, a12 += u * v, a22 += v * v, b1 += u, b2 += v;
  }
  const double det = a11 * a22 - a12 * a12;
  const double latency = (b1 * a22 - b2 * a12) / det, slope = (a11 * b2 - a12 * b1) / det;
  if (rank_ == 0)
    for (const auto& p : points)
      std::printf("{\"bench\":\"calibrate\",\"ranks\":%d,\"collective\":\"%s\",\"mib\":%g,\"model_bytes\":%.0f,"
                  "\"ms\":%.4f,\"fit_ms\":%.4f}\n",
                  world_, p.what.c_str(), p.mib, p.bytes, 1e3 * p.seconds, 1e3 * (latency + p.bytes * slope));

  // Arithmetic and copies (every rank at once, as in a real step).
  double flops_per_second = 0, copy_bytes_per_second = 0;
  {
    const std::int64_t m = 256, k = quick ? 256 : 1024, nn = quick ? 512 : 2048;
    const auto a = at::randn({m, k}), b = at::randn({k, nn});
    // Transposing copies (what packing a box does) of 1 MiB and 16 MiB; the rate is their mean.
    const auto small = at::randn({512, 512}), big = at::randn({2048, quick ? 256 : 2048});
    const auto t = interleaved({[&] { (void)at::matmul(a, b); }, [&] { (void)small.t().contiguous(); },
                                [&] { (void)big.t().contiguous(); }},
                               iters);
    flops_per_second = 2.0 * static_cast<double>(m * k * nn) / t[0];
    copy_bytes_per_second = (static_cast<double>(small.numel()) * 4 / t[1] +
                             static_cast<double>(big.numel()) * 4 / t[2]) / 2;
    if (rank_ == 0)
      std::printf("{\"bench\":\"calibrate\",\"ranks\":%d,\"copy_1mib_bytes_per_second\":%.4g,"
                  "\"copy_16mib_bytes_per_second\":%.4g}\n",
                  world_, static_cast<double>(small.numel()) * 4 / t[1], static_cast<double>(big.numel()) * 4 / t[2]);
  }
  if (rank_ == 0)
    std::printf("{\"bench\":\"calibrate\",\"ranks\":%d,\"machine\":{\"bytes_per_second\":%.4g,"
                "\"seconds_per_collective\":%.4g,\"flops_per_second\":%.4g,\"copy_bytes_per_second\":%.4g},"
                "\"latency_one_element_s\":%.4g}\n",
                world_, 1 / slope, latency, flops_per_second, copy_bytes_per_second, points[0].seconds);

  // 2. Planner choices: every candidate of one contraction, forward + backward, measured.
  struct Choice {
    const char* notation;
    std::vector<std::int64_t> x, y;  // global shapes
    const char* note;
  };
  const std::int64_t s = quick ? 4 : 1;
  const std::vector<Choice> choices{
      {"a k/tp, k/tp b -> a/tp b", {2048 / s, 64}, {64, 2048 / s}, "short k: move the operands"},
      {"a k/tp, k/tp b -> a/tp b", {2048 / s, 2048 / s}, {2048 / s, 64}, "long k: reduce-scatter the result"},
      {"a k/tp, k/tp b -> a b", {1024 / s, 64}, {64, 1024 / s}, "short k, whole result"},
      {"a k/tp, k/tp b -> a b", {512 / s, 2048 / s}, {2048 / s, 32}, "long k, whole result: all-reduce"},
  };
  for (const auto& c : choices) {
    const auto compiled = es::detail::NotationCache::instance().get(c.notation, {});
    const auto e = compiled->view();
    auto local = [&](const std::vector<std::int64_t>& shape, int sharded) {
      auto full = at::randn(shape);
      const auto split = es::compute_split_shapes(shape[static_cast<std::size_t>(sharded)], world_);
      std::int64_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += split[static_cast<std::size_t>(r)];
      return full.narrow(sharded, offset, split[static_cast<std::size_t>(rank_)]).contiguous().requires_grad_();
    };
    at::manual_seed(3);
    const auto x = local(c.x, 1), y = local(c.y, 0);
    const std::vector<at::Tensor> xs{x, y};
    const auto agreement = es::exec::agree_operands(e, xs, mesh);
    const auto call = es::exec::prepare_contraction(e, agreement, 4, o);
    const auto& alternatives = call.stages.back().plan.alternatives;
    std::vector<es::exec::ContractionCall> calls;
    std::vector<std::function<void()>> runs;
    for (std::size_t i = 0; i < alternatives.size(); ++i)
      calls.push_back(es::exec::with_alternative(call, call.stages.size() - 1, i, e, o));
    for (const auto& k : calls)
      runs.emplace_back([&, k = &k] {
        for (const auto& t : xs) t.mutable_grad().reset();
        es::exec::run_contraction(*k, xs, agreement.scalar).sum().backward();
      });
    const auto t = interleaved(runs, iters);
    const auto fastest = static_cast<std::size_t>(std::min_element(t.begin(), t.end()) - t.begin());
    if (rank_ == 0) {
      for (std::size_t i = 0; i < alternatives.size(); ++i)
        std::printf("{\"bench\":\"planner_candidate\",\"ranks\":%d,\"notation\":\"%s\",\"x\":[%lld,%lld],"
                    "\"y\":[%lld,%lld],\"compute\":\"%s\",\"chosen\":%s,\"model_ms\":%.4f,\"measured_ms\":%.4f}\n",
                    world_, c.notation, static_cast<long long>(c.x[0]), static_cast<long long>(c.x[1]),
                    static_cast<long long>(c.y[0]), static_cast<long long>(c.y[1]),
                    alternatives[i].compute.str().c_str(), i == 0 ? "true" : "false",
                    1e3 * alternatives[i].score, 1e3 * t[i]);
      std::printf("{\"bench\":\"planner_choice\",\"ranks\":%d,\"notation\":\"%s\",\"case\":\"%s\",\"chosen\":\"%s\","
                  "\"fastest\":\"%s\",\"chosen_is_fastest\":%s,\"chosen_over_fastest\":%.3f,\"candidates\":%zu}\n",
                  world_, c.notation, c.note, alternatives[0].compute.str().c_str(),
                  alternatives[fastest].compute.str().c_str(), fastest == 0 ? "true" : "false", t[0] / t[fastest],
                  alternatives.size());
    }
  }
  MPI_Finalize();
  return 0;
}
