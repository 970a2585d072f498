#pragma once
/// @file
/// The executor of interval fetches (plan/halo.hpp): one axis at a time, nonblocking point-to-point
/// messages of whole slabs, local padding for the boundary, and the reverse exchange with
/// accumulation as the backward. Halos, windows, convolutions and rolls all run through it.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/comm/autograd.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/comm/messages.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/mesh.hpp"
#include "einshard/plan/halo.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/plan.hpp"

namespace einshard::exec {

namespace detail {

/// The slab of rows `[start, start + length)` of `dim` in a contiguous tensor: contiguous in memory
/// when every dimension before `dim` has extent 1 (then messages go straight from and into the
/// tensors, unpacked).
struct Slabs {
  std::int64_t outer = 1, inner = 1;
  Slabs(at::IntArrayRef shape, std::int64_t dim) {
    for (std::int64_t i = 0; i < dim; ++i) outer *= shape[static_cast<std::size_t>(i)];
    for (auto i = static_cast<std::size_t>(dim) + 1; i < shape.size(); ++i) inner *= shape[i];
  }
  [[nodiscard]] std::int64_t elements(std::int64_t rows) const { return outer * rows * inner; }
};

/// `count` runs of `bytes` bytes each, `src_stride` and `dst_stride` bytes apart: packing and
/// unpacking slabs. Thin slabs (one or a few elements per run) are common (a one-cell halo along
/// an inner axis), so small run sizes get fixed-size copies the compiler inlines.
inline void copy_runs(char* dst, std::int64_t dst_stride, const char* src, std::int64_t src_stride,
                      std::int64_t count, std::int64_t bytes) {
  const auto runs = [&]<std::size_t B>() {
    for (std::int64_t i = 0; i < count; ++i) std::memcpy(dst + i * dst_stride, src + i * src_stride, B);
  };
  switch (bytes) {
    case 4: return runs.template operator()<4>();
    case 8: return runs.template operator()<8>();
    case 16: return runs.template operator()<16>();
    case 32: return runs.template operator()<32>();
    default:
      for (std::int64_t i = 0; i < count; ++i)
        std::memcpy(dst + i * dst_stride, src + i * src_stride, static_cast<std::size_t>(bytes));
  }
}

constexpr int fetch_tag = 7301;
constexpr int return_tag = 7302;

}  // namespace detail

/// Whether a prepared exchange (ops/halo.hpp, `PreparedHalo`) met a fault: this rank's operand was
/// not the one it was prepared for, or a peer's marker came in place of its rows. The axes of one
/// call share it, so a rank that learns of a fault on one axis sends markers on the next and every
/// exchange its peers wait for still completes.
struct ExchangeFault {
  bool any = false;
};

/// One axis of an interval fetch as a forward/backward pair. Forward: this rank's requested rows,
/// assembled from the owners' shards and padded for the boundary. Backward: every requested row's
/// gradient goes back to its owner and is added there (ghost rows accumulate into the rows they
/// copy; padded replicate rows into the edge row; constant fill rows are dropped).
struct AxisExchangeOp final : comm::CommOp {
  MPI_Comm comm;  ///< the axis's group (MPI_COMM_NULL when every piece is local)
  int me;         ///< this rank's coordinate in the group
  std::int64_t dim;
  std::shared_ptr<const plan::AxisExchange> plan;  ///< shared with the call cache
  const plan::AxisExchange& ex;
  plan::Edge edge;
  double fill;
  std::shared_ptr<ExchangeFault> fault;  ///< a prepared call's (null: the call was agreed)

  AxisExchangeOp(MPI_Comm c, int rank, std::int64_t d, std::shared_ptr<const plan::AxisExchange> x, plan::Edge e,
                 double f, std::shared_ptr<ExchangeFault> fl = {})
      : comm(c), me(rank), dim(d), plan(std::move(x)), ex(*plan), edge(e), fill(f), fault(std::move(fl)) {}

  /// An exchange in flight: the result with its local rows in place, the messages posted.
  struct InFlight {
    at::Tensor in, out;
    comm::Messages messages;
    std::unique_ptr<char[]> recv_buffer, send_buffer;
    at::Device device = at::kCPU;  ///< of the input: rows of a device tensor travel through host memory
  };

  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return finish(start(x)); }

