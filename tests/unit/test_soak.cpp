// Bounded resources and thread safety of the local (no mesh) front end: many run-time notations
// and shapes, more than the notation and call caches hold, with the process's memory staying
// bounded; and several threads calling at once (docs/testing.md, "Threads").

#include <ATen/ATen.h>

#include <einshard/einshard.hpp>

#include "memory_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace test_soak {

namespace es = einshard;
namespace et = einshard::testing;

namespace {

/// Call i: one of 8192 distinct notations (twice the notation cache) over changing shapes.
bool call_matches(long i) {
  const auto k = i % 8192;
  // Axis names differ per notation; sizes cycle so the same notation sees several shapes.
  const std::string a = "a" + std::to_string(k), b = "b" + std::to_string(k % 7);
  const std::int64_t n = 1 + i % 5, m = 1 + (i / 5) % 3;
  const auto x = at::arange(n * m, at::kDouble).view({n, m});
  const auto y = es::einshard(a + " " + b + " -> " + b + " " + a, {x});
  return at::equal(y, x.t());
}

}  // namespace

TEST_CASE("soak: run-time notations beyond the caches' capacity keep memory bounded", "[soak]") {
  const long calls = et::soak_count("EINSHARD_SOAK_CALLS", 20000);
  long wrong = 0;
  for (long i = 0; i < calls / 2; ++i) wrong += call_matches(i) ? 0 : 1;
  const auto half = et::resident_bytes();
  for (long i = calls / 2; i < calls; ++i) wrong += call_matches(i) ? 0 : 1;
  const auto end = et::resident_bytes();
  INFO("resident after " << calls / 2 << " calls: " << half / 1024 << " KiB, after " << calls << ": " << end / 1024
                         << " KiB");
  CHECK(wrong == 0);
  // The caches evict (they hold at most 4096 notations and 1024 prepared calls): the second half
  // of the loop adds no memory beyond allocator noise (and ASan's quarantine).
  CHECK(end - half < et::soak_growth_limit());
}

TEST_CASE("threads: local calls from several threads at once agree with torch", "[soak][threads]") {
  // The notation and call caches are shared between threads (a mutex each); the last-plan record
  // is per thread. Four threads on overlapping notations: hits, misses and evictions race.
  std::atomic<long> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &wrong] {
      for (long i = 0; i < 3000; ++i)
        if (!call_matches(i * 4 + t)) ++wrong;
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}

}  // namespace test_soak
