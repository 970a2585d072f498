#pragma once
/// @file
/// `Preconditioner::smoothed_aggregation`: einshard's own algebraic multigrid, smoothed aggregation
/// (Vaněk, Mandel and Brezina 1996) with a near-null space, as PETSc's GAMG and PyAMG build it,
/// on any dtype and device that the matrix has.
///
/// Setup, level by level on the host (the first level's rows as stored, the coarser ones float64):
/// the rank's nodes are aggregated (aggregation.hpp, no messages), the tentative interpolation T
/// fits the near-null space on each aggregate, and is smoothed by one damped Jacobi step, P = (I −
/// ω D⁻¹A) T with ω = 4 / (3 λ_max(D⁻¹A)); the coarse operator is the Galerkin product Pᵀ (A P),
/// right for a nonsymmetric A too. The sparse products are Gustavson's, row by row on each rank,
/// in host CSR: W Y (W = A or I − ω D⁻¹A) reads the ghost rows of Y through one halo exchange of
/// Y's rows padded to the widest, and Pᵀ (A P)'s rank-local partial sums travel to the owners of
/// their coarse rows and are summed there (`from_local`). The coarsest level (at most
/// `coarsest_rows` rows) is solved exactly by a dense pseudo-inverse every rank holds.
///
/// The cycle runs in the matrix's dtype on its device: `smoother` sweeps of a Chebyshev polynomial
/// of degree 2 in D⁻¹A on [0.1 λ, 1.1 λ] (GAMG's default smoother), or of l1-Jacobi, before and
/// after each coarse correction. Pre- and post-smoothing are the same polynomial, so the V-cycle
/// is symmetric for symmetric A and CG may use it. A float32 matrix (the single-precision copy of
/// `Precision::mixed`) cycles in float32, where hypre keeps its hierarchy in float64.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/assembly.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/transpose.hpp"
#include "einshard/sparse/preconditioner/aggregation.hpp"
#include "einshard/sparse/preconditioner/amg_options.hpp"
#include "einshard/sparse/preconditioner/chebyshev.hpp"
#include "einshard/sparse/preconditioner/jacobi.hpp"
#include "einshard/sparse/preconditioner/preconditioner.hpp"

namespace einshard::sparse::detail {

/// The default strength threshold θ of the aggregation (aggregation.hpp's `strong_graph`). GAMG and
/// PyAMG keep every connection (θ = 0); 0.05 drops the weakest couplings of a slender body (a
/// cantilever beam's 26 iterations become 20) and of 3-D Poisson (16 → 13), at a few per cent
/// more operator complexity (docs/sparse.md).
inline constexpr double sa_strong_threshold = 0.05;
/// The largest coarsest level that is solved by a dense pseudo-inverse on every rank.
inline constexpr std::int64_t coarsest_rows = 600;
/// The same for a hierarchy that cannot coarsen further (max_levels reached, aggregation stalled):
/// beyond it the setup is an Error rather than a dense matrix the size of the problem.
inline constexpr std::int64_t coarsest_rows_limit = 6000;

/// Rows of a sparse matrix with a `DSparseTensor`'s row partition, in COO: the local row (in the
/// owned order), the global column, the value (float64, host).
struct LocalRowsCoo {
  at::Tensor rows, cols, values;
};

inline LocalRowsCoo local_rows_coo(const DSparseTensor& a) {
  const auto [v, r, c] = csr_to_coo(a.local());
  return {r.cpu(), local_to_global_columns(a).index_select(0, c.cpu()), v.detach().to(at::kCPU, at::kDouble)};
}

/// Sparse rows on the host, in CSR: `ptr` delimits each row's columns and values.
struct HostRows {
  std::vector<std::int64_t> ptr, col;
  std::vector<double> val;

