#pragma once
/// @file
/// The step names of distributed plans, and a compact "operand:step(group,axis)" spelling, shared by
/// the planner tests (no MPI) and the distributed tests.

#include <stdexcept>
#include <string>
#include <string_view>

#include "einshard/notation/parser.hpp"
#include "einshard/plan/step.hpp"

namespace einshard::testing {

using einshard::plan::StepKind;
inline const std::string SPLIT = einshard::plan::step_name(StepKind::split);
inline const std::string GATHER = einshard::plan::step_name(StepKind::gather);
inline const std::string GATHER_P = einshard::plan::step_name(StepKind::gather_to_partial);
inline const std::string ALLTOALL = einshard::plan::step_name(StepKind::redistribute);
inline const std::string ALLREDUCE = einshard::plan::step_name(StepKind::all_reduce);
inline const std::string RS = einshard::plan::step_name(StepKind::reduce_scatter);
inline const std::string ADD_P = einshard::plan::step_name(StepKind::add_partial);
inline const std::string PERMUTE = einshard::plan::step_name(StepKind::permute);
inline const std::string EINSUM = "rank_local_einsum";

/// A step of input 1 (x), input 2 (y) or of the result (z): "x:name(group,axis)".
inline std::string tag(const std::string& who, const std::string& name, const std::string& group = "",
                       const std::string& axis = "") {
  std::string s = who + ":" + name;
  if (!group.empty() || !axis.empty()) s += "(" + group + (axis.empty() ? "" : "," + axis) + ")";
  return s;
}
inline std::string x(const std::string& n, const std::string& g = "", const std::string& a = "") { return tag("x", n, g, a); }
inline std::string y(const std::string& n, const std::string& g = "", const std::string& a = "") { return tag("y", n, g, a); }
inline std::string z(const std::string& n, const std::string& g = "", const std::string& a = "") { return tag("z", n, g, a); }

/// The expression of `source` for the planner tests; a parse error throws (failing the test case)
/// with the parser's message. The expression views `source`, which the caller keeps alive.
inline einshard::notation::Expression parsed(std::string_view source) {
  auto r = einshard::notation::parse(source);
  if (!r.ok) {
    std::string message;
    einshard::notation::write_message(r.error, [&](char c) { message += c; });
    throw std::runtime_error("parse error in '" + std::string(source) + "': " + message);
  }
  return std::move(r.expression);
}

}  // namespace einshard::testing
