#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# What CI runs (.ci/run), in order, each step timed (docs/testing.md has the figures on the 2-core
# CI machine and why this order):
#   1. the README's test command, scripts/run-tests.sh: the dev preset, the whole suite (on a clean
#      clone build/dev is configured with -g1 first, see readme_tests);
#   2. scripts/sanitize.sh: the second compiler, clang 14 with -Wall -Wextra -Werror, building every
#      suite with ASan + UBSan (+ LeakSanitizer), the unit suite and the MPI suites run at 3 ranks,
#      failing on any report; at the same time scripts/fuzz.sh: every libFuzzer target for
#      EINSHARD_CI_FUZZ_SECONDS (default 10) each (EINSHARD_CI_FUZZ_ALONGSIDE=0 runs it afterwards
#      instead).
# Stops at the first failing step. Runs from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=env.sh
source "${here}/env.sh"
cd "${EINSHARD_ROOT}"

summary=()
step() {
  local name="$1"
  shift
  local start=${SECONDS}
  echo "==== ci: ${name}"
  "$@"
  summary+=("$(printf '%-40s %4d s' "${name}" $((SECONDS - start)))")
}

# The fuzzers need no LibTorch and one core each, one after the other: beside the sanitizer build
# they cost its wall time only the CPU they take (their seconds are wall time either way). Their
# report comes after the sanitizers' so the two do not interleave.
sanitize_and_fuzz() {
  local seconds="${EINSHARD_CI_FUZZ_SECONDS:-10}"
  if [[ "${EINSHARD_CI_FUZZ_ALONGSIDE:-1}" == 0 ]]; then
    "${here}/sanitize.sh"
    "${here}/fuzz.sh" "${seconds}"
    return
  fi
  mkdir -p build
  local log=build/fuzz.ci.log
  "${here}/fuzz.sh" "${seconds}" > "${log}" 2>&1 &
  local fuzz_pid=$!
  local status=0 fuzz_status=0
  "${here}/sanitize.sh" || status=$?
  wait "${fuzz_pid}" || fuzz_status=$?
  echo "==== ci: fuzzers (${seconds} s each, run alongside)"
  cat "${log}"
  if [[ "${fuzz_status}" != 0 ]]; then
    echo "ci: the fuzzers failed (exit ${fuzz_status})" >&2
    return 1
  fi
  return "${status}"
}

# CI never attaches a debugger, and full debug information is nearly half the compile time of a
# torch-heavy test file at -O0 (tests/mpi/test_unary.cpp: 23.4 s of CPU at -g, 12.6 s at -g1):
# on a clean clone build/dev is configured once with line tables only (-g1: file and line in
# backtraces and reports) before the README command, whose `cmake --preset dev` keeps the cached
# value. An existing build/dev (a developer's) is left as it is; EINSHARD_CI_DEV_G1=0 skips this.
readme_tests() {
  if [[ "${EINSHARD_CI_DEV_G1:-1}" != 0 && ! -f build/dev/CMakeCache.txt ]]; then
    "${here}/install-deps.sh"
    # shellcheck source=env.sh
    source "${here}/env.sh"
    mkdir -p build
    cmake --preset dev -DCMAKE_CXX_FLAGS_DEBUG=-g1 > build/dev.configure.log 2>&1 || {
      cat build/dev.configure.log; return 1; }
  fi
  "${here}/run-tests.sh"
}

step "README test command (run-tests.sh)" readme_tests
step "clang 14 ASan+UBSan, fuzzers alongside" sanitize_and_fuzz

echo "==== ci: all steps passed"
printf '%s\n' "${summary[@]}"
printf '%-40s %4d s\n' "total" "${SECONDS}"