  /// From entries in any order (a counting sort by `key`).
  template <class Key, class Col, class Val>
  HostRows(std::int64_t rows, std::int64_t count, Key key, Col col_of, Val val_of)
      : ptr(static_cast<std::size_t>(rows) + 1, 0), col(static_cast<std::size_t>(count)), val(static_cast<std::size_t>(count)) {
    for (std::int64_t e = 0; e < count; ++e) ++ptr[static_cast<std::size_t>(key(e)) + 1];
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) ptr[r + 1] += ptr[r];
    auto next = ptr;
    for (std::int64_t e = 0; e < count; ++e) {
      const auto slot = static_cast<std::size_t>(next[static_cast<std::size_t>(key(e))]++);
      col[slot] = col_of(e);
      val[slot] = val_of(e);
    }
  }
  HostRows(std::vector<std::int64_t> p, std::vector<std::int64_t> c, std::vector<double> v)
      : ptr(std::move(p)), col(std::move(c)), val(std::move(v)) {}
  [[nodiscard]] std::int64_t rows() const { return static_cast<std::int64_t>(ptr.size()) - 1; }

  /// The entries in COO for `from_local`, row i labelled `label[i]`; the rows are left empty.
  [[nodiscard]] CooEntries take_entries(const std::int64_t* label) {
    std::vector<std::int64_t> row(col.size());
    for (std::size_t i = 0; i + 1 < ptr.size(); ++i)
      std::fill(row.begin() + ptr[i], row.begin() + ptr[i + 1], label[i]);
    CooEntries out{to_tensor(std::move(val)), to_tensor(std::move(row)), to_tensor(std::move(col))};
    ptr.assign(1, 0);
    return out;
  }
};

/// L R row by row (Gustavson), R's columns in [0, r_cols): a dense accumulator over them, the work
/// the product's multiplications; each row's columns in increasing order. L's rows are `lp`, `lc`
/// (any index width) and `weight(i, q)`, the value of L's q-th stored entry, in row i.
template <class Index, class Weight>
HostRows host_product(std::int64_t l_rows, const std::int64_t* lp, const Index* lc, Weight weight, const HostRows& r,
                      std::int64_t r_cols) {
  // The row's sums and the row that last touched each column side by side: one cache line per
  // column read.
  struct Slot {
    double sum;
    std::int64_t row;
  };
  std::vector<Slot> slots(static_cast<std::size_t>(r_cols), Slot{0.0, -1});
  std::vector<std::int64_t> out_ptr(static_cast<std::size_t>(l_rows) + 1, 0), out_cols;
  std::vector<double> out_values;
  const auto* rp = r.ptr.data();
  const auto* rc = r.col.data();
  const auto* rv = r.val.data();
  // Room for every multiplication's entry: an upper bound, reserved, not touched, so the outputs
  // never move while they grow (and pages past the true count are never faulted in).
  std::size_t bound = 0;
  for (std::int64_t q = 0; q < lp[l_rows]; ++q) bound += static_cast<std::size_t>(rp[lc[q] + 1] - rp[lc[q]]);
  out_cols.reserve(bound);
  out_values.reserve(bound);
  auto* slot = slots.data();
  for (std::int64_t i = 0; i < l_rows; ++i) {
    const auto first = out_cols.size();
    for (auto q = lp[i]; q < lp[i + 1]; ++q) {
      const auto k = static_cast<std::int64_t>(lc[q]);
      const double x = weight(i, q);
      for (auto w = rp[k]; w < rp[k + 1]; ++w) {
        auto& s = slot[rc[w]];
        if (s.row != i) {
          s.row = i;
          s.sum = 0.0;
          out_cols.push_back(rc[w]);
        }
        s.sum += x * rv[w];
      }
    }
    // Columns in order: the assembly that takes these rows then finds CSR order already and
    // neither sorts nor sums.
    sort_row(out_cols.begin() + static_cast<std::ptrdiff_t>(first), out_cols.end());
    for (auto e = first; e < out_cols.size(); ++e) out_values.push_back(slot[out_cols[e]].sum);
    out_ptr[static_cast<std::size_t>(i) + 1] = static_cast<std::int64_t>(out_cols.size());
  }
  return {std::move(out_ptr), std::move(out_cols), std::move(out_values)};
}

inline HostRows host_product(const HostRows& l, const HostRows& r, std::int64_t r_cols) {
  return host_product(l.rows(), l.ptr.data(), l.col.data(), [v = l.val.data()](std::int64_t, std::int64_t q) { return v[q]; },
                      r, r_cols);
}

