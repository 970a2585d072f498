#pragma once
/// @file
/// `Plan`: what a distributed call runs (or would run), step by step, with the traffic and memory
/// each step costs this rank, forward and backward. What `explain` returns and what a call records.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace einshard {

/// Traffic and memory of one direction of a step, for this rank. Collectives are counted by their
/// bandwidth-optimal algorithm's per-rank traffic (ring all-gather and reduce-scatter,
/// reduce-scatter + all-gather all-reduce); point-to-point steps by their exact messages.
struct StepCost {
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  int collectives = 0;           ///< communication calls (a point-to-point batch counts once)
  std::int64_t peak_bytes = 0;   ///< extra memory the step allocates beyond its input
};

/// A ring all-reduce of `bytes` over `P` ranks: each rank sends and receives 2(P-1)/P of it.
inline StepCost ring_all_reduce(std::int64_t bytes, std::int64_t P) {
  const auto moved = 2 * (P - 1) * bytes / P;
  return {moved, moved, 1, bytes};
}

struct PlanStep {
  std::string name;    ///< e.g. "allgather_forward_split_backward", "alltoall_repartition"
  std::string group;   ///< mesh group it communicates over ("" for local and all-to-all steps)
  std::string axis;    ///< axis it splits, gathers or scatters into
  std::string before;  ///< layout in notation form, e.g. "a/dp b"
  std::string after;
  StepCost forward, backward;
  int operand = -1;    ///< the input it applies to (0-based), or -1 for the result
};

/// A candidate the planner weighed: its compute layout (the sharding of every axis while the local
/// einsum runs) and the model's estimate, per rank.
struct PlanAlternative {
  std::string compute;
  double score = 0;  ///< the policy's score (seconds for the time-based policies)
  double forward_bytes = 0, backward_bytes = 0;
  int collectives = 0;  ///< forward and backward
  double peak_bytes = 0;
  double flops = 0;
};

/// A compute layout the planner ruled out, with the reason.
struct PlanRejected {
  std::string compute;
  std::string reason;
};

/// The plan of one call: its steps in order, with costs; for contractions also the candidates the
/// planner compared (cheapest first; the first is the one that runs) and those it ruled out.
struct Plan {
  std::string notation{};
  std::vector<PlanStep> steps{};
  std::vector<PlanAlternative> alternatives{};
  std::vector<PlanRejected> rejected{};

  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& s : steps) n.push_back(s.name);
    return n;
  }
  [[nodiscard]] StepCost total_forward() const { return total(&PlanStep::forward); }
  [[nodiscard]] StepCost total_backward() const { return total(&PlanStep::backward); }

  /// One line per step: name, group/axis, layouts, forward and backward bytes.
  [[nodiscard]] std::string str() const {
    std::string out = notation + "\n";
    for (const auto& s : steps) {
      out += "  ";
      if (s.operand >= 0) out += "input " + std::to_string(s.operand + 1) + ": ";
      out += s.name;
      if (!s.group.empty()) out += " [" + s.group + (s.axis.empty() ? "" : ", " + s.axis) + "]";
      out += ": " + s.before + " -> " + s.after + "  (fwd sent " +
             std::to_string(s.forward.bytes_sent) + " B, recv " +
             std::to_string(s.forward.bytes_received) + " B; bwd sent " +
             std::to_string(s.backward.bytes_sent) + " B, recv " +
             std::to_string(s.backward.bytes_received) + " B)\n";
    }
    for (std::size_t i = 0; i < alternatives.size(); ++i) {
      const auto& a = alternatives[i];
      out += std::string(i == 0 ? "  * " : "    ") + a.compute + ": score " + std::to_string(a.score) +
             ", fwd " + std::to_string(static_cast<std::int64_t>(a.forward_bytes)) + " B, bwd " +
             std::to_string(static_cast<std::int64_t>(a.backward_bytes)) + " B, " +
             std::to_string(a.collectives) + " collectives\n";
    }
    return out;
  }

 private:
  [[nodiscard]] StepCost total(StepCost PlanStep::*dir) const {
    StepCost t;
    for (const auto& s : steps) {
      const auto& c = s.*dir;
      t.bytes_sent += c.bytes_sent;
      t.bytes_received += c.bytes_received;
      t.collectives += c.collectives;
      t.peak_bytes = std::max(t.peak_bytes, c.peak_bytes);
    }
    return t;
  }
};

}  // namespace einshard
