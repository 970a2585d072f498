// spectral_poisson: a periodic 2-D Poisson problem, -Δu = f on [0, 2π)², solved by FFT on a field
// split over the ranks, at any number of ranks.
//
//   mpirun -n 4 build/release/examples/spectral_poisson [N]
//
// Each rank holds a block of rows of f (`x/p`, split by the library's split rule, so shards may be
// uneven). A real FFT takes f to its half spectrum, left in the transposed layout (`kx ky/p`: one
// all-to-all, no gather); each rank divides its block of modes by |k|²; the inverse real FFT takes
// the transposed spectrum back to rows (one more all-to-all). The result is compared with the
// manufactured solution and with the same solve done on one process on the whole field; the
// program prints both errors and exits nonzero if either is too large.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <vector>

namespace es = einshard;

namespace {

/// The solution and its right-hand side on an N x N grid: u = sin(3x) cos(2y) + cos(x + y).
std::pair<at::Tensor, at::Tensor> manufactured(std::int64_t n) {
  const auto h = 2 * M_PI / static_cast<double>(n);
  const auto t = at::arange(n, at::kDouble) * h;
  const auto x = t.view({n, 1}), y = t.view({1, n});
  const auto u = at::sin(3 * x) * at::cos(2 * y) + at::cos(x + y);
  const auto f = 13 * at::sin(3 * x) * at::cos(2 * y) + 2 * at::cos(x + y);
  return {u, f};
}

/// 1/|k|² for the modes (kx, ky) at the given offsets and extents (0 for the mean, which a periodic
/// Poisson problem leaves free; the solution is the one with mean zero).
at::Tensor inverse_laplacian(std::int64_t n, std::int64_t kx0, std::int64_t nkx, std::int64_t ky0, std::int64_t nky) {
  const auto kx = at::fft_fftfreq(n, 1.0 / static_cast<double>(n), at::kDouble).narrow(0, kx0, nkx).view({nkx, 1});
  const auto ky = at::arange(ky0, ky0 + nky, at::kDouble).view({1, nky});  // half spectrum: 0 .. n/2
  auto k2 = kx * kx + ky * ky;
  auto inv = 1.0 / k2;
  return at::where(k2 == 0, at::zeros_like(inv), inv);
}

/// -Δu = f on this rank's rows of f; returns this rank's rows of u.
at::Tensor solve(const at::Tensor& f, std::int64_t n, const es::Mesh& mesh) {
  const es::Options forward{.mesh = mesh, .axes = {{"x", "kx"}, {"y", "ky"}}, .real = true};
  const auto spectrum = es::einfft<"x/p y -> kx ky/p">(f, forward);  // transposed: my block of ky
  const auto ky = es::compute_split_shapes(n / 2 + 1, mesh.size("p"));
  const auto c = static_cast<std::size_t>(mesh.coordinate("p"));
  const auto ky0 = std::accumulate(ky.begin(), ky.begin() + static_cast<std::ptrdiff_t>(c), std::int64_t{0});
  const auto scaled = spectrum * inverse_laplacian(n, 0, n, ky0, ky[c]);
  const es::Options inverse{.mesh = mesh, .axes = {{"kx", "x"}, {"ky", "y"}}, .inverse = true, .real = true,
                            .signal_sizes = {{"y", n}}};
  return es::einfft<"kx ky/p -> x/p y">(scaled, inverse);
}

/// The same solve on one process, with torch's FFTs on the whole field.
at::Tensor solve_whole(const at::Tensor& f, std::int64_t n) {
  const auto spectrum = at::fft_rfftn(f);
  return at::fft_irfftn(spectrum * inverse_laplacian(n, 0, n, 0, n / 2 + 1), at::IntArrayRef{n, n});
}

double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    at::set_num_threads(1);
    int P = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 54;
    es::Mesh mesh(MPI_COMM_WORLD, {P}, {"p"});

    const auto [u, f] = manufactured(n);
    const auto rows = es::compute_split_shapes(n, P);
    const auto r0 = std::accumulate(rows.begin(), rows.begin() + rank, std::int64_t{0});
    const auto mine = [&](const at::Tensor& t) { return t.narrow(0, r0, rows[static_cast<std::size_t>(rank)]); };

    const double t0 = MPI_Wtime();
    const auto u_mine = solve(mine(f).contiguous(), n, mesh);
    const double seconds = max_over_ranks(MPI_Wtime() - t0);
    const auto expected = u - u.mean();
    const double err_exact = max_over_ranks((u_mine - mine(expected)).abs().max().item<double>());
    const double err_one = max_over_ranks((u_mine - mine(solve_whole(f, n))).abs().max().item<double>());
    if (rank == 0) {
      std::printf("spectral Poisson, %lld x %lld grid on %d ranks (rows per rank:", static_cast<long long>(n),
                  static_cast<long long>(n), P);
      for (auto r : rows) std::printf(" %lld", static_cast<long long>(r));
      std::printf(")\n%s", es::last_plan().str().c_str());
      std::printf("max error against the exact solution: %.3e\n", err_exact);
      std::printf("max difference from the one-process solve: %.3e\n", err_one);
      std::printf("solve time: %.2f ms\n", seconds * 1e3);
    }
    if (!(err_exact < 1e-10 && err_one < 1e-12)) {
      if (rank == 0) std::printf("FAILED\n");
      status = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spectral_poisson: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
