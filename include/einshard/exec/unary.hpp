#pragma once
/// @file
/// Runs a distributed unary einshard (`x -> y` on one operand): agree on metadata, resolve every
/// shard size, plan, then run each step as a differentiable forward/backward pair.

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/steps.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/plan/redistribute.hpp"
#include "einshard/plan/unary.hpp"
#include "einshard/shapes.hpp"

namespace einshard {

namespace detail {
inline Plan& last_plan_storage() {
  thread_local Plan plan;
  return plan;
}
}  // namespace detail

/// The plan of the last distributed call on this thread (what ran, with its costs).
inline const Plan& last_plan() { return detail::last_plan_storage(); }

namespace exec {

/// Global extent of every axis, and the shard sizes of every (axis, group) a call meets.
struct SizeTable {
  std::map<std::string, std::int64_t, std::less<>> global;
  std::map<std::pair<std::string, std::string>, std::vector<std::int64_t>> shards;

  [[nodiscard]] const std::vector<std::int64_t>& of(const std::string& axis, const std::string& group) const {
    return shards.at({axis, group});
  }
};

/// Everything a unary call needs once the ranks agree: layouts, sizes, steps, and the message
/// schedules of its all-to-all steps (forward and backward, by step index).
struct UnaryCall {
  plan::Layout in, out;
  SizeTable sizes;
  std::vector<plan::Step> steps;
  std::map<std::size_t, std::pair<plan::Schedule, plan::Schedule>> schedules;
  bool scalar = false;  // a 0-d tensor standing for a one-axis spec
};

namespace detail {

inline std::int64_t bytes_of(const plan::Layout& l, const SizeTable& t, const Mesh& mesh,
                             std::int64_t element) {
  std::int64_t n = element;
  for (const auto& [axis, group] : l.axes)
    n *= group.empty() ? t.global.at(axis)
                       : t.of(axis, group)[static_cast<std::size_t>(mesh.coordinate(group))];
  return n;
}

inline plan::Schedule schedule(const plan::Layout& from, const plan::Layout& to, const SizeTable& t,
                               const Mesh& mesh) {
  std::vector<std::int64_t> global;
  for (const auto& p : from.axes) global.push_back(t.global.at(p.axis));
  return plan::schedule_redistribute(
      from, to, global,
      [&](std::size_t i, const std::string& g) -> const std::vector<std::int64_t>& {
        return t.of(from.axes[i].axis, g);
      },
      mesh.shape(), [&](int r) { return mesh.coordinates_of(r); }, mesh.rank(), mesh.size());
}

inline std::int64_t message_bytes(const std::vector<plan::Transfer>& ts, int me, std::int64_t element) {
  std::int64_t n = 0;
  for (const auto& t : ts)
    if (t.peer != me) n += t.box.numel() * element;
  return n;
}

}  // namespace detail

inline std::int64_t fingerprint(std::string_view source, std::size_t operand) {
  return static_cast<std::int64_t>(std::hash<std::string_view>{}(source) ^ (operand * 0x9e3779b97f4a7c15ull));
}

/// Collective over the mesh: checks the input on every rank and resolves all sizes.
inline UnaryCall prepare_unary(const notation::ExpressionView& e, const at::Tensor& x,
                               const Options& o) {
  const auto what = "einshard '" + std::string(e.source) + "'";
  if (!o.mesh) throw Error(what + ": distributed einshard operations require a mesh (.mesh = ...)");
  const Mesh& mesh = o.mesh;
  const auto& spec = e.input(0);
  std::int64_t fixed = 0;
  for (const auto& item : e.items_of(spec)) fixed += item.kind == notation::ItemKind::ellipsis ? 0 : 1;
  UnaryCall call;
  call.scalar = x.dim() == 0 && !spec.has_ellipsis && fixed == 1;
  const auto ndim = call.scalar ? 1 : x.dim();
  const bool rank_ok = spec.has_ellipsis ? ndim >= fixed : ndim == fixed;
  const auto local = describe(call.scalar ? x.reshape({1}) : x, fingerprint(e.source, 0),
                              rank_ok ? LocalFault::none : LocalFault::rank_mismatch);
  const auto ranks = agree(mesh.comm(), local, what,
                           std::to_string(fixed) + (spec.has_ellipsis ? " or more" : ""));

  if (e.output().has_ellipsis != spec.has_ellipsis)
    throw Error(what + ": a distributed unary operation needs '...' on both sides or neither");
  const auto ellipsis = ranks[0].ndim - fixed;
  call.in = plan::layout_of(e, spec, ellipsis, mesh.shape());
  call.out = plan::layout_of(e, e.output(), ellipsis, mesh.shape());

  // Input shard sizes, read off the ranks: replicas must agree, and so must given shapes.
  for (std::size_t i = 0; i < call.in.axes.size(); ++i) {
    const auto& [axis, group] = call.in.axes[i];
    const auto parts = group.empty() ? 1 : mesh.size(group);
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), -1);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const auto c = group.empty() ? 0 : mesh.shape().coordinate(group, mesh.coordinates_of(static_cast<int>(r)));
      auto& s = sizes[static_cast<std::size_t>(c)];
      const auto extent = ranks[r].sizes[i];
      if (s >= 0 && s != extent)
        throw Error(what + ": axis '" + axis + "' has extent " + std::to_string(s) + " on one rank but " +
                    std::to_string(extent) + " on rank " + std::to_string(r) +
                    (group.empty() ? " (it is not sharded, so every rank must hold all of it)"
                                   : " which holds the same shard over '" + group + "'"));
      s = extent;
    }
    if (!group.empty())
      if (const auto given = o.shapes.resolve(group, axis, parts); given && *given != sizes) {
        for (std::size_t c = 0; c < sizes.size(); ++c)
          if (sizes[c] != (*given)[c])
            throw Error(what + ": the shard of axis '" + axis + "' at coordinate " + std::to_string(c) +
                        " of '" + group + "' has " + std::to_string(sizes[c]) +
                        " elements, but the shapes metadata says " + std::to_string((*given)[c]));
      }
    std::int64_t total = 0;
    for (auto s : sizes) total += s;
    call.sizes.global[axis] = total;
    if (!group.empty()) call.sizes.shards[{axis, group}] = sizes;
  }
  // Output shard sizes: from the shapes metadata, else the split rule.
  for (const auto& [axis, group] : call.out.axes) {
    if (group.empty() || call.sizes.shards.contains({axis, group})) continue;
    const auto parts = mesh.size(group);
    const auto n = call.sizes.global.at(axis);
    auto sizes = o.shapes.resolve(group, axis, parts).value_or(compute_split_shapes(n, parts));
    std::int64_t total = 0;
    for (auto s : sizes) total += s;
    if (total != n)
      throw Error(what + ": the shapes metadata for axis '" + axis + "' on '" + group + "' sums to " +
                  std::to_string(total) + ", but the axis has " + std::to_string(n) + " elements");
    call.sizes.shards[{axis, group}] = std::move(sizes);
  }
  call.steps = plan::plan_unary(call.in, call.out, mesh.shape());
  for (std::size_t i = 0; i < call.steps.size(); ++i) {
    const auto& step = call.steps[i];
    if (step.kind == plan::StepKind::redistribute)
      call.schedules[i] = {detail::schedule(step.before, step.after, call.sizes, mesh),
                           detail::schedule(step.after, step.before, call.sizes, mesh)};
  }
  return call;
}

