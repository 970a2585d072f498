#pragma once
/// @file
/// Agreeing on a call's operands in O(log P). Every rank must know every rank's description of
/// every operand (comm/agreement.hpp), but when the shards are cut the usual way those descriptions
/// follow from a few numbers: the dtype, device and rank of each operand, the extent of each
/// unsharded axis, and, for a sharded axis, one extent for every shard but the last and one for the
/// last (the split rule's cut, and any cut whose shards but the last are equal), or the `shapes`
/// metadata. So every rank first contributes its own values to one all-reduce (max) that gives each
/// value's range over all ranks; when every range is a single value, that reduced *summary*
/// determines every rank's descriptions. Callers then read it as it is (`AgreedOperands`: each
/// axis's shard extents, O(group size); a cache key and a fingerprint of a few hundred words
/// whatever P) and rebuild the O(P) table only where they need it (einfft's output checks). Only
/// when some rank holds a shard of another size (an uneven cut of the caller's own, a fault, a
/// different call) do the ranks all-gather their descriptions, as before, so the errors still name
/// the rank at fault. The reduction's length is fixed, so ranks that reach one point with different
/// calls still meet in it.
///
/// `summarize`, `determines`, `shard_extents` and `expand` are pure (no MPI) and tested on their
/// own; `agree_summarized` runs them over a mesh. Used by the notation (exec/replay.hpp), the
/// stencil operations (exec/halo.hpp) and einfft (ops/fft.hpp).

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/shapes.hpp"

namespace einshard::exec {

namespace detail {

/// What a summary can hold: past these, the ranks all-gather.
inline constexpr std::size_t summary_operands = 4, summary_dims = 8;
/// Per operand: fingerprint, dtype, device, rank and fault, each as v and -v (the max of both is
/// the range); then per dimension the extent of the shards before the last and of the last, each
/// as v and -v.
inline constexpr std::size_t summary_fields = 5, summary_operand_words = 2 * summary_fields + 4 * summary_dims;
/// The header: the call's identity as v and -v, whether some rank cannot be summarized, and the
/// largest flag a rank passed (`agree_summarized`).
inline constexpr std::size_t summary_header = 4;
inline constexpr std::size_t summary_words = summary_header + summary_operands * summary_operand_words;
/// A word no rank contributes to (no value of that kind on this rank).
inline constexpr std::int64_t no_value = std::numeric_limits<std::int64_t>::min();

/// The shard extents `shapes` gives for `axis` over `group`: none when it gives none, or when
/// it cannot say (the prepared call raises that error).
inline std::optional<std::vector<std::int64_t>> given_shards(const Shapes& shapes, const Group& group,
                                                            const std::string& axis, int parts) {
  try {
    return shapes.resolve(group.name(), axis, parts);
  } catch (const Error&) {
    return std::vector<std::int64_t>{};  // not a cut of `parts` shards: never matches
  }
}

/// This rank's summary of its operands (`summary_words` integers, to be reduced with max over
/// ranks). `site` identifies the call (notation, shapes metadata); `layouts`: the operands' as
/// the caller lays them out; `coords`: this rank's mesh coordinates.
inline std::vector<std::int64_t> summarize(std::int64_t site, std::span<const comm::RankInfo> mine,
                                           const std::optional<std::vector<plan::Layout>>& layouts, std::int64_t flag,
                                           const MeshShape& mesh, std::span<const int> coords,
                                           const Shapes& shapes) {
  std::vector<std::int64_t> w(summary_words, no_value);
  auto both = [&](std::size_t at, std::int64_t v) {
    w[at] = v;
    w[at + 1] = -v;
  };
  both(0, site & 0x3fffffffffffffffll);  // 62 bits: the negation must not overflow
  bool irregular = mine.size() > summary_operands;
  for (const auto& m : mine)
    irregular = irregular || m.fault != 0 || static_cast<std::size_t>(m.ndim) > summary_dims;
  irregular = irregular || !layouts;
  w[2] = irregular ? 1 : 0;
  w[3] = flag;
  if (irregular) return w;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const auto base = summary_header + i * summary_operand_words;
    const auto& m = mine[i];
    const std::int64_t fields[summary_fields] = {m.fingerprint & 0x3fffffffffffffffll, m.dtype, m.device,
                                                 m.ndim, m.fault};
    for (std::size_t f = 0; f < summary_fields; ++f) both(base + 2 * f, fields[f]);
    for (std::size_t d = 0; d < static_cast<std::size_t>(m.ndim); ++d) {
      const auto at = base + 2 * summary_fields + 4 * d;
      const auto& [axis, group] = (*layouts)[i].axes[d];
      const auto s = m.sizes[d];
      if (group.empty()) {
        both(at, s);
        continue;
      }
      const auto parts = mesh.size(group);
      const auto c = mesh.coordinate(group, coords);
      if (const auto given = given_shards(shapes, group, axis, parts)) {
        // The metadata says every shard: this rank only checks its own.
        if (given->size() != static_cast<std::size_t>(parts) || (*given)[static_cast<std::size_t>(c)] != s)
          w[2] = 1;
        continue;
      }
      both(c + 1 < parts ? at : at + 2, s);
    }
  }
  return w;
}

/// Whether the summary `w`, reduced over every rank, determines every rank's descriptions: every
/// value's range is a single value (or no rank gave one), and no rank was irregular. Every rank
/// reads the same `w`: the same answer everywhere. `layouts`: this rank's, as summarized.
inline bool determines(std::span<const std::int64_t> w, const std::optional<std::vector<plan::Layout>>& layouts) {
  auto single = [&](std::size_t at) { return w[at] == no_value ? w[at + 1] == no_value : w[at] == -w[at + 1]; };
  if (!layouts || !single(0) || w[2] != 0) return false;
  for (std::size_t at = summary_header; at < summary_words; at += 2)
    if (!single(at)) return false;
  return true;
}

/// The extents of dimension `d` of operand `i` (placed as `p`) at every coordinate of its group,
/// from a summary `w` that `determines` them: the metadata's cut, or the same extent on every shard
/// but the last. O(group size), no rank's record needed.
inline std::vector<std::int64_t> shard_extents(std::span<const std::int64_t> w, std::size_t i, std::size_t d,
                                               const plan::Placement& p, const MeshShape& mesh,
                                               const Shapes& shapes) {
  const auto at = summary_header + i * summary_operand_words + 2 * summary_fields + 4 * d;
  if (p.group.empty()) return {w[at]};
  const auto parts = mesh.size(p.group);
  if (auto given = given_shards(shapes, p.group, p.axis, parts)) return *std::move(given);
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts), w[at]);
  out.back() = w[at + 2];
  return out;
}

