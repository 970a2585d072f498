#pragma once
/// @file
/// The executor's names for the differentiable communication ops of `comm/autograd.hpp`, which the
/// sparse part uses as well: the executor's code speaks of them unqualified.

#include "einshard/comm/autograd.hpp"

namespace einshard::exec {
using comm::apply_op;
using comm::CommOp;
using comm::records;
}  // namespace einshard::exec
