#pragma once
/// @file
/// What the block Krylov methods (k right-hand sides as k coupled recurrences on an (n_local, k)
/// block) share: fused passes over the block's rows with per-column coefficients and dots (one
/// loop over rows with the k columns inner, no per-column temporaries), the preconditioner applied
/// to a block, the columns' stop tests, and one all-reduce of all k columns' values.
///
/// A column that stops is frozen: its coefficients are zero from then on, so its x and r keep the
/// values they had, and the other columns' arithmetic is that of their single solves.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/sparse/matrix/block_kernels.hpp"
#include "einshard/sparse/matrix/generic_kernels.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

/// block_pass takes the columns in chunks of `chunk` with the accumulators in a local array, which
/// the compiler keeps in registers (a std::vector or the output itself could alias the inputs and
/// would force a store per entry).
inline constexpr std::int64_t chunk = 8;

/// Per-column coefficients as values of type V (real parts for a real V).
template <class V>
std::vector<V> as_values(const std::vector<std::complex<double>>& c) {
  std::vector<V> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    if constexpr (c10::is_complex<V>::value)
      out[i] = V(static_cast<typename V::value_type>(c[i].real()), static_cast<typename V::value_type>(c[i].imag()));
    else
      out[i] = static_cast<V>(c[i].real());
  }
  return out;
}

/// One pass over the rows of (n, k) blocks: `make(V{})` returns the row body `f(i, e, j, acc)` for
/// entry e = i k + j (row i, column j), accumulating ND dots into acc[0..ND) (V-typed). Returns the dots
/// as ND blocks of k (dot d of column j at d k + j). Columns go in chunks whose accumulators stay
/// in registers. Coefficients the body reads are moved into it (a non-const vector, so its buffer
/// moves with it), since `make` returns before the pass.
template <int ND, class Make>
std::vector<std::complex<double>> block_pass(const at::Tensor& like, Make&& make) {
  const auto n = like.size(0), k = like.size(1);
  std::vector<std::complex<double>> out(static_cast<std::size_t>(ND * k));
  dispatch_values(like.scalar_type(), [&](auto v0) {
    using V = decltype(v0);
    const auto body = make(v0);
    constexpr int slots = ND > 0 ? ND : 1;
    for (std::int64_t j0 = 0; j0 < k; j0 += chunk) {
      const auto w = std::min(chunk, k - j0);
      V acc[chunk][slots] = {};
      if (w == chunk) {  // a constant trip count: the body unrolls and vectorizes across columns
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = 0; j < chunk; ++j) body(i, i * k + j0 + j, j0 + j, acc[j]);
      } else {
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = 0; j < w; ++j) body(i, i * k + j0 + j, j0 + j, acc[j]);
      }
      for (int d = 0; d < ND; ++d)
        for (std::int64_t j = 0; j < w; ++j) out[static_cast<std::size_t>(d * k + j0 + j)] = widen(acc[j][d]);
    }
  });
  return out;
}

/// <a_j, b_j> (a conjugated) of every column, this rank's part.
inline std::vector<std::complex<double>> block_cdots(const at::Tensor& a, const at::Tensor& b) {
  if (uses_generic(a)) return generic_block_cdots(a, b);
  return block_pass<1>(a, [&](auto v0) {
    using V = decltype(v0);
    const auto* __restrict av = a.data_ptr<V>();
    const auto* __restrict bv = b.data_ptr<V>();
    return [=](std::int64_t, std::int64_t e, std::int64_t, V* acc) { acc[0] += conj_if_complex(av[e]) * bv[e]; };
  });
}

/// Y = A X, returning this rank's <w_j, y_j> of every column: fused into the product for real
/// values (the operator returns real dots), a pass of its own for complex ones.
inline std::vector<std::complex<double>> product_dots(const Operator& A, const at::Tensor& x, at::Tensor& y,
                                                      const at::Tensor& w) {
  if (y.is_complex()) {
    (void)A.apply_block(x, y, {});
    return block_cdots(w, y);
  }
  const auto d = A.apply_block(x, y, w);
  return {d.begin(), d.end()};
}

/// z = M⁻¹ r for a block: a diagonal in one broadcast pass, the identity, or a general operator
/// column by column (each application collective, the same columns on every rank).
inline void apply_block_preconditioner(const PreconditionerUse& M, const at::Tensor& r, at::Tensor& z) {
  if (M.diagonal.defined()) {
    at::mul_out(z, r, M.diagonal.unsqueeze(1));
  } else if (M.identity) {
    z.copy_(r);
  } else {
    auto zj = at::empty({r.size(0)}, r.options());
    for (std::int64_t j = 0; j < r.size(1); ++j) {
      M.op->apply(r.select(1, j).contiguous(), zj);
      z.select(1, j).copy_(zj);
    }
  }
}

