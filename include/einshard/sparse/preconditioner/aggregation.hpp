#pragma once
/// @file
/// The rank-local planning of smoothed aggregation (smoothed_aggregation.hpp), with no
/// communication: the strength graph of a rank's nodes, their aggregates, and the tentative
/// interpolation that reproduces a near-null space on each aggregate exactly.
///
/// Aggregates never cross ranks (uncoupled aggregation, as PETSc's GAMG and ML do by default):
/// every coarse unknown then belongs to the rank that owns its fine rows, so the tentative
/// interpolation needs no message, and only the smoothed interpolation's products communicate.

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "einshard/sparse/matrix/csr.hpp"

namespace einshard::sparse::detail {

/// Where a rank's owned rows break nodes: empty when every node it holds (rows functions·k …
/// functions·k + functions − 1 of the matrix, node k) is whole and in consecutive owned rows, as
/// nodal coarsening and aggregation read them; else the first owned row that breaks one. `owned`:
/// the owned rows' global indices, ascending.
inline std::string broken_node(const at::Tensor& owned, int functions) {
  const auto n = owned.numel();
  const auto* g = owned.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto first = i - i % functions;  // the owned row that should hold this node's unknown 0
    if (g[first] % functions == 0 && g[i] == g[first] + i % functions && first + functions <= n) continue;
    return "owned row " + std::to_string(i) + " (global row " + std::to_string(g[i]) + ", unknown " +
           std::to_string(g[i] % functions) + " of node " + std::to_string(g[i] / functions) +
           ") is not in a whole node of " + std::to_string(functions) + " consecutive owned rows";
  }
  return {};
}

/// A graph over a rank's nodes in CSR form, without self loops.
struct NodeGraph {
  std::vector<std::int64_t> rowptr{0};
  std::vector<std::int64_t> col;
  /// Per node, the halo column (local index ≥ the owned rows) of its largest coupling to another
  /// rank's unknowns, −1 for none: where a node without neighbours on its rank is aggregated.
  std::vector<std::int64_t> remote;
  [[nodiscard]] std::int64_t nodes() const { return static_cast<std::int64_t>(rowptr.size()) - 1; }
};

