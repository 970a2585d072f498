#pragma once
/// @file
/// The forward/backward pairs over one group's collectives as `CommOp`s (split, gather,
/// all-reduce, reduce-scatter, add-partial): the notation's plan steps and the sparse part's
/// gathers and global sums are the same pairs.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/comm/autograd.hpp"

namespace einshard::comm {

/// Partial -> whole: sum over the group; the gradient of a whole tensor passes through.
struct AllReduceOp final : CommOp {
  MPI_Comm comm;
  explicit AllReduceOp(MPI_Comm c) : comm(c) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return all_reduce(x, comm); }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override { return g; }
};

/// Whole -> partial (Megatron's f): nothing moves forward; the partial gradients are summed.
/// `copy`: the result is handed to the caller, so it must not alias the input; a result consumed
/// inside the library (the operand of a local einsum) is the input itself.
struct AddPartialOp final : CommOp {
  MPI_Comm comm;
  bool copy;
  explicit AddPartialOp(MPI_Comm c, bool copy_result = true) : comm(c), copy(copy_result) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return copy ? x.clone() : x; }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override { return all_reduce(g, comm); }
};

namespace detail {

inline at::Tensor slice(const at::Tensor& x, std::int64_t dim, std::span<const std::int64_t> sizes,
                        int coordinate) {
  const auto c = static_cast<std::size_t>(coordinate);
  const auto offset = std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(c),
                                      std::int64_t{0});
  return x.narrow(dim, offset, sizes[c]).clone();
}

}  // namespace detail

/// Pieces of one axis over a group: their sizes by group coordinate, and this rank's coordinate.
struct Pieces {
  MPI_Comm comm;
  std::int64_t dim;
  std::vector<std::int64_t> sizes;
  int coordinate;

  [[nodiscard]] at::Tensor slice(const at::Tensor& x) const { return detail::slice(x, dim, sizes, coordinate); }
  [[nodiscard]] at::Tensor gather(const at::Tensor& x) const { return comm::all_gather(x, dim, sizes, comm); }
  [[nodiscard]] at::Tensor reduce_scatter(const at::Tensor& x) const {
    return comm::reduce_scatter(x, dim, sizes, comm);
  }
};

/// Whole -> shard: a local slice; the gradient's shards are gathered.
struct SplitOp final : CommOp {
  Pieces p;
  explicit SplitOp(Pieces pieces) : p(std::move(pieces)) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return p.slice(x); }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override { return p.gather(g); }
};

/// Shard -> whole: gather. Backward keeps this rank's slice of the (replicated) gradient, or, when
/// the result is a partial over the same group (`a/tp b -> a b // tp`), reduce-scatters it.
struct GatherOp final : CommOp {
  Pieces p;
  bool reduce_backward;
  GatherOp(Pieces pieces, bool reduce) : p(std::move(pieces)), reduce_backward(reduce) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return p.gather(x); }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
    return reduce_backward ? p.reduce_scatter(g) : p.slice(g);
  }
};

/// Partial -> shard: reduce-scatter; the gradient's shards are gathered.
struct ReduceScatterOp final : CommOp {
  Pieces p;
  explicit ReduceScatterOp(Pieces pieces) : p(std::move(pieces)) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override { return p.reduce_scatter(x); }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override { return p.gather(g); }
};

}  // namespace einshard::comm
