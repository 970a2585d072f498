// Tensor-parallel MLP, forward and backward: einshard notation against the same step written by
// hand with torch ops and raw MPI collectives; plus the per-call overhead of a distributed einshard
// whose plan is cached. JSON lines on rank 0; both sides interleaved in one run, so ratios hold on a
// noisy machine.
//
//   mpirun -n 2 build/release/bench/contraction/einshard_bench_contraction [--quick]
//       [--widths 256,512,1024,2048] [--iters 15]
//
// --widths: model widths e (the hidden layer is 4e, split over the ranks); tokens 4x64.
// Both steps keep their weights across calls, as a training loop does (einshard's leaves have their
// gradients cleared before each step, the hand-written step allocates its gradients fresh).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "../common.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace es = einshard;
using einshard_bench::median;
using einshard_bench::timed;

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

std::vector<std::int64_t> parse_list(const char* s) {
  std::vector<std::int64_t> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    v.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

void all_reduce_in_place(at::Tensor& t) {
  MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  bool quick = false;
  std::vector<std::int64_t> widths{256, 512, 1024, 2048};
  int iters = 15;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--widths") == 0 && i + 1 < argc) widths = parse_list(argv[++i]);
    else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
  }
  if (quick) widths = {256}, iters = 3;
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const es::Mesh mesh(MPI_COMM_WORLD, {world}, {"tp"});
  const es::Options o{.mesh = mesh};
  const std::int64_t batch = 4, seq = quick ? 8 : 64;

  for (const auto embed : widths) {
    const auto hidden = 4 * embed / world;  // this rank's share of the 4x hidden layer
    at::manual_seed(1);  // the input is replicated: the same on every rank
    const auto x = at::randn({batch, seq, embed});
    at::manual_seed(rank + 2);  // each rank's own slice of the weights
    const auto w1 = at::randn({hidden, embed}) / 32, w2 = at::randn({embed, hidden}) / 32;

    const auto xp = x.clone().requires_grad_(), a = w1.clone().requires_grad_(), b = w2.clone().requires_grad_();
    auto einshard_step = [&] {
      for (const auto* t : {&xp, &a, &b}) t->mutable_grad().reset();
      auto h = at::gelu(es::einshard<"b s e, f/tp e -> b s f/tp">(xp, a, o));
      auto z = es::einshard<"b s f/tp, e f/tp -> b s e">(h, b, o);
      z.sum().backward();
      return xp.grad();
    };
    // The same step by hand: column-parallel then row-parallel, the all-reduces written out, the
    // backward derived by hand (no autograd).
    auto manual_step = [&] {
      const auto y = at::matmul(x, w1.t());
      const auto h = at::gelu(y);
      auto z = at::matmul(h, w2.t());
      all_reduce_in_place(z);  // row-parallel output
      const auto dz = at::ones_like(z);
      const auto dh = at::matmul(dz, w2);
      const auto dw2 = at::matmul(dz.reshape({-1, embed}).t(), h.reshape({-1, hidden}));
      const auto dy = at::gelu_backward(dh, y);
      const auto dw1 = at::matmul(dy.reshape({-1, hidden}).t(), x.reshape({-1, embed}));
      auto dx = at::matmul(dy, w1);
      all_reduce_in_place(dx);  // the replicated input's gradient (Megatron's f)
      (void)dw1;
      (void)dw2;
      return dx;
    };
    const auto check = (einshard_step() - manual_step()).abs().max().item<float>();
    if (check > 1e-3f) {
      if (rank == 0) std::fprintf(stderr, "tp_mlp: einshard and the hand-written step disagree (%g)\n", check);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::vector<double> te, tm, ratios;
    for (int i = 0; i < iters; ++i) {  // interleaved, the order alternating
      if (i % 2 == 0) te.push_back(timed(einshard_step)), tm.push_back(timed(manual_step));
      else tm.push_back(timed(manual_step)), te.push_back(timed(einshard_step));
      ratios.push_back(te.back() / tm.back());
    }
    if (rank == 0)
      std::printf("{\"bench\":\"tp_mlp\",\"ranks\":%d,\"embed\":%lld,\"hidden_per_rank\":%lld,\"tokens\":%lld,"
                  "\"einshard_ms\":%.3f,\"manual_ms\":%.3f,\"ratio\":%.3f,\"paired_ratio\":%.3f,"
                  "\"paired_ratio_p10\":%.3f,\"paired_ratio_p90\":%.3f,\"iters\":%d}\n",
                  world, static_cast<long long>(embed), static_cast<long long>(hidden),
                  static_cast<long long>(batch * seq), 1e3 * median(te), 1e3 * median(tm),
                  median(te) / median(tm), median(ratios), quantile(ratios, 0.1), quantile(ratios, 0.9),
                  iters);
  }

  // Per-call overhead with a cached plan: a tiny row-parallel contraction (einsum + all-reduce)
  // through einshard, against the same einsum + MPI_Allreduce by hand; and a tiny column-parallel
  // one (no data moves: no rendezvous at all) against the bare einsum. Interleaved, the order
  // alternating, medians of many rounds.
  {
    const auto a = at::randn({4, 8}), b = at::randn({8, 4}), c = at::randn({4, 8});
    const int n = quick ? 50 : 2000, rounds = quick ? 3 : 21;
    auto via_einshard = [&] {
      for (int i = 0; i < n; ++i) (void)es::einshard<"a k/tp, k/tp b -> a b">(a, b, o);
    };
    auto by_hand = [&] {
      for (int i = 0; i < n; ++i) {
        auto z = at::matmul(a, b);
        all_reduce_in_place(z);
      }
    };
    auto column_einshard = [&] {
      for (int i = 0; i < n; ++i) (void)es::einshard<"a k, h/tp k -> a h/tp">(a, c, o);
    };
    auto column_by_hand = [&] {
      for (int i = 0; i < n; ++i) (void)at::matmul(a, c.t());
    };
    via_einshard();  // plans cached
    column_einshard();
    std::vector<double> te, tm, ce, cm;
    for (int r = 0; r < rounds; ++r) {
      if (r % 2 == 0) {
        te.push_back(timed(via_einshard) / n), tm.push_back(timed(by_hand) / n);
        ce.push_back(timed(column_einshard) / n), cm.push_back(timed(column_by_hand) / n);
      } else {
        tm.push_back(timed(by_hand) / n), te.push_back(timed(via_einshard) / n);
        cm.push_back(timed(column_by_hand) / n), ce.push_back(timed(column_einshard) / n);
      }
    }
    if (rank == 0) {
      std::printf("{\"bench\":\"call_overhead\",\"ranks\":%d,\"einshard_us\":%.2f,\"manual_us\":%.2f,"
                  "\"overhead_us\":%.2f,\"rounds\":%d}\n",
                  world, 1e6 * median(te), 1e6 * median(tm), 1e6 * (median(te) - median(tm)), rounds);
      std::printf("{\"bench\":\"call_overhead_column\",\"ranks\":%d,\"einshard_us\":%.2f,\"manual_us\":%.2f,"
                  "\"overhead_us\":%.2f,\"rounds\":%d}\n",
                  world, 1e6 * median(ce), 1e6 * median(cm), 1e6 * (median(ce) - median(cm)), rounds);
    }
  }
  MPI_Finalize();
  return 0;
}
