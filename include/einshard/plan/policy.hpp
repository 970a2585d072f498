#pragma once
/// @file
/// What the planners weigh candidate plans by: a plan's estimated work (`Estimate`), the machine
/// constants that turn it into time, and the `Policy` that turns both into one score. Pure (no MPI,
/// no torch), so the planners need not see `Options`, which holds a `Policy` and a `Mesh`.

#include <algorithm>

namespace einshard {

/// How the planner weighs candidate plans. The named modes fix the weights.
enum class Policy { training, inference, memory, communication, latency };

/// The policy's name as the options and the explainer spell it.
inline const char* policy_name(Policy p) {
  switch (p) {
    case Policy::training: return "training";
    case Policy::inference: return "inference";
    case Policy::memory: return "memory";
    case Policy::communication: return "communication";
    case Policy::latency: return "latency";
  }
  return "?";
}

namespace plan {

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

}  // namespace plan
}  // namespace einshard
