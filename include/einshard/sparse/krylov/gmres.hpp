#pragma once
/// @file
/// Distributed restarted GMRES(m), right-preconditioned, for general square A, real or complex.
/// Right preconditioning keeps the Arnoldi residual estimate |g_{j+1}| equal to the true
/// unpreconditioned ‖b − A x‖, so the stop test is the same as every other method's.
///
/// The Arnoldi step orthogonalizes by classical Gram–Schmidt with <w, w> in the same all-reduce, so
/// ‖w‖ after it is ‖w‖² − ‖h‖² (Pythagoras, the basis being orthonormal): one all-reduce per pass
/// whatever j, where the modified Gram–Schmidt of the original costs j+2 and PETSc's default two.
/// A second pass follows when the first cancelled more than half of ‖w‖² (DGKS; "twice is
/// enough"); with `Reorthogonalize::never` ‖w‖ is then measured instead. The small
/// least-squares problem is solved on every rank redundantly with Givens rotations in
/// complex<double>, from all-reduced values, so every rank takes the same decisions. Each restart
/// recomputes the true residual. With one pass the basis loses orthogonality and the estimate
/// |g_{j+1}| can fall below the true residual, so a convergence it reports is confirmed with the
/// true residual (one product and one all-reduce per solve); on a miss the iteration restarts from it.
///
/// Flexible GMRES (Saad 1993) is the same Arnoldi process with z_j = M_j⁻¹ v_j kept (Z, another
/// m vectors) and x += Z y instead of x += M⁻¹ V y, so M may change from step to step (an inner
/// iteration, a preconditioner with its own tolerance).

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/krylov/gram_schmidt.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"

