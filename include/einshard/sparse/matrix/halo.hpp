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
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "einshard/comm/autograd.hpp"
#include "einshard/comm/backend.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/messages.hpp"
#include "einshard/comm/sparse_exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/sparse/matrix/kernels.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"

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

  /// Adds what this rank's plan holds (its layout is the matrix's, counted there): the ghost ids,
  /// the rows it sends and an entry per neighbour.
  void count_bytes(detail::HeldBytes& held) const {
    held.add(ghosts);
    held.add(send_rows);
    held.add(recv_ranks);
    held.add(recv_offsets);
    held.add(send_ranks);
    held.add(send_offsets);
  }

  /// Collective. `ghosts`: sorted unique global indices this rank needs and does not own.
  static std::shared_ptr<const HaloPlan> build(std::shared_ptr<const RowLayout> layout,
                                               const at::Tensor& ghosts_sorted) {
    auto plan = std::make_shared<HaloPlan>();
    const auto ids = detail::to_vector(ghosts_sorted);
    const auto owner = layout->owners(ids);
    // Group by owner; a stable sort keeps ascending global order within each owner.
    std::vector<std::size_t> order(ids.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return owner[a] < owner[b]; });
    std::vector<comm::Parcel<std::int64_t>> request;
    std::vector<std::int64_t> local_order;
    local_order.reserve(ids.size());
    for (auto i : order) {
      if (request.empty() || request.back().peer != owner[i]) request.push_back({owner[i], {}});
      request.back().values.push_back(ids[i]);
      local_order.push_back(ids[i]);
    }
    plan->ghosts = at::tensor(local_order, at::kLong);
    plan->recv_offsets.push_back(0);
    for (const auto& r : request) {
      plan->recv_ranks.push_back(r.peer);
      plan->recv_offsets.push_back(plan->recv_offsets.back() + static_cast<std::int64_t>(r.values.size()));
    }
    // The handshake: each owner learns, in the requester's order, which rows to send; only the
    // ranks that ask write to it (a sparse exchange: no step costs a rank O(P)).
    std::vector<std::int64_t> send;
    plan->send_offsets.push_back(0);
    for (const auto& a : comm::sparse_exchange(request, layout->comm())) {
      plan->send_ranks.push_back(a.peer);
      send.insert(send.end(), a.values.begin(), a.values.end());
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
///
/// A neighbour whose rows are one consecutive run of owned rows (every contiguous partition of a
/// mesh or stencil matrix) is sent straight from the owned tensor and, in reverse, added into it
/// as a run: no packing copy, no index gather (PETSc's scatter does the same). The receives
/// complete before the sends (`finish_receives`), so a product goes on with the rows that need
/// the ghosts while its neighbours read its data: with more ranks than cores, waiting for the
/// sends' acknowledgement first costs a time slice of the receiver's.
///
/// Tensors on the generic kernels (kernels.hpp: any device) are packed with `index_select` on
/// their device and travel through the comm/ backend their device calls for (MPI direct,
/// CUDA-aware or staged through host buffers; NCCL), in one blocking exchange: start() and
/// start_reverse() complete it, finish*() only add what came back.
class HaloExchange {
 public:
  explicit HaloExchange(std::shared_ptr<const HaloPlan> plan) : plan_(std::move(plan)) {
    const auto& p = *plan_;
    const auto rows = p.send_rows.to(at::kLong).contiguous();
    const auto* r = rows.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < p.send_ranks.size(); ++i) {
      const auto lo = p.send_offsets[i], hi = p.send_offsets[i + 1];
      bool run = hi > lo;
      for (auto k = lo + 1; run && k < hi; ++k) run = r[k] == r[k - 1] + 1;
      run_start_.push_back(run ? r[lo] : -1);
      packed_ = packed_ || !run;
    }
  }

  [[nodiscard]] const HaloPlan& plan() const { return *plan_; }

  /// Adds the buffers the exchange keeps between calls.
  void count_bytes(detail::HeldBytes& held) const {
    held.add(run_start_);
    held.add(buffer_);
    held.add(rows_);
    held.add(rows_on_device_);
    held.add(held_);
  }

  /// Posts the receives into `ghosts` (length ghost_count()) and sends the owned values of `owned`
  /// (length owned()) that the neighbours need. Both must stay alive, and `owned` unchanged, until
  /// finish(). Both may be contiguous blocks (rows, m): then whole rows travel.
  void start(const at::Tensor& owned, const at::Tensor& ghosts) {
    const auto& p = *plan_;
    if (detail::uses_generic(owned)) return exchange_overlapped(owned, ghosts, [] {});
    const auto elem = comm::datatype(owned.scalar_type());
    const auto width = row_width(owned);
    const auto size = owned.element_size() * width;
    messages_.wait();
    auto* recv = static_cast<char*>(ghosts.data_ptr());
    for (std::size_t i = 0; i < p.recv_ranks.size(); ++i)
      messages_.receive(recv + p.recv_offsets[i] * size, (p.recv_offsets[i + 1] - p.recv_offsets[i]) * width, elem,
                        p.recv_ranks[i], tag, p.layout->comm());
    if (p.send_ranks.empty()) return;
    held_ = owned.contiguous();  // what the sends read until finish()
    const auto* from = static_cast<const char*>(held_.data_ptr());
    char* packed = nullptr;
    if (packed_) {
      packed = static_cast<char*>(buffer_for(owned, p.send_count()).data_ptr());
      const auto* rows = send_rows().data_ptr<std::int64_t>();
      // A vector's row is one element: a copy of a size known here compiles to a move, where a
      // memcpy call of a run-time size per row took 50 µs of a 505 µs product (17,500 values
      // sent from an unstructured mesh cut in two).
      const auto pack = [&](auto bytes) {
        constexpr auto b = static_cast<std::int64_t>(decltype(bytes)::value);
        const auto width_bytes = b > 0 ? b : size;
        for (std::size_t i = 0; i < p.send_ranks.size(); ++i)
          if (run_start_[i] < 0)
            for (auto k = p.send_offsets[i]; k < p.send_offsets[i + 1]; ++k)
              std::memcpy(packed + k * width_bytes, from + rows[k] * width_bytes, static_cast<std::size_t>(width_bytes));
      };
      if (size == 8)
        pack(std::integral_constant<int, 8>{});
      else if (size == 4)
        pack(std::integral_constant<int, 4>{});
      else
        pack(std::integral_constant<int, 0>{});
    }
    for (std::size_t i = 0; i < p.send_ranks.size(); ++i) {
      const auto* send = run_start_[i] >= 0 ? from + run_start_[i] * size : packed + p.send_offsets[i] * size;
      messages_.send(send, (p.send_offsets[i + 1] - p.send_offsets[i]) * width, elem, p.send_ranks[i], tag,
                     p.layout->comm());
    }
  }
  /// The generic kernels' forward exchange: the ghosts of `owned` into `ghosts`, complete on
  /// return, with `overlap()` (work that needs no ghost: the interior rows' product) run while the
  /// messages travel. The backend posts every message, calls it, then waits (comm::Backend::exchange).
  template <class Overlap>
  void exchange_overlapped(const at::Tensor& owned, const at::Tensor& ghosts, Overlap&& overlap) {
    const auto& p = *plan_;
    messages_.wait();
    const auto src = owned.contiguous();
    const auto packed = p.send_count() > 0 ? src.index_select(0, send_rows_on(src)) : src;
    exchange(packed, p.send_ranks, p.send_offsets, ghosts, p.recv_ranks, p.recv_offsets, overlap);
  }
  /// The ghosts have arrived (the sends may still be in flight: finish() completes them).
  void finish_receives() { messages_.wait_receives(); }
  void finish() {
    messages_.wait();
    held_ = at::Tensor();
  }

  /// The ghosts of `owned`, exchanged (blocking).
  [[nodiscard]] at::Tensor ghosts_of(const at::Tensor& owned) {
    auto g = at::empty(rows_like(owned, plan_->ghost_count()), owned.options().requires_grad(false));
    start(owned, g);
    finish();
    return g;
  }

  /// Reverse: sends `ghosts` (contributions to rows other ranks own) back to their owners;
  /// finish_reverse adds what arrives into `owned`. Used by A^T x and by the forward's backward.
  /// `ghosts` must stay unchanged until finish_reverse().
  void start_reverse(const at::Tensor& ghosts) {
    const auto& p = *plan_;
    if (detail::uses_generic(ghosts)) {
      messages_.wait();
      exchange(ghosts.contiguous(), p.recv_ranks, p.recv_offsets, buffer_for(ghosts, p.send_count()), p.send_ranks,
               p.send_offsets, [] {});
      return;
    }
    const auto elem = comm::datatype(ghosts.scalar_type());
    const auto width = row_width(ghosts);
    const auto size = ghosts.element_size() * width;
    messages_.wait();
    auto& buffer = buffer_for(ghosts, p.send_count());
    auto* recv = static_cast<char*>(buffer.data_ptr());
    for (std::size_t i = 0; i < p.send_ranks.size(); ++i)
      messages_.receive(recv + p.send_offsets[i] * size, (p.send_offsets[i + 1] - p.send_offsets[i]) * width, elem,
                        p.send_ranks[i], tag, p.layout->comm());
    held_ = ghosts.contiguous();  // what the sends read until finish_reverse()
    const auto* send = static_cast<const char*>(held_.data_ptr());
    for (std::size_t i = 0; i < p.recv_ranks.size(); ++i)
      messages_.send(send + p.recv_offsets[i] * size, (p.recv_offsets[i + 1] - p.recv_offsets[i]) * width, elem,
                     p.recv_ranks[i], tag, p.layout->comm());
  }
  /// The generic kernels' reverse exchange: `ghosts` back to their owners, `overlap()` (which
  /// writes `owned`'s own part: the owned columns' product) run while the messages travel, then
  /// what arrived added into `owned`.
  template <class Overlap>
  void reverse_overlapped(const at::Tensor& ghosts, at::Tensor& owned, Overlap&& overlap) {
    const auto& p = *plan_;
    messages_.wait();
    exchange(ghosts.contiguous(), p.recv_ranks, p.recv_offsets, buffer_for(ghosts, p.send_count()), p.send_ranks,
             p.send_offsets, overlap);
    if (p.send_count() > 0) add_received(owned);
  }
  /// Adds what arrived into `owned` (the rows each neighbour's slice belongs to), then completes
  /// the sends.
  void finish_reverse(at::Tensor& owned) {
    finish_receives();
    if (plan_->send_count() > 0) add_received(owned);
    finish();
  }

 private:
  static constexpr int tag = 0x5a10;

  const at::Tensor& send_rows() {
    if (!rows_.defined()) rows_ = plan_->send_rows.to(at::kLong).contiguous();
    return rows_;
  }
  /// owned[rows of neighbour i] += its slice of buffer_, in the order the neighbours are listed (a
  /// row sent to several neighbours gets their contributions one after another).
  void add_received(at::Tensor& owned) {
    const auto& p = *plan_;
    if (detail::uses_generic(owned)) {
      owned.index_add_(0, send_rows_on(owned), buffer_);
      return;
    }
    const auto t = owned.scalar_type();
    const bool plain = t == at::kDouble || t == at::kFloat || t == at::kComplexDouble || t == at::kComplexFloat ||
                       t == at::kLong || t == at::kInt;
    if (!plain || !owned.is_contiguous() || t != buffer_.scalar_type()) {
      owned.index_add_(0, plan_->send_rows, buffer_);
      return;
    }
    const auto width = row_width(owned);
    AT_DISPATCH_ALL_TYPES_AND_COMPLEX(owned.scalar_type(), "einshard::sparse::HaloExchange", [&] {
      auto* __restrict to = owned.data_ptr<scalar_t>();
      const auto* __restrict from = buffer_.data_ptr<scalar_t>();
      for (std::size_t i = 0; i < p.send_ranks.size(); ++i) {
        const auto lo = p.send_offsets[i], hi = p.send_offsets[i + 1];
        if (run_start_[i] >= 0) {
          auto* __restrict t = to + run_start_[i] * width;
          const auto* __restrict f = from + lo * width;
          for (std::int64_t k = 0; k < (hi - lo) * width; ++k) t[k] += f[k];
          continue;
        }
        const auto* rows = send_rows().data_ptr<std::int64_t>();
        for (auto k = lo; k < hi; ++k)
          for (std::int64_t j = 0; j < width; ++j) to[rows[k] * width + j] += from[k * width + j];
      }
    });
  }
  /// send_rows on `like`'s device (the generic kernels' pack and add).
  const at::Tensor& send_rows_on(const at::Tensor& like) {
    if (!rows_on_device_.defined() || rows_on_device_.device() != like.device())
      rows_on_device_ = plan_->send_rows.to(like.device(), at::kLong);
    return rows_on_device_;
  }
  /// The generic kernels' exchange: the rows [send_offsets[i], send_offsets[i+1]) of `from` to
  /// send_ranks[i], those of `to` from recv_ranks[i], through the backend of `from`'s device,
  /// `overlap()` run once every message is posted.
  template <class Overlap>
  void exchange(const at::Tensor& from, const std::vector<int>& send_ranks, const std::vector<std::int64_t>& send_offsets,
                const at::Tensor& to, const std::vector<int>& recv_ranks, const std::vector<std::int64_t>& recv_offsets,
                Overlap&& overlap) {
    const auto width = row_width(from);
    const auto size = from.element_size() * width;
    auto* out = static_cast<char*>(to.data_ptr());
    auto* in = static_cast<char*>(from.data_ptr());
    std::vector<comm::Message> sends, recvs;
    for (std::size_t i = 0; i < send_ranks.size(); ++i)
      sends.push_back({send_ranks[i], in + send_offsets[i] * size, (send_offsets[i + 1] - send_offsets[i]) * width});
    for (std::size_t i = 0; i < recv_ranks.size(); ++i)
      recvs.push_back({recv_ranks[i], out + recv_offsets[i] * size, (recv_offsets[i + 1] - recv_offsets[i]) * width});
    const auto comm = plan_->layout->comm();
    using F = std::remove_reference_t<Overlap>;
    comm::backend_for(from, comm).exchange(sends, recvs, from, tag, comm, [](void* f) { (*static_cast<F*>(f))(); },
                                           const_cast<void*>(static_cast<const void*>(&overlap)));
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
  std::vector<std::int64_t> run_start_;  ///< per send neighbour: its first row when its rows are a run, else -1
  bool packed_ = false;                  ///< some neighbour's rows are not a run: start() packs them
  comm::Messages messages_;
  at::Tensor buffer_;
  at::Tensor rows_;  ///< send_rows as int64, for packing and adding
  at::Tensor rows_on_device_;  ///< send_rows on the generic kernels' device
  at::Tensor held_;  ///< what the sends read (a contiguous copy if need be), kept alive until they finish
};

namespace detail {

/// The halo pair. Forward: x (owned) -> x with ghosts appended; backward: the ghosts' gradients go
/// back to their owners and are added (the reverse exchange), so d/dx of a distributed product is
/// exact. `reverse` swaps the two (A^T's product: ghost contributions, the tail of a local-length
/// vector, to their owners).
struct HaloOp final : comm::CommOp {
  std::shared_ptr<HaloExchange> exchange;
  bool reverse;
  explicit HaloOp(std::shared_ptr<HaloExchange> e, bool reverse_pair = false)
      : exchange(std::move(e)), reverse(reverse_pair) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override {
    return reverse ? accumulate(x) : with_ghosts(x);
  }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
    return reverse ? with_ghosts(g) : accumulate(g);
  }

 private:
  [[nodiscard]] at::Tensor with_ghosts(const at::Tensor& x) const {
    const auto owned = x.contiguous();
    return at::cat({owned, exchange->ghosts_of(owned)});
  }
  [[nodiscard]] at::Tensor accumulate(const at::Tensor& full) const {
    const auto n = exchange->plan().owned();
    auto owned = full.narrow(0, 0, n).clone();
    exchange->start_reverse(full.narrow(0, n, full.numel() - n).contiguous());
    exchange->finish_reverse(owned);
    return owned;
  }
};

/// The halo exchange of one DSparseTensor object and its ghost buffer: the scratch its `const`
/// products write into. A copy gets its own (same plan, fresh buffers), so copies (`A + 1`,
/// `with_values`) never share buffers; one object is not to be used from two threads at once.
class HaloScratch {
 public:
  HaloScratch() = default;
  explicit HaloScratch(std::shared_ptr<const HaloPlan> plan)
      : plan_(std::move(plan)), exchange_(plan_ ? std::make_shared<HaloExchange>(plan_) : nullptr) {}
  HaloScratch(const HaloScratch& o) : HaloScratch(o.plan_) {}
  HaloScratch& operator=(const HaloScratch& o) {
    if (this != &o) *this = HaloScratch(o.plan_);
    return *this;
  }
  HaloScratch(HaloScratch&&) noexcept = default;
  HaloScratch& operator=(HaloScratch&&) noexcept = default;
  ~HaloScratch() = default;

  [[nodiscard]] const std::shared_ptr<HaloExchange>& exchange() const { return exchange_; }

  void count_bytes(HeldBytes& held) const {
    if (exchange_) exchange_->count_bytes(held);
    held.add(ghosts_);
  }
  /// The ghost buffer, (re)made for `like`'s dtype and columns: (ghosts) for a vector, (ghosts, k)
  /// for an (owned, k) block.
  at::Tensor& ghosts(const at::Tensor& like) {
    const auto k = like.dim() == 2 ? like.size(1) : std::int64_t{-1};
    const auto held = ghosts_.defined() && ghosts_.dim() == 2 ? ghosts_.size(1) : std::int64_t{-1};
    if (!ghosts_.defined() || ghosts_.scalar_type() != like.scalar_type() || held != k)
      ghosts_ = k < 0 ? at::empty({plan_->ghost_count()}, like.options().requires_grad(false))
                      : at::empty({plan_->ghost_count(), k}, like.options().requires_grad(false));
    return ghosts_;
  }

 private:
  std::shared_ptr<const HaloPlan> plan_;
  std::shared_ptr<HaloExchange> exchange_;
  at::Tensor ghosts_;
};

}  // namespace detail

}  // namespace einshard::sparse
