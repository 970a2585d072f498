// Distributed 1-D complex FFT (complex128) of a lone sharded axis: einfft "x/p -> k/p" (six-step,
// or Bluestein) against FFTW-MPI's 1-D transform (fftw_mpi_plan_dft_1d), side by side in one run.
//
// Both use FFTW's distribution (fftw_mpi_local_size_1d: its input and output blocks; einfft gets
// them as shapes metadata). FFTW plans with FFTW_MEASURE, out of place, in natural order on both
// sides (no FFTW_MPI_SCRAMBLED_*). Each timed call starts after an MPI_Barrier and takes the
// maximum over the ranks; the two libraries alternate round by round and the medians are reported.
// Before timing, einfft's output is compared with FFTW's (relative max error). `--prime` also times
// einfft on the largest prime below n (Bluestein; FFTW-MPI's 1-D transform needs a composite n), as
// a ratio to einfft's own time at n.
//
//   mpirun -n P einshard_bench_fft1d [--log2n 22] [--iters R] [--prime]
//
// Output: one JSON line on rank 0:
//   {"bench":"fft1d","n":N,"ranks":P,"einshard_ms":...,"fftw_ms":...,"ratio":...,"ratio_paired":...,
//    "factors":"n1xn2","max_rel_err":...[,"prime":p,"bluestein_ms":...,"bluestein_over_n":...]}

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <fftw3-mpi.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <einshard/einshard.hpp>
#include <einshard/plan/fft_factored.hpp>  // the factoring the benchmark reports

#include "../common.hpp"
#include "fft_support.hpp"

namespace es = einshard;
using einshard_bench::all_sizes;
using einshard_bench::median;
using einshard_bench::timed_ms;

namespace {

bool is_prime(std::int64_t n) {
  if (n < 2) return false;
  for (std::int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  fftw_mpi_init();
  {
    int log2n = 22, iters = 11;
    bool prime = false;
    einshard_bench::for_each_option(argc, argv, [&](const std::string& a, const auto& value) {
      if (a == "--log2n") log2n = std::stoi(value());
      else if (a == "--iters") iters = std::stoi(value());
      else if (a == "--prime") prime = true;
      else return false;
      return true;
    });
    const std::int64_t n = std::int64_t{1} << log2n;
    at::set_num_threads(1);
    c10::InferenceMode inference;
    int P = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    es::Mesh mesh(MPI_COMM_WORLD, {P}, {"p"});

    ptrdiff_t ni = 0, i0 = 0, no = 0, o0 = 0;
    const auto alloc = fftw_mpi_local_size_1d(n, MPI_COMM_WORLD, FFTW_FORWARD, FFTW_MEASURE, &ni, &i0, &no, &o0);
    auto* in = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    auto* out = fftw_alloc_complex(static_cast<std::size_t>(alloc));
    fftw_plan plan = fftw_mpi_plan_dft_1d(n, in, out, MPI_COMM_WORLD, FFTW_FORWARD, FFTW_MEASURE);

    at::manual_seed(static_cast<std::uint64_t>(99 + rank));
    const auto x = at::randn({static_cast<std::int64_t>(ni)}, at::kComplexDouble);
    const auto fill = [&] { std::memcpy(in, x.data_ptr(), static_cast<std::size_t>(x.numel()) * sizeof(fftw_complex)); };
    const es::Options o{.mesh = mesh,
                        .shapes = es::Shapes{{"p", {{"x", all_sizes(ni)}, {"k", all_sizes(no)}}}},
                        .axes = {{"x", "k"}}};

    fill();
    fftw_execute(plan);
    auto ours = es::einfft("x/p -> k/p", {x}, o);
    const auto theirs = at::from_blob(out, {static_cast<std::int64_t>(no)}, at::kComplexDouble);
    const double err = einshard_bench::max_rel_err(ours, theirs);
    const auto f = es::plan::factor_fft(n, P);

    std::vector<double> t_es, t_fftw, paired;
    for (int r = 0; r < iters + 1; ++r) {
      const double a = timed_ms([&] { ours = es::einfft("x/p -> k/p", {x}, o); });
      fill();
      const double b = timed_ms([&] { fftw_execute(plan); });
      if (r == 0) continue;  // warm-up
      t_es.push_back(a);
      t_fftw.push_back(b);
      paired.push_back(a / b);
    }
    std::string extra;
    if (prime) {
      auto p = n - 1;
      while (!is_prime(p)) --p;
      const auto xp = at::randn({es::compute_split_shapes(p, P)[static_cast<std::size_t>(rank)]}, at::kComplexDouble);
      const es::Options op{.mesh = mesh, .axes = {{"x", "k"}}};
      std::vector<double> t_p;
      for (int r = 0; r < iters / 2 + 2; ++r) {
        const double t = timed_ms([&] { (void)es::einfft("x/p -> k/p", {xp}, op); });
        if (r > 0) t_p.push_back(t);
      }
      const auto fp = es::plan::factor_fft(p, P);
      extra = ",\"prime\":" + std::to_string(p) + ",\"prime_m\":" + std::to_string(fp.m) +
              ",\"bluestein_ms\":" + std::to_string(median(t_p)) +
              ",\"bluestein_over_n\":" + std::to_string(median(t_p) / median(t_es));
    }
    if (rank == 0)
      std::printf(
          "{\"bench\":\"fft1d\",\"n\":%lld,\"ranks\":%d,\"dtype\":\"complex128\",\"einshard_ms\":%.3f,"
          "\"fftw_ms\":%.3f,\"ratio\":%.3f,\"ratio_paired\":%.3f,\"factors\":\"%lldx%lld\",\"iters\":%d,"
          "\"max_rel_err\":%.2e%s}\n",
          static_cast<long long>(n), P, median(t_es), median(t_fftw), median(t_es) / median(t_fftw),
          median(paired), static_cast<long long>(f.m1), static_cast<long long>(f.m2), iters, err,
          extra.c_str());
    std::fflush(stdout);
    fftw_destroy_plan(plan);
    fftw_free(in);
    fftw_free(out);
  }
  fftw_mpi_cleanup();
  MPI_Finalize();
  return 0;
}