/// The strong connections among this rank's nodes (owned columns only: aggregates are rooted on
/// one rank), and each node's largest coupling to other ranks (`remote`). Node I holds rows I·functions … I·functions + functions − 1 of `a` (its owned rows, local
/// columns); s_IJ = ‖A_IJ‖_F, the Frobenius norm of the block, and I–J is strong when
/// s_IJ ≥ θ √(s_II s_JJ) (the symmetric strength of Vaněk, Mandel and Brezina; θ = 0 keeps every
/// stored block that is not zero). Nonsymmetric A: s_IJ and s_JI are both tested, so the graph is
/// symmetric.
template <class Index, class Value>
NodeGraph strong_graph(const std::int64_t* rp, const Index* ci, const Value* av, std::int64_t n_owned, int functions,
                       double theta) {
  const auto square = [av](std::int64_t k) { return static_cast<double>(av[k]) * static_cast<double>(av[k]); };
  const auto nodes = static_cast<std::size_t>(n_owned / functions);
  const auto rows_of = [&](std::size_t I) {
    return std::pair{static_cast<std::int64_t>(I) * functions, static_cast<std::int64_t>(I + 1) * functions};
  };
  const auto node_of = [functions](std::int64_t c) { return static_cast<std::size_t>(c / functions); };
  NodeGraph g;
  g.remote.assign(nodes, -1);
  // The diagonal blocks' norms², and each node's largest halo coupling (a halo column's |a|² summed
  // over the node's rows).
  std::vector<double> diag(nodes, 0.0);
  std::vector<std::pair<std::int64_t, double>> halo;
  for (std::size_t I = 0; I < nodes; ++I) {
    halo.clear();
    for (auto [i, end] = rows_of(I); i < end; ++i)
      for (auto k = rp[i]; k < rp[i + 1]; ++k) {
        if (ci[k] < n_owned) {
          if (node_of(ci[k]) == I) diag[I] += square(k);
          continue;
        }
        auto it = std::find_if(halo.begin(), halo.end(), [&](const auto& h) { return h.first == ci[k]; });
        if (it == halo.end()) halo.emplace_back(ci[k], square(k));
        else it->second += square(k);
      }
    double largest = 0;
    for (const auto& [c, v] : halo)
      if (v > largest) {
        largest = v;
        g.remote[I] = c;
      }
  }
  // Strong both ways: s_IJ² ≥ θ⁴ s_II s_JJ in squared norms, tested on each stored direction, and
  // the graph symmetrized. One pass over the rows writes each node's strong neighbours (sorted);
  // when every edge is found from both ends (A symmetric in pattern and in the norms) that is the
  // graph, otherwise the reverse edges are added and repeats dropped. The memory a graph of a
  // million nodes touches for the first time, not the arithmetic, is this function's cost.
  const double t4 = theta * theta * theta * theta;
  std::vector<double> scratch(nodes, 0.0);  // block norms² of node I's row, indexed by J
  std::vector<std::size_t> touched;
  std::vector<std::int64_t> fwd_ptr(nodes + 1, 0), fwd;
  fwd.reserve(static_cast<std::size_t>(rp[n_owned / functions * functions]));  // reserved, not touched
  for (std::size_t I = 0; I < nodes; ++I) {
    touched.clear();
    for (auto [i, end] = rows_of(I); i < end; ++i)
      for (auto k = rp[i]; k < rp[i + 1]; ++k) {
        if (ci[k] >= n_owned) continue;
        const auto J = node_of(ci[k]);
        if (J == I) continue;
        if (scratch[J] == 0.0) touched.push_back(J);
        scratch[J] += square(k) + 1e-300;  // a stored zero still marks J as touched
      }
    const auto first = fwd.size();
    for (const auto J : touched) {
      const double sum = scratch[J];
      scratch[J] = 0.0;
      if (sum > 1e-280 && sum * sum >= t4 * diag[I] * diag[J]) fwd.push_back(static_cast<std::int64_t>(J));
    }
    sort_row(fwd.begin() + static_cast<std::ptrdiff_t>(first), fwd.end());
    fwd_ptr[I + 1] = static_cast<std::int64_t>(fwd.size());
  }
  const auto has_edge = [&](std::size_t I, std::int64_t J) {
    return std::binary_search(fwd.begin() + fwd_ptr[I], fwd.begin() + fwd_ptr[I + 1], J);
  };
  bool symmetric = true;
  for (std::size_t I = 0; I < nodes && symmetric; ++I)
    for (auto q = fwd_ptr[I]; q < fwd_ptr[I + 1] && symmetric; ++q)
      symmetric = has_edge(static_cast<std::size_t>(fwd[static_cast<std::size_t>(q)]), static_cast<std::int64_t>(I));
  if (symmetric) {
    g.rowptr = std::move(fwd_ptr);
    g.col = std::move(fwd);
    return g;
  }
  // The union with the reverse edges: each node's list its own edges, then the edges that name
  // it, sorted and compacted in place.
  std::vector<std::int64_t> start(nodes + 1, 0);
  for (std::size_t I = 0; I < nodes; ++I)
    for (auto q = fwd_ptr[I]; q < fwd_ptr[I + 1]; ++q) {
      ++start[I + 1];
      ++start[static_cast<std::size_t>(fwd[static_cast<std::size_t>(q)]) + 1];
    }
  for (std::size_t I = 0; I < nodes; ++I) start[I + 1] += start[I];
  g.col.resize(static_cast<std::size_t>(start[nodes]));
  for (std::size_t I = 0; I < nodes; ++I)  // start[I] runs ahead as node I's cursor
    for (auto q = fwd_ptr[I]; q < fwd_ptr[I + 1]; ++q) {
      const auto J = static_cast<std::size_t>(fwd[static_cast<std::size_t>(q)]);
      g.col[static_cast<std::size_t>(start[I]++)] = static_cast<std::int64_t>(J);
      g.col[static_cast<std::size_t>(start[J]++)] = static_cast<std::int64_t>(I);
    }
  g.rowptr.assign(nodes + 1, 0);
  std::size_t kept = 0, from = 0;  // kept ≤ from: the compacted lists trail the placed ones
  for (std::size_t I = 0; I < nodes; ++I) {
    const auto end = static_cast<std::size_t>(start[I]);
    sort_row(g.col.begin() + static_cast<std::ptrdiff_t>(from), g.col.begin() + static_cast<std::ptrdiff_t>(end));
    const auto first = kept;
    for (; from < end; ++from)
      if (kept == first || g.col[kept - 1] != g.col[from]) g.col[kept++] = g.col[from];
    g.rowptr[I + 1] = static_cast<std::int64_t>(kept);
  }
  g.col.resize(kept);
  return g;
}

