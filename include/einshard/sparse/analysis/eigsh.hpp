#pragma once
/// @file
/// `DSparseTensor::eigsh`: k eigenpairs of a symmetric (Hermitian) matrix by LOBPCG (Knyazev's
/// three-block form X, W, P) with the basis sharded like the vectors: each rank holds the owned
/// rows (n_local, m) of every block. Per iteration: one block product (one halo exchange for the
/// m columns of W), one all-reduce of the Gram block Z^H [Z, A Z] of the (up to) 3m columns, one
/// all-reduce of the m residual norms. Everything else is m x m work replicated on every rank, so
/// every rank takes the same decisions from the same reduced numbers.
///
/// Orthogonalisation is SVQB (Stathopoulos and Wu): the reduced Gram matrix, scaled to a unit
/// diagonal, is diagonalised and directions below a relative threshold are dropped, which is how
/// rank deficiency (converged residuals, P collinear with X) is handled without a distributed QR.
///
/// `which`: LA and SA run LOBPCG on A itself. LM and SM are true magnitudes: LOBPCG runs on A^2
/// (LM) or on (A^2 + tau I)^-1 (SM: block CG solves; tau > 0 small, so a singular A works), largest
/// algebraic there, and a final Rayleigh-Ritz step with A on the converged block gives signed
/// eigenvalues and separates +-lambda pairs. The preconditioner, when given, applies to the operator LOBPCG runs on.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/random.hpp"

