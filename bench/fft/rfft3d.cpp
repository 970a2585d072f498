// Distributed 3-D real FFTs (float64 <-> complex128): einfft's r2c and c2r against FFTW-MPI's, and
// against einfft's own complex transform of the same real data, side by side in one run.
//
// The slab layout of fft3d.cpp: x split over the ranks in FFTW's blocks, y and z whole; z is the half
// axis (n/2+1 bins). Two layouts each way:
//   standard    r2c "x/p y z -> kx/p ky kz", c2r "kx/p ky kz -> x/p y z" (FFTW's default plans)
//   transposed  r2c "x/p y z -> ky/p kx kz" (FFTW_MPI_TRANSPOSED_OUT), c2r "ky/p kx kz -> x/p y z"
//               (FFTW_MPI_TRANSPOSED_IN): ky first, FFTW's memory order
// FFTW plans with FFTW_MEASURE, out of place (its real array padded to 2(n/2+1) along z, as FFTW-MPI
// requires; c2r destroys its input, so the input is restored before each run, untimed). einfft runs
// as einfft (a new tensor per call). The complex reference is einfft of the same data as complex128
// (the conversion untimed) in the same layout. Every timed operation starts after an MPI_Barrier and
// its time is the maximum over the ranks; variants are interleaved round by round; medians reported.
// Before timing, einfft's output is compared with FFTW's (relative max error).
//
//   mpirun -n P einshard_bench_rfft [--n 128|256|N] [--iters R]
//
// Output: one JSON line per (direction, layout) on rank 0:
//   {"bench":"rfft3d","n":N,"ranks":P,"direction":"r2c"|"c2r","layout":...,"einshard_ms":...,
//    "fftw_ms":...,"complex_ms" (einfft's complex transform of the same data),"ratio" (einshard/FFTW),
//    "ratio_paired","ratio_complex" (einshard real/complex),"ratio_complex_paired","max_rel_err":...}
// Environment: EINSHARD_NUM_THREADS (intra-op threads per rank, default 1; FFTW runs one thread).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <fftw3-mpi.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <einshard/einshard.hpp>
#include <einshard/exec/local_fft.hpp>  // has_fftw()

#include "../common.hpp"
#include "fft_support.hpp"