  /// Posts the messages and copies the local rows; `finish` waits and completes the result. Work
  /// that needs only local rows can run in between (einconv's interior, without autograd).
  [[nodiscard]] InFlight start(const at::Tensor& x) const {
    InFlight flight;
    flight.device = x.device();
    flight.in = (x.device().is_cpu() ? x : x.cpu()).contiguous();
    const auto& in = flight.in;
    const auto& f = ex.fetch;
    auto shape = in.sizes().vec();
    shape[static_cast<std::size_t>(dim)] = ex.output();
    flight.out = comm::pooled_empty(shape, in.options());
    auto& out = flight.out;
    const detail::Slabs slabs(shape, dim);
    const auto elem = comm::datatype(in.scalar_type());
    // Rows move as raw bytes: a run of rows of one outer index is contiguous, and with nothing
    // before `dim` (outer == 1) a whole piece is, so its message goes straight from `in` into
    // `out`; otherwise pieces are packed into one buffer per direction (a torch view or copy per
    // piece costs about as much as a small message).
    const bool flat = slabs.outer == 1;
    const auto row_bytes = slabs.inner * static_cast<std::int64_t>(in.element_size());
    const auto in_rows = in.size(dim), out_rows = ex.output();
    const auto* in_bytes = static_cast<const char*>(in.data_ptr());
    auto* out_bytes = static_cast<char*>(out.data_ptr());
    auto in_at = [&](std::int64_t o, std::int64_t row) { return in_bytes + (o * in_rows + row) * row_bytes; };
    auto out_at = [&](std::int64_t o, std::int64_t row) {
      return out_bytes + (o * out_rows + f.pad_left + row) * row_bytes;
    };
    auto& recv_buffer = flight.recv_buffer;
    auto& send_buffer = flight.send_buffer;
    const bool marked = fault && fault->any;  // markers go in place of rows this rank cannot vouch for
    if (!flat) {
      std::int64_t recv_bytes = 0, send_bytes = 0;
      for (const auto& p : f.pieces) recv_bytes += p.owner == me ? 0 : slabs.outer * p.length * row_bytes;
      for (const auto& [peer, pieces] : ex.sends)
        for (const auto& p : pieces) send_bytes += slabs.outer * p.length * row_bytes;
      recv_buffer = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(recv_bytes));
      send_buffer = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(send_bytes));
    }
    char* send_at = send_buffer.get();
    auto& messages = flight.messages;
    std::int64_t received = 0;
    for (const auto& p : f.pieces) {
      const auto n = slabs.elements(p.length);
      if (p.owner == me || n == 0) continue;
      void* where = flat ? out_at(0, p.target) : recv_buffer.get() + received;
      if (!flat) received += slabs.outer * p.length * row_bytes;
      messages.receive(where, n, elem, p.owner, detail::fetch_tag, comm);
    }
    for (const auto& [peer, pieces] : ex.sends)
      for (const auto& p : pieces) {
        const auto n = slabs.elements(p.length);
        if (n == 0) continue;
        if (marked) {
          messages.send_marker(elem, peer, detail::fetch_tag, comm);
          continue;
        }
        const void* from = in_at(0, p.source);
        if (!flat) {
          from = send_at;
          detail::copy_runs(send_at, p.length * row_bytes, in_at(0, p.source), in_rows * row_bytes, slabs.outer,
                            p.length * row_bytes);
          send_at += slabs.outer * p.length * row_bytes;
        }
        messages.send(from, n, elem, peer, detail::fetch_tag, comm);
      }
    // The local rows (most of the result, usually) move while the messages are in flight. Many
    // runs of a large piece go as one tensor copy (torch's vectorized strided copy beats a memcpy
    // per run there, docs/performance.md); one run, or a small piece, by memcpy (a tensor copy's
    // views and dispatch cost more than a small piece's bytes).
    for (const auto& p : f.pieces) {
      if (p.owner != me || p.length == 0) continue;
      if (slabs.outer > 1 && slabs.outer * p.length * row_bytes >= (std::int64_t{1} << 16))
        out.narrow(dim, f.pad_left + p.target, p.length).copy_(in.narrow(dim, p.source, p.length));
      else
        detail::copy_runs(out_at(0, p.target), out_rows * row_bytes, in_at(0, p.source), in_rows * row_bytes,
                          slabs.outer, p.length * row_bytes);
    }
    if (f.pad_left + f.pad_right > 0 && edge == plan::Edge::constant) {
      out.narrow(dim, 0, f.pad_left).fill_(fill);
      out.narrow(dim, f.pad_left + f.fetched, f.pad_right).fill_(fill);
    }
    return flight;
  }

  [[nodiscard]] at::Tensor finish(InFlight flight) const {
    auto& out = flight.out;
    const auto& f = ex.fetch;
    const detail::Slabs slabs(out.sizes(), dim);
    const bool flat = slabs.outer == 1;
    const auto row_bytes = slabs.inner * static_cast<std::int64_t>(out.element_size());
    const auto out_rows = ex.output();
    auto* out_bytes = static_cast<char*>(out.data_ptr());
    auto out_at = [&](std::int64_t o, std::int64_t row) {
      return out_bytes + (o * out_rows + f.pad_left + row) * row_bytes;
    };
    if (!fault)
      flight.messages.wait();
    else if (!flight.messages.wait_whole())
      fault->any = true;
    const char* recv_at = flight.recv_buffer.get();
    for (const auto& p : f.pieces)
      if (!flat && p.owner != me) {
        detail::copy_runs(out_at(0, p.target), out_rows * row_bytes, recv_at, p.length * row_bytes, slabs.outer,
                          p.length * row_bytes);
        recv_at += slabs.outer * p.length * row_bytes;
      }
    if (f.pad_left + f.pad_right > 0 && edge == plan::Edge::replicate) {
      const auto rows = out.narrow(dim, f.pad_left, f.fetched);
      out.narrow(dim, 0, f.pad_left).copy_(rows.narrow(dim, 0, 1).expand_as(out.narrow(dim, 0, f.pad_left)));
      auto right = out.narrow(dim, f.pad_left + f.fetched, f.pad_right);
      right.copy_(rows.narrow(dim, f.fetched - 1, 1).expand_as(right));
    }
    return flight.device.is_cpu() ? out : out.to(flight.device);
  }

  [[nodiscard]] at::Tensor backward(const at::Tensor& grad) const override {
    if (!grad.device().is_cpu()) return backward(grad.cpu()).to(grad.device());
    const auto g = grad.contiguous();
    const auto& f = ex.fetch;
    auto fetched = g.narrow(dim, f.pad_left, f.fetched);
    if (edge == plan::Edge::replicate && f.pad_left + f.pad_right > 0) {
      fetched = fetched.clone();
      fetched.narrow(dim, 0, 1).add_(g.narrow(dim, 0, f.pad_left).sum(dim, true));
      fetched.narrow(dim, f.fetched - 1, 1)
          .add_(g.narrow(dim, f.pad_left + f.fetched, f.pad_right).sum(dim, true));
    }
    auto shape = g.sizes().vec();
    shape[static_cast<std::size_t>(dim)] = ex.local;
    auto out = at::zeros(shape, g.options());
    const detail::Slabs slabs(shape, dim);
    const auto elem = comm::datatype(g.scalar_type());
    comm::Messages messages;
    std::vector<std::pair<at::Tensor, const plan::Piece*>> accumulate;
    std::vector<at::Tensor> keep;
    for (const auto& [peer, pieces] : ex.sends)
      for (const auto& p : pieces) {
        const auto n = slabs.elements(p.length);
        if (n == 0) continue;
        auto& buffer = accumulate.emplace_back(at::empty(out.narrow(dim, p.source, p.length).sizes(), g.options()), &p).first;
        messages.receive(buffer.data_ptr(), n, elem, peer, detail::return_tag, comm);
      }
    for (const auto& p : f.pieces) {
      const auto n = slabs.elements(p.length);
      if (p.owner == me || n == 0) continue;
      auto source = fetched.narrow(dim, p.target, p.length);
      if (!source.is_contiguous()) source = keep.emplace_back(source.contiguous());
      messages.send(source.data_ptr(), n, elem, p.owner, detail::return_tag, comm);
    }
    for (const auto& p : f.pieces)
      if (p.owner == me)
        out.narrow(dim, p.source, p.length).add_(fetched.narrow(dim, p.target, p.length));
    messages.wait();
    for (const auto& [buffer, p] : accumulate) out.narrow(dim, p->source, p->length).add_(buffer);
    return out;
  }
};

