#pragma once
/// @file
/// CG for k right-hand sides at once: k coupled recurrences on an (n_local, k) block, one block
/// product per iteration (one halo exchange for all k columns, each stored entry read once) and
/// two all-reduces per iteration for all k columns' dots (the standard CG's two, each carrying k
/// values), or one with `CgVariant::single_reduction`, instead of k products and 2k all-reduces.
/// Each column has its own α, β, stop test, history and reason (`SolveInfo::columns`); a column
/// that stops is frozen (its α and direction are zero), so the others' arithmetic is exactly that
/// of k separate CG solves.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/sparse/matrix/block_kernels.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/krylov/block.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

/// The columns' starts from the reduced ‖b_j‖², ‖r_j‖² and <r_j, M r_j> (`sums`: those three blocks
/// of k at `bb`, `rr`, `rz`): x_j = 0 for b_j = 0, the iteration-0 record, and which columns go on.
inline std::vector<char> start_columns(std::vector<Progress>& progress, SolveInfo& info, at::Tensor& x,
                                       const double* bb, const double* rr, const double* rz, const SolveOptions& o) {
  const auto k = x.size(1);
  std::vector<char> active(static_cast<std::size_t>(k), 1);
  for (std::int64_t j = 0; j < k; ++j) {
    const auto c = static_cast<std::size_t>(j);
    const double bn = std::sqrt(bb[j]);
    progress[c].start(bn);
    if (bn == 0.0) {  // x_j = 0 exactly
      x.select(1, j).zero_();
      info.columns[c].reason = StopReason::zero_rhs;
      info.columns[c].converged = true;
      if (o.residual_history) info.columns[c].residual_history.push_back(0.0);
      active[c] = 0;
      continue;
    }
    if (progress[c].record(0, std::sqrt(rr[j])) || progress[c].check_nonzero(rz[j])) active[c] = 0;
  }
  return active;
}

