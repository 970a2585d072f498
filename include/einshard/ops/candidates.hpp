#pragma once
/// @file
/// `last_candidates()`: every compute layout the planner weighed for the last distributed
/// contraction on this thread, with its status (`selected`, `ranked`, `rejected`) and the reason:
/// its score under the policy the call resolved (plan/policy_scope.hpp), or why it was ruled out.

#include <limits>
#include <string>
#include <vector>

#include "einshard/exec/call.hpp"
#include "einshard/plan/plan.hpp"

namespace einshard {

struct Candidate {
  std::string compute;  ///< the sharding of every axis while the local einsum runs
  std::string status;   ///< "selected", "ranked" or "rejected"
  std::string reason;
  double score = std::numeric_limits<double>::infinity();  ///< infinite when rejected
};

/// The candidates of the last distributed call's plan, the selected one first, then the others by
/// rising score, then the rejected ones.
inline std::vector<Candidate> last_candidates() {
  const auto& p = last_plan();
  std::vector<Candidate> out;
  for (std::size_t i = 0; i < p.alternatives.size(); ++i) {
    const auto& a = p.alternatives[i];
    const auto best = p.alternatives.front().score;
    out.push_back({a.compute, i == 0 ? "selected" : "ranked",
                   i == 0 ? "lowest score " + std::to_string(a.score)
                          : "rank " + std::to_string(i + 1) + ": score " + std::to_string(a.score) + " (" +
                                std::to_string(a.score - best) + " above the selected)",
                   a.score});
  }
  for (const auto& r : p.rejected) out.push_back({r.compute, "rejected", r.reason});
  return out;
}

}  // namespace einshard
