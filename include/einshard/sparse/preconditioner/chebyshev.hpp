#pragma once
/// @file
/// The Chebyshev polynomial preconditioner over the distributed operator (its largest eigenvalue
/// estimated by Lanczos at setup).

#include <ATen/ATen.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/kernels.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/matrix/random.hpp"
#include "einshard/sparse/preconditioner/jacobi.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// A reproducible vector in [-1, 1) keyed by each row's position in rank order (splitmix64), so
/// with contiguous ownership it is the same global vector at every world size.
inline at::Tensor pseudo_random(std::int64_t offset, std::int64_t n, at::ScalarType dtype) {
  auto out = at::empty({n}, at::kDouble);
  auto* p = out.data_ptr<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<double>(splitmix64(static_cast<std::uint64_t>(offset + i)) >> 11) * 0x1.0p-52 - 1.0;
  }
  return out.to(dtype);
}

/// Chebyshev polynomial preconditioner (Saad, Iterative Methods, Algorithm 12.1, with the Jacobi
/// scaling inside): z = q(D⁻¹A) D⁻¹ r, q of degree `degree` the Chebyshev approximation of 1/λ on
/// [lo, hi]. Each application is `degree` distributed matvecs plus vector updates; with x₀ = 0 it
/// is a fixed linear operator, symmetric when A is, and definite with A's sign for every
/// eigenvalue of D⁻¹A below hi (hence the 1.1 safety factor on the estimate).
class ChebyshevOp final : public PreconditionerOp {
 public:
  ChebyshevOp(const LocalRows& rows, Matvec matvec, const PreconditionerOptions& opts)
      : matvec_(std::move(matvec)), degree_(opts.chebyshev_degree) {
    agreed_setup(rows.comm, [&] {
      check_rows(rows);
      if (rows.a.dtype() != at::kFloat && rows.a.dtype() != at::kDouble)
        throw Error(std::string("chebyshev preconditioner setup: expected float32 or float64 values, found ") +
                    c10::toString(rows.a.dtype()));
      if (opts.chebyshev_degree < 1 || opts.eig_iterations < 1 || !(opts.chebyshev_lower > 0) ||
          !(opts.chebyshev_lower < 1.1))
        throw Error("chebyshev options: expected chebyshev_degree ≥ 1, eig_iterations ≥ 1 and "
                    "0 < chebyshev_lower < 1.1, found " + std::to_string(opts.chebyshev_degree) + ", " +
                    std::to_string(opts.eig_iterations) + " and " + std::to_string(opts.chebyshev_lower));
    });
    inv_diag_ = inverse_diagonal(rows);
    lambda_max_ = estimate_lambda_max(rows, opts.eig_iterations);
    lo_ = opts.chebyshev_lower * lambda_max_;
    hi_ = 1.1 * lambda_max_;
    theta_ = (hi_ + lo_) / 2;
    delta_ = (hi_ - lo_) / 2;
    const auto n = rows.n_owned;
    const auto o = rows.a.values.options();
    res_ = at::empty({n}, o);
    dir_ = at::empty({n}, o);
    tmp_ = at::empty({n}, o);
  }

  void apply(const at::Tensor& r, at::Tensor& z) const override {
    if (!native(r, z)) {
      at::mul_out(dir_, r, inv_diag_).mul_(1 / theta_);
      z.copy_(dir_);
    } else {
      vector_pass<0>(z.scalar_type(), z.numel(), [&](auto v0) {
        using V = decltype(v0);
        const auto* __restrict rp = r.data_ptr<V>();
        const auto* __restrict dp = inv_diag_.data_ptr<V>();
        auto* __restrict dir = dir_.data_ptr<V>();
        auto* __restrict zp = z.data_ptr<V>();
        const V c = static_cast<V>(1 / theta_);
        return [=](std::int64_t i, V*) { zp[i] = dir[i] = c * dp[i] * rp[i]; };
      });
    }
    steps(r, z);
  }
  /// x += q(D⁻¹A) D⁻¹ (b − A x): the polynomial applied to the residual of x, which it forms
  /// itself, its terms added to x as they come (a multigrid level's smoothing after the coarse
  /// correction: one pass per term, where a residual, a correction and a sum would be three).
  void smooth(const at::Tensor& b, at::Tensor& x) const {
    matvec_(x, tmp_);
    step(b, x, 0.0, 1 / theta_);
    steps(res_, x);
  }
  [[nodiscard]] std::string name() const override { return "chebyshev(" + std::to_string(degree_) + ")"; }
  [[nodiscard]] double lambda_max() const { return lambda_max_; }
  [[nodiscard]] std::pair<double, double> bounds() const { return {lo_, hi_}; }