/// A matrix's local rows transposed: each of its local columns (owned, then ghosts) as a row of
/// the local rows that store it, float64.
inline HostRows transposed_rows(const DSparseTensor& m) {
  HostRows out{std::vector<std::int64_t>(static_cast<std::size_t>(m.local().cols) + 1, 0), {}, {}};
  dispatch_real_view(m.local(), [&](const auto& v) {
    const auto count = v.rp[v.rows];
    for (std::int64_t q = 0; q < count; ++q) ++out.ptr[static_cast<std::size_t>(v.ci[q]) + 1];
    for (std::size_t c = 0; c + 1 < out.ptr.size(); ++c) out.ptr[c + 1] += out.ptr[c];
    out.col.resize(static_cast<std::size_t>(count));
    out.val.resize(static_cast<std::size_t>(count));
    auto next = out.ptr;
    for (std::int64_t i = 0; i < v.rows; ++i)
      for (auto q = v.rp[i]; q < v.rp[i + 1]; ++q) {
        const auto slot = static_cast<std::size_t>(next[static_cast<std::size_t>(v.ci[q])]++);
        out.col[slot] = i;
        out.val[slot] = static_cast<double>(v.av[q]);
      }
  });
  return out;
}

/// W Y for Y with A's rows (`y`: Y's owned rows, global columns < `y_cols`) and W with A's stored
/// pattern, read from A's local rows on the host as they are stored: `weight(i, c, a)` is W's entry
/// in row i at A's local column c, where A holds a (A itself: a). Y's rows that A's ghost columns
/// read come by one halo exchange of Y's rows padded to the widest (column and value pairs as
/// float64, exact below 2⁵³), then the product is local. Collective.
template <class Weight>
HostRows product(const DSparseTensor& a, Weight weight, HostRows y, std::int64_t y_cols) {
  const auto n_owned = a.layout()->local_size();
  std::int64_t width = 0;
  for (std::int64_t i = 0; i < n_owned; ++i)
    width = std::max(width, y.ptr[static_cast<std::size_t>(i) + 1] - y.ptr[static_cast<std::size_t>(i)]);
  width = comm::all_reduce_value(width, comm::Reduction::max, a.layout()->comm());
  // Only the rows a neighbour reads are filled: the rest of the block is never written, so its
  // pages are never faulted in (at one rank none is filled).
  const auto stride = 2 * std::max<std::int64_t>(width, 1);
  auto packed = at::empty({n_owned, stride}, at::kDouble);
  auto* pk = packed.data_ptr<double>();
  const auto send = a.halo().send_rows.to(at::kLong).contiguous();
  for (const auto i : std::span(send.data_ptr<std::int64_t>(), static_cast<std::size_t>(send.numel()))) {
    const auto b = y.ptr[static_cast<std::size_t>(i)], e = y.ptr[static_cast<std::size_t>(i) + 1];
    std::fill(pk + i * stride, pk + (i + 1) * stride, -1.0);
    for (auto q = b; q < e; ++q) {
      pk[i * stride + 2 * (q - b)] = static_cast<double>(y.col[static_cast<std::size_t>(q)]);
      pk[i * stride + 2 * (q - b) + 1] = y.val[static_cast<std::size_t>(q)];
    }
  }
  const auto ghosts = a.ghosts_of(packed.to(a.values().device())).to(at::kCPU, at::kDouble).contiguous();
  // Y's rows in A's local column order: the owned ones, then the ghosts that arrived.
  const auto* g = ghosts.data_ptr<double>();
  for (std::int64_t h = 0; h < ghosts.size(0); ++h) {
    for (std::int64_t slot = 0; slot < ghosts.size(1) / 2; ++slot) {
      const double c = g[h * ghosts.size(1) + 2 * slot];
      if (c < 0) break;
      y.col.push_back(static_cast<std::int64_t>(c));
      y.val.push_back(g[h * ghosts.size(1) + 2 * slot + 1]);
    }
    y.ptr.push_back(static_cast<std::int64_t>(y.col.size()));
  }
  HostRows out{{}, {}, {}};
  dispatch_real_view(a.local(), [&](const auto& m) {
    out = host_product(m.rows, m.rp, m.ci, [&](std::int64_t i, std::int64_t q) {
      return weight(i, static_cast<std::int64_t>(m.ci[q]), static_cast<double>(m.av[q]));
    }, y, y_cols);
  });
  return out;
}