namespace einshard::sparse {

enum class Which { largest_algebraic, smallest_algebraic, largest_magnitude, smallest_magnitude };

struct EigshOptions {
  std::int64_t k = 6;
  /// SciPy's default: largest magnitude.
  Which which = Which::largest_magnitude;
  /// Stop when every wanted Ritz pair has ||A x - lambda x|| <= tol * max(|lambda|, 1e-10 ||A||).
  double tol = 1e-8;
  int maxiter = 500;
  /// Block size m; 0: min(max(2k, k + 2), n), as the original.
  std::int64_t block_size = 0;
  std::uint64_t seed = 0;
  /// Optional preconditioner T: residual block (n_local, m) -> (n_local, m), e.g. R / diag(A).
  std::function<at::Tensor(const at::Tensor&)> preconditioner{};
};

struct EigshResult {
  /// (k,), replicated: LA descending, SA ascending, LM by falling |lambda|, SM by rising |lambda|.
  /// Differentiable w.r.t. the stored values (d lambda = x^H dA x).
  at::Tensor eigenvalues;
  /// Owned slice (n_local, k), orthonormal columns.
  DVector eigenvectors;
  /// (k,) ||A x_i - lambda_i x_i||, replicated.
  at::Tensor residual_norms;
  int iterations = 0;
  /// Products of A with one column (a block product of m columns counts m).
  std::int64_t matvecs = 0;
  bool converged = false;
};

namespace detail {

struct LobpcgResult {
  at::Tensor theta, x, ax, residual_norms;
  int iterations = 0;
  std::int64_t matvecs = 0;
  bool converged = false;
};

/// LOBPCG for the k extreme eigenpairs of the Hermitian operator `op` on owned blocks.
LobpcgResult lobpcg(const std::function<at::Tensor(const at::Tensor&)>& op, at::Tensor x, std::int64_t k, bool largest,
                    double tol, int maxiter, const std::function<at::Tensor(const at::Tensor&)>& precond, MPI_Comm comm,
                    int products_per_apply);

}  // namespace detail

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

/// Z^H [Z, A Z] summed over the ranks: the Gram block and the projected matrix in one reduction,
/// on the host in one copy (the small replicated work below runs there, on every rank alike,
/// whatever device the blocks live on).
inline std::pair<at::Tensor, at::Tensor> reduced_gram(const at::Tensor& z, const at::Tensor& az, MPI_Comm comm) {
  auto g = at::matmul(z.conj().transpose(0, 1), at::cat({z, az}, 1)).contiguous();
  g = comm::all_reduce(g, comm).cpu();
  const auto p = z.size(1);
  return {g.narrow(1, 0, p), g.narrow(1, p, p)};
}

/// The residual block A X − X diag(θ), θ on the host.
inline at::Tensor ritz_residual(const at::Tensor& x, const at::Tensor& ax, const at::Tensor& theta) {
  return ax - x * theta.to(x.device(), x.scalar_type()).unsqueeze(0);
}

/// The norms of r's columns, reduced, on the host in one copy.
inline at::Tensor column_norms(const at::Tensor& r, MPI_Comm comm) {
  const auto norms = (r.is_complex() ? at::real(r.conj() * r) : r * r).sum(0).to(at::kDouble).contiguous();
  return comm::all_reduce(norms, comm).cpu().sqrt();
}

/// Rayleigh-Ritz on span(Z) given S = Z^H Z and H = Z^H A Z: coefficients C (p x q) with Z C
/// orthonormal (SVQB; q = the directions kept) and the Ritz values theta (q,) and vectors Y
/// (q x q), ordered by `largest`.
struct Ritz {
  at::Tensor coefficients, theta;
  /// The smallest kept eigenvalue of the scaled Gram matrix over its largest: near the drop
  /// threshold, the basis is nearly dependent and its orthonormalization loses accuracy.
  double conditioning = 1.0;
};
inline Ritz rayleigh_ritz(const at::Tensor& s, const at::Tensor& h, bool largest) {
  const auto real = s.is_complex() ? at::real(s.diagonal()) : s.diagonal();
  const double tiny = std::numeric_limits<double>::min();
  const auto d = at::where(real > tiny, real.clamp_min(tiny).rsqrt(), at::zeros_like(real)).to(s.scalar_type());
  const auto scaled = d.unsqueeze(1) * s * d.unsqueeze(0);
  const auto [sv, u] = at::linalg_eigh(0.5 * (scaled + scaled.conj().transpose(0, 1)));
  const double eps = s.scalar_type() == at::kFloat || s.scalar_type() == at::kComplexFloat ? 1e-5 : 1e-11;
  const auto top = sv.numel() ? sv.max().item<double>() : 0.0;
  const auto keep = (sv > eps * top).nonzero().flatten();
  const auto c = d.unsqueeze(1) * u.index_select(1, keep) * sv.index_select(0, keep).rsqrt().to(s.scalar_type()).unsqueeze(0);
  auto hr = at::matmul(c.conj().transpose(0, 1), at::matmul(h, c));
  hr = 0.5 * (hr + hr.conj().transpose(0, 1));
  auto [theta, y] = at::linalg_eigh(hr);
  if (largest) {
    theta = theta.flip(0);
    y = y.flip(1);
  }
  const auto low = keep.numel() ? sv.index_select(0, keep).min().item<double>() : 0.0;
  return {at::matmul(c, y), theta, top > 0 ? low / top : 0.0};
}

/// Y = M^-1 B for a Hermitian positive definite operator M on owned blocks: CG on every column
/// at once (column dots reduced together), until every column's residual is under rtol ||b||.
inline std::pair<at::Tensor, int> block_cg(const std::function<at::Tensor(const at::Tensor&)>& m, const at::Tensor& b,
                                           double rtol, int maxiter, MPI_Comm comm) {
  const auto col_dots = [comm](const at::Tensor& u, const at::Tensor& v) {
    auto d = (u.conj() * v).sum(0);
    d = (d.is_complex() ? at::real(d) : d).to(at::kDouble).contiguous();
    d = comm::all_reduce(d, comm);
    return d;
  };
  auto x = at::zeros_like(b);
  auto r = b.clone();
  auto p = r.clone();
  auto rr = col_dots(r, r);
  const auto target = (rr.sqrt() * rtol).clamp_min(std::numeric_limits<double>::min());
  int it = 0;
  for (; it < maxiter && (rr.sqrt() > target).any().item<bool>(); ++it) {
    const auto mp = m(p);
    const auto pmp = col_dots(p, mp);
    const auto alpha = at::where(pmp > 0, rr / pmp, at::zeros_like(rr)).to(b.scalar_type()).unsqueeze(0);
    x.add_(p * alpha);
    r.sub_(mp * alpha);
    const auto rr_new = col_dots(r, r);
    const auto beta = at::where(rr > 0, rr_new / rr, at::zeros_like(rr)).to(b.scalar_type()).unsqueeze(0);
    p = r + p * beta;
    rr = rr_new;
  }
  return {x, it};
}

EINSHARD_INLINE LobpcgResult lobpcg(const std::function<at::Tensor(const at::Tensor&)>& op, at::Tensor x, std::int64_t k,
                           bool largest, double tol, int maxiter,
                           const std::function<at::Tensor(const at::Tensor&)>& precond, MPI_Comm comm,
                           int products_per_apply) {
  const auto m = x.size(1);
  LobpcgResult out;
  auto ax = op(x);
  out.matvecs += m * products_per_apply;
  {
    auto [s, h] = reduced_gram(x, ax, comm);
    const auto rr = rayleigh_ritz(s, h, largest);
    const auto q = rr.coefficients.narrow(1, 0, std::min<std::int64_t>(m, rr.coefficients.size(1))).to(x.device());
    x = at::matmul(x, q);
    ax = at::matmul(ax, q);
    out.theta = rr.theta.narrow(0, 0, q.size(1));
  }
  at::Tensor p, ap;
  for (out.iterations = 0;; ++out.iterations) {
    const auto mm = x.size(1);
    const auto r = ritz_residual(x, ax, out.theta);
    out.residual_norms = column_norms(r, comm);
    const auto scale = out.theta.abs().to(at::kDouble);
    const auto floor = std::max(scale.max().item<double>(), 1e-300) * 1e-10;
    const auto wanted = std::min(k, mm);
    const bool done = (out.residual_norms.narrow(0, 0, wanted) <= tol * scale.narrow(0, 0, wanted).clamp_min(floor))
                          .all()
                          .item<bool>();
    if (done || mm < k) {
      out.converged = done;
      break;
    }
    if (out.iterations >= maxiter) break;
    auto w = precond ? precond(r) : r;
    const auto aw = op(w);
    out.matvecs += w.size(1) * products_per_apply;
    auto z = p.defined() ? at::cat({x, w, p}, 1) : at::cat({x, w}, 1);
    auto az = p.defined() ? at::cat({ax, aw, ap}, 1) : at::cat({ax, aw}, 1);
    auto [s, h] = reduced_gram(z, az, comm);
    auto rr = rayleigh_ritz(s, h, largest);
    // P (nearly) in the span of X and W: drop it and restart the three-term recurrence. Going on
    // with a nearly dependent basis loses orthogonality each step, and on clustered spectra the
    // losses compound until the iteration diverges.
    const double restart = s.scalar_type() == at::kFloat || s.scalar_type() == at::kComplexFloat ? 1e-3 : 1e-8;
    if (p.defined() && (rr.coefficients.size(1) < mm || rr.conditioning < restart)) {
      z = at::cat({x, w}, 1);
      az = at::cat({ax, aw}, 1);
      const auto q = 2 * mm;
      rr = rayleigh_ritz(s.narrow(0, 0, q).narrow(1, 0, q), h.narrow(0, 0, q).narrow(1, 0, q), largest);
    }
    const auto keep = std::min<std::int64_t>(mm, rr.coefficients.size(1));
    const auto c = rr.coefficients.narrow(1, 0, keep).to(z.device());
    const auto cx = c.narrow(0, mm, c.size(0) - mm);  // the W and P parts: the new search direction
    p = at::matmul(z.narrow(1, mm, z.size(1) - mm), cx);
    ap = at::matmul(az.narrow(1, mm, az.size(1) - mm), cx);
    x = at::matmul(z, c);
    ax = at::matmul(az, c);
    out.theta = rr.theta.narrow(0, 0, keep);
  }
  out.x = x;
  out.ax = ax;
  return out;
}

}  // namespace detail

