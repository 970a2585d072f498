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
#include "einshard/sparse/dvector.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/operator.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "einshard/sparse/solver.hpp"

namespace einshard::sparse::detail {

/// Column sums of conj(a) * b, real parts, as doubles (the k local dots of a block).
inline at::Tensor column_dots(const at::Tensor& a, const at::Tensor& b) {
  const auto d = (a.is_complex() ? (a.conj() * b) : (a * b)).sum(0);
  return (d.is_complex() ? at::real(d) : d).to(at::kDouble).contiguous();
}

inline void sum_in_place(at::Tensor& t, MPI_Comm comm) {
  comm::check(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr<double>(), static_cast<int>(t.numel()), MPI_DOUBLE, MPI_SUM, comm),
              "MPI_Allreduce");
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
    A.apply_block(x, q);
    r.sub_(q);
  }
  // z = M⁻¹ r: a diagonal broadcast over the columns, or the operator column by column.
  const auto diag = m ? m->diagonal() : at::Tensor();
  const auto d = diag.defined() ? diag.to(b.scalar_type()).unsqueeze(1).contiguous() : at::Tensor();
  auto z = m ? at::empty_like(b) : r;
  const auto precondition = [&] {
    if (!m) return;
    if (d.defined()) {
      at::mul_out(z, r, d);
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
  const auto t0 = MPI_Wtime();
  precondition();
  // One all-reduce: <r, z>, <r, r> and <b, b> of every column.
  auto s = at::cat({column_dots(r, z), column_dots(r, r), column_dots(b, b)});
  sum_in_place(s, comm);
  const auto* sv = s.data_ptr<double>();
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
  auto p = z.clone();
  auto alpha = at::zeros({k}, at::kDouble), beta = at::zeros({k}, at::kDouble);
  const auto count_active = [&] { return std::count(active.begin(), active.end(), 1); };
  for (int it = 1; count_active() > 0; ++it) {
    A.apply_block(p, q);
    auto pq = column_dots(p, q);
    sum_in_place(pq, comm);
    auto* av = alpha.data_ptr<double>();
    for (std::int64_t j = 0; j < k; ++j) {
      const auto c = static_cast<std::size_t>(j);
      av[j] = 0.0;
      if (!active[c]) continue;
      if (progress[c].check_same_sign(rz[c], pq.data_ptr<double>()[j])) {
        active[c] = 0;
        continue;
      }
      av[j] = rz[c] / pq.data_ptr<double>()[j];
    }
    const auto a = alpha.to(b.scalar_type()).unsqueeze(0);
    x.add_(p * a);
    r.sub_(q * a);
    precondition();
    auto s2 = at::cat({column_dots(r, z), column_dots(r, r)});
    sum_in_place(s2, comm);
    const auto* s2v = s2.data_ptr<double>();
    auto* bv = beta.data_ptr<double>();
    for (std::int64_t j = 0; j < k; ++j) {
      const auto c = static_cast<std::size_t>(j);
      bv[j] = 0.0;
      if (!active[c]) continue;
      if (progress[c].record(it, std::sqrt(s2v[k + j])) || progress[c].check_nonzero(s2v[j])) {
        active[c] = 0;
        continue;
      }
      bv[j] = s2v[j] / rz[c];
      rz[c] = s2v[j];
    }
    // p = z + β p for the active columns; a stopped column's direction becomes 0.
    const auto keep = at::tensor(std::vector<double>(active.begin(), active.end()), at::kDouble);
    p.mul_(beta.to(b.scalar_type()).unsqueeze(0)).add_(z * keep.to(b.scalar_type()).unsqueeze(0));
  }
  // The block's summary: converged when every column did; the worst column's numbers.
  info.converged = true;
  info.reason = info.columns.empty() ? StopReason::zero_rhs : info.columns.front().reason;
  for (const auto& c : info.columns) {
    info.iterations = std::max(info.iterations, c.iterations);
    info.residual_norm = std::max(info.residual_norm, c.residual_norm);
    info.rhs_norm = std::max(info.rhs_norm, c.rhs_norm);
    if (!c.converged && info.converged) {
      info.converged = false;
      info.reason = c.reason;
    }
  }
  info.seconds = MPI_Wtime() - t0;
  result.x = DVector(layout, x);
  return result;
}

}  // namespace einshard::sparse::detail
