#pragma once
/// @file
/// The rule that turns a fault found on some ranks into the same `Error` on every rank. (The
/// irregular exchanges of setup time are comm/sparse_exchange.hpp.)

#include <mpi.h>

#include <string>

#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

/// Collective over `comm`, for callers whose ranks already agree that rank `first` failed (they
/// learnt it from a collective of their own): every rank throws `Error` with `first`'s `fault`.
[[noreturn]] inline void raise_from(MPI_Comm comm, int first, const std::string& fault) {
  const int me = rank_of(comm);
  int length = me == first ? static_cast<int>(fault.size()) : 0;
  check(MPI_Bcast(&length, 1, MPI_INT, first, comm), "MPI_Bcast");
  std::string text = me == first ? fault : std::string(static_cast<std::size_t>(length), ' ');
  check(MPI_Bcast(text.data(), length, MPI_CHAR, first, comm), "MPI_Bcast");
  throw Error(size_of(comm) > 1 ? "rank " + std::to_string(first) + ": " + text : text);
}

/// Collective over `comm`: if any rank passes a non-empty `fault`, every rank throws `Error` with
/// the message of the lowest such rank (prefixed by its rank), so no rank goes on into a
/// collective the others left. Costs one all-reduce when nobody failed.
inline void raise_if_any(MPI_Comm comm, const std::string& fault) {
  int first = fault.empty() ? size_of(comm) : rank_of(comm);
  check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (first < size_of(comm)) raise_from(comm, first, fault);
}

}  // namespace einshard::comm
