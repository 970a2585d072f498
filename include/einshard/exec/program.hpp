#pragma once
/// @file
/// A list of plan steps made runnable: the message schedules of its all-to-all steps computed once,
/// a runner that applies each step as a differentiable pair, and the cost report of each step.

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "einshard/exec/fold.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/exec/steps.hpp"
#include "einshard/mesh.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/plan/redistribute.hpp"
#include "einshard/plan/step.hpp"

namespace einshard::exec {

/// A plan's steps with everything they need at run time resolved when the program is made: each
/// communicating step's forward/backward op (communicator, pieces, schedules), which every call
/// shares and each recorded autograd node holds by reference, so a call looks nothing up and
/// copies no schedule.
struct Program {
  std::vector<plan::Step> steps;
  /// By step index: the step's op (null for permute).
  std::vector<c10::intrusive_ptr<comm::CommOp>> ops;
  /// By step index: the step's group's communicator, and for split, gather and reduce-scatter
  /// steps the axis's pieces over it.
  std::vector<Pieces> pieces;
};

namespace detail {

inline plan::Schedule schedule(const plan::Layout& from, const plan::Layout& to, const SizeTable& t,
                               const Mesh& mesh) {
  std::vector<std::int64_t> global;
  for (const auto& p : from.axes) global.push_back(t.global.at(p.axis));
  return plan::schedule_redistribute(
      from, to, global,
      [&](std::size_t i, const Group& g) -> const std::vector<std::int64_t>& {
        return t.of(from.axes[i].axis, g);
      },
      mesh.shape(), [&](int r) { return mesh.coordinates_of(r); }, mesh.rank(), mesh.size());
}

inline std::int64_t bytes_of(const plan::Layout& l, const SizeTable& t, const Mesh& mesh,
                             std::int64_t element) {
  std::int64_t n = element;
  for (const auto& [axis, group] : l.axes)
    n *= group.empty() ? t.global.at(axis)
                       : t.of(axis, group)[static_cast<std::size_t>(mesh.coordinate(group))];
  return n;
}

inline std::int64_t message_bytes(const std::vector<plan::Transfer>& ts, int me, std::int64_t element) {
  std::int64_t n = 0;
  for (const auto& t : ts)
    if (t.peer != me) n += t.box.numel() * element;
  return n;
}

/// Forward and backward cost of the all-to-all(v) `op` on rank `me`, each from its own schedule:
/// the backward's is not the forward's reversed where a layout is replicated over a mesh dimension
/// the other splits (every replica receives the whole gradient). A rank with no message to post in
/// a direction makes no call there, as in an exchange of halo rows (exec/halo.hpp).
/// `out_bytes`/`in_bytes`: the new tensor's and the input's size.
inline std::pair<StepCost, StepCost> redistribute_cost(const RedistributeOp& op, int me, std::int64_t element,
                                                       std::int64_t out_bytes, std::int64_t in_bytes) {
  const auto exchange = [&](const plan::Schedule& s, std::int64_t peak) {
    const auto sent = message_bytes(s.sends, me, element), received = message_bytes(s.recvs, me, element);
    return StepCost{sent, received, sent + received > 0 ? 1 : 0, peak};
  };
  return {exchange(op.forward_schedule, out_bytes), exchange(op.backward_schedule, in_bytes)};
}

}  // namespace detail

/// `internal`: the program's input is not the caller's tensor, or its result is not handed to the
/// caller, so the result may alias the input (an add-partial step then copies nothing).
inline Program make_program(std::vector<plan::Step> steps, const SizeTable& t, const Mesh& mesh,
                            bool internal = false) {
  Program p{std::move(steps), {}, {}};
  p.ops.resize(p.steps.size());
  p.pieces.resize(p.steps.size(), Pieces{MPI_COMM_NULL, 0, {}, 0});
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const auto& s = p.steps[i];
    auto& pieces = p.pieces[i];
    pieces.comm = s.group.empty() ? MPI_COMM_NULL : mesh.comm(s.group);
    switch (s.kind) {
      case plan::StepKind::redistribute:
        p.ops[i] = c10::make_intrusive<RedistributeOp>(mesh.comm(), detail::schedule(s.before, s.after, t, mesh),
                                                       detail::schedule(s.after, s.before, t, mesh));
        break;
      case plan::StepKind::all_reduce: p.ops[i] = c10::make_intrusive<FoldingAllReduceOp>(pieces.comm); break;
      case plan::StepKind::add_partial:
        // Over the whole mesh its backward can carry a pending record (exec/fold.hpp).
        if (mesh.size(s.group) == mesh.size())
          p.ops[i] = c10::make_intrusive<GuardedAddPartialOp>(pieces.comm, mesh.comm(),
                                                              detail::bytes_of(s.before, t, mesh, 1), !internal);
        else
          p.ops[i] = c10::make_intrusive<AddPartialOp>(pieces.comm, !internal);
        break;
      case plan::StepKind::reduce_scatter:
      case plan::StepKind::gather_to_partial:
      case plan::StepKind::split:
      case plan::StepKind::gather:
        pieces.dim = s.before.find(s.axis);
        pieces.sizes = t.of(s.axis, s.group);
        pieces.coordinate = mesh.coordinate(s.group);
        if (s.kind == plan::StepKind::reduce_scatter)
          p.ops[i] = c10::make_intrusive<ReduceScatterOp>(pieces);
        else if (s.kind == plan::StepKind::split)
          p.ops[i] = c10::make_intrusive<SplitOp>(pieces);
        else
          p.ops[i] = c10::make_intrusive<GatherOp>(pieces, s.kind == plan::StepKind::gather_to_partial);
        break;
      case plan::StepKind::permute: break;
    }
  }
  return p;
}