/// This rank's aggregates and their members (labelled by global row). Aggregates are rooted on one
/// rank, but a node whose strong neighbours on its rank are all taken, or that has none there (a
/// part of the partition cut off from it), joins the aggregate of its strongest off-rank neighbour
/// when that neighbour's rank aggregated it in the first two passes, so that it still gets a
/// coarse correction and roots no aggregate of its own. One halo exchange of each row's aggregate
/// as (rank, index), then the joining rows and their near-null space rows go to the aggregate's
/// owner through `from_local` (column m of each row a marker, so that a row of zeros still
/// arrives). `storage` holds the arrived rows of B. Collective.
struct AggregatesAcross {
  std::vector<std::vector<Member>> members;
  std::int64_t first = 0, total = 0;  ///< this rank's first aggregate's global index; all ranks' count
};

inline AggregatesAcross aggregate_across(const DSparseTensor& a, const NodeGraph& graph, int functions,
                                         const at::Tensor& b, std::vector<double>& storage) {
  const auto n_owned = a.layout()->local_size();
  const auto m = b.size(1);
  const auto comm = a.layout()->comm();
  const auto owned = a.layout()->owned().contiguous();
  const auto* global = owned.data_ptr<std::int64_t>();
  auto aggregates = aggregate(graph, /*leftovers=*/false);
  constexpr double rank_unit = 4294967296.0;  // 2³²: (rank, index) in one float64, exact below 2⁵³
  auto ids = at::full({n_owned}, -1.0, at::kDouble);
  auto* id = ids.data_ptr<double>();
  for (std::int64_t row = 0; row < n_owned; ++row)
    if (const auto agg = aggregates.of_node[static_cast<std::size_t>(row / functions)]; agg >= 0)
      id[row] = a.layout()->rank() * rank_unit + static_cast<double>(agg);
  const auto ghost_ids = a.ghosts_of(ids.to(a.values().device())).to(at::kCPU, at::kDouble).contiguous();
  const auto* gid = ghost_ids.data_ptr<double>();
  std::vector<char> away(aggregates.of_node.size(), 0);
  for (std::size_t node = 0; node < away.size(); ++node) {
    const auto halo = graph.remote[node];
    away[node] = aggregates.of_node[node] < 0 && halo >= 0 && gid[halo - n_owned] >= 0;
  }
  root_leftovers(graph, aggregates, away);
  const auto counts = comm::all_gather_values(std::span<const std::int64_t>(&aggregates.count, 1), comm);
  std::vector<std::int64_t> first_of(counts.size() + 1, 0);
  for (std::size_t r = 0; r < counts.size(); ++r) first_of[r + 1] = first_of[r] + counts[r];
  AggregatesAcross out{members_of(aggregates, functions, b), first_of[static_cast<std::size_t>(a.layout()->rank())],
                       first_of.back()};
  for (auto& of : out.members)
    for (auto& x : of) x.label = global[x.label];
  const auto* bp = b.data_ptr<double>();
  std::vector<std::int64_t> rows, cols;
  std::vector<double> values;
  for (std::size_t node = 0; node < away.size(); ++node) {
    if (!away[node]) continue;
    const double code = gid[graph.remote[node] - n_owned];
    const auto owner = static_cast<std::size_t>(code / rank_unit);
    const auto target = (first_of[owner] + static_cast<std::int64_t>(code - static_cast<double>(owner) * rank_unit)) * m;
    for (int f = 0; f < functions; ++f) {
      const auto row = static_cast<std::int64_t>(node) * functions + f;
      for (std::int64_t q = 0; q <= m; ++q) {
        rows.push_back(target);
        cols.push_back(global[row] * (m + 1) + q);
        values.push_back(q < m ? bp[row * m + q] : 1.0);
      }
    }
  }
  const auto count = static_cast<std::int64_t>(values.size());
  const auto joined = DSparseTensor::from_local(
      at::tensor(values, at::kDouble).view({count}), at::tensor(rows, at::kLong).view({count}),
      at::tensor(cols, at::kLong).view({count}), {out.total * m, a.rows() * (m + 1)}, a.mesh(),
      {.owned_rows = at::arange(out.first * m, (out.first + aggregates.count) * m, at::kLong)});
  const auto arrived = local_rows_coo(joined);
  // Entries by (aggregate, row, q): one member per arrived row, its B row from the entries.
  const auto n = arrived.values.numel();
  const auto* ar = arrived.rows.data_ptr<std::int64_t>();
  const auto* ac = arrived.cols.data_ptr<std::int64_t>();
  const auto* av = arrived.values.data_ptr<double>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t e = 0; e < n; ++e) order[static_cast<std::size_t>(e)] = e;
  std::sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
    return ar[x] != ar[y] ? ar[x] < ar[y] : ac[x] < ac[y];
  });
  std::vector<std::pair<std::int64_t, std::int64_t>> rows_of;  // (local aggregate, global row)
  for (std::int64_t e = 0; e < n; ++e) {
    const auto k = order[static_cast<std::size_t>(e)];
    const std::pair<std::int64_t, std::int64_t> key{ar[k] / m, ac[k] / (m + 1)};
    if (rows_of.empty() || rows_of.back() != key) rows_of.push_back(key);
  }
  storage.assign(rows_of.size() * static_cast<std::size_t>(m), 0.0);
  std::size_t at_row = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    const auto k = order[static_cast<std::size_t>(e)];
    while (rows_of[at_row] != std::pair<std::int64_t, std::int64_t>{ar[k] / m, ac[k] / (m + 1)}) ++at_row;
    if (const auto q = ac[k] % (m + 1); q < m) storage[at_row * static_cast<std::size_t>(m) + static_cast<std::size_t>(q)] = av[k];
  }
  for (std::size_t r = 0; r < rows_of.size(); ++r)
    out.members[static_cast<std::size_t>(rows_of[r].first)].push_back(
        {rows_of[r].second, storage.data() + r * static_cast<std::size_t>(m)});
  return out;
}

