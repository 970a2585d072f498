// tp_transformer: one training step of a tensor-parallel transformer block, written only in
// einshard notation, with every gradient checked against the same block run on one process.
//
//   mpirun -n 4 build/release/examples/tp_transformer
//
// The mesh is one dimension `tp`. Attention heads and the MLP's hidden features are sharded over
// it (Megatron layout): the Q/K/V and first MLP projections are column-parallel (their input is
// replicated, so its gradient is all-reduced in backward: einshard inserts that itself), the
// attention runs per head with no communication, and the output projections are row-parallel
// (their results are partial sums, all-reduced forward). Uneven head and feature counts are fine.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

namespace es = einshard;

namespace {

constexpr std::int64_t batch = 2, seq = 6, embed = 12, heads = 5, head_dim = 4, hidden = 18;

struct Weights {
  at::Tensor wq, wk, wv, wo, w1, w2;  // (h d e) x3, (e h d), (f e), (e f)
};

/// The block on one process, in plain torch.
at::Tensor reference_block(const at::Tensor& x, const Weights& w) {
  auto q = at::einsum("bse,hde->bshd", {x, w.wq});
  auto k = at::einsum("bse,hde->bshd", {x, w.wk});
  auto v = at::einsum("bse,hde->bshd", {x, w.wv});
  auto p = at::softmax(at::einsum("bshd,bthd->bhst", {q, k}) / std::sqrt(double(head_dim)), -1);
  auto a = at::einsum("bhst,bthd->bshd", {p, v});
  auto y = x + at::einsum("bshd,ehd->bse", {a, w.wo});
  auto hmid = at::gelu(at::einsum("bse,fe->bsf", {y, w.w1}));
  return y + at::einsum("bsf,ef->bse", {hmid, w.w2});
}

/// The same block, tensor-parallel: weights hold this rank's heads and hidden features.
at::Tensor parallel_block(const at::Tensor& x, const Weights& w, const es::Mesh& mesh) {
  const es::Options o{.mesh = mesh};
  auto q = es::einshard<"b s e, h/tp d e -> b s h/tp d">(x, w.wq, o);
  auto k = es::einshard<"b s e, h/tp d e -> b s h/tp d">(x, w.wk, o);
  auto v = es::einshard<"b s e, h/tp d e -> b s h/tp d">(x, w.wv, o);
  auto scores = es::einshard<"b s h/tp d, b t h/tp d -> b h/tp s t">(q, k, o);
  auto p = at::softmax(scores / std::sqrt(double(head_dim)), -1);
  auto a = es::einshard<"b h/tp s t, b t h/tp d -> b s h/tp d">(p, v, o);
  auto y = x + es::einshard<"b s h/tp d, e h/tp d -> b s e">(a, w.wo, o);
  auto hmid = at::gelu(es::einshard<"b s e, f/tp e -> b s f/tp">(y, w.w1, o));
  return y + es::einshard<"b s f/tp, e f/tp -> b s e">(hmid, w.w2, o);
}

/// This rank's part of a full tensor along `dim` (the library's split rule).
at::Tensor shard(const at::Tensor& full, std::int64_t dim, const es::Mesh& mesh) {
  const auto sizes = es::compute_split_shapes(full.size(dim), mesh.size("tp"));
  const auto c = static_cast<std::size_t>(mesh.coordinate("tp"));
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < c; ++i) offset += sizes[i];
  return full.narrow(dim, offset, sizes[c]).clone();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int status = 0;
  try {
    const es::Mesh mesh(MPI_COMM_WORLD, {world}, {"tp"});
    at::manual_seed(2026);  // every rank draws the same full tensors
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    const auto x = at::randn({batch, seq, embed}, opts);
    const Weights full{at::randn({heads, head_dim, embed}, opts) / 3, at::randn({heads, head_dim, embed}, opts) / 3,
                       at::randn({heads, head_dim, embed}, opts) / 3, at::randn({embed, heads, head_dim}, opts) / 4,
                       at::randn({hidden, embed}, opts) / 3, at::randn({embed, hidden}, opts) / 4};

    // One process: loss and gradients of everything.
    Weights ref{full.wq.clone().requires_grad_(), full.wk.clone().requires_grad_(),
                full.wv.clone().requires_grad_(), full.wo.clone().requires_grad_(),
                full.w1.clone().requires_grad_(), full.w2.clone().requires_grad_()};
    const auto xr = x.clone().requires_grad_();
    const auto ref_loss = reference_block(xr, ref).pow(2).mean();
    ref_loss.backward();

    // Tensor-parallel: each rank holds its heads (dim 0 of wq/wk/wv, dim 1 of wo) and hidden
    // features (dim 0 of w1, dim 1 of w2); x is replicated.
    Weights mine{shard(full.wq, 0, mesh).requires_grad_(), shard(full.wk, 0, mesh).requires_grad_(),
                 shard(full.wv, 0, mesh).requires_grad_(), shard(full.wo, 1, mesh).requires_grad_(),
                 shard(full.w1, 0, mesh).requires_grad_(), shard(full.w2, 1, mesh).requires_grad_()};
    const auto xp = x.clone().requires_grad_();
    const auto loss = parallel_block(xp, mine, mesh).pow(2).mean();
    loss.backward();

    double worst = (loss - ref_loss).abs().item<double>();
    auto compare = [&](const at::Tensor& got, const at::Tensor& want) {
      worst = std::max(worst, (got - want).abs().max().item<double>());
    };
    compare(xp.grad(), xr.grad());  // replicated input: the all-reduced gradient
    compare(mine.wq.grad(), shard(ref.wq.grad(), 0, mesh));
    compare(mine.wk.grad(), shard(ref.wk.grad(), 0, mesh));
    compare(mine.wv.grad(), shard(ref.wv.grad(), 0, mesh));
    compare(mine.wo.grad(), shard(ref.wo.grad(), 1, mesh));
    compare(mine.w1.grad(), shard(ref.w1.grad(), 0, mesh));
    compare(mine.w2.grad(), shard(ref.w2.grad(), 1, mesh));
    double all_worst = 0;
    MPI_Allreduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const bool ok = all_worst < 1e-10;
    if (rank == 0)
      std::printf("tp_transformer: %d ranks, loss %.12f (one process %.12f), max |difference| in "
                  "loss and all gradients %.2e: %s\n",
                  world, loss.item<double>(), ref_loss.item<double>(), all_worst,
                  ok ? "OK" : "MISMATCH");
    status = ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
