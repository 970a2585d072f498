// The hang watchdog's own test (registered as watchdog.np2 in tests/CMakeLists.txt, which checks
// the printed line): rank 0 waits for a message nobody sends while the other ranks finish and wait
// in the final reductions. Hidden ([.]): the suite's normal runs skip it.

#include <mpi.h>

#include <catch2/catch.hpp>

namespace test_watchdog {

TEST_CASE("watchdog: rank 0 waits for a message that never comes", "[.watchdog]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    int never = 0;
    MPI_Recv(&never, 1, MPI_INT, MPI_ANY_SOURCE, 777, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  SUCCEED("not reached on rank 0");
}

}  // namespace test_watchdog
