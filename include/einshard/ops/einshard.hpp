#pragma once
/// @file
/// The public `einshard` entry points: the notation as a template argument (checked at compile
/// time) or as a run-time string (checked at run time, parse cached).

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/exec/local.hpp"
#include "einshard/model/notation_params.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/local.hpp"
#include "einshard/plan/plan.hpp"

namespace einshard {

namespace detail {

inline void check_einshard_options(const Options& o) {
  check_unused_options(o, "einshard", {"shapes", "sizes", "families", "policy"});
}

/// A notation that moves data between ranks: replay the call prepared at this site when there is
/// one (exec/replay.hpp), else agree, fetch (or prepare) the plan, run it, and leave a replay.
/// `deferred`: set to each input's gradient groups left to the model ([param] operands). `keep`
/// owns `e` for a run-time notation.
EINSHARD_INLINE at::Tensor run_distributed(const notation::ExpressionView& e, at::TensorList xs, const Options& o,
                                           std::vector<Group>* deferred = nullptr,
                                           std::shared_ptr<const void> keep = nullptr);

/// The plan a distributed notation would run, with this rank's costs; collective, moves no data.
EINSHARD_INLINE Plan explain_distributed(const notation::ExpressionView& e, at::TensorList xs, const Options& o);

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
EINSHARD_INLINE std::shared_ptr<const CompiledNotation> compile_runtime(std::string source, std::string_view written,
                                                        bool self = false);

/// Parsed run-time notations, keyed by the notation text and (when given) the families it expands
/// with, and whether it is one operand spec (`self`, see compile_runtime).
struct NotationCache {
  static constexpr std::size_t capacity = 4096;
  EINSHARD_INLINE static NotationCache& instance();
  EINSHARD_INLINE std::shared_ptr<const CompiledNotation> get(std::string_view text, const Families& families,
                                              bool self = false);
};

}  // namespace detail

// A local call runs exec::run_local with the option type's sizes: compiled, that instance is
// einshard_compiled's, so a translation unit with local calls generates none of it.
#if EINSHARD_DECLARE_ONLY
extern template at::Tensor exec::run_local<Sizes>(const plan::LocalPlan&, std::string_view, at::TensorList,
                                                  const Sizes&, const notation::FamilyMap&);
#elif defined(EINSHARD_BUILDING_COMPILED)
template at::Tensor exec::run_local<Sizes>(const plan::LocalPlan&, std::string_view, at::TensorList, const Sizes&,
                                           const notation::FamilyMap&);
#endif

namespace detail {

template <fixed_string S>
const plan::LocalPlan& static_local_plan() {
  static const plan::LocalPlan plan = plan::make_local_plan(notation::static_expression<S>.view());
  return plan;
}

template <fixed_string S>
at::Tensor run_static(at::TensorList xs, const Options& o) {
  constexpr auto& E = notation::static_expression<S>;
  check_einshard_options(o);
  if constexpr (plan::is_local(E.view())) {
    const auto& plan = static_local_plan<S>();
    if constexpr (has_param(E.view()))
      return with_params(E.view(), xs, shape_of(o.mesh),
                         [&](auto*) { return exec::run_local(plan, S.view(), xs, o.sizes, o.families); });
    else
      return exec::run_local(plan, S.view(), xs, o.sizes, o.families);
  } else {
    if constexpr (has_param(E.view()))
      return with_params(E.view(), xs, shape_of(o.mesh),
                         [&](std::vector<Group>* d) { return run_distributed(E.view(), xs, o, d); });
    else
      return run_distributed(E.view(), xs, o);
  }
}

template <fixed_string S, std::size_t Given>
constexpr void check_arity() {
  constexpr auto inputs = notation::static_expression<S>.view().input_count();
  static_assert(inputs == Given,
                "einshard: expected as many tensors as the notation has inputs, found another number");
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
  exec::check_input_count(S.view(), notation::static_expression<S>.view().input_count(), xs.size());
  return detail::run_static<S>(xs, o);
}

/// `einshard("a b -> b a", {x})`: a notation built at run time (families, user input). A malformed
/// one throws `NotationError`; parses are cached per (notation, families).
EINSHARD_INLINE at::Tensor einshard(std::string_view notation, at::TensorList xs, const Options& o = {});

/// What `einshard<S>(xs..., o)` would run on these tensors: its steps and this rank's traffic and
/// memory per step, forward and backward. Collective over the mesh for a distributed notation (the
/// ranks agree on shapes first); an empty plan for a local one. Input `einshard` rejects before it
/// computes (no mesh, the wrong number of tensors or of dimensions) raises the same error here.
template <fixed_string S>
Plan explain(at::TensorList xs, const Options& o = {}) {
  detail::check_einshard_options(o);
  constexpr auto& E = notation::static_expression<S>;
  if constexpr (plan::is_local(E.view())) {
    (void)exec::check_local_operands(detail::static_local_plan<S>(), S.view(), xs);
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

EINSHARD_INLINE Plan explain(std::string_view notation, at::TensorList xs, const Options& o = {});

}  // namespace einshard

// ---- the non-template engine ------------------------------------------------------------------
// Header-only: defined here, inline. Compiled (EINSHARD_COMPILED, the CMake target's default):
// defined once in the library einshard_compiled (src/einshard.cpp), so a user's translation unit
// neither parses the distributed executor (exec/contraction.hpp, exec/unary.hpp) nor generates it.
#if !EINSHARD_DECLARE_ONLY
#include "einshard/exec/cache.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/contraction.hpp"
#include "einshard/exec/replay.hpp"
#include "einshard/exec/unary.hpp"

namespace einshard {
namespace detail {

/// What a distributed call checks before it communicates (`explain` raises the same).
inline void check_distributed_call(const notation::ExpressionView& e, at::TensorList xs, const Options& o) {
  if (!o.mesh)
    throw Error(exec::call_name(e) +
                " moves data between ranks; distributed einshard operations require a mesh (.mesh = ...)");
  exec::check_input_count(e.source, e.input_count(), xs.size());
}

EINSHARD_INLINE at::Tensor run_distributed(const notation::ExpressionView& e, at::TensorList xs,
                                           const Options& o, std::vector<Group>* deferred,
                                           std::shared_ptr<const void> keep) {
  check_distributed_call(e, xs, o);
  return exec::run_with_replay(e, xs, o, deferred, std::move(keep));
}

EINSHARD_INLINE Plan explain_distributed(const notation::ExpressionView& e, at::TensorList xs,
                                const Options& o) {
  check_distributed_call(e, xs, o);
  const auto agreement = exec::agree_operands(e, xs, o);
  const auto element = xs[0].element_size();
  if (xs.size() == 1)
    return exec::describe_unary(e.source, exec::prepare_unary(e, agreement, o), o.mesh, element);
  return exec::describe_contraction(e.source, exec::prepare_contraction(e, agreement, element, o),
                                    o.mesh, element);
}

EINSHARD_INLINE std::shared_ptr<const CompiledNotation> compile_runtime(std::string source,
                                                                       std::string_view written, bool self) {
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

EINSHARD_INLINE NotationCache& NotationCache::instance() {
  static NotationCache cache;
  return cache;
}

EINSHARD_INLINE std::shared_ptr<const CompiledNotation> NotationCache::get(std::string_view text,
                                                                         const Families& families, bool self) {
  std::string_view key = text;
  thread_local std::string key_storage;
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
  return exec::BoundedCache<CompiledNotation, capacity>::instance().get(key, [&] {
    const bool expand = text.find('*') != std::string_view::npos || text.find('[') != std::string_view::npos;
    return compile_runtime(expand ? notation::expand_families(text, families) : std::string(text), text, self);
  });
}

}  // namespace detail

EINSHARD_INLINE at::Tensor einshard(std::string_view notation, at::TensorList xs, const Options& o) {
  detail::check_einshard_options(o);
  const auto compiled = detail::NotationCache::instance().get(notation, o.families);
  const auto run = [&](std::vector<Group>* deferred) {
    if (!compiled->local) return detail::run_distributed(compiled->view(), xs, o, deferred, compiled);
    return exec::run_local(compiled->local_plan, compiled->source, xs, o.sizes, o.families);
  };
  if (detail::has_param(compiled->view()))
    return detail::with_params(compiled->view(), xs, detail::shape_of(o.mesh), run);
  return run(nullptr);
}

EINSHARD_INLINE Plan explain(std::string_view notation, at::TensorList xs, const Options& o) {
  detail::check_einshard_options(o);
  const auto compiled = detail::NotationCache::instance().get(notation, o.families);
  if (compiled->local) {
    (void)exec::check_local_operands(compiled->local_plan, compiled->source, xs);
    return {compiled->source, {}, {}};
  }
  return detail::explain_distributed(compiled->view(), xs, o);
}

}  // namespace einshard
#endif  // !EINSHARD_DECLARE_ONLY
