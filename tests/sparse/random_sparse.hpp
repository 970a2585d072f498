#pragma once
/// @file
/// Random sparse matrices of the seeded randomized tests (random_support.hpp): patterns with empty
/// rows, duplicates and couplings between rows far apart, distributed by every partition method or
/// by from_local with random owners and random ranks handing in each entry.

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "einshard/sparse.hpp"
#include "random_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace einshard::testing::random {

/// A random n x n pattern: each row empty with probability `empty`, else a few entries at random
/// columns (near and far), some listed twice; `solvable` adds a dominant diagonal (and makes the
/// matrix symmetric when `symmetric`).
inline Coo random_matrix(Rng& rng, std::int64_t n, bool solvable, bool symmetric) {
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  std::normal_distribution<double> normal;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!solvable && chance(rng, 0.25)) continue;  // an empty row
    for (int k = uniform(rng, 0, 4); k > 0; --k) {
      const auto j = chance(rng, 0.5) ? std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng)
                                      : std::clamp<std::int64_t>(i + uniform(rng, -2, 2), 0, n - 1);
      const double x = normal(rng);
      const int copies = chance(rng, 0.2) ? 2 : 1;  // duplicates are summed
      for (int d = 0; d < copies; ++d) {
        r.push_back(i), c.push_back(j), v.push_back(x / copies);
        if (symmetric) r.push_back(j), c.push_back(i), v.push_back(x / copies);
      }
    }
  }
  if (solvable) {  // |a_ii| > sum_j |a_ij|: nonsingular, and positive definite when symmetric
    std::vector<double> row_sum(static_cast<std::size_t>(n), 0.0);
    for (std::size_t e = 0; e < r.size(); ++e) row_sum[static_cast<std::size_t>(r[e])] += std::abs(v[e]);
    for (std::int64_t i = 0; i < n; ++i) r.push_back(i), c.push_back(i), v.push_back(row_sum[static_cast<std::size_t>(i)] + 1.0);
  }
  const auto m = static_cast<std::int64_t>(r.size());
  return {at::tensor(v, at::kDouble).view({m}), at::tensor(r, at::kLong).view({m}), at::tensor(c, at::kLong).view({m}), n};
}

inline const char* method_name(int m) {
  static const char* const names[] = {"simple", "rcb", "hilbert", "metis", "slicing", "from_local"};
  return names[m];
}

/// The matrix distributed by partition method `m` (5: from_local with random owners and random
/// ranks handing in each entry).
inline sparse::DSparseTensor distribute(Rng& rng, const Coo& a, int m, const Mesh& mesh) {
  using M = sparse::PartitionMethod;
  static const M methods[] = {M::simple, M::rcb, M::hilbert, M::metis, M::slicing};
  const auto w = testing::world();
  if (m < 5) {
    at::manual_seed(rng());
    const sparse::SparseTensor A(a.values, a.rows, a.cols, {a.n, a.n});
    return sparse::DSparseTensor::partition(A, mesh, {.method = methods[m], .coords = at::rand({a.n, 2}, at::kDouble)});
  }
  // Every rank draws every row's owner and every entry's giver from the same stream, so all agree.
  std::vector<std::int64_t> owned, given;
  for (std::int64_t i = 0; i < a.n; ++i)
    if (uniform(rng, 0, w.size - 1) == w.rank) owned.push_back(i);
  for (std::int64_t e = 0; e < a.values.numel(); ++e)
    if (uniform(rng, 0, w.size - 1) == w.rank) given.push_back(e);
  const auto pick = at::tensor(given, at::kLong);
  return sparse::DSparseTensor::from_local(a.values.index_select(0, pick), a.rows.index_select(0, pick),
                                           a.cols.index_select(0, pick), {a.n, a.n}, mesh,
                                           {.owned_rows = at::tensor(owned, at::kLong)});
}

}  // namespace einshard::testing::random
