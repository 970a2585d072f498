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

/// Whether this caller can no longer call MPI: MPI_Finalize has run, or the caller is no MPI
/// process at all. Objects that hold MPI resources (communicators, requests, hypre matrices) and
/// outlive MPI leave them to the process's exit instead of calling it (as Boost.MPI). The second
/// case is SimGrid's SMPI, which destroys a simulated rank's statics from its own thread once
/// the ranks have ended: there MPI_Finalized answers no (it asks a rank that is gone), MPI_Initialized
/// answers no too, and any other call crashes.
[[nodiscard]] inline bool mpi_ended() {
  int up = 0, done = 0;
  MPI_Initialized(&up);
  if (up == 0) return true;
  MPI_Finalized(&done);
  return done != 0;
}

}  // namespace einshard::comm