namespace es = einshard;
using einshard_bench::all_sizes;
using einshard_bench::max_rel_err;
using einshard_bench::median;
using einshard_bench::timed_ms;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  fftw_mpi_init();
  {
    std::int64_t n = 128;
    int iters = 0;
    einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& value) {
      if (a == "--n") n = std::stoll(value());
      else if (a == "--iters") iters = std::stoi(value());
      else return false;
      return true;
    });
    if (iters <= 0) iters = n >= 256 ? 5 : 9;
    at::set_num_threads(einshard_bench::threads_from_env());
    c10::InferenceMode inference;
    int P = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    es::Mesh mesh(MPI_COMM_WORLD, {P}, {"p"});

    const std::int64_t h = n / 2 + 1;  // bins of the half axis
    ptrdiff_t n0 = 0, s0 = 0, n1 = 0, s1 = 0;
    const auto alloc = fftw_mpi_local_size_3d_transposed(n, n, h, MPI_COMM_WORLD, &n0, &s0, &n1, &s1);
    auto* real = fftw_alloc_real(2 * static_cast<std::size_t>(alloc));
    auto* spectrum = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    // Padded real rows: x (n0, n, n) sits in (n0, n, 2h).
    const auto padded = at::from_blob(real, {n0, n, 2 * h}, at::kDouble).narrow(2, 0, n);
    const auto rows = all_sizes(n0), cols = all_sizes(n1);
    const es::Shapes shapes{{"p", {{"x", rows}, {"kx", rows}, {"ky", cols}}}};

    at::manual_seed(static_cast<std::uint64_t>(4321 + rank));
    const auto x = at::randn({n0, n, n}, at::kDouble);
    const auto xc = x.to(at::kComplexDouble);

    struct Case {
      const char* direction;
      const char* layout;
      const char* notation;
      unsigned flags;
      bool inverse;
    };
    for (const Case& c : {Case{"r2c", "standard", "x/p y z -> kx/p ky kz", 0u, false},
                          Case{"r2c", "transposed", "x/p y z -> ky/p kx kz", unsigned{FFTW_MPI_TRANSPOSED_OUT}, false},
                          Case{"c2r", "standard", "kx/p ky kz -> x/p y z", 0u, true},
                          Case{"c2r", "transposed", "ky/p kx kz -> x/p y z", unsigned{FFTW_MPI_TRANSPOSED_IN}, true}}) {
      const bool transposed = c.flags != 0;
      const es::AxisMap axes = c.inverse ? es::AxisMap{{"kx", "x"}, {"ky", "y"}, {"kz", "z"}}
                                         : es::AxisMap{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
      const es::Options real_o{.mesh = mesh, .shapes = shapes, .axes = axes, .inverse = c.inverse, .real = true};
      const es::Options complex_o{.mesh = mesh, .shapes = shapes, .axes = axes, .inverse = c.inverse};
      fftw_plan plan = c.inverse ? fftw_mpi_plan_dft_c2r_3d(n, n, n, spectrum, real, MPI_COMM_WORLD, FFTW_MEASURE | c.flags)
                                 : fftw_mpi_plan_dft_r2c_3d(n, n, n, real, spectrum, MPI_COMM_WORLD, FFTW_MEASURE | c.flags);
      // FFTW's spectrum: (n0, n, h) standard, (n1, n, h) transposed (ky first), as einfft's.
      const auto fftw_spectrum =
          at::from_blob(spectrum, {transposed ? n1 : n0, n, h}, at::kComplexDouble);
      // The c2r input: the r2c of x in the case's layout (einfft's, checked against FFTW's below); the
      // complex reference's: the full spectrum of x, by the complex transform.
      const auto forward = transposed ? "x/p y z -> ky/p kx kz" : "x/p y z -> kx/p ky kz";
      const es::AxisMap xyz{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
      const auto input = c.inverse ? es::einfft(forward, {x}, {.mesh = mesh, .shapes = shapes, .axes = xyz, .real = true}) : x;
      const auto complex_in = c.inverse ? es::einfft(forward, {xc}, {.mesh = mesh, .shapes = shapes, .axes = xyz}) : xc;
      const auto& k = input;
      const auto fill = [&] {
        if (c.inverse) {
          fftw_spectrum.copy_(k);
        } else {
          padded.copy_(x);
        }
      };
      // Correctness first.
      fill();
      fftw_execute(plan);
      auto ours = es::einfft(c.notation, {input}, real_o);
      // FFTW's c2r is unnormalized; einfft's inverse divides by n³ (torch's "backward" norm).
      const double err = c.inverse ? max_rel_err(ours * static_cast<double>(n * n * n), padded)
                                   : max_rel_err(ours, fftw_spectrum);
      std::vector<double> t_es, t_fftw, t_complex;
      for (int r = 0; r < iters + 1; ++r) {
        const bool warm = r == 0;
        auto keep = [&](std::vector<double>& v, double t) {
          if (!warm) v.push_back(t);
        };
        keep(t_es, timed_ms([&] { ours = es::einfft(c.notation, {input}, real_o); }));
        fill();
        keep(t_fftw, timed_ms([&] { fftw_execute(plan); }));
        keep(t_complex, timed_ms([&] { (void)es::einfft(c.notation, {complex_in}, complex_o); }));
      }
      std::vector<double> paired, paired_complex;
      for (std::size_t i = 0; i < t_es.size(); ++i) {
        paired.push_back(t_es[i] / t_fftw[i]);
        paired_complex.push_back(t_es[i] / t_complex[i]);
      }
      const double es_ms = median(t_es), fftw_ms = median(t_fftw), complex_ms = median(t_complex);
      if (rank == 0)
        std::printf(
            "{\"bench\":\"rfft3d\",\"n\":%lld,\"ranks\":%d,\"direction\":\"%s\",\"layout\":\"%s\","
            "\"einshard_ms\":%.3f,\"fftw_ms\":%.3f,\"complex_ms\":%.3f,\"ratio\":%.3f,\"ratio_paired\":%.3f,"
            "\"ratio_complex\":%.3f,\"ratio_complex_paired\":%.3f,\"local_fft\":\"%s\",\"iters\":%d,"
            "\"max_rel_err\":%.2e}\n",
            static_cast<long long>(n), P, c.direction, c.layout, es_ms, fftw_ms, complex_ms, es_ms / fftw_ms,
            median(paired), es_ms / complex_ms, median(paired_complex), es::exec::has_fftw() ? "fftw" : "torch",
            iters, err);
      std::fflush(stdout);
      fftw_destroy_plan(plan);
    }
    fftw_free(real);
    fftw_free(spectrum);
  }
  fftw_mpi_cleanup();
  MPI_Finalize();
  return 0;
}
