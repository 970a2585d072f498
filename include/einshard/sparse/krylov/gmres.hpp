#pragma once
/// @file
/// Distributed restarted GMRES(m), right-preconditioned, for general square A, real or complex.
/// Right preconditioning keeps the Arnoldi residual estimate |g_{j+1}| equal to the true
/// unpreconditioned ‖b − A x‖, so the stop test is the same as every other method's.
///
/// The Arnoldi step orthogonalizes by classical Gram–Schmidt done twice (CGS2, "twice is enough"):
/// two all-reduces per step whatever j, where the modified Gram–Schmidt of the original costs j+2.
/// The second pass also gives ‖w‖ (‖w‖² − ‖h₂‖² by Pythagoras, the basis being orthonormal), so no
/// third reduction. The small least-squares problem is solved on every rank redundantly with
/// Givens rotations in complex<double>, from all-reduced values, so every rank takes the same
/// decisions. Each restart recomputes the true residual.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/krylov/kernels.hpp"

namespace einshard::sparse::detail {

inline SolveResult gmres(const Operator& A, const DVector& b, Preconditioner kind, const PreconditionerOp* m,
                         const SolveOptions& o) {
  using C = std::complex<double>;
  if (o.restart < 1) throw Error("DSparseTensor::solve (gmres): .restart must be at least 1, got " + std::to_string(o.restart));
  const auto& layout = A.layout();
  const MPI_Comm comm = layout->comm();
  SolveResult result;
  auto& info = result.info;
  Progress progress(o, info);
  auto [bl, x, r] = initial(A, b, o);
  result.x = DVector(layout, x);
  const PreconditionerUse M(kind, m, bl);
  const auto t0 = MPI_Wtime();
  const auto init = sum_complex({local_dot(r, r), local_dot(bl, bl)}, comm);
  progress.start(std::sqrt(init[1].real()));
  if (init[1].real() == 0.0) {
    zero_rhs(result, o);
    return result;
  }
  double beta = std::sqrt(init[0].real());
  if (progress.record(0, beta)) {
    info.seconds = MPI_Wtime() - t0;
    return result;
  }
  const auto n = bl.numel();
  const int mm = o.restart;
  auto V = at::empty({mm + 1, n}, bl.options());  // the Krylov basis, one row per vector
  auto w = at::empty_like(bl), z = M.identity ? at::Tensor() : at::empty_like(bl);
  std::vector<C> H(static_cast<std::size_t>((mm + 1) * mm)), g(static_cast<std::size_t>(mm + 1)), cs(mm), sn(mm);
  auto h = [&](int i, int j) -> C& { return H[static_cast<std::size_t>(i * mm + j)]; };
  int k = 0;
  for (bool done = false; !done;) {
    V[0].copy_(r).div_(beta);
    std::fill(g.begin(), g.end(), C(0));
    g[0] = beta;
    int j = 0;
    for (; j < mm; ++j) {
      const auto vj = V[j];
      if (!M.identity) M.apply(vj, z);
      A.apply(M.identity ? vj : z, w, {});
      // CGS2: h = Vᴴw, w -= V h, twice; the second reduction carries <w, w> too.
      const auto basis = V.narrow(0, 0, j + 1);
      auto first = host_complex(at::mv(basis.conj(), w));
      first = sum_complex(std::move(first), comm);
      const auto h1 = tensor_like(first, bl);
      w.sub_(at::mv(basis.t(), h1));
      auto second = host_complex(at::mv(basis.conj(), w));
      second.push_back(local_dot(w, w));
      second = sum_complex(std::move(second), comm);
      const double ww = second.back().real();
      second.pop_back();
      const auto h2 = tensor_like(second, bl);
      w.sub_(at::mv(basis.t(), h2));
      double norm2 = ww;
      for (int i = 0; i <= j; ++i) {
        h(i, j) = first[static_cast<std::size_t>(i)] + second[static_cast<std::size_t>(i)];
        norm2 -= std::norm(second[static_cast<std::size_t>(i)]);
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
      V[j + 1].copy_(w).div_(hn);
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
      const auto update = at::mv(V.narrow(0, 0, j).t(), yt).contiguous();
      if (M.identity) {
        x.add_(update);
      } else {
        M.apply(update, z);
        x.add_(z);
      }
    }
    if (done) break;
    // Restart from the true residual.
    A.apply(x, w, {});
    at::sub_out(r, bl, w);
    beta = std::sqrt(sum_complex({local_dot(r, r)}, comm)[0].real());
    if (beta == 0.0 || !std::isfinite(beta)) {  // exact, or lost: the recorded estimate was not
      progress.stop(beta == 0.0 ? StopReason::converged_rtol : StopReason::nan);
      break;
    }
  }
  info.seconds = MPI_Wtime() - t0;
  return result;
}

}  // namespace einshard::sparse::detail
