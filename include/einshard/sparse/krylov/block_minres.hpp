#pragma once
/// @file
/// MINRES for k right-hand sides at once (minres.hpp's recurrence, one per column, coupled): one
/// block product per iteration (one halo exchange for all k columns) and two all-reduces, α and
/// β² of every column, each in the pass that forms its vectors (block.hpp). The stop test is each
/// column's ‖r‖ in the M⁻¹ norm, as for a single solve.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/krylov/block.hpp"

namespace einshard::sparse::detail {

inline SolveResult block_minres(const Operator& A, const DVector& B, const PreconditionerOp* m,
                                const SolveOptions& o) {
  using C = std::complex<double>;
  const auto& layout = A.layout();
  const MPI_Comm comm = layout->comm();
  SolveResult result;
  auto& info = result.info;
  const auto bl = B.local().detach().contiguous();
  const auto k = bl.size(1);
  const auto kk = static_cast<std::size_t>(k);
  BlockProgress progress(o, info, k);
  auto x = o.x0 ? o.x0->local().detach().to(bl.scalar_type()).contiguous().clone() : at::zeros_like(bl);
  auto r1 = bl.clone();
  if (o.x0) {
    auto q = at::empty_like(bl);
    (void)A.apply_block(x, q, {});
    r1.sub_(q);
  }
  const PreconditionerUse M(m, bl);
  // The generic kernels make each fused pass of ATen operations (the same arithmetic) whose dots
  // come to the host in one copy.
  const bool generic = uses_generic(bl);
  const at::NoGradGuard no_grad;
  const auto t0 = comm::wall_time();
  auto y = at::empty_like(bl);
  apply_block_preconditioner(M, r1, y);
  auto mb = y;
  if (o.x0) {
    mb = at::empty_like(bl);
    apply_block_preconditioner(M, bl, mb);
  }
  auto init = block_dots(r1, y);
  const auto bmb = block_dots(bl, mb);
  init.insert(init.end(), bmb.begin(), bmb.end());
  init = comm::summed(std::move(init), comm);
  std::vector<double> beta(kk), oldb(kk, 0.0), dbar(kk, 0.0), epsln(kk, 0.0), phibar(kk), cs(kk, -1.0), sn(kk, 0.0);
  // The columns' starts: b = 0, an indefinite M, or the iteration-0 record.
  for (std::int64_t j = 0; j < k; ++j) {
    const auto c = static_cast<std::size_t>(j);
    const double rmr = init[c], bb = init[kk + c];
    if (bb == 0.0) {
      progress.zero_column(x, j);
      continue;
    }
    if (rmr < 0.0 || bb < 0.0 || !std::isfinite(rmr)) {
      progress[j].start(0.0);
      progress.freeze_if(j, progress[j].stop(std::isfinite(rmr) ? StopReason::breakdown : StopReason::nan));
      continue;
    }
    progress[j].start(std::sqrt(bb));
    beta[c] = phibar[c] = std::sqrt(rmr);
    progress.freeze_if(j, progress[j].record(0, beta[c]));
  }
  auto r2 = r1.clone(), v = at::empty_like(bl);
  auto w = at::zeros_like(bl), w1 = at::zeros_like(bl), w2 = at::zeros_like(bl);
  constexpr double tiny = std::numeric_limits<double>::epsilon();
  std::vector<C> c1(kk), c2(kk), c3(kk), c4(kk), c5(kk);
  for (int it = 1; progress.any(); ++it) {
    // v = y / β (0 for a frozen column), y = A v.
    for (std::size_t c = 0; c < kk; ++c) c1[c] = progress.active(static_cast<std::int64_t>(c)) ? 1.0 / beta[c] : 0.0;
    at::mul_out(v, y, tensor_like(c1, bl));
    (void)A.apply_block(v, y, {});
    // y −= (β / β_old) r1 (from the second iteration), with α = <v, y> of the result.
    for (std::size_t c = 0; c < kk; ++c) c1[c] = it >= 2 && progress.active(static_cast<std::int64_t>(c)) ? beta[c] / oldb[c] : 0.0;
    auto alfa = generic ? [&] {
      y.sub_(r1 * tensor_like(c1, y));
      return to_host({column_cdots(v, y)});
    }() : block_pass<1>(y, [&](auto v0) {
      using V = decltype(v0);
      auto a = as_values<V>(c1);
      const V* ap = a.data();
      auto* __restrict yp = y.data_ptr<V>();
      const auto* __restrict rp = r1.data_ptr<V>();
      const auto* __restrict vp = v.data_ptr<V>();
      return [=, a = std::move(a)](std::int64_t, std::int64_t e, std::int64_t j, V* acc) {
        const V yi = yp[e] - ap[j] * rp[e];
        yp[e] = yi;
        acc[0] += conj_if_complex(vp[e]) * yi;
      };
    });
    alfa = comm::summed(std::move(alfa), comm);
    // y −= (α / β) r2; r1 = r2; r2 = y; y = M r2; with β² = <r2, M r2> (a diagonal M fused).
    for (std::size_t c = 0; c < kk; ++c)
      c2[c] = progress.active(static_cast<std::int64_t>(c)) ? alfa[c].real() / beta[c] : 0.0;
    std::swap(r1, r2);  // r1 <- r2; the old r1's storage takes the new r2
    auto b2 = generic ? [&] {
      at::sub_out(r2, y, r1 * tensor_like(c2, y));
      if (M.diagonal.defined())
        at::mul_out(y, r2, M.diagonal.unsqueeze(1));
      else if (M.identity)
        y.copy_(r2);
      return M.general() ? std::vector<C>{} : to_host({column_cdots(r2, y)});
    }() : block_pass<1>(y, [&](auto v0) {
      using V = decltype(v0);
      auto a = as_values<V>(c2);
      const V* ap = a.data();
      auto* __restrict yp = y.data_ptr<V>();
      const auto* __restrict rp = r1.data_ptr<V>();
      auto* __restrict np = r2.data_ptr<V>();
      const V* dp = M.diagonal.defined() ? M.diagonal.data_ptr<V>() : nullptr;
      const bool same = M.identity;
      return [=, a = std::move(a)](std::int64_t i, std::int64_t e, std::int64_t j, V* acc) {
        const V ri = yp[e] - ap[j] * rp[e];
        np[e] = ri;
        const V yi = dp ? dp[i] * ri : ri;
        if (dp || same) yp[e] = yi;
        acc[0] += conj_if_complex(ri) * yi;
      };
    });
    if (M.general()) {
      apply_block_preconditioner(M, r2, y);
      b2 = block_cdots(r2, y);
    }
    b2 = comm::summed(std::move(b2), comm);
    for (std::int64_t j = 0; j < k; ++j) {
      const auto c = static_cast<std::size_t>(j);
      c3[c] = c4[c] = c5[c] = 0.0;  // the update of w and x (zero: frozen)
      if (!progress.active(j)) continue;
      oldb[c] = beta[c];
      const double bsq = b2[c].real();
      if (bsq < 0.0 || !std::isfinite(bsq)) {
        progress.freeze_if(j, progress[j].stop(std::isfinite(bsq) ? StopReason::breakdown : StopReason::nan));
        continue;
      }
      beta[c] = std::sqrt(bsq);
      const double a = alfa[c].real();
      const double oldeps = epsln[c];
      const double delta = cs[c] * dbar[c] + sn[c] * a;
      const double gbar = sn[c] * dbar[c] - cs[c] * a;
      epsln[c] = sn[c] * beta[c];
      dbar[c] = -cs[c] * beta[c];
      const double gamma = std::max(std::hypot(gbar, beta[c]), tiny);
      cs[c] = gbar / gamma;
      sn[c] = beta[c] / gamma;
      const double phi = cs[c] * phibar[c];
      phibar[c] = sn[c] * phibar[c];
      c3[c] = oldeps;
      c4[c] = delta;
      c5[c] = 1.0 / gamma;
      c1[c] = phi;
    }
    // w1 <- w2, w2 <- w, w = (v − ε w1 − δ w2) / γ, x += φ w.
    std::swap(w1, w2);
    std::swap(w2, w);
    if (generic) {
      at::mul_out(w, v - w1 * tensor_like(c3, v) - w2 * tensor_like(c4, v), tensor_like(c5, v));
      x.add_(w * tensor_like(c1, v));
    } else block_pass<0>(v, [&](auto v0) {
      using V = decltype(v0);
      auto e3 = as_values<V>(c3), e4 = as_values<V>(c4), e5 = as_values<V>(c5), e1 = as_values<V>(c1);
      const V *p3 = e3.data(), *p4 = e4.data(), *p5 = e5.data(), *p1 = e1.data();
      const auto* __restrict vp = v.data_ptr<V>();
      const auto* __restrict a1 = w1.data_ptr<V>();
      const auto* __restrict a2 = w2.data_ptr<V>();
      auto* __restrict wp = w.data_ptr<V>();
      auto* __restrict xp = x.data_ptr<V>();
      return [=, e3 = std::move(e3), e4 = std::move(e4), e5 = std::move(e5), e1 = std::move(e1)](
                 std::int64_t, std::int64_t e, std::int64_t j, V*) {
        const V wi = (vp[e] - p3[j] * a1[e] - p4[j] * a2[e]) * p5[j];
        wp[e] = wi;
        xp[e] += p1[j] * wi;
      };
    });
    for (std::int64_t j = 0; j < k; ++j) {
      const auto c = static_cast<std::size_t>(j);
      if (c5[c] == 0.0) continue;  // frozen before this step
      if (progress.freeze_if(j, progress[j].record(it, std::abs(phibar[c])))) continue;
      if (beta[c] == 0.0) progress.freeze_if(j, progress[j].stop(StopReason::converged_rtol));
    }
  }
  summarize_columns(info);
  info.seconds = comm::wall_time() - t0;
  result.x = DVector(layout, x);
  return result;
}

}  // namespace einshard::sparse::detail
