#pragma once
/// @file
/// The executor of interval fetches (plan/halo.hpp): one axis at a time, nonblocking point-to-point
/// messages of whole slabs, local padding for the boundary, and the reverse exchange with
/// accumulation as the backward. Halos, windows, convolutions and rolls all run through it.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/autograd.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/mesh.hpp"
#include "einshard/plan/halo.hpp"
#include "einshard/plan/layout.hpp"

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

constexpr int fetch_tag = 7301;
constexpr int return_tag = 7302;

}  // namespace detail

/// One axis of an interval fetch as a forward/backward pair. Forward: this rank's requested rows,
/// assembled from the owners' shards and padded for the boundary. Backward: every requested row's
/// gradient goes back to its owner and is added there (ghost rows accumulate into the rows they
/// copy; padded replicate rows into the edge row; constant fill rows are dropped).
struct AxisExchangeOp final : CommOp {
  MPI_Comm comm;  ///< the axis's group (MPI_COMM_NULL when every piece is local)
  int me;         ///< this rank's coordinate in the group
  std::int64_t dim;
  plan::AxisExchange ex;
  plan::Edge edge;
  double fill;

  AxisExchangeOp(MPI_Comm c, int rank, std::int64_t d, plan::AxisExchange x, plan::Edge e, double f)
      : comm(c), me(rank), dim(d), ex(std::move(x)), edge(e), fill(f) {}

  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override {
    comm::require_cpu(x, "halo exchange");
    const auto in = x.contiguous();
    const auto& f = ex.fetch;
    auto shape = in.sizes().vec();
    shape[static_cast<std::size_t>(dim)] = ex.output();
    auto out = at::empty(shape, in.options());
    const detail::Slabs slabs(shape, dim);
    const auto elem = comm::datatype(in.scalar_type());
    auto fetched = out.narrow(dim, f.pad_left, f.fetched);
    std::vector<MPI_Request> requests;
    std::vector<std::pair<at::Tensor, const plan::Piece*>> unpack;  // receive buffers
    std::vector<at::Tensor> keep;                                   // packed sends in flight
    for (const auto& p : f.pieces) {
      const auto n = slabs.elements(p.length);
      if (p.owner == me || n == 0) continue;
      auto target = fetched.narrow(dim, p.target, p.length);
      void* where = target.data_ptr();
      if (slabs.outer != 1) {
        unpack.emplace_back(at::empty(target.sizes(), in.options()), &p);
        where = unpack.back().first.data_ptr();
      }
      requests.emplace_back();
      comm::check(MPI_Irecv(where, comm::count(n), elem, p.owner, detail::fetch_tag, comm, &requests.back()),
                  "MPI_Irecv");
    }
    for (const auto& [peer, pieces] : ex.sends)
      for (const auto& p : pieces) {
        const auto n = slabs.elements(p.length);
        if (n == 0) continue;
        auto source = in.narrow(dim, p.source, p.length);
        if (slabs.outer != 1) source = keep.emplace_back(source.contiguous());
        requests.emplace_back();
        comm::check(MPI_Isend(source.data_ptr(), comm::count(n), elem, peer, detail::fetch_tag, comm,
                              &requests.back()),
                    "MPI_Isend");
      }
    // The local rows (most of the result, usually) move while the messages are in flight.
    for (const auto& p : f.pieces)
      if (p.owner == me)
        fetched.narrow(dim, p.target, p.length).copy_(in.narrow(dim, p.source, p.length));
    if (f.pad_left + f.pad_right > 0 && edge == plan::Edge::constant) {
      out.narrow(dim, 0, f.pad_left).fill_(fill);
      out.narrow(dim, f.pad_left + f.fetched, f.pad_right).fill_(fill);
    }
    if (!requests.empty())
      comm::check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall");
    for (const auto& [buffer, p] : unpack) fetched.narrow(dim, p->target, p->length).copy_(buffer);
    if (f.pad_left + f.pad_right > 0 && edge == plan::Edge::replicate) {
      out.narrow(dim, 0, f.pad_left).copy_(fetched.narrow(dim, 0, 1).expand_as(out.narrow(dim, 0, f.pad_left)));
      auto right = out.narrow(dim, f.pad_left + f.fetched, f.pad_right);
      right.copy_(fetched.narrow(dim, f.fetched - 1, 1).expand_as(right));
    }
    return out;
  }

