#pragma once
/// @file
/// The generic kernels (kernels.hpp): the products and fused vector updates of csr.hpp,
/// vector_kernels.hpp and block_kernels.hpp made of ATen operations only, so they run on any
/// device ATen runs on (cuSPARSE and CUDA kernels on a GPU) with the results of the native ones.
///
/// The CSR product is ATen's sparse CSR `addmv`/`addmm`: on one CPU core it ran 9x faster than a
/// gather of x followed by `index_add_` or `segment_reduce` over the entries (5-point Poisson,
/// 10⁶ rows: 10 ms against 135 ms), and on CUDA it is cuSPARSE's SpMV.
///
/// Reductions stay on the device until a reduction point needs them: the partial sums of one
/// point travel to the host together, in one copy (`to_host`), then to the one all-reduce.
/// Products and updates run without autograd recording (NoGradGuard), as the native loops do:
/// they update a solver's state, and differentiable products go through csr_autograd.hpp.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <array>
#include <complex>
#include <cstdint>
#include <limits>
#include <vector>

#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/kernels.hpp"

namespace einshard::sparse::detail {

/// The partial sums of one reduction point (tensors of one dtype on one device), flattened and
/// concatenated, on the host in one copy: one synchronisation, not one per scalar.
std::vector<std::complex<double>> to_host(const std::vector<at::Tensor>& sums);

/// Real parts of `to_host`.
std::vector<double> to_host_real(const std::vector<at::Tensor>& sums);

/// Re <a_j, b_j> (a conjugated) of every column of (n, k) blocks (or of 1-D vectors), on the device.
at::Tensor column_dots(const at::Tensor& a, const at::Tensor& b);

/// The row of each stored entry (int64, on the row pointers' device).
at::Tensor row_index(const Csr& a);

/// A rows x cols pattern (row pointers, columns) holding `values` as ATen's sparse CSR tensor on
/// the values' device: 32-bit indices when the entry count and the columns fit (ATen wants both
/// index tensors of one type).
at::Tensor aten_csr(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& values, std::int64_t rows,
                    std::int64_t cols);

/// `a`'s pattern holding `values`.
at::Tensor aten_csr(const Csr& a, const at::Tensor& values);

/// A matrix's local rows (owned columns first, then the ghosts') split for the generic product's
/// overlap, as ATen sparse CSR tensors on the values' device: `interior` holds every row's entries
/// on owned columns (rows x owned), `boundary` the ghost-column entries of the rows that have some,
/// those rows compacted (`rows` lists them, ascending). A [x; g] = interior x, then boundary g
/// added into rows `rows`: the interior product needs no ghost, so it runs while they travel.
struct GenericHaloCsr {
  at::Tensor interior, boundary, rows;
  [[nodiscard]] bool defined() const { return interior.defined(); }
};

GenericHaloCsr generic_halo_csr(const Csr& a, const at::Tensor& values, std::int64_t owned);

/// y = A x for a vector or an (cols, k) block, written into y (beta y added with `beta` nonzero).
void generic_product_into(const at::Tensor& a, const at::Tensor& x, at::Tensor& y, double beta = 0.0);

/// A x (x: vector or block), A = `a` with its own values.
at::Tensor generic_spmv(const Csr& a, const at::Tensor& x);

/// Aᵀ y, or Aᴴ y with `conjugate`.
at::Tensor generic_spmv_transpose(const Csr& a, const at::Tensor& y, bool conjugate = false);

/// The entries on column row + col_offset of each row, summed; zero where a row stores none.
at::Tensor generic_diagonal(const Csr& a, std::int64_t col_offset = 0);

/// s[k] = Σ_j u[i, j] v[c, j] for each stored entry k = (i, c) of `pattern` (csr_autograd.hpp's
/// sampled_product): gathers of both operands' rows, multiplied and summed.
at::Tensor generic_sampled_product(const Csr& pattern, const at::Tensor& u, const at::Tensor& v);

/// A product's own reduction, on the host: ‖y‖² after an update (y = A x + β y), else the partial
/// <w, y> (w conjugated) when `w` is defined.
std::complex<double> generic_product_dot(const at::Tensor& y, const at::Tensor& w, bool update);

/// csr.hpp's spmv_dot: y = A x, returning the partial <w, y> when `w` is defined.
std::complex<double> generic_spmv_dot(const Csr& a, const at::Tensor& x, at::Tensor& y, const at::Tensor& w);

/// vector_kernels.hpp's cg_update: {<r, z or r>, <r, r>}.
std::array<std::complex<double>, 2> generic_cg_update(at::Tensor& x, at::Tensor& r, const at::Tensor& p,
                                                      const at::Tensor& q, double alpha, const at::Tensor& d,
                                                      at::Tensor& z);

/// vector_kernels.hpp's one_reduction_step, the same updates in the same order, and its dots in
/// one host copy.
template <bool Pipelined>
std::array<std::complex<double>, 3> generic_one_reduction_step(at::Tensor& x, at::Tensor& r, at::Tensor& u,
                                                               at::Tensor& w, at::Tensor& p, at::Tensor& s,
                                                               at::Tensor* z, at::Tensor* q, at::Tensor* m,
                                                               const at::Tensor* n, double alpha, double beta,
                                                               const at::Tensor& d, bool identity) {
  const at::NoGradGuard no_grad;
  s.mul_(beta).add_(w);
  p.mul_(beta).add_(u);
  if constexpr (Pipelined) {
    z->mul_(beta).add_(*n);
    q->mul_(beta).add_(*m);
  }
  x.add_(p, alpha);
  r.sub_(s, alpha);
  if constexpr (Pipelined) {
    u.sub_(*q, alpha);
    w.sub_(*z, alpha);
    if (d.defined())
      at::mul_out(*m, d, w);
    else if (identity)
      m->copy_(w);
    const auto o = to_host({at::vdot(r, u), at::vdot(w, u), at::vdot(r, r)});
    return {o[0], o[1], o[2]};
  } else {
    if (d.defined()) {
      at::mul_out(u, d, r);
      const auto o = to_host({at::vdot(r, u), at::vdot(r, r)});
      return {o[0], o[1], {}};
    }
    if (identity) u.copy_(r);
    const auto rr = to_host({at::vdot(r, r)})[0];
    return {identity ? rr : std::complex<double>{}, rr, {}};
  }
}

/// vector_kernels.hpp's axpby_norm: y = a x + c y, returning ‖y‖².
double generic_axpby_norm(double a, const at::Tensor& x, double c, at::Tensor& y);

/// Per-column coefficients as a (k,) tensor of `like`'s dtype and device.
at::Tensor column_coefficients(const std::vector<double>& c, const at::Tensor& like);

/// block_kernels.hpp's block_dots.
std::vector<double> generic_block_dots(const at::Tensor& a, const at::Tensor& b);

/// <a_j, b_j> (a conjugated) of every column of (n, k) blocks, on the device.
at::Tensor column_cdots(const at::Tensor& a, const at::Tensor& b);

/// <a_j, b_j> (a conjugated) of every column, complex (krylov/block.hpp's block_cdots).
std::vector<std::complex<double>> generic_block_cdots(const at::Tensor& a, const at::Tensor& b);

/// block_kernels.hpp's block_cg_update: {Re<r_j, d .* r_j>..., ‖r_j‖²...}.
std::vector<double> generic_block_cg_update(at::Tensor& r, const at::Tensor& q, const std::vector<double>& alpha,
                                            const at::Tensor& d);

/// block_kernels.hpp's block_cg_direction: x_j += α_j p_j, then p_j = d .* z_j + β_j p_j, zero
/// for a stopped column.
void generic_block_cg_direction(at::Tensor& x, at::Tensor& p, const at::Tensor& z, const at::Tensor& d,
                                const std::vector<double>& alpha, const std::vector<double>& beta,
                                const std::vector<char>& active);

/// block_kernels.hpp's block_cgcg_update: {Re<r_j, u_j>..., ‖r_j‖²...}.
std::vector<double> generic_block_cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s,
                                              at::Tensor& u, const at::Tensor& w, const std::vector<double>& alpha,
                                              const std::vector<double>& beta, const at::Tensor& d,
                                              bool identity);

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE std::vector<std::complex<double>> to_host(const std::vector<at::Tensor>& sums) {
  std::vector<at::Tensor> flat;
  flat.reserve(sums.size());
  for (const auto& s : sums) flat.push_back(s.reshape({-1}));
  const auto h = at::cat(flat).to(at::kComplexDouble).cpu().contiguous();
  const auto* p = h.data_ptr<c10::complex<double>>();
  std::vector<std::complex<double>> out(static_cast<std::size_t>(h.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = {p[i].real(), p[i].imag()};
  return out;
}

EINSHARD_INLINE std::vector<double> to_host_real(const std::vector<at::Tensor>& sums) {
  std::vector<double> out;
  for (const auto& c : to_host(sums)) out.push_back(c.real());
  return out;
}

EINSHARD_INLINE at::Tensor column_dots(const at::Tensor& a, const at::Tensor& b) {
  const auto prod = a.is_complex() ? at::real(a.conj() * b) : a * b;
  return prod.sum(0);
}

EINSHARD_INLINE at::Tensor row_index(const Csr& a) {
  const auto rp = a.rowptr.to(at::kLong);
  return at::repeat_interleave(at::arange(a.rows, rp.options()), rp.slice(0, 1) - rp.slice(0, 0, a.rows), {},
                               a.col.numel());
}

EINSHARD_INLINE at::Tensor aten_csr(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& values, std::int64_t rows,
                                    std::int64_t cols) {
  constexpr auto most = std::numeric_limits<std::int32_t>::max();
  const auto small = cols <= most && values.numel() <= most;
  const auto index = at::TensorOptions(small ? at::kInt : at::kLong).device(values.device());
  return at::_sparse_csr_tensor_unsafe(rowptr.to(index), col.to(index), values.contiguous(), {rows, cols},
                                       values.options().layout(at::kSparseCsr));
}

EINSHARD_INLINE at::Tensor aten_csr(const Csr& a, const at::Tensor& values) {
  return aten_csr(a.rowptr, a.col, values, a.rows, a.cols);
}

EINSHARD_INLINE GenericHaloCsr generic_halo_csr(const Csr& a, const at::Tensor& values, std::int64_t owned) {
  const auto row = row_index(a);
  const auto col = a.col.to(at::kLong);
  const auto on = col < owned, off = col >= owned;
  const auto interior_ptr = at::_convert_indices_from_coo_to_csr(row.masked_select(on), a.rows);
  const auto [rows, inverse, counts] = at::unique_consecutive(row.masked_select(off), false, true);
  (void)inverse;
  const auto boundary_ptr = at::cat({at::zeros({1}, counts.options()), counts.cumsum(0)});
  return {aten_csr(interior_ptr, col.masked_select(on), values.masked_select(on), a.rows, owned),
          aten_csr(boundary_ptr, col.masked_select(off) - owned, values.masked_select(off), rows.numel(), a.cols - owned),
          rows};
}

EINSHARD_INLINE void generic_product_into(const at::Tensor& a, const at::Tensor& x, at::Tensor& y, double beta) {
  const at::NoGradGuard no_grad;
  if (x.dim() == 1)
    at::addmv_out(y, y, a, x, beta, 1.0);
  else
    at::addmm_out(y, y, a, x, beta, 1.0);
}

EINSHARD_INLINE at::Tensor generic_spmv(const Csr& a, const at::Tensor& x) {
  const auto xc = x.to(a.dtype()).contiguous();
  auto y = at::empty(x.dim() == 1 ? std::vector<std::int64_t>{a.rows} : std::vector<std::int64_t>{a.rows, x.size(1)},
                     a.values.options());
  generic_product_into(aten_csr(a, a.values), xc, y);
  return y;
}

EINSHARD_INLINE at::Tensor generic_spmv_transpose(const Csr& a, const at::Tensor& y, bool conjugate) {
  const auto v = conjugate && a.values.is_complex() ? a.values.conj().resolve_conj() : a.values;
  const auto yc = y.to(a.dtype()).contiguous();
  return y.dim() == 1 ? at::mv(aten_csr(a, v).t(), yc) : at::mm(aten_csr(a, v).t(), yc);
}

EINSHARD_INLINE at::Tensor generic_diagonal(const Csr& a, std::int64_t col_offset) {
  const auto row = row_index(a);
  const auto on = a.col.to(at::kLong) == row + col_offset;
  const auto v = a.values.detach();  // a preconditioner's setup, not recorded (as the native loop)
  return at::zeros({a.rows}, v.options()).index_add_(0, row.masked_select(on), v.masked_select(on));
}

EINSHARD_INLINE at::Tensor generic_sampled_product(const Csr& pattern, const at::Tensor& u, const at::Tensor& v) {
  const auto uc = u.resolve_conj(), vc = v.resolve_conj();
  const auto u2 = uc.dim() == 1 ? uc.unsqueeze(1) : uc, v2 = vc.dim() == 1 ? vc.unsqueeze(1) : vc;
  return (u2.index_select(0, row_index(pattern)) * v2.index_select(0, pattern.col.to(at::kLong))).sum(1);
}

EINSHARD_INLINE std::complex<double> generic_product_dot(const at::Tensor& y, const at::Tensor& w, bool update) {
  if (update) return to_host({at::vdot(y, y)})[0];
  return w.defined() ? to_host({at::vdot(w, y)})[0] : std::complex<double>{};
}

EINSHARD_INLINE std::complex<double> generic_spmv_dot(const Csr& a, const at::Tensor& x, at::Tensor& y, const at::Tensor& w) {
  generic_product_into(aten_csr(a, a.values), x, y);
  return generic_product_dot(y, w, false);
}

EINSHARD_INLINE std::array<std::complex<double>, 2> generic_cg_update(at::Tensor& x, at::Tensor& r, const at::Tensor& p,
                                                                      const at::Tensor& q, double alpha, const at::Tensor& d,
                                                                      at::Tensor& z) {
  const at::NoGradGuard no_grad;
  x.add_(p, alpha);
  r.sub_(q, alpha);
  if (!d.defined()) {
    const auto rr = to_host({at::vdot(r, r)})[0];
    return {rr, rr};
  }
  at::mul_out(z, d, r);
  const auto s = to_host({at::vdot(r, z), at::vdot(r, r)});
  return {s[0], s[1]};
}

EINSHARD_INLINE double generic_axpby_norm(double a, const at::Tensor& x, double c, at::Tensor& y) {
  const at::NoGradGuard no_grad;
  y.mul_(c).add_(x, a);
  return to_host({at::vdot(y, y)})[0].real();
}

EINSHARD_INLINE at::Tensor column_coefficients(const std::vector<double>& c, const at::Tensor& like) {
  return at::tensor(c, at::kDouble).to(like.options());
}

EINSHARD_INLINE std::vector<double> generic_block_dots(const at::Tensor& a, const at::Tensor& b) {
  return to_host_real({column_dots(a, b)});
}

EINSHARD_INLINE at::Tensor column_cdots(const at::Tensor& a, const at::Tensor& b) {
  return (a.is_complex() ? a.conj() * b : a * b).sum(0);
}

EINSHARD_INLINE std::vector<std::complex<double>> generic_block_cdots(const at::Tensor& a, const at::Tensor& b) {
  return to_host({column_cdots(a, b)});
}

EINSHARD_INLINE std::vector<double> generic_block_cg_update(at::Tensor& r, const at::Tensor& q, const std::vector<double>& alpha,
                                                            const at::Tensor& d) {
  const at::NoGradGuard no_grad;
  r.sub_(q * column_coefficients(alpha, r));
  const auto rr = column_dots(r, r);
  return to_host_real({d.defined() ? column_dots(r, r * d.unsqueeze(1)) : rr, rr});
}

EINSHARD_INLINE void generic_block_cg_direction(at::Tensor& x, at::Tensor& p, const at::Tensor& z, const at::Tensor& d,
                                                const std::vector<double>& alpha, const std::vector<double>& beta,
                                                const std::vector<char>& active) {
  const at::NoGradGuard no_grad;
  x.add_(p * column_coefficients(alpha, x));
  std::vector<double> on(active.begin(), active.end());
  p.mul_(column_coefficients(beta, p)).add_(d.defined() ? z * d.unsqueeze(1) : z).mul_(column_coefficients(on, p));
}

EINSHARD_INLINE std::vector<double> generic_block_cgcg_update(at::Tensor& x, at::Tensor& r, at::Tensor& p, at::Tensor& s,
                                                              at::Tensor& u, const at::Tensor& w, const std::vector<double>& alpha,
                                                              const std::vector<double>& beta, const at::Tensor& d,
                                                              bool identity) {
  const at::NoGradGuard no_grad;
  const auto a = column_coefficients(alpha, x), b = column_coefficients(beta, x);
  p.mul_(b).add_(u);
  s.mul_(b).add_(w);
  x.add_(p * a);
  r.sub_(s * a);
  const auto rr = column_dots(r, r);
  if (d.defined())
    at::mul_out(u, r, d.unsqueeze(1));
  else if (identity)
    u.copy_(r);
  return to_host_real({d.defined() || identity ? column_dots(r, u) : at::zeros_like(rr), rr});
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse::detail
