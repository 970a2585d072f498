#pragma once
/// @file
/// Point-to-point messages in flight: the one place that posts nonblocking receives and sends and
/// completes them. Every neighbour exchange of einshard (the MPI backend's `exchange`, the sparse
/// halo, einhalo's rows) posts through it, so that a new transport has one place to change.
///
/// Receives are posted before sends (no unexpected-message copies) and can be completed on their
/// own: a caller goes on with the work that needs the received data while its own sends are still
/// being read by the neighbours.

#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

class Messages {
 public:
  Messages() = default;
  Messages(Messages&&) noexcept = default;
  Messages& operator=(Messages&&) noexcept = default;
  Messages(const Messages&) = delete;
  Messages& operator=(const Messages&) = delete;
  /// Messages an exception left in flight are released, not waited for: their peers may never
  /// post the other half, and a destructor must not hang. Not once MPI is finalized.
  ~Messages() {
    if (mpi_ended()) return;
    for (auto& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }

  /// Posts a receive of `n` elements of `type` from `peer` into `data`. All receives come before
  /// the first send. An empty message posts nothing (both sides skip it: they agree on sizes).
  void receive(void* data, std::int64_t n, MPI_Datatype type, int peer, int tag, MPI_Comm comm) {
    if (receives_ != requests_.size()) throw Error("comm::Messages: receives are posted before the sends");
    if (n == 0) return;
    check(MPI_Irecv(data, count(n), type, peer, tag, comm, &next()), "MPI_Irecv");
    receives_ = requests_.size();
    posted_.emplace_back(count(n), type);
  }
  /// Posts a send of `n` elements of `type` at `data` to `peer`; `data` stays unchanged until wait().
  void send(const void* data, std::int64_t n, MPI_Datatype type, int peer, int tag, MPI_Comm comm) {
    if (n == 0) return;
    check(MPI_Isend(data, count(n), type, peer, tag, comm, &next()), "MPI_Isend");
  }

  /// Posts a message of no elements to `peer` in place of one of `type` it has posted a receive for:
  /// the receive completes, short, and `wait_whole` reports it. A rank whose own data is unusable
  /// still completes every exchange its peers wait for this way, and they learn of the fault.
  void send_marker(MPI_Datatype type, int peer, int tag, MPI_Comm comm) {
    check(MPI_Isend(nullptr, 0, type, peer, tag, comm, &next()), "MPI_Isend");
  }

  /// The receives have arrived (the sends may still be in flight).
  void wait_receives() {
    if (receives_ > 0) check(MPI_Waitall(static_cast<int>(receives_), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    receives_ = 0;
    posted_.clear();
  }
  /// Everything posted has completed; the object is empty again.
  void wait() { complete(MPI_STATUSES_IGNORE); }
  /// wait(), and whether every receive got as many elements as it was posted for (false when a peer
  /// sent a marker instead). The receives' sizes are not checked once wait_receives() has run.
  [[nodiscard]] bool wait_whole() {
    std::vector<MPI_Status> statuses(requests_.size());
    const auto posted = std::move(posted_);
    complete(statuses.data());
    bool whole = true;
    for (std::size_t i = 0; i < posted.size(); ++i) {
      int got = 0;
      check(MPI_Get_count(&statuses[i], posted[i].second, &got), "MPI_Get_count");
      whole = whole && got == posted[i].first;
    }
    return whole;
  }

 private:
  void complete(MPI_Status* statuses) {
    if (!requests_.empty())
      check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses), "MPI_Waitall");
    requests_.clear();
    receives_ = 0;
    posted_.clear();
  }
  MPI_Request& next() { return requests_.emplace_back(MPI_REQUEST_NULL); }

  std::vector<MPI_Request> requests_;  // the receives first, then the sends
  std::size_t receives_ = 0;           // how many of requests_ are receives not yet waited for
  std::vector<std::pair<int, MPI_Datatype>> posted_;  // each receive's count and type, for wait_whole
};

}  // namespace einshard::comm
