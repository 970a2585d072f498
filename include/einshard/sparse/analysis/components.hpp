#pragma once
/// @file
/// Connected components of the graph of a `DSparseTensor`'s sparsity pattern, by FastSV (Zhang,
/// Azad and Hu, 2020): Shiloach–Vishkin style hooking plus pointer jumping, so the number of rounds
/// grows like log N rather than like the diameter (min-label propagation needs a round per hop).
///
/// The pattern is symmetrised first: a stored A_ij joins i and j even when A_ji is not stored (the
/// original propagates labels owner -> ghost only and splits such components). The algorithm runs
/// on the simple block layout, whatever the matrix's partition, so the owner of any vertex id is
/// arithmetic and a parent lookup is one all-to-all pair, not a directory query.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/sparse_exchange.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/halo.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/matrix/transpose.hpp"

namespace einshard::sparse {

/// The result of `DSparseTensor::connected_components`.
struct Components {
  /// int64, partitioned like the matrix's rows: SciPy's canonical labels (the component holding
  /// vertex 0 is 0, the one holding the smallest vertex outside it is 1, and so on).
  DVector labels;
  std::int64_t count = 0;
  /// FastSV rounds, the last of which changed nothing (the proof of convergence).
  int rounds = 0;
};

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

/// The symmetrised pattern without self-loops, its rows on the simple block layout: vertex
/// `first + i` has the neighbours nbr[rowptr[i], rowptr[i+1]) in halo-local numbering (owned
/// vertices first, then the ghost slots of `exchange`).
struct BlockGraph {
  std::shared_ptr<const RowLayout> layout;
  std::shared_ptr<HaloExchange> exchange;
  std::vector<std::int64_t> rowptr, nbr;
};

inline BlockGraph block_graph(const DSparseTensor& a) {
  const auto& layout = *a.layout();
  const MPI_Comm comm = layout.comm();
  const int p = layout.size();
  const auto n = a.rows();
  const auto entries = global_entries(a);
  const auto gr = to_vector(entries.rows);
  const auto gc = to_vector(entries.cols);
  // Both directions of every edge go to the block owner of their first vertex.
  std::vector<std::pair<int, std::pair<std::int64_t, std::int64_t>>> halves;
  for (std::size_t k = 0; k < gr.size(); ++k) {
    if (gr[k] == gc[k]) continue;
    halves.push_back({block_owner(gr[k], n, p), {gr[k], gc[k]}});
    halves.push_back({block_owner(gc[k], n, p), {gc[k], gr[k]}});
  }
  std::sort(halves.begin(), halves.end());
  std::vector<comm::Parcel<std::int64_t>> send;
  for (const auto& [d, e] : halves) {
    if (send.empty() || send.back().peer != d) send.push_back({d, {}});
    send.back().values.push_back(e.first);
    send.back().values.push_back(e.second);
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> edges;
  for (const auto& g : comm::sparse_exchange(send, comm))
    for (std::size_t k = 0; k < g.values.size(); k += 2) edges.emplace_back(g.values[k], g.values[k + 1]);
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());

  BlockGraph out;
  out.layout = RowLayout::simple(n, comm);
  const auto first = block_first(n, p, layout.rank());
  const auto rows = out.layout->local_size();
  std::vector<std::int64_t> ghosts;
  for (const auto& e : edges)
    if (e.second < first || e.second >= first + rows) ghosts.push_back(e.second);
  std::sort(ghosts.begin(), ghosts.end());
  ghosts.erase(std::unique(ghosts.begin(), ghosts.end()), ghosts.end());
  const auto plan = HaloPlan::build(out.layout, at::tensor(ghosts, at::kLong).view({static_cast<std::int64_t>(ghosts.size())}));
  out.exchange = std::make_shared<HaloExchange>(plan);
  // Ghost slot of each ghost id (the plan groups ghosts by owner, which for blocks is id order).
  const auto slots = to_vector(plan->ghosts);
  std::vector<std::int64_t> sorted_slot(slots.size());
  for (std::size_t s = 0; s < slots.size(); ++s)
    sorted_slot[static_cast<std::size_t>(std::lower_bound(ghosts.begin(), ghosts.end(), slots[s]) - ghosts.begin())] =
        static_cast<std::int64_t>(s);
  out.rowptr.assign(static_cast<std::size_t>(rows) + 1, 0);
  out.nbr.reserve(edges.size());
  for (const auto& [u, w] : edges) {
    ++out.rowptr[static_cast<std::size_t>(u - first) + 1];
    if (w >= first && w < first + rows)
      out.nbr.push_back(w - first);
    else
      out.nbr.push_back(rows + sorted_slot[static_cast<std::size_t>(
                                   std::lower_bound(ghosts.begin(), ghosts.end(), w) - ghosts.begin())]);
  }
  for (std::size_t i = 1; i < out.rowptr.size(); ++i) out.rowptr[i] += out.rowptr[i - 1];
  return out;
}

/// Requests to the block owners of global ids: each id is sent to block_owner(id) and `answer`
/// turns (id, payload) into the reply; the replies come back in the order of `ids`. With
/// `reply` false nothing comes back (a write).
template <class Answer>
std::vector<std::int64_t> block_request(const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>* payload,
                                        std::int64_t n, MPI_Comm comm, bool reply, Answer&& answer) {
  const int p = comm::size_of(comm);
  const std::size_t width = payload ? 2 : 1;
  std::vector<std::size_t> order(ids.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return block_owner(ids[a], n, p) < block_owner(ids[b], n, p);
  });
  std::vector<comm::Parcel<std::int64_t>> ask;
  for (auto k : order) {
    const int d = block_owner(ids[k], n, p);
    if (ask.empty() || ask.back().peer != d) ask.push_back({d, {}});
    ask.back().values.push_back(ids[k]);
    if (payload) ask.back().values.push_back((*payload)[k]);
  }
  std::vector<comm::Parcel<std::int64_t>> told;
  for (const auto& a : comm::sparse_exchange(ask, comm)) {
    auto& t = told.emplace_back(comm::Parcel<std::int64_t>{a.peer, {}});
    for (std::size_t k = 0; k < a.values.size(); k += width) {
      const auto value = answer(a.values[k], payload ? a.values[k + 1] : 0);
      if (reply) t.values.push_back(value);
    }
  }
  if (!reply) return {};
  // Each block owner answers every parcel, in its order: the answers, ascending by block owner,
  // line up with the parcels asked.
  const auto back = comm::sparse_exchange(told, comm);
  std::vector<std::int64_t> out(ids.size());
  std::size_t next = 0;
  for (std::size_t j = 0; j < ask.size(); ++j)
    for (auto value : back.at(j).values) out[order[next++]] = value;
  return out;
}