/// The V-cycle of a smoothed-aggregation hierarchy (file comment). Collective construction and
/// application over the matrix's communicator; faults are the same Error on every rank.
class SmoothedAggregationOp final : public PreconditionerOp {
 public:
  SmoothedAggregationOp(const DSparseTensor& a, const AmgOptions& options) : cycles_(options.cycles) {
    const auto comm = a.layout()->comm();
    const auto smoother = options.smoother.value_or(AmgSmoother::chebyshev);
    agreed_setup(comm, [&] { check(a, options, smoother); });
    if (options.near_null_space.defined()) {
      std::array<std::int64_t, 2> columns{options.near_null_space.size(1), -options.near_null_space.size(1)};
      comm::all_reduce_values(std::span<std::int64_t>(columns), comm::Reduction::min, comm);
      if (columns[0] != -columns[1])
        throw Error("smoothed_aggregation preconditioner setup: expected a near_null_space with the same number of "
                    "columns on every rank, found " + std::to_string(columns[0]) + " to " + std::to_string(-columns[1]));
    }
    const auto work = a.values().options().requires_grad(false);
    const double theta = options.strong_threshold.value_or(sa_strong_threshold);
    // The setup reads the first level's rows as they are stored (float32 or float64) where they are
    // on the host, and a float64 copy otherwise; every coarser level is float64 on the host.
    auto host = a.values().device().is_cpu() ? a : a.to(at::kDouble).to(at::Device(at::kCPU));
    int functions = options.functions;
    auto null_space = options.near_null_space.defined() ? options.near_null_space.to(at::kDouble)
                                                        : unknown_constants(a.layout()->local_size(), functions);
    const double nnz0 = static_cast<double>(std::max<std::int64_t>(a.global_nnz(), 1));
    complexity_ = 1.0;
    bool first = true;
    for (;;) {
      Level level{first ? a : host.to(work.dtype().toScalarType()).to(work.device())};
      first = false;
      const bool last_allowed = static_cast<int>(levels_.size()) + 1 >= options.max_levels;
      if (host.rows() <= coarsest_rows || last_allowed) {
        levels_.push_back(std::move(level));
        break;
      }
      const auto n_owned = host.layout()->local_size();
      const auto b = null_space.to(at::kCPU, at::kDouble).contiguous();
      const auto m = b.size(1);
      std::vector<double> joined_b;
      const auto across = aggregate_across(host, strong_graph(host.local(), n_owned, functions, theta), functions, b,
                                           joined_b);
      const std::int64_t mine = static_cast<std::int64_t>(across.members.size()) * m;
      const std::int64_t offset = across.first * m, coarse = across.total * m;
      if (coarse == 0 || coarse >= host.rows()) {  // nothing to aggregate, or no coarsening: stop here
        levels_.push_back(std::move(level));
        break;
      }
      level.build_smoother(smoother, options.sweeps);
      const double omega = 4.0 / (3.0 * level.lambda_max);
      const auto coarse_owned = at::arange(offset, offset + mine, at::kLong);
      const auto& owned = host.layout()->owned();
      const auto t = tentative(across.members, m);
      // T's rows, some of them fitted on another rank, travel to their owners.
      const auto t_arrived = send_to_owners(*host.layout(), {t.values, t.rows, t.cols + offset});
      const auto t_local = host.layout()->local_index(t_arrived.rows).contiguous();
      const auto t_cols = t_arrived.cols.contiguous();
      const auto t_values = t_arrived.values.to(at::kDouble).contiguous();
      const auto* tl = t_local.data_ptr<std::int64_t>();
      const auto* tc = t_cols.data_ptr<std::int64_t>();
      const auto* tv = t_values.data_ptr<double>();
      HostRows t_rows(n_owned, t_values.numel(), [tl](std::int64_t e) { return tl[e]; },
                      [tc](std::int64_t e) { return tc[e]; }, [tv](std::int64_t e) { return tv[e]; });
      // P = (I − ω D⁻¹ A) T in one product: its rows in order and each column once, where T + (−ω
      // D⁻¹)(A T) would be two sets of entries summed by an assembly.
      const auto inverse = inverse_diagonal(LocalRows{host.local(), n_owned, comm}, "smoothed_aggregation")
                               .to(at::kCPU, at::kDouble).contiguous();
      const auto* d = inverse.data_ptr<double>();
      const auto jacobi_step = [d, omega](std::int64_t i, std::int64_t c, double v) {
        return c == i ? 1.0 - omega * d[i] * v : -omega * d[i] * v;
      };
      auto p_rows = product(host, jacobi_step, std::move(t_rows), coarse);
      const auto ap = product(host, [](std::int64_t, std::int64_t, double v) { return v; }, p_rows, coarse);
      const auto owned_ids = owned.contiguous();
      const auto p_entries = p_rows.take_entries(owned_ids.data_ptr<std::int64_t>());
      const auto p = DSparseTensor::from_local(p_entries.values, p_entries.rows, p_entries.cols, {host.rows(), coarse},
                                               host.mesh(), {.owned_rows = owned, .owned_cols = coarse_owned});
      // Pᵀ (A P): each rank multiplies its own rows (Pᵀ's columns); `from_local` routes the partial
      // sums to the owners of Pᵀ's rows and sums them there.
      auto galerkin_rows = host_product(transposed_rows(p), ap, coarse);
      const auto p_columns = local_to_global_columns(p).contiguous();
      const auto galerkin = galerkin_rows.take_entries(p_columns.data_ptr<std::int64_t>());
      // A coarse unknown whose column of T is zero has an empty row and column: a 1 on its
      // diagonal keeps the coarse matrix nonsingular, and P's zero column never reads it.
      const auto dead = at::tensor(t.dead, at::kLong).view({static_cast<std::int64_t>(t.dead.size())}) + offset;
      auto next = DSparseTensor::from_local(at::cat({galerkin.values, at::ones({dead.numel()}, at::kDouble)}),
                                            at::cat({galerkin.rows, dead}), at::cat({galerkin.cols, dead}),
                                            {coarse, coarse}, host.mesh(), {.owned_rows = coarse_owned});
      level.p = p.to(work.dtype().toScalarType()).to(work.device());
      levels_.push_back(std::move(level));
      complexity_ += static_cast<double>(next.global_nnz()) / nnz0;
      host = std::move(next);
      functions = static_cast<int>(m);
      null_space = t.coarse_null_space;
    }
    build_coarsest(host, work);
  }

