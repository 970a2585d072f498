#pragma once
/// @file
/// Structural queries of a `DSparseTensor` that stay distributed: the transpose and the conjugate
/// transpose with the same row partition (each stored entry travels once, to the owner of its
/// column: one all-to-all, no all-gather), symmetry tests by assembling A - A^T the same way, and
/// the one gather of the whole matrix as a dense tensor (`full_tensor`, and the small coarsest
/// level of a multigrid hierarchy).

#include <ATen/ATen.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <vector>
#include <string>

#include "einshard/comm/collectives.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/config.hpp"
#include "einshard/sparse/matrix/assembly.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"

namespace einshard::sparse {

namespace detail {
/// The global column of each of A's local columns: the domain's owned entries, then the ghosts (the
/// rows' partition for a square matrix without a column partition of its own).
at::Tensor local_to_global_columns(const DSparseTensor& a);
/// This rank's stored entries in global indices (the values as stored, differentiable).
CooEntries global_entries(const DSparseTensor& a);
/// The dense matrix on `root` (every rank when root < 0); an undefined tensor elsewhere.
at::Tensor gather_dense(const DSparseTensor& a, int root);
}  // namespace detail

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

EINSHARD_INLINE at::Tensor local_to_global_columns(const DSparseTensor& a) {
  return at::cat({a.domain_layout()->owned(), a.halo().ghosts});
}

/// This rank's stored entries in global indices (the values as stored, differentiable, on their
/// device; the indices on the host, where assembly and the layouts live).
EINSHARD_INLINE CooEntries global_entries(const DSparseTensor& a) {
  const auto [v, r, c] = csr_to_coo(a.local());
  return {v, a.layout()->owned().index_select(0, r.cpu()), local_to_global_columns(a).index_select(0, c.cpu())};
}

EINSHARD_INLINE at::Tensor gather_dense(const DSparseTensor& a, int root) {
  const auto t = global_entries(a);
  const auto& layout = *a.layout();
  const MPI_Comm comm = layout.comm();
  const auto values = t.values.detach().contiguous();
  const auto index = (t.rows * a.cols() + t.cols).to(values.device()).contiguous();  // row-major position
  const bool here = root < 0 || layout.rank() == root;
  std::vector<std::int64_t> counts;
  if (root < 0) counts = comm::all_gather_values(std::array<std::int64_t, 1>{values.numel()}, comm);
  const auto gather = [&](const at::Tensor& x) {
    return root < 0 ? comm::all_gather(x, 0, counts, comm) : comm::gather_to_root(x, root, comm);
  };
  const auto all_values = gather(values);
  const auto all_index = gather(index);
  if (!here) return {};
  return at::zeros({a.rows() * a.cols()}, values.options()).index_put_({all_index}, all_values, true).view({a.rows(), a.cols()});
}

/// max |a_ij - op(a_ji)| <= atol + rtol max |a_ij| over the whole matrix, where op conjugates
/// when `conjugate`. Collective; the same answer on every rank.
inline bool equals_own_transpose(const DSparseTensor& a, double atol, double rtol, bool conjugate) {
  const auto t = global_entries(a);
  const auto v = t.values.detach();
  const auto vt = conjugate ? v.conj().resolve_conj() : v;
  const auto difference = DSparseTensor::from_local(at::cat({v, -vt}), at::cat({t.rows, t.cols}), at::cat({t.cols, t.rows}),
                                                    a.shape(), a.mesh(), {.owned_rows = a.layout()->owned()});
  const auto d = difference.values().abs();
  std::array<double, 2> worst{d.numel() ? d.max().item<double>() : 0.0, v.numel() ? v.abs().max().item<double>() : 0.0};
  comm::all_reduce_values(std::span<double>(worst), comm::Reduction::max, a.layout()->comm());
  return worst[0] <= atol + rtol * worst[1];
}

}  // namespace detail

/// A^T: entries of row i go to the owner of row j = their column. Differentiable w.r.t. the values
/// of entries that stay on their rank (as `from_local`: gradients reach the rows a rank owns).
EINSHARD_INLINE DSparseTensor DSparseTensor::T() const {
  const auto t = detail::global_entries(*this);
  return from_local(t.values, t.cols, t.rows, shape(), mesh_, {.owned_rows = layout_->owned()});
}

EINSHARD_INLINE DSparseTensor DSparseTensor::H() const {
  const auto t = detail::global_entries(*this);
  return from_local(t.values.conj().resolve_conj(), t.cols, t.rows, shape(), mesh_, {.owned_rows = layout_->owned()});
}

/// Structural and numerical symmetry to atol + rtol max|a| (SciPy/torch-sla's defaults).
EINSHARD_INLINE bool DSparseTensor::is_symmetric(double atol, double rtol) const {
  return detail::equals_own_transpose(*this, atol, rtol, false);
}
EINSHARD_INLINE bool DSparseTensor::is_hermitian(double atol, double rtol) const {
  return detail::equals_own_transpose(*this, atol, rtol, true);
}

EINSHARD_INLINE DSparseTensor DSparseTensor::adjoint() const {
  const auto [v, r, c] = detail::csr_to_coo(local_);
  const auto global_col = at::cat({domain_->owned(), plan_->ghosts}).index_select(0, c.cpu());
  const auto global_row = layout_->owned().index_select(0, r.cpu().to(at::kLong));
  FromLocalOptions o{.owned_rows = domain_->owned()};
  if (domain_ != layout_) o.owned_cols = layout_->owned();
  return from_local(local_.values.is_complex() ? local_.values.conj().resolve_conj() : local_.values, global_col,
                    global_row, {n_, m_}, mesh_, o);
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
