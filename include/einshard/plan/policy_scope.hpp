#pragma once
/// @file
/// Which policy a call plans with, and policies beyond the named modes. Resolution order, as in the
/// original (reference/torch-einshard.md §2.9): the call's `.policy`, else the innermost
/// `PolicyScope` of this thread, else the process default (`set_default_policy`), else `training`.
/// A policy is a named mode or custom weights over the cost model's estimate.

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "einshard/plan/policy.hpp"

namespace einshard {

/// Custom weights: score = forward·t_fwd + backward·t_bwd + bytes·(bytes moved) +
/// collectives·(collective calls) + peak_bytes·(peak extra bytes), with t_fwd and t_bwd the cost
/// model's time estimates in seconds. `{.forward = 1, .backward = 0}` is `inference`.
struct PolicyWeights {
  double forward = 1;
  double backward = 1;
  double bytes = 0;
  double collectives = 0;
  double peak_bytes = 0;
  friend bool operator==(const PolicyWeights&, const PolicyWeights&) = default;
};

/// A named mode or custom weights.
class PlanPolicy {
 public:
  PlanPolicy(Policy mode = Policy::training) : mode_(mode) {}  // NOLINT: a mode is a policy
  PlanPolicy(PolicyWeights w) : weights_(w) {}                 // NOLINT: so are weights

  [[nodiscard]] Policy mode() const noexcept { return mode_; }
  [[nodiscard]] const std::optional<PolicyWeights>& weights() const noexcept { return weights_; }

  [[nodiscard]] double score(const plan::Estimate& e, const plan::Machine& m = {}) const {
    if (!weights_) return plan::score(e, mode_, m);
    const auto& w = *weights_;
    const double fwd = plan::score(e, Policy::inference, m);
    const double bwd = plan::score(e, Policy::training, m) - fwd;
    return w.forward * fwd + w.backward * bwd + w.bytes * (e.forward_bytes + e.backward_bytes) +
           w.collectives * (e.forward_collectives + e.backward_collectives) + w.peak_bytes * e.peak_bytes;
  }

  /// Equal policies, equal keys (for caches of prepared calls).
  [[nodiscard]] std::int64_t key() const noexcept {
    if (!weights_) return static_cast<std::int64_t>(mode_);
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (double v : {weights_->forward, weights_->backward, weights_->bytes, weights_->collectives,
                     weights_->peak_bytes}) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof v);
      h = (h ^ bits) * 0x100000001b3ull;
    }
    return static_cast<std::int64_t>(h | (std::uint64_t{1} << 62));
  }

  [[nodiscard]] std::string str() const {
    if (weights_) {
      const auto& w = *weights_;
      return "custom(forward " + std::to_string(w.forward) + ", backward " + std::to_string(w.backward) +
             ", bytes " + std::to_string(w.bytes) + ", collectives " + std::to_string(w.collectives) +
             ", peak_bytes " + std::to_string(w.peak_bytes) + ")";
    }
    return policy_name(mode_);
  }

  friend bool operator==(const PlanPolicy& a, const PlanPolicy& b) {
    return a.weights_ ? a.weights_ == b.weights_ : !b.weights_ && a.mode_ == b.mode_;
  }

 private:
  Policy mode_ = Policy::training;
  std::optional<PolicyWeights> weights_;
};

namespace detail {

struct DefaultPolicy {
  std::mutex mutex;
  PlanPolicy policy;
  static DefaultPolicy& instance() {
    static DefaultPolicy d;
    return d;
  }
};

inline std::vector<PlanPolicy>& policy_scopes() {
  thread_local std::vector<PlanPolicy> scopes;
  return scopes;
}

}  // namespace detail

/// The policy of calls that name none, outside any scope (all threads).
inline void set_default_policy(PlanPolicy p) {
  auto& d = detail::DefaultPolicy::instance();
  std::lock_guard lock(d.mutex);
  d.policy = p;
}
inline PlanPolicy default_policy() {
  auto& d = detail::DefaultPolicy::instance();
  std::lock_guard lock(d.mutex);
  return d.policy;
}

/// `es::PolicyScope scope(es::Policy::inference);`: calls on this thread that name no policy plan
/// with this one until the scope ends. Scopes nest; the innermost wins.
class PolicyScope {
 public:
  explicit PolicyScope(PlanPolicy p) : depth_(detail::policy_scopes().size()) {
    detail::policy_scopes().push_back(p);
  }
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;
  ~PolicyScope() { detail::policy_scopes().resize(depth_); }

 private:
  std::size_t depth_;
};

/// The policy a call plans with: its own option, the innermost scope, the default.
inline PlanPolicy resolve_policy(const std::optional<Policy>& call) {
  if (call) return *call;
  const auto& scopes = detail::policy_scopes();
  if (!scopes.empty()) return scopes.back();
  return default_policy();
}

}  // namespace einshard
