#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# The AddressSanitizer + UndefinedBehaviorSanitizer run: configures the `asan` preset (build/asan:
# clang 14, warnings as errors), builds the chosen test executables and runs their tests, the MPI
# suites at 3 ranks; any ASan, UBSan or LeakSanitizer report fails the test (the preset's ASAN_OPTIONS abort_on_error=1 and
# detect_leaks=1, UBSAN_OPTIONS halt_on_error=1; LSan's suppressions, tests/sanitizers/lsan.supp,
# name Open MPI's PMIx client only), and so the script.
#
#   scripts/sanitize.sh                               # what CI runs: every suite
#   EINSHARD_SANITIZE_SUITES="sparse" scripts/sanitize.sh   # one suite
#
# Environment:
#   EINSHARD_SANITIZE_SUITES  suites to build and run (default: all of them, "unit mpi spectral
#                             stencil sparse model"; docs/testing.md has the cost of each on the
#                             2-core CI machine)
#   EINSHARD_SANITIZE_RANKS   world sizes of the MPI suites (default "3": an odd count with a
#                             middle rank and uneven shards; "1 3" adds one process, 25 s of ASan)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=env.sh
source "${here}/env.sh"
cd "${EINSHARD_ROOT}"

suites="${EINSHARD_SANITIZE_SUITES:-unit mpi spectral stencil sparse model}"
ranks="${EINSHARD_SANITIZE_RANKS:-3}"

mkdir -p build
cmake --preset asan > build/asan.configure.log 2>&1 || { cat build/asan.configure.log; exit 1; }
targets=()
tests=()
for suite in ${suites}; do
  targets+=("einshard_${suite}_tests")
  if [[ "${suite}" == unit ]]; then
    tests+=("^unit\$")
  else
    # A suite's test cases that need no MPI (sparse.unit), then its MPI runs.
    tests+=("^${suite}\\.unit\$")
    for n in ${ranks}; do tests+=("^${suite}\\.np${n}\$"); done
  fi
done
cmake --build --preset asan -j "${EINSHARD_JOBS}" --target "${targets[@]}"

regex="$(IFS='|'; echo "${tests[*]}")"
ctest --preset asan -j "${EINSHARD_JOBS}" -R "${regex}"
