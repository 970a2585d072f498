#pragma once
/// @file
/// A distributed unary einshard (`x -> y` on one operand): agree on metadata, resolve every shard
/// size, plan, then run each step as a differentiable forward/backward pair.

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/program.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard {

namespace detail {
inline Plan& last_plan_storage() {
  thread_local Plan plan;
  return plan;
}
}  // namespace detail

/// The plan of the last distributed call on this thread (what ran, with its costs).
inline const Plan& last_plan() { return detail::last_plan_storage(); }

namespace exec {

/// Everything a unary call needs once the ranks agree.
struct UnaryCall {
  plan::Layout in, out;
  SizeTable sizes;
  Program program;
  bool scalar = false;  // a 0-d tensor standing for a one-axis spec
};

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

/// Collective over the mesh: checks the input on every rank, resolves all sizes and plans.
inline UnaryCall prepare_unary(const notation::ExpressionView& e, const at::Tensor& x,
                               const Options& o) {
  const auto what = call_name(e);
  if (!o.mesh) throw Error(what + ": distributed einshard operations require a mesh (.mesh = ...)");
  const Mesh& mesh = o.mesh;
  const auto& spec = e.input(0);
  const auto fixed = fixed_dims(e, spec);
  UnaryCall call;
  call.scalar = x.dim() == 0 && !spec.has_ellipsis && fixed == 1;
  const auto ndim = call.scalar ? 1 : x.dim();
  const bool rank_ok = spec.has_ellipsis ? ndim >= fixed : ndim == fixed;
  const RankInfo mine = describe(call.scalar ? x.reshape({1}) : x, fingerprint(e.source, 0),
                                 rank_ok ? LocalFault::none : LocalFault::rank_mismatch);
  const std::string expected = std::to_string(fixed) + (spec.has_ellipsis ? " or more" : "");
  const auto ranks = agree(mesh.comm(), {&mine, 1}, what, {&expected, 1});

  if (e.output().has_ellipsis != spec.has_ellipsis)
    throw Error(what + ": a distributed unary operation needs '...' on both sides or neither");
  const auto ellipsis = ranks[0][0].ndim - fixed;
  call.in = plan::layout_of(e, spec, ellipsis, mesh.shape());
  call.out = plan::layout_of(e, e.output(), ellipsis, mesh.shape());
  measure(call.sizes, call.in, ranks, 0, mesh, o.shapes, what);
  resolve(call.sizes, call.out, mesh, o.shapes, what);
  call.program = make_program(plan::plan_unary(call.in, call.out, mesh.shape()), call.sizes, mesh);
  return call;
}

/// The plan with this rank's costs (no data moves).
inline Plan describe_unary(std::string_view source, const UnaryCall& call, const Mesh& mesh,
                           std::int64_t element) {
  Plan p{std::string(source), {}};
  describe(call.program, call.sizes, mesh, element, -1, p.steps);
  return p;
}

/// Runs a prepared call on `x` and records its plan as `last_plan()`.
inline at::Tensor run_unary(std::string_view source, const UnaryCall& call, const at::Tensor& x,
                            const Mesh& mesh) {
  auto y = run(call.program, call.scalar ? x.reshape({1}) : x, call.sizes, mesh);
  einshard::detail::last_plan_storage() = describe_unary(source, call, mesh, x.element_size());
  return call.scalar && call.out.axes.size() == 1 ? y.reshape({}) : y;
}

}  // namespace exec
}  // namespace einshard
