#pragma once
/// @file
/// A distributed contraction of two or more operands: agree on every operand's metadata in one
/// exchange, then contract two at a time (plan/binary.hpp). With three or more operands the pair
/// contracted next is the one the cost model finds cheapest, and an intermediate keeps the layout
/// it was computed in. Each stage moves its two operands to their compute layouts, runs the local
/// einsum and moves the result on; every step is a differentiable pair.

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/error.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/local.hpp"
#include "einshard/exec/program.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/exec/unary.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/binary.hpp"
#include "einshard/plan/param_grad.hpp"
#include "einshard/plan/plan.hpp"

namespace einshard::exec {

/// One pairwise contraction: operands `left` and `right` of the working list (inputs, then
/// intermediates appended in order) replaced by their result.
struct Stage {
  std::size_t left = 0, right = 1;
  plan::BinaryPlan plan;
  Program x, y, z;
  std::optional<MatmulForm> form;  ///< the local einsum as a matrix product, when it is one
};

struct ContractionCall {
  SizeTable sizes;
  std::vector<Stage> stages;
  /// Per input: the groups of the gradient partial a `[param]` operand's plan leaves to the
  /// model's reduction (plan/param_grad.hpp); "" for other operands.
  std::vector<Group> deferred;
};

/// Resolves the sizes of a stage's chosen candidate and makes its programs.
inline void make_stage(SizeTable& sizes, Stage& s, const Mesh& mesh, const Shapes& shapes,
                       const std::string& what) {
  const auto& c = s.plan.chosen;
  for (const auto* steps : {&c.x_steps, &c.y_steps, &c.z_steps})
    for (const auto& st : *steps) resolve(sizes, st.after, mesh, shapes, what);
  resolve(sizes, c.result, mesh, shapes, what);
  s.x = make_program(c.x_steps, sizes, mesh, true);
  s.y = make_program(c.y_steps, sizes, mesh, true);
  s.z = make_program(c.z_steps, sizes, mesh, true);
  s.form = matmul_form(s.plan.equation);
}

/// Plans every stage and resolves all sizes; pure given the agreement.
inline ContractionCall prepare_contraction(const notation::ExpressionView& e, const Agreement& a,
                                           std::int64_t element, const Options& o) {
  const auto what = call_name(e);
  const Mesh& mesh = o.mesh;
  const auto n = a.mine.size();
  std::vector<plan::Layout> work;
  std::int64_t ellipsis = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = a.mine[i].ndim - fixed_dims(e, e.input(i));
    ellipsis = std::max(ellipsis, k);
    work.push_back(plan::layout_of(e, e.input(i), k, mesh.shape(), what));
  }
  const auto out = plan::layout_of(e, e.output(), ellipsis, mesh.shape(), what);
  ContractionCall call;
  for (std::size_t i = 0; i < n; ++i) measure(call.sizes, work[i], a, i, mesh, o.shapes, what);
  const PlanPolicy policy = resolve_policy(o.policy);

