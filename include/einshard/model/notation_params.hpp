#pragma once
/// @file
/// `[param]` operands of a notation: their states are built and checked before the call computes
/// (so a bad annotation, rank or conflicting registration fails with nothing attached) and
/// attached after it, with the gradient groups the plan left to the model (plan/param_grad.hpp).

#include <ATen/core/Tensor.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/group.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/model/parameter_layout.hpp"
#include "einshard/model/parameter_registry.hpp"
#include "einshard/model/parameter_state.hpp"
#include "einshard/notation/expression.hpp"

namespace einshard::detail {

constexpr bool has_param(const notation::ExpressionView& e) noexcept {
  for (std::size_t i = 0; i < e.input_count(); ++i)
    if (e.input(i).annotation.param) return true;
  return false;
}

/// The layout an input spec declares, in notation form (`h/tp c`, `... c`).
inline std::string spec_layout(const notation::ExpressionView& e, const notation::Spec& s, std::string_view op) {
  std::string out;
  for (const auto& item : e.items_of(s)) {
    if (!out.empty()) out += ' ';
    if (item.kind == notation::ItemKind::ellipsis) {
      out += "...";
      continue;
    }
    if (item.kind == notation::ItemKind::group)
      throw Error(std::string(op) + ": a [param] operand has a factored group; expected one axis per "
                  "parameter dimension");
    const auto& a = e.axes_of(item)[0];
    out += e.name(a);
    if (!a.mesh.empty()) (out += '/') += e.mesh(a);
  }
  return out;
}

struct PendingParam {
  std::size_t input = 0;
  ParameterState state;
};

/// The states of the `[param]` operands of `xs` under `e`, checked (tensor, rank, merge with what
/// is attached) but not attached. `xs[i]` may be undefined for operands without `[param]`.
inline std::vector<PendingParam> param_states(const notation::ExpressionView& e, at::TensorList xs,
                                              const MeshShape& mesh, const std::string& op) {
  std::vector<PendingParam> out;
  for (std::size_t i = 0; i < e.input_count(); ++i) {
    const auto& s = e.input(i);
    if (!s.annotation.param) continue;
    const auto what = op + ": [param] operand " + std::to_string(i + 1);
    if (i >= xs.size() || !xs[i].defined()) throw Error(what + " expected a tensor, got none");
    if (!xs[i].is_leaf() || !xs[i].requires_grad())
      throw Error(what + " is not a parameter: expected a leaf tensor that requires grad");
    const auto& ann = s.annotation;
    auto state = make_parameter_state(
        spec_layout(e, s, op), mesh,
        ann.grad.empty() ? std::nullopt : std::optional<std::string_view>(e.text(ann.grad)),
        ann.init_sync.empty() ? std::nullopt : std::optional<std::string_view>(e.text(ann.init_sync)), op,
        true);
    ParameterRegistry::check_rank(xs[i], state, what);
    if (auto existing = ParameterRegistry::instance().find(xs[i])) (void)merge(*existing, state, op);
    out.push_back({i, std::move(state)});
  }
  return out;
}

/// Resolves the pending gradient groups with what the plan deferred (`deferred[i]`, one group,
/// empty when none) and attaches every state. Given groups must cover the deferred ones, or that part of the
/// gradient would never be summed.
inline void attach_param_states(std::vector<PendingParam> params, at::TensorList xs,
                                const std::vector<Group>& deferred, const std::string& op) {
  std::vector<std::pair<at::Tensor, ParameterState>> batch;
  for (auto& [i, s] : params) {
    const auto d = i < deferred.size() ? deferred[i] : Group{};
    if (s.grad.mode == GradMode::pending) {
      s.grad.mode = GradMode::inferred;
      s.grad.groups = d.empty() ? std::vector<std::string>{} : std::vector<std::string>{d.name()};
    } else if (!d.empty() && s.grad.concrete() && !d.within(union_of(s.grad.groups, s.mesh))) {
      throw Error(op + ": [param] operand " + std::to_string(i + 1) + " has grad=" + group_list(s.grad.groups) +
                  ", but its gradient arrives partial over '" + d.name() +
                  "' in this plan; expected gradient groups that include '" + d.name() + "'");
    }
    validate(s, op);
    batch.emplace_back(xs[i], std::move(s));
  }
  ParameterRegistry::instance().attach(batch, op);
}

/// Runs `run(&deferred)` between checking and attaching the `[param]` states of `e`.
template <class Run>
at::Tensor with_params(const notation::ExpressionView& e, at::TensorList xs, const MeshShape& mesh, Run&& run) {
  const std::string op = "einshard '" + std::string(e.source) + "'";
  auto params = param_states(e, xs, mesh, op);
  std::vector<Group> deferred(e.input_count());
  auto out = run(&deferred);
  attach_param_states(std::move(params), xs, deferred, op);
  return out;
}

}  // namespace einshard::detail
