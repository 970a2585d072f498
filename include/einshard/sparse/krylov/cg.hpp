#pragma once
/// @file
/// Distributed preconditioned conjugate gradients, in three organisations of the reductions
/// (`CgVariant`): Hestenes–Stiefel with two all-reduces per iteration, Chronopoulos–Gear with
/// one, and pipelined with one non-blocking (krylov/pipecg.hpp). The vector updates and the dots
/// are fused (krylov/kernels.hpp) and the product returns its own dot (`Operator::apply`), so an
/// unpreconditioned standard iteration streams the matrix once and the vectors in three passes.

#include <mpi.h>

#include <array>
#include <cmath>
#include <complex>
#include <string>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/krylov/pipecg.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

inline SolveResult cg(const Operator& A, const DVector& b, const PreconditionerOp* m,
                      const SolveOptions& o) {
  m = for_cg(m);
  if (o.cg_variant == CgVariant::pipelined) return pipecg(A, b, m, o);
  const auto& layout = A.layout();
  const MPI_Comm comm = layout->comm();
  SolveResult result;
  auto& info = result.info;
  Progress progress(o, info);
  const auto bl = b.local().detach().contiguous();
  const auto dtype = bl.scalar_type();
  auto x = o.x0 ? o.x0->local().detach().to(dtype).clone().contiguous() : at::zeros_like(bl);
  auto r = bl.clone();
  auto q = at::empty_like(bl);
  if (o.x0) {
    A.apply(x, q, {});
    r.sub_(q);
  }
  const PreconditionerUse M(m, bl);
  auto z = M.identity ? r : at::empty_like(bl);
  if (!M.identity) M.apply(r, z);
  const auto t0 = comm::wall_time();
  const auto init = sum_real<3>({local_dot(r, z), local_dot(r, r), local_dot(bl, bl)}, comm);
  progress.start(std::sqrt(init[2]));
  result.x = DVector(layout, x);
  if (init[2] == 0.0) {
    zero_rhs(result, o);
    return result;
  }
  double rz = init[0];
  if (progress.record(0, std::sqrt(init[1])) || progress.check_nonzero(rz)) {
    info.seconds = comm::wall_time() - t0;
    return result;
  }

  if (o.cg_variant == CgVariant::standard) {
    auto p = z.clone();
    // A multigrid cycle costs many products: test ‖r‖ before applying it, at the price of a third
    // all-reduce per iteration, so that the converged iterate does not pay for one more cycle.
    const bool test_first = M.general() && m->hierarchy().first > 0;
    for (int k = 1;; ++k) {
      const double pap = sum_real<1>({A.apply(p, q, p)}, comm)[0];
      if (progress.check_same_sign(rz, pap)) break;
      const double alpha = rz / pap;
      auto dots = cg_update(x, r, p, q, alpha, M.diagonal, z);
      std::array<double, 2> red{};
      if (test_first) {
        red[1] = sum_real<1>({dots[1]}, comm)[0];
        if (progress.record(k, std::sqrt(red[1]))) break;
        M.apply(r, z);
        red[0] = sum_real<1>({local_dot(r, z)}, comm)[0];
        if (progress.check_nonzero(red[0])) break;
      } else {
        if (M.general()) {
          M.apply(r, z);
          dots[0] = local_dot(r, z);
        }
        red = sum_real<2>(dots, comm);
        if (progress.record(k, std::sqrt(red[1])) || progress.check_nonzero(red[0])) break;
      }
      const double beta = red[0] / rz;
      rz = red[0];
      at::add_out(p, M.identity ? r : z, p, beta);
    }
  } else {
    // Chronopoulos–Gear: u = M r, w = A u; one reduction of (<r,u>, <u,w>, <r,r>) per iteration.
    auto u = M.identity ? r.clone() : z;
    auto w = at::empty_like(bl);
    auto p = at::zeros_like(bl);
    auto s = at::zeros_like(bl);
    double gamma = rz;
    double delta = sum_real<1>({A.apply(u, w, u)}, comm)[0];
    double alpha_old = 0.0, gamma_old = 0.0;
    for (int k = 1;; ++k) {
      const double beta = k == 1 ? 0.0 : gamma / gamma_old;
      const double denom = k == 1 ? delta : delta - beta * gamma / alpha_old;
      if (progress.check_same_sign(gamma, denom)) break;
      const double alpha = gamma / denom;
      auto dots = cgcg_update(x, r, p, s, u, w, alpha, beta, M.diagonal, M.identity);
      if (M.general()) {
        M.apply(r, u);
        dots[0] = local_dot(r, u);
      }
      const auto red = sum_real<3>({dots[0], A.apply(u, w, u), dots[1]}, comm);
      if (progress.record(k, std::sqrt(red[2])) || progress.check_nonzero(red[0])) break;
      gamma_old = gamma;
      gamma = red[0];
      delta = red[1];
      alpha_old = alpha;
    }
  }
  info.seconds = comm::wall_time() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
