#pragma once
/// @file
/// `einshard_like`: checks a notation against its `[param]` operands and attaches their states
/// (layout, gradient groups inferred from the plan, init sync) without computing anything and
/// without communicating: the registration a model does once, before its first step.
///
/// Only the parameters are needed: `einshard_like<"b n c, h/tp c [param] -> b n h/tp">(w, {.mesh})`
/// (tensors given for the `[param]` operands in order, or for every input with undefined tensors
/// for the others). The plan is made from the parameters' global extents (their local extents
/// times their groups' sizes) and a nominal extent for every other axis, so its choice, and with it
/// the deferred gradient groups, is the one a call on tensors of such sizes makes.

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/model/notation_params.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/ops/einshard.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/binary.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/local.hpp"
#include "einshard/plan/param_grad.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard {

namespace detail {

inline void einshard_like_view(const notation::ExpressionView& e, at::TensorList given, const Options& o) {
  const std::string op = "einshard_like '" + std::string(e.source) + "'";
  check_unused_options(o, "einshard_like", {"sizes", "families", "policy"});
  const auto n = e.input_count();
  std::vector<std::size_t> params;
  for (std::size_t i = 0; i < n; ++i)
    if (e.input(i).annotation.param) params.push_back(i);
  if (params.empty()) throw Error(op + ": expected a notation with a [param] operand, found none");
  std::vector<at::Tensor> xs(n);
  if (given.size() == n) {
    xs.assign(given.begin(), given.end());
  } else if (given.size() == params.size()) {
    for (std::size_t k = 0; k < params.size(); ++k) xs[params[k]] = given[k];
  } else {
    throw Error(op + ": expected " + std::to_string(params.size()) + " tensors (one per [param] operand) or " +
                std::to_string(n) + " (one per input), got " + std::to_string(given.size()));
  }
  const auto& mesh = shape_of(o.mesh);
  auto states = param_states(e, xs, mesh, op);
  std::vector<Group> deferred(n);
  if (!plan::is_local(e)) {
    if (!o.mesh)
      throw Error(op + " moves data between ranks; distributed einshard operations require a mesh (.mesh = ...)");
    // Dimensions the ellipsis stands for, from the tensors at hand (the same for every operand).
    std::int64_t ellipsis = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (xs[i].defined()) ellipsis = std::max(ellipsis, xs[i].dim() - exec::fixed_dims(e, e.input(i)));
    std::vector<plan::Layout> layouts;
    for (std::size_t i = 0; i < n; ++i) layouts.push_back(plan::layout_of(e, e.input(i), ellipsis, mesh, op));
    const auto out = plan::layout_of(e, e.output(), ellipsis, mesh, op);
    if (n == 1) {
      (void)plan::plan_unary(layouts[0], out, mesh, op);  // checks that the move exists
    } else if (n == 2) {
      constexpr std::int64_t nominal = 1024;
      std::map<std::string, std::int64_t, std::less<>> global;
      for (const plan::Layout* l : std::initializer_list<const plan::Layout*>{&layouts[0], &layouts[1], &out})
        for (const auto& a : l->axes) global.emplace(a.axis, nominal);
      for (std::size_t i = 0; i < n; ++i) {
        if (!xs[i].defined()) continue;
        for (std::size_t d = 0; d < layouts[i].axes.size() && static_cast<std::int64_t>(d) < xs[i].dim(); ++d) {
          const auto& a = layouts[i].axes[d];
          global[a.axis] = xs[i].size(static_cast<std::int64_t>(d)) * (a.group.empty() ? 1 : mesh.size(a.group));
        }
      }
      const auto element = xs[states.front().input].element_size();
      auto p = plan::plan_binary(layouts[0], layouts[1], out, mesh, global, static_cast<std::int64_t>(element),
                                 resolve_policy(o.policy), false, op);
      for (const auto& s : states) {
        if (e.text(e.input(s.input).annotation.grad) == "none") continue;
        auto& steps = s.input == 0 ? p.chosen.x_steps : p.chosen.y_steps;
        deferred[s.input] = plan::defer_parameter_partial(steps, layouts[s.input], mesh);
      }
    } else {
      throw Error(op + ": einshard_like infers gradient groups of notations with one or two inputs; this one has " +
                  std::to_string(n) + " (register the parameters of a longer contraction with "
                  "register_parameter_layout)");
    }
  }
  attach_param_states(std::move(states), xs, deferred, op);
}

}  // namespace detail

/// Checks `S` against its `[param]` operands and attaches their states; computes nothing.
template <fixed_string S>
void einshard_like(at::TensorList params, const Options& o = {}) {
  detail::einshard_like_view(notation::static_expression<S>.view(), params, o);
}
template <fixed_string S>
void einshard_like(const at::Tensor& param, const Options& o = {}) {
  einshard_like<S>(at::TensorList{param}, o);
}
template <fixed_string S>
void einshard_like(const at::Tensor& a, const at::Tensor& b, const Options& o = {}) {
  einshard_like<S>(at::TensorList{a, b}, o);
}

/// The run-time form (families expanded, parse cached like `einshard`).
inline void einshard_like(std::string_view notation, at::TensorList params, const Options& o = {}) {
  const auto compiled = detail::NotationCache::instance().get(notation, o.families);
  detail::einshard_like_view(compiled->view(), params, o);
}

}  // namespace einshard
