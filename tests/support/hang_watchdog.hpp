// Which test hung, and on which rank: a watchdog for the MPI test executables.
//
// A rank that fails while the others wait in a collective hangs the executable until ctest's
// TIMEOUT kills it, and a killed run says nothing about where it stopped. The watchdog thread of
// each rank waits until $EINSHARD_TEST_WATCHDOG_SECONDS (set by einshard_add_mpi_test a little
// below the TIMEOUT; unset or 0: no watchdog) after the start, then prints
//
//   einshard test watchdog: rank 2 of 3 hung for 285 s in test case 'cg: ...' (section '...'),
//   running for 270 s
//
// (or "after its last test case, in the final reductions") to stderr and ends the process with
// exit code 124, which makes mpiexec end the other ranks, each of which prints its own line first
// if its watchdog fires too. It never calls MPI (the ranks run MPI_THREAD_FUNNELED).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace einshard::testing {

class HangWatchdog {
 public:
  static HangWatchdog& instance() {
    static HangWatchdog w;
    return w;
  }

  /// Starts the thread when the environment asks for one.
  void start(int rank, int size) {
    const char* value = std::getenv("EINSHARD_TEST_WATCHDOG_SECONDS");
    const long seconds = value ? std::strtol(value, nullptr, 10) : 0;
    if (seconds <= 0) return;
    rank_ = rank;
    size_ = size;
    begin_ = Clock::now();
    thread_ = std::thread([this, seconds] { watch(std::chrono::seconds(seconds)); });
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void test_case(const std::string& name) {
    std::lock_guard lock(mutex_);
    test_case_ = name;
    section_.clear();
    test_begin_ = Clock::now();
  }
  void section(const std::string& name) {
    std::lock_guard lock(mutex_);
    section_ = name;
  }
  void test_case_ended() {
    std::lock_guard lock(mutex_);
    last_ = test_case_;
    test_case_.clear();
    section_.clear();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void watch(std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    if (wake_.wait_until(lock, begin_ + limit, [this] { return stopped_; })) return;
    const auto now = Clock::now();
    auto secs = [&](Clock::time_point t) {
      return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(now - t).count());
    };
    std::string where;
    if (!test_case_.empty()) {
      where = "in test case '" + test_case_ + "'";
      if (!section_.empty() && section_ != test_case_) where += " (section '" + section_ + "')";
      where += ", running for " + std::to_string(secs(test_begin_)) + " s";
    } else if (!last_.empty()) {
      where = "after test case '" + last_ + "' (between test cases or in the final reductions)";
    } else {
      where = "before its first test case";
    }
    std::fprintf(stderr, "\neinshard test watchdog: rank %d of %d hung for %ld s %s\n", rank_, size_,
                 secs(begin_), where.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(124);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  bool stopped_ = false;
  int rank_ = 0, size_ = 1;
  Clock::time_point begin_, test_begin_;
  std::string test_case_, section_, last_;
};

/// Tells the watchdog where the test run is. The base class keeps its own stacks of test cases
/// and sections: every override calls it first.
struct HangWatchdogListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    HangWatchdog::instance().test_case(info.name);
  }
  void sectionStarting(const Catch::SectionInfo& info) override {
    TestEventListenerBase::sectionStarting(info);
    HangWatchdog::instance().section(info.name);
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    TestEventListenerBase::testCaseEnded(stats);
    HangWatchdog::instance().test_case_ended();
  }
};

}  // namespace einshard::testing
