// Bounded resources of distributed calls: many cached calls over changing shapes and meshes, and
// meshes made and dropped over and over, with every rank's memory staying bounded. The counts are
// small in CI; docs/testing.md has the offline run (EINSHARD_SOAK_CALLS=100000).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "memory_support.hpp"
#include "random_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdint>
#include <string>
#include <vector>

namespace test_soak {

namespace es = einshard;
namespace et = einshard::testing;
namespace rt = einshard::testing::random;

namespace {

/// Call i: a gather or split of a small tensor over one of the random meshes, shapes changing.
bool call_matches(rt::Rng& rng, long i) {
  const auto& mesh = rt::random_mesh(rng, et::world().size);
  const auto& dim = mesh.names()[static_cast<std::size_t>(i % mesh.ndim())];
  const std::int64_t n = i % 13, m = 1 + i % 3;
  const auto X = at::arange(n * m, at::kDouble).view({n, m});
  const auto parts = es::compute_split_shapes(n, mesh.size(dim));
  std::int64_t start = 0;
  for (int c = 0; c < mesh.coordinate(dim); ++c) start += parts[static_cast<std::size_t>(c)];
  const auto mine = X.narrow(0, start, parts[static_cast<std::size_t>(mesh.coordinate(dim))]);
  const es::Options o{.mesh = mesh};
  if (i % 2 == 0) return at::equal(es::einshard("a/" + dim + " b -> a b", {mine.contiguous()}, o), X);
  return at::equal(es::einshard("a b -> a/" + dim + " b", {X}, o), mine);
}

}  // namespace

TEST_CASE("soak: cached distributed calls over changing shapes and meshes keep memory bounded", "[soak]") {
  const long calls = et::soak_count("EINSHARD_SOAK_CALLS", 1500);
  rt::Rng rng(5);
  long wrong = 0;
  for (long i = 0; i < calls / 2; ++i) wrong += call_matches(rng, i) ? 0 : 1;
  const auto half = et::resident_bytes();
  for (long i = calls / 2; i < calls; ++i) wrong += call_matches(rng, i) ? 0 : 1;
  const auto end = et::resident_bytes();
  INFO("rank " << et::world().rank << ": resident " << half / 1024 << " KiB after " << calls / 2 << " calls, "
               << end / 1024 << " KiB after " << calls);
  CHECK(wrong == 0);
  CHECK(end - half < et::soak_growth_limit());
}

TEST_CASE("soak: meshes made and dropped free their communicators", "[soak]") {
  const long meshes = et::soak_count("EINSHARD_SOAK_MESHES", 200);
  const auto w = et::world();
  auto once = [&](long i) {
    const es::Mesh mesh(MPI_COMM_WORLD, {w.size, 1}, {"dp", "sp"});
    // Sub-communicators are made on first use and must go with the mesh.
    const auto X = at::full({3, 2}, static_cast<double>(i), at::kDouble);
    return at::equal(es::einshard("a b // dp-sp -> a b", {X}, {.mesh = mesh}), X * w.size);
  };
  long wrong = 0;
  for (long i = 0; i < meshes / 2; ++i) wrong += once(i) ? 0 : 1;
  const auto half = et::resident_bytes();
  for (long i = meshes / 2; i < meshes; ++i) wrong += once(i) ? 0 : 1;
  const auto end = et::resident_bytes();
  INFO("rank " << w.rank << ": resident " << half / 1024 << " KiB -> " << end / 1024 << " KiB");
  CHECK(wrong == 0);
  CHECK(end - half < et::soak_growth_limit());
}

}  // namespace test_soak
