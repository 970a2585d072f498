#pragma once
/// @file
/// A distributed contraction of two operands: agree on both operands' metadata in one exchange,
/// plan (plan/binary.hpp), move each operand to its compute layout, run the local einsum, move the
/// result to the output layout. Every step is a differentiable pair; the einsum is torch's own.

#include <ATen/ATen.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/program.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/exec/unary.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/binary.hpp"
#include "einshard/plan/plan.hpp"

namespace einshard::exec {

struct BinaryCall {
  SizeTable sizes;
  plan::BinaryPlan plan;
  Program x, y, z;
};

inline BinaryCall prepare_binary(const notation::ExpressionView& e, const at::Tensor& x,
                                 const at::Tensor& y, const Options& o) {
  const auto what = call_name(e);
  if (!o.mesh) throw Error(what + ": distributed einshard operations require a mesh (.mesh = ...)");
  const Mesh& mesh = o.mesh;
  std::array<RankInfo, 2> mine;
  std::array<std::string, 2> expected;
  const std::array<const at::Tensor*, 2> xs{&x, &y};
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& spec = e.input(i);
    const auto fixed = fixed_dims(e, spec);
    const auto ndim = xs[i]->dim();
    const bool ok = spec.has_ellipsis ? ndim >= fixed : ndim == fixed;
    mine[i] = describe(*xs[i], fingerprint(e.source, i), ok ? LocalFault::none : LocalFault::rank_mismatch);
    expected[i] = std::to_string(fixed) + (spec.has_ellipsis ? " or more" : "");
  }
  const auto ranks = agree(mesh.comm(), mine, what, expected);

  std::array<plan::Layout, 2> in;
  std::int64_t ellipsis = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    const auto k = ranks[0][i].ndim - fixed_dims(e, e.input(i));
    ellipsis = std::max(ellipsis, k);
    in[i] = plan::layout_of(e, e.input(i), k, mesh.shape());
  }
  const auto out = plan::layout_of(e, e.output(), ellipsis, mesh.shape());
  BinaryCall call;
  for (std::size_t i = 0; i < 2; ++i) measure(call.sizes, in[i], ranks, i, mesh, o.shapes, what);
  call.plan = plan::plan_binary(in[0], in[1], out, mesh.shape(), call.sizes.global,
                                x.element_size(), o.policy.value_or(Policy::training));
  const auto& c = call.plan.chosen;
  for (const auto* steps : {&c.x_steps, &c.y_steps, &c.z_steps})
    for (const auto& s : *steps) resolve(call.sizes, s.after, mesh, o.shapes, what);
  resolve(call.sizes, c.result, mesh, o.shapes, what);
  call.x = make_program(c.x_steps, call.sizes, mesh);
  call.y = make_program(c.y_steps, call.sizes, mesh);
  call.z = make_program(c.z_steps, call.sizes, mesh);
  return call;
}

/// The chosen plan with this rank's costs, and the candidates it was chosen from.
inline Plan describe_binary(std::string_view source, const BinaryCall& call, const Mesh& mesh,
                            std::int64_t element) {
  Plan p{std::string(source), {}, {}};
  describe(call.x, call.sizes, mesh, element, 0, p.steps);
  describe(call.y, call.sizes, mesh, element, 1, p.steps);
  const auto& c = call.plan.chosen;
  PlanStep einsum{"rank_local_einsum", "", "", "", c.result.str(), {}, {}, -1};
  p.steps.push_back(std::move(einsum));
  describe(call.z, call.sizes, mesh, element, -1, p.steps);
  for (const auto& a : call.plan.alternatives)
    p.alternatives.push_back({a.compute.str(), a.score, a.estimate.forward_bytes,
                              a.estimate.backward_bytes,
                              a.estimate.forward_collectives + a.estimate.backward_collectives,
                              a.estimate.peak_bytes, a.estimate.flops});
  return p;
}

inline at::Tensor run_binary(std::string_view source, const BinaryCall& call, const at::Tensor& x,
                             const at::Tensor& y, const Mesh& mesh) {
  const auto xc = run(call.x, x, call.sizes, mesh);
  const auto yc = run(call.y, y, call.sizes, mesh);
  auto z = run(call.z, at::einsum(call.plan.equation, {xc, yc}), call.sizes, mesh);
  einshard::detail::last_plan_storage() = describe_binary(source, call, mesh, x.element_size());
  return z;
}

}  // namespace einshard::exec
