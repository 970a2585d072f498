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

/// A 13 x 9 matrix, each rank of `mesh` assembling the rows of its simple block: entries
/// (i, (3i + j) mod 9) = 1 + i - j / 2 for j < 3. Rectangular, so its columns have their own partition.
inline sparse::DSparseTensor rectangular_13x9(const Mesh& mesh) {
  const std::int64_t m = 13, n = 9;
  const auto [first, last] = sparse::simple_rows(m, mesh.comm());
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  for (auto i = first; i < last; ++i)
    for (std::int64_t j = 0; j < 3; ++j) r.push_back(i), c.push_back((3 * i + j) % n), v.push_back(1.0 + i - 0.5 * j);
  const auto k = static_cast<std::int64_t>(v.size());
  return sparse::DSparseTensor::from_local(at::tensor(v, at::kDouble).view({k}), at::tensor(r, at::kLong).view({k}),
                                           at::tensor(c, at::kLong).view({k}), {m, n}, mesh);
}

/// The same matrix, dense, built on one process (the reference).
inline at::Tensor rectangular_13x9_dense() {
  auto A = at::zeros({13, 9}, at::kDouble);
  for (std::int64_t i = 0; i < 13; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      A[i][(3 * i + j) % 9] += 1.0 + static_cast<double>(i) - 0.5 * static_cast<double>(j);
  return A;
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
