// Catch2 v2 main of the unit tests (no MPI): sets LibTorch's thread count from
// $EINSHARD_NUM_THREADS (default 1), then runs the tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>

#include "test_support.hpp"

int main(int argc, char* argv[]) {
  at::set_num_threads(einshard::testing::num_threads_from_env());
  try {
    at::set_num_interop_threads(1);
  } catch (...) {
    // Only possible before the inter-op pool starts; nothing is lost if it already has.
  }
  return Catch::Session().run(argc, argv);
}
