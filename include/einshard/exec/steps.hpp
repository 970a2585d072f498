#pragma once
/// @file
/// The forward/backward pairs of distributed plans as `CommOp`s: the pairs over one group
/// (`comm/ops.hpp`) and the repartition over a schedule.

#include <ATen/ATen.h>
#include <mpi.h>

#include <utility>

#include "einshard/comm/autograd.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/comm/ops.hpp"
#include "einshard/plan/redistribute.hpp"

namespace einshard::exec {

using comm::AddPartialOp;
using comm::AllReduceOp;
using comm::GatherOp;
using comm::Pieces;
using comm::ReduceScatterOp;
using comm::SplitOp;

/// Any layout change as one all-to-all(v); the gradient goes back along the reverse schedule.
struct RedistributeOp final : comm::CommOp {
  MPI_Comm comm;
  plan::Schedule forward_schedule, backward_schedule;
  RedistributeOp(MPI_Comm c, plan::Schedule f, plan::Schedule b)
      : comm(c), forward_schedule(std::move(f)), backward_schedule(std::move(b)) {}
  [[nodiscard]] at::Tensor forward(const at::Tensor& x) const override {
    return comm::exchange_boxes(x, forward_schedule.out_shape, forward_schedule.sends,
                                forward_schedule.recvs, comm);
  }
  [[nodiscard]] at::Tensor backward(const at::Tensor& g) const override {
    return comm::exchange_boxes(g, backward_schedule.out_shape, backward_schedule.sends,
                                backward_schedule.recvs, comm);
  }
  /// The forward exchange into `out` (the result's shape and dtype, not overlapping `x`), outside
  /// autograd.
  at::Tensor forward_into(const at::Tensor& x, const at::Tensor& out) const {
    return comm::exchange_boxes(x, forward_schedule.out_shape, forward_schedule.sends, forward_schedule.recvs,
                                comm, 7101, out);
  }
};

}  // namespace einshard::exec
