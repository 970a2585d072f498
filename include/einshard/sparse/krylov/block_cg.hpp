#pragma once
/// @file
/// CG for k right-hand sides at once: k coupled recurrences on an (n_local, k) block, one block
/// product per iteration (one halo exchange for all k columns, each stored entry read once) and
/// two all-reduces per iteration for all k columns' dots (the standard CG's two, each carrying k
/// values), instead of k products and 2k all-reduces. Each column has its own α, β, stop test,
/// history and reason (`SolveInfo::columns`); a column that stops is frozen (its α and direction
/// are zero), so the others' arithmetic is exactly that of k separate CG solves.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/sparse/block_kernels.hpp"
#include "einshard/sparse/dvector.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/operator.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "einshard/sparse/solver.hpp"

namespace einshard::sparse::detail {

/// Sums `v` over the ranks (one all-reduce of all k columns' values).
inline std::vector<double> sum_over(std::vector<double> v, MPI_Comm comm) {
  comm::check(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, comm),
              "MPI_Allreduce");
  return v;
}

inline SolveResult block_cg(const Operator& A, const DVector& B, const PreconditionerOp* m, const SolveOptions& o) {
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
  auto z = general ? at::empty_like(b) : r;  // a diagonal's z = d .* r is formed where needed
  const auto apply_general = [&] {
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
  const auto t0 = MPI_Wtime();
  if (general) apply_general();
  // One all-reduce: <r, z>, <r, r> and <b, b> of every column.
  std::vector<double> init = d.defined() ? block_dots(r, r * d.unsqueeze(1)) : block_dots(r, z);
  for (const at::Tensor& t : {r, b}) {
    const auto more = block_dots(t, t);
    init.insert(init.end(), more.begin(), more.end());
  }
  init = sum_over(std::move(init), comm);
  const auto* sv = init.data();
  std::vector<double> rz(sv, sv + k);
  std::vector<char> active(static_cast<std::size_t>(k), 1);
  for (std::int64_t j = 0; j < k; ++j) {
    const auto c = static_cast<std::size_t>(j);
    const double bn = std::sqrt(sv[2 * k + j]);
    progress[c].start(bn);
    if (bn == 0.0) {  // x_j = 0 exactly
      x.select(1, j).zero_();
      info.columns[c].reason = StopReason::zero_rhs;
      info.columns[c].converged = true;
      if (o.residual_history) info.columns[c].residual_history.push_back(0.0);
      active[c] = 0;
      continue;
    }
    if (progress[c].record(0, std::sqrt(sv[k + j])) || progress[c].check_nonzero(rz[c])) active[c] = 0;
  }
  auto p = d.defined() ? (r * d.unsqueeze(1)).contiguous() : z.clone();
  std::vector<double> alpha(static_cast<std::size_t>(k)), beta(static_cast<std::size_t>(k));
  const auto count_active = [&] { return std::count(active.begin(), active.end(), 1); };
  for (int it = 1; count_active() > 0; ++it) {
    const auto pq = sum_over(A.apply_block(p, q, p), comm);
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
    auto s2 = block_cg_update(x, r, p, q, alpha, d);
    if (general) {
      apply_general();
      const auto rz_local = block_dots(r, z);
      std::copy(rz_local.begin(), rz_local.end(), s2.begin());
    }
    s2 = sum_over(std::move(s2), comm);
    for (std::int64_t j = 0; j < k; ++j) {
      const auto c = static_cast<std::size_t>(j);
      beta[c] = 0.0;
      if (!active[c]) continue;
      if (progress[c].record(it, std::sqrt(s2[static_cast<std::size_t>(k + j)])) || progress[c].check_nonzero(s2[c])) {
        active[c] = 0;
        continue;
      }
      beta[c] = s2[c] / rz[c];
      rz[c] = s2[c];
    }
    block_cg_direction(p, z, d, beta, active);
  }
  summarize_columns(info);
  info.seconds = MPI_Wtime() - t0;
  result.x = DVector(layout, x);
  return result;
}

}  // namespace einshard::sparse::detail
