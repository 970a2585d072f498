#pragma once
/// @file
/// Small utilities shared by einshard's tests (not part of the library).

#include <mpi.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "einshard/error.hpp"

namespace einshard::testing {

/// This process's place in MPI_COMM_WORLD. Valid between MPI_Init and MPI_Finalize, which the MPI
/// test main (tests/support/catch_mpi_main.cpp) calls around the whole Catch run.
struct World {
  int rank = 0;
  int size = 1;
  MPI_Comm comm = MPI_COMM_WORLD;
};

inline World world() {
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  return w;
}

/// Intra-op threads per process: $EINSHARD_NUM_THREADS, default 1 (the MPI tests oversubscribe
/// the cores, so one thread per rank is the only sane default).
inline int num_threads_from_env() {
  const char* value = std::getenv("EINSHARD_NUM_THREADS");
  if (value == nullptr || *value == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return (end != value && *end == '\0' && n > 0 && n < 1024) ? static_cast<int>(n) : 1;
}

/// Every ordered factorization of n into `dims` positive factors (the mesh shapes of n ranks).
inline std::vector<std::vector<int>> factorizations(int n, int dims) {
  if (dims == 1) return {{n}};
  std::vector<std::vector<int>> out;
  for (int f = 1; f <= n; ++f)
    if (n % f == 0)
      for (auto rest : factorizations(n / f, dims - 1)) {
        rest.insert(rest.begin(), f);
        out.push_back(rest);
      }
  return out;
}

/// The message of the `einshard::Error` that `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const einshard::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace einshard::testing