inline NodeGraph strong_graph(const Csr& a, std::int64_t n_owned, int functions, double theta) {
  NodeGraph g;
  // The indices and values in their own widths: a widened copy would be one more array of the
  // matrix's size touched for the first time.
  dispatch_real_view(a, [&](const auto& m) { g = strong_graph(m.rp, m.ci, m.av, n_owned, functions, theta); });
  return g;
}

/// The aggregate of each node (−1: a node without strong neighbours, left out of the coarse space,
/// as a Dirichlet row is: the smoother solves it alone) and how many aggregates there are.
struct Aggregates {
  std::vector<std::int64_t> of_node;
  std::int64_t count = 0;
};

/// The third pass of `aggregate`: each node still free with a neighbour, unless `away` (it joins
/// another rank's aggregate), roots an aggregate of itself and its free neighbours.
inline void root_leftovers(const NodeGraph& g, Aggregates& out, const std::vector<char>& away) {
  auto& agg = out.of_node;
  for (std::int64_t i = 0; i < g.nodes(); ++i) {
    const auto b = g.col.begin() + g.rowptr[static_cast<std::size_t>(i)];
    const auto e = g.col.begin() + g.rowptr[static_cast<std::size_t>(i) + 1];
    if (b == e || agg[static_cast<std::size_t>(i)] >= 0 || away[static_cast<std::size_t>(i)]) continue;
    agg[static_cast<std::size_t>(i)] = out.count;
    for (auto it = b; it != e; ++it)
      if (agg[static_cast<std::size_t>(*it)] < 0 && !away[static_cast<std::size_t>(*it)])
        agg[static_cast<std::size_t>(*it)] = out.count;
    ++out.count;
  }
}

/// Greedy aggregation in three passes (Vaněk, Mandel and Brezina 1996): a node whose strong
/// neighbours are all free roots an aggregate of itself and them; a node still free joins the
/// aggregate of a neighbour; what is left roots aggregates of itself and its free neighbours.
/// Deterministic: nodes in order. `leftovers` false stops after the second pass: the distributed
/// setup runs the third (`root_leftovers`) once it knows which nodes join other ranks' aggregates.
inline Aggregates aggregate(const NodeGraph& g, bool leftovers = true) {
  const auto n = g.nodes();
  Aggregates out{std::vector<std::int64_t>(static_cast<std::size_t>(n), -1), 0};
  auto& agg = out.of_node;
  const auto neighbours = [&](std::int64_t i) {
    return std::pair{g.col.begin() + g.rowptr[static_cast<std::size_t>(i)],
                     g.col.begin() + g.rowptr[static_cast<std::size_t>(i) + 1]};
  };
  for (std::int64_t i = 0; i < n; ++i) {
    const auto [b, e] = neighbours(i);
    if (b == e || agg[static_cast<std::size_t>(i)] >= 0) continue;
    if (std::any_of(b, e, [&](std::int64_t j) { return agg[static_cast<std::size_t>(j)] >= 0; })) continue;
    agg[static_cast<std::size_t>(i)] = out.count;
    for (auto it = b; it != e; ++it) agg[static_cast<std::size_t>(*it)] = out.count;
    ++out.count;
  }
  // Pass two reads the first pass's aggregates only, so a node does not join one that grew in it.
  const auto first = agg;
  for (std::int64_t i = 0; i < n; ++i) {
    if (agg[static_cast<std::size_t>(i)] >= 0) continue;
    const auto [b, e] = neighbours(i);
    for (auto it = b; it != e; ++it)
      if (first[static_cast<std::size_t>(*it)] >= 0) {
        agg[static_cast<std::size_t>(i)] = first[static_cast<std::size_t>(*it)];
        break;
      }
  }
  if (leftovers) root_leftovers(g, out, std::vector<char>(static_cast<std::size_t>(n), 0));
  return out;
}

