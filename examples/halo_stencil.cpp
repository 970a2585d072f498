// A halo stencil over a sharded 2-D field, checked against one process.
//
// 1. Jacobi smoothing of -Δu = f on a 2-D grid with u = 0 outside (a constant boundary): the field
//    is split over a 2-D mesh of ranks (rows and columns, uneven shards), each iteration fetches a
//    one-cell halo with es::einhalo (corners included, though this 5-point stencil needs none) and
//    updates the interior. After the iterations the gathered field must equal the same iterations
//    on the whole grid in one process.
// 2. One convolution layer on the same sharded field (es::einconv, 3x3 kernel, stride 1, periodic
//    boundary) and its backward: the output and the weight and bias gradients must equal
//    at::conv2d's on one process.
//
//   mpirun -n 4 halo_stencil          (any number of ranks; exits nonzero on a mismatch)

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdio>

#include <einshard/einshard.hpp>
#include <einshard/ops/conv.hpp>
#include <einshard/ops/halo.hpp>

namespace es = einshard;

namespace {

/// One Jacobi sweep of the 5-point Laplacian on a field with a one-cell ghost frame `g`.
at::Tensor jacobi(const at::Tensor& g, const at::Tensor& f, double h2) {
  using at::indexing::Slice;
  const auto up = g.index({Slice(0, -2), Slice(1, -1)}), down = g.index({Slice(2), Slice(1, -1)});
  const auto left = g.index({Slice(1, -1), Slice(0, -2)}), right = g.index({Slice(1, -1), Slice(2)});
  return 0.25 * (up + down + left + right + h2 * f);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  bool ok = true;
  {
    // A 2-D mesh when the world splits in two, else one row of ranks.
    const int px = P % 2 == 0 && P > 2 ? 2 : 1;
    es::Mesh mesh(MPI_COMM_WORLD, {px, P / px}, {"px", "py"});
    const std::int64_t H = 37, W = 29;  // uneven shards on most rank counts
    const double h2 = 1.0 / static_cast<double>((H + 1) * (W + 1));
    at::manual_seed(0);
    const auto F = at::randn({H, W}, at::kDouble);  // the same on every rank

    // Distributed: split, iterate on shards, gather.
    const es::Options split{.mesh = mesh};
    auto f = es::einshard<"h w -> h/px w/py">(F, split);
    auto u = at::zeros_like(f);
    const es::Options halo{.mesh = mesh, .boundary = es::Boundary::constant};
    for (int it = 0; it < 50; ++it) u = jacobi(es::einhalo<"h/px w/py">(u, {{"h", 1}, {"w", 1}}, halo), f, h2);
    const auto U = es::einshard<"h/px w/py -> h w">(u, split);

    // One process: the same sweeps on the whole grid.
    auto ref = at::zeros_like(F);
    for (int it = 0; it < 50; ++it) ref = jacobi(at::constant_pad_nd(ref, {1, 1, 1, 1}), F, h2);
    const double jacobi_error = (U - ref).abs().max().item<double>();
    ok = ok && jacobi_error < 1e-12;

    // A convolution layer on the sharded field (batch 1, 1 channel in, 4 out).
    at::manual_seed(1);
    auto weight = at::randn({4, 1, 3, 3}, at::kDouble).requires_grad_(true);
    auto bias = at::randn({4}, at::kDouble).requires_grad_(true);
    const auto x = es::einshard<"h w -> h/px w/py">(ref, split).unsqueeze(0).unsqueeze(-1);
    const auto y = es::einconv<"b h/px w/py c, o c kh kw -> b h/px w/py o">(
        x, weight, {{"h", "kh"}, {"w", "kw"}}, {.mesh = mesh, .boundary = es::Boundary::periodic, .bias = bias});
    (y * y).sum().backward();  // the loss is a sum over ranks; einconv all-reduces the weight gradients
    auto w_ref = weight.detach().clone().requires_grad_(true), b_ref = bias.detach().clone().requires_grad_(true);
    const auto padded = at::cat({ref.narrow(1, W - 1, 1), ref, ref.narrow(1, 0, 1)}, 1);
    const auto periodic = at::cat({padded.narrow(0, H - 1, 1), padded, padded.narrow(0, 0, 1)}, 0);
    const auto y_ref = at::conv2d(periodic.view({1, 1, H + 2, W + 2}), w_ref, b_ref);
    (y_ref * y_ref).sum().backward();
    const auto Y = es::einshard<"b h/px w/py o -> b h w o">(y.detach(), split);
    const double conv_error = (Y - y_ref.permute({0, 2, 3, 1})).abs().max().item<double>();
    const double grad_error = std::max((weight.grad() - w_ref.grad()).abs().max().item<double>(),
                                       (bias.grad() - b_ref.grad()).abs().max().item<double>());
    ok = ok && conv_error < 1e-10 && grad_error < 1e-9;
    if (rank == 0)
      std::printf("halo_stencil on %d ranks (mesh %d x %d), grid %lld x %lld: jacobi max error %.3g, "
                  "conv max error %.3g, weight/bias gradient max error %.3g: %s\n",
                  P, px, P / px, static_cast<long long>(H), static_cast<long long>(W), jacobi_error, conv_error,
                  grad_error, ok ? "OK" : "MISMATCH");
  }
  int mine = ok ? 0 : 1, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
