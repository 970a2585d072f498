// libFuzzer target: `Shapes` resolution and the redistribution schedule it feeds. From the fuzzer's
// bytes: a mesh (1-3 dimensions of 1-4 ranks, at most 12 in all), a tensor (1-3 axes of 0-12 elements), two layouts
// (axes whole or sharded over any group, compound groups spelled in any order), and `shapes`
// metadata in one of its three forms with arbitrary (also negative, short, long) lists.
//
// Resolution must either throw es::Error or give, for every sharded (axis, group), one
// non-negative size per rank of the group; with the sizes summing to the axis (the check
// exec::resolve makes), every rank's schedule (computed for every rank of the mesh, as each rank
// does on its own) must be consistent: what p sends q is what q receives from p, and each rank's
// receives tile its new shard exactly once.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/redistribute.hpp"
#include "einshard/plan/unary.hpp"
#include "einshard/shapes.hpp"

namespace es = einshard;
namespace plan = einshard::plan;
using Sizes = std::vector<std::int64_t>;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}
void require(bool ok, const char* what) {
  if (!ok) broken(what);
}

const char* const dim_names[] = {"dp", "sp", "tp"};
const char* const axis_names[] = {"a", "b", "c"};

Sizes list(FuzzedDataProvider& in) {
  Sizes out(in.ConsumeIntegralInRange<std::size_t>(0, 6));
  for (auto& v : out) v = in.ConsumeIntegralInRange<std::int64_t>(-2, 9);
  return out;
}

/// A group of `mesh` (possibly compound, in any spelling), or "" for a whole axis.
std::string group(FuzzedDataProvider& in, const es::MeshShape& mesh) {
  std::vector<std::string> parts;
  for (const auto& n : mesh.names)
    if (in.ConsumeBool()) parts.push_back(n);
  std::shuffle(parts.begin(), parts.end(), std::minstd_rand(in.ConsumeIntegral<std::uint32_t>()));
  std::string g;
  for (const auto& p : parts) g += (g.empty() ? "" : "-") + p;
  return g;
}

/// Up to three entries from an initializer list (the only way Shapes and DimShapes are built).
template <class T, class V>
T from_entries(const std::vector<std::pair<std::string, V>>& e) {
  switch (e.size()) {
    case 1: return T{{e[0].first, e[0].second}};
    case 2: return T{{e[0].first, e[0].second}, {e[1].first, e[1].second}};
    case 3: return T{{e[0].first, e[0].second}, {e[1].first, e[1].second}, {e[2].first, e[2].second}};
    default: broken("from_entries: one to three entries");
  }
}