/// The plan with this rank's costs (no data moves).
inline Plan describe_unary(std::string_view source, const UnaryCall& call, const Mesh& mesh,
                           std::int64_t element) {
  Plan p;
  p.notation = std::string(source);
  for (std::size_t i = 0; i < call.steps.size(); ++i) {
    const auto& s = call.steps[i];
    PlanStep ps{plan::step_name(s.kind), s.group, s.axis, s.before.str(), s.after.str(), {}, {}};
    const auto in = detail::bytes_of(s.before, call.sizes, mesh, element);
    const auto out = detail::bytes_of(s.after, call.sizes, mesh, element);
    const std::int64_t P = s.group.empty() ? 1 : mesh.size(s.group);
    const StepCost all_reduce_in{2 * (P - 1) * in / P, 2 * (P - 1) * in / P, 1, in};
    const StepCost gather_from_in{out - in, out - in, 1, out};  // ring all-gather: in -> out
    const StepCost gather_from_out{in - out, in - out, 1, in};  // ring all-gather: out -> in
    switch (s.kind) {
      case plan::StepKind::all_reduce: ps.forward = all_reduce_in; break;
      case plan::StepKind::add_partial: ps.forward.peak_bytes = in; ps.backward = all_reduce_in; break;
      case plan::StepKind::reduce_scatter:
        ps.forward = {(P - 1) * in / P, (P - 1) * in / P, 1, out};
        ps.backward = gather_from_out;
        break;
      case plan::StepKind::gather_to_partial:
        ps.forward = gather_from_in;
        ps.backward = {(P - 1) * out / P, (P - 1) * out / P, 1, in};
        break;
      case plan::StepKind::split: ps.forward.peak_bytes = out; ps.backward = gather_from_out; break;
      case plan::StepKind::gather: ps.forward = gather_from_in; ps.backward.peak_bytes = in; break;
      case plan::StepKind::redistribute: {
        const auto& f = call.schedules.at(i).first;
        const int me = mesh.rank();
        ps.forward = {detail::message_bytes(f.sends, me, element), detail::message_bytes(f.recvs, me, element), 1, out};
        ps.backward = {ps.forward.bytes_received, ps.forward.bytes_sent, 1, in};
        break;
      }
      case plan::StepKind::permute: break;
    }
    p.steps.push_back(std::move(ps));
  }
  return p;
}

