#pragma once
// Every all-reduce of the process, counted through MPI's profiling interface: the executable's
// definitions win over the MPI library's, for PETSc and einshard alike (PETSc's own counter sees
// only the translation units that include petscsys.h, and einshard's solvers are compiled in its
// library). Include it in one translation unit of a benchmark executable.

#include <mpi.h>

inline long long g_allreduce_calls = 0;

extern "C" int(MPI_Allreduce)(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  ++g_allreduce_calls;
  return PMPI_Allreduce(s, r, n, t, op, c);
}
extern "C" int(MPI_Iallreduce)(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                                MPI_Request* q) {
  ++g_allreduce_calls;
  return PMPI_Iallreduce(s, r, n, t, op, c, q);
}

/// The all-reduces so far.
inline double allreduce_calls() { return static_cast<double>(g_allreduce_calls); }
