#pragma once
/// @file
/// Nonblocking collectives: `Requests` owns the requests of the collectives in flight and tests or
/// waits for them; `iall_reduce_sum` and `ibroadcast` start one on a host tensor into a slot, and
/// `SumInFlight` sums a few doubles while the caller works. The model's gradient reduction
/// (model/grad_reduction.hpp) keeps one per bucket in flight while backward still runs; pipelined
/// CG hides its one reduction per iteration behind a preconditioner and a product.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/mpi.hpp"

namespace einshard::comm {

/// The requests of nonblocking collectives, one slot each (`MPI_REQUEST_NULL`: none in flight).
/// Destroyed with collectives still in flight, it waits for them: MPI allows neither cancelling
/// nor freeing a collective's request, and the buffers they write must outlive them. Once MPI is
/// finalized it calls nothing.
class Requests {
 public:
  Requests() = default;
  explicit Requests(std::size_t n) : requests_(n, MPI_REQUEST_NULL) {}
  Requests(Requests&& o) noexcept : requests_(std::exchange(o.requests_, {})) {}
  Requests& operator=(Requests&& o) noexcept {
    if (this != &o) {
      complete_noexcept();
      requests_ = std::exchange(o.requests_, {});
    }
    return *this;
  }
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;
  ~Requests() { complete_noexcept(); }

  [[nodiscard]] std::size_t size() const noexcept { return requests_.size(); }
  /// Slot `i`, to start a collective into.
  [[nodiscard]] MPI_Request& operator[](std::size_t i) { return requests_[i]; }

  /// Lets MPI move the collectives of the first `n` slots along (MPI progresses nonblocking
  /// collectives inside MPI calls); whether all of them have completed. Errors surface in `wait`.
  bool progress(std::size_t n) {
    int done = 0;
    MPI_Testall(static_cast<int>(n), requests_.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }

  /// Waits for the collectives of every slot (each completes once every rank of its communicator
  /// has started it).
  void wait() {
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }

 private:
  void complete_noexcept() noexcept {
    for (const auto r : requests_)
      if (r != MPI_REQUEST_NULL) {
        if (!mpi_ended()) MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
        return;
      }
  }

  std::vector<MPI_Request> requests_;
};

/// Starts summing `buffer` (a contiguous host tensor) over `comm` in place, the sum in the dtype's
/// own arithmetic (comm/mpi.hpp); `request` completes it.
inline void iall_reduce_sum(const at::Tensor& buffer, MPI_Comm comm, MPI_Request& request) {
  const auto dtype = buffer.scalar_type();
  check(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), count(buffer.numel()), datatype(dtype), sum_op(dtype), comm,
                       &request),
        "MPI_Iallreduce");
}

/// Starts broadcasting `buffer` (a contiguous host tensor) from rank `root` of `comm`; `request`
/// completes it.
inline void ibroadcast(const at::Tensor& buffer, int root, MPI_Comm comm, MPI_Request& request) {
  check(MPI_Ibcast(buffer.data_ptr(), count(buffer.numel()), datatype(buffer.scalar_type()), root, comm, &request),
        "MPI_Ibcast");
}

/// A sum of a few doubles in flight: `in` and `out` stay alive and `in` unchanged until wait().
class SumInFlight {
 public:
  SumInFlight(std::span<const double> in, std::span<double> out, MPI_Comm comm) : requests_(1) {
    check(MPI_Iallreduce(in.data(), out.data(), count(static_cast<std::int64_t>(in.size())), MPI_DOUBLE, MPI_SUM, comm,
                         &requests_[0]),
          "MPI_Iallreduce");
  }
  void wait() { requests_.wait(); }

 private:
  Requests requests_;
};

}  // namespace einshard::comm
