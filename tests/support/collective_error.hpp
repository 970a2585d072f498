#pragma once
/// @file
/// `collective_error`: the message of the `es::Error` a distributed call throws, checked to be the
/// same on every rank (the library's promise for bad input: one error everywhere, no hang).

#include <mpi.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "einshard/comm/collectives.hpp"
#include "einshard/error.hpp"

namespace einshard::testing {

/// The message of the `Error` `f` throws ("" if none), checked to be the same on every rank.
template <class F>
std::string collective_error(F&& f, MPI_Comm comm) {
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  }
  const std::int64_t mine[2] = {static_cast<std::int64_t>(message.size()),
                                static_cast<std::int64_t>(std::hash<std::string>{}(message))};
  const auto all = comm::all_gather_values(mine, comm);
  for (std::size_t r = 0; r < all.size(); r += 2) {
    INFO("rank " << r / 2 << " got a different error than this rank: " << message);
    CHECK(all[r] == mine[0]);
    CHECK(all[r + 1] == mine[1]);
  }
  return message;
}

}  // namespace einshard::testing
