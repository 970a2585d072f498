#pragma once
/// @file
/// What the distributed sparse tests share: the world mesh, the partitions the tests run under,
/// each rank's share of a global matrix, and collective checks and sums.

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

/// The same on the nx x ny grid of poisson2d's unknowns (grid_coords).
inline sparse::DSparseTensor distribute(const Coo& a, const Mesh& mesh, sparse::PartitionMethod method, std::int64_t nx,
                                        std::int64_t ny) {
  return distribute(a, mesh, method, grid_coords(nx, ny));
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

/// The entries of the rows this rank owns under from_local's default (contiguous blocks): each
/// entry handed in once, by its owner, so gradients reach every handed-in value.
inline Coo my_share(const Coo& a) {
  const auto [first, last] = sparse::simple_rows(a.n, MPI_COMM_WORLD);
  const auto pick = ((a.rows >= first) & (a.rows < last)).nonzero().flatten();
  return {a.values.index_select(0, pick), a.rows.index_select(0, pick), a.cols.index_select(0, pick), a.n};
}

/// The square matrix of `share`'s pattern with `values` (this rank's, a leaf for gradients).
inline sparse::DSparseTensor assemble(const Coo& share, const at::Tensor& values, const Mesh& mesh) {
  return sparse::DSparseTensor::from_local(values, share.rows, share.cols, {share.n, share.n}, mesh);
}

/// A float64 tensor summed over the ranks of MPI_COMM_WORLD (each rank's share of a gradient).
inline at::Tensor sum_over_ranks(at::Tensor t) {
  t = t.contiguous().clone();
  MPI_Allreduce(MPI_IN_PLACE, t.data_ptr<double>(), static_cast<int>(t.numel()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return t;
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
