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
    const auto n = rows.n_owned;
    const auto o = rows.a.values.options();
    res_ = at::empty({n}, o);
    dir_ = at::empty({n}, o);
    tmp_ = at::empty({n}, o);
  }

  void apply(const at::Tensor& r, at::Tensor& z) const override {
    const double theta = (hi_ + lo_) / 2, delta = (hi_ - lo_) / 2, sigma = theta / delta;
    double rho = 1 / sigma;
    res_.copy_(r);
    at::mul_out(dir_, res_, inv_diag_).mul_(1 / theta);
    z.copy_(dir_);
    for (int k = 0; k < degree_; ++k) {
      matvec_(dir_, tmp_);
      res_.sub_(tmp_);
      const double rho_next = 1 / (2 * sigma - rho);
      dir_.mul_(rho_next * rho).addcmul_(res_, inv_diag_, 2 * rho_next / delta);
      z.add_(dir_);
      rho = rho_next;
    }
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

  Matvec matvec_;
  int degree_;
  at::Tensor inv_diag_;
  double lambda_max_ = 1, lo_ = 0, hi_ = 1;
  mutable at::Tensor res_, dir_, tmp_;
};

}  // namespace einshard::sparse::detail
