#pragma once
/// @file
/// Umbrella header of the notation layer: the parser, its compile-time front end and the family
/// expansion. Needs no LibTorch and no MPI.

#include "einshard/error.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/notation/fixed_string.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/notation/static_expression.hpp"
