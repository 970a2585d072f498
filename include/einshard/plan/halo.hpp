#pragma once
/// @file
/// Planning of interval fetches along one sharded axis: the common core of halos, windows,
/// convolutions and rolls. Pure (no MPI, no torch), so every rank derives the same messages from the
/// same shard sizes and the planner is unit-testable on its own.
///
/// Each rank of a group asks for one global interval `[begin, end)` of an axis split into shards
/// (uneven, possibly empty). Indices outside `[0, N)` are resolved by the boundary: wrapped modulo N
/// (periodic, as often as needed: a request may be many times wider than the axis), or left out of
/// the fetch and filled locally afterwards (constant fill, or copies of the edge row for replicate).
/// The fetched rows are then cut at shard boundaries into pieces, each naming its owner, so a
/// halo wider than one or several neighbours' shards simply becomes more pieces from more owners.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/plan/layout.hpp"

namespace einshard::plan {

/// How indices outside `[0, N)` are resolved (mirrors `einshard::Boundary`, which this torch-free
/// layer does not include).
enum class Edge { constant, periodic, replicate };

/// A half-open global interval of an axis, possibly reaching outside `[0, N)`.
struct Interval {
  std::int64_t begin = 0, end = 0;
  [[nodiscard]] std::int64_t length() const { return std::max<std::int64_t>(end - begin, 0); }
  friend bool operator==(const Interval&, const Interval&) = default;
};

/// `length` rows moving from offset `source` of the owner's shard to offset `target` of the
/// requester's fetched rows.
struct Piece {
  int owner = 0;
  std::int64_t source = 0, target = 0, length = 0;
  friend bool operator==(const Piece&, const Piece&) = default;
};

/// What one requester gets: `fetched` rows assembled from `pieces` (in target order), then
/// `pad_left` and `pad_right` rows added locally (the fill value, or copies of the first and last
/// fetched row for replicate). `pad_left + fetched + pad_right` is the requested length.
struct Fetch {
  Interval request;
  std::int64_t fetched = 0, pad_left = 0, pad_right = 0;
  std::vector<Piece> pieces;
};

/// Offsets of shards: `offsets(s)[p]` is where shard p starts; the last entry is N.
inline std::vector<std::int64_t> shard_offsets(std::span<const std::int64_t> shards) {
  std::vector<std::int64_t> off(shards.size() + 1, 0);
  std::partial_sum(shards.begin(), shards.end(), off.begin() + 1);
  return off;
}

namespace detail {

inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }
inline std::int64_t mod(std::int64_t a, std::int64_t n) { return a - floor_div(a, n) * n; }

/// Cuts the in-range rows `[start, start + length)` at shard boundaries, appending pieces whose
/// targets start at `target`.
inline void cut(std::span<const std::int64_t> off, std::int64_t start, std::int64_t length,
                std::int64_t target, std::vector<Piece>& out) {
  // The first owner: the last shard starting at or before `start` (empty shards own nothing).
  auto p = static_cast<std::size_t>(std::upper_bound(off.begin(), off.end() - 1, start) - off.begin()) - 1;
  while (length > 0) {
    const auto n = std::min(length, off[p + 1] - start);
    if (n > 0) {
      out.push_back({static_cast<int>(p), start - off[p], target, n});
      start += n;
      target += n;
      length -= n;
    }
    ++p;
  }
}

}  // namespace detail

