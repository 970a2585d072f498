#pragma once
/// @file
/// Pipelined preconditioned CG (Ghysels & Vanroose 2014, PETSc's KSPPIPECG): the three dots of an
/// iteration, <r, u>, <w, u> and <r, r>, go out in one MPI_Iallreduce, and the preconditioner
/// m = M w and the product n = A m of the next iteration run while it is in flight (the product
/// itself still overlaps its halo exchange with the diagonal block). The price is four more
/// vectors (u = M r, w = A u, and the recurrences z, q, s of A p's chain) and rounding that lets
/// the recursive residual drift from b − A x. So, as safeguard, convergence of the recursive
/// residual is confirmed with the true one; if that misses the tolerance, CG restarts from x with
/// the true residual (p = 0; keeping p against a replaced r broke down on the tests: near
/// convergence the old direction no longer matches the new recurrences). Periodic replacement
/// (`SolveOptions::residual_replacement`, Cools et al. 2018: r = b − A x, u = M r, w = A u,
/// s = A p, q = M s, z = A q, keeping x and p) bounds the drift of long solves ahead of time.
///
/// Whether the all-reduce really progresses while the rank computes depends on the MPI library
/// (Open MPI's progresses inside the halo exchange's calls; Intel MPI wants
/// I_MPI_ASYNC_PROGRESS=1): on few ranks of one node the gain over CG is small.

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>

#include "einshard/comm/nonblocking.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

inline SolveResult pipecg(const Operator& A, const DVector& b, const PreconditionerOp* m_op,
                          const SolveOptions& o) {
  const MPI_Comm comm = A.layout()->comm();
  SolveResult result;
  auto& info = result.info;
  Progress progress(o, info);
  // Plain variables, not a structured binding: clang 14 cannot capture bindings in a lambda.
  auto start = initial_guess(A, b, o);
  auto bl = start.b, x = start.x, r = start.r;
  result.x = DVector(A.layout(), x);
  const PreconditionerUse M(m_op, bl);
  auto u = at::empty_like(bl), w = at::empty_like(bl), m = at::empty_like(bl), n = at::empty_like(bl);
  auto z = at::zeros_like(bl), q = at::zeros_like(bl), s = at::zeros_like(bl), p = at::zeros_like(bl);
  const auto t0 = comm::wall_time();

  // u = M r, w = A u from r; with `directions`, also s = A p, q = M s, z = A q. Returns the
  // local dots of the next reduction and leaves m = M w to the loop.
  const auto restart_from = [&](bool directions) {
    M.apply(r, u);
    A.apply(u, w, {});
    if (directions) {
      A.apply(p, s, {});
      M.apply(s, q);
      A.apply(q, z, {});
    }
    return std::array<double, 3>{local_dot(r, u).real(), local_dot(w, u).real(), local_dot(r, r).real()};
  };
  auto dots = restart_from(false);
  bool m_ready = false;  // m = M w already fused into the update (diagonal or identity M)
  bool recorded = false;  // iteration k's residual is in the history (a restart redoes k)
  bool first_step = true;  // β = 0: the first iteration, or a restart
  double gamma_old = 0.0, alpha_old = 0.0, tol = 0.0;
  for (int k = 0;;) {
    if (o.residual_replacement > 0 && k > 0 && !recorded && k % o.residual_replacement == 0) {
      A.apply(x, n, {});
      at::sub_out(r, bl, n);
      dots = restart_from(true);
      m_ready = false;
    }
    std::array<double, 4> local{dots[0], dots[1], dots[2], k == 0 ? local_dot(bl, bl).real() : 0.0};
    std::array<double, 4> red{};
    comm::SumInFlight sum(local, red, comm);
    if (!m_ready) M.apply(w, m);
    A.apply(m, n, {});
    sum.wait();
    if (k == 0 && !recorded) {
      progress.start(std::sqrt(red[3]));
      tol = std::max(o.atol, o.rtol * info.rhs_norm);
      if (red[3] == 0.0) {
        zero_rhs(result, o);
        break;
      }
    }
    const double gamma = red[0], delta = red[1];
    if (!recorded && progress.record(k, std::sqrt(red[2]))) {
      if (!info.converged) break;
      // Confirm with the true residual; on a miss, replace and redo this iteration's step.
      A.apply(x, n, {});
      at::sub_out(r, bl, n);
      const double true_norm = std::sqrt(sum_real<1>({local_dot(r, r)}, comm)[0]);
      if (true_norm <= tol) {
        info.residual_norm = true_norm;
        if (o.residual_history) info.residual_history.back() = true_norm;
        break;
      }
      progress.resume();
      for (auto* v : {&p, &s, &q, &z}) v->zero_();
      dots = restart_from(false);
      m_ready = false;
      recorded = true;
      first_step = true;
      continue;
    }
    recorded = false;
    const double beta = first_step ? 0.0 : gamma / gamma_old;
    const double denom = first_step ? delta : delta - beta * gamma / alpha_old;
    first_step = false;
    if (progress.check_nonzero(gamma) || progress.check_same_sign(gamma, denom)) break;
    const double alpha = gamma / denom;
    const auto next = pipecg_update(x, r, u, w, z, q, s, p, m, n, alpha, beta, M.diagonal, M.identity);
    dots = {next[0].real(), next[1].real(), next[2].real()};
    m_ready = !M.general();
    gamma_old = gamma;
    alpha_old = alpha;
    ++k;
  }
  info.seconds = comm::wall_time() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
