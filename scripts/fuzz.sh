#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds einshard's libFuzzer targets (tests/fuzz, clang++-14, no LibTorch or MPI needed) in
# build/fuzz and runs each for a bounded time on a copy of its committed seed corpus
# (tests/fuzz/corpus/<name>); new inputs go to build/fuzz/corpus/<name>, crashes to
# build/fuzz/artifacts/. Exits nonzero on the first crash, sanitizer report or broken invariant.
#
#   scripts/fuzz.sh [seconds per target, default 30] [extra libFuzzer flags...]
#   scripts/fuzz.sh 0 -runs=10000000      # a long offline run: 10^7 executions per target
#
# Environment: EINSHARD_CLANGXX (default clang++-14), EINSHARD_FUZZ_TARGETS (default: every
# fuzz_* target of tests/fuzz/CMakeLists.txt).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/.." && pwd)"
seconds="${1:-30}"
shift || true

cxx="${EINSHARD_CLANGXX:-clang++-14}"
build="${root}/build/fuzz"
mkdir -p "${root}/build"
cmake -S "${root}/tests/fuzz" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER="${cxx}" > "${build}.configure.log" 2>&1 || {
  cat "${build}.configure.log"; exit 1; }
cmake --build "${build}" -j "${EINSHARD_JOBS:-2}"

targets="${EINSHARD_FUZZ_TARGETS:-$(sed -n 's/^einshard_add_fuzzer(\(fuzz_[a-z0-9_]*\).*/\1/p' \
                                    "${root}/tests/fuzz/CMakeLists.txt")}"
mkdir -p "${build}/artifacts"
for target in ${targets}; do
  name="${target#fuzz_}"
  corpus="${build}/corpus/${name}"
  mkdir -p "${corpus}"
  limit=()
  if [[ "${seconds}" != 0 ]]; then limit=(-max_total_time="${seconds}"); fi
  echo "== ${target}: ${seconds:-unbounded} s, seeds tests/fuzz/corpus/${name}"
  # -print_final_stats gives the executions for docs/testing.md; the committed seeds are read,
  # never written.
  "${build}/${target}" "${corpus}" "${root}/tests/fuzz/corpus/${name}" "${limit[@]}" \
      -artifact_prefix="${build}/artifacts/${target}-" -print_final_stats=1 "$@" 2>&1 |
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)|ERROR|SUMMARY|invariant|Test unit written|^Done' || true
  # grep hides libFuzzer's exit status: PIPESTATUS has it.
  status=("${PIPESTATUS[@]}")
  if [[ "${status[0]}" != 0 ]]; then
    echo "fuzz: ${target} failed (exit ${status[0]}); the input is in ${build}/artifacts/" >&2
    exit 1
  fi
done
