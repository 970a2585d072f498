#pragma once
/// @file
/// GMRES(m) and FGMRES(m) for k right-hand sides at once: k Arnoldi processes (gmres.hpp's, one per
/// column) in lockstep on a basis of (n_local, k) blocks. Per step one block product (one halo
/// exchange for all k columns) and one all-reduce per Gram–Schmidt pass carrying every column's
/// h = Vᴴw together with <w, w> (classical Gram–Schmidt with the norm folded in, as in gmres.hpp),
/// so k columns cost what one does in messages.
///
/// The basis is stored column by column, (k, m + 1, n), in the solve's precision or, with
/// `GmresBasis::reduced`, in float32 (complex64): the Gram–Schmidt passes read it, and they are
/// most of a step's traffic. Each column's Gram–Schmidt goes through gram_schmidt.hpp's sweeps:
/// the dots, then the update fused with the second pass's dots where DGKS asks for one, then that
/// pass's update (two or three reads of the basis a step, where dots and update apart make two or
/// four).
///
/// Each column has its own Hessenberg matrix, rotations, stop test and second-pass decision
/// (DGKS, per column): its arithmetic is that of its single solve (to the order of summation, and
/// with the reduced basis to float32 rounding of the stored vectors). A column that stops, or
/// whose cycle ends early (lucky breakdown), gets zero basis vectors for the rest of the cycle and
/// waits for the restart; a stopped one is frozen.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/krylov/block.hpp"
#include "einshard/sparse/krylov/gram_schmidt.hpp"

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
    // The basis column by column, (k, m + 1, n): each column's Gram–Schmidt streams its own rows (a
    // pass over rows with the basis index and the columns inner ran at a quarter of BLAS's speed).
    // The vector the product takes stays an (n, k) block; a transpose each way costs a pass over
    // one block. The basis's next vectors are built in w, (k, n): in place in V when V is of the
    // solve's dtype, else in float64 and rounded into V once scaled.
    const bool reduced = o.gmres_basis == GmresBasis::reduced && basis_dtype(bl.scalar_type(), true) != bl.scalar_type();
    auto V = at::empty({k, mm + 1, n}, bl.options().dtype(basis_dtype(bl.scalar_type(), reduced)));
    auto vj = at::empty_like(bl), q = at::empty_like(bl);
    auto wbuf = reduced ? at::empty({k, n}, bl.options()) : at::Tensor();
    auto z = M.identity ? at::Tensor() : at::empty_like(bl);
    const bool keep_z = flexible && !M.identity;
    auto Z = keep_z ? at::empty({k, mm, n}, bl.options()) : at::Tensor();
    // vj = the basis's vector j as stored (rounded, with a reduced basis: the Arnoldi relation is
    // then that of the vectors x is built from).
    const auto store = [&](int j, const at::Tensor& rows) {
      if (reduced) V.select(1, j).copy_(rows);
      vj.copy_(V.select(1, j).t());
    };
    const double keep = o.reorthogonalize == Reorthogonalize::if_needed ? 0.5 : 0.0;
    const auto hsize = static_cast<std::size_t>((mm + 1) * mm);
    std::vector<std::vector<C>> H(kk, std::vector<C>(hsize)), g(kk), cs(kk), sn(kk);
    std::vector<int> built(kk), iterations(kk, 0);
    std::vector<char> in_cycle(kk), confirm(kk, 0);
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
      if (reduced) vj.copy_(V.select(1, 0).t());
      for (int j = 0; j < mm && std::count(in_cycle.begin(), in_cycle.end(), 1) > 0; ++j) {
        if (!M.identity) apply_block_preconditioner(M, vj, z);
        if (keep_z) Z.select(1, j).copy_(z.t());
        (void)A.apply_block(M.identity ? vj : z, q, {});
        auto w = reduced ? wbuf : V.select(1, j + 1);  // (k, n)
        w.copy_(q.t());
        // Classical Gram–Schmidt for every column with <w, w> in the same reduction; a second
        // pass for the columns whose first left no more than `keep` of ‖w‖². A column out of the
        // cycle reads no basis (its h stays zero).
        const auto rows = static_cast<std::size_t>(j + 2);  // h = Vᴴw (j + 1 values), then <w, w>
        std::vector<double> norm2(kk, 0.0);
        std::vector<char> second(kk, 0);
        std::vector<C> dots(kk * rows), coef(kk * rows);
        const auto sweep = [&](std::size_t c, bool update, bool dot) {
          auto wc = w[static_cast<std::int64_t>(c)];
          gram_schmidt_sweep(V[static_cast<std::int64_t>(c)], j + 1, wc, update ? &coef[c * rows] : nullptr,
                             dot ? &dots[c * rows] : nullptr);
        };
        // The reduced dots of the columns in `on` into h (added to the first pass's) and norm2;
        // `coef` their update. Returns whether a column asks for a second pass.
        const auto take = [&](const std::vector<char>& on, bool first) {
          dots = comm::summed(std::move(dots), comm);
          bool again = false;
          for (std::size_t c = 0; c < kk; ++c) {
            if (!on[c]) continue;
            const double ww = dots[c * rows + j + 1].real();
            norm2[c] = ww;
            for (int i = 0; i <= j; ++i) {
              const C d = dots[c * rows + i];
              coef[c * rows + i] = d;
              h(c, i, j) = (first ? C(0) : h(c, i, j)) + d;
              norm2[c] -= std::norm(d);
            }
            second[c] = first && norm2[c] <= keep * ww;
            again = again || second[c];
          }
          return again;
        };
        for (std::size_t c = 0; c < kk; ++c)
          if (in_cycle[c]) sweep(c, false, true);
        const bool again = take(in_cycle, true);
        std::fill(dots.begin(), dots.end(), C(0));
        // The first pass's update, with the second pass's dots where a column asks for them.
        for (std::size_t c = 0; c < kk; ++c)
          if (in_cycle[c]) sweep(c, true, second[c]);
        if (again) {
          const auto on = second;
          (void)take(on, false);
          for (std::size_t c = 0; c < kk; ++c)
            if (on[c]) sweep(c, true, false);
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
          const double estimate = std::abs(g[c][j + 1]);
          // With a reduced basis the estimate may be off by float32 rounding: a column it calls
          // converged ends its cycle and the true residual at the restart decides.
          const bool claims = reduced && progress[col].met(estimate);
          const bool stopped = progress[col].record(++iterations[c], estimate);
          if (claims) {
            confirm[c] = 1;
            in_cycle[c] = 0;
            continue;
          }
          if (progress.freeze_if(col, stopped) || hn == 0.0) {
            in_cycle[c] = 0;  // stopped, or a lucky breakdown: the Krylov space holds the solution
            continue;
          }
          scale[c] = 1.0 / hn;
        }
        w.mul_(scale_column());
        store(j + 1, w);
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
        auto vyt = at::zeros({k, n}, bl.options());
        for (std::size_t c = 0; c < kk; ++c) {
          if (built[c] == 0) continue;
          std::vector<C> minus_y(y.begin() + static_cast<std::ptrdiff_t>(c * most),
                                 y.begin() + static_cast<std::ptrdiff_t>(c * most + built[c]));
          for (auto& v : minus_y) v = -v;
          auto out = vyt[static_cast<std::int64_t>(c)];
          gram_schmidt_sweep(basis[static_cast<std::int64_t>(c)], built[c], out, minus_y.data(), nullptr);
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
      (void)A.apply_block(x, q, {});
      at::sub_out(r, bl, q);
      const auto rr = comm::summed(block_dots(r, r), comm);
      for (std::size_t c = 0; c < kk; ++c) {
        const auto col = static_cast<std::int64_t>(c);
        beta[c] = std::sqrt(rr[c]);
        if (!progress.active(col)) continue;
        if (confirm[c]) {  // the estimate said converged: the true residual confirms it, or the column goes on
          confirm[c] = 0;
          if (progress.freeze_if(col, progress[col].met(beta[c]))) continue;
          if (progress.freeze_if(col, iterations[c] >= o.maxiter && progress[col].stop(StopReason::maxiter))) continue;
        }
        if (beta[c] == 0.0 || !std::isfinite(beta[c]))  // exact, or lost: the recorded estimate was not
          progress.freeze_if(col, progress[col].stop(beta[c] == 0.0 ? StopReason::converged_rtol : StopReason::nan));
      }
    }
  });
}

}  // namespace einshard::sparse::detail
