// The process's resident memory, for the soak tests: a long loop whose memory keeps growing leaks
// (or caches without bound).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace einshard::testing {

/// Resident set size in bytes (Linux /proc/self/statm), 0 where unavailable.
inline std::int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

/// Iterations of a soak loop: $EINSHARD_SOAK_<what>, else `fallback` (CI keeps them small; the
/// offline figures of docs/testing.md set them to 10^5 calls and 10^3 solves).
inline long soak_count(const char* variable, long fallback) {
  const char* v = std::getenv(variable);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

}  // namespace einshard::testing
