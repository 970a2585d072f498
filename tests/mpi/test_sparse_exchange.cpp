// comm::sparse_exchange (non-blocking consensus) against what each rank must receive, at any world
// size: every rank builds every rank's parcels from a deterministic pattern, so each rank knows by
// itself what a dense all-to-all would have delivered to it (from every rank, empty or not).
// Patterns with ranks that send nothing, receive nothing, send to themselves, to every rank, parcels
// too large for one message, and many exchanges back to back on one communicator (the two tags'
// alternation); bad parcels are the same error on every rank. And comm::gather_values.

#include <mpi.h>

#include <einshard/comm/reduce.hpp>
#include <einshard/comm/sparse_exchange.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace test_sparse_exchange {

namespace comm = einshard::comm;

namespace {

/// What rank `src` sends to rank `dst` in round `round` of a pattern: `length(src, dst, round)`
/// values that name both ends and the round.
using Length = std::function<int(int src, int dst, int round)>;

std::vector<std::int64_t> payload(int src, int dst, int round, int length) {
  std::vector<std::int64_t> v;
  for (int k = 0; k < length; ++k) v.push_back(1000000LL * round + 1000LL * src + 10LL * dst + k);
  return v;
}

/// Runs one exchange of the pattern and checks it against the dense expectation on this rank.
void check_round(const Length& length, int round, MPI_Comm comm) {
  const int p = comm::size_of(comm), me = comm::rank_of(comm);
  std::vector<comm::Parcel<std::int64_t>> send;
  // Parcels in descending peer order (the exchange takes them in any order), empty ones included.
  for (int dst = p - 1; dst >= 0; --dst)
    if (length(me, dst, round) >= 0) send.push_back({dst, payload(me, dst, round, length(me, dst, round))});
  const auto got = comm::sparse_exchange(send, comm);
  std::vector<comm::Parcel<std::int64_t>> expected;
  for (int src = 0; src < p; ++src)
    if (length(src, me, round) > 0) expected.push_back({src, payload(src, me, round, length(src, me, round))});
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].peer == expected[i].peer);
    CHECK(got[i].values == expected[i].values);
    CHECK(comm::parcel_from(got, expected[i].peer) == expected[i].values);
  }
  for (int src = 0; src < p; ++src)
    if (length(src, me, round) <= 0) CHECK(comm::parcel_from(got, src).empty());
}

}  // namespace

TEST_CASE("sparse_exchange: each rank receives what a dense all-to-all would give it", "[mpi][collectives][sparse_exchange]") {
  const auto w = einshard::testing::world();
  const std::vector<std::pair<std::string, Length>> patterns{
      {"nobody sends", [](int, int, int) { return -1; }},
      {"only empty parcels", [](int, int, int) { return 0; }},
      {"ring, both neighbours",
       [p = w.size](int s, int d, int) { return (d == (s + 1) % p || d == (s + p - 1) % p) && d != s ? 3 : -1; }},
      {"to itself only", [](int s, int d, int) { return s == d ? 2 : -1; }},
      {"rank 0 to every rank, itself included", [](int s, int, int) { return s == 0 ? 4 : -1; }},
      {"every rank to rank 0", [](int, int d, int) { return d == 0 ? 1 : -1; }},
      {"dense, uneven lengths", [](int s, int d, int r) { return (7 * s + 3 * d + r) % 5; }},
      {"sparse, some ranks idle",
       [](int s, int d, int r) { return (s * 31 + d * 17 + r) % 7 == 0 ? 1 + (s + d) % 3 : -1; }},
      // An envelope holds a parcel's size (8 bytes) and, when they fit, its values; more values take
      // a second message.
      {"parcels filling an envelope and larger than one",
       [](int s, int d, int r) {
         constexpr int fit = static_cast<int>(comm::detail::sparse_exchange_envelope_bytes / 8) - 1;
         constexpr std::array<int, 4> lengths{fit, fit + 1, 4 * fit, -1};
         return lengths[static_cast<std::size_t>(s + 2 * d + r) % lengths.size()];
       }},
  };
  for (const auto& [name, length] : patterns) {
    SECTION(name) { check_round(length, 0, MPI_COMM_WORLD); }
  }
  SECTION("many exchanges back to back, some ranks late") {
    // A rank that leaves exchange k early sends k+1's messages to ranks still in k's barrier.
    for (int round = 0; round < 12; ++round) {
      if (w.rank == round % w.size) {
        const double until = MPI_Wtime() + 0.002;
        while (MPI_Wtime() < until) {
        }
      }
      check_round(patterns[static_cast<std::size_t>(2 + round % 7)].second, round, MPI_COMM_WORLD);
    }
  }
}

TEST_CASE("sparse_exchange: a bad parcel on one rank is the same error on every rank", "[mpi][collectives][sparse_exchange]") {
  const auto w = einshard::testing::world();
  const int last = w.size - 1;
  SECTION("a peer out of range") {
    std::vector<comm::Parcel<int>> send;
    if (w.rank == last) send.push_back({w.size, {1}});
    CHECK_THROWS_WITH(comm::sparse_exchange(send, MPI_COMM_WORLD),
                      Catch::Contains("expected peers in [0, " + std::to_string(w.size) + "), got " +
                                      std::to_string(w.size)));
  }
  SECTION("two parcels for one peer") {
    std::vector<comm::Parcel<int>> send{{0, {1}}};
    if (w.rank == last) send.push_back({0, {2}});
    CHECK_THROWS_WITH(comm::sparse_exchange(send, MPI_COMM_WORLD),
                      Catch::Contains("expected one parcel per peer, got two for rank 0"));
  }
  // The communicator is usable afterwards: nothing was sent.
  check_round([](int s, int d, int) { return s != d ? 1 : -1; }, 0, MPI_COMM_WORLD);
}

TEST_CASE("gather_values: every rank's values on the root, nothing elsewhere", "[mpi][collectives]") {
  const auto w = einshard::testing::world();
  for (int root : {0, w.size - 1}) {
    const std::array<std::int64_t, 2> mine{w.rank, 10LL * w.rank + 1};
    const auto all = comm::gather_values(mine, root, MPI_COMM_WORLD);
    if (w.rank != root) {
      CHECK(all.empty());
      continue;
    }
    REQUIRE(all.size() == 2 * static_cast<std::size_t>(w.size));
    for (int r = 0; r < w.size; ++r) {
      CHECK(all[2 * static_cast<std::size_t>(r)] == r);
      CHECK(all[2 * static_cast<std::size_t>(r) + 1] == 10LL * r + 1);
    }
  }
}

}  // namespace test_sparse_exchange
