// Fault injection for the MPI tests: a fault goes to one rank, and every rank must end the call
// the same way -- the same es::Error message, or (for a solver) the same SolveInfo reason and
// iteration -- without any rank being left in a collective (a hang is caught by the watchdog,
// hang_watchdog.hpp).
#pragma once

#include <mpi.h>

#include <einshard/error.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

namespace einshard::testing {

/// The rank that gets the fault: 1 when there is one, else the only rank.
inline int faulty_rank() { return world().size > 1 ? 1 : 0; }

/// How a call ended on this rank: "" when it returned, else "error: <what()>" for an es::Error and
/// "foreign: <what()>" for any other exception (which is itself a failure: faults must be es::Errors).
inline std::string outcome_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("foreign: ") + e.what();
  }
  return "";
}

/// Every rank's `outcome` is the same (compared by hash); returns it.
inline std::string same_on_every_rank(const std::string& outcome) {
  std::uint64_t h = std::hash<std::string>{}(outcome), lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  INFO("rank " << world().rank << ": " << (outcome.empty() ? "(returned)" : outcome));
  CHECK(lo == hi);
  CHECK(outcome.rfind("foreign: ", 0) == std::string::npos);
  return outcome;
}

/// `f` raises, on every rank, the same es::Error, whose message contains `fragment`.
inline void expect_error_everywhere(const std::function<void()>& f, const std::string& fragment) {
  const auto o = same_on_every_rank(outcome_of(f));
  INFO("rank " << world().rank << ": " << o);
  CHECK_THAT(o, Catch::StartsWith("error: ") && Catch::Contains(fragment));
}

}  // namespace einshard::testing
