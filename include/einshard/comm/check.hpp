#pragma once
/// @file
/// Turning MPI error codes into `einshard::Error`. Needs MPI only.

#include <mpi.h>

#include <string>

#include "einshard/error.hpp"

namespace einshard::comm {

/// Throws `Error` with MPI's own text when an MPI call fails.
inline void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

inline int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

inline int size_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

/// Whether MPI_Finalize has run: objects that hold MPI resources (communicators, requests, hypre
/// matrices) and outlive it leave them to the process's exit instead of calling MPI (as Boost.MPI).
[[nodiscard]] inline bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

}  // namespace einshard::comm