namespace einshard::sparse::detail {

inline SolveResult gmres(const Operator& A, const DVector& b, const PreconditionerOp* m,
                         const SolveOptions& o, bool flexible = false) {
  using C = std::complex<double>;
  if (o.restart < 1)
    throw Error(std::string("DSparseTensor::solve (") + (flexible ? "fgmres" : "gmres") +
                "): .restart must be at least 1, got " + std::to_string(o.restart));
  const MPI_Comm comm = A.layout()->comm();
  const bool one_pass = o.reorthogonalize == Reorthogonalize::never;
  return run_from_start(A, b, o, [&](IterationZero& st, Progress& progress, SolveResult& result) {
    const auto& bl = st.b;
    auto& x = st.x;
    auto& r = st.r;
    double& beta = st.rnorm;
    const PreconditionerUse M(m, bl);
    const auto n = bl.numel();
    const int mm = o.restart;
    auto V = at::empty({mm + 1, n}, bl.options());  // the Krylov basis, one row per vector
    auto z = M.identity ? at::Tensor() : at::empty_like(bl);
    const bool keep_z = flexible && !M.identity;
    auto Z = keep_z ? at::empty({mm, n}, bl.options()) : at::Tensor();  // FGMRES: z_j = M_j⁻¹ v_j
    std::vector<C> H(static_cast<std::size_t>((mm + 1) * mm)), g(static_cast<std::size_t>(mm + 1)), cs(mm), sn(mm);
    auto h = [&](int i, int j) -> C& { return H[static_cast<std::size_t>(i * mm + j)]; };
    int k = 0;
    for (bool done = false; !done;) {
      auto v0 = V[0];
      at::mul_out(v0, r, at::Scalar(1.0 / beta));  // a product: a division is several times slower per entry
      std::fill(g.begin(), g.end(), C(0));
      g[0] = beta;
      int j = 0;
      for (; j < mm; ++j) {
        const auto vj = V[j];
        auto w = V[j + 1];  // the new vector is built in place, in the basis's next row
        auto zj = keep_z ? Z[j] : z;
        if (!M.identity) M.apply(vj, zj);
        A.apply(M.identity ? vj : zj, w, {});
        // Classical Gram–Schmidt, h = Vᴴw and w −= V h, with <w, w> in the same reduction. When the
        // first pass left more than half of ‖w‖², ‖w‖² − ‖h‖² is accurate and w orthogonal enough.
        // Otherwise DGKS runs a second pass; one pass (PETSc's default) measures ‖w‖ instead (one more
        // reduction, no read of the basis): the difference would carry the cancellation's rounding
        // into h(j+1, j), and with it the Arnoldi relation (measured: 31 iterations against 22 on a
        // convection–diffusion matrix). Each pass is a sweep over the basis in the values' own loops
        // (gram_schmidt.hpp), not a dozen small tensor operations: the dots with <w, w>, then the
        // update, which takes the next pass's dots on its way.
        const int rows = j + 1;
        std::vector<C> dots(static_cast<std::size_t>(rows + 1)), next;
        gram_schmidt_sweep(V, rows, w, nullptr, dots.data());
        double norm2 = 0.0;
        for (int pass = 0;; ++pass) {
          dots = comm::summed(std::move(dots), comm);
          const double ww = dots.back().real();
          norm2 = ww;
          for (int i = 0; i < rows; ++i) {
            h(i, j) = (pass == 0 ? C(0) : h(i, j)) + dots[static_cast<std::size_t>(i)];
            norm2 -= std::norm(dots[static_cast<std::size_t>(i)]);
          }
          if (pass == 1 || norm2 > 0.5 * ww) {
            gram_schmidt_sweep(V, rows, w, dots.data(), nullptr);
            break;
          }
          if (one_pass) {
            gram_schmidt_sweep(V, rows, w, dots.data(), nullptr);
            norm2 = comm::summed({local_dot(w, w)}, comm)[0].real();
            break;
          }
          next.resize(static_cast<std::size_t>(rows + 1));
          gram_schmidt_sweep(V, rows, w, dots.data(), next.data());
          dots = std::move(next);
        }
        const double hn = std::sqrt(std::max(norm2, 0.0));
        h(j + 1, j) = hn;
        // The earlier rotations, then a new one that zeroes h(j+1, j).
        for (int i = 0; i < j; ++i) {
          const C a = h(i, j), c = h(i + 1, j);
          h(i, j) = std::conj(cs[i]) * a + std::conj(sn[i]) * c;
          h(i + 1, j) = -sn[i] * a + cs[i] * c;
        }
        const C a = h(j, j);
        const double d = std::hypot(std::abs(a), hn);
        if (d == 0.0 || !std::isfinite(d)) {
          done = progress.stop(std::isfinite(d) ? StopReason::breakdown : StopReason::nan);
          break;
        }
        cs[j] = a / d;
        sn[j] = hn / d;
        h(j, j) = d;
        h(j + 1, j) = 0;
        g[j + 1] = -sn[j] * g[j];
        g[j] = std::conj(cs[j]) * g[j];
        ++k;
        if (progress.record(k, std::abs(g[j + 1]))) {
          done = true;
          ++j;
          break;
        }
        if (hn == 0.0) {  // lucky breakdown: the Krylov space holds the solution
          ++j;
          break;
        }
        w.mul_(1.0 / hn);
      }
      // x += M⁻¹ V y, with H y = g solved on the j columns built.
      if (j > 0) {
        std::vector<C> y(static_cast<std::size_t>(j));
        for (int i = j - 1; i >= 0; --i) {
          C s = g[static_cast<std::size_t>(i)];
          for (int l = i + 1; l < j; ++l) s -= h(i, l) * y[static_cast<std::size_t>(l)];
          y[static_cast<std::size_t>(i)] = s / h(i, i);
        }
        const auto yt = tensor_like(y, bl);
        if (keep_z) {
          x.add_(at::mv(Z.narrow(0, 0, j).t(), yt));
        } else if (const auto vy = at::mv(V.narrow(0, 0, j).t(), yt); M.identity) {
          x.add_(vy);
        } else {
          M.apply(vy.contiguous(), z);
          x.add_(z);
        }
      }
      if (done && !(one_pass && result.info.converged)) break;
      // Restart from the true residual (after one pass: confirm the estimate's convergence with it).
      auto ax = V[0];
      A.apply(x, ax, {});
      at::sub_out(r, bl, ax);
      beta = std::sqrt(comm::summed({local_dot(r, r)}, comm)[0].real());
      if (done) {
        if (progress.met(beta)) {
          result.info.residual_norm = beta;
          break;
        }
        progress.resume();
        done = false;
      }
      if (beta == 0.0 || !std::isfinite(beta)) {  // exact, or lost: the recorded estimate was not
        progress.stop(beta == 0.0 ? StopReason::converged_rtol : StopReason::nan);
        break;
      }
    }
  });
}

}  // namespace einshard::sparse::detail
