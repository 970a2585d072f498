#pragma once
/// @file
/// Preconditioners of the distributed Krylov solvers: z = M⁻¹ r on each rank's owned slice.
///
/// | kind           | M⁻¹                                                   | setup            | apply          |
/// |----------------|-------------------------------------------------------|------------------|----------------|
/// | `none`         | identity                                              | –                | copy           |
/// | `jacobi`       | 1 / a_ii (sign kept)                                  | local            | 1 multiply     |
/// | `l1_jacobi`    | 1 / Σ_j \|a_ij\| over owned and halo columns          | local            | 1 multiply     |
/// | `block_jacobi` | (L U)⁻¹ of ILU(0) (or (L Lᵀ)⁻¹ of IC(0)) of the owned×owned block | local | 2 sweeps |
/// | `chebyshev`    | q(D⁻¹A) D⁻¹, q the Chebyshev approximation of 1/λ     | Lanczos, collective | degree distributed matvecs |
/// | `ssor`         | (2−ω)(D/ω+U)⁻¹(D/ω)(D/ω+L)⁻¹ of the owned×owned block | local            | 2 sweeps       |
/// | `neumann`      | Σ_{k<d} (I − S A)^k S, S = D⁻¹/‖D⁻¹A‖_∞ (or I/‖A‖_∞)  | 1 all-reduce     | d − 1 distributed matvecs |
/// | `amg`          | one BoomerAMG V-cycle over all ranks (hypre, sparse/amg.hpp) | collective | collective |
///
/// Jacobi, l1-Jacobi, block Jacobi and SSOR ignore the coupling to other ranks (block Jacobi and
/// SSOR drop the halo columns; l1-Jacobi counts them in its row norm), so they need no
/// communication when applied; Chebyshev and Neumann use the full distributed operator. Setup
/// faults (a zero diagonal, a failed pivot, a bad option) found on any rank raise the same `Error`
/// on every rank of `rows.comm`.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/preconditioner/ilu.hpp"
#include "einshard/sparse/preconditioner/options.hpp"

namespace einshard::sparse {

namespace detail {

/// The owned rows of this rank in local column numbering: columns [0, n_owned) are the owned
/// entries of x (in the order of the rows), [n_owned, a.cols) the halo.
struct LocalRows {
  const Csr& a;
  std::int64_t n_owned;
  MPI_Comm comm;
};

/// The distributed y = A x on owned slices (collective over the matrix's communicator).
using Matvec = std::function<void(const at::Tensor& x_owned, at::Tensor& y_owned)>;

/// z = M⁻¹ r. `r` and `z` are owned-length, contiguous, of the matrix's dtype; `z` is written.
struct PreconditionerOp {
  virtual ~PreconditionerOp() = default;
  virtual void apply(const at::Tensor& r, at::Tensor& z) const = 0;
  [[nodiscard]] virtual std::string name() const = 0;
  /// M⁻¹ as a vector when it is diagonal (undefined otherwise), so a Krylov method can fuse it
  /// into its vector updates instead of applying it in a pass of its own.
  [[nodiscard]] virtual at::Tensor diagonal() const { return {}; }
  /// A multigrid hierarchy's levels and operator complexity (Σ nnz(A_l) / nnz(A_0)) for
  /// `SolveInfo`; {0, 0} for a preconditioner without one.
  [[nodiscard]] virtual std::pair<int, double> hierarchy() const { return {0, 0.0}; }
};

/// Runs a rank's local setup and turns any `Error` it throws into a collective one (the lowest
/// failing rank's message, prefixed by that rank, on every rank).
template <class F>
void agreed_setup(MPI_Comm comm, F&& local) {
  std::string fault;
  try {
    local();
  } catch (const Error& e) {
    fault = e.what();
  }
  comm::raise_if_any(comm, fault);
}

inline void check_rows(const LocalRows& rows) {
  if (!rows.a.values.defined() || !rows.a.rowptr.defined() || !rows.a.col.defined())
    throw Error("preconditioner setup: expected the local rows of a matrix, found an uninitialised block");
  if (rows.a.rows != rows.n_owned || rows.a.cols < rows.n_owned)
    throw Error("preconditioner setup: expected " + std::to_string(rows.n_owned) +
                " owned rows with at least as many local columns, found a " + std::to_string(rows.a.rows) + "x" + std::to_string(rows.a.cols) +
                " block");
}

/// A fault message naming the first owned row where `bad` (a bool vector) holds and how many do;
/// empty when none does.
inline std::string first_bad_row(const at::Tensor& bad, const std::string& what) {
  const auto count = bad.sum().item<std::int64_t>();
  if (count == 0) return {};
  const auto first = bad.nonzero().min().item<std::int64_t>();
  return what + " owned row " + std::to_string(first) + " (" + std::to_string(count) + " such row" +
         (count > 1 ? "s" : "") + " on this rank)";
}

class IdentityOp final : public PreconditionerOp {
 public:
  void apply(const at::Tensor& r, at::Tensor& z) const override {
    if (!z.is_same(r)) z.copy_(r);
  }
  [[nodiscard]] std::string name() const override { return "none"; }
};

/// z = s ⊙ r for a fixed vector s (Jacobi and l1-Jacobi).
class DiagonalOp final : public PreconditionerOp {
 public:
  DiagonalOp(at::Tensor scale, std::string name) : scale_(std::move(scale)), name_(std::move(name)) {}
  void apply(const at::Tensor& r, at::Tensor& z) const override { at::mul_out(z, r, scale_); }
  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] at::Tensor diagonal() const override { return scale_; }