/// Every rank's descriptions of its operands, rebuilt from a summary `w` that `determines` them,
/// reduced over all `ranks` ranks: O(P), for callers that need the table itself (einfft's output
/// checks, the tests). `mine` and `layouts`: this rank's, as summarized (every rank's are the same
/// but for the sharded extents); `coords(r)`: rank r's mesh coordinates.
template <class Coords>
comm::Agreed expand(std::span<const std::int64_t> w, std::span<const comm::RankInfo> mine,
                    const std::vector<plan::Layout>& layouts, const MeshShape& mesh, int ranks,
                    const Coords& coords, const Shapes& shapes) {
  std::vector<std::vector<std::vector<std::int64_t>>> extents(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i)
    for (std::size_t d = 0; d < static_cast<std::size_t>(mine[i].ndim); ++d)
      extents[i].push_back(shard_extents(w, i, d, layouts[i].axes[d], mesh, shapes));
  comm::Agreed all(static_cast<std::size_t>(ranks), std::vector<comm::RankInfo>(mine.begin(), mine.end()));
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < mine.size(); ++i)
      for (std::size_t d = 0; d < extents[i].size(); ++d) {
        const auto& g = layouts[i].axes[d].group;
        const auto c = g.empty() ? 0 : mesh.coordinate(g, coords(r));
        all[static_cast<std::size_t>(r)][i].sizes[d] = extents[i][d][static_cast<std::size_t>(c)];
      }
  return all;
}

}  // namespace detail