 private:
  /// Largest Ritz value of D⁻¹A after `steps` Lanczos steps, run as Jacobi-PCG: the CG
  /// coefficients give the Lanczos tridiagonal T (T₀₀ = 1/α₀, T_kk = 1/α_k + β_{k−1}/α_{k−1},
  /// T_{k,k+1} = √β_k / α_k). All scalars are sums over the ranks, so every rank takes the same
  /// branches. A negative-definite pair (A, D) gives positive α and β too.
  double estimate_lambda_max(const LocalRows& rows, int steps) {
    const std::int64_t mine = rows.n_owned;
    const auto counts = comm::all_gather_values(std::span<const std::int64_t>(&mine, 1), rows.comm);
    std::int64_t offset = 0, total = 0;
    const auto me = static_cast<std::size_t>(comm::rank_of(rows.comm));
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (r < me) offset += counts[r];
      total += counts[r];
    }
    if (total == 0) return 1.0;
    const auto dot = [&](const at::Tensor& x, const at::Tensor& y) { return at::dot(x, y).item<double>(); };
    auto r = pseudo_random(offset, rows.n_owned, rows.a.dtype()).to(inv_diag_.device());
    auto z = r * inv_diag_;
    auto p = z.clone();
    auto q = at::empty_like(p);
    const auto not_definite = [](const std::string& found) {
      return Error("chebyshev preconditioner setup: expected D⁻¹A definite (A symmetric definite "
                   "with a diagonal of the same sign), found " + found + " in its Lanczos estimate");
    };
    double rz = dot(r, z);
    rz = comm::all_reduce_value(rz, comm::Reduction::sum, rows.comm);
    if (!std::isfinite(rz) || rz == 0) throw not_definite("r·D⁻¹r = " + std::to_string(rz));
    std::vector<double> alpha, beta;
    for (int k = 0; k < steps; ++k) {
      matvec_(p, q);
      double pq = dot(p, q);
      pq = comm::all_reduce_value(pq, comm::Reduction::sum, rows.comm);
      const double a = rz / pq;
      if (!std::isfinite(a) || a <= 0)
        throw not_definite("p·Ap = " + std::to_string(pq) + " against r·D⁻¹r = " + std::to_string(rz));
      alpha.push_back(a);
      r.sub_(q, a);
      at::mul_out(z, r, inv_diag_);
      double rz_next = dot(r, z);
      rz_next = comm::all_reduce_value(rz_next, comm::Reduction::sum, rows.comm);
      const double b = rz_next / rz;
      if (b == 0) break;  // the Krylov space is exhausted: T is exact
      if (!std::isfinite(b) || b < 0)
        throw not_definite("r·D⁻¹r = " + std::to_string(rz_next) + " after " + std::to_string(rz));
      beta.push_back(b);
      p.mul_(b).add_(z);
      rz = rz_next;
    }
    const auto m = static_cast<std::int64_t>(alpha.size());
    auto t = at::zeros({m, m}, at::kDouble);
    auto* tp = t.data_ptr<double>();
    for (std::int64_t k = 0; k < m; ++k) {
      const auto ku = static_cast<std::size_t>(k);
      tp[k * m + k] = 1 / alpha[ku] + (k > 0 ? beta[ku - 1] / alpha[ku - 1] : 0.0);
      if (k + 1 < m) tp[k * m + k + 1] = tp[(k + 1) * m + k] = std::sqrt(beta[ku]) / alpha[ku];
    }
    return at::linalg_eigvalsh(t).max().item<double>();
  }

  /// The fused loops' case: host vectors of the matrix's dtype (a PrecisionAdapter hands other
  /// dtypes over converted, and ATen's ops take any).
  bool native(const at::Tensor& r, const at::Tensor& z) const {
    return !uses_generic(z) && z.scalar_type() == inv_diag_.scalar_type() && r.scalar_type() == z.scalar_type() &&
           r.is_contiguous() && z.is_contiguous();
  }
  /// The polynomial's `degree_` terms after its first (in dir_), each added to z; `r`: the
  /// residual the first term was made from.
  void steps(const at::Tensor& r, at::Tensor& z) const {
    const double sigma = theta_ / delta_;
    double rho = 1 / sigma;
    for (int k = 0; k < degree_; ++k) {
      matvec_(dir_, tmp_);
      const double rho_next = 1 / (2 * sigma - rho);
      step(k == 0 ? r : res_, z, rho_next * rho, 2 * rho_next / delta_);
      rho = rho_next;
    }
  }
  /// res = r − tmp, dir = c_dir dir + c_res D⁻¹ res, z += dir, in one pass (dir not read when
  /// c_dir is 0: the first term of `smooth`, whose dir_ holds the last call's).
  void step(const at::Tensor& r, at::Tensor& z, double c_dir, double c_res) const {
    if (!native(r, z)) {
      at::sub_out(res_, r, tmp_);
      (c_dir == 0 ? dir_.zero_() : dir_.mul_(c_dir)).addcmul_(res_, inv_diag_, c_res);
      z.add_(dir_);
      return;
    }
    vector_pass<0>(z.scalar_type(), z.numel(), [&](auto v0) {
      using V = decltype(v0);
      const auto* rp = r.data_ptr<V>();  // res_ itself after the first term
      const auto* __restrict tp = tmp_.data_ptr<V>();
      const auto* __restrict dp = inv_diag_.data_ptr<V>();
      auto* __restrict res = res_.data_ptr<V>();
      auto* __restrict dir = dir_.data_ptr<V>();
      auto* __restrict zp = z.data_ptr<V>();
      const V a = static_cast<V>(c_dir), c = static_cast<V>(c_res);
      const bool fresh = c_dir == 0;
      return [=](std::int64_t i, V*) {
        const V ri = rp[i] - tp[i];
        res[i] = ri;
        const V di = (fresh ? V{} : a * dir[i]) + c * dp[i] * ri;
        dir[i] = di;
        zp[i] += di;
      };
    });
  }

  Matvec matvec_;
  int degree_;
  at::Tensor inv_diag_;
  double lambda_max_ = 1, lo_ = 0, hi_ = 1;
  double theta_ = 0.5, delta_ = 0.5;  // the interval's centre and half-width
  mutable at::Tensor res_, dir_, tmp_;
};

}  // namespace einshard::sparse::detail
