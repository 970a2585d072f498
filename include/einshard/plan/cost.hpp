#pragma once
/// @file
/// The cost model the planners choose with: rank-independent estimates (every rank must make the
/// same choice) of bytes, collectives, peak memory and arithmetic, forward and backward, turned
/// into a score by a policy. The machine constants are calibrated against bench/ on this kind of
/// machine (docs/performance.md).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "einshard/mesh_shape.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"

namespace einshard::plan {

/// Estimated work of a plan, per rank, forward and backward.
struct Estimate {
  double forward_bytes = 0, backward_bytes = 0;
  int forward_collectives = 0, backward_collectives = 0;
  double peak_bytes = 0;
  double flops = 0;  ///< forward arithmetic; backward counts twice this
  double forward_copy_bytes = 0, backward_copy_bytes = 0;  ///< local copies: packing, staging, slices

  Estimate& operator+=(const Estimate& o) {
    forward_bytes += o.forward_bytes;
    backward_bytes += o.backward_bytes;
    forward_collectives += o.forward_collectives;
    backward_collectives += o.backward_collectives;
    peak_bytes = std::max(peak_bytes, o.peak_bytes);
    flops += o.flops;
    forward_copy_bytes += o.forward_copy_bytes;
    backward_copy_bytes += o.backward_copy_bytes;
    return *this;
  }
};

/// Machine constants of the time model, fitted by bench/calibrate.cpp on the development machine
/// (2 cores shared with other jobs, Open MPI 4.1 over shared memory, one torch thread per rank; 2
/// ranks: docs/performance.md). Only their ratios matter to a choice.
struct Machine {
  double bytes_per_second = 2e9;        ///< the model's bytes per rank, through einshard's collectives
  double seconds_per_collective = 1e-5;  ///< a collective's fixed cost
  double flops_per_second = 1.5e10;      ///< one thread, float32 matrix products
  double copy_bytes_per_second = 1e9;    ///< a strided (packing or transposing) copy
};

/// Seconds (or, for Policy::memory, bytes then seconds) a policy assigns to an estimate.
inline double score(const Estimate& e, Policy policy, const Machine& m = {}) {
  const double fwd = e.forward_bytes / m.bytes_per_second +
                     e.forward_collectives * m.seconds_per_collective + e.flops / m.flops_per_second +
                     e.forward_copy_bytes / m.copy_bytes_per_second;
  const double bwd = e.backward_bytes / m.bytes_per_second +
                     e.backward_collectives * m.seconds_per_collective +
                     2 * e.flops / m.flops_per_second + e.backward_copy_bytes / m.copy_bytes_per_second;
  switch (policy) {
    case Policy::training: return fwd + bwd;
    case Policy::inference: return fwd;
    case Policy::communication: return (e.forward_bytes + e.backward_bytes) / m.bytes_per_second;
    case Policy::latency:
      return 100 * (e.forward_collectives + e.backward_collectives) * m.seconds_per_collective + fwd + bwd;
    case Policy::memory: return e.peak_bytes + 1e-3 * (fwd + bwd);
  }
  return fwd + bwd;
}

/// Average bytes a rank holds of a tensor in layout `l` (shards taken as even).
inline double average_bytes(const Layout& l, const std::map<std::string, std::int64_t, std::less<>>& global,
                            const MeshShape& mesh, std::int64_t element) {
  double n = static_cast<double>(element);
  for (const auto& [axis, group] : l.axes)
    n *= static_cast<double>(global.at(axis)) / (group.empty() ? 1 : mesh.size(group));
  return n;
}

/// Estimate of a list of unary steps.
inline Estimate estimate(const std::vector<Step>& steps,
                         const std::map<std::string, std::int64_t, std::less<>>& global,
                         const MeshShape& mesh, std::int64_t element) {
  Estimate total;
  for (const auto& s : steps) {
    const double in = average_bytes(s.before, global, mesh, element);
    const double out = average_bytes(s.after, global, mesh, element);
    const double P = s.group.empty() ? 1 : mesh.size(s.group);
    const double f = (P - 1) / P;
    // Along an inner dimension an all-gather stages its pieces and concatenates them, and a
    // reduce-scatter packs them rank-major first: one copy of the whole (comm/collectives.hpp).
    const bool inner = s.kind != StepKind::redistribute && s.kind != StepKind::permute && !s.axis.empty() &&
                       s.before.find(s.axis) > 0;
    const double gather_copy = inner ? 1 : 0;
    Estimate e;
    switch (s.kind) {
      case StepKind::all_reduce: e = {2 * f * in, 0, 1, 0, in, 0}; break;
      case StepKind::add_partial: e = {0, 2 * f * in, 0, 1, in, 0}; break;
      case StepKind::reduce_scatter: e = {f * in, f * in, 1, 1, in, 0, gather_copy * in, gather_copy * in}; break;
      case StepKind::gather_to_partial:
        e = {f * out, f * out, 1, 1, out, 0, gather_copy * out, gather_copy * out};
        break;
      case StepKind::split: e = {0, f * in, 0, 1, out, 0, out, gather_copy * in}; break;
      case StepKind::gather: e = {f * out, 0, 1, 0, out, 0, gather_copy * out, in}; break;
      case StepKind::redistribute: {
        // The share of its new piece a rank already holds: all of a whole or unchanged axis, one
        // shard's worth of an axis it held sharded otherwise.
        auto held = [&](const Layout& from, const Layout& to) {
          double h = 1;
          for (std::size_t i = 0; i < from.axes.size(); ++i)
            if (!from.axes[i].group.empty() && from.axes[i].group != to.axes[i].group)
              h /= mesh.size(from.axes[i].group);
          return h;
        };
        // Boxes that are not one contiguous run are packed by the sender and unpacked by the
        // receiver: charged as one copy of what moves.
        const double there = out * (1 - held(s.before, s.after)), back = in * (1 - held(s.after, s.before));
        e = {there, back, 1, 1, out, 0, there, back};
        break;
      }
      case StepKind::permute: break;
    }
    total += e;
  }
  return total;
}

}  // namespace einshard::plan
