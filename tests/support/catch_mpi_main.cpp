// Catch2 v2 main of the MPI tests.
//
// Every rank runs the same Catch run (same arguments, same test order, same random seed).
// Rank 0 reports to stdout as usual. The other ranks report into a buffer; once every rank has
// finished, rank 0 prints, in rank order, the report of each rank that failed:
//
//   ==== rank 3 of 4: 2 failed assertions ====
//   <that rank's Catch output>
//   mpi: 1 of 4 ranks failed
//
// (a report identical to an earlier rank's is not repeated: "..., the same report as rank 1")
// and every rank exits with the same code (the largest of the ranks' Catch results), so mpiexec
// and ctest see the failure whichever rank it happened on. With `-o <file>`, a `%r` in the file
// name is replaced by the rank and each rank writes its own report there (e.g. `-r junit -o
// report-%r.xml`); then nothing is buffered.
//
// A test that fails on one rank while the others wait in a collective still hangs: ctest's
// TIMEOUT (cmake/EinshardTesting.cmake) is the backstop, and shortly before it the watchdog
// (hang_watchdog.hpp) prints which test case each rank is stuck in and ends the run. Exceptions inside a test case are
// Catch's; an exception escaping the run itself is recorded as a failure of that rank, and
// the rank still joins the final reductions, so the others finish.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hang_watchdog.hpp"
#include "test_support.hpp"

// Under AddressSanitizer (the asan preset) LeakSanitizer checks each rank for leaks.
#if defined(__SANITIZE_ADDRESS__)
#define EINSHARD_TEST_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EINSHARD_TEST_LEAK_CHECK 1
#endif
#endif
#ifdef EINSHARD_TEST_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

using einshard::testing::HangWatchdogListener;
CATCH_REGISTER_LISTENER(HangWatchdogListener)

namespace {

void configure_threads() {
  at::set_num_threads(einshard::testing::num_threads_from_env());
  try {
    at::set_num_interop_threads(1);
  } catch (...) {
    // Only possible before the inter-op pool starts; nothing is lost if it already has.
  }
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

struct RankResult {
  int code = 0;         // Catch's result: failed assertions (capped at 255) or an error code
  std::string report;   // buffered Catch output (ranks other than 0)
};

RankResult run_tests(int argc, char* argv[], int rank) {
  RankResult result;
  std::ostringstream buffer;
  std::streambuf* saved = nullptr;
  bool buffered = false;
  try {
    Catch::Session runner;
    int code = runner.applyCommandLine(argc, argv);
    if (code == 0) {
      Catch::ConfigData& data = runner.configData();

      // One seed for all ranks, so `--order rand` and `--rng-seed time` agree everywhere.
      unsigned int seed = data.rngSeed;
      MPI_Bcast(&seed, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
      data.rngSeed = seed;

      // mpiexec often gives the ranks a pseudo-terminal, so Catch's "auto" would colour reports
      // that end up in ctest logs; colour only on request (--use-colour yes).
      if (data.useColour == Catch::UseColour::Auto) data.useColour = Catch::UseColour::No;

      if (!data.outputFilename.empty()) {
        replace_all(data.outputFilename, "%r", std::to_string(rank));
      } else if (rank != 0) {
        // Catch's console stream takes std::cout's buffer when the runner builds its
        // configuration, which happens inside run(): redirect before it.
        saved = std::cout.rdbuf(buffer.rdbuf());
        buffered = true;
      }
      const bool listing = data.listTests || data.listTestNamesOnly || data.listTags || data.listReporters;
      code = runner.run();
      if (listing) code = 0;  // Catch v2 returns the number of listed items
    }
    result.code = code;
  } catch (const std::exception& e) {
    buffer << "\nexception escaped the Catch run on rank " << rank << ": " << e.what() << '\n';
    result.code = 255;
  } catch (...) {
    buffer << "\nunknown exception escaped the Catch run on rank " << rank << '\n';
    result.code = 255;
  }
  // The runner (and its stream) is gone: restore std::cout.
  if (buffered) {
    std::cout.flush();
    std::cout.rdbuf(saved);
  }
  result.report = buffer.str();
  if (rank == 0 && !result.report.empty()) std::cout << result.report;  // rank 0's own exception
  return result;
}

}  // namespace

int main(int argc, char* argv[]) {
  int provided = 0;
  {
#ifdef EINSHARD_TEST_LEAK_CHECK
    // What MPI_Init allocates is Open MPI's, kept until exit and some of it unreachable.
    __lsan::ScopedDisabler not_einshard;
#endif
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  int exit_code = 0;
  einshard::testing::HangWatchdog::instance().start(rank, size);
  {
    configure_threads();
    RankResult mine = run_tests(argc, argv, rank);
    std::cout.flush();

    // Which ranks failed (every rank learns the exit code; rank 0 learns who failed).
    int code = std::clamp(mine.code, 0, 255);
    int max_code = 0;
    MPI_Allreduce(&code, &max_code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    std::vector<int> codes(rank == 0 ? size : 0);
    MPI_Gather(&code, 1, MPI_INT, codes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);

    // Reports of failing ranks, one after the other, in rank order.
    constexpr int tag = 4242;
    if (rank == 0) {
      int failed = code != 0 ? 1 : 0;
      std::vector<std::pair<int, std::string>> shown;  // (rank, report) already printed
      for (int r = 1; r < size; ++r) {
        if (codes[r] == 0) continue;
        ++failed;
        int length = 0;
        MPI_Recv(&length, 1, MPI_INT, r, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        std::string report(static_cast<std::size_t>(length), '\0');
        MPI_Recv(report.data(), length, MPI_CHAR, r, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        std::cout << "\n==== rank " << r << " of " << size << ": " << codes[r]
                  << (codes[r] == 255 ? " (or more) failed assertions or an error" : " failed assertions");
        const auto same = std::find_if(shown.begin(), shown.end(),
                                       [&](const auto& s) { return s.second == report; });
        if (same != shown.end() && !report.empty()) {
          std::cout << ", the same report as rank " << same->first << " ====\n";
          continue;
        }
        std::cout << " ====\n";
        if (report.empty())
          std::cout << "(no buffered output: see the file given with -o)\n";
        else
          std::cout << report << (report.back() == '\n' ? "" : "\n");
        shown.emplace_back(r, std::move(report));
      }
      if (failed > 0) std::cout << "mpi: " << failed << " of " << size << " ranks failed" << std::endl;
      std::cout.flush();
    } else if (code != 0) {
      std::string& report = mine.report;
      if (report.size() > static_cast<std::size_t>(INT_MAX)) report.resize(INT_MAX);
      int length = static_cast<int>(report.size());
      MPI_Send(&length, 1, MPI_INT, 0, tag, MPI_COMM_WORLD);
      MPI_Send(report.data(), length, MPI_CHAR, 0, tag, MPI_COMM_WORLD);
    }
    exit_code = max_code;
  }
  einshard::testing::HangWatchdog::instance().stop();

#ifdef EINSHARD_TEST_LEAK_CHECK
  // The leak check, before MPI_Finalize unloads Open MPI's plugins: afterwards the allocation
  // stacks of their progress threads point into unmapped code, which no suppression
  // (tests/sanitizers/lsan.supp) can name. Once done, it does not run again at exit.
  __lsan_do_leak_check();
#endif
  MPI_Finalize();
  return exit_code;
}
