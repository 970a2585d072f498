#pragma once
/// @file
/// What a least-squares solve is asked (`LeastSquaresOptions`) and what it answers
/// (`LeastSquaresResult`): the vocabulary of `DSparseTensor::lsqr` and `lsmr`, with SciPy's
/// options, defaults and `istop` codes so code ports from `scipy.sparse.linalg` line by line.

#include <optional>
#include <string>

#include "einshard/error.hpp"

#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse {

/// Options of `lsqr` and `lsmr`: min ‖A x − b‖² + damp² ‖x‖² for any (m, n) A. Defaults are
/// SciPy's. The stop rules are Paige and Saunders' (see `LeastSquaresResult::istop`):
/// ‖r‖ ≤ btol ‖b‖ + atol ‖A‖ ‖x‖ (a compatible system), ‖Aᴴ r‖ ≤ atol ‖A‖ ‖r‖ (a least-squares
/// solution), cond(A) ≥ conlim.
struct LeastSquaresOptions {
  double damp = 0.0;
  double atol = 1e-6;
  double btol = 1e-6;
  double conlim = 1e8;             ///< 0: no condition limit
  int maxiter = 0;                 ///< 0: SciPy's default, 2 n for lsqr and min(m, n) for lsmr
  /// Initial guess, in the domain partition (default zero). As in SciPy, the iteration solves for
  /// the correction x − x0, so damping applies to the correction.
  std::optional<DVector> x0{};
  Monitor monitor{};               ///< (iteration, ‖r‖ estimate) on every rank
  bool residual_history = true;
};

/// `istop` is SciPy's: 0 x = 0 is a solution (b = 0 or Aᴴ b = 0), 1 compatible system to
/// atol/btol, 2 least-squares solution to atol, 3 cond(A) exceeded conlim, 4–6 the same as 1–3
/// with the tolerances at machine precision, 7 maxiter reached. `info.reason` maps them onto the
/// shared vocabulary: 0 zero_rhs or converged_atol, 1 and 4 converged_rtol, 2 and 5
/// converged_atol, 3 and 6 breakdown (ill-conditioned), 7 maxiter.
struct LeastSquaresResult {
  DVector x;
  SolveInfo info;
  int istop = 0;
  /// SciPy's residual estimate of each method: lsqr's r1norm ‖b − A x‖, lsmr's normr, the damped
  /// ‖[b; 0] − [A; damp I] x‖ (= r2norm). They agree when damp = 0.
  double normr = 0.0;
  double normar = 0.0;  ///< ‖Aᴴ (b − A x) − damp² x‖
  double norma = 0.0;   ///< Frobenius norm estimate of [A; damp I]
  double conda = 0.0;   ///< condition number estimate of [A; damp I]
  double normx = 0.0;   ///< ‖x‖
  /// sqrt(normr² + damp² normx²), the damped residual the methods minimize: SciPy's lsqr r2norm
  /// and lsmr normr (they are ‖b − A x‖ when damp = 0).
  double r2norm = 0.0;
};

namespace detail {
/// Throws unless the options are in range (the same on every rank: they are the caller's).
inline void check_least_squares_options(const LeastSquaresOptions& o, const std::string& what) {
  if (!(o.damp >= 0.0) || !(o.atol >= 0.0) || !(o.btol >= 0.0) || !(o.conlim >= 0.0) || o.maxiter < 0)
    throw Error(what + ": expected damp, atol, btol, conlim and maxiter >= 0, got damp " + std::to_string(o.damp) +
                ", atol " + std::to_string(o.atol) + ", btol " + std::to_string(o.btol) + ", conlim " +
                std::to_string(o.conlim) + ", maxiter " + std::to_string(o.maxiter));
}
}  // namespace detail

}  // namespace einshard::sparse
