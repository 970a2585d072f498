#pragma once
/// @file
/// Planning the 1-D FFT of an axis that is sharded and has no other axis to transpose into (a 1-D
/// tensor `x/p -> k/p`). Pure (no MPI, no tensors), so every rank derives the same messages and
/// `tests/unit` checks them directly.
///
/// The transform of length n = n1·n2 runs as a "six-step" FFT (Bailey; FFTW-MPI's and heFFTe's 1-D
/// algorithm): view x as the n1×n2 matrix A[i1, i2] = x[i1·n2 + i2], hold it by rows; transpose to
/// columns; FFT every column (length n1); multiply by the twiddles ω^(k1·i2) (ω = e^(∓2πi/n));
/// transpose back to rows; FFT every row (length n2). Then X[k1 + n1·k2] is entry (k1, k2), so
/// holding the result by k2 blocks is the natural order of X: the third transpose sends the
/// transposed matrix. Three all-to-alls, each element moved once per transpose, nothing gathered.
///
/// The rows are split over the P ranks, so the work is balanced only when n1 ≥ P. A length without
/// such a factor (a prime, or 2·prime) goes through Bluestein's algorithm instead: the DFT as a
/// circular convolution with the chirp e^(∓πi j²/n), computed by factored transforms of a 5-smooth
/// length m ≥ 2n−1 that has one.
///
/// Shards need not line up with rows: the entry and exit exchanges move any block distribution of
/// x (uneven, empty shards) into the row blocks and out of the k2 blocks; they are skipped when
/// the blocks already agree.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "einshard/plan/redistribute.hpp"
#include "einshard/shapes.hpp"

namespace einshard::plan {

/// The half-open index range [lo, hi) of a 1-D axis that one rank holds.
struct Range {
  std::int64_t lo = 0, hi = 0;
  [[nodiscard]] std::int64_t size() const { return hi - lo; }
  friend bool operator==(const Range&, const Range&) = default;
};

/// Consecutive ranges of the given sizes, each scaled by `unit` (rows of `unit` elements).
inline std::vector<Range> consecutive(std::span<const std::int64_t> sizes, std::int64_t unit = 1) {
  std::vector<Range> out;
  std::int64_t at = 0;
  for (auto s : sizes) {
    out.push_back({at, at + s * unit});
    at += s * unit;
  }
  return out;
}

/// Every range cut to [lo, hi) (empty where it misses; an empty range keeps its place).
inline std::vector<Range> clip(std::span<const Range> ranges, std::int64_t lo, std::int64_t hi) {
  std::vector<Range> out;
  for (const auto& r : ranges) {
    const auto a = std::clamp(r.lo, lo, hi), b = std::clamp(r.hi, lo, hi);
    out.push_back({a, std::max(a, b)});
  }
  return out;
}

/// The messages to go from rank r holding `from[r]` of a 1-D axis to it holding `to[r]` (each
/// index of a `to` range must lie in some `from` range).
inline Schedule schedule_ranges(std::span<const Range> from, std::span<const Range> to, int me) {
  auto boxes = [](std::span<const Range> r) {
    std::vector<Box> out;
    for (const auto& x : r) out.push_back({{x.lo}, {x.size()}});
    return out;
  };
  return schedule_boxes(boxes(from), boxes(to), me);
}

/// How a transform of length n is computed over P ranks: factored as m = m1·m2, where m = n, or
/// m is Bluestein's padded length.
struct FactoredFft {
  std::int64_t n = 0;
  std::int64_t m = 0, m1 = 1, m2 = 1;
  [[nodiscard]] bool bluestein() const { return m != n; }
};

namespace detail {

/// The largest divisor of n that is at most √n.
inline std::int64_t inner_factor(std::int64_t n) {
  std::int64_t best = 1;
  for (std::int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) best = d;
  return best;
}

/// The least 5-smooth number (2^a·3^b·5^c) ≥ n: local FFTs are fastest, and a near-square
/// factorization exists, on such lengths.
inline std::int64_t next_smooth(std::int64_t n) {
  for (auto m = std::max<std::int64_t>(n, 1);; ++m) {
    auto r = m;
    for (std::int64_t p : {2, 3, 5})
      while (r % p == 0) r /= p;
    if (r == 1) return m;
  }
}

}  // namespace detail

/// The factorization that balances a length-n transform over `parts` ranks: the most nearly
/// square n = n1·n2 when n1 ≥ P rows go round; otherwise Bluestein's m when its inner factor is
/// larger than n1 (better balance for 3·n more work); otherwise n1·n2 as it is (short lengths).
inline FactoredFft factor_fft(std::int64_t n, std::int64_t parts) {
  FactoredFft f{n, n, detail::inner_factor(n), 1};
  f.m2 = n / f.m1;
  if (f.m1 >= parts) return f;
  const auto m = detail::next_smooth(2 * n - 1);
  const auto m1 = detail::inner_factor(m);
  if (m1 > f.m1) f = {n, m, m1, m / m1};
  return f;
}

/// The messages of one six-step transform of length r1·r2 over P ranks, for rank `me`. Rows of the
/// r1×r2 matrix split by the split rule go in; k2 blocks (rows of the r2×r1 transposed result) come
/// out, so a transform with the factors swapped takes this one's output as its input.
struct SixStepPlan {
  std::int64_t r1 = 1, r2 = 1;
  std::vector<std::int64_t> rows, cols, out_rows;  ///< by rank: rows of r1, columns of r2, rows of r2
  Schedule to_columns;  ///< [rows, r2] -> [r1, cols]
  Schedule to_rows;     ///< [r1, cols] -> [rows, r2]
  Schedule to_output;   ///< [r2, rows] -> [out_rows, r1] (the transposed matrix, by k2 blocks)
  [[nodiscard]] std::vector<Range> input() const { return consecutive(rows, r2); }
  [[nodiscard]] std::vector<Range> output() const { return consecutive(out_rows, r1); }
};

inline SixStepPlan plan_six_step(std::int64_t r1, std::int64_t r2, int parts, int me) {
  SixStepPlan s{r1, r2, compute_split_shapes(r1, parts), compute_split_shapes(r2, parts),
                compute_split_shapes(r2, parts), {}, {}, {}};
  const auto row = consecutive(s.rows), col = consecutive(s.cols);
  std::vector<Box> by_rows, by_cols, transposed, by_k2;
  for (std::size_t r = 0; r < row.size(); ++r) {
    by_rows.push_back({{row[r].lo, 0}, {row[r].size(), r2}});
    by_cols.push_back({{0, col[r].lo}, {r1, col[r].size()}});
    transposed.push_back({{0, row[r].lo}, {r2, row[r].size()}});
    by_k2.push_back({{col[r].lo, 0}, {col[r].size(), r1}});
  }
  s.to_columns = schedule_boxes(by_rows, by_cols, me);
  s.to_rows = schedule_boxes(by_cols, by_rows, me);
  s.to_output = schedule_boxes(transposed, by_k2, me);
  return s;
}

}  // namespace einshard::plan
