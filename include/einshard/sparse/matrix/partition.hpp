#pragma once
/// @file
/// Partition ids: which part (rank) owns each of the n rows/vertices of a sparse matrix. Pure,
/// deterministic functions of their input, so every rank computing them gets the same ids without
/// communicating (METIS with a fixed seed included).
///
/// Methods (torch-sla §3.1, with these differences):
/// - simple: contiguous blocks of ceil(n / parts); trailing parts may be empty (9 on 4: 3,3,3,0).
/// - rcb: recursive coordinate bisection along the longest-range axis, parts/2 parts left and the
///   rest right. The left side gets ceil(m * left_parts / parts) of the m points by a stable sort,
///   not "everything <= the median": ties then never unbalance the parts, and an odd part count
///   (3 = 1 + 2) splits the points 1:2 instead of 1:1.
/// - hilbert: Skilling's Hilbert index of the coordinates (2-D or 3-D, each axis scaled to 16
///   bits), stable argsort, then contiguous chunks whose sizes differ by at most one.
/// - slicing: stable argsort along the longest-range axis, then the same chunks.
/// - metis: libmetis on the symmetrised adjacency without self-loops, seed fixed: recursive
///   bisection up to 8 parts, k-way above (see `detail::metis_ids`); a graph without edges, or
///   with no more vertices than parts, falls back to simple.
/// - automatic: rcb when coordinates are given, else simple.
///
/// With `functions` > 1 (a PDE system: rows functions·k … functions·k + functions − 1 are the
/// unknowns of node k) each method partitions the nodes and every node's rows go to one part,
/// which nodal AMG needs (`AmgOptions::nodal`) and which keeps a node's couplings off the halo.

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "einshard/config.hpp"
#include "einshard/error.hpp"

#if defined(EINSHARD_HAS_METIS) && EINSHARD_HAS_METIS
#include <metis.h>
#endif

namespace einshard::sparse {

enum class PartitionMethod { simple, rcb, hilbert, metis, slicing, automatic };

struct PartitionOptions {
  PartitionMethod method = PartitionMethod::simple;
  /// (n, d) vertex coordinates for rcb, hilbert, slicing and automatic; with `functions` > 1 the
  /// rows' (a node's first row gives its place) or the nodes' (n / functions, d).
  std::optional<at::Tensor> coords{};
  /// Unknowns per node, interleaved (as `AmgOptions::functions`): a node's rows stay together.
  int functions = 1;
};

namespace detail {

/// Contiguous ids for an ordering: the vertex at position p of `order` goes to part
/// p * parts / n, so part sizes differ by at most one.
at::Tensor chunk_ids(const at::Tensor& order, std::int64_t n, int parts);

at::Tensor simple_ids(std::int64_t n, int parts);

/// The coordinates as a contiguous (n, d) float64 CPU tensor, checked.
at::Tensor checked_coords(const PartitionOptions& options, std::int64_t n,
                          const char* method);

/// Index of the axis of largest range (max - min) of the rows `idx` of `c`; the first on ties.
std::int64_t longest_axis(const double* c, std::int64_t d, const std::int64_t* idx,
                          std::int64_t m);

/// Stable sort of the vertices `idx` by their coordinate on `axis`.
void sort_along(const double* c, std::int64_t d, std::int64_t axis, std::int64_t* first,
                std::int64_t* last);

at::Tensor rcb_ids(const at::Tensor& coords, int parts);

at::Tensor slicing_ids(const at::Tensor& coords, int parts);

/// Skilling's Hilbert index (AIP Conf. Proc. 707, 2004) of one point with `dims` axes of `bits`
/// bits each: "axes to transpose", then the transposed bits interleaved, most significant first.
std::uint64_t hilbert_index(std::array<std::uint32_t, 3> x, int dims, int bits);

at::Tensor hilbert_ids(const at::Tensor& coords, int parts);

at::Tensor metis_ids(const at::Tensor& row, const at::Tensor& col, std::int64_t n,
                     int parts);

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE at::Tensor chunk_ids(const at::Tensor& order, std::int64_t n, int parts) {
  auto ids = at::empty({n}, at::kLong);
  if (n == 0) return ids;
  ids.index_put_({order}, at::div(at::arange(n, at::kLong) * parts, n, "floor"));
  return ids;
}

EINSHARD_INLINE at::Tensor simple_ids(std::int64_t n, int parts) {
  const std::int64_t chunk = std::max<std::int64_t>(1, (n + parts - 1) / parts);
  return at::div(at::arange(n, at::kLong), chunk, "floor").clamp_max(parts - 1);
}

EINSHARD_INLINE at::Tensor checked_coords(const PartitionOptions& options, std::int64_t n,
                                          const char* method) {
  if (!options.coords || !options.coords->defined())
    throw Error(std::string("partition (method ") + method +
                "): expected coordinates (PartitionOptions::coords, shape (n, d)), found none");
  const auto& c = *options.coords;
  if (c.dim() != 2 || c.size(0) != n || c.size(1) < 1)
    throw Error(std::string("partition (method ") + method +
                "): expected coords of shape (" + std::to_string(n) + ", d), found " +
                std::string(c10::str(c.sizes())));
  if (at::isComplexType(c.scalar_type()))
    throw Error(std::string("partition: expected real coords, found ") +
                c10::toString(c.scalar_type()));
  return c.to(at::kCPU, at::kDouble).contiguous();
}

EINSHARD_INLINE std::int64_t longest_axis(const double* c, std::int64_t d, const std::int64_t* idx,
                                          std::int64_t m) {
  std::int64_t best = 0;
  double best_range = -1.0;
  for (std::int64_t a = 0; a < d; ++a) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t k = 0; k < m; ++k) {
      lo = std::min(lo, c[idx[k] * d + a]);
      hi = std::max(hi, c[idx[k] * d + a]);
    }
    if (hi - lo > best_range) {
      best_range = hi - lo;
      best = a;
    }
  }
  return best;
}

