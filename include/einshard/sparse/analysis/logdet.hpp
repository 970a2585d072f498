#pragma once
/// @file
/// `DSparseTensor::logdet`: log det A of a symmetric (Hermitian) positive definite matrix by
/// Hutchinson's estimator with stochastic Lanczos quadrature (Ubaru, Chen and Saad, 2017):
/// log det A = tr log A ~ (1/p) sum_j ||z_j||^2 e1^T log(T_j) e1, T_j the Lanczos tridiagonal of
/// probe z_j. Distributed for real: the p probes run as one block, so a Lanczos step is one block
/// product (one halo exchange for all probes) and one all-reduce of the p alphas and betas; the
/// probes are Rademacher vectors drawn per global row (random.hpp), so the estimate is the same at
/// any world size and partition and no rank holds a global vector.
///
/// Gradient: d log det A / dA = A^{-T}, estimated with the same probes as (1/p) sum_j u_j z_j^T
/// (symmetrised), u_j = A^{-1} z_j by CG, sampled on the stored pattern: p solves, computed only
/// when the values require grad.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/config.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/analysis/eigsh.hpp"
#include "einshard/sparse/matrix/transpose.hpp"
#include "einshard/sparse/matrix/random.hpp"

namespace einshard::sparse {

struct LogdetOptions {
  int probes = 20;
  int lanczos_steps = 30;
  std::uint64_t seed = 0;
  /// Tolerance of the gradient's CG solves (relative residual).
  double gradient_rtol = 1e-10;
};

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

/// Per-column Lanczos on the block Z (n_local, p) of probes: (alpha, beta) of each column's
/// tridiagonal, a column stopping where its beta falls under 1e-12 ||z|| (an invariant subspace:
/// its quadrature is then exact). Returns the estimate of tr log A.
inline double slq_trace_log(const std::function<at::Tensor(const at::Tensor&)>& op, const at::Tensor& z, int steps,
                            MPI_Comm comm) {
  const auto p = z.size(1);
  auto norms = (z.is_complex() ? at::real(z.conj() * z) : z * z).sum(0).to(at::kDouble).contiguous();
  norms = comm::all_reduce(norms, comm);
  const auto znorm2 = norms.cpu().contiguous();
  auto q = z / norms.sqrt().to(z.scalar_type()).unsqueeze(0);
  at::Tensor q_prev = at::zeros_like(q);
  std::vector<std::vector<double>> alpha(static_cast<std::size_t>(p)), beta(static_cast<std::size_t>(p));
  std::vector<bool> active(static_cast<std::size_t>(p), true);
  auto beta_prev = at::zeros({p}, at::kDouble);
  for (int s = 0; s < steps; ++s) {
    auto w = op(q);
    auto a = (q.conj() * w).sum(0);
    a = (a.is_complex() ? at::real(a) : a).to(at::kDouble).contiguous();
    a = comm::all_reduce(a, comm);
    w = w - q * a.to(q.scalar_type()).unsqueeze(0) - q_prev * beta_prev.to(q.scalar_type()).unsqueeze(0);
    auto b = (w.is_complex() ? at::real(w.conj() * w) : w * w).sum(0).to(at::kDouble).contiguous();
    b = comm::all_reduce(b, comm);
    b = b.sqrt();
    // The step's p alphas and betas to the host in one copy (the tridiagonals are built there).
    const auto ab = at::cat({a, b}).cpu().contiguous();
    const auto* av = ab.data_ptr<double>();
    const auto* bv = av + p;
    bool any = false;
    for (std::int64_t j = 0; j < p; ++j) {
      if (!active[static_cast<std::size_t>(j)]) continue;
      alpha[static_cast<std::size_t>(j)].push_back(av[j]);
      if (bv[j] < 1e-12 || s + 1 == steps)
        active[static_cast<std::size_t>(j)] = false;
      else
        beta[static_cast<std::size_t>(j)].push_back(bv[j]);
      any = any || active[static_cast<std::size_t>(j)];
    }
    if (!any) break;
    q_prev = q;
    const auto safe = at::where(b > 1e-12, b, at::ones_like(b));
    q = w / safe.to(q.scalar_type()).unsqueeze(0);
    beta_prev = b;
  }
  // Quadrature: ||z||^2 sum_l (Y_0l)^2 log(theta_l), theta clamped away from 0.
  double total = 0.0;
  const auto* zn = znorm2.data_ptr<double>();
  for (std::int64_t j = 0; j < p; ++j) {
    const auto& al = alpha[static_cast<std::size_t>(j)];
    const auto& be = beta[static_cast<std::size_t>(j)];
    const auto s = static_cast<std::int64_t>(al.size());
    auto t = at::diag(at::tensor(al, at::kDouble).view({s}));
    if (s > 1) {
      const auto off = at::tensor(std::vector<double>(be.begin(), be.begin() + (s - 1)), at::kDouble).view({s - 1});
      t = t + at::diag(off, 1) + at::diag(off, -1);
    }
    const auto [theta, y] = at::linalg_eigh(t);
    const auto weights = y.select(0, 0).square();
    total += zn[j] * (weights * theta.clamp_min(std::numeric_limits<double>::epsilon()).log()).sum().item<double>();
  }
  return total / static_cast<double>(p);
}

}  // namespace detail

