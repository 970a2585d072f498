#pragma once
/// @file
/// Umbrella header of the sparse part: `#include <einshard/sparse.hpp>`, `namespace sp =
/// einshard::sparse;`.
#include "einshard/error.hpp"
#include "einshard/sparse/batch.hpp"
#include "einshard/sparse/csr.hpp"
#include "einshard/sparse/csr_autograd.hpp"
#include "einshard/sparse/dsparse_tensor.hpp"
#include "einshard/sparse/dvector.hpp"
#include "einshard/sparse/least_squares.hpp"
#include "einshard/sparse/matrix_market.hpp"
#include "einshard/sparse/partition.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "einshard/sparse/solver.hpp"
#include "einshard/sparse/solver_config.hpp"
#include "einshard/sparse/sparse_tensor.hpp"
