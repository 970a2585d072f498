#pragma once
/// @file
/// The public `einshard` entry points: the notation as a template argument (checked at compile
/// time) or as a run-time string (checked at run time, parse cached).

#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/exec/contraction.hpp"
#include "einshard/exec/unary.hpp"
#include "einshard/model/notation_params.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/ops/local.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/local.hpp"
#include "einshard/plan/plan.hpp"

namespace einshard {

namespace detail {

inline void check_einshard_options(const Options& o) {
  check_unused_options(o, "einshard", {"shapes", "sizes", "families", "policy"});
}

/// A notation that moves data between ranks: agree, fetch (or prepare) the plan, run it.
/// `deferred`: set to each input's gradient groups left to the model ([param] operands).
inline at::Tensor run_distributed(const notation::ExpressionView& e, at::TensorList xs,
                                  const Options& o, std::vector<std::string>* deferred = nullptr) {
  if (!o.mesh)
    throw Error(exec::call_name(e) +
                " moves data between ranks; distributed einshard operations require a mesh (.mesh = ...)");
  if (xs.size() != e.input_count())
    throw Error(exec::call_name(e) + " has " + std::to_string(e.input_count()) + " inputs, but " +
                std::to_string(xs.size()) + " tensors were given");
  const Mesh& mesh = o.mesh;
  const auto agreement = exec::agree_operands(e, xs, mesh);
  const auto& key = exec::cache_key(e.source, o, agreement);
  const auto element = xs[0].element_size();
  auto& last = last_plan_storage();
  last.plan.reset();
  // The closures capture only `last`, so a cached call allocates nothing to remember its plan.
  auto remember = [&](std::shared_ptr<const void> call, Plan (*describe)(const LastPlan&)) {
    last.call = std::move(call);
    last.mesh = mesh;
    last.element = element;
    last.source.assign(e.source);
    last.make = [l = &last, describe] { return describe(*l); };
  };
  if (xs.size() == 1) {
    auto call = exec::CallCache<exec::UnaryCall>::instance().get(
        key, [&] { return exec::prepare_unary(e, agreement, o); });
    remember(call, [](const LastPlan& l) {
      return exec::describe_unary(l.source, *static_cast<const exec::UnaryCall*>(l.call.get()), l.mesh,
                                  l.element);
    });
    return exec::run_unary(*call, xs[0], agreement.scalar[0], mesh);
  }
  auto call = exec::CallCache<exec::ContractionCall>::instance().get(
      key, [&] { return exec::prepare_contraction(e, agreement, element, o); });
  if (deferred) *deferred = call->deferred;
  remember(call, [](const LastPlan& l) {
    return exec::describe_contraction(
        l.source, *static_cast<const exec::ContractionCall*>(l.call.get()), l.mesh, l.element);
  });
  return exec::run_contraction(*call, xs, agreement.scalar, mesh);
}

/// The plan a distributed notation would run, with this rank's costs; collective, moves no data.
inline Plan explain_distributed(const notation::ExpressionView& e, at::TensorList xs,
                                const Options& o) {
  if (!o.mesh || xs.size() != e.input_count() || xs.empty()) return {std::string(e.source), {}, {}};
  const auto agreement = exec::agree_operands(e, xs, o.mesh);
  const auto element = xs[0].element_size();
  if (xs.size() == 1)
    return exec::describe_unary(e.source, exec::prepare_unary(e, agreement, o), o.mesh, element);
  return exec::describe_contraction(e.source, exec::prepare_contraction(e, agreement, element, o),
                                    o.mesh, element);
}

/// A run-time notation after family expansion and parsing, with its local plan when it has one.
struct CompiledNotation {
  std::string source;  // the expanded text the slices refer to
  notation::Expression expression;
  bool local = false;
  plan::LocalPlan local_plan;

