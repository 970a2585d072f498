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
#include <cstddef>
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

/// Tags of the exchange. Consecutive exchanges on one communicator alternate between two sets: a
/// rank that has left exchange k (its barrier completed, so every rank has entered that barrier
/// and every message of exchange k was received) may send exchange k+1's messages to a rank still
/// waiting on the barrier of k, which must not take them for its own; exchange k+2 cannot start
/// before every rank has left k. Each set has the tag of the envelopes (`envelope`), of the parcels
/// too large to ride in one (`overflow`) and of the barrier's messages (`barrier`).
struct SparseExchangeTags {
  int envelope, overflow, barrier;
};
inline constexpr SparseExchangeTags sparse_exchange_tags[2] = {{0x5e20, 0x5e22, 0x5e24}, {0x5e21, 0x5e23, 0x5e25}};

/// The most bytes of one envelope: a parcel's size (an `int64`) and, when they fit, its values. A
/// rank keeps one receive of this size posted for whatever arrives, so that it can wait for an
/// arrival, its own sends and the barrier at once (`MPI_Waitany`) instead of polling.
inline constexpr std::size_t sparse_exchange_envelope_bytes = 16384;

/// Which of the two tag sets the next exchange on `comm` uses (a parity kept as a communicator
/// attribute: every rank calls the exchanges of a communicator in the same order). The value is
/// the parity itself, not a pointer, so nothing is allocated or left behind at MPI_Finalize; a
/// duplicate starts over at 0, which its ranks agree on too.
inline SparseExchangeTags next_sparse_exchange_tags(MPI_Comm comm) {
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

/// The parcel of the envelope `envelope` (of `bytes` bytes, from `source`): its values from the
/// envelope, or from the overflow message that `source` sent with it. That message was posted
/// before the envelope, so the blocking receive only waits for its data.
template <class T>
Parcel<T> open_envelope(const std::vector<std::byte>& envelope, int bytes, int source, SparseExchangeTags tags,
                        MPI_Comm comm) {
  std::int64_t size = 0;
  std::memcpy(&size, envelope.data(), sizeof size);
  Parcel<T> parcel{source, std::vector<T>(static_cast<std::size_t>(size) / sizeof(T))};
  if (bytes > static_cast<int>(sizeof size))
    std::memcpy(parcel.values.data(), envelope.data() + sizeof size, static_cast<std::size_t>(size));
  else
    check(MPI_Recv(parcel.values.data(), static_cast<int>(size), MPI_BYTE, source, tags.overflow, comm,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
  return parcel;
}

}  // namespace detail

/// Collective over `comm`: each rank sends its parcels (at most one per peer; empty ones are not
/// sent) and receives those addressed to it, returned ascending by sender. Nobody needs to know in
/// advance who sends to it. Per rank: its own messages, one all-reduce (the same error on every
/// rank for a bad peer, a repeated one, or a message over MPI's `int` count of bytes, before any
/// data moves) and one nonblocking barrier (ceil(log2 P) empty messages); no array of P entries.
///
/// The protocol: synchronous sends to the peers; while they are not all matched, take any message
/// that arrives; once they are, enter a nonblocking barrier and keep taking messages until it
/// completes. When the barrier completes every rank's sends were matched, so every message has
/// been received. Deadlock-free: nothing blocks while a message may still be waiting. A rank
/// waits for all three kinds of event at once (`MPI_Waitany` over a posted receive, its sends and
/// the barrier's messages) rather than polling: on a real machine the same cost, under a simulator
/// (SimGrid's SMPI) one step per event instead of one per poll. A parcel over
/// `detail::sparse_exchange_envelope_bytes` costs a second message.
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

  const auto tags = detail::next_sparse_exchange_tags(comm);
  constexpr auto capacity = detail::sparse_exchange_envelope_bytes;
  constexpr auto header = sizeof(std::int64_t);
  std::vector<Parcel<T>> received;
  // requests: [0] the posted receive of an envelope, [1] the barrier's receive of its current round,
  // then this exchange's sends and, appended, the barrier's.
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  std::vector<std::vector<std::byte>> envelopes;
  envelopes.reserve(send.size());
  for (const auto& parcel : send) {
    if (parcel.values.empty()) continue;
    if (parcel.peer == me) {
      received.push_back(parcel);
      continue;
    }
    const auto bytes = static_cast<std::int64_t>(parcel.values.size() * sizeof(T));
    const bool inline_values = static_cast<std::size_t>(bytes) <= capacity - header;
    if (!inline_values)
      check(MPI_Isend(parcel.values.data(), static_cast<int>(bytes), MPI_BYTE, parcel.peer, tags.overflow, comm,
                      &requests.emplace_back(MPI_REQUEST_NULL)),
            "MPI_Isend");
    auto& envelope = envelopes.emplace_back(header + (inline_values ? static_cast<std::size_t>(bytes) : 0));
    std::memcpy(envelope.data(), &bytes, header);
    if (inline_values) std::memcpy(envelope.data() + header, parcel.values.data(), static_cast<std::size_t>(bytes));
    check(MPI_Issend(envelope.data(), static_cast<int>(envelope.size()), MPI_BYTE, parcel.peer, tags.envelope, comm,
                     &requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Issend");
  }
  std::vector<std::byte> slot(capacity);
  const auto post_receive = [&] {
    check(MPI_Irecv(slot.data(), static_cast<int>(capacity), MPI_BYTE, MPI_ANY_SOURCE, tags.envelope, comm,
                    &requests[0]),
          "MPI_Irecv");
  };
  const auto take = [&](const MPI_Status& status) {
    int bytes = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
    received.push_back(detail::open_envelope<T>(slot, bytes, status.MPI_SOURCE, tags, comm));
  };
  const auto sends = requests.size() - 2;
  auto unmatched = sends;
  // The barrier: dissemination in ceil(log2 P) rounds of empty messages (round k: to me + 2^k, from
  // me - 2^k, distinct ranks for distinct k, so one tag serves every round), its receive in
  // requests[1]. Not MPI_Ibarrier: SMPI's MPI_Waitany returns a nonblocking collective's request at
  // once, as if complete. Open MPI's MPI_Ibarrier is the same dissemination.
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  int round = -1;
  bool done = false;
  char token = 0;
  const auto next_round = [&] {
    if (++round == rounds) {
      done = true;
      return;
    }
    const int step = 1 << round;
    check(MPI_Isend(&token, 0, MPI_BYTE, (me + step) % p, tags.barrier, comm, &requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Isend");
    check(MPI_Irecv(&token, 0, MPI_BYTE, (me - step + p) % p, tags.barrier, comm, &requests[1]), "MPI_Irecv");
  };
  post_receive();
  if (unmatched == 0) next_round();
  // Blocks until something happens: an envelope arrives (taken, and the receive posted again), one
  // of this rank's sends completes (the last one enters the barrier), or a round of the barrier
  // completes (the next one starts).
  while (!done) {
    int which = MPI_UNDEFINED;
    MPI_Status status;
    check(MPI_Waitany(static_cast<int>(requests.size()), requests.data(), &which, &status), "MPI_Waitany");
    if (which == 0) {
      take(status);
      post_receive();
    } else if (which == 1) {
      next_round();
    } else if (static_cast<std::size_t>(which) < 2 + sends && --unmatched == 0) {
      next_round();
    }
  }
  // Every message of this exchange was matched (by requests[0]) before the barrier completed: the
  // posted receive holds the last one, or none will come. An empty message to itself completes it
  // either way, so every request ends matched (none cancelled) on any MPI and under SMPI.
  MPI_Request close = MPI_REQUEST_NULL;
  check(MPI_Isend(&token, 0, MPI_BYTE, me, tags.envelope, comm, &close), "MPI_Isend");
  MPI_Status status;
  check(MPI_Wait(&requests[0], &status), "MPI_Wait");
  if (status.MPI_SOURCE != me) {
    take(status);
    check(MPI_Recv(&token, 0, MPI_BYTE, me, tags.envelope, comm, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  check(MPI_Wait(&close, MPI_STATUS_IGNORE), "MPI_Wait");
  // The barrier's own sends: their receivers are in the barrier, so these complete.
  check(MPI_Waitall(static_cast<int>(requests.size() - 2), requests.data() + 2, MPI_STATUSES_IGNORE), "MPI_Waitall");
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
