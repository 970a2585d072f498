#pragma once
/// @file
/// The halo of a row-partitioned sparse matrix: which off-rank entries of x each rank needs
/// (ghosts), from whom, and what it must send to whom; built once by an index handshake, then
/// exchanged with nonblocking point-to-point between neighbours only.
///
/// Local numbering of a vector with halo: owned rows first (ascending global index), then the
/// ghosts grouped by owning rank (ascending) and ascending within a rank, so each neighbour's
/// message lands in one contiguous slice of the ghost buffer: receives need no unpacking.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/sparse/layout.hpp"

namespace einshard::sparse {

/// Who sends what to whom. Pure data once built.
struct HaloPlan {
  std::shared_ptr<const RowLayout> layout;
  at::Tensor ghosts;                      ///< global indices of the ghost slots, in local order
  std::vector<int> recv_ranks;            ///< neighbours we receive ghosts from, ascending
  std::vector<std::int64_t> recv_offsets; ///< ghost slice of recv_ranks[i]: [off[i], off[i+1])
  std::vector<int> send_ranks;            ///< neighbours we send owned values to, ascending
  std::vector<std::int64_t> send_offsets; ///< into send_rows
  at::Tensor send_rows;                   ///< local owned rows to send, concatenated per neighbour

  [[nodiscard]] std::int64_t owned() const { return layout->local_size(); }
  [[nodiscard]] std::int64_t ghost_count() const { return ghosts.numel(); }
  [[nodiscard]] std::int64_t local_size() const { return owned() + ghost_count(); }
  [[nodiscard]] std::int64_t send_count() const { return send_rows.numel(); }

  /// Collective. `ghosts`: sorted unique global indices this rank needs and does not own.
  static std::shared_ptr<const HaloPlan> build(std::shared_ptr<const RowLayout> layout,
                                               const at::Tensor& ghosts_sorted) {
    auto plan = std::make_shared<HaloPlan>();
    const int p = layout->size();
    const auto ids = detail::to_vector(ghosts_sorted);
    const auto owner = layout->owners(ids);
    // Group by owner; a stable sort keeps ascending global order within each owner.
    std::vector<std::size_t> order(ids.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return owner[a] < owner[b]; });
    std::vector<std::vector<std::int64_t>> request(static_cast<std::size_t>(p));
    std::vector<std::int64_t> local_order;
    local_order.reserve(ids.size());
    for (auto i : order) {
      request[static_cast<std::size_t>(owner[i])].push_back(ids[i]);
      local_order.push_back(ids[i]);
    }
    plan->ghosts = at::tensor(local_order, at::kLong);
    plan->recv_offsets.push_back(0);
    for (int r = 0; r < p; ++r)
      if (!request[static_cast<std::size_t>(r)].empty()) {
        plan->recv_ranks.push_back(r);
        plan->recv_offsets.push_back(plan->recv_offsets.back() +
                                     static_cast<std::int64_t>(request[static_cast<std::size_t>(r)].size()));
      }
    // The handshake: each owner learns, in the requester's order, which rows to send.
    const auto asked = comm::alltoallv(request, layout->comm());
    std::vector<std::int64_t> send;
    plan->send_offsets.push_back(0);
    for (int r = 0; r < p; ++r) {
      const auto& a = asked[static_cast<std::size_t>(r)];
      if (a.empty()) continue;
      plan->send_ranks.push_back(r);
      send.insert(send.end(), a.begin(), a.end());
      plan->send_offsets.push_back(static_cast<std::int64_t>(send.size()));
    }
    plan->send_rows = layout->local_index(at::tensor(send, at::kLong)).contiguous();
    plan->layout = std::move(layout);
    return plan;
  }
};

/// Runs a `HaloPlan`: forward (owners -> ghost slots) and reverse (ghost slots -> owners, added).
/// Owned values and ghosts live in separate contiguous tensors (as PETSc's local vector), so a
/// product reads x in place and no owned data is copied. Keeps its send/receive buffer between
/// calls; one exchange in flight at a time.
class HaloExchange {
 public:
  explicit HaloExchange(std::shared_ptr<const HaloPlan> plan) : plan_(std::move(plan)) {}

  [[nodiscard]] const HaloPlan& plan() const { return *plan_; }