/// The fetch of one requester: which owners send which rows, and what is padded locally. `axis`
/// names the axis and `what` the call in errors (detail::call_named).
inline Fetch plan_fetch(std::span<const std::int64_t> shards, Interval request, Edge edge,
                        const std::string& axis, std::string_view what = {}) {
  const auto off = shard_offsets(shards);
  const auto N = off.back();
  Fetch f;
  f.request = request;
  const auto a = request.begin, b = std::max(request.begin, request.end);
  f.request.end = b;
  if (a == b) return f;
  if (N == 0 && edge != Edge::constant)
    throw Error(detail::call_named(what) + ": expected a non-empty axis '" + axis + "' to " +
                (edge == Edge::periodic ? "periodic" : "replicate") + "-pad, found it empty");
  switch (edge) {
    case Edge::periodic: {
      // Runs that do not cross a multiple of N, each one contiguous in [0, N).
      for (auto i = a; i < b;) {
        const auto g = detail::mod(i, N);
        const auto n = std::min(b - i, N - g);
        detail::cut(off, g, n, i - a, f.pieces);
        i += n;
      }
      f.fetched = b - a;
      return f;
    }
    case Edge::constant: {
      f.pad_left = std::clamp<std::int64_t>(-a, 0, b - a);
      f.pad_right = std::clamp<std::int64_t>(b - N, 0, b - a - f.pad_left);
      break;
    }
    case Edge::replicate: {
      // At least one real row is fetched: the edge row every padded index copies.
      if (b <= 0) {
        f.pad_left = b - a - 1;
        f.fetched = 1;
        detail::cut(off, 0, 1, 0, f.pieces);
        return f;
      }
      if (a >= N) {
        f.pad_right = b - a - 1;
        f.fetched = 1;
        detail::cut(off, N - 1, 1, 0, f.pieces);
        return f;
      }
      f.pad_left = std::max<std::int64_t>(-a, 0);
      f.pad_right = std::max<std::int64_t>(b - N, 0);
      break;
    }
  }
  f.fetched = b - a - f.pad_left - f.pad_right;
  if (f.fetched > 0) detail::cut(off, a + f.pad_left, f.fetched, 0, f.pieces);
  return f;
}

/// One axis exchange seen from one rank of the group: what it receives (its own fetch), what it
/// sends (its rows in other requesters' fetches, in their target order, so the two sides post
/// matching messages in the same order), and the shapes before and after.
struct AxisExchange {
  std::int64_t local = 0;  ///< this rank's shard length
  Fetch fetch;             ///< this rank's fetch; pieces with `owner == me` are local copies
  /// Pieces other requesters need from this rank, by requester (pieces in their target order).
  std::vector<std::pair<int, std::vector<Piece>>> sends;

  [[nodiscard]] std::int64_t output() const {
    return fetch.pad_left + fetch.fetched + fetch.pad_right;
  }
  /// Rows this rank sends to and receives from other ranks.
  [[nodiscard]] std::int64_t rows_sent(int me) const {
    std::int64_t n = 0;
    for (const auto& [peer, pieces] : sends)
      if (peer != me)
        for (const auto& p : pieces) n += p.length;
    return n;
  }
  [[nodiscard]] std::int64_t rows_received(int me) const {
    std::int64_t n = 0;
    for (const auto& p : fetch.pieces) n += p.owner == me ? 0 : p.length;
    return n;
  }
};

/// The exchange of rank `me` when every rank `q` of the group requests `requests[q]`.
inline AxisExchange plan_exchange(std::span<const std::int64_t> shards,
                                  std::span<const Interval> requests, Edge edge, int me,
                                  const std::string& axis, std::string_view what = {}) {
  AxisExchange x;
  x.local = shards[static_cast<std::size_t>(me)];
  for (std::size_t q = 0; q < requests.size(); ++q) {
    auto f = plan_fetch(shards, requests[q], edge, axis, what);
    std::vector<Piece> mine;
    for (const auto& p : f.pieces)
      if (p.owner == me) mine.push_back(p);
    if (!mine.empty() && static_cast<int>(q) != me)
      x.sends.emplace_back(static_cast<int>(q), std::move(mine));
    if (static_cast<int>(q) == me) x.fetch = std::move(f);
  }
  return x;
}

// ---- requests of the operations ---------------------------------------------------------------

/// einhalo: every rank extends its shard by `left` rows before and `right` rows after.
inline std::vector<Interval> halo_requests(std::span<const std::int64_t> shards, std::int64_t left,
                                           std::int64_t right) {
  const auto off = shard_offsets(shards);
  std::vector<Interval> r;
  for (std::size_t p = 0; p < shards.size(); ++p) r.push_back({off[p] - left, off[p + 1] + right});
  return r;
}