/// The k columns' stop tests and records (`info.columns`), and which of them still iterate.
class BlockProgress {
 public:
  BlockProgress(const SolveOptions& o, SolveInfo& info, std::int64_t k) : o_(o), info_(info) {
    info.columns.resize(static_cast<std::size_t>(k));
    progress_.reserve(static_cast<std::size_t>(k));
    for (auto& c : info.columns) progress_.emplace_back(o, c);
    active_.assign(static_cast<std::size_t>(k), 1);
  }
  [[nodiscard]] std::int64_t size() const { return static_cast<std::int64_t>(active_.size()); }
  [[nodiscard]] bool active(std::int64_t j) const { return active_[static_cast<std::size_t>(j)] != 0; }
  [[nodiscard]] bool any() const { return std::find(active_.begin(), active_.end(), 1) != active_.end(); }
  Progress& operator[](std::int64_t j) { return progress_[static_cast<std::size_t>(j)]; }
  /// Freezes column j when `stopped` (a record or check that said stop); returns `stopped`.
  bool freeze_if(std::int64_t j, bool stopped) {
    if (stopped) active_[static_cast<std::size_t>(j)] = 0;
    return stopped;
  }
  /// The start from ‖b_j‖² and ‖r_j‖² (reduced): x_j = 0 for b_j = 0, and the iteration-0 record.
  void start(at::Tensor& x, const std::vector<double>& bb, const std::vector<double>& rr) {
    for (std::int64_t j = 0; j < size(); ++j) {
      const auto c = static_cast<std::size_t>(j);
      const double bn = std::sqrt(bb[c]);
      progress_[c].start(bn);
      if (bn == 0.0)
        zero_column(x, j);
      else
        freeze_if(j, progress_[c].record(0, std::sqrt(rr[c])));
    }
  }
  /// b_j = 0: x_j = 0 exactly, whatever x0 was, and the column stops.
  void zero_column(at::Tensor& x, std::int64_t j) {
    const auto c = static_cast<std::size_t>(j);
    x.select(1, j).zero_();
    auto& col = info_.columns[c];
    col.reason = StopReason::zero_rhs;
    col.converged = true;
    col.residual_norm = 0.0;
    if (o_.residual_history) col.residual_history.push_back(0.0);
    active_[c] = 0;
  }
  /// 1 for a column still iterating, 0 for a frozen one (a coefficient mask).
  [[nodiscard]] std::vector<std::complex<double>> mask() const {
    std::vector<std::complex<double>> m(active_.size());
    for (std::size_t c = 0; c < m.size(); ++c) m[c] = active_[c] ? 1.0 : 0.0;
    return m;
  }

 private:
  const SolveOptions& o_;
  SolveInfo& info_;
  std::vector<Progress> progress_;
  std::vector<char> active_;
};

/// The start every block method but CG shares: x = x0 (or 0), r = b − A x, and one all-reduce of
/// ‖r_j‖² and ‖b_j‖², then the columns' starts.
struct BlockIterationZero {
  at::Tensor b, x, r;
  std::vector<double> rnorm;
};

inline BlockIterationZero block_iteration_zero(const Operator& A, const DVector& B, const SolveOptions& o, BlockProgress& progress) {
  BlockIterationZero s;
  s.b = B.local().detach().contiguous();
  s.x = o.x0 ? o.x0->local().detach().to(s.b.scalar_type()).contiguous().clone() : at::zeros_like(s.b);
  s.r = s.b.clone();
  if (o.x0) {
    auto q = at::empty_like(s.b);
    (void)A.apply_block(s.x, q, {});
    s.r.sub_(q);
  }
  auto sums = block_dots(s.r, s.r);
  const auto bb = block_dots(s.b, s.b);
  sums.insert(sums.end(), bb.begin(), bb.end());
  sums = comm::summed(std::move(sums), A.layout()->comm());
  const auto k = s.b.size(1);
  const std::vector<double> rr(sums.begin(), sums.begin() + k), bsq(sums.begin() + k, sums.end());
  progress.start(s.x, bsq, rr);
  s.rnorm.resize(static_cast<std::size_t>(k));
  for (std::size_t c = 0; c < s.rnorm.size(); ++c) s.rnorm[c] = std::sqrt(rr[c]);
  return s;
}

/// A block method that begins with `block_start`: `iterate(started, progress)` while a column is
/// left, the iterations timed, the columns summarized.
template <class Iterate>
SolveResult run_block(const Operator& A, const DVector& B, const SolveOptions& o, Iterate&& iterate) {
  SolveResult result;
  BlockProgress progress(o, result.info, B.local().size(1));
  const auto t0 = comm::wall_time();
  auto s = block_iteration_zero(A, B, o, progress);
  if (progress.any()) iterate(s, progress);
  summarize_columns(result.info);
  result.info.seconds = comm::wall_time() - t0;
  result.x = DVector(A.layout(), s.x);
  return result;
}

}  // namespace einshard::sparse::detail