 private:
  at::Tensor scale_;
  std::string name_;
};

/// The owned diagonal (duplicates were summed at assembly), or this rank's fault naming `who`
/// when a row stores a zero one or none (local: call it inside agreed_setup).
inline at::Tensor nonzero_diagonal(const LocalRows& rows, const std::string& who) {
  check_rows(rows);
  auto d = diagonal(rows.a);
  const auto fault = first_bad_row(d == 0, who + " preconditioner setup: expected a nonzero diagonal, found a zero one in");
  if (!fault.empty()) throw Error(fault);
  return d;
}

/// 1 / a_ii over the owned rows. The sign is kept, so a negative-definite A gets a
/// negative-definite M, which CG handles like the positive case (the reference clamps the diagonal
/// to ≥ 1e-30, which breaks exactly those matrices). Only an exactly zero diagonal is a fault.
inline at::Tensor inverse_diagonal(const LocalRows& rows, const std::string& who = "jacobi") {
  at::Tensor inv;
  agreed_setup(rows.comm, [&] { inv = nonzero_diagonal(rows, who).reciprocal(); });
  return inv;
}

/// l1-Jacobi: d_i = Σ_j |a_ij| over every stored column of the row, owned and halo, the full ℓ1
/// row norm of hypre's l1-scaled Jacobi (hypre_ParCSRComputeL1Norms, option 1) and of the
/// reference's "jacobi_l1". d_i ≥ |a_ii| + Σ_{j≠i} |a_ij|, so for symmetric A the matrix D − A is
/// diagonally dominant, hence positive semidefinite: the smoother converges without damping, and M
/// is SPD for any A (also indefinite, e.g. for MINRES). Only an all-zero row is a fault.
inline at::Tensor inverse_l1_norms(const LocalRows& rows) {
  at::Tensor inv;
  agreed_setup(rows.comm, [&] {
    check_rows(rows);
    const auto [values, row, col] = csr_to_coo(rows.a);
    const auto magnitude = values.abs();
    const auto norms = at::zeros({rows.n_owned}, magnitude.options()).index_add_(0, row, magnitude);
    const auto fault = first_bad_row(norms == 0, "l1_jacobi preconditioner setup: expected nonzero rows, found an all-zero one at");
    if (!fault.empty()) throw Error(fault);
    inv = norms.reciprocal().to(rows.a.dtype());
  });
  return inv;
}

/// Block Jacobi: ILU(0) or IC(0) of the owned×owned block, applied by two triangular sweeps.
class BlockJacobiOp final : public PreconditionerOp {
 public:
  BlockJacobiOp(const LocalRows& rows, bool ic0) {
    agreed_setup(rows.comm, [&] {
      check_rows(rows);
      const auto block = leading_block(rows.a, rows.n_owned, ic0);
      const auto failed = ic0 ? factor_ic0(block, factor_) : factor_ilu0(block, factor_);
      if (failed >= 0)
        throw Error(std::string("block_jacobi preconditioner setup: expected ") + (ic0 ? "positive IC(0)" : "nonzero ILU(0)") +
                    " pivots, found a " + (ic0 ? "non-positive" : "zero") + " pivot at owned row " +
                    std::to_string(failed) +
                    (ic0 ? " (the block is not positive definite enough for IC(0); try ILU(0))"
                         : " (the owned block needs a nonzero diagonal and no zero pivot)"));
    });
  }
  void apply(const at::Tensor& r, at::Tensor& z) const override { incomplete_solve(factor_, r, z); }
  [[nodiscard]] std::string name() const override {
    return factor_.cholesky ? "block_jacobi(ic0)" : "block_jacobi(ilu0)";
  }
  [[nodiscard]] const IncompleteFactor& factor() const { return factor_; }