es::Shapes shapes(FuzzedDataProvider& in, const es::MeshShape& mesh, std::size_t naxes) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: return {};
    case 1: return es::Shapes(list(in));
    default: break;
  }
  const bool per_axis = in.ConsumeBool();
  std::vector<std::pair<std::string, es::DimShapes>> dims;
  for (std::size_t k = in.ConsumeIntegralInRange<std::size_t>(1, 3); k > 0; --k) {
    auto key = group(in, mesh);
    if (key.empty()) key = in.ConsumeBool() ? "xx" : "";  // unknown or empty dimension names
    if (!per_axis) {
      dims.emplace_back(key, es::DimShapes(list(in)));
      continue;
    }
    std::vector<std::pair<std::string, Sizes>> axes;
    for (std::size_t a = 0; a < naxes; ++a)
      if (in.ConsumeBool()) axes.emplace_back(axis_names[a], list(in));
    if (axes.empty()) axes.emplace_back("z", list(in));
    dims.emplace_back(key, from_entries<es::DimShapes>(axes));
  }
  return from_entries<es::Shapes>(dims);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  es::MeshShape mesh;
  for (std::size_t d = in.ConsumeIntegralInRange<std::size_t>(1, 3), i = 0; i < d; ++i) {
    mesh.names.emplace_back(dim_names[i]);
    mesh.sizes.push_back(in.ConsumeIntegralInRange(1, 4));
  }
  // The schedule of every rank is O(world^2): beyond the largest world of the MPI tests (8) a
  // mesh finds nothing new, it only runs slower.
  const auto all_dims = (std::uint32_t{1} << mesh.sizes.size()) - 1;
  while (mesh.size(mesh.group(all_dims)) > 12) --mesh.sizes.back();
  const auto naxes = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  Sizes global(naxes);
  for (auto& n : global) n = in.ConsumeIntegralInRange<std::int64_t>(0, 12);
  plan::Layout from, to;
  for (std::size_t a = 0; a < naxes; ++a) {
    for (auto* l : {&from, &to}) {
      const auto g = group(in, mesh);
      l->axes.push_back({axis_names[a], g.empty() ? es::Group{} : mesh.group(g)});
    }
  }
  const auto metadata = shapes(in, mesh, naxes);
  require(metadata.key() == metadata.key(), "key is not deterministic");

  // Shard sizes, as exec::resolve finds them: the metadata, else the split rule; sums checked.
  std::map<std::pair<std::size_t, es::Group>, Sizes> table;
  try {
    if (!plan::detail::disjoint_groups(from) || !plan::detail::disjoint_groups(to)) return 0;  // refused before planning
    for (const auto* l : {&from, &to})
      for (std::size_t a = 0; a < naxes; ++a) {
        const auto& g = l->axes[a].group;
        if (g.empty()) continue;
        const auto parts = mesh.size(g);
        const auto given = metadata.resolve(g.name(), l->axes[a].axis, parts);
        const auto split = es::compute_split_shapes(global[a], parts);
        require(static_cast<int>(split.size()) == parts, "split rule: number of parts");
        std::int64_t total = 0;
        for (auto s : split) {
          require(s >= 0, "split rule: negative part");
          total += s;
        }
        require(total == global[a], "split rule: parts do not sum to the size");
        const auto sizes = given.value_or(split);
        require(static_cast<int>(sizes.size()) == parts, "resolved shapes: one size per rank");
        total = 0;
        for (auto s : sizes) {
          require(s >= 0, "resolved shapes: negative size");
          total += s;
        }
        if (total != global[a]) return 0;  // exec::resolve's error
        table[{a, g}] = sizes;
      }
  } catch (const es::Error&) {
    return 0;
  }

  const int world = mesh.size(mesh.group(all_dims));
  std::vector<std::vector<int>> coords(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {  // row-major, as the Mesh lays ranks out
    auto& c = coords[static_cast<std::size_t>(r)];
    c.resize(mesh.sizes.size());
    for (int d = static_cast<int>(mesh.sizes.size()) - 1, rest = r; d >= 0; --d) {
      c[static_cast<std::size_t>(d)] = rest % mesh.sizes[static_cast<std::size_t>(d)];
      rest /= mesh.sizes[static_cast<std::size_t>(d)];
    }
  }
  const plan::ShardSizes shards = [&](std::size_t axis, const es::Group& g) -> const Sizes& {
    return table.at({axis, g});
  };
  const plan::CoordinatesOf coords_of = [&](int r) {
    return std::span<const int>(coords[static_cast<std::size_t>(r)]);
  };
  std::vector<plan::Schedule> all;
  for (int me = 0; me < world; ++me)
    all.push_back(plan::schedule_redistribute(from, to, global, shards, mesh, coords_of, me, world));
  for (int me = 0; me < world; ++me) {
    const auto& s = all[static_cast<std::size_t>(me)];
    std::int64_t out = 1, received = 0;
    for (auto n : s.out_shape) out *= n;
    for (const auto& t : s.recvs) {
      received += t.box.numel();
      const auto& back = all[static_cast<std::size_t>(t.peer)].sends;
      const auto match = std::find_if(back.begin(), back.end(), [&](const plan::Transfer& x) {
        return x.peer == me && x.box.size == t.box.size;
      });
      require(match != back.end(), "a receive without the matching send");
    }
    require(received == out, "the receives do not tile the new shard");
  }
  return 0;
}