EINSHARD_INLINE at::Tensor DSparseTensor::logdet() const { return logdet(LogdetOptions{}); }

EINSHARD_INLINE at::Tensor DSparseTensor::logdet(const LogdetOptions& options) const {
  std::string fault;
  if (m_ != n_)
    fault = "DSparseTensor::logdet: expected a square matrix, found shape (" + std::to_string(m_) + ", " +
            std::to_string(n_) + ")";
  else if (options.probes < 1 || options.lanczos_steps < 1)
    fault = "DSparseTensor::logdet: expected probes >= 1 and lanczos_steps >= 1, got " +
            std::to_string(options.probes) + " and " + std::to_string(options.lanczos_steps);
  comm::raise_if_any(layout_->comm(), fault);
  // The probes are drawn on the host (per global row), then live on the matrix's device.
  const auto z = detail::counter_random(*layout_, options.probes, options.seed, true, dtype()).to(local_.values.device());
  const double value = n_ == 0 ? 0.0
                               : detail::slq_trace_log([this](const at::Tensor& x) { return apply_block(x); }, z,
                                                       options.lanczos_steps, layout_->comm());
  const auto real_dtype = c10::toRealValueType(dtype());
  auto out = at::scalar_tensor(value, at::TensorOptions().dtype(real_dtype).device(local_.values.device()));
  if (!(at::GradMode::is_enabled() && local_.values.requires_grad()) || n_ == 0) return out;
  // A^{-1} z_j by CG, then (1/p) sum_j (u_j z_j^H + z_j u_j^H)/2 sampled on the stored entries.
  std::vector<at::Tensor> solved;
  for (int j = 0; j < options.probes; ++j) {
    const auto b = DVector(layout_, z.select(1, j).contiguous());
    at::NoGradGuard no_grad;
    solved.push_back(solve(b, {.method = Method::cg, .rtol = options.gradient_rtol, .maxiter = 100000}).x.local());
  }
  const auto u = at::stack(solved, 1).contiguous();
  const auto u_all = at::cat({u, scratch_.exchange()->ghosts_of(u)});
  const auto z_all = at::cat({z, scratch_.exchange()->ghosts_of(z)});
  const auto [v, r, c] = detail::csr_to_coo(local_);
  const auto cols = c.to(at::kLong);
  const auto zr = z.index_select(0, r), ur = u.index_select(0, r);
  const auto zc = z_all.index_select(0, cols), uc = u_all.index_select(0, cols);
  // d/da_rc of tr log A is (A^{-T})_rc = (A^{-1})_cr ~ mean_j u_j[c] conj(z_j[r]), symmetrised.
  auto grad = 0.5 * ((uc * zr.conj()) + (zc * ur.conj())).mean(1);
  if (!local_.values.is_complex()) grad = at::real(grad);
  const auto surrogate = (grad.detach().to(local_.values.scalar_type()) * local_.values).sum();
  const auto s = surrogate.is_complex() ? at::real(surrogate) : surrogate;
  return out + (s - s.detach()).to(real_dtype);
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
