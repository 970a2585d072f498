// Seeded randomized distributed tests: the cases, the meshes and the one-line reproducer.
//
// Every rank draws the same cases in the same order (the generator is seeded by the case alone),
// so collective calls -- building a mesh, the operation under test -- line up on every rank.
//   EINSHARD_RANDOM_SEED   base seed (default 20261201)
//   EINSHARD_RANDOM_CASES  cases per test (default 60)
//   EINSHARD_RANDOM_CASE   run only this case (as printed by a failure's reproducer)
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/mesh.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace einshard::testing::random {

using Rng = std::mt19937_64;

inline std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

inline int uniform(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
inline bool chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

struct Case {
  std::uint64_t base = 0, index = 0, seed = 0;
  [[nodiscard]] Rng rng() const { return Rng(seed); }
  /// The one line that reruns this case alone, and what it was.
  [[nodiscard]] std::string reproducer(int world, const std::string& what) const {
    return "reproduce: EINSHARD_RANDOM_SEED=" + std::to_string(base) + " EINSHARD_RANDOM_CASE=" +
           std::to_string(index) + " mpiexec -n " + std::to_string(world) + " <test executable> '[random]'   # " +
           what;
  }
};

/// The cases of one test; `stream` separates the tests' seeds.
inline std::vector<Case> cases(std::uint64_t stream = 0) {
  const auto base = env_or("EINSHARD_RANDOM_SEED", 20261201);
  const auto n = env_or("EINSHARD_RANDOM_CASES", 60);
  const char* only = std::getenv("EINSHARD_RANDOM_CASE");
  std::vector<Case> out;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (only && *only && std::strtoull(only, nullptr, 10) != i) continue;
    std::seed_seq seq{base, stream, i};
    std::uint64_t seed = 0;
    seq.generate(reinterpret_cast<std::uint32_t*>(&seed), reinterpret_cast<std::uint32_t*>(&seed) + 2);
    out.push_back({base, i, seed});
  }
  return out;
}

/// A random mesh of the whole world: 1-3 dimensions (trivial ones included) whose sizes multiply
/// to `world`, named dp, sp, tp. Meshes are cached: building one is collective.
inline const Mesh& random_mesh(Rng& rng, int world) {
  const int ndim = uniform(rng, 1, 3);
  std::vector<int> sizes;
  int rest = world;
  for (int d = 0; d + 1 < ndim; ++d) {
    std::vector<int> divisors;
    for (int k = 1; k <= rest; ++k)
      if (rest % k == 0) divisors.push_back(k);
    sizes.push_back(divisors[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(divisors.size()) - 1))]);
    rest /= sizes.back();
  }
  sizes.push_back(rest);
  std::shuffle(sizes.begin(), sizes.end(), rng);
  static std::map<std::vector<int>, Mesh> cache;
  if (auto it = cache.find(sizes); it != cache.end()) return it->second;
  static const std::vector<std::string> names{"dp", "sp", "tp"};
  return cache.emplace(sizes, Mesh(MPI_COMM_WORLD, sizes, {names.begin(), names.begin() + ndim})).first->second;
}

/// A random non-empty group of the dimensions not in `used` (compound ones spelled in a random
/// order, as users may), marked used; "" when none is left.
inline std::string random_group(Rng& rng, const Mesh& mesh, std::vector<bool>& used) {
  std::vector<int> free;
  for (int d = 0; d < mesh.ndim(); ++d)
    if (!used[static_cast<std::size_t>(d)]) free.push_back(d);
  if (free.empty()) return "";
  std::shuffle(free.begin(), free.end(), rng);
  free.resize(static_cast<std::size_t>(uniform(rng, 1, std::min(2, static_cast<int>(free.size())))));
  std::string g;
  for (int d : free) {
    g += (g.empty() ? "" : "-") + mesh.names()[static_cast<std::size_t>(d)];
    used[static_cast<std::size_t>(d)] = true;
  }
  return g;
}

/// Extents that make uneven and empty shards at 2-8 ranks.
inline std::int64_t random_extent(Rng& rng) {
  static const std::int64_t pool[] = {0, 1, 2, 3, 4, 5, 7, 9};
  return pool[uniform(rng, 0, 7)];
}

inline at::ScalarType random_dtype(Rng& rng, bool integers) {
  static const at::ScalarType pool[] = {at::kDouble, at::kDouble, at::kFloat, at::kComplexDouble, at::kLong};
  return pool[uniform(rng, 0, integers ? 4 : 3)];
}

/// Counts the cases that ran and those every rank refused alike.
class Tally {
 public:
  explicit Tally(std::string name) : name_(std::move(name)) {}

  /// Checks that every rank raised the same error (`error`, "" when none) or none did; true when the
  /// case ran (so its results are to be checked).
  bool agreed(const std::string& error) {
    const int threw = error.empty() ? 0 : 1;
    std::uint64_t h = std::hash<std::string>{}(error), lo = 0, hi = 0;
    int any = 0, all = 0;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&threw, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&threw, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    INFO("error on this rank: " << (error.empty() ? "(none)" : error));
    CHECK(any == all);
    CHECK(lo == hi);
    (any ? refused_ : ran_) += 1;
    return any == 0;
  }

  /// At least half of the cases ran: a generator that only makes refused cases tests nothing.
  void require_enough() const {
    if (world().rank == 0)
      std::cout << name_ << ": " << ran_ << " cases ran, " << refused_ << " refused alike on every rank\n";
    if (ran_ + refused_ >= 10) CHECK(ran_ * 2 >= ran_ + refused_);
    CHECK(ran_ > 0);
  }

 private:
  std::string name_;
  int ran_ = 0, refused_ = 0;
};

}  // namespace einshard::testing::random