/// Applies the steps to `x` (whose layout is the first step's `before`). A step whose input needs
/// no gradient (or with grad mode off) runs its op's forward directly: no autograd node.
inline at::Tensor run(const Program& p, at::Tensor x) {
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    x = p.steps[i].kind == plan::StepKind::permute ? x.permute(p.steps[i].permutation) : comm::apply_op(x, p.ops[i]);
  return x;
}

/// This rank's cost of each step, appended to `out` (tagged with `operand`).
inline void describe(const Program& p, const SizeTable& t, const Mesh& mesh, std::int64_t element,
                     int operand, std::vector<PlanStep>& out) {
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const auto& s = p.steps[i];
    PlanStep ps{plan::step_name(s.kind), s.group.name(), s.axis, s.before.str(), s.after.str(), {}, {}, operand};
    const auto in = detail::bytes_of(s.before, t, mesh, element);
    const auto outb = detail::bytes_of(s.after, t, mesh, element);
    const std::int64_t P = s.group.empty() ? 1 : mesh.size(s.group);
    const StepCost all_reduce_in = ring_all_reduce(in, P);
    const StepCost gather_from_in{outb - in, outb - in, 1, outb};  // ring all-gather: in -> out
    const StepCost gather_from_out{in - outb, in - outb, 1, in};   // ring all-gather: out -> in
    switch (s.kind) {
      case plan::StepKind::all_reduce: ps.forward = all_reduce_in; break;
      case plan::StepKind::add_partial:
        ps.forward.peak_bytes = in;
        ps.backward = all_reduce_in;
        break;
      case plan::StepKind::reduce_scatter:
        ps.forward = {(P - 1) * in / P, (P - 1) * in / P, 1, outb};
        ps.backward = gather_from_out;
        break;
      case plan::StepKind::gather_to_partial:
        ps.forward = gather_from_in;
        ps.backward = {(P - 1) * outb / P, (P - 1) * outb / P, 1, in};
        break;
      case plan::StepKind::split:
        ps.forward.peak_bytes = outb;
        ps.backward = gather_from_out;
        break;
      case plan::StepKind::gather:
        ps.forward = gather_from_in;
        ps.backward.peak_bytes = in;
        break;
      case plan::StepKind::redistribute: {
        std::tie(ps.forward, ps.backward) =
            detail::redistribute_cost(static_cast<const RedistributeOp&>(*p.ops[i]), mesh.rank(), element, outb, in);
        break;
      }
      case plan::StepKind::permute: break;
    }
    out.push_back(std::move(ps));
  }
}

}  // namespace einshard::exec