 private:
  IncompleteFactor factor_;
};

/// Per-rank SSOR: one symmetric SOR sweep on the owned×owned block (halo columns dropped, as
/// PETSc's parallel PCSOR, which is local SOR too), stored as an ILU-shaped factor
/// (ssor_factor) and applied by block Jacobi's two sweeps. Setup and apply are O(nnz); SOR's
/// sweeps are sequential in the rows, which is why the distributed form is per rank: it is SSOR
/// on one rank and block SSOR on several. Symmetric (Hermitian) for symmetric A, definite when the
/// diagonal has one sign, so CG and MINRES may use it; the sign of the diagonal is kept as Jacobi's.
class SsorOp final : public PreconditionerOp {
 public:
  SsorOp(const LocalRows& rows, double omega) : omega_(omega) {
    agreed_setup(rows.comm, [&] {
      if (!(omega > 0 && omega < 2))
        throw Error("ssor options: expected 0 < ssor_omega < 2, found " + std::to_string(omega));
      (void)nonzero_diagonal(rows, "ssor");
      factor_ = ssor_factor(leading_block(rows.a, rows.n_owned, false), omega);
    });
  }
  void apply(const at::Tensor& r, at::Tensor& z) const override { incomplete_solve(factor_, r, z); }
  [[nodiscard]] std::string name() const override {
    std::ostringstream os;
    os << "ssor(" << omega_ << ")";
    return os.str();
  }
  [[nodiscard]] const IncompleteFactor& factor() const { return factor_; }

 private:
  double omega_;
  IncompleteFactor factor_;
};

/// Sum over `comm` of a few doubles, in place.
inline void all_sum(std::span<double> v, MPI_Comm comm) {
  comm::check(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, comm),
              "MPI_Allreduce");
}

