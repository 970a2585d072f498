#pragma once
/// @file
/// A distributed unary einshard (`x -> y` on one operand): agree on metadata, resolve every shard
/// size, plan, then run each step as a differentiable forward/backward pair.

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/error.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/program.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard::exec {

/// Everything a unary call needs once the ranks agree.
struct UnaryCall {
  plan::Layout in, out;
  SizeTable sizes;
  Program program;
};

/// Resolves all sizes and plans; pure given the agreement.
inline UnaryCall prepare_unary(const notation::ExpressionView& e, const Agreement& a, const Options& o) {
  const auto what = call_name(e);
  const Mesh& mesh = o.mesh;
  const auto& spec = e.input(0);
  if (e.output().has_ellipsis != spec.has_ellipsis)
    throw Error(what + ": a distributed unary operation needs '...' on both sides or neither");
  const auto ellipsis = a.mine[0].ndim - fixed_dims(e, spec);
  UnaryCall call;
  call.in = plan::layout_of(e, spec, ellipsis, mesh.shape(), what);
  call.out = plan::layout_of(e, e.output(), ellipsis, mesh.shape(), what);
  measure(call.sizes, call.in, a, 0, mesh, o.shapes, what);
  resolve(call.sizes, call.out, mesh, o.shapes, what);
  call.program = make_program(plan::plan_unary(call.in, call.out, mesh.shape(), what), call.sizes, mesh);
  return call;
}

/// The plan with this rank's costs (no data moves).
inline Plan describe_unary(std::string_view source, const UnaryCall& call, const Mesh& mesh,
                           std::int64_t element) {
  Plan p{std::string(source), {}, {}};
  describe(call.program, call.sizes, mesh, element, -1, p.steps);
  return p;
}

/// Runs a prepared call on `x` (reshaped to one element if it is a 0-d stand-in).
inline at::Tensor run_unary(const UnaryCall& call, const at::Tensor& x, bool scalar) {
  auto y = run(call.program, scalar ? x.reshape({1}) : x);
  return scalar && call.out.axes.size() == 1 ? y.reshape({}) : y;
}

}  // namespace einshard::exec