EINSHARD_INLINE void sort_along(const double* c, std::int64_t d, std::int64_t axis, std::int64_t* first,
                                std::int64_t* last) {
  std::stable_sort(first, last, [&](std::int64_t i, std::int64_t j) {
    return c[i * d + axis] < c[j * d + axis];
  });
}

EINSHARD_INLINE at::Tensor rcb_ids(const at::Tensor& coords, int parts) {
  const std::int64_t n = coords.size(0), d = coords.size(1);
  const double* c = coords.data_ptr<double>();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
  auto ids = at::empty({n}, at::kLong);
  auto* out = ids.data_ptr<std::int64_t>();
  struct Box {
    std::int64_t begin, end;
    int first_part, parts;
  };
  std::vector<Box> work{{0, n, 0, parts}};
  while (!work.empty()) {
    const Box b = work.back();
    work.pop_back();
    std::int64_t* first = idx.data() + b.begin;
    const std::int64_t m = b.end - b.begin;
    if (b.parts == 1) {
      for (std::int64_t k = 0; k < m; ++k) out[first[k]] = b.first_part;
      continue;
    }
    const int left = b.parts / 2;
    const std::int64_t split = (m * left + b.parts - 1) / b.parts;
    sort_along(c, d, longest_axis(c, d, first, m), first, first + m);
    work.push_back({b.begin + split, b.end, b.first_part + left, b.parts - left});
    work.push_back({b.begin, b.begin + split, b.first_part, left});
  }
  return ids;
}

EINSHARD_INLINE at::Tensor slicing_ids(const at::Tensor& coords, int parts) {
  const std::int64_t n = coords.size(0), d = coords.size(1);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
  if (n > 0) {
    const double* c = coords.data_ptr<double>();
    sort_along(c, d, longest_axis(c, d, idx.data(), n), idx.data(), idx.data() + n);
  }
  return chunk_ids(at::tensor(idx, at::kLong), n, parts);
}

EINSHARD_INLINE std::uint64_t hilbert_index(std::array<std::uint32_t, 3> x, int dims, int bits) {
  const std::uint32_t top = 1u << (bits - 1);
  for (std::uint32_t q = top; q > 1; q >>= 1) {  // inverse undo
    const std::uint32_t p = q - 1;
    for (int i = 0; i < dims; ++i) {
      if (x[i] & q) {
        x[0] ^= p;
      } else {
        const std::uint32_t t = (x[0] ^ x[i]) & p;
        x[0] ^= t;
        x[i] ^= t;
      }
    }
  }
  for (int i = 1; i < dims; ++i) x[i] ^= x[i - 1];  // Gray encode
  std::uint32_t t = 0;
  for (std::uint32_t q = top; q > 1; q >>= 1)
    if (x[dims - 1] & q) t ^= q - 1;
  for (int i = 0; i < dims; ++i) x[i] ^= t;
  std::uint64_t h = 0;
  for (int b = bits - 1; b >= 0; --b)
    for (int i = 0; i < dims; ++i) h = (h << 1) | ((x[i] >> b) & 1u);
  return h;
}

