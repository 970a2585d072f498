// vorticity2d: 2-D incompressible Navier-Stokes in vorticity form on the periodic square [0, 2π)²,
// pseudo-spectral with es::einfft on a grid split over the ranks, at any number of ranks.
//
//   mpirun -n 4 build/release/examples/vorticity2d [--n 64] [--steps 200] [--png vorticity.png]
//
//   ∂ω/∂t + u·∇ω = ν Δω,   u = (∂ψ/∂y, -∂ψ/∂x),   -Δψ = ω
//
// Each rank holds a block of rows of ω in physical space (`x/p y`) and a block of the half
// spectrum (`kx ky/p`, the transposed layout a distributed real FFT leaves: one all-to-all each way,
// no gather). Per right-hand side: ψ, u, v, ∂ω/∂x and ∂ω/∂y in spectral space, the four fields back
// to physical space in one batched inverse transform (`c kx ky/p -> c x/p y`), the product u·∇ω
// there, one forward transform, the 2/3 rule against aliasing. Time stepping is classical RK4.
//
// Checks (the program exits nonzero if either fails):
//  1. Taylor-Green: ω = 2 cos x cos y is an exact solution whose advection vanishes, decaying as
//     exp(-2νt); the computed field must follow it.
//  2. The Taylor-Green field plus a perturbation (so the advection is not zero) is run on the ranks
//     and, on each rank, on one process with torch's FFTs on the whole field; they must agree.
// It prints the progress and writes a PNG of the perturbed run's final vorticity (rank 0).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include "png.hpp"

namespace es = einshard;