  [[nodiscard]] at::Tensor backward(const at::Tensor& grad) const override {
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
    std::vector<MPI_Request> requests;
    std::vector<std::pair<at::Tensor, const plan::Piece*>> accumulate;
    std::vector<at::Tensor> keep;
    for (const auto& [peer, pieces] : ex.sends)
      for (const auto& p : pieces) {
        const auto n = slabs.elements(p.length);
        if (n == 0) continue;
        auto& buffer = accumulate.emplace_back(at::empty(out.narrow(dim, p.source, p.length).sizes(), g.options()), &p).first;
        requests.emplace_back();
        comm::check(MPI_Irecv(buffer.data_ptr(), comm::count(n), elem, peer, detail::return_tag, comm,
                              &requests.back()),
                    "MPI_Irecv");
      }
    for (const auto& p : f.pieces) {
      const auto n = slabs.elements(p.length);
      if (p.owner == me || n == 0) continue;
      auto source = fetched.narrow(dim, p.target, p.length);
      if (!source.is_contiguous()) source = keep.emplace_back(source.contiguous());
      requests.emplace_back();
      comm::check(MPI_Isend(source.data_ptr(), comm::count(n), elem, p.owner, detail::return_tag, comm,
                            &requests.back()),
                  "MPI_Isend");
    }
    for (const auto& p : f.pieces)
      if (p.owner == me)
        out.narrow(dim, p.source, p.length).add_(fetched.narrow(dim, p.target, p.length));
    if (!requests.empty())
      comm::check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall");
    for (const auto& [buffer, p] : accumulate) out.narrow(dim, p->source, p->length).add_(buffer);
    return out;
  }
};

/// One axis of a stencil operation: where it is in the tensor, how it is split, and the group that
/// splits it ("" for a whole axis, whose fetch is all local).
struct StencilAxis {
  std::string name;
  std::int64_t dim = 0;
  std::string group;
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

/// Fetches along `axis`: every rank of its group asks for `requests[coordinate]` (all ranks of the
/// group must pass the same requests). Differentiable; collective over the axis's group.
inline at::Tensor fetch_axis(const at::Tensor& x, const StencilAxis& axis, const Mesh& mesh,
                             std::span<const plan::Interval> requests, plan::Edge edge, double fill) {
  const bool whole = axis.group.empty();
  const int me = whole ? 0 : mesh.coordinate(axis.group);
  auto ex = plan::plan_exchange(axis.shards, requests, edge, me, axis.name);
  const MPI_Comm comm = whole ? MPI_COMM_NULL : mesh.comm(axis.group);
  return apply_op(x, c10::make_intrusive<AxisExchangeOp>(comm, me, axis.dim, std::move(ex), edge, fill));
}

/// The agreed facts of a stencil call: every rank's description of every operand, checked.
/// `expected_dims[i]` is the number of dimensions operand i must have.
inline Agreed agree_stencil(const Mesh& mesh, std::span<const at::Tensor> xs,
                            std::span<const std::int64_t> expected_dims, std::int64_t fingerprint,
                            const std::string& what) {
  std::vector<RankInfo> mine;
  std::vector<std::string> expected;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    mine.push_back(describe(xs[i], fingerprint + static_cast<std::int64_t>(i),
                            xs[i].dim() == expected_dims[i] ? LocalFault::none : LocalFault::rank_mismatch));
    expected.push_back(std::to_string(expected_dims[i]));
  }
  return agree(mesh.comm(), mine, what, expected);
}

}  // namespace einshard::exec
