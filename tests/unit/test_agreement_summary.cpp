// The agreement's summary (exec/agreement.hpp) of a notation's operands (exec::operand_layouts), without MPI: every rank of a mesh simulated in one
// process summarizes its operands, the summaries are reduced with max as the all-reduce does, and
// each rank rebuilds every rank's descriptions. Where the summary determines them, the rebuilt table
// must be exactly what an all-gather gives, on every rank; where it does not (an uneven cut of the
// caller's own, a fault, a different dtype, notation or extent on one rank), every rank must say so.

#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/shapes.hpp"

#include "plan_steps.hpp"

namespace test_agreement_summary {

namespace es = einshard;
namespace ex = einshard::exec;

namespace {

/// Rank r's mesh coordinates, row-major as the mesh numbers them.
std::vector<int> coords_of(const es::MeshShape& mesh, int r) {
  std::vector<int> c(mesh.sizes.size());
  for (int d = static_cast<int>(c.size()) - 1; d >= 0; --d) {
    c[static_cast<std::size_t>(d)] = r % mesh.sizes[static_cast<std::size_t>(d)];
    r /= mesh.sizes[static_cast<std::size_t>(d)];
  }
  return c;
}

int world(const es::MeshShape& mesh) {
  int p = 1;
  for (auto s : mesh.sizes) p *= s;
  return p;
}

/// A description of an operand of `shape` and `dtype` (`fingerprint` from the notation).
es::comm::RankInfo info(std::int64_t fingerprint, std::vector<std::int64_t> shape, at::ScalarType dtype = at::kDouble) {
  es::comm::RankInfo r;
  r.fingerprint = fingerprint;
  r.dtype = static_cast<std::int64_t>(dtype);
  r.device = static_cast<std::int64_t>(c10::DeviceType::CPU);
  r.ndim = static_cast<std::int64_t>(shape.size());
  std::copy(shape.begin(), shape.end(), r.sizes.begin());
  return r;
}

/// What every rank rebuilds from the reduced summaries of `table` (every rank's descriptions);
/// checks that every rank rebuilt the same (or that none did).
std::optional<es::comm::Agreed> agree_in_one_process(const std::string& source, const es::MeshShape& mesh,
                                                     const es::comm::Agreed& table, const es::Shapes& shapes = {},
                                                     std::vector<std::int64_t> sites = {}) {
  const auto expression = einshard::testing::parsed(source);
  const auto e = expression.view(source);
  const int p = world(mesh);
  REQUIRE(table.size() == static_cast<std::size_t>(p));
  std::vector<std::int64_t> reduced(ex::detail::summary_words, ex::detail::no_value);
  for (int r = 0; r < p; ++r) {
    const auto& mine = table[static_cast<std::size_t>(r)];
    const auto coords = coords_of(mesh, r);
    const auto w = ex::detail::summarize(sites.empty() ? 7 : sites[static_cast<std::size_t>(r)], mine,
                                         ex::operand_layouts(e, mine, mesh), r == p - 1, mesh, coords, shapes);
    REQUIRE(w.size() == reduced.size());
    for (std::size_t k = 0; k < w.size(); ++k) reduced[k] = std::max(reduced[k], w[k]);
  }
  CHECK(reduced[3] == 1);  // the last rank's pending record reaches every rank
  std::optional<es::comm::Agreed> first;
  for (int r = 0; r < p; ++r) {
    const auto& mine = table[static_cast<std::size_t>(r)];
    const auto layouts = ex::operand_layouts(e, mine, mesh);
    std::optional<es::comm::Agreed> all;
    if (ex::detail::determines(reduced, layouts))
      all = ex::detail::expand(reduced, mine, *layouts, mesh, p, [&](int q) { return coords_of(mesh, q); }, shapes);
    if (r == 0) first = all;
    REQUIRE(all.has_value() == first.has_value());
    if (all) CHECK((*all == *first));
  }
  return first;
}

/// Every rank's description of an operand of global `shape`, each dimension cut over the mesh
/// dimension `over[d]` ("" for none) into `cut(d, parts)`.
template <class Cut>
es::comm::Agreed cut_table(const es::MeshShape& mesh, std::int64_t fingerprint, const std::vector<std::int64_t>& shape,
                           const std::vector<std::string>& over, Cut cut) {
  es::comm::Agreed table;
  for (int r = 0; r < world(mesh); ++r) {
    const auto c = coords_of(mesh, r);
    std::vector<std::int64_t> local;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (over[d].empty()) {
        local.push_back(shape[d]);
        continue;
      }
      const auto g = mesh.group(over[d]);
      local.push_back(cut(d, mesh.size(g))[static_cast<std::size_t>(mesh.coordinate(g, c))]);
    }
    table.push_back({info(fingerprint, local)});
  }
  return table;
}

es::comm::Agreed split_table(const es::MeshShape& mesh, std::int64_t fingerprint, const std::vector<std::int64_t>& shape,
                             const std::vector<std::string>& over) {
  return cut_table(mesh, fingerprint, shape, over,
                   [&](std::size_t d, int parts) { return es::compute_split_shapes(shape[d], parts); });
}

}  // namespace

TEST_CASE("agreement summary: split-rule shards are rebuilt exactly, empty ones too", "[unit][agreement]") {
  const es::MeshShape line{{"sp"}, {4}};
  for (std::int64_t n : {10, 8, 2, 0, 1}) {  // 3 3 3 1; 2 2 2 2; 0 0 0 2; all empty; 0 0 0 1
    const auto table = split_table(line, 11, {n, 5}, {"sp", ""});
    const auto all = agree_in_one_process("a/sp b -> a b/sp", line, table);
    REQUIRE(all.has_value());
    CHECK((*all == table));
  }
  // One rank: the last shard is the only one.
  const es::MeshShape one{{"sp"}, {1}};
  const auto table = split_table(one, 11, {6, 5}, {"sp", ""});
  CHECK((agree_in_one_process("a/sp b -> a b/sp", one, table) == table));
}