  void apply(const at::Tensor& r, at::Tensor& z) const override {
    cycle(0, r, z);
    // Further cycles correct z from its residual, held in the finest level's b and x: the first
    // cycle reads the caller's r and z there, so nothing else uses them.
    const auto& fine = levels_[0];
    for (int c = 1; c < cycles_; ++c) {
      fine.a.apply(z, fine.b, {});
      fine.b.neg_().add_(r);
      cycle(0, fine.b, fine.x);
      z.add_(fine.x);
    }
  }
  [[nodiscard]] std::string name() const override { return "smoothed_aggregation"; }
  [[nodiscard]] std::pair<int, double> hierarchy() const override {
    return {static_cast<int>(levels_.size()), complexity_};
  }

 private:
  struct Level {
    explicit Level(DSparseTensor matrix) : a(std::move(matrix)) {
      const auto n = a.layout()->local_size();
      const auto o = a.values().options().requires_grad(false);
      b = at::zeros({n}, o);
      x = at::zeros({n}, o);
      res = at::empty({n}, o);
      tmp = at::empty({n}, o);
    }
    void build_smoother(AmgSmoother kind, int sweeps_) {
      const LocalRows rows{a.local(), a.layout()->local_size(), a.layout()->comm()};
      PreconditionerOptions o;
      o.chebyshev_degree = 2 * sweeps_;
      o.chebyshev_lower = 0.1;
      auto cheb = std::make_unique<ChebyshevOp>(rows, [m = a](const at::Tensor& v, at::Tensor& y) { m.apply(v, y, {}); }, o);
      lambda_max = cheb->lambda_max();
      if (kind == AmgSmoother::chebyshev) {
        chebyshev = cheb.get();
        smoother = std::move(cheb);
        sweeps = 1;
      } else {
        smoother = std::make_unique<DiagonalOp>(inverse_l1_norms(rows), "l1_jacobi", rows.comm);
        sweeps = sweeps_;
      }
    }
    /// x = S b from x = 0 (`zero`), else x += S (b − A x), `sweeps` times.
    void smooth(const at::Tensor& rhs, at::Tensor& out, bool zero) const {
      for (int s = 0; s < sweeps; ++s) {
        if (zero && s == 0) {
          smoother->apply(rhs, out);
          continue;
        }
        if (chebyshev) {  // the residual and the sum inside its passes
          chebyshev->smooth(rhs, out);
          continue;
        }
        a.apply(out, res, {});
        res.neg_().add_(rhs);
        smoother->apply(res, tmp);
        out.add_(tmp);
      }
    }
    DSparseTensor a;
    std::optional<DSparseTensor> p;  // to the next level; none on the coarsest
    std::unique_ptr<PreconditionerOp> smoother;
    const ChebyshevOp* chebyshev = nullptr;  // the smoother, when it is the polynomial
    int sweeps = 1;
    double lambda_max = 1.0;
    mutable at::Tensor b, x, res, tmp;
  };

