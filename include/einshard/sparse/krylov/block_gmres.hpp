#pragma once
/// @file
/// GMRES(m) and FGMRES(m) for k right-hand sides at once: k Arnoldi processes (gmres.hpp's, one per
/// column) in lockstep on a basis of (n_local, k) blocks. Per step one block product (one halo
/// exchange for all k columns) and one all-reduce per Gram–Schmidt pass carrying every column's
/// h = Vᴴw together with <w, w> (classical Gram–Schmidt with the norm folded in, as in gmres.hpp),
/// so k columns cost what one does in messages. The Gram–Schmidt dots and the update w −= V h are
/// BLAS matrix-vector products per column, as in a single solve.
///
/// Each column has its own Hessenberg matrix, rotations, stop test and second-pass decision
/// (DGKS, per column): its arithmetic is that of its single solve. A column that stops, or whose
/// cycle ends early (lucky breakdown), gets zero basis vectors for the rest of the cycle and waits
/// for the restart; a stopped one is frozen.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/krylov/block.hpp"

namespace einshard::sparse::detail {

inline SolveResult block_gmres(const Operator& A, const DVector& B, const PreconditionerOp* m,
                               const SolveOptions& o, bool flexible = false) {
  using C = std::complex<double>;
  if (o.restart < 1)
    throw Error(std::string("DSparseTensor::solve (") + (flexible ? "fgmres" : "gmres") +
                "): .restart must be at least 1, got " + std::to_string(o.restart));
  const MPI_Comm comm = A.layout()->comm();
  return run_block(A, B, o, [&](BlockIterationZero& st, BlockProgress& progress) {
    const auto& bl = st.b;
    auto& x = st.x;
    auto& r = st.r;
    auto beta = st.rnorm;
    const auto n = bl.size(0), k = bl.size(1);
    const auto kk = static_cast<std::size_t>(k);
    const PreconditionerUse M(m, bl);
    const int mm = o.restart;
    // The basis column by column, (k, m + 1, n): each column's Gram–Schmidt is then BLAS
    // matrix-vector products, as a single solve's (a pass over rows with the basis index and the
    // columns inner ran at a quarter of BLAS's speed, torch's bmm of k such products at half). The vector the product
    // takes stays an (n, k) block; a transpose each way costs a pass over one block.
    auto V = at::empty({k, mm + 1, n}, bl.options());
    auto vj = at::empty_like(bl), w = at::empty_like(bl);
    auto z = M.identity ? at::Tensor() : at::empty_like(bl);
    const bool keep_z = flexible && !M.identity;
    auto Z = keep_z ? at::empty({k, mm, n}, bl.options()) : at::Tensor();
    const double keep = o.reorthogonalize == Reorthogonalize::if_needed ? 0.5 : 0.0;
    const auto hsize = static_cast<std::size_t>((mm + 1) * mm);
    std::vector<std::vector<C>> H(kk, std::vector<C>(hsize)), g(kk), cs(kk), sn(kk);
    std::vector<int> built(kk), iterations(kk, 0);
    std::vector<char> in_cycle(kk);
    const auto h = [&](std::size_t c, int i, int j) -> C& { return H[c][static_cast<std::size_t>(i * mm + j)]; };
    // The basis's next vector scaled per column (0: the column is out of the cycle).
    std::vector<C> scale(kk);
    const auto scale_column = [&] { return tensor_like(scale, bl).unsqueeze(1); };
    while (progress.any()) {
      for (std::size_t c = 0; c < kk; ++c) {
        const bool on = progress.active(static_cast<std::int64_t>(c));
        in_cycle[c] = on;
        built[c] = 0;
        scale[c] = on ? 1.0 / beta[c] : 0.0;
        g[c].assign(static_cast<std::size_t>(mm + 1), C(0));
        g[c][0] = beta[c];
        cs[c].assign(static_cast<std::size_t>(mm), C(0));
        sn[c].assign(static_cast<std::size_t>(mm), C(0));
      }
      at::mul_out(vj, r, tensor_like(scale, bl));
      V.select(1, 0).copy_(vj.t());
      for (int j = 0; j < mm && std::count(in_cycle.begin(), in_cycle.end(), 1) > 0; ++j) {
        if (!M.identity) apply_block_preconditioner(M, vj, z);
        if (keep_z) Z.select(1, j).copy_(z.t());
        (void)A.apply_block(M.identity ? vj : z, w, {});
        // w is orthogonalized where it ends: the basis's next vector of every column, (k, n).
        auto wt = V.select(1, j + 1);
        wt.copy_(w.t());
        const auto basis = V.narrow(1, 0, j + 1);  // (k, j + 1, n)
        // Classical Gram–Schmidt for every column with <w, w> in the same reduction; a second
        // pass for the columns whose first left no more than `keep` of ‖w‖².
        std::vector<double> norm2(kk, 0.0);
        std::vector<char> pass_on(in_cycle);
        for (int pass = 0; pass < 2; ++pass) {
          // Per column: h = Vᴴ w (j + 1 values) and <w, w>, all k columns in one reduction; a
          // column out of the cycle, or not needing this second pass, reads no basis (zeros).
          const auto on = pass_on;
          auto local = at::zeros({k, j + 2}, wt.options());
          for (std::int64_t c = 0; c < k; ++c) {
            if (!on[static_cast<std::size_t>(c)]) continue;
            const auto wc = wt[c];
            auto hc = local[c].narrow(0, 0, j + 1);
            at::mv_out(hc, basis[c].conj(), wc);
            local[c][j + 1] = at::vdot(wc, wc);
          }
          auto dots = comm::summed(host_complex(local.flatten()), comm);
          const auto at_ = [&](int i, std::size_t c) { return dots[c * static_cast<std::size_t>(j + 2) + i]; };
          std::vector<C> coef(static_cast<std::size_t>((j + 1) * k), C(0));
          bool again = false;
          for (std::size_t c = 0; c < kk; ++c) {
            if (!pass_on[c]) continue;
            const double ww = at_(j + 1, c).real();
            norm2[c] = ww;
            for (int i = 0; i <= j; ++i) {
              const C d = at_(i, c);
              coef[c * static_cast<std::size_t>(j + 1) + i] = d;
              h(c, i, j) = (pass == 0 ? C(0) : h(c, i, j)) + d;
              norm2[c] -= std::norm(d);
            }
            pass_on[c] = norm2[c] <= keep * ww;
            again = again || pass_on[c];
          }
          // w −= V h, per column (a column out of the cycle has h = 0).
          const auto ht = tensor_like(coef, bl).view({k, j + 1});
          for (std::int64_t c = 0; c < k; ++c)
            if (on[static_cast<std::size_t>(c)]) wt[c].addmv_(basis[c].t(), ht[c], 1, -1);
          if (!again) break;
        }
        for (std::size_t c = 0; c < kk; ++c) {
          scale[c] = 0.0;
          if (!in_cycle[c]) continue;
          const auto col = static_cast<std::int64_t>(c);
          const double hn = std::sqrt(std::max(norm2[c], 0.0));
          h(c, j + 1, j) = hn;
          for (int i = 0; i < j; ++i) {
            const C a = h(c, i, j), b = h(c, i + 1, j);
            h(c, i, j) = std::conj(cs[c][i]) * a + std::conj(sn[c][i]) * b;
            h(c, i + 1, j) = -sn[c][i] * a + cs[c][i] * b;
          }
          const C a = h(c, j, j);
          const double d = std::hypot(std::abs(a), hn);
          if (d == 0.0 || !std::isfinite(d)) {
            progress.freeze_if(col, progress[col].stop(std::isfinite(d) ? StopReason::breakdown : StopReason::nan));
            in_cycle[c] = 0;
            continue;
          }
          cs[c][j] = a / d;
          sn[c][j] = hn / d;
          h(c, j, j) = d;
          h(c, j + 1, j) = 0;
          g[c][j + 1] = -sn[c][j] * g[c][j];
          g[c][j] = std::conj(cs[c][j]) * g[c][j];
          built[c] = j + 1;
          if (progress.freeze_if(col, progress[col].record(++iterations[c], std::abs(g[c][j + 1]))) || hn == 0.0) {
            in_cycle[c] = 0;  // stopped, or a lucky breakdown: the Krylov space holds the solution
            continue;
          }
          scale[c] = 1.0 / hn;
        }
        wt.mul_(scale_column());
        vj.copy_(wt.t());
      }
      // x += M⁻¹ V y (Z y for FGMRES) per column, y from H y = g on the columns it built.
      const int most = *std::max_element(built.begin(), built.end());
      if (most > 0) {
        std::vector<C> y(static_cast<std::size_t>(most) * kk, C(0));  // (k, most), zero past built[c]
        const auto yi = [&](std::size_t c, int i) -> C& { return y[c * static_cast<std::size_t>(most) + i]; };
        for (std::size_t c = 0; c < kk; ++c)
          for (int i = built[c] - 1; i >= 0; --i) {
            C s = g[c][static_cast<std::size_t>(i)];
            for (int l = i + 1; l < built[c]; ++l) s -= h(c, i, l) * yi(c, l);
            yi(c, i) = s / h(c, i, i);
          }
        const auto& basis = keep_z ? Z : V;
        const auto yt = tensor_like(y, bl).view({k, most});
        auto vyt = at::empty({k, n}, bl.options());
        for (std::int64_t c = 0; c < k; ++c) {
          auto out = vyt[c];
          at::mv_out(out, basis[c].narrow(0, 0, most).t(), yt[c]);
        }
        const auto vy = vyt.t();  // (n, k)
        if (keep_z || M.identity) {
          x.add_(vy);
        } else {
          apply_block_preconditioner(M, vy.contiguous(), z);
          // Only the columns that built something move (M of a zero column need not be zero).
          for (std::size_t c = 0; c < kk; ++c) scale[c] = built[c] > 0 ? 1.0 : 0.0;
          x.add_(z * tensor_like(scale, bl));
        }
      }
      if (!progress.any()) break;
      // Restart every column still going from its true residual.
      (void)A.apply_block(x, w, {});
      at::sub_out(r, bl, w);
      const auto rr = comm::summed(block_dots(r, r), comm);
      for (std::size_t c = 0; c < kk; ++c) {
        const auto col = static_cast<std::int64_t>(c);
        beta[c] = std::sqrt(rr[c]);
        if (!progress.active(col)) continue;
        if (beta[c] == 0.0 || !std::isfinite(beta[c]))  // exact, or lost: the recorded estimate was not
          progress.freeze_if(col, progress[col].stop(beta[c] == 0.0 ? StopReason::converged_rtol : StopReason::nan));
      }
    }
  });
}

}  // namespace einshard::sparse::detail
