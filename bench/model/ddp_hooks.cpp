// A data-parallel training step: einshard's gradient hooks (all-reduces started from autograd
// hooks during backward, one per bucket) against the anchor, the same step with one hand-written
// MPI_Allreduce per bucket after backward (the same buckets, flat buffers kept across steps).
//
//   mpirun -n 2 einshard_bench_ddp_hooks [--layers 8] [--width 512] [--batch 64] [--bucket-mib 1]
//                                          [--iters 20]
//
// The model is `layers` square linear layers with biases and ReLU (float32, `width`^2 weights),
// replicated over the mesh `dp` (all ranks); each rank runs its own batch. A step is: forget the
// gradients, forward, backward of the sum of squares, reduce (hooks: wait(); anchor: pack, all-reduce,
// unpack per bucket). The variants alternate round by round; a step's time is the slowest rank's.
// Before timing, both variants' gradients are compared (they must be equal).
//
// Output, one JSON line on rank 0:
//   {"bench":"ddp_hooks","ranks":P,"layers":L,"width":N,"batch":B,"bucket_mib":M,"buckets":K,
//    "hooks_ms":median,"anchor_ms":median,"ratio":hooks_ms/anchor_ms,"ratio_paired":median of per-round ratios}

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/nn/module.h>

#include <einshard/einshard.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "../common.hpp"

namespace es = einshard;

namespace {

struct Mlp : torch::nn::Module {
  std::vector<at::Tensor> w, b;
  Mlp(int layers, std::int64_t width) {
    at::manual_seed(3);
    for (int i = 0; i < layers; ++i) {
      const auto n = std::to_string(i);  // (a "w" + string temporary trips GCC 12's -Wrestrict)
      w.push_back(register_parameter(std::string("w").append(n), at::randn({width, width}) / std::sqrt(double(width))));
      b.push_back(register_parameter(std::string("b").append(n), at::zeros({width})));
    }
  }
  at::Tensor loss(const at::Tensor& x) const {
    auto h = x;
    for (std::size_t i = 0; i < w.size(); ++i) h = at::relu(at::addmm(b[i], h, w[i].t()));
    return (h * h).sum();
  }
};

/// The anchor's buckets: the same grouping as the hooks (reverse parameter order, up to
/// `bucket_bytes` each), flat buffers allocated once.
struct HandBuckets {
  std::vector<std::vector<at::Tensor>> params;
  std::vector<at::Tensor> flat;
  HandBuckets(Mlp& m, std::int64_t bucket_bytes) {
    auto ps = m.parameters();
    std::vector<at::Tensor> cur;
    std::int64_t bytes = 0;
    for (auto it = ps.rbegin(); it != ps.rend(); ++it) {
      const auto nb = it->numel() * 4;
      if (!cur.empty() && bytes + nb > bucket_bytes) params.push_back(std::move(cur)), cur.clear(), bytes = 0;
      cur.push_back(*it);
      bytes += nb;
    }
    if (!cur.empty()) params.push_back(std::move(cur));
    for (const auto& b : params) {
      std::int64_t n = 0;
      for (const auto& p : b) n += p.numel();
      flat.push_back(at::empty({n}));
    }
  }
  void reduce(MPI_Comm comm) {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::int64_t off = 0;
      for (const auto& p : params[i]) {
        flat[i].narrow(0, off, p.numel()).view(p.sizes()).copy_(p.grad());
        off += p.numel();
      }
      MPI_Allreduce(MPI_IN_PLACE, flat[i].data_ptr(), static_cast<int>(flat[i].numel()), MPI_FLOAT, MPI_SUM, comm);
      off = 0;
      for (const auto& p : params[i]) {
        p.grad().copy_(flat[i].narrow(0, off, p.numel()).view(p.sizes()));
        off += p.numel();
      }
    }
  }
};

void forget_grads(Mlp& m) {
  for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
}

int run(int argc, char** argv) {
  int layers = 8, iters = 20;
  std::int64_t width = 512, batch = 64;
  double bucket_mib = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--layers") layers = std::atoi(v);
    else if (a == "--width") width = std::atoll(v);
    else if (a == "--batch") batch = std::atoll(v);
    else if (a == "--bucket-mib") bucket_mib = std::atof(v);
    else if (a == "--iters") iters = std::atoi(v);
    else throw es::Error("ddp_hooks: unknown option " + a);
  }
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  es::Mesh mesh(MPI_COMM_WORLD, {P}, {"dp"});
  const auto bucket_bytes = static_cast<std::int64_t>(bucket_mib * (1 << 20));

  Mlp hooked(layers, width), hand(layers, width);
  for (auto& p : hooked.parameters()) es::register_parameter_layout(p, p.dim() == 2 ? "o i" : "o", {.mesh = mesh, .grad = "dp"});
  auto hooks = es::register_grad_reduction_hooks(hooked, mesh, {.bucket_bytes = bucket_bytes});
  HandBuckets buckets(hand, bucket_bytes);
  at::manual_seed(100 + rank);
  const auto x = at::randn({batch, width});

  auto step_hooks = [&] {
    forget_grads(hooked);
    hooked.loss(x).backward();
    hooks.wait();
  };
  auto step_hand = [&] {
    forget_grads(hand);
    hand.loss(x).backward();
    buckets.reduce(mesh.comm("dp"));
  };
  step_hooks();
  step_hand();
  const auto hp = hooked.parameters(), ap = hand.parameters();
  for (std::size_t i = 0; i < hp.size(); ++i)
    if (!at::allclose(hp[i].grad(), ap[i].grad(), 1e-5, 1e-5))
      throw es::Error("ddp_hooks: the variants' gradients differ at parameter " + std::to_string(i));

  std::vector<double> th, ta, ratio;
  for (int it = 0; it < iters; ++it) {
    double a = 0, h = 0;
    if (it % 2 == 0) {
      h = einshard_bench::timed_ms(step_hooks);
      a = einshard_bench::timed_ms(step_hand);
    } else {
      a = einshard_bench::timed_ms(step_hand);
      h = einshard_bench::timed_ms(step_hooks);
    }
    th.push_back(h), ta.push_back(a), ratio.push_back(h / a);
  }
  const double mh = einshard_bench::median(th), ma = einshard_bench::median(ta);
  if (rank == 0)
    std::printf("{\"bench\":\"ddp_hooks\",\"ranks\":%d,\"layers\":%d,\"width\":%lld,\"batch\":%lld,"
                "\"bucket_mib\":%g,\"buckets\":%zu,\"hooks_ms\":%.3f,\"anchor_ms\":%.3f,\"ratio\":%.3f,"
                "\"ratio_paired\":%.3f}\n",
                P, layers, static_cast<long long>(width), static_cast<long long>(batch), bucket_mib,
                hooks.bucket_count(), mh, ma, mh / ma, einshard_bench::median(ratio));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_hooks: %s\n", e.what());
  }
  MPI_Finalize();
  return code;
}
