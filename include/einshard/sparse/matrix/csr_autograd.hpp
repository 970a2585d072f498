#pragma once
/// @file
/// Differentiable CSR products: `csr_matvec` (A x) and `csr_rmatvec` (A^T y) record one autograd
/// node each, whose forward and backward run the CSR kernels of csr.hpp. Gradients follow torch's
/// convention for `at::mv` (conjugates for complex), so they equal those of the dense product.
/// Backward is first order only: the kernels themselves are not recorded.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"

// Compiled (config.hpp), the autograd node and <torch/csrc/autograd/custom_function.h> stay
// inside einshard_compiled.
#if EINSHARD_DEFINE_SPARSE
#include <torch/csrc/autograd/custom_function.h>
#endif

namespace einshard::sparse::detail {

/// `f` on each column of a multi-vector `x` (length, k), or on `x` itself when it is 1-D.
template <class F>
at::Tensor columnwise(const at::Tensor& x, std::int64_t out_length, F&& f) {
  if (x.dim() == 1) return f(x);
  auto y = at::empty({out_length, x.size(1)}, x.options());
  for (std::int64_t j = 0; j < x.size(1); ++j) y.select(1, j).copy_(f(x.select(1, j)));
  return y;
}

/// `pattern` with `values` in place of its own (same rows, columns and order).
inline Csr with_values(const Csr& pattern, const at::Tensor& values) {
  Csr a = pattern;
  a.values = values.contiguous();
  return a;
}

/// s[k] = sum_j u[i, j] v[c, j] for each stored entry k = (i, c) of `pattern`, with u of shape
/// (rows,) or (rows, m) and v of shape (cols,) or (cols, m): u v^T sampled on the pattern, the
/// gradient of a product w.r.t. the values. One pass over the pattern, no row index materialized.
inline at::Tensor sampled_product(const Csr& pattern, const at::Tensor& u, const at::Tensor& v) {
  if (uses_generic(u)) return generic_sampled_product(pattern, u, v);
  const auto uc = u.resolve_conj().contiguous(), vc = v.resolve_conj().contiguous();
  const std::int64_t m = uc.dim() == 2 ? uc.size(1) : 1;
  const Csr out = with_values(pattern, at::empty({pattern.col.numel()}, uc.options()));
  dispatch_csr(out, [&](auto v0, auto i0) {
    using V = decltype(v0);
    using I = decltype(i0);
    const auto* rp = out.rowptr.data_ptr<std::int64_t>();
    const auto* ci = out.col.data_ptr<I>();
    const auto* uv = uc.data_ptr<V>();
    const auto* vv = vc.data_ptr<V>();
    auto* sv = out.values.data_ptr<V>();
    for (std::int64_t i = 0; i < out.rows; ++i)
      for (std::int64_t k = rp[i]; k < rp[i + 1]; ++k) {
        const auto c = static_cast<std::int64_t>(ci[k]);
        V s{};
        for (std::int64_t j = 0; j < m; ++j) s += uv[i * m + j] * vv[c * m + j];
        sv[k] = s;
      }
  });
  return out.values;
}

#if EINSHARD_DEFINE_SPARSE
/// A x or Aᵀ x (Aᴴ x with `conjugate`) by the kernels `x` takes: the generic ones take a whole
/// block at once, the native ones a column at a time.
inline at::Tensor csr_product(const Csr& a, const at::Tensor& x, bool transpose, bool conjugate = false) {
  if (uses_generic(x)) return transpose ? generic_spmv_transpose(a, x, conjugate) : generic_spmv(a, x);
  if (transpose)
    return columnwise(x, a.cols, [&](const at::Tensor& v) { return spmv_transpose(a, v, conjugate); });
  return columnwise(x, a.rows, [&](const at::Tensor& v) { return spmv(a, v); });
}

/// y = A x (`transpose` false) or y = A^T x (true); A is the pattern with `values`.
struct CsrProduct : torch::autograd::Function<CsrProduct> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& values,
                            const at::Tensor& x, const at::Tensor& rowptr, const at::Tensor& col,
                            std::int64_t rows, std::int64_t cols, bool transpose) {
    ctx->save_for_backward({values, x, rowptr, col});
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["cols"] = cols;
    ctx->saved_data["transpose"] = transpose;
    return csr_product(with_values(Csr{rows, cols, rowptr, col, {}}, values), x, transpose);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& values = saved[0];
    const auto& x = saved[1];
    const auto rows = ctx->saved_data["rows"].toInt();
    const auto cols = ctx->saved_data["cols"].toInt();
    const bool transpose = ctx->saved_data["transpose"].toBool();
    const Csr pattern{rows, cols, saved[2], saved[3], {}};
    const auto g = grads[0].contiguous();

    at::Tensor grad_values, grad_x;
    if (ctx->needs_input_grad(0)) {
      // dL/dA[i, j] = g[i] conj(x[j]) for A x; for A^T x the roles of g and x swap.
      grad_values = transpose ? sampled_product(pattern, x.conj(), g)
                              : sampled_product(pattern, g, x.conj());
    }
    if (ctx->needs_input_grad(1)) {
      // (A)^H g = conj(A)^T g for A x; (A^T)^H g = conj(A) g for A^T x.
      if (transpose)
        grad_x = csr_product(with_values(pattern, values.conj().resolve_conj()), g, false);
      else
        grad_x = csr_product(with_values(pattern, values), g, true, /*conjugate=*/true);
    }
    return {grad_values, grad_x, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};
#endif  // EINSHARD_DEFINE_SPARSE

inline void check_product_operands(const Csr& pattern, const at::Tensor& values,
                                   const at::Tensor& x, std::int64_t length, const char* what) {
  if (values.dim() != 1 || values.numel() != pattern.col.numel())
    throw Error(std::string(what) + ": expected " + std::to_string(pattern.col.numel()) +
                " values (the pattern's nnz), found shape " + std::string(c10::str(values.sizes())));
  if ((x.dim() != 1 && x.dim() != 2) || x.size(0) != length)
    throw Error(std::string(what) + ": expected a vector of length " +
                std::to_string(length) + " or a multi-vector (" + std::to_string(length) +
                ", k), found shape " + std::string(c10::str(x.sizes())));
  if (values.device() != x.device())
    throw Error(std::string(what) + ": expected the values and x on one device, found values on " +
                values.device().str() + " and x on " + x.device().str());
}

/// y = A x with A = `pattern` holding `values` (whose own values are ignored); x is (cols,) or
/// (cols, k). Differentiable w.r.t. `values` and `x`. x is converted to the values' dtype
/// (differentiably, so its gradient comes back in its own dtype).
EINSHARD_INLINE at::Tensor csr_matvec(const Csr& pattern, const at::Tensor& values, const at::Tensor& x);
#if EINSHARD_DEFINE_SPARSE
EINSHARD_INLINE at::Tensor csr_matvec(const Csr& pattern, const at::Tensor& values, const at::Tensor& x) {
  check_product_operands(pattern, values, x, pattern.cols, "matvec");
  return CsrProduct::apply(values, x.to(values.scalar_type()), pattern.rowptr, pattern.col,
                           pattern.rows, pattern.cols, false);
}
#endif

/// y = A^T x (no conjugation), x is (rows,) or (rows, k); otherwise as `csr_matvec`.
EINSHARD_INLINE at::Tensor csr_rmatvec(const Csr& pattern, const at::Tensor& values, const at::Tensor& x);
#if EINSHARD_DEFINE_SPARSE
EINSHARD_INLINE at::Tensor csr_rmatvec(const Csr& pattern, const at::Tensor& values, const at::Tensor& x) {
  check_product_operands(pattern, values, x, pattern.rows, "rmatvec");
  return CsrProduct::apply(values, x.to(values.scalar_type()), pattern.rowptr, pattern.col,
                           pattern.rows, pattern.cols, true);
}
#endif

}  // namespace einshard::sparse::detail