EINSHARD_INLINE at::Tensor hilbert_ids(const at::Tensor& coords, int parts) {
  constexpr int bits = 16;
  const std::int64_t n = coords.size(0), d = coords.size(1);
  if (d != 2 && d != 3)
    throw Error("partition (method hilbert): expected 2-D or 3-D coordinates, found " +
                std::to_string(d) + " per vertex");
  if (n == 0) return at::empty({0}, at::kLong);
  // Each axis scaled to [0, 2^16 - 1]; a flat axis maps to 0.
  const auto lo = std::get<0>(coords.min(0)), span = std::get<0>(coords.max(0)) - lo;
  const auto scaled = ((coords - lo) / at::where(span > 0, span, at::ones_like(span)) *
                       double((1 << bits) - 1))
                          .round()
                          .to(at::kLong)
                          .contiguous();
  const auto* s = scaled.data_ptr<std::int64_t>();
  auto key = at::empty({n}, at::kLong);
  auto* k = key.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::array<std::uint32_t, 3> x{};
    for (std::int64_t a = 0; a < d; ++a) x[a] = static_cast<std::uint32_t>(s[i * d + a]);
    k[i] = static_cast<std::int64_t>(hilbert_index(x, static_cast<int>(d), bits));
  }
  return chunk_ids(std::get<1>(key.sort(/*stable=*/true, 0, false)), n, parts);
}

EINSHARD_INLINE at::Tensor metis_ids(const at::Tensor& row, const at::Tensor& col, std::int64_t n,
                                     int parts) {
#if defined(EINSHARD_HAS_METIS) && EINSHARD_HAS_METIS
  if (parts == 1) return at::zeros({n}, at::kLong);
  // At most one vertex per part (METIS refuses more parts than vertices).
  if (n <= parts) return simple_ids(n, parts);
  const auto too_big = [&](std::int64_t edges) {
    return Error("partition (method metis): expected a graph that fits METIS's idx_t, found one of (" + std::to_string(n) +
                 " vertices, " + std::to_string(edges) + " directed edges) for its " +
                 std::to_string(8 * sizeof(idx_t)) + "-bit idx_t");
  };
  if (n > std::numeric_limits<idx_t>::max()) throw too_big(-1);
  // Symmetrised adjacency without self-loops, each edge once per direction.
  const auto off = row != col;
  const auto r = row.index({off}), c = col.index({off});
  const auto key =
      std::get<0>(at::unique_consecutive(std::get<0>(at::cat({r * n + c, c * n + r}).sort())));
  if (key.numel() == 0) return simple_ids(n, parts);
  if (key.numel() > std::numeric_limits<idx_t>::max()) throw too_big(key.numel());
  const auto src = at::div(key, n, "floor");
  const auto xadj_t = at::cat({at::zeros({1}, at::kLong), at::bincount(src, {}, n).cumsum(0)});
  std::vector<idx_t> xadj(static_cast<std::size_t>(n + 1));
  std::vector<idx_t> adjncy(static_cast<std::size_t>(key.numel()));
  std::vector<idx_t> part(static_cast<std::size_t>(n));
  const auto dst = (key - src * n).contiguous();
  const auto* xa = xadj_t.data_ptr<std::int64_t>();
  const auto* dv = dst.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i <= n; ++i)
    xadj[static_cast<std::size_t>(i)] = static_cast<idx_t>(xa[i]);
  for (std::int64_t k = 0; k < key.numel(); ++k)
    adjncy[static_cast<std::size_t>(k)] = static_cast<idx_t>(dv[k]);
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = 20260101;  // fixed: every rank computes the same partition
  options[METIS_OPTION_NUMBERING] = 0;
  const auto run = [&](bool kway) {
    idx_t nvtxs = static_cast<idx_t>(n), ncon = 1, nparts = parts, objval = 0;
    const auto f = kway ? &METIS_PartGraphKway : &METIS_PartGraphRecursive;
    const int status = f(&nvtxs, &ncon, xadj.data(), adjncy.data(), nullptr, nullptr, nullptr,
                         &nparts, nullptr, nullptr, options, &objval, part.data());
    if (status != METIS_OK)
      throw Error(std::string("partition (method metis): METIS_PartGraph") + (kway ? "Kway" : "Recursive") +
                  " failed with status " + std::to_string(status) + " (" + std::to_string(n) +
                  " vertices, " + std::to_string(parts) + " parts)");
  };
  // Recursive bisection up to 8 parts, as the METIS manual advises: k-way degenerates on small
  // graphs there (measured with METIS 5.1: a 3-vertex ring in 2 parts all in one, a 9-vertex ring
  // in 8 parts with empty parts), bisection stays balanced. Above 8, k-way, unless it leaves a
  // part empty.
  run(parts > 8);
  if (parts > 8) {
    std::vector<char> used(static_cast<std::size_t>(parts), 0);
    for (const auto p : part) used[static_cast<std::size_t>(p)] = 1;
    if (std::find(used.begin(), used.end(), 0) != used.end()) run(false);
  }
  auto ids = at::empty({n}, at::kLong);
  auto* out = ids.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) out[i] = part[static_cast<std::size_t>(i)];
  return ids;
