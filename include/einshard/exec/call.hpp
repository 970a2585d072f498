#pragma once
/// @file
/// What every distributed call does first: describe each operand, agree with the other ranks
/// (`agree_operands` in exec/replay.hpp, through exec/agreement.hpp), and look the prepared call up
/// in a cache keyed by everything the plan depends on (notation, mesh, policy, shapes metadata and
/// every rank's shapes). A repeated call replays instead (exec/replay.hpp).

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/cache.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/plan/policy_scope.hpp"

namespace einshard {

namespace exec {

struct UnaryCall;        // exec/unary.hpp
struct ContractionCall;  // exec/contraction.hpp

/// A prepared distributed call, shared with the call cache: a unary call (one operand) or a
/// contraction (two or more).
using PreparedCall = std::variant<std::shared_ptr<const UnaryCall>, std::shared_ptr<const ContractionCall>>;

/// Whether `call` holds a prepared call (a default-constructed one holds none).
[[nodiscard]] inline bool is_prepared(const PreparedCall& call) noexcept {
  return std::visit([](const auto& p) { return p != nullptr; }, call);
}

}  // namespace exec

namespace detail {

/// The last distributed call's plan, described only when asked for (describing costs strings).
/// `make` describes it; a caller may keep what `make` needs in `call`, `mesh`, `element` and
/// `source` and capture only this object's address, which spares a cached call the allocations of
/// a larger closure (the storage is reused from call to call).
struct LastPlan {
  std::function<Plan()> make;
  std::optional<Plan> plan;
  exec::PreparedCall call;
  Mesh mesh;
  std::int64_t element = 0;
  std::string source;
};
inline LastPlan& last_plan_storage() {
  thread_local LastPlan last;
  return last;
}

/// Keeps what `last_plan()` describes; `make` runs only when the plan is asked for, so a call
/// pays for a closure, not for a description.
inline void remember_lazy_plan(std::function<Plan()> make) {
  auto& last = last_plan_storage();
  last.plan.reset();
  last.make = std::move(make);
}

}  // namespace detail

/// The plan of the last distributed call on this thread (what ran, with its costs).
inline const Plan& last_plan() {
  auto& last = detail::last_plan_storage();
  if (!last.plan) last.plan = last.make ? last.make() : Plan{};
  return *last.plan;
}

namespace exec {

/// Identifies a call and operand across ranks (ranks must run the same notation on each operand).
inline std::int64_t fingerprint(std::string_view source, std::size_t operand) {
  return static_cast<std::int64_t>(std::hash<std::string_view>{}(source) ^
                                   (operand * 0x9e3779b97f4a7c15ull));
}

/// Number of dimensions an operand spec names outside its ellipsis.
inline std::int64_t fixed_dims(const notation::ExpressionView& e, const notation::Spec& s) {
  std::int64_t n = 0;
  for (const auto& item : e.items_of(s)) n += item.kind == notation::ItemKind::ellipsis ? 0 : 1;
  return n;
}

inline std::string call_name(const notation::ExpressionView& e) {
  return "einshard '" + std::string(e.source) + "'";
}

/// The agreed facts of a call: what the ranks agreed on about its operands (exec/agreement.hpp),
/// and which operands are 0-d tensors standing for a one-axis spec (`loss // dp -> loss`).
struct Agreement : AgreedOperands {
  std::vector<bool> scalar;
};

/// Whether input `i` is a 0-d tensor standing for a one-axis spec.
inline bool stands_for_one_axis(const notation::ExpressionView& e, std::size_t i, const at::Tensor& x) {
  const auto& spec = e.input(i);
  return x.dim() == 0 && !spec.has_ellipsis && fixed_dims(e, spec) == 1;
}

/// How many dimensions input `i` must have, for messages.
inline std::string expected_dims(const notation::ExpressionView& e, std::size_t i) {
  const auto& spec = e.input(i);
  return std::to_string(fixed_dims(e, spec)) + (spec.has_ellipsis ? " or more" : "");
}

/// This rank's description of input `i` (a 0-d stand-in as one element).
inline comm::RankInfo describe_operand(const notation::ExpressionView& e, std::size_t i, const at::Tensor& x) {
  const auto& spec = e.input(i);
  const auto fixed = fixed_dims(e, spec);
  const bool scalar = stands_for_one_axis(e, i, x);
  const auto ndim = scalar ? 1 : x.dim();
  const bool ok = spec.has_ellipsis ? ndim >= fixed : ndim == fixed;
  return comm::describe(scalar ? x.reshape({1}) : x, fingerprint(e.source, i),
                        ok ? comm::LocalFault::none : comm::LocalFault::rank_mismatch);
}

/// The layouts of `e`'s operands for these descriptions (their rank fixes what the ellipsis
/// stands for); none when the notation cannot be laid out with them (preparing the call says why).
inline std::optional<std::vector<plan::Layout>> operand_layouts(const notation::ExpressionView& e,
                                                            std::span<const comm::RankInfo> infos,
                                                            const MeshShape& mesh) {
  std::vector<plan::Layout> out;
  try {
    for (std::size_t i = 0; i < infos.size(); ++i) {
      const auto k = infos[i].ndim - fixed_dims(e, e.input(i));
      if (k < 0 || (k > 0 && !e.input(i).has_ellipsis)) return std::nullopt;
      out.push_back(plan::layout_of(e, e.input(i), k, mesh));
      if (out.back().axes.size() != static_cast<std::size_t>(infos[i].ndim)) return std::nullopt;
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return out;
}

/// Checks agreed descriptions of the inputs of `e`; the same error on every rank.
inline void check_operands(const notation::ExpressionView& e, const AgreedOperands& a) {
  a.check(call_name(e), [&](std::size_t i) { return expected_dims(e, i); });
}

/// Everything a prepared call depends on, as bytes; written into this thread's reused string, so a
/// repeated call allocates here only when it has `shapes` (their text is built each time).
inline const std::string& cache_key(std::string_view source, const Options& o, const Agreement& a) {
  thread_local std::string key;
  auto word = [](std::int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  key.assign(source);
  key += '\x1f';
  // The mesh by identity and shape: MPI reuses a freed communicator's handle for the next one. The
  // policy as resolved (call, scope, default): a scope or a new default must not reuse a plan.
  word(static_cast<std::int64_t>(o.mesh.id()));
  for (auto n : o.mesh.sizes()) word(n);
  word(resolve_policy(o.policy).key());
  if (!o.shapes.empty()) key += o.shapes.key();
  key += '\x1f';
  a.append_key(key);
  return key;
}

/// Prepared calls by key (`cache_key`); bounded, shared, immutable entries.
template <class Call>
struct CallCache {
  static constexpr std::size_t capacity = 1024;
  static CallCache& instance() {
    static CallCache cache;
    return cache;
  }
  template <class Make>
  std::shared_ptr<const Call> get(const std::string& key, Make&& make) {
    return BoundedCache<Call, capacity>::instance().get(key, [&] { return std::make_shared<const Call>(make()); });
  }
};

}  // namespace exec
}  // namespace einshard