EINSHARD_INLINE EigshResult DSparseTensor::eigsh() const { return eigsh(EigshOptions{}); }

EINSHARD_INLINE EigshResult DSparseTensor::eigsh(const EigshOptions& options) const {
  const MPI_Comm comm = layout_->comm();
  const auto k = options.k;
  const auto m = options.block_size > 0 ? std::min(options.block_size, n_) : std::min(std::max(2 * k, k + 2), n_);
  std::string fault;
  if (m_ != n_)
    fault = "DSparseTensor::eigsh: expected a square (symmetric) matrix, found shape (" + std::to_string(m_) + ", " +
            std::to_string(n_) + ")";
  else if (k < 1 || k > n_)
    fault = "DSparseTensor::eigsh: expected 1 <= k <= n = " + std::to_string(n_) + ", got k = " + std::to_string(k);
  else if (m < k)
    fault = "DSparseTensor::eigsh: expected block_size >= k = " + std::to_string(k) + ", got " + std::to_string(m);
  else if (options.maxiter < 0 || !(options.tol > 0))
    fault = "DSparseTensor::eigsh: expected tol > 0 and maxiter >= 0, got tol = " + std::to_string(options.tol) +
            ", maxiter = " + std::to_string(options.maxiter);
  comm::raise_if_any(comm, fault);  // the same inputs everywhere, but a stray rank must not hang the rest

  using W = Which;
  const bool magnitude = options.which == W::largest_magnitude || options.which == W::smallest_magnitude;
  std::int64_t inner = 0;  // products with A inside the SM operator's solves
  std::function<at::Tensor(const at::Tensor&)> op;
  if (options.which == W::largest_magnitude) {
    op = [this](const at::Tensor& x) { return apply_block(apply_block(x)); };
  } else if (options.which == W::smallest_magnitude) {
    // The largest eigenvalues of (A^2 + tau I)^-1: 1 / (lambda^2 + tau), well separated at the
    // small |lambda| end, so LOBPCG converges at the speed of LA there (A^2 would crowd them at
    // 0). A^2 + tau I is positive definite even when A is singular, so each application is one
    // block CG solve (all columns at once: one all-reduce of the column dots per half-step), and
    // a zero eigenvalue comes out first (1 / tau) instead of stalling the solve. The shift keeps
    // A's eigenvectors and their order by |lambda|; the Rayleigh-Ritz step with A below gives the
    // values. tau = (1e-2 ||A||_inf)^2: far above the rounding of A^2 v (eps ||A||^2 ||v||), and
    // the solves stay well conditioned (tau = 1e-12 ||A||^2 stalled LOBPCG on a double zero).
    const double scale = norm("inf");
    const double tau = scale > 0 ? (1e-2 * scale) * (1e-2 * scale) : 1.0;
    op = [this, &inner, tau](const at::Tensor& x) {
      const auto square = [this, tau](const at::Tensor& v) { return apply_block(apply_block(v)) + tau * v; };
      auto [y, iterations] = detail::block_cg(square, x, 1e-13, 100000, layout_->comm());
      inner += 2 * iterations * x.size(1);
      return y;
    };
  } else {
    op = [this](const at::Tensor& x) { return apply_block(x); };
  }
  const bool largest = options.which != W::smallest_algebraic;
  // The start is drawn on the host (per global row), then lives on the matrix's device.
  const auto device = local_.values.device();
  const auto x0 = detail::counter_random(*layout_, m, options.seed, false, dtype()).to(device);
  auto run = detail::lobpcg(op, x0, k, largest, options.tol, options.maxiter, options.preconditioner, comm,
                            options.which == W::largest_magnitude ? 2 : options.which == W::smallest_magnitude ? 0 : 1);
  run.matvecs += inner;
  at::Tensor x = run.x, theta = run.theta, residuals = run.residual_norms;
  if (magnitude) {
    // Signed eigenvalues of A on the converged block; ordered by |lambda|.
    auto ax = apply_block(x);
    run.matvecs += x.size(1);
    auto [s, h] = detail::reduced_gram(x, ax, comm);
    const auto rr = detail::rayleigh_ritz(s, h, false);
    const auto order = at::argsort(rr.theta.abs(), 0, options.which == W::largest_magnitude);
    const auto c = rr.coefficients.index_select(1, order).to(device);
    x = at::matmul(x, c);
    ax = at::matmul(ax, c);
    theta = rr.theta.index_select(0, order);
    residuals = detail::column_norms(detail::ritz_residual(x, ax, theta), comm);
  }
  const auto kk = std::min<std::int64_t>(k, x.size(1));
  x = x.narrow(1, 0, kk).contiguous();
  theta = theta.narrow(0, 0, kk).to(device).contiguous();
  EigshResult result;
  result.eigenvectors = DVector(layout_, x);
  result.residual_norms = residuals.narrow(0, 0, kk).to(device).clone();
  result.iterations = run.iterations;
  result.matvecs = run.matvecs;
  result.converged = run.converged;
  result.eigenvalues = theta;
  if (at::GradMode::is_enabled() && local_.values.requires_grad()) {
    // d lambda_i = x_i^H dA x_i with x_i fixed: the Rayleigh quotients, differentiated through
    // the distributed product, carry the gradient; the values stay LOBPCG's.
    std::vector<at::Tensor> quotients;
    for (std::int64_t i = 0; i < kk; ++i) {
      const DVector xi(layout_, x.select(1, i).contiguous());
      const auto q = dot(xi, matvec(xi));
      quotients.push_back(q.is_complex() ? at::real(q) : q);
    }
    const auto rq = at::stack(quotients);
    result.eigenvalues = theta.detach() + (rq - rq.detach()).to(theta.scalar_type());
  }
  return result;
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