namespace {

constexpr double nu = 0.05;

/// Wavenumbers of a block of the half spectrum: all kx, ky in [ky0, ky0 + nky).
struct Modes {
  at::Tensor ikx, iky;     ///< i kx (n, 1) and i ky (1, nky), complex
  at::Tensor k2, inv_k2;   ///< |k|² and 1/|k|² (0 for the mean)
  at::Tensor dealias;      ///< the 2/3 rule's mask
};

Modes modes(std::int64_t n, std::int64_t ky0, std::int64_t nky) {
  const auto kx = at::fft_fftfreq(n, 1.0 / static_cast<double>(n), at::kDouble).view({n, 1});
  const auto ky = at::arange(ky0, ky0 + nky, at::kDouble).view({1, nky});
  Modes m;
  m.ikx = at::complex(at::zeros_like(kx), kx);
  m.iky = at::complex(at::zeros_like(ky), ky);
  m.k2 = kx * kx + ky * ky;
  m.inv_k2 = at::where(m.k2 == 0, at::zeros_like(m.k2), 1.0 / m.k2);
  const double cut = static_cast<double>(n) / 3.0;
  m.dealias = ((kx.abs() < cut) & (ky.abs() < cut)).to(at::kDouble);
  return m;
}

/// dω̂/dt. `to_physical` takes (c, kx, ky-block) spectra to (c, x-block, y) fields, `to_spectral` a
/// (x-block, y) field to its (kx, ky-block) spectrum: distributed or on one process, the same code.
template <class ToPhysical, class ToSpectral>
at::Tensor rhs(const at::Tensor& w, const Modes& m, ToPhysical to_physical, ToSpectral to_spectral) {
  const auto psi = w * m.inv_k2;
  const auto fields = at::stack({m.iky * psi, -m.ikx * psi, m.ikx * w, m.iky * w});  // u, v, ωx, ωy
  const auto f = to_physical(fields);
  const auto advection = f[0] * f[2] + f[1] * f[3];
  return -to_spectral(advection.contiguous()) * m.dealias - nu * m.k2 * w;
}

template <class F>
at::Tensor rk4(const at::Tensor& w, double dt, F f) {
  const auto k1 = f(w);
  const auto k2 = f(w + 0.5 * dt * k1);
  const auto k3 = f(w + 0.5 * dt * k2);
  const auto k4 = f(w + dt * k3);
  return w + (dt / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4);
}

double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

std::int64_t offset(const std::vector<std::int64_t>& sizes, int rank) {
  return std::accumulate(sizes.begin(), sizes.begin() + rank, std::int64_t{0});
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    at::set_num_threads(1);
    at::NoGradGuard no_grad;
    int P = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::int64_t n = 48, steps = 100;
    std::string png = "vorticity.png";
    for (int i = 1; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--n")) n = std::atoll(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--png")) png = argv[i + 1];
      else throw std::invalid_argument(std::string("unknown option ") + argv[i]);
    }
    const double dt = 0.01, t_end = dt * static_cast<double>(steps);
    const es::Mesh mesh(MPI_COMM_WORLD, {P}, {"p"});

    // This rank's rows of the grid and block of the half spectrum (the split rule: may be uneven).
    const auto rows = es::compute_split_shapes(n, P), kys = es::compute_split_shapes(n / 2 + 1, P);
    const auto r0 = offset(rows, rank), nr = rows[static_cast<std::size_t>(rank)];
    const auto ky0 = offset(kys, rank), nky = kys[static_cast<std::size_t>(rank)];
    const auto h = 2 * M_PI / static_cast<double>(n);
    const auto x = (at::arange(r0, r0 + nr, at::kDouble) * h).view({nr, 1});
    const auto y = (at::arange(n, at::kDouble) * h).view({1, n});

    const es::Options forward{.mesh = mesh, .axes = {{"x", "kx"}, {"y", "ky"}}, .real = true};
    const es::Options inverse{.mesh = mesh, .axes = {{"kx", "x"}, {"ky", "y"}}, .inverse = true, .real = true,
                              .signal_sizes = {{"y", n}}};
    auto to_spectral = [&](const at::Tensor& f) { return es::einfft<"x/p y -> kx ky/p">(f, forward); };
    auto to_physical = [&](const at::Tensor& c) { return es::einfft<"c kx ky/p -> c x/p y">(c, inverse); };
    const auto mine = modes(n, ky0, nky);
    auto step = [&](const at::Tensor& w) {
      return rk4(w, dt, [&](const at::Tensor& v) { return rhs(v, mine, to_physical, to_spectral); });
    };
    auto physical = [&](const at::Tensor& w) { return es::einfft<"kx ky/p -> x/p y">(w, inverse); };

    // 1. Taylor-Green decay.
    const auto tg = 2 * at::cos(x) * at::cos(y);
    auto w = to_spectral(tg.contiguous());
    const double t0 = MPI_Wtime();
    for (std::int64_t s = 1; s <= steps; ++s) {
      w = step(w);
      if (s % std::max<std::int64_t>(steps / 4, 1) == 0 || s == steps) {
        const double t = dt * static_cast<double>(s);
        const double err = max_over_ranks((physical(w) - tg * std::exp(-2 * nu * t)).abs().max().item<double>());
        if (rank == 0) std::printf("Taylor-Green  step %4lld  t = %.3f  max|ω - exact| = %.3e\n", static_cast<long long>(s), t, err);
      }
    }
    const double seconds = max_over_ranks(MPI_Wtime() - t0);
    const double tg_err = max_over_ranks((physical(w) - tg * std::exp(-2 * nu * t_end)).abs().max().item<double>());

    // 2. A perturbed field, distributed and on one process.
    auto perturbed = [&](const at::Tensor& xs) {
      return 2 * at::cos(xs) * at::cos(y) + 0.5 * at::sin(3 * xs + 0.3) * at::cos(2 * y - 0.7) + 0.3 * at::cos(xs - 2 * y);
    };
    auto wp = to_spectral(perturbed(x).contiguous());
    const auto xs_all = (at::arange(n, at::kDouble) * h).view({n, 1});
    auto w1 = at::fft_rfftn(perturbed(xs_all), c10::nullopt, at::IntArrayRef{-2, -1});
    const auto whole = modes(n, 0, n / 2 + 1);
    auto one_physical = [&](const at::Tensor& c) {
      return at::fft_irfftn(c, at::IntArrayRef{n, n}, at::IntArrayRef{-2, -1});
    };
    auto one_spectral = [&](const at::Tensor& f) { return at::fft_rfftn(f, c10::nullopt, at::IntArrayRef{-2, -1}); };
    for (std::int64_t s = 1; s <= steps; ++s) {
      wp = step(wp);
      w1 = rk4(w1, dt, [&](const at::Tensor& v) { return rhs(v, whole, one_physical, one_spectral); });
    }
    const auto wp_phys = physical(wp);
    const auto w1_phys = one_physical(w1.unsqueeze(0))[0];
    const double diff = max_over_ranks((wp_phys - w1_phys.narrow(0, r0, nr)).abs().max().item<double>());
    const double scale = w1_phys.abs().max().item<double>();

    // The picture: the perturbed field gathered on every rank (a collective), drawn by rank 0.
    const auto full = es::einshard<"x/p y -> x y">(wp_phys.contiguous(), {.mesh = mesh});
    if (rank == 0) {
      const int zoom = std::max<int>(1, static_cast<int>(384 / n));
      const int side = static_cast<int>(n) * zoom;
      std::vector<std::uint8_t> rgb(static_cast<std::size_t>(side) * side * 3);
      const auto a = full.accessor<double, 2>();
      for (int py = 0; py < side; ++py)
        for (int px = 0; px < side; ++px) {
          // x to the right, y up.
          const auto c = einshard_examples::diverging(a[px / zoom][(side - 1 - py) / zoom] / scale);
          std::memcpy(&rgb[(static_cast<std::size_t>(py) * side + px) * 3], c.data(), 3);
        }
      einshard_examples::write_png(png, side, side, rgb);
      std::printf("vorticity, %lld x %lld grid on %d ranks, %lld RK4 steps of %.3g (ν = %.3g)\n",
                  static_cast<long long>(n), static_cast<long long>(n), P, static_cast<long long>(steps), dt, nu);
      std::printf("Taylor-Green: max error against exp(-2νt) decay: %.3e (%.2f ms per step)\n", tg_err,
                  seconds * 1e3 / static_cast<double>(steps));
      std::printf("perturbed: max difference from the one-process run: %.3e (field max %.3f)\n", diff, scale);
      std::printf("wrote %s (%d x %d)\n", png.c_str(), side, side);
    }
    if (!(tg_err < 1e-8 && diff < 1e-10 * std::max(scale, 1.0))) {
      if (rank == 0) std::printf("FAILED\n");
      status = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vorticity2d: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