  // The axes an intermediate of operands i and j must keep: those some other operand or the
  // output still names.
  auto intermediate = [&](std::size_t i, std::size_t j) {
    plan::Layout r;
    auto needed = [&](const std::string& a) {
      if (out.find(a) >= 0) return true;
      for (std::size_t k = 0; k < work.size(); ++k)
        if (k != i && k != j && work[k].find(a) >= 0) return true;
      return false;
    };
    for (const auto* l : {&work[i], &work[j]})
      for (const auto& a : l->axes)
        if (r.find(a.axis) < 0 && needed(a.axis)) r.axes.push_back({a.axis, {}});
    return r;
  };
  // Which input each working operand is (-1: an intermediate), for the [param] deferrals.
  std::vector<int> origin(n);
  for (std::size_t i = 0; i < n; ++i) origin[i] = static_cast<int>(i);
  call.deferred.assign(n, Group{});
  auto defer = [&](Stage& s) {
    for (auto [index, steps] : {std::pair{s.left, &s.plan.chosen.x_steps}, std::pair{s.right, &s.plan.chosen.y_steps}}) {
      const int in = origin[index];
      if (in < 0) continue;
      const auto& ann = e.input(static_cast<std::size_t>(in)).annotation;
      // grad=none keeps the reduction in the plan's backward: nothing is left to the model.
      if (!ann.param || e.text(ann.grad) == "none") continue;
      call.deferred[static_cast<std::size_t>(in)] =
          plan::defer_parameter_partial(*steps, work[index], mesh.shape());
    }
  };
  auto retire = [&](const Stage& s) {
    origin.erase(origin.begin() + static_cast<std::ptrdiff_t>(s.right));
    origin.erase(origin.begin() + static_cast<std::ptrdiff_t>(s.left));
    origin.push_back(-1);
  };
  while (work.size() > 2) {
    Stage best;
    double best_score = 0;
    bool found = false;
    for (std::size_t i = 0; i < work.size(); ++i)
      for (std::size_t j = i + 1; j < work.size(); ++j) {
        auto p = plan::plan_binary(work[i], work[j], intermediate(i, j), mesh.shape(), call.sizes.global,
                                   element, policy, true, what);
        if (!found || p.chosen.score < best_score) {
          best_score = p.chosen.score;
          best = Stage{i, j, std::move(p), {}, {}, {}, {}};
          found = true;
        }
      }
    defer(best);
    plan::Layout result = best.plan.chosen.z_steps.empty() ? best.plan.chosen.result
                                                           : best.plan.chosen.z_steps.back().after;
    work.erase(work.begin() + static_cast<std::ptrdiff_t>(best.right));
    work.erase(work.begin() + static_cast<std::ptrdiff_t>(best.left));
    work.push_back(std::move(result));
    retire(best);
    call.stages.push_back(std::move(best));
  }
  call.stages.push_back(
      {0, 1, plan::plan_binary(work[0], work[1], out, mesh.shape(), call.sizes.global, element, policy, false, what),
       {}, {}, {}, {}});
  defer(call.stages.back());

  for (auto& s : call.stages) make_stage(call.sizes, s, mesh, o.shapes, what);
  return call;
}

/// `call` with stage `stage` running its candidate `alternative` (an index into its alternatives)
/// instead of the chosen one: what the planner rejected, for benchmarks that measure it.
inline ContractionCall with_alternative(ContractionCall call, std::size_t stage, std::size_t alternative,
                                        const notation::ExpressionView& e, const Options& o) {
  auto& s = call.stages.at(stage);
  s.plan.chosen = s.plan.alternatives.at(alternative);
  make_stage(call.sizes, s, o.mesh, o.shapes, call_name(e));
  return call;
}

/// The chosen plan with this rank's costs, and, for each stage, the candidates it was chosen from.
inline Plan describe_contraction(std::string_view source, const ContractionCall& call,
                                 const Mesh& mesh, std::int64_t element) {
  Plan p{std::string(source), {}, {}};
  for (const auto& s : call.stages) {
    describe(s.x, call.sizes, mesh, element, static_cast<int>(s.left), p.steps);
    describe(s.y, call.sizes, mesh, element, static_cast<int>(s.right), p.steps);
    const auto& c = s.plan.chosen;
    p.steps.push_back({"rank_local_einsum", "", "", "", c.result.str(), {}, {}, -1});
    describe(s.z, call.sizes, mesh, element, -1, p.steps);
    for (const auto& a : s.plan.alternatives)
      p.alternatives.push_back({a.compute.str(), a.score, a.estimate.forward_bytes,
                                a.estimate.backward_bytes,
                                a.estimate.forward_collectives + a.estimate.backward_collectives,
                                a.estimate.peak_bytes, a.estimate.flops});
    for (const auto& r : s.plan.rejected) p.rejected.push_back({r.compute.str(), r.reason});
  }
  return p;
}

inline at::Tensor run_contraction(const ContractionCall& call, at::TensorList xs,
                                  const std::vector<bool>& scalar) {
  c10::SmallVector<at::Tensor, 4> work;  // no allocation for up to four operands
  for (std::size_t i = 0; i < xs.size(); ++i) work.push_back(scalar[i] ? xs[i].reshape({1}) : xs[i]);
  for (const auto& s : call.stages) {
    const auto x = run(s.x, work[s.left]);
    const auto y = run(s.y, work[s.right]);
    auto z = run(s.z, contract(s.form, s.plan.equation, x, y));
    work.erase(work.begin() + static_cast<std::ptrdiff_t>(s.right));
    work.erase(work.begin() + static_cast<std::ptrdiff_t>(s.left));
    work.push_back(std::move(z));
  }
  return work.back();
}

}  // namespace einshard::exec