/// What the ranks agreed on about a call's operands: the reduced summary when it determines every
/// rank's descriptions, else every rank's descriptions, all-gathered. Read through `summarized`,
/// `shard_extents` (exec/sizes.hpp's `measure`) and `fingerprint`, a caller never needs the O(P)
/// table on the summary's path.
struct AgreedOperands {
  std::vector<comm::RankInfo> mine;                  ///< this rank's descriptions
  std::optional<std::vector<plan::Layout>> layouts;  ///< as summarized (none: could not be laid out)
  std::vector<std::int64_t> summary;                 ///< reduced over the mesh; empty when all-gathered
  comm::Agreed ranks;                                ///< all-gathered; empty when summarized
  std::vector<std::int64_t> flags;                   ///< every rank's `flag`, all-gathered with `ranks`
  bool flagged = false;                              ///< some rank passed `flag`

  [[nodiscard]] bool summarized() const { return !summary.empty(); }
  /// Every rank's descriptions (rebuilt from the summary: O(P) work and memory).
  [[nodiscard]] comm::Agreed table(const Mesh& mesh, const Shapes& shapes) const {
    if (!summarized()) return ranks;
    return detail::expand(summary, mine, *layouts, mesh.shape(), mesh.size(),
                          [&](int r) { return mesh.coordinates_of(r); }, shapes);
  }
  /// Equal on every rank that agreed together, different for different operands: the summary's
  /// words, or every rank's shapes.
  [[nodiscard]] std::int64_t fingerprint(std::string_view site) const {
    if (!summarized()) return comm::digest(site, ranks);
    auto h = static_cast<std::uint64_t>(std::hash<std::string_view>{}(site));
    for (auto v : summary) h = (h ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ull;
    return static_cast<std::int64_t>(h & 0x7fffffffffffffffull);
  }
  /// Appends what the plan depends on in the operands to a cache key.
  void append_key(std::string& key) const {
    auto word = [&](std::int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
    key += summarized() ? 's' : 't';
    for (auto v : summary) word(v);
    for (const auto& rank : ranks)
      for (const auto& info : rank) {
        word(info.dtype);
        word(info.ndim);
        for (std::int64_t d = 0; d < info.ndim; ++d) word(info.sizes[static_cast<std::size_t>(d)]);
      }
  }
  /// Checks what must agree (comm::check_agreed): on the summary's path every rank's values are
  /// this rank's, so this rank's descriptions stand for all.
  template <class ExpectedDims>
  void check(std::string_view what, const ExpectedDims& expected_dims) const {
    comm::check_agreed(summarized() ? comm::Agreed{mine} : ranks, what, expected_dims);
  }
};

/// Agrees on this rank's descriptions `mine` (collective over the mesh): one all-reduce of a
/// fixed-size summary, and an all-gather only when the summary does not determine every rank's
/// descriptions (see the file comment). `layouts`: the operands' (none when they cannot be laid
/// out: the ranks all-gather, and the caller raises its error); `site`: the call, which every rank
/// must pass alike; `flag`: one non-negative word a caller rides on the exchange (the notation's
/// pending records, exec/fold.hpp; einfft's output faults): the summary says whether some rank
/// passed one, an all-gather says each rank's. The same outcome on every rank.
inline AgreedOperands agree_summarized(const Mesh& mesh, std::vector<comm::RankInfo> mine,
                                       std::optional<std::vector<plan::Layout>> layouts, std::int64_t site,
                                       const Shapes& shapes, std::int64_t flag) {
  AgreedOperands out{std::move(mine), std::move(layouts), {}, {}, {}, false};
  out.summary = detail::summarize(site, out.mine, out.layouts, flag, mesh.shape(),
                                  mesh.coordinates_of(mesh.rank()), shapes);
  comm::all_reduce_values(std::span<std::int64_t>(out.summary), comm::Reduction::max, mesh.comm());
  if (detail::determines(out.summary, out.layouts)) {
    out.flagged = out.summary[3] != 0;
    return out;
  }
  out.summary.clear();
  out.ranks = comm::gather_infos(mesh.comm(), out.mine, flag, &out.flags);
  out.flagged = std::any_of(out.flags.begin(), out.flags.end(), [](std::int64_t f) { return f != 0; });
  return out;
}

}  // namespace einshard::exec