/// einroll by `shift` (any sign and size): row i of the result is row (i - shift) mod N, so each
/// rank fetches its own range moved back by the shift, wrapped periodically.
inline std::vector<Interval> roll_requests(std::span<const std::int64_t> shards, std::int64_t shift) {
  const auto off = shard_offsets(shards);
  const auto N = off.back();
  const auto s = N == 0 ? 0 : detail::mod(shift, N);
  std::vector<Interval> r;
  for (std::size_t p = 0; p < shards.size(); ++p) r.push_back({off[p] - s, off[p + 1] - s});
  return r;
}

/// A sliding window along one axis: `kernel` taps `dilation` apart, moved by `stride`, over the
/// axis extended by `pad_left` and `pad_right`. Output j reads rows `j*stride - pad_left + t*dilation`
/// (t < kernel).
struct WindowAxis {
  std::int64_t kernel = 1, dilation = 1, stride = 1, pad_left = 0, pad_right = 0;
  /// The tap (as a row offset from the window's first row) whose owner owns the output: the
  /// window's centre `dilation*(kernel-1)/2` for a convolution, the anchor `dilation*left` for a
  /// window of radius (left, right).
  std::int64_t anchor = 0;
};

/// The output of a window axis: its length, every rank's output shard, and the input rows every
/// rank needs (its request).
struct WindowPlan {
  std::int64_t output = 0;
  std::vector<std::int64_t> shards;
  std::vector<Interval> requests;
};

/// Output index j belongs to the rank owning input row `clamp(j*stride - pad_left + anchor, 0, N-1)`
/// (outputs whose anchor falls in the padding belong to the first or last non-empty shard). The
/// anchor row grows with j, so each rank owns a contiguous range of outputs, in rank order; with
/// stride 1 and the anchor at the padding (same-size output), every rank owns exactly its input
/// rows, so the output keeps the input's sharding.
inline WindowPlan plan_window(std::span<const std::int64_t> shards, const WindowAxis& w,
                              const std::string& axis, std::string_view what = {}) {
  if (w.kernel < 1 || w.dilation < 1 || w.stride < 1)
    throw Error(detail::call_named(what) + ": expected a positive kernel size, dilation and stride along '" + axis +
                "', found " + std::to_string(w.kernel) + ", " + std::to_string(w.dilation) + " and " +
                std::to_string(w.stride));
  if (w.pad_left < 0 || w.pad_right < 0)
    throw Error(detail::call_named(what) + ": expected non-negative padding along '" + axis + "', found " +
                std::to_string(w.pad_left) + " and " + std::to_string(w.pad_right));
  const auto off = shard_offsets(shards);
  const auto N = off.back();
  const auto span = w.dilation * (w.kernel - 1) + 1;
  WindowPlan plan;
  plan.output = std::max<std::int64_t>(detail::floor_div(N + w.pad_left + w.pad_right - span, w.stride) + 1, 0);
  if (N > 0 && plan.output == 0)
    throw Error(detail::call_named(what) + ": expected the padded extent along '" + axis +
                "' to hold the dilated kernel (" + std::to_string(span) + "), found " +
                std::to_string(N + w.pad_left + w.pad_right));
  if (N == 0 && plan.output > 0)
    throw Error(detail::call_named(what) + ": expected no outputs along the empty axis '" + axis + "', found " +
                std::to_string(plan.output) + " from the padding alone");
  const auto shift = w.anchor - w.pad_left;  // anchor row of output j: j*stride + shift
  const auto first_at = [&](std::int64_t row) {  // first j whose anchor row is >= row
    return std::clamp<std::int64_t>(detail::ceil_div(row - shift, w.stride), 0, plan.output);
  };
  for (std::size_t p = 0; p < shards.size(); ++p) {
    std::int64_t j0 = 0, j1 = 0;
    if (shards[p] > 0) {
      j0 = off[p] == 0 ? 0 : first_at(off[p]);
      j1 = off[p + 1] == N ? plan.output : first_at(off[p + 1]);
    }
    plan.shards.push_back(j1 - j0);
    if (j1 > j0)
      plan.requests.push_back({j0 * w.stride - w.pad_left, (j1 - 1) * w.stride - w.pad_left + span});
    else
      plan.requests.push_back({0, 0});
  }
  return plan;
}

}  // namespace einshard::plan
