#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# What CI runs (.ci/run), in order, each step timed (docs/testing.md has the figures on the 2-core
# CI machine and why this subset):
#   1. the README's test command, scripts/run-tests.sh: the dev preset, the whole suite;
#   2. scripts/fuzz.sh: every libFuzzer target for EINSHARD_CI_FUZZ_SECONDS (default 30) each;
#   3. scripts/sanitize.sh: ASan + UBSan build of the unit suite (its
#      EINSHARD_SANITIZE_SUITES), run at 1-3 ranks, failing on any report;
#   4. the clang 14 build of the unit suite with -Wall -Wextra -Werror, run (EINSHARD_CI_CLANG=0
#      skips it).
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

clang_unit() {
  cmake --preset clang > build/clang.configure.log 2>&1 || { cat build/clang.configure.log; return 1; }
  cmake --build --preset clang -j "${EINSHARD_JOBS}" --target einshard_unit_tests
  ctest --preset clang -R '^unit$'
}

step "README test command (run-tests.sh)" "${here}/run-tests.sh"
step "fuzzers (${EINSHARD_CI_FUZZ_SECONDS:-30} s each)" "${here}/fuzz.sh" "${EINSHARD_CI_FUZZ_SECONDS:-30}"
step "ASan+UBSan (scripts/sanitize.sh)" "${here}/sanitize.sh"
if [[ "${EINSHARD_CI_CLANG:-1}" != 0 ]]; then
  step "clang 14 unit suite (-Werror)" clang_unit
fi

echo "==== ci: all steps passed"
printf '%s\n' "${summary[@]}"
printf '%-40s %4d s\n' "total" "${SECONDS}"