  static at::Tensor unknown_constants(std::int64_t n, int functions) {
    auto z = at::zeros({n, functions}, at::kDouble);
    for (int f = 0; f < functions; ++f) z.slice(0, f, n, functions).select(1, f).fill_(1.0);
    return z;
  }

  static void check(const DSparseTensor& a, const AmgOptions& o, AmgSmoother smoother) {
    const std::string who = "smoothed_aggregation preconditioner setup: ";
    if (a.rows() != a.cols())
      throw Error(who + "expected a square matrix, found " + std::to_string(a.rows()) + "x" + std::to_string(a.cols()));
    if (a.dtype() != at::kDouble && a.dtype() != at::kFloat)
      throw Error(who + "expected float32 or float64 values, found " + c10::toString(a.dtype()));
    if (smoother != AmgSmoother::chebyshev && smoother != AmgSmoother::l1_jacobi)
      throw Error(who + "expected the chebyshev or l1_jacobi smoother (hypre's Gauss–Seidel smoothers belong to "
                  "Preconditioner::amg), found another AmgSmoother");
    const double theta = o.strong_threshold.value_or(sa_strong_threshold);
    if (!(theta >= 0 && theta < 1) || o.sweeps < 1 || o.max_levels < 1 || o.cycles < 1)
      throw Error(who + "expected 0 ≤ strong_threshold < 1, sweeps ≥ 1, max_levels ≥ 1 and cycles ≥ 1, found " +
                  std::to_string(theta) + ", " + std::to_string(o.sweeps) + ", " + std::to_string(o.max_levels) +
                  " and " + std::to_string(o.cycles));
    if (o.functions < 1 || a.rows() % o.functions != 0)
      throw Error(who + "expected functions ≥ 1 dividing the matrix's rows, found functions = " +
                  std::to_string(o.functions) + " with " + std::to_string(a.rows()) + " rows");
    if (o.functions > 1)
      if (auto broken = broken_node(a.layout()->owned(), o.functions); !broken.empty())
        throw Error(who + "expected every rank to own whole nodes of " + std::to_string(o.functions) +
                    " rows (PartitionOptions{.functions}), found " + broken);
    if (const auto& z = o.near_null_space; z.defined() &&
        (z.dim() != 2 || z.size(0) != a.layout()->local_size() || z.size(1) < 1 || !at::isFloatingType(z.scalar_type())))
      throw Error(who + "expected near_null_space of shape (owned rows, m) = (" +
                  std::to_string(a.layout()->local_size()) + ", m ≥ 1), real floating point, found shape " +
                  c10::str(z.sizes()) + ", " + c10::toString(z.scalar_type()));
    nonzero_diagonal(LocalRows{a.local(), a.layout()->local_size(), a.layout()->comm()}, "smoothed_aggregation");
  }