/// Runs the steps of a prepared call on `x`.
inline at::Tensor run_unary(std::string_view source, const UnaryCall& call, const at::Tensor& x,
                            const Mesh& mesh) {
  auto y = call.scalar ? x.reshape({1}) : x;
  for (std::size_t i = 0; i < call.steps.size(); ++i) {
    const auto& s = call.steps[i];
    auto pieces = [&] {
      return Pieces{mesh.comm(s.group), s.before.find(s.axis), call.sizes.of(s.axis, s.group),
                    mesh.coordinate(s.group)};
    };
    switch (s.kind) {
      case plan::StepKind::all_reduce:
        y = apply_op(y, c10::make_intrusive<AllReduceOp>(mesh.comm(s.group)));
        break;
      case plan::StepKind::add_partial:
        y = apply_op(y, c10::make_intrusive<AddPartialOp>(mesh.comm(s.group)));
        break;
      case plan::StepKind::reduce_scatter:
        y = apply_op(y, c10::make_intrusive<ReduceScatterOp>(pieces()));
        break;
      case plan::StepKind::gather_to_partial:
        y = apply_op(y, c10::make_intrusive<GatherOp>(pieces(), true));
        break;
      case plan::StepKind::split:
        y = apply_op(y, c10::make_intrusive<SplitOp>(pieces()));
        break;
      case plan::StepKind::gather:
        y = apply_op(y, c10::make_intrusive<GatherOp>(pieces(), false));
        break;
      case plan::StepKind::redistribute:
        y = apply_op(y, c10::make_intrusive<RedistributeOp>(mesh.comm(), call.schedules.at(i).first,
                                                            call.schedules.at(i).second));
        break;
      case plan::StepKind::permute:
        y = y.permute(s.permutation);
        break;
    }
  }
  einshard::detail::last_plan_storage() = describe_unary(source, call, mesh, x.element_size());
  return call.scalar && call.out.axes.size() == 1 ? y.reshape({}) : y;
}

}  // namespace exec
}  // namespace einshard
