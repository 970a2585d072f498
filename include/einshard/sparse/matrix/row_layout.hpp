#pragma once
/// @file
/// `RowLayout`: which global rows (vector entries) this rank owns, for any partition (contiguous,
/// RCB, METIS, user-given), and the distributed directory that answers "who owns row g" without
/// any rank holding an O(N) table.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/collectives.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/comm/sparse_exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/held_bytes.hpp"

namespace einshard::sparse {

namespace detail {

/// The contiguous rule of `PartitionMethod::simple` (and of the directory): blocks of
/// ceil(n / parts) rows, the last ones possibly short or empty (n = 9 on 4 ranks: 3, 3, 3, 0).
inline std::int64_t block_rows(std::int64_t n, int parts) { return parts > 0 ? (n + parts - 1) / parts : 0; }
inline std::int64_t block_first(std::int64_t n, int parts, int r) {
  return std::min<std::int64_t>(static_cast<std::int64_t>(r) * block_rows(n, parts), n);
}
inline int block_owner(std::int64_t g, std::int64_t n, int parts) {
  return static_cast<int>(g / std::max<std::int64_t>(block_rows(n, parts), 1));
}

/// Tag of the RowLayout constructor that keeps the rows' storage.
struct AdoptRows {};
/// Tag of the RowLayout constructor of the simple partition (every rank its own simple block).
struct SimpleRows {};

inline std::vector<std::int64_t> to_vector(const at::Tensor& t) {
  const auto c = t.to(at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

}  // namespace detail

/// The rows [first, last) that the simple (default) partition of n rows gives this rank of `comm`:
/// what a rank assembles when it builds its own rows for `DSparseTensor::from_local`.
inline std::pair<std::int64_t, std::int64_t> simple_rows(std::int64_t n, MPI_Comm comm) {
  const int p = comm::size_of(comm), r = comm::rank_of(comm);
  return {detail::block_first(n, p, r), detail::block_first(n, p, r + 1)};
}

/// The rows this rank owns, ascending by global index; local row i is global row `owned[i]`.
class RowLayout {
 public:
  /// Collective over `comm` (which the layout keeps a duplicate of). `owned`: this rank's global
  /// rows, any order, no duplicates; together the ranks must own each of [0, n) exactly once —
  /// checked by the directory, the same error on every rank.
  RowLayout(at::Tensor owned, std::int64_t n, MPI_Comm comm) : RowLayout(std::move(owned), n, comm, false) {}
  /// The same, keeping the storage of `owned` when it is ascending int64 already: for rows in
  /// memory nothing writes afterwards (a load's, inside the file it read), which saves a copy.
  /// Every rank must call it together, with rows it has checked: strictly ascending, in [0, n).
  RowLayout(detail::AdoptRows, at::Tensor owned, std::int64_t n, MPI_Comm comm)
      : RowLayout(std::move(owned), n, comm, true) {}

 private:
  RowLayout(const at::Tensor& owned, std::int64_t n, MPI_Comm comm, bool adopt) : n_(n), comm_(comm) {
    owned_ = owned.to(at::kLong).flatten().contiguous();
    // Ascending already (a contiguous block, a loaded partition): a sort would cost more than the rest.
    const auto* first = owned_.data_ptr<std::int64_t>();
    if (!adopt && !std::is_sorted(first, first + owned_.numel())) owned_ = std::get<0>(owned_.sort()).contiguous();
    else if (!adopt && owned_.data_ptr() == owned.data_ptr()) owned_ = owned_.clone();  // never the caller's storage
    const auto* o = owned_.data_ptr<std::int64_t>();
    if (!adopt) {  // adopted rows were checked by the caller on every rank (one all-reduce less)
      std::string fault;
      for (std::int64_t i = 0; i < owned_.numel() && fault.empty(); ++i) {
        if (o[i] < 0 || o[i] >= n)
          fault = "owned row " + std::to_string(o[i]) + " is out of range [0, " + std::to_string(n) + ")";
        else if (i > 0 && o[i] == o[i - 1])
          fault = "owned row " + std::to_string(o[i]) + " is listed twice";
      }
      comm::raise_if_any(comm_, fault);
    }
    contiguous_ = owned_.numel() == 0 ||
                  o[owned_.numel() - 1] - o[0] + 1 == owned_.numel();
    build_directory();
  }
  RowLayout(detail::SimpleRows, std::int64_t n, MPI_Comm comm) : n_(n), comm_(comm), simple_(true) {
    const auto [first, last] = simple_rows(n, comm_);
    owned_ = at::arange(first, last, at::kLong);
  }

 public:
  /// The simple contiguous partition of [0, n). Its owners are arithmetic: no directory, and
  /// nothing but the communicator's duplicate is collective.
  static std::shared_ptr<const RowLayout> simple(std::int64_t n, MPI_Comm comm) {
    return std::shared_ptr<const RowLayout>(new RowLayout(detail::SimpleRows{}, n, comm));
  }

  [[nodiscard]] std::int64_t global_size() const { return n_; }
  [[nodiscard]] std::int64_t local_size() const { return owned_.numel(); }
  [[nodiscard]] const at::Tensor& owned() const { return owned_; }
  [[nodiscard]] MPI_Comm comm() const { return comm_; }
  [[nodiscard]] int rank() const { return comm::rank_of(comm_); }
  [[nodiscard]] int size() const { return comm::size_of(comm_); }
  /// True when this rank's rows are one range (then `owned()[0] + i` is local row i's index).
  [[nodiscard]] bool contiguous() const { return contiguous_; }

  /// Local positions of owned global rows (all must be owned here).
  [[nodiscard]] at::Tensor local_index(const at::Tensor& global) const {
    // One range: arithmetic, not a binary search per index (assembly and load call this on
    // every stored entry).
    if (contiguous_ && owned_.numel() > 0) return global.to(at::kLong) - owned_[0].item<std::int64_t>();
    return at::searchsorted(owned_, global.to(at::kLong));
  }
  /// `local_index` and `is_owned` in one host pass: `out[k]` the local position of global row
  /// `global[k]`, −1 where this rank does not own it (assembly maps every stored entry with it).
  void positions(std::span<const std::int64_t> global, std::int64_t* out) const {
    const auto n = owned_.numel();
    const auto* ow = owned_.data_ptr<std::int64_t>();
    const std::int64_t first = n > 0 ? ow[0] : 0;
    for (std::size_t k = 0; k < global.size(); ++k) {
      const auto g = global[k];
      const auto pos = contiguous_ ? g - first : std::lower_bound(ow, ow + n, g) - ow;
      out[k] = pos >= 0 && pos < n && (contiguous_ || ow[pos] == g) ? pos : -1;
    }
  }
  [[nodiscard]] at::Tensor is_owned(const at::Tensor& global) const {
    if (owned_.numel() == 0) return at::zeros(global.sizes(), at::kBool);
    const auto g = global.to(at::kLong);
    if (contiguous_) {
      const auto first = owned_[0].item<std::int64_t>();
      return (g >= first) & (g < first + owned_.numel());
    }
    const auto pos = at::searchsorted(owned_, g).clamp_max(owned_.numel() - 1);
    return owned_.index_select(0, pos.flatten()).view(g.sizes()) == g;
  }

  /// The owning rank of each global row in `ids`. Collective: two sparse exchanges with the
  /// directory ranks the ids fall in (rank d holds the owners of the rows of simple block d), or
  /// nothing at all for the simple partition (every rank's layout is simple or none is).
  [[nodiscard]] std::vector<int> owners(const std::vector<std::int64_t>& ids) const {
    const int p = size();
    std::vector<int> out(ids.size());
    if (simple_) {
      for (std::size_t i = 0; i < ids.size(); ++i) out[i] = detail::block_owner(ids[i], n_, p);
      return out;
    }
    // The ids grouped by directory rank (ascending, stable), one parcel per directory rank.
    std::vector<std::size_t> order(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return detail::block_owner(ids[a], n_, p) < detail::block_owner(ids[b], n_, p);
    });
    std::vector<comm::Parcel<std::int64_t>> ask;
    for (auto i : order) {
      const int d = detail::block_owner(ids[i], n_, p);
      if (ask.empty() || ask.back().peer != d) ask.push_back({d, {}});
      ask.back().values.push_back(ids[i]);
    }
    const auto asked = comm::sparse_exchange(ask, comm_);
    const auto first = detail::block_first(n_, p, rank());
    std::vector<comm::Parcel<int>> answer;
    answer.reserve(asked.size());
    for (const auto& a : asked) {
      auto& reply = answer.emplace_back(comm::Parcel<int>{a.peer, {}});
      reply.values.reserve(a.values.size());
      for (auto g : a.values) reply.values.push_back(directory_[static_cast<std::size_t>(g - first)]);
    }
    // Each directory rank answers every parcel it was sent, in its order: the answers, ascending
    // by directory rank, line up with the parcels asked.
    const auto answered = comm::sparse_exchange(answer, comm_);
    std::size_t k = 0;
    for (std::size_t j = 0; j < ask.size(); ++j)
      for (auto owner : answered.at(j).values) out[order[k++]] = owner;
    return out;
  }

  /// Same partition (same object, or the same rows on every rank: collective).
  [[nodiscard]] bool same_as(const RowLayout& other) const {
    if (this == &other) return true;
    return comm::every_rank(n_ == other.n_ && at::equal(owned_, other.owned_), comm_);
  }

  /// How `other` differs from this partition, the same text on every rank (collective; for the
  /// message of a refused operation, after `same_as` said they differ): the first rank whose rows
  /// differ, with its row count and first row in each.
  [[nodiscard]] std::string difference(const RowLayout& other) const {
    if (n_ != other.n_)
      return std::to_string(n_) + " rows in one and " + std::to_string(other.n_) + " in the other";
    const auto first = [](const at::Tensor& owned) {
      return owned.numel() == 0 ? std::int64_t{-1} : owned.data_ptr<std::int64_t>()[0];
    };
    const std::array<std::int64_t, 5> mine{at::equal(owned_, other.owned_) ? 1 : 0, owned_.numel(), first(owned_),
                                           other.owned_.numel(), first(other.owned_)};
    const auto all = comm::all_gather_values(mine, comm_);
    auto rows = [](std::int64_t count, std::int64_t from) {
      return std::to_string(count) + " rows" + (count > 0 ? " from row " + std::to_string(from) : std::string());
    };
    for (std::size_t r = 0; r < all.size() / 5; ++r) {
      const auto* v = all.data() + 5 * r;
      if (v[0] == 0)
        return "rank " + std::to_string(r) + " owns " + rows(v[1], v[2]) + " in one and " + rows(v[3], v[4]) +
               " in the other" + (v[1] == v[3] && v[2] == v[4] ? " (different rows)" : "");
    }
    return "the same rows on every rank";
  }

  /// The owned slice of a global vector (every rank holds `global`, length n).
  [[nodiscard]] at::Tensor scatter(const at::Tensor& global) const {
    return global.index_select(0, owned_);
  }

  /// The global vector, in global order, on every rank (all-gathers of the owned slices and,
  /// unless the partition is contiguous in rank order, of their row indices).
  /// A 2-D (n_local, k) slice gathers to (n, k).
  [[nodiscard]] at::Tensor gather(const at::Tensor& local) const {
    const auto all = comm::all_gather(local, 0, gathered_counts(), comm_);
    const auto& order = gathered_rows();
    if (!order.defined()) return all;
    auto out = at::empty_like(all);
    out.index_copy_(0, order, all);
    return out;
  }

  /// Adds what this rank's part of the layout holds: its rows, its share of the owner directory,
  /// and what a gather kept (every rank's row count: P entries, only after a gather, which moves the
  /// whole vector anyway).
  void count_bytes(detail::HeldBytes& held) const {
    held.add(owned_);
    held.add(directory_);
    held.add(counts_);
    held.add(order_);
  }

 private:
  /// The directory: rank d learns the owner of each row of its simple block d. One all-reduce
  /// decides the case on every rank alike: the simple partition needs no directory; when every
  /// rank owns one range, a rank sends its range to the directory ranks it overlaps (usually one
  /// or two); otherwise its rows travel to their directory ranks. Either way each directory rank
  /// checks that its block is owned exactly once, the same error on every rank; no rank handles
  /// anything of size P.
  void build_directory() {
    const int p = size();
    const auto first = detail::block_first(n_, p, rank());
    const auto rows = detail::block_first(n_, p, rank() + 1) - first;
    const auto n_owned = owned_.numel();
    const auto* o = owned_.data_ptr<std::int64_t>();
    const bool simple_block = contiguous_ && n_owned == rows && (rows == 0 || o[0] == first);
    std::array<int, 2> every{simple_block ? 1 : 0, contiguous_ ? 1 : 0};
    comm::all_reduce_values(std::span<int>(every), comm::Reduction::min, comm_);
    if (every[0] == 1) {
      simple_ = true;
      return;
    }
    directory_.assign(static_cast<std::size_t>(rows), -1);
    std::string fault;
    const auto own = [&](std::int64_t g, int r) {
      auto& slot = directory_[static_cast<std::size_t>(g - first)];
      if (slot >= 0 && fault.empty())
        fault = "row " + std::to_string(g) + " is owned by ranks " + std::to_string(slot) + " and " + std::to_string(r);
      slot = r;
    };
    if (every[1] == 1) {  // ranges [first row, row count)
      std::vector<comm::Parcel<std::int64_t>> ranges;
      if (n_owned > 0)
        for (int d = detail::block_owner(o[0], n_, p); d <= detail::block_owner(o[n_owned - 1], n_, p); ++d)
          ranges.push_back({d, {o[0], n_owned}});
      for (const auto& got : comm::sparse_exchange(ranges, comm_)) {
        const auto lo = std::max(got.values[0], first), hi = std::min(got.values[0] + got.values[1], first + rows);
        for (auto g = lo; g < hi; ++g) own(g, got.peer);
      }
    } else {
      std::vector<comm::Parcel<std::int64_t>> mine;
      for (std::int64_t i = 0; i < n_owned; ++i) {  // ascending rows: nondecreasing directory ranks
        const int d = detail::block_owner(o[i], n_, p);
        if (mine.empty() || mine.back().peer != d) mine.push_back({d, {}});
        mine.back().values.push_back(o[i]);
      }
      for (const auto& got : comm::sparse_exchange(mine, comm_))
        for (auto g : got.values) own(g, got.peer);
    }
    for (std::size_t i = 0; i < directory_.size() && fault.empty(); ++i)
      if (directory_[i] < 0) fault = "row " + std::to_string(first + static_cast<std::int64_t>(i)) + " is owned by no rank";
    comm::raise_if_any(comm_, fault.empty() ? fault : "RowLayout: expected the ranks to own each row once; " + fault);
  }

  /// Every rank's row count, rank-major (one all-gather, the first time).
  [[nodiscard]] const std::vector<std::int64_t>& gathered_counts() const {
    if (counts_.empty()) counts_ = comm::all_gather_values(std::array<std::int64_t, 1>{owned_.numel()}, comm_);
    return counts_;
  }

  /// Global row of each position of the rank-ordered concatenation; undefined when that is already
  /// the identity (contiguous blocks in rank order), so gathers skip the permutation.
  [[nodiscard]] const at::Tensor& gathered_rows() const {
    if (!order_known_) {
      const auto all = comm::all_gather(owned_, 0, gathered_counts(), comm_);
      if (!at::equal(all, at::arange(n_, at::kLong))) order_ = all;
      order_known_ = true;
    }
    return order_;
  }

  std::int64_t n_;
  comm::OwnedComm comm_;
  at::Tensor owned_;
  bool contiguous_ = true;
  bool simple_ = false;         // every rank owns its simple block: owners are arithmetic
  std::vector<int> directory_;  // owners of the rows of this rank's simple block, unless simple_
  mutable std::vector<std::int64_t> counts_;
  mutable at::Tensor order_;
  mutable bool order_known_ = false;
};

}  // namespace einshard::sparse
