#pragma once
/// @file
/// Umbrella header of the sparse part: `#include <einshard/sparse.hpp>`, `namespace sp =
/// einshard::sparse;`. Its rooms, each standing only on the ones before it:
///
///   sparse/matrix/          CSR, SparseTensor, DSparseTensor, DVector, row layouts, the halo,
///                           assembly, partitioners, kernels, the operator interfaces
///   sparse/preconditioner/  one header per kind, the factory and the cache; AMG (hypre)
///   sparse/io/              save/load and its on-disk format, Matrix Market
///   sparse/krylov/          the methods, their options and results, the solve pipeline
///   sparse/analysis/        eigsh, logdet, Newton, connected components, batches, gathered fallbacks
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/assembly.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/csr_autograd.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/kernels.hpp"
#include "einshard/sparse/matrix/linear_operator.hpp"
#include "einshard/sparse/matrix/partition.hpp"
#include "einshard/sparse/matrix/sparse_tensor.hpp"
#include "einshard/sparse/matrix/stencil.hpp"
#include "einshard/sparse/matrix/stencil_operator.hpp"
#include "einshard/sparse/matrix/transpose.hpp"
#include "einshard/sparse/preconditioner/rigid_body_modes.hpp"
#include "einshard/sparse/io/matrix_market.hpp"
#include "einshard/sparse/io/save_load.hpp"
#include "einshard/sparse/krylov/config.hpp"
#include "einshard/sparse/krylov/least_squares.hpp"
#include "einshard/sparse/krylov/options.hpp"
#include "einshard/sparse/krylov/solve.hpp"
#include "einshard/sparse/analysis/batch.hpp"
#include "einshard/sparse/analysis/components.hpp"
#include "einshard/sparse/analysis/eigsh.hpp"
#include "einshard/sparse/analysis/gathered.hpp"
#include "einshard/sparse/analysis/logdet.hpp"
#include "einshard/sparse/analysis/nonlinear.hpp"