/// FastSV on the block graph: `f` (parents, global ids, f[v] <= v and in v's component) of the
/// owned vertices. Each round, with gf = f[f]: stochastic hooking f[f[u]] <- min gf[v] over the
/// neighbours v of u, aggressive hooking f[u] <- the same minimum, shortcutting f[u] <- gf[u].
/// A round that changes no f ends it: then every f[u] is a root (f[u] <= gf[u] = f[f[u]]) and
/// equal to all its neighbours' (f[u] <= f[v] both ways), so each component is one star rooted at
/// its smallest vertex.
inline int fastsv(const BlockGraph& g, std::vector<std::int64_t>& f) {
  const auto& layout = *g.layout;
  const auto n = layout.global_size();
  const MPI_Comm comm = layout.comm();
  const auto first = block_first(n, layout.size(), layout.rank());
  const auto rows = static_cast<std::size_t>(layout.local_size());
  f.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) f[i] = first + static_cast<std::int64_t>(i);
  const auto ghosts = g.exchange->plan().ghost_count();
  auto gf_all = at::empty({static_cast<std::int64_t>(rows) + ghosts}, at::kLong);
  auto* gfp = gf_all.data_ptr<std::int64_t>();
  const auto gf_own = gf_all.narrow(0, 0, static_cast<std::int64_t>(rows));
  auto gf_ghost = gf_all.narrow(0, static_cast<std::int64_t>(rows), ghosts);
  std::vector<std::int64_t> hook_to, hook_val;
  // Every round but the last lowers some parent, so more than n + 1 rounds is a broken invariant.
  const auto cap = n + 1;
  for (int round = 1;; ++round) {
    const auto gf = block_request(f, nullptr, n, comm, true,
                                  [&](std::int64_t id, std::int64_t) { return f[static_cast<std::size_t>(id - first)]; });
    std::copy(gf.begin(), gf.end(), gfp);
    g.exchange->start(gf_own, gf_ghost);
    g.exchange->finish();
    auto next = f;
    hook_to.clear();
    hook_val.clear();
    for (std::size_t u = 0; u < rows; ++u) {
      std::int64_t m = gfp[u];
      for (auto k = g.rowptr[u]; k < g.rowptr[u + 1]; ++k) m = std::min(m, gfp[g.nbr[static_cast<std::size_t>(k)]]);
      next[u] = std::min({next[u], m, gfp[u]});
      if (m < gfp[u]) {
        hook_to.push_back(f[u]);
        hook_val.push_back(m);
      }
    }
    block_request(hook_to, &hook_val, n, comm, false, [&](std::int64_t id, std::int64_t value) {
      auto& slot = next[static_cast<std::size_t>(id - first)];
      slot = std::min(slot, value);
      return std::int64_t{0};
    });
    const bool changed = comm::any_rank(next != f, comm);
    f.swap(next);
    if (!changed) return round;
    if (round > cap)
      throw Error("DSparseTensor::connected_components: expected FastSV to converge in " + std::to_string(cap) +
                  " rounds, found parents still changing (an internal invariant is broken)");
  }
}

}  // namespace detail

EINSHARD_INLINE Components DSparseTensor::connected_components() const {
  const auto g = detail::block_graph(*this);
  std::vector<std::int64_t> f;
  const int rounds = detail::fastsv(g, f);
  const MPI_Comm comm = layout_->comm();
  const auto first = detail::block_first(n_, layout_->size(), layout_->rank());
  // Canonical labels: roots (f[v] == v) numbered in id order, which is block order.
  std::int64_t roots = 0;
  for (std::size_t i = 0; i < f.size(); ++i) roots += f[i] == first + static_cast<std::int64_t>(i) ? 1 : 0;
  std::int64_t offset = comm::exclusive_sum(roots, comm);
  const auto count = comm::all_reduce_value(roots, comm::Reduction::sum, comm);
  std::vector<std::int64_t> root_label(f.size(), -1);
  for (std::size_t i = 0; i < f.size(); ++i)
    if (f[i] == first + static_cast<std::int64_t>(i)) root_label[i] = offset++;
  const auto label = detail::block_request(f, nullptr, n_, comm, true, [&](std::int64_t id, std::int64_t) {
    return root_label[static_cast<std::size_t>(id - first)];
  });
  // From block order to the matrix's rows.
  const auto mine = detail::block_request(detail::to_vector(layout_->owned()), nullptr, n_, comm, true,
                                          [&](std::int64_t id, std::int64_t) {
                                            return label[static_cast<std::size_t>(id - first)];
                                          });
  const auto m = static_cast<std::int64_t>(mine.size());
  return {DVector(layout_, at::tensor(mine, at::kLong).view({m}).to(local_.values.device())), count, rounds};
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