#else
  (void)row;
  (void)col;
  (void)n;
  (void)parts;
  throw Error(
      "partition (method metis): expected einshard configured with libmetis, found a build without it "
      "(install metis.h and libmetis, e.g. Debian's libmetis-dev, and reconfigure)");
#endif
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace detail

/// The part in [0, parts) of each of the n vertices (rows) of the matrix whose pattern is the COO
/// (row, col): an int64 (n,) CPU tensor, the same on every process given the same input. `row` and
/// `col` are read by metis only (they may be empty otherwise).
at::Tensor partition_ids(const at::Tensor& row, const at::Tensor& col, std::int64_t n,
                         int parts, const PartitionOptions& options = {});

#if EINSHARD_DEFINE_SPARSE  // defined as the functions above are
EINSHARD_INLINE at::Tensor partition_ids(const at::Tensor& row, const at::Tensor& col, std::int64_t n,
                                         int parts, const PartitionOptions& options) {
  if (parts < 1)
    throw Error("partition_ids: expected at least 1 part, found " + std::to_string(parts));
  if (n < 0) throw Error("partition_ids: expected n >= 0, found " + std::to_string(n));
  if (const int f = options.functions; f != 1) {
    if (f < 1 || n % f != 0)
      throw Error("partition: expected functions ≥ 1 dividing the rows (functions unknowns per node), found functions = " +
                  std::to_string(f) + " with " + std::to_string(n) + " rows");
    // The nodes partitioned as vertices of their own (node k: rows f·k …), then each node's part
    // given to all its rows.
    PartitionOptions nodes = options;
    nodes.functions = 1;
    if (options.coords && options.coords->defined()) {
      const auto& c = *options.coords;
      if (c.dim() == 2 && c.size(0) == n) nodes.coords = c.slice(0, 0, n, f);
      else if (c.dim() != 2 || c.size(0) != n / f)
        throw Error("partition: expected coords of the rows (" + std::to_string(n) + ", d) or of the nodes (" +
                    std::to_string(n / f) + ", d) with functions = " + std::to_string(f) + ", found shape " +
                    std::string(c10::str(c.sizes())));
    }
    const auto node_of = [f](const at::Tensor& v) { return v.defined() ? at::div(v, f, "floor") : v; };
    return partition_ids(node_of(row), node_of(col), n / f, parts, nodes).repeat_interleave(f);
  }
  switch (options.method) {
    case PartitionMethod::simple:
      return detail::simple_ids(n, parts);
    case PartitionMethod::rcb:
      return detail::rcb_ids(detail::checked_coords(options, n, "rcb"), parts);
    case PartitionMethod::hilbert:
      return detail::hilbert_ids(detail::checked_coords(options, n, "hilbert"), parts);
    case PartitionMethod::slicing:
      return detail::slicing_ids(detail::checked_coords(options, n, "slicing"), parts);
    case PartitionMethod::automatic:
      return options.coords && options.coords->defined()
                 ? detail::rcb_ids(detail::checked_coords(options, n, "automatic"), parts)
                 : detail::simple_ids(n, parts);
    case PartitionMethod::metis: {
      if (!row.defined() || !col.defined() || row.dim() != 1 || col.dim() != 1 ||
          row.numel() != col.numel())
        throw Error("partition (method metis): expected 1-D row and col of one length, found other shapes");
      const auto r = row.to(at::kCPU, at::kLong), c = col.to(at::kCPU, at::kLong);
      if (r.numel() > 0) {
        const auto lo = std::min(r.min().item<std::int64_t>(), c.min().item<std::int64_t>());
        const auto hi = std::max(r.max().item<std::int64_t>(), c.max().item<std::int64_t>());
        if (lo < 0 || hi >= n)
          throw Error("partition (method metis): expected vertex indices in [0, " +
                      std::to_string(n) + "), found " + std::to_string(lo < 0 ? lo : hi));
      }
      return detail::metis_ids(r, c, n, parts);
    }
  }
  throw Error("partition_ids: expected a known partition method, found method " +
              std::to_string(static_cast<int>(options.method)));
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