  /// Posts the receives into `ghosts` (length ghost_count()) and sends the owned values of `owned`
  /// (length owned()) that the neighbours need. Both must stay alive until finish(). Both may be
  /// contiguous blocks (rows, m): then whole rows travel.
  void start(const at::Tensor& owned, const at::Tensor& ghosts) {
    const auto& p = *plan_;
    const auto elem = comm::datatype(owned.scalar_type());
    const auto width = row_width(owned);
    const auto size = owned.element_size() * width;
    requests_.clear();
    auto* recv = static_cast<char*>(ghosts.data_ptr());
    for (std::size_t i = 0; i < p.recv_ranks.size(); ++i)
      post(MPI_Irecv(recv + p.recv_offsets[i] * size, comm::count((p.recv_offsets[i + 1] - p.recv_offsets[i]) * width),
                     elem, p.recv_ranks[i], tag, p.layout->comm(), &next()));
    if (p.send_ranks.empty()) return;
    auto& buffer = buffer_for(owned, p.send_count());
    at::index_select_out(buffer, owned, 0, p.send_rows);
    auto* send = static_cast<char*>(buffer.data_ptr());
    for (std::size_t i = 0; i < p.send_ranks.size(); ++i)
      post(MPI_Isend(send + p.send_offsets[i] * size, comm::count((p.send_offsets[i + 1] - p.send_offsets[i]) * width),
                     elem, p.send_ranks[i], tag, p.layout->comm(), &next()));
  }
  void finish() { wait(); }

  /// The ghosts of `owned`, exchanged (blocking).
  [[nodiscard]] at::Tensor ghosts_of(const at::Tensor& owned) {
    auto g = at::empty(rows_like(owned, plan_->ghost_count()), owned.options().requires_grad(false));
    start(owned, g);
    finish();
    return g;
  }

  /// Reverse: sends `ghosts` (contributions to rows other ranks own) back to their owners;
  /// finish_reverse adds what arrives into `owned`. Used by A^T x and by the forward's backward.
  void start_reverse(const at::Tensor& ghosts) {
    const auto& p = *plan_;
    const auto elem = comm::datatype(ghosts.scalar_type());
    const auto width = row_width(ghosts);
    const auto size = ghosts.element_size() * width;
    requests_.clear();
    auto& buffer = buffer_for(ghosts, p.send_count());
    auto* recv = static_cast<char*>(buffer.data_ptr());
    for (std::size_t i = 0; i < p.send_ranks.size(); ++i)
      post(MPI_Irecv(recv + p.send_offsets[i] * size, comm::count((p.send_offsets[i + 1] - p.send_offsets[i]) * width),
                     elem, p.send_ranks[i], tag, p.layout->comm(), &next()));
    const auto* send = static_cast<const char*>(ghosts.data_ptr());
    for (std::size_t i = 0; i < p.recv_ranks.size(); ++i)
      post(MPI_Isend(send + p.recv_offsets[i] * size, comm::count((p.recv_offsets[i + 1] - p.recv_offsets[i]) * width),
                     elem, p.recv_ranks[i], tag, p.layout->comm(), &next()));
  }
  void finish_reverse(at::Tensor& owned) {
    wait();
    if (plan_->send_count() > 0) owned.index_add_(0, plan_->send_rows, buffer_);
  }

 private:
  static constexpr int tag = 0x5a10;

  MPI_Request& next() { return requests_.emplace_back(MPI_REQUEST_NULL); }
  static void post(int code) { comm::check(code, "halo exchange (MPI_Isend/MPI_Irecv)"); }
  void wait() {
    if (!requests_.empty())
      comm::check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall");
    requests_.clear();
  }
  /// n rows shaped like `like`'s (1-D, or rows of like.size(1) values).
  at::Tensor& buffer_for(const at::Tensor& like, std::int64_t n) {
    const auto shape = rows_like(like, n);
    if (!buffer_.defined() || buffer_.scalar_type() != like.scalar_type() || buffer_.sizes() != at::IntArrayRef(shape))
      buffer_ = at::empty(shape, like.options().requires_grad(false));
    return buffer_;
  }
  // Blocks (rows, m...) travel as rows of m... contiguous values: one message per neighbour for
  // the whole block (LOBPCG's products), not one per column.
  static std::int64_t row_width(const at::Tensor& t) {
    std::int64_t w = 1;
    for (std::int64_t d = 1; d < t.dim(); ++d) w *= t.size(d);
    return w;
  }
  static std::vector<std::int64_t> rows_like(const at::Tensor& t, std::int64_t n) {
    std::vector<std::int64_t> shape{n};
    for (std::int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
    return shape;
  }

  std::shared_ptr<const HaloPlan> plan_;
  std::vector<MPI_Request> requests_;
  at::Tensor buffer_;
};

}  // namespace einshard::sparse