  /// The dense pseudo-inverse of the coarsest matrix, its rows in rank order, on every rank.
  void build_coarsest(const DSparseTensor& host, const at::TensorOptions& work) {
    const auto comm = host.layout()->comm();
    const auto rows = host.rows();
    if (rows > coarsest_rows_limit)
      throw Error("smoothed_aggregation preconditioner setup: expected a coarsest level of at most " +
                  std::to_string(coarsest_rows_limit) + " rows, found " + std::to_string(rows) +
                  " (max_levels too small, or nodes without strong connections: lower strong_threshold)");
    const std::int64_t mine = host.layout()->local_size();
    coarse_counts_ = comm::all_gather_values(std::span<const std::int64_t>(&mine, 1), comm);
    const auto order = comm::all_gather(host.layout()->owned(), 0, coarse_counts_, comm);
    const auto dense = gather_dense(host, -1).to(at::kDouble).index_select(0, order).index_select(1, order);
    coarse_inverse_ = at::linalg_pinv(dense).to(work.dtype()).to(work.device());
    coarse_offset_ = 0;
    for (int r = 0; r < host.layout()->rank(); ++r) coarse_offset_ += coarse_counts_[static_cast<std::size_t>(r)];
  }

  void coarse_solve(const at::Tensor& b, at::Tensor& x) const {
    const auto comm = levels_.back().a.layout()->comm();
    const auto all = comm::all_gather(b.cpu(), 0, coarse_counts_, comm).to(coarse_inverse_.device());
    x.copy_(at::mv(coarse_inverse_, all).narrow(0, coarse_offset_, b.size(0)));
  }

  void cycle(std::size_t l, const at::Tensor& b, at::Tensor& x) const {
    const auto& level = levels_[l];
    if (l + 1 == levels_.size()) {
      coarse_solve(b, x);
      return;
    }
    auto& next = levels_[l + 1];
    level.smooth(b, x, /*zero=*/true);
    level.a.apply(x, level.res, {});
    at::sub_out(level.res, b, level.res);
    level.p->apply_adjoint(level.res, next.b);
    cycle(l + 1, next.b, next.x);
    level.p->apply_update(next.x, x, 1.0, level.tmp);  // x += P x_coarse in the product's pass
    level.smooth(b, x, /*zero=*/false);
  }

  std::vector<Level> levels_;
  at::Tensor coarse_inverse_;
  std::vector<std::int64_t> coarse_counts_;
  std::int64_t coarse_offset_ = 0;
  double complexity_ = 1.0;
  int cycles_ = 1;
};

}  // namespace einshard::sparse::detail
