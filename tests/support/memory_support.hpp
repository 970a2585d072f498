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

/// How much the second half of a soak loop may add to the resident set: 16 MiB of allocator
/// noise; under AddressSanitizer also its quarantine of freed memory (256 MiB by default), which
/// holds freed blocks back on purpose.
inline std::int64_t soak_growth_limit() {
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  constexpr bool asan = true;
#else
  constexpr bool asan = false;
#endif
#else
  constexpr bool asan = false;
#endif
  return (std::int64_t{16} << 20) + (asan ? std::int64_t{256} << 20 : 0);
}

/// Iterations of a soak loop: $EINSHARD_SOAK_<what>, else `fallback` (CI keeps them small; the
/// offline figures of docs/testing.md set them to 10^5 calls and 10^3 solves).
inline long soak_count(const char* variable, long fallback) {
  const char* v = std::getenv(variable);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

}  // namespace einshard::testing