  [[nodiscard]] notation::ExpressionView view() const { return expression.view(source); }
};

/// `self`: `source` is one operand spec, parsed as the notation `spec->spec` (the stencil
/// operations name their operand this way); errors point into the spec.
inline std::shared_ptr<const CompiledNotation> compile_runtime(std::string source,
                                                              std::string_view written, bool self = false) {
  const auto spec_length = source.size();
  if (self) source = source + "->" + source;
  auto result = notation::parse(source);
  if (!result.ok) {
    std::string message;
    notation::write_message(result.error, [&](char c) { message += c; });
    const auto shown = self ? source.substr(0, spec_length) : source;
    if (written != shown) message += " (in the expansion of '" + std::string(written) + "')";
    throw NotationError(shown, std::min<std::size_t>(result.error.column, shown.size()) + 1, std::move(message));
  }
  auto c = std::make_shared<CompiledNotation>();
  c->source = std::move(source);
  c->expression = std::move(result.expression);
  c->local = plan::is_local(c->view());
  if (c->local) c->local_plan = plan::make_local_plan(c->view());
  return c;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

/// Process-wide cache of parsed run-time notations, keyed by the notation text and (when given) the
/// families it expands with. Entries are immutable and shared.
class NotationCache {
 public:
  static NotationCache& instance() {
    static NotationCache cache;
    return cache;
  }

  /// `self`: `text` is one operand spec, compiled as `spec->spec` (see compile_runtime).
  std::shared_ptr<const CompiledNotation> get(std::string_view text, const Families& families,
                                              bool self = false) {
    std::string key_storage;
    std::string_view key = text;
    if (!families.empty() || self) {  // families and the form are part of the key, after the text
      key_storage.assign(text);
      if (self) key_storage += '\x1d';
      for (const auto& [name, members] : families) {
        key_storage += '\x1e';
        key_storage += name;
        for (const auto& m : members) (key_storage += '\x1f') += m;
      }
      key = key_storage;
    }
    {
      std::lock_guard lock(mutex_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    const bool expand = text.find('*') != std::string_view::npos || text.find('[') != std::string_view::npos;
    auto compiled = compile_runtime(expand ? notation::expand_families(text, families)
                                           : std::string(text),
                                    text, self);
    std::lock_guard lock(mutex_);
    if (map_.size() >= capacity) map_.clear();  // bounded: user-built strings may be unbounded
    return map_.emplace(std::string(key), std::move(compiled)).first->second;
  }

  static constexpr std::size_t capacity = 4096;

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const CompiledNotation>, StringHash,
                     std::equal_to<>>
      map_;
};

template <fixed_string S>
at::Tensor run_static(at::TensorList xs, const Options& o) {
  constexpr auto& E = notation::static_expression<S>;
  check_einshard_options(o);
  if constexpr (plan::is_local(E.view())) {
    // Built once per notation; every call after that does no string work at all.
    static const plan::LocalPlan plan = plan::make_local_plan(E.view());
    if constexpr (has_param(E.view()))
      return with_params(E.view(), xs, shape_of(o.mesh), [&](auto*) { return ops::run_local(plan, S.view(), xs, o); });
    else
      return ops::run_local(plan, S.view(), xs, o);
  } else {
    if constexpr (has_param(E.view()))
      return with_params(E.view(), xs, shape_of(o.mesh),
                         [&](std::vector<std::string>* d) { return run_distributed(E.view(), xs, o, d); });
    else
      return run_distributed(E.view(), xs, o);
  }
}

template <fixed_string S, std::size_t Given>
constexpr void check_arity() {
  constexpr auto inputs = notation::static_expression<S>.view().input_count();
  static_assert(inputs == Given,
                "einshard: the number of tensors must equal the number of inputs of the notation");
}

}  // namespace detail

/// `einshard<"a b, b c -> a c">(x, y, {.mesh = mesh})`: the notation is parsed and checked at
/// compile time; a malformed one does not compile, and the diagnostic names the fault and column.
template <fixed_string S>
at::Tensor einshard(const at::Tensor& x, const Options& o = {}) {
  detail::check_arity<S, 1>();
  return detail::run_static<S>({x}, o);
}
template <fixed_string S>
at::Tensor einshard(const at::Tensor& x, const at::Tensor& y, const Options& o = {}) {
  detail::check_arity<S, 2>();
  return detail::run_static<S>({x, y}, o);
}
template <fixed_string S>
at::Tensor einshard(const at::Tensor& x, const at::Tensor& y, const at::Tensor& z,
                    const Options& o = {}) {
  detail::check_arity<S, 3>();
  return detail::run_static<S>({x, y, z}, o);
}
/// Any number of operands, passed as a list.
template <fixed_string S>
at::Tensor einshard(at::TensorList xs, const Options& o = {}) {
  if (xs.size() != notation::static_expression<S>.view().input_count())
    throw Error("einshard: '" + std::string(S.view()) + "' has " +
                std::to_string(notation::static_expression<S>.view().input_count()) +
                " inputs, but " + std::to_string(xs.size()) + " tensors were given");
  return detail::run_static<S>(xs, o);
}

/// `einshard("a b -> b a", {x})`: a notation built at run time (families, user input). A malformed
/// one throws `NotationError`; parses are cached per (notation, families).
inline at::Tensor einshard(std::string_view notation, at::TensorList xs, const Options& o = {}) {
  detail::check_einshard_options(o);
  const auto compiled = detail::NotationCache::instance().get(notation, o.families);
  const auto run = [&](std::vector<std::string>* deferred) {
    if (!compiled->local) return detail::run_distributed(compiled->view(), xs, o, deferred);
    return ops::run_local(compiled->local_plan, compiled->source, xs, o);
  };
  if (detail::has_param(compiled->view()))
    return detail::with_params(compiled->view(), xs, detail::shape_of(o.mesh), run);
  return run(nullptr);
}

/// What `einshard<S>(xs..., o)` would run on these tensors: its steps and this rank's traffic and
/// memory per step, forward and backward. Collective over the mesh for a distributed notation (the
/// ranks agree on shapes first); an empty plan for a local one.
template <fixed_string S>
Plan explain(at::TensorList xs, const Options& o = {}) {
  detail::check_einshard_options(o);
  constexpr auto& E = notation::static_expression<S>;
  if constexpr (plan::is_local(E.view())) {
    return {std::string(S.view()), {}, {}};
  } else {
    return detail::explain_distributed(E.view(), xs, o);
  }
}
template <fixed_string S>
Plan explain(const at::Tensor& x, const Options& o = {}) {
  return explain<S>(at::TensorList{x}, o);
}
template <fixed_string S>
Plan explain(const at::Tensor& x, const at::Tensor& y, const Options& o = {}) {
  return explain<S>(at::TensorList{x, y}, o);
}

inline Plan explain(std::string_view notation, at::TensorList xs, const Options& o = {}) {
  detail::check_einshard_options(o);
  const auto compiled = detail::NotationCache::instance().get(notation, o.families);
  if (compiled->local) return {compiled->source, {}, {}};
  return detail::explain_distributed(compiled->view(), xs, o);
}

}  // namespace einshard
