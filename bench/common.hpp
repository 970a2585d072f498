// What the MPI benchmarks share (bench/*.cpp, bench/*/*.cpp): the timing of a collective step,
// medians, the world's rank and size, the torch thread count, the command-line walk, and the rows
// of the Poisson matrices the sparse benchmarks solve.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
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

/// This process's rank in MPI_COMM_WORLD.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// The number of processes in MPI_COMM_WORLD.
inline int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

/// Torch intra-op threads per rank: $EINSHARD_NUM_THREADS, default 1.
inline int threads_from_env() {
  const char* v = std::getenv("EINSHARD_NUM_THREADS");
  const int t = v ? std::atoi(v) : 1;
  return t > 0 ? t : 1;
}

/// Walks the `--name [value]` arguments: `on(name, value)` for each, where `value()` takes the next
/// argument (an error naming the option when there is none) and `on` returns false for a name it
/// does not know (an error naming it).
template <class On>
void for_each_option(int argc, char** argv, On&& on) {
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + name);
      return argv[++i];
    };
    if (!on(name, value)) throw std::runtime_error("unknown argument " + name);
  }
}

/// Row i of the Dirichlet Poisson matrix on a g × g grid (5-point) or, with `three`, a g × g × g
/// grid (7-point): add(column, value) per entry, columns ascending.
template <class Add>
void poisson_row(std::int64_t g, std::int64_t i, Add&& add, bool three = false) {
  const std::int64_t plane = g * g;
  const auto x = i % g, y = (i / g) % g, z = three ? i / plane : 0;
  if (three && z > 0) add(i - plane, -1.0);
  if (y > 0) add(i - g, -1.0);
  if (x > 0) add(i - 1, -1.0);
  add(i, three ? 6.0 : 4.0);
  if (x + 1 < g) add(i + 1, -1.0);
  if (y + 1 < g) add(i + g, -1.0);
  if (three && z + 1 < g) add(i + plane, -1.0);
}

}  // namespace einshard_bench
