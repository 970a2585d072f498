// Timing helpers shared by the MPI benchmarks (bench/*.cpp, bench/*/*.cpp).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace einshard_bench {

/// Seconds of `f` on the slowest rank (what a collective step really costs), started together
/// after a barrier.
template <class F>
double timed(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  f();
  double dt = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return dt;
}

template <class F>
double timed_ms(F&& f) {
  return 1e3 * timed(std::forward<F>(f));
}

/// The upper median.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Every rank's `mine`, in rank order (the shard sizes of a layout FFTW chose).
inline std::vector<std::int64_t> all_sizes(std::int64_t mine) {
  int P = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::vector<std::int64_t> out(static_cast<std::size_t>(P));
  MPI_Allgather(&mine, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  return out;
}

}  // namespace einshard_bench