/// One axis of a stencil operation: where it is in the tensor, how it is split, and the group that
/// splits it (empty for a whole axis, whose fetch is all local).
struct StencilAxis {
  std::string name;
  std::int64_t dim = 0;
  Group group;
  std::vector<std::int64_t> shards;  ///< by group coordinate; one entry (the extent) when whole
};

/// The axes of `layout` with their shard sizes from the agreed size table.
inline std::vector<StencilAxis> stencil_axes(const plan::Layout& layout, const SizeTable& sizes) {
  std::vector<StencilAxis> axes;
  for (std::size_t d = 0; d < layout.axes.size(); ++d) {
    const auto& [axis, group] = layout.axes[d];
    axes.push_back({axis, static_cast<std::int64_t>(d), group,
                    group.empty() ? std::vector<std::int64_t>{sizes.global.at(axis)} : sizes.of(axis, group)});
  }
  return axes;
}

/// This rank's coordinate in the group splitting `axis` (0 for a whole axis).
inline int coordinate(const StencilAxis& axis, const Mesh& mesh) {
  return axis.group.empty() ? 0 : mesh.coordinate(axis.group);
}

/// The exchange of this rank along `axis` when every rank of its group asks for
/// `requests[coordinate]`; `what` names the call in errors.
inline std::shared_ptr<const plan::AxisExchange> plan_axis(const StencilAxis& axis, const Mesh& mesh,
                                                          std::span<const plan::Interval> requests, plan::Edge edge,
                                                          std::string_view what = {}) {
  return std::make_shared<const plan::AxisExchange>(
      plan::plan_exchange(axis.shards, requests, edge, coordinate(axis, mesh), axis.name, what));
}

