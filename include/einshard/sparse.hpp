#pragma once
/// @file
/// Umbrella header of the sparse part: `#include <einshard/sparse.hpp>`, `namespace sp =
/// einshard::sparse;`.
#include "einshard/error.hpp"
#include "einshard/sparse/csr.hpp"
#include "einshard/sparse/csr_autograd.hpp"
#include "einshard/sparse/partition.hpp"
#include "einshard/sparse/sparse_tensor.hpp"
