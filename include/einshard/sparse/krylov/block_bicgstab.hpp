#pragma once
/// @file
/// BiCGStab for k right-hand sides at once (bicgstab.hpp's recurrence, one per column, coupled):
/// per iteration two block products (one halo exchange each for all k columns) and three
/// all-reduces, each carrying all k columns' values: <r̂, v>, then (<s, t>, <t, t>), then
/// (<r̂, r>, <r, r>) — what one single solve costs, instead of k times that. The vector updates
/// are fused passes over the block's rows (block.hpp).

#include <mpi.h>

#include <cmath>
#include <complex>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/block.hpp"

namespace einshard::sparse::detail {

inline SolveResult block_bicgstab(const Operator& A, const DVector& B, const PreconditionerOp* m,
                                  const SolveOptions& o) {
  using C = std::complex<double>;
  const MPI_Comm comm = A.layout()->comm();
  return run_block(A, B, o, [&](BlockIterationZero& st, BlockProgress& progress) {
    auto& x = st.x;
    auto& r = st.r;
    const auto k = r.size(1);
    const auto kk = static_cast<std::size_t>(k);
    const PreconditionerUse M(m, r);
    const bool separate = M.general();  // a general M runs in its own pass; a diagonal is fused
    // The generic kernels make each fused pass of ATen operations (the same arithmetic) whose dots
    // come to the host in one copy.
    const bool generic = uses_generic(r);
    const at::NoGradGuard no_grad;
    const auto rhat = r.clone();
    std::vector<C> rho(kk), alpha(kk, 0.0), omega(kk, 0.0), beta(kk, 0.0);
    for (std::size_t c = 0; c < kk; ++c) rho[c] = st.rnorm[c] * st.rnorm[c];
    auto p = r.clone(), v = at::zeros_like(r), s = at::empty_like(r), t = at::empty_like(r);
    auto phat = M.identity ? p : at::empty_like(r);
    auto shat = M.identity ? s : at::empty_like(r);
    if (!M.identity) apply_block_preconditioner(M, p, phat);
    for (int it = 1; progress.any(); ++it) {
      auto rv = comm::summed(product_dots(A, phat, v, rhat), comm);
      for (std::int64_t j = 0; j < k; ++j) {
        const auto c = static_cast<std::size_t>(j);
        alpha[c] = 0.0;
        if (!progress.active(j)) continue;
        if (rv[c] == 0.0 || !std::isfinite(std::abs(rv[c]))) {
          progress.freeze_if(j, progress[j].stop(std::isfinite(std::abs(rv[c])) ? StopReason::breakdown : StopReason::nan));
          continue;
        }
        alpha[c] = rho[c] / rv[c];
      }
      // s = r − α v, and ŝ = d .* s for a diagonal M.
      if (generic) {
        at::sub_out(s, r, v * tensor_like(alpha, r));
        if (M.diagonal.defined()) at::mul_out(shat, s, M.diagonal.unsqueeze(1));
      } else block_pass<0>(r, [&](auto v0) {
        using V = decltype(v0);
        auto a = as_values<V>(alpha);
        const auto* ap = a.data();
        const auto* __restrict rp = r.data_ptr<V>();
        const auto* __restrict vp = v.data_ptr<V>();
        auto* __restrict sp = s.data_ptr<V>();
        auto* __restrict hp = shat.data_ptr<V>();
        const V* dp = M.diagonal.defined() ? M.diagonal.data_ptr<V>() : nullptr;
        return [=, a = std::move(a)](std::int64_t i, std::int64_t e, std::int64_t j, V*) {
          const V si = rp[e] - ap[j] * vp[e];
          sp[e] = si;
          if (dp) hp[e] = dp[i] * si;
        };
      });
      if (separate) apply_block_preconditioner(M, s, shat);
      // (<s, t>, <t, t>) in one reduction: the product's dot with s, then <t, t>.
      auto st_dots = product_dots(A, shat, t, s);
      const auto tt = block_cdots(t, t);
      st_dots.insert(st_dots.end(), tt.begin(), tt.end());
      st_dots = comm::summed(std::move(st_dots), comm);
      for (std::size_t c = 0; c < kk; ++c) {
        const double ttc = st_dots[kk + c].real();
        omega[c] = !progress.active(static_cast<std::int64_t>(c)) || ttc == 0.0 ? C(0) : std::conj(st_dots[c]) / ttc;
      }
      // x += α p̂ + ω ŝ; r = s − ω t; with <r̂, r> and <r, r> of the new r.
      auto next = generic ? [&] {
        const auto w = tensor_like(omega, r);
        x.add_(phat * tensor_like(alpha, r)).add_(shat * w);
        at::sub_out(r, s, t * w);
        return to_host({column_cdots(rhat, r), column_cdots(r, r)});
      }() : block_pass<2>(r, [&](auto v0) {
        using V = decltype(v0);
        auto a = as_values<V>(alpha), w = as_values<V>(omega);
        const auto *ap = a.data(), *wp = w.data();
        auto* __restrict xp = x.data_ptr<V>();
        auto* __restrict rp = r.data_ptr<V>();
        const auto* __restrict ph = phat.data_ptr<V>();
        const auto* __restrict sh = shat.data_ptr<V>();
        const auto* __restrict sp = s.data_ptr<V>();
        const auto* __restrict tp = t.data_ptr<V>();
        const auto* __restrict hp = rhat.data_ptr<V>();
        // A frozen column keeps x and r as they are: its α and ω are zero (and its p̂ too).
        return [=, a = std::move(a), w = std::move(w)](std::int64_t, std::int64_t e, std::int64_t j, V* acc) {
          xp[e] = (xp[e] + ap[j] * ph[e]) + wp[j] * sh[e];
          const V ri = sp[e] - wp[j] * tp[e];
          rp[e] = ri;
          acc[0] += conj_if_complex(hp[e]) * ri;
          acc[1] += conj_if_complex(ri) * ri;
        };
      });
      next = comm::summed(std::move(next), comm);
      for (std::int64_t j = 0; j < k; ++j) {
        const auto c = static_cast<std::size_t>(j);
        beta[c] = 0.0;
        if (!progress.active(j)) continue;
        if (progress.freeze_if(j, progress[j].record(it, std::sqrt(next[kk + c].real())))) continue;
        if (omega[c] == 0.0 || next[c] == 0.0) {  // the next direction is undefined
          progress.freeze_if(j, progress[j].stop(StopReason::breakdown));
          continue;
        }
        beta[c] = next[c] / rho[c] * (alpha[c] / omega[c]);
        rho[c] = next[c];
      }
      if (!progress.any()) break;
      // p = r + β (p − ω v) for the columns going on, and p̂ = d .* p for a diagonal M.
      const auto on = progress.mask();
      if (generic) {
        p.sub_(v * tensor_like(omega, r)).mul_(tensor_like(beta, r)).add_(r).mul_(tensor_like(on, r));
        if (M.diagonal.defined()) at::mul_out(phat, p, M.diagonal.unsqueeze(1));
      } else block_pass<0>(r, [&](auto v0) {
        using V = decltype(v0);
        auto b = as_values<V>(beta), w = as_values<V>(omega), u = as_values<V>(on);
        const auto *bp = b.data(), *wp = w.data(), *up = u.data();
        const auto* __restrict rp = r.data_ptr<V>();
        const auto* __restrict vp = v.data_ptr<V>();
        auto* __restrict pp = p.data_ptr<V>();
        auto* __restrict hp = phat.data_ptr<V>();
        const V* dp = M.diagonal.defined() ? M.diagonal.data_ptr<V>() : nullptr;
        return [=, b = std::move(b), w = std::move(w), u = std::move(u)](std::int64_t i, std::int64_t e, std::int64_t j, V*) {
          const V pi = up[j] * (rp[e] + bp[j] * (pp[e] - wp[j] * vp[e]));
          pp[e] = pi;
          if (dp) hp[e] = dp[i] * pi;
        };
      });
      if (separate) apply_block_preconditioner(M, p, phat);
    }
  });
}

}  // namespace einshard::sparse::detail