/// Runs a planned exchange along `axis`; differentiable, collective over the axis's group. With
/// `fault`, a prepared call's: markers instead of rows once it is set, and set by a marker received.
inline at::Tensor exchange_axis(const at::Tensor& x, const StencilAxis& axis, const Mesh& mesh,
                                std::shared_ptr<const plan::AxisExchange> ex, plan::Edge edge, double fill,
                                std::shared_ptr<ExchangeFault> fault = {}) {
  return comm::apply_op(x, c10::make_intrusive<AxisExchangeOp>(
                               axis.group.empty() ? MPI_COMM_NULL : mesh.comm(axis.group), coordinate(axis, mesh),
                               axis.dim, std::move(ex), edge, fill, std::move(fault)));
}

/// The plan step of an exchange along `axis` run on this rank's tensor of shape `shape`, which it
/// then extends to the exchange's output. Bytes are AxisExchangeOp's messages (rows times the
/// bytes of a row); backward mirrors forward, every fetched row's gradient going back to its
/// owner. A whole axis's exchange is local padding.
inline PlanStep describe_exchange(const StencilAxis& axis, const plan::AxisExchange& ex, const Mesh& mesh,
                                  std::vector<std::int64_t>& shape, std::int64_t element, const std::string& layout) {
  const detail::Slabs slabs(shape, axis.dim);
  const auto bytes = [&](std::int64_t rows) { return slabs.elements(rows) * element; };
  const int me = coordinate(axis, mesh);
  const auto sent = bytes(ex.rows_sent(me)), received = bytes(ex.rows_received(me));
  const int messages = sent + received > 0 ? 1 : 0;
  // Slabs not contiguous in memory (something before the axis) travel through packing buffers.
  const auto packed = slabs.outer == 1 ? 0 : sent + received;
  shape[static_cast<std::size_t>(axis.dim)] = ex.output();
  return {axis.group.empty() ? "pad" : "halo_forward_accumulate_backward",
          axis.group.name(),
          axis.name,
          layout,
          layout,
          {sent, received, messages, bytes(ex.output()) + packed},
          {received, sent, messages, bytes(ex.local) + sent + (packed > 0 ? received : 0)},
          -1};
}

/// Agrees on a stencil call's operands (collective over the mesh; exec/agreement.hpp): in one small
/// all-reduce when the shards are cut the usual way, else by all-gathering every rank's
/// descriptions, checked. `layout` is operand 0's; the others must be whole tensors with
/// `expected_dims[i]` dimensions (operand 0 with as many as its layout).
inline AgreedOperands agree_stencil(const Mesh& mesh, std::span<const at::Tensor> xs, const plan::Layout& layout,
                                    std::span<const std::int64_t> expected_dims, std::int64_t fingerprint,
                                    const Shapes& shapes, const std::string& what) {
  std::vector<comm::RankInfo> mine;
  std::vector<plan::Layout> layouts;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    mine.push_back(comm::describe(xs[i], fingerprint + static_cast<std::int64_t>(i),
                                  xs[i].dim() == expected_dims[i] ? comm::LocalFault::none
                                                                  : comm::LocalFault::rank_mismatch));
    layouts.push_back(i == 0 ? layout : plan::Layout{std::vector<plan::Placement>(static_cast<std::size_t>(expected_dims[i])), {}});
  }
  auto a = agree_summarized(mesh, std::move(mine), std::move(layouts), fingerprint, shapes, 0);
  a.check(what, [&](std::size_t i) { return std::to_string(expected_dims[i]); });
  return a;
}

}  // namespace einshard::exec