/// `o.cg_variant` standard: Hestenes–Stiefel, two all-reduces per step (<p, A p>, then <r, z> with
/// <r, r>), each carrying all k columns' values, the iterates of k single CG solves. Otherwise
/// (single_reduction; pipelined, which a block runs blocking): Chronopoulos–Gear, ONE all-reduce
/// per step of (<r, u>, <u, A u>, <r, r>) for all k columns, u = M r.
inline SolveResult block_cg(const Operator& A, const DVector& B, const PreconditionerOp* m, const SolveOptions& o) {
  m = for_cg(m);
  const auto& layout = A.layout();
  const MPI_Comm comm = layout->comm();
  const auto b = B.local().detach().contiguous();
  const auto k = b.size(1);
  auto x = o.x0 ? o.x0->local().detach().to(b.scalar_type()).contiguous().clone() : at::zeros_like(b);
  auto r = b.clone();
  auto q = at::empty_like(b);
  if (o.x0) {
    (void)A.apply_block(x, q, {});
    r.sub_(q);
  }
  // z = M⁻¹ r: a diagonal fused into the update kernel, or a general operator column by column.
  const auto diag = m ? m->diagonal() : at::Tensor();
  const auto d = diag.defined() ? diag.to(b.scalar_type()).contiguous() : at::Tensor();
  const bool general = m && !d.defined();
  const bool one_reduction = o.cg_variant != CgVariant::standard;
  // Standard: z aliases r without a general M (a diagonal's z = d .* r is formed where needed).
  // One reduction: u = M r is a block of its own, written by the update kernel.
  auto z = general || one_reduction ? at::empty_like(b) : r;
  const auto apply_m = [&] {
    if (!general) {
      if (one_reduction) d.defined() ? at::mul_out(z, r, d.unsqueeze(1)) : z.copy_(r);
      return;
    }
    auto zj = at::empty({b.size(0)}, b.options());
    for (std::int64_t j = 0; j < k; ++j) {
      m->apply(r.select(1, j).contiguous(), zj);
      z.select(1, j).copy_(zj);
    }
  };
  SolveResult result;
  auto& info = result.info;
  info.columns.resize(static_cast<std::size_t>(k));
  std::vector<Progress> progress;
  progress.reserve(static_cast<std::size_t>(k));
  for (auto& c : info.columns) progress.emplace_back(o, c);
  const auto t0 = comm::wall_time();
  apply_m();
  // One all-reduce: <r, z>, <r, r> and <b, b> of every column (and <u, A u> with one reduction).
  auto w = one_reduction ? at::empty_like(b) : at::Tensor();
  std::vector<double> init = d.defined() && !one_reduction ? block_dots(r, r * d.unsqueeze(1)) : block_dots(r, z);
  for (const at::Tensor& t : {r, b}) {
    const auto more = block_dots(t, t);
    init.insert(init.end(), more.begin(), more.end());
  }
  if (one_reduction) {
    const auto uw = A.apply_block(z, w, z);
    init.insert(init.end(), uw.begin(), uw.end());
  }
  init = comm::summed(std::move(init), comm);
  const auto* sv = init.data();
  std::vector<double> rz(sv, sv + k);
  auto active = start_columns(progress, info, x, sv + 2 * k, sv + k, sv, o);
  std::vector<double> alpha(static_cast<std::size_t>(k)), beta(static_cast<std::size_t>(k));
  const auto count_active = [&] { return std::count(active.begin(), active.end(), 1); };
  if (one_reduction) {
    // Chronopoulos–Gear per column: β = γ/γ_old, α = γ / (δ − β γ / α_old), with γ = <r, u> and
    // δ = <u, A u> of the last reduction; p, s = A p follow u, w = A u.
    std::vector<double> delta(sv + 3 * k, sv + 4 * k), gamma_old(static_cast<std::size_t>(k)),
        alpha_old(static_cast<std::size_t>(k));
    auto p = at::zeros_like(b), s = at::zeros_like(b);
    for (int it = 1; count_active() > 0; ++it) {
      for (std::int64_t j = 0; j < k; ++j) {
        const auto c = static_cast<std::size_t>(j);
        alpha[c] = beta[c] = 0.0;
        if (!active[c]) continue;
        beta[c] = it == 1 ? 0.0 : rz[c] / gamma_old[c];
        const double denom = it == 1 ? delta[c] : delta[c] - beta[c] * rz[c] / alpha_old[c];
        if (progress[c].check_same_sign(rz[c], denom)) {
          active[c] = 0;
          alpha[c] = beta[c] = 0.0;
          continue;
        }
        alpha[c] = rz[c] / denom;
      }
      auto sums = block_cgcg_update(x, r, p, s, z, w, alpha, beta, d, !m);
      if (general) {
        apply_m();
        const auto ru = block_dots(r, z);
        std::copy(ru.begin(), ru.end(), sums.begin());
      }
      const auto uw = A.apply_block(z, w, z);
      sums.insert(sums.end(), uw.begin(), uw.end());
      sums = comm::summed(std::move(sums), comm);
      for (std::int64_t j = 0; j < k; ++j) {
        const auto c = static_cast<std::size_t>(j);
        if (!active[c]) continue;
        if (progress[c].record(it, std::sqrt(sums[static_cast<std::size_t>(k + j)])) ||
            progress[c].check_nonzero(sums[c])) {
          active[c] = 0;
          continue;
        }
        gamma_old[c] = rz[c];
        alpha_old[c] = alpha[c];
        rz[c] = sums[c];
        delta[c] = sums[static_cast<std::size_t>(2 * k + j)];
      }
    }
  } else {
    auto p = d.defined() ? (r * d.unsqueeze(1)).contiguous() : z.clone();
    for (int it = 1; count_active() > 0; ++it) {
      const auto pq = comm::summed(A.apply_block(p, q, p), comm);
      for (std::int64_t j = 0; j < k; ++j) {
        const auto c = static_cast<std::size_t>(j);
        alpha[c] = 0.0;
        if (!active[c]) continue;
        if (progress[c].check_same_sign(rz[c], pq[c])) {
          active[c] = 0;
          continue;
        }
        alpha[c] = rz[c] / pq[c];
      }
      auto s2 = block_cg_update(r, q, alpha, d);
      if (general) {
        apply_m();
        const auto rz_local = block_dots(r, z);
        std::copy(rz_local.begin(), rz_local.end(), s2.begin());
      }
      s2 = comm::summed(std::move(s2), comm);
      for (std::int64_t j = 0; j < k; ++j) {
        const auto c = static_cast<std::size_t>(j);
        beta[c] = 0.0;
        if (!active[c]) continue;
        if (progress[c].record(it, std::sqrt(s2[static_cast<std::size_t>(k + j)])) ||
            progress[c].check_nonzero(s2[c])) {
          active[c] = 0;
          continue;
        }
        beta[c] = s2[c] / rz[c];
        rz[c] = s2[c];
      }
      block_cg_direction(x, p, z, d, alpha, beta, active);  // x += α p too, every step (the last included)
    }
  }
  summarize_columns(info);
  info.seconds = comm::wall_time() - t0;
  result.x = DVector(layout, x);
  return result;
}

}  // namespace einshard::sparse::detail
