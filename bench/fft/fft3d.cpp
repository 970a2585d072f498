// Distributed 3-D complex FFT (complex128): einfft against FFTW-MPI, side by side in one run.
//
// Both use the same slab layout: x split over the ranks in FFTW's blocks (fftw_mpi_local_size_3d_
// transposed; einfft gets them as shapes metadata), y and z whole. Two output layouts:
//   standard    kx split as x was (FFTW's default plan; einfft "x/p y z -> kx/p ky kz": 2 transposes)
//   transposed  ky split (FFTW_MPI_TRANSPOSED_OUT; einfft "x/p y z -> kx ky/p kz": 1 transpose)
//   ky_first    the same, in FFTW's memory order (einfft "x/p y z -> ky/p kx kz": 1 transpose, and the
//               last FFT writes ky first, as FFTW does)
// FFTW plans with FFTW_MEASURE, out of place and in place (FFTW-MPI's in-place plans are its fastest
// at one rank, and the anchor of the headline ratio). einfft runs as einfft (a new tensor per call)
// and as einfft_out: in place where the output block has the input's shape (the standard layout, and
// every layout at one rank), else into a kept output tensor. Every timed operation starts after an MPI_Barrier and
// its time is the maximum over the ranks; variants are interleaved round by round and the median is
// reported. Before timing, einfft's output is compared with FFTW's (relative max error).
//
// The breakdown times einfft's stages one by one with the same engine: the local FFTs (torch's
// at::fft_fftn over y, z, then over x; on one rank the single 3-D FFT einfft runs there) and each
// transpose (an einshard repartition, the all-to-all(v) einfft runs). FFTW's own transpose is timed with fftw_mpi_plan_many_transpose over
// the same data, so "transpose" can be compared directly.
//
//   mpirun -n P einshard_bench_fft [--n 128|256|N] [--iters R] [--planner measure|patient|estimate]
//                                  [--wisdom FILE]
//
// --planner sets FFTW's planner effort on both sides (FFTW-MPI's flags and es::exec::fftw_planner()).
// --wisdom FILE: read FFTW wisdom from FILE before planning when it exists, and write it there after
// (rank 0) when it did not: a patient run plans once. Both sides share the process's FFTW wisdom.
//
// einshard runs twice per round: with its default local FFTs (FFTW when built with it) and with
// torch's (`einshard_torch_fft_ms`, exec::LocalFft::torch).
//
// Output: one JSON line per layout on rank 0:
//   {"bench":"fft3d","n":N,"ranks":P,"layout":...,"einshard_ms":...,"fftw_ms":...,"ratio":...,
//    "ratio_paired" (median of the per-round ratios),"einshard_min_ms":...,"fftw_min_ms":...,
//    "einshard_local_fft_ms":...,"einshard_transpose_ms":...,"einshard_transposes":...,
//    "fftw_transpose_ms":...,"fftw_local_fft_ms":...,"max_rel_err":...,
//    "fftw_inplace_ms":..., "einshard_out_ms":..., "out_in_place":bool,
//    "ratio_inplace" (einfft / FFTW in place), "ratio_out_inplace" (einfft_out / FFTW in place),
//    both also paired}
// Environment: EINSHARD_NUM_THREADS (intra-op threads per rank, default 1; FFTW runs one thread).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <fftw3-mpi.h>
#include <mpi.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <einshard/einshard.hpp>
#include <einshard/exec/local_fft.hpp>  // the local FFT backend switch

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
    std::string planner = "measure", wisdom;
    einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& value) {
      if (a == "--n") n = std::stoll(value());
      else if (a == "--iters") iters = std::stoi(value());
      else if (a == "--planner") planner = value();
      else if (a == "--wisdom") wisdom = value();
      else return false;
      return true;
    });
    if (iters <= 0) iters = n >= 256 ? 7 : 15;
    at::set_num_threads(einshard_bench::threads_from_env());
    c10::InferenceMode inference;
    int P = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    es::Mesh mesh(MPI_COMM_WORLD, {P}, {"p"});
    const unsigned flags = planner == "patient" ? FFTW_PATIENT : planner == "estimate" ? FFTW_ESTIMATE : FFTW_MEASURE;
    es::exec::fftw_planner() = planner == "patient"    ? es::exec::FftwPlanner::patient
                               : planner == "estimate" ? es::exec::FftwPlanner::estimate
                                                       : es::exec::FftwPlanner::measure;
    const bool had_wisdom = !wisdom.empty() && std::ifstream(wisdom).good();
    if (had_wisdom) es::exec::load_fftw_wisdom(wisdom);

    ptrdiff_t n0 = 0, s0 = 0, n1 = 0, s1 = 0;
    const auto alloc = fftw_mpi_local_size_3d_transposed(n, n, n, MPI_COMM_WORLD, &n0, &s0, &n1, &s1);
    auto* in = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    auto* out = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    auto* tin = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    auto* tout = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    fftw_plan standard = fftw_mpi_plan_dft_3d(n, n, n, in, out, MPI_COMM_WORLD, FFTW_FORWARD, flags);
    fftw_plan transposed = fftw_mpi_plan_dft_3d(n, n, n, in, out, MPI_COMM_WORLD, FFTW_FORWARD,
                                                flags | FFTW_MPI_TRANSPOSED_OUT);
    fftw_plan standard_ip = fftw_mpi_plan_dft_3d(n, n, n, in, in, MPI_COMM_WORLD, FFTW_FORWARD, flags);
    fftw_plan transposed_ip = fftw_mpi_plan_dft_3d(n, n, n, in, in, MPI_COMM_WORLD, FFTW_FORWARD,
                                                   flags | FFTW_MPI_TRANSPOSED_OUT);
    // FFTW's global transpose of the same data: an n x n matrix (x, y) of n complex (2n doubles).
    fftw_plan transpose = fftw_mpi_plan_many_transpose(
        n, n, 2 * n, FFTW_MPI_DEFAULT_BLOCK, FFTW_MPI_DEFAULT_BLOCK, reinterpret_cast<double*>(tin),
        reinterpret_cast<double*>(tout), MPI_COMM_WORLD, flags);

    at::manual_seed(static_cast<std::uint64_t>(1234 + rank));
    const auto x = at::randn({n0, n, n}, at::kComplexDouble);
    const auto fill = [&] { std::memcpy(in, x.data_ptr(), static_cast<std::size_t>(x.numel()) * sizeof(fftw_complex)); };
    const auto fftw_out = [&](std::int64_t a, std::int64_t b) {
      return at::from_blob(out, {a, b, n}, at::kComplexDouble);
    };

    const auto rows = all_sizes(n0), cols = all_sizes(n1);
    const es::Shapes shapes{{"p", {{"x", rows}, {"kx", rows}, {"ky", cols}}}};
    const es::Options o{.mesh = mesh, .shapes = shapes, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}};
    const es::Options move{.mesh = mesh, .shapes = es::Shapes{{"p", {{"x", rows}, {"kx", rows}, {"ky", cols}}}}};

    struct Layout {
      const char* name;
      const char* notation;
      fftw_plan plan, in_place;
      bool transposed, ky_first;
    };
    for (const Layout& l : {Layout{"standard", "x/p y z -> kx/p ky kz", standard, standard_ip, false, false},
                            Layout{"transposed", "x/p y z -> kx ky/p kz", transposed, transposed_ip, true, false},
                            Layout{"ky_first", "x/p y z -> ky/p kx kz", transposed, transposed_ip, true, true}}) {
      const auto run_einshard = [&] { return es::einfft(l.notation, {x}, o); };
      // einfft_out: in place when the output block is the input block's shape, else into `kept`.
      auto work = x.clone();
      const bool in_place = !l.transposed || P == 1 || (l.ky_first && n0 == n1);
      auto kept = in_place ? work : l.ky_first ? at::empty({n1, n, n}, x.options()) : at::empty({n, n1, n}, x.options());
      const auto run_out = [&] { es::einfft_out(l.notation, kept, work, o); };
      // Correctness first.
      fill();
      fftw_execute(l.plan);
      auto ours = run_einshard();
      const auto theirs = l.ky_first ? fftw_out(n1, n) : l.transposed ? fftw_out(n1, n).permute({1, 0, 2}) : fftw_out(n0, n);
      const double err = max_rel_err(ours, theirs);
      const auto names = es::explain_fft(l.notation, {x}, o).names();
      const auto transposes = static_cast<int>(std::count(names.begin(), names.end(), std::string("alltoall_repartition")));
      // The stages one by one (the same calls einfft makes).
      const auto a = at::fft_fftn(x, std::nullopt, at::IntArrayRef{1, 2});
      const auto b = es::einshard("x/p ky kz -> x ky/p kz", {a}, move);
      const auto c = at::fft_fft(b, std::nullopt, 0);
      {
        work.copy_(x);
        run_out();
        const double out_err = max_rel_err(kept, ours);
        if (rank == 0 && out_err > 1e-12) std::fprintf(stderr, "einfft_out differs from einfft: %.2e\n", out_err);
      }
      std::vector<double> t_es, t_es_torch, t_fftw, t_fft1, t_t1, t_fft2, t_t2, t_ftr, t_fft3, t_ip, t_out;
      for (int r = 0; r < iters + 1; ++r) {
        const bool warm = r == 0;
        auto keep = [&](std::vector<double>& v, double t) {
          if (!warm) v.push_back(t);
        };
        keep(t_es, timed_ms([&] { ours = run_einshard(); }));
        es::exec::local_fft_backend() = es::exec::LocalFft::torch;
        keep(t_es_torch, timed_ms([&] { (void)run_einshard(); }));
        es::exec::local_fft_backend() = es::exec::LocalFft::automatic;
        fill();
        keep(t_fftw, timed_ms([&] { fftw_execute(l.plan); }));
        fill();
        keep(t_ip, timed_ms([&] { fftw_execute(l.in_place); }));
        work.copy_(x);
        keep(t_out, timed_ms(run_out));
        keep(t_fft1, timed_ms([&] { (void)at::fft_fftn(x, std::nullopt, at::IntArrayRef{1, 2}); }));
        keep(t_t1, timed_ms([&] { (void)es::einshard("x/p ky kz -> x ky/p kz", {a}, move); }));
        keep(t_fft2, timed_ms([&] { (void)at::fft_fft(b, std::nullopt, 0); }));
        if (!l.transposed) keep(t_t2, timed_ms([&] { (void)es::einshard("kx ky/p kz -> kx/p ky kz", {c}, move); }));
        keep(t_ftr, timed_ms([&] { fftw_execute(transpose); }));
        if (P == 1) keep(t_fft3, timed_ms([&] { (void)at::fft_fftn(x); }));
      }
      // On one rank neither library transposes: einfft runs one 3-D torch FFT, FFTW its serial plan.
      const double es_ms = median(t_es), fftw_ms = median(t_fftw);
      std::vector<double> paired;  // the same round's ratio: robust to load that drifts between rounds
      std::vector<double> paired_ip, paired_out_ip;
      for (std::size_t i = 0; i < t_es.size(); ++i) {
        paired.push_back(t_es[i] / t_fftw[i]);
        paired_ip.push_back(t_es[i] / t_ip[i]);
        paired_out_ip.push_back(t_out[i] / t_ip[i]);
      }
      const double local_ms = P == 1 ? median(t_fft3) : median(t_fft1) + median(t_fft2);
      const double trans_ms = P == 1 ? 0.0 : median(t_t1) + (l.transposed ? 0.0 : median(t_t2));
      const double fftw_tr_ms = P == 1 ? 0.0 : median(t_ftr) * (l.transposed ? 1 : 2);
      if (rank == 0)
        std::printf(
            "{\"bench\":\"fft3d\",\"n\":%lld,\"ranks\":%d,\"layout\":\"%s\",\"dtype\":\"complex128\","
            "\"einshard_ms\":%.3f,\"fftw_ms\":%.3f,\"ratio\":%.3f,\"ratio_paired\":%.3f,"
            "\"einshard_min_ms\":%.3f,\"fftw_min_ms\":%.3f,\"einshard_local_fft_ms\":%.3f,"
            "\"einshard_transpose_ms\":%.3f,\"einshard_transposes\":%d,\"fftw_transpose_ms\":%.3f,"
            "\"fftw_local_fft_ms\":%.3f,\"einshard_torch_fft_ms\":%.3f,\"local_fft\":\"%s\",\"iters\":%d,"
            "\"planner\":\"%s\",\"max_rel_err\":%.2e,\"fftw_inplace_ms\":%.3f,\"einshard_out_ms\":%.3f,\"out_in_place\":%s,"
            "\"ratio_inplace\":%.3f,\"ratio_inplace_paired\":%.3f,\"ratio_out_inplace\":%.3f,"
            "\"ratio_out_inplace_paired\":%.3f}\n",
            static_cast<long long>(n), P, l.name, es_ms, fftw_ms, es_ms / fftw_ms, median(paired),
            *std::min_element(t_es.begin(), t_es.end()), *std::min_element(t_fftw.begin(), t_fftw.end()),
            local_ms, trans_ms,
            transposes, fftw_tr_ms, fftw_ms - fftw_tr_ms, median(t_es_torch),
            es::exec::has_fftw() ? "fftw" : "torch", iters, planner.c_str(), err, median(t_ip), median(t_out),
            in_place ? "true" : "false", es_ms / median(t_ip), median(paired_ip), median(t_out) / median(t_ip),
            median(paired_out_ip));
      std::fflush(stdout);
    }
    if (!wisdom.empty() && !had_wisdom && rank == 0) es::exec::save_fftw_wisdom(wisdom);
    fftw_destroy_plan(standard);
    fftw_destroy_plan(transposed);
    fftw_destroy_plan(standard_ip);
    fftw_destroy_plan(transposed_ip);
    fftw_destroy_plan(transpose);
    fftw_free(in);
    fftw_free(out);
    fftw_free(tin);
    fftw_free(tout);
  }
  fftw_mpi_cleanup();
  MPI_Finalize();
  return 0;
}
