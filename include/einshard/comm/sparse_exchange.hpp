#pragma once
/// @file
/// Exchanges where each rank talks to a few others and no rank knows who will write to it: the
/// setup-time handshakes of the sparse part (a directory lookup, a halo's requests, entries
/// travelling to their rows' owners). A dense all-to-all costs every rank O(P) in counts and
/// messages whatever the pattern; this one costs a rank its own messages plus one nonblocking
/// barrier (log P), by non-blocking consensus (NBX: Hoefler, Siebert and Lumsdaine, "Scalable
/// communication protocols for dynamic sparse data exchange", PPoPP 2010).

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

/// The values one rank sends to `peer` (or received from it) in a `sparse_exchange`.
template <class T>
struct Parcel {
  int peer = -1;
  std::vector<T> values;
};

namespace detail {

/// Tags of the exchange. Consecutive exchanges on one communicator alternate between the two: a
/// rank that has left exchange k (its barrier completed, so every rank has entered that barrier
/// and every message of exchange k was received) may send exchange k+1's messages to a rank still
/// waiting on the barrier of k, which must not take them for its own; exchange k+2 cannot start
/// before every rank has left k.
inline constexpr int sparse_exchange_tags[2] = {0x5e20, 0x5e21};

/// Which of the two tags the next exchange on `comm` uses (a parity kept as a communicator
/// attribute: every rank calls the exchanges of a communicator in the same order). The value is
/// the parity itself, not a pointer, so nothing is allocated or left behind at MPI_Finalize; a
/// duplicate starts over at 0, which its ranks agree on too.
inline int next_sparse_exchange_tag(MPI_Comm comm) {
  static const int key = [] {
    int k = MPI_KEYVAL_INVALID;
    check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k, nullptr),
          "MPI_Comm_create_keyval");
    return k;
  }();
  void* value = nullptr;
  int found = 0;
  check(MPI_Comm_get_attr(comm, key, &value, &found), "MPI_Comm_get_attr");
  const auto parity = found ? reinterpret_cast<std::intptr_t>(value) & 1 : 0;
  check(MPI_Comm_set_attr(comm, key, reinterpret_cast<void*>(parity ^ 1)), "MPI_Comm_set_attr");
  return sparse_exchange_tags[parity];
}

}  // namespace detail

/// Collective over `comm`: each rank sends its parcels (at most one per peer; empty ones are not
/// sent) and receives those addressed to it, returned ascending by sender. Nobody needs to know in
/// advance who sends to it. Per rank: its own messages, one all-reduce (the same error on every
/// rank for a bad peer, a repeated one, or a message over MPI's `int` count of bytes, before any
/// data moves) and one `MPI_Ibarrier`; no array of P entries.
///
/// The protocol: synchronous sends to the peers; while they are not all matched, take any message
/// that arrives; once they are, enter a nonblocking barrier and keep taking messages until it
/// completes. When the barrier completes every rank's sends were matched, so every message has
/// been received. Deadlock-free: nothing blocks while a message may still be waiting.
template <class T>
std::vector<Parcel<T>> sparse_exchange(const std::vector<Parcel<T>>& send, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  const int p = size_of(comm), me = rank_of(comm);
  constexpr auto limit = static_cast<std::size_t>(std::numeric_limits<int>::max());
  std::vector<int> peers;
  peers.reserve(send.size());
  std::string fault;
  for (const auto& parcel : send) {
    if (parcel.peer < 0 || parcel.peer >= p)
      fault = "sparse_exchange: expected peers in [0, " + std::to_string(p) + "), got " + std::to_string(parcel.peer);
    else if (parcel.values.size() * sizeof(T) > limit)
      fault = "sparse_exchange: expected at most " + std::to_string(limit) + " bytes to rank " +
              std::to_string(parcel.peer) + ", got " + std::to_string(parcel.values.size() * sizeof(T));
    if (!fault.empty()) break;
    peers.push_back(parcel.peer);
  }
  std::sort(peers.begin(), peers.end());
  if (fault.empty() && std::adjacent_find(peers.begin(), peers.end()) != peers.end())
    fault = "sparse_exchange: expected one parcel per peer, got two for rank " +
            std::to_string(*std::adjacent_find(peers.begin(), peers.end()));
  raise_if_any(comm, fault);

  const int tag = detail::next_sparse_exchange_tag(comm);
  std::vector<Parcel<T>> received;
  std::vector<MPI_Request> sends;
  sends.reserve(send.size());
  for (const auto& parcel : send) {
    if (parcel.values.empty()) continue;
    if (parcel.peer == me) {
      received.push_back(parcel);
      continue;
    }
    check(MPI_Issend(parcel.values.data(), static_cast<int>(parcel.values.size() * sizeof(T)), MPI_BYTE, parcel.peer,
                     tag, comm, &sends.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Issend");
  }
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool in_barrier = false;
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    check(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &arrived, &status), "MPI_Iprobe");
    if (arrived) {
      int bytes = 0;
      check(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
      auto& parcel = received.emplace_back();
      parcel.peer = status.MPI_SOURCE;
      parcel.values.resize(static_cast<std::size_t>(bytes) / sizeof(T));
      check(MPI_Recv(parcel.values.data(), bytes, MPI_BYTE, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE),
            "MPI_Recv");
    }
    int done = 0;
    if (!in_barrier) {
      check(MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done) {
        check(MPI_Ibarrier(comm, &barrier), "MPI_Ibarrier");
        in_barrier = true;
      }
    } else {
      check(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) break;
    }
  }
  std::sort(received.begin(), received.end(), [](const auto& a, const auto& b) { return a.peer < b.peer; });
  return received;
}

/// The parcels of `received` (ascending by peer, as `sparse_exchange` returns them) from `peer`;
/// empty when it sent none.
template <class T>
const std::vector<T>& parcel_from(const std::vector<Parcel<T>>& received, int peer) {
  static const std::vector<T> none;
  const auto it = std::lower_bound(received.begin(), received.end(), peer,
                                   [](const auto& parcel, int r) { return parcel.peer < r; });
  return it != received.end() && it->peer == peer ? it->values : none;
}

}  // namespace einshard::comm