/// A reproducible vector in [-1, 1) keyed by each row's position in rank order (splitmix64), so
/// with contiguous ownership it is the same global vector at every world size.
inline at::Tensor pseudo_random(std::int64_t offset, std::int64_t n, at::ScalarType dtype) {
  auto out = at::empty({n}, at::kDouble);
  auto* p = out.data_ptr<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t z = static_cast<std::uint64_t>(offset + i) + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    p[i] = static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
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
    auto r = pseudo_random(offset, rows.n_owned, rows.a.dtype());
    auto z = r * inv_diag_;
    auto p = z.clone();
    auto q = at::empty_like(p);
    const auto not_definite = [](const std::string& found) {
      return Error("chebyshev preconditioner setup: expected D⁻¹A definite (A symmetric definite "
                   "with a diagonal of the same sign), found " + found + " in its Lanczos estimate");
    };
    double rz = dot(r, z);
    all_sum({&rz, 1}, rows.comm);
    if (!std::isfinite(rz) || rz == 0) throw not_definite("r·D⁻¹r = " + std::to_string(rz));
    std::vector<double> alpha, beta;
    for (int k = 0; k < steps; ++k) {
      matvec_(p, q);
      double pq = dot(p, q);
      all_sum({&pq, 1}, rows.comm);
      const double a = rz / pq;
      if (!std::isfinite(a) || a <= 0)
        throw not_definite("p·Ap = " + std::to_string(pq) + " against r·D⁻¹r = " + std::to_string(rz));
      alpha.push_back(a);
      r.sub_(q, a);
      at::mul_out(z, r, inv_diag_);
      double rz_next = dot(r, z);
      all_sum({&rz_next, 1}, rows.comm);
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

/// Truncated Neumann series (torch-sla's "polynomial"): z = Σ_{k<d} (I − S A)^k S r, evaluated as
/// d − 1 damped Richardson steps from z = S r (z += S (r − A z)), each one distributed matvec.
/// S = w D⁻¹ with 1/w = τ = ‖D⁻¹A‖_∞ = max_i Σ_j |a_ij / a_ii| (`neumann_jacobi`, the default),
/// or S = I/τ with τ = ‖A‖_∞ as torch-sla. The Jacobi scaling makes it invariant to a symmetric
/// diagonal rescaling of A and keeps the sign of a negative-definite A (torch-sla's I/‖A‖_∞ then
/// gives an M of the wrong sign); for a constant diagonal, as Poisson's, the two coincide. τ runs
/// over the whole rows (halo columns included), so it is the global ∞-norm: a bound on the spectral
/// radius of D⁻¹A (resp. A), which keeps M SPD for SPD A. torch-sla takes it from the owned×owned
/// block only, which can underestimate it. Setup: O(nnz) and one all-reduce.
class NeumannOp final : public PreconditionerOp {
 public:
  NeumannOp(const LocalRows& rows, Matvec matvec, const PreconditionerOptions& opts)
      : matvec_(std::move(matvec)), degree_(opts.neumann_degree), jacobi_(opts.neumann_jacobi) {
    at::Tensor row_scale;
    agreed_setup(rows.comm, [&] {
      if (opts.neumann_degree < 1)
        throw Error("neumann options: expected neumann_degree ≥ 1, found " + std::to_string(opts.neumann_degree));
      check_rows(rows);
    });
    if (jacobi_) row_scale = inverse_diagonal(rows, "neumann");
    // max_i Σ_j |s_i a_ij| over this rank's rows, and the row count: a matrix of no rows needs no τ.
    double local[2] = {0.0, static_cast<double>(rows.n_owned)};
    if (rows.n_owned > 0) {
      const auto [values, row, col] = csr_to_coo(rows.a);
      const auto magnitude = values.abs().to(at::kDouble);
      auto norms = at::zeros({rows.n_owned}, magnitude.options()).index_add_(0, row, magnitude);
      if (jacobi_) norms.mul_(row_scale.abs().to(at::kDouble));
      local[0] = norms.max().item<double>();
      if (!std::isfinite(local[0])) local[0] = HUGE_VAL;  // MPI_MAX need not propagate a NaN
    }
    comm::check(MPI_Allreduce(MPI_IN_PLACE, local, 2, MPI_DOUBLE, MPI_MAX, rows.comm), "MPI_Allreduce");
    tau_ = local[0];
    if (local[1] > 0 && !(tau_ > 0 && std::isfinite(tau_)))
      throw Error("neumann preconditioner setup: expected a nonzero finite ∞-norm" +
                  std::string(jacobi_ ? " of D⁻¹A" : " of A") + ", found " + std::to_string(tau_));
    if (!(tau_ > 0)) tau_ = 1;
    scale_ = jacobi_ ? row_scale.div(tau_)
                     : at::full({rows.n_owned}, 1.0 / tau_, rows.a.values.options());
    tmp_ = at::empty({rows.n_owned}, rows.a.values.options());
  }

  void apply(const at::Tensor& r, at::Tensor& z) const override {
    at::Tensor rhs = r;
    if (degree_ > 1 && z.is_same(r)) rhs = r.clone();  // r is read at every step
    at::mul_out(z, rhs, scale_);
    for (int k = 1; k < degree_; ++k) {
      matvec_(z, tmp_);
      tmp_.neg_().add_(rhs);
      z.addcmul_(tmp_, scale_);
    }
  }
  [[nodiscard]] std::string name() const override {
    return "neumann(" + std::to_string(degree_) + (jacobi_ ? ", jacobi)" : ")");
  }
  /// With one term M⁻¹ is the diagonal S, which the Krylov methods fuse into their updates.
  [[nodiscard]] at::Tensor diagonal() const override { return degree_ == 1 ? scale_ : at::Tensor(); }
  [[nodiscard]] double tau() const { return tau_; }

 private:
  Matvec matvec_;
  int degree_;
  bool jacobi_;
  double tau_ = 1;
  at::Tensor scale_;
  mutable at::Tensor tmp_;
};

/// The preconditioner `kind` for these rows (collective over `rows.comm` for every kind but
/// `none`; `matvec` is used by `chebyshev` and `neumann` only). The returned operator refers to `matvec`'s
/// state, not to `rows`.
inline std::unique_ptr<PreconditionerOp> make_preconditioner(Preconditioner kind, const LocalRows& rows,
                                                             const Matvec& matvec,
                                                             const PreconditionerOptions& opts) {
  switch (kind) {
    case Preconditioner::none: return std::make_unique<IdentityOp>();
    case Preconditioner::jacobi: return std::make_unique<DiagonalOp>(inverse_diagonal(rows), "jacobi");
    case Preconditioner::l1_jacobi: return std::make_unique<DiagonalOp>(inverse_l1_norms(rows), "l1_jacobi");
    case Preconditioner::block_jacobi: return std::make_unique<BlockJacobiOp>(rows, opts.ic0);
    case Preconditioner::chebyshev: return std::make_unique<ChebyshevOp>(rows, matvec, opts);
    case Preconditioner::ssor: return std::make_unique<SsorOp>(rows, opts.ssor_omega);
    case Preconditioner::neumann: return std::make_unique<NeumannOp>(rows, matvec, opts);
    case Preconditioner::amg:
      // Its hierarchy spans the ranks: it needs the global numbering of the halo columns, which
      // only the distributed matrix knows (DSparseTensor::solve builds it, sparse/amg.hpp).
      throw Error("make_preconditioner: expected a kind built from a rank's local rows, found amg (its "
                  "hierarchy spans the ranks: DSparseTensor::solve builds it from the distributed matrix)");
  }
  throw Error("make_preconditioner: expected a Preconditioner kind, found " + std::to_string(static_cast<int>(kind)));
}

/// The last preconditioner a matrix built, kept for its next solve: time-stepping and Newton loops
/// solve with one matrix many times, and an ILU(0) or Chebyshev setup costs several products
/// (PETSc makes reuse an opt-in, KSPSetReusePreconditioner; here it is safe by construction, the
/// key holding everything the setup read). A copy starts empty: copies are how a matrix gets other
/// values (`with_values`), and a cached Chebyshev operator refers to its own matrix.
class PreconditionerCache {
 public:
  PreconditionerCache() = default;
  PreconditionerCache(const PreconditionerCache&) {}
  PreconditionerCache& operator=(const PreconditionerCache&) {
    std::lock_guard lock(mutex_);
    op_.reset();
    return *this;
  }

  /// The preconditioner for `kind` and `opts` on a matrix with local `values`, and whether it was
  /// reused; `make` builds it. Collective over `comm`: every rank reuses, or every rank builds
  /// (a setup may itself be collective).
  template <class Make>
  std::pair<std::shared_ptr<const PreconditionerOp>, bool> get(Preconditioner kind, const PreconditionerOptions& opts,
                                                               const at::Tensor& values, MPI_Comm comm, Make&& make) {
    const Key key{static_cast<int>(kind), opts.ic0, opts.chebyshev_degree, opts.chebyshev_lower, opts.eig_iterations,
                  values.unsafeGetTensorImpl(), values._version(), static_cast<int>(values.scalar_type()), opts.amg,
                  opts.ssor_omega, opts.neumann_degree, opts.neumann_jacobi};
    std::lock_guard lock(mutex_);
    int reuse = op_ != nullptr && key == key_ ? 1 : 0;
    comm::check(MPI_Allreduce(MPI_IN_PLACE, &reuse, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    if (reuse == 1) return {op_, true};
    op_.reset();  // free the old setup before building the new one
    op_ = make();
    key_ = key;
    return {op_, false};
  }

 private:
  using Key = std::tuple<int, bool, int, double, int, const void*, std::uint32_t, int, AmgOptions, double, int, bool>;
  std::mutex mutex_;
  Key key_{};
  std::shared_ptr<const PreconditionerOp> op_;
};

}  // namespace detail
}  // namespace einshard::sparse
