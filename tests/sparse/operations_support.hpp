#pragma once
/// @file
/// Helpers of the tests of the DSparseTensor operations (components, files, spectra, Newton,
/// determinants): the world mesh, the partitions every test runs under, and collective checks.

#include <ATen/ATen.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace einshard::testing {

inline Mesh world_mesh() { return Mesh(MPI_COMM_WORLD, {world().size}, {"x"}); }

/// A global COO partitioned simply or by RCB over `coords` (the distributed matrix under test).
inline sparse::DSparseTensor distribute(const Coo& a, const Mesh& mesh, sparse::PartitionMethod method,
                                        const at::Tensor& coords) {
  const sparse::SparseTensor A(a.values, a.rows, a.cols, {a.n, a.n});
  if (method == sparse::PartitionMethod::simple) return sparse::DSparseTensor::partition(A, mesh);
  return sparse::DSparseTensor::partition(A, mesh, {.method = method, .coords = coords});
}

/// True when every rank holds the same string (collective).
inline bool agrees_on_every_rank(const std::string& s) {
  int n = static_cast<int>(s.size()), lo = n, hi = n;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (lo != hi) return false;
  std::string root = s;
  MPI_Bcast(root.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  int same = root == s ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return same != 0;
}

}  // namespace einshard::testing