/// The tentative interpolation of one rank's aggregates: for each aggregate, Q R = the rows of the
/// near-null space B on its unknowns (thin QR, modified Gram–Schmidt twice), T = Q on those rows
/// and the coarse near-null space R, so that T B_c = B on every aggregated row. A column of B that
/// the aggregate cannot tell from the ones before it (fewer unknowns than columns, or dependent
/// rows) is a zero column of T: its coarse unknown is `dead` and the Galerkin operator gets a 1 on
/// its diagonal so that the coarse matrix stays nonsingular.
struct Tentative {
  at::Tensor rows, cols, values;  ///< T in COO: a member's label, local coarse column (aggregate·m + j)
  at::Tensor coarse_null_space;   ///< (aggregates·m, m): R of each aggregate, row-major by aggregate
  std::vector<std::int64_t> dead; ///< local coarse columns of T that are zero
};

/// One unknown of an aggregate: a label for its row of T (a global or a local row number) and its
/// row of B (m values).
struct Member {
  std::int64_t label;
  const double* b;
};

inline Tentative tentative(const std::vector<std::vector<Member>>& members, std::int64_t m) {
  const auto aggregates = static_cast<std::int64_t>(members.size());
  std::vector<std::int64_t> rows, cols;
  std::vector<double> values;
  auto coarse = at::zeros({aggregates * m, m}, at::kDouble);
  auto* r = coarse.data_ptr<double>();
  Tentative out;
  std::vector<double> q;
  for (std::int64_t a = 0; a < aggregates; ++a) {
    const auto& of = members[static_cast<std::size_t>(a)];
    const auto s = static_cast<std::int64_t>(of.size());
    q.assign(static_cast<std::size_t>(s * m), 0.0);  // column-major s × m
    for (std::int64_t j = 0; j < m; ++j) {
      double* v = q.data() + j * s;
      double norm0 = 0;
      for (std::int64_t i = 0; i < s; ++i) {
        v[i] = of[static_cast<std::size_t>(i)].b[j];
        norm0 += v[i] * v[i];
      }
      double* rj = r + (a * m) * m + j;  // column j of this aggregate's R, stride m
      for (int pass = 0; pass < 2; ++pass)
        for (std::int64_t k = 0; k < j; ++k) {
          const double* u = q.data() + k * s;
          double d = 0;
          for (std::int64_t i = 0; i < s; ++i) d += u[i] * v[i];
          for (std::int64_t i = 0; i < s; ++i) v[i] -= d * u[i];
          rj[k * m] += d;
        }
      double norm = 0;
      for (std::int64_t i = 0; i < s; ++i) norm += v[i] * v[i];
      norm = std::sqrt(norm);
      if (!(norm > 1e-10 * std::sqrt(norm0)) || norm == 0) {
        std::fill(v, v + s, 0.0);
        out.dead.push_back(a * m + j);
        continue;
      }
      rj[j * m] = norm;
      for (std::int64_t i = 0; i < s; ++i) {
        v[i] /= norm;
        rows.push_back(of[static_cast<std::size_t>(i)].label);
        cols.push_back(a * m + j);
        values.push_back(v[i]);
      }
    }
  }
  out.rows = to_tensor(std::move(rows));
  out.cols = to_tensor(std::move(cols));
  out.values = to_tensor(std::move(values));
  out.coarse_null_space = coarse;
  return out;
}

/// The members of each aggregate of a rank's nodes, labelled by local row, in row order; `b`:
/// (rows, m), contiguous float64, outliving the result.
inline std::vector<std::vector<Member>> members_of(const Aggregates& aggregates, int functions, const at::Tensor& b) {
  const auto m = b.size(1);
  const auto* bp = b.data_ptr<double>();
  std::vector<std::vector<Member>> members(static_cast<std::size_t>(aggregates.count));
  for (std::size_t I = 0; I < aggregates.of_node.size(); ++I)
    if (const auto a = aggregates.of_node[I]; a >= 0)
      for (int f = 0; f < functions; ++f) {
        const auto row = static_cast<std::int64_t>(I) * functions + f;
        members[static_cast<std::size_t>(a)].push_back({row, bp + row * m});
      }
  return members;
}

}  // namespace einshard::sparse::detail
