#pragma once
/// @file
/// Small irregular exchanges of plain values (indices, ids, bytes) used at setup time, and the
/// rule that turns a fault found on some ranks into the same `Error` on every rank.

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

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

/// Personalized all-to-all of trivially copyable values: `out[r]` is what rank r put in its
/// `send[me]`. Counts travel first (MPI_Alltoall), then one MPI_Alltoallv of bytes. MPI counts and
/// displacements are `int`: a rank whose bytes to send or receive exceed that range makes every
/// rank throw (one more all-reduce, which setup-time callers can afford), before any data moves.
template <class T>
std::vector<std::vector<T>> alltoallv(const std::vector<std::vector<T>>& send, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  const int p = size_of(comm);
  if (static_cast<int>(send.size()) != p)
    throw Error("alltoallv: expected one send list per rank (" + std::to_string(p) + "), got " +
                std::to_string(send.size()));
  constexpr auto limit = static_cast<std::size_t>(std::numeric_limits<int>::max());
  std::vector<int> scount(p), rcount(p), sdispl(p), rdispl(p);
  std::size_t stotal = 0;
  for (int r = 0; r < p; ++r) {
    const auto bytes = send[r].size() * sizeof(T);
    scount[r] = static_cast<int>(std::min(bytes, limit));
    sdispl[r] = static_cast<int>(std::min(stotal, limit));
    stotal += bytes;
  }
  std::string fault;
  if (stotal > limit)
    fault = "alltoallv: expected at most " + std::to_string(limit) + " bytes to send, got " + std::to_string(stotal);
  check(MPI_Alltoall(scount.data(), 1, MPI_INT, rcount.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  std::size_t rtotal = 0;
  for (int r = 0; r < p; ++r) {
    rdispl[r] = static_cast<int>(std::min(rtotal, limit));
    rtotal += static_cast<std::size_t>(rcount[r]);
  }
  if (fault.empty() && rtotal > limit)
    fault = "alltoallv: expected at most " + std::to_string(limit) + " bytes to receive, got " + std::to_string(rtotal);
  raise_if_any(comm, fault);
  std::vector<char> sbuf(stotal), rbuf(rtotal);
  for (int r = 0; r < p; ++r)
    if (!send[r].empty()) std::memcpy(sbuf.data() + sdispl[r], send[r].data(), send[r].size() * sizeof(T));
  check(MPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), MPI_BYTE, rbuf.data(), rcount.data(),
                      rdispl.data(), MPI_BYTE, comm),
        "MPI_Alltoallv");
  std::vector<std::vector<T>> out(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    out[r].resize(static_cast<std::size_t>(rcount[r]) / sizeof(T));
    if (rcount[r] > 0) std::memcpy(out[r].data(), rbuf.data() + rdispl[r], static_cast<std::size_t>(rcount[r]));
  }
  return out;
}

}  // namespace einshard::comm