TEST_CASE("agreement summary: a 2-D mesh with replicas and a compound group", "[unit][agreement]") {
  const es::MeshShape mesh{{"dp", "sp"}, {2, 3}};
  // Input 1 cut over sp and dp, input 2 over dp and replicated over sp.
  auto t1 = split_table(mesh, 21, {7, 5}, {"sp", "dp"});
  const auto t2 = split_table(mesh, 22, {5, 4}, {"dp", ""});
  for (std::size_t r = 0; r < t1.size(); ++r) t1[r].push_back(t2[r][0]);
  const auto all = agree_in_one_process("a/sp b/dp, b/dp c -> a/sp c", mesh, t1);
  REQUIRE(all.has_value());
  CHECK((*all == t1));
  const auto t3 = split_table(mesh, 23, {13, 2}, {"dp-sp", ""});
  CHECK((agree_in_one_process("a/dp-sp b -> a b", mesh, t3) == t3));
  // The ellipsis: whole dimensions ahead of the named ones.
  const auto t4 = split_table(mesh, 24, {2, 3, 8}, {"", "", "sp"});
  CHECK((agree_in_one_process("... a/sp -> ... a", mesh, t4) == t4));
}

TEST_CASE("agreement summary: any cut whose shards but the last are equal, and the shapes metadata",
          "[unit][agreement]") {
  const es::MeshShape line{{"sp"}, {4}};
  // Not the split rule's cut of 11 (3 3 3 2), but determined by the summary all the same.
  const auto even = cut_table(line, 11, {10, 5}, {"sp", ""},
                              [](std::size_t, int) { return std::vector<std::int64_t>{2, 2, 2, 4}; });
  CHECK((agree_in_one_process("a/sp b -> a b/sp", line, even) == even));
  const auto odd = [](std::size_t, int) { return std::vector<std::int64_t>{2, 5, 0, 3}; };
  const auto uneven = cut_table(line, 11, {10, 5}, {"sp", ""}, odd);
  CHECK_FALSE(agree_in_one_process("a/sp b -> a b/sp", line, uneven).has_value());  // all-gathered
  // The same cut given as shapes metadata: every rank checks only its own shard.
  const es::Shapes given{{"sp", std::vector<std::int64_t>{2, 5, 0, 3}}};
  CHECK((agree_in_one_process("a/sp b -> a b/sp", line, uneven, given) == uneven));
  auto wrong = uneven;
  wrong[2][0].sizes[0] = 1;
  CHECK_FALSE(agree_in_one_process("a/sp b -> a b/sp", line, wrong, given).has_value());
  // Metadata that cannot describe the cut (wrong length): the prepared call raises its error.
  CHECK_FALSE(agree_in_one_process("a/sp b -> a b/sp", line, uneven, es::Shapes{{"sp", std::vector<std::int64_t>{5, 5}}}).has_value());
}

TEST_CASE("agreement summary: one rank that differs makes every rank all-gather", "[unit][agreement]") {
  const es::MeshShape line{{"sp"}, {3}};
  const auto table = split_table(line, 11, {7, 5}, {"sp", ""});
  const std::string source = "a/sp b -> a b/sp";
  REQUIRE(agree_in_one_process(source, line, table).has_value());
  using Change = void (*)(es::comm::RankInfo&);
  const Change changes[] = {
      [](es::comm::RankInfo& m) { m.sizes[1] = 4; },                                          // an unsharded extent
      [](es::comm::RankInfo& m) { m.dtype = static_cast<std::int64_t>(at::kFloat); },        // a dtype
      [](es::comm::RankInfo& m) { m.device = static_cast<std::int64_t>(c10::DeviceType::CUDA); },
      [](es::comm::RankInfo& m) { m.fault = static_cast<std::int64_t>(es::comm::LocalFault::rank_mismatch); },
      [](es::comm::RankInfo& m) { m.fingerprint = 12; },                                      // another notation
      [](es::comm::RankInfo& m) { m.ndim = 3, m.sizes[2] = 1; },                              // another rank
  };
  for (int r = 0; r < 3; ++r)
    for (const auto change : changes) {
      auto t = table;
      change(t[static_cast<std::size_t>(r)][0]);
      CHECK_FALSE(agree_in_one_process(source, line, t).has_value());
    }
  // A shard of another size: before the last, no rule describes the cut; the last is whatever
  // is left, so the cut is still determined.
  for (int r = 0; r < 3; ++r) {
    auto t = table;
    t[static_cast<std::size_t>(r)][0].sizes[0] += 2;
    const auto all = agree_in_one_process(source, line, t);
    CHECK(all.has_value() == (r == 2));
    if (all) CHECK((*all == t));
  }
  // Another call site (the shapes metadata or the notation's text) on one rank.
  CHECK_FALSE(agree_in_one_process(source, line, table, {}, {7, 7, 8}).has_value());
  // Past what a summary holds: more than 8 dimensions.
  const std::vector<std::string> unsharded(9, "");
  const auto wide = split_table(line, 11, {1, 1, 1, 1, 1, 1, 1, 1, 2}, unsharded);
  CHECK_FALSE(agree_in_one_process("... a -> ... a", line, wide).has_value());
}

}  // namespace test_agreement_summary
