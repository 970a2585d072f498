#pragma once
/// @file
/// The operations of a `DSparseTensor` that gather the whole matrix: `full_tensor` (dense, on every
/// rank), and `det`, `svd(k)`, `condition_number` (dense on rank 0, LAPACK there, the result
/// broadcast). They need O(N^2) memory on one process and do not scale; each says so once per
/// process at run time (rank 0, stderr). `logdet` (logdet.hpp) and `eigsh` are the distributed
/// alternatives.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/config.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/transpose.hpp"

namespace einshard::sparse {

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

/// One line on stderr the first time this process gathers for `op` (rank 0 of the matrix only).
inline void warn_gathering(const char* op, const DSparseTensor& a) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!said.insert(op).second || a.layout()->rank() != 0) return;
  std::fprintf(stderr,
               "DSparseTensor::%s: gathers the whole %lld x %lld matrix to one process and does not "
               "scale (use eigsh or logdet for large matrices)\n",
               op, static_cast<long long>(a.rows()), static_cast<long long>(a.cols()));
}

/// `f(dense)` on rank 0, its doubles broadcast; an Error there (a LAPACK failure) on every rank.
template <class F>
std::vector<double> on_root(const DSparseTensor& a, const char* op, std::size_t count, F&& f) {
  warn_gathering(op, a);
  const MPI_Comm comm = a.layout()->comm();
  const auto dense = gather_dense(a, 0);
  std::vector<double> out(count, 0.0);
  std::string fault;
  if (a.layout()->rank() == 0) {
    try {
      out = f(dense);
    } catch (const std::exception& e) {
      fault = std::string("DSparseTensor::") + op + ": " + e.what();
    }
  }
  comm::raise_if_any(comm, fault);
  comm::broadcast_values(std::span<double>(out), 0, comm);
  return out;
}

}  // namespace detail

EINSHARD_INLINE at::Tensor DSparseTensor::full_tensor() const { return detail::gather_dense(*this, -1); }

/// det A (the real part for complex A), by LU on rank 0.
EINSHARD_INLINE double DSparseTensor::det() const {
  if (m_ != n_)  // the shape is the same on every rank: the same Error, before anything gathers
    throw Error("DSparseTensor::det: expected a square matrix, found shape (" + std::to_string(m_) + ", " +
                std::to_string(n_) + ")");
  return detail::on_root(*this, "det", 1, [](const at::Tensor& d) {
    const auto v = at::linalg_det(d);
    return std::vector<double>{(v.is_complex() ? at::real(v) : v).item<double>()};
  })[0];
}

/// The k largest singular values, descending (all min(m, n) of them when k is larger), by a dense
/// SVD on rank 0.
EINSHARD_INLINE at::Tensor DSparseTensor::svd(std::int64_t k) const {
  if (k < 1) throw Error("DSparseTensor::svd: expected k >= 1, found " + std::to_string(k));
  const auto kk = std::min<std::int64_t>(k, std::min(m_, n_));
  const auto s = detail::on_root(*this, "svd", static_cast<std::size_t>(kk), [kk](const at::Tensor& d) {
    const auto sv = at::linalg_svdvals(d).to(at::kDouble).narrow(0, 0, kk).cpu().contiguous();
    return std::vector<double>(sv.data_ptr<double>(), sv.data_ptr<double>() + kk);
  });
  return at::tensor(s, at::kDouble).view({kk});
}

/// The 2-norm condition number sigma_max / sigma_min over the min(m, n) singular values (infinity
/// when one is zero), as numpy.linalg.cond for a rectangular matrix.
EINSHARD_INLINE double DSparseTensor::condition_number() const {
  return detail::on_root(*this, "condition_number", 1, [](const at::Tensor& d) {
    const auto sv = at::linalg_svdvals(d).to(at::kDouble);
    if (sv.numel() == 0) return std::vector<double>{1.0};
    const auto lo = sv.min().item<double>();
    return std::vector<double>{lo > 0 ? sv.max().item<double>() / lo : HUGE_VAL};
  })[0];
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
