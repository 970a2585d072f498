#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../..
# Builds bench/distributed/unary.cpp (target einshard_bench_distributed) in its own build tree and
# runs it under mpirun at 2 and 4 ranks; JSON lines on stdout (one per case and anchor, see the
# header of unary.cpp). Arguments are passed to the benchmark:
#
#   bench/distributed/run.sh                 # full run: 16/128 MiB repartitions, 16/64 MiB others
#   bench/distributed/run.sh --quick         # smoke test (1 MiB, 3 rounds)
#   bench/distributed/run.sh --iters 30 --case repartition,partial_shard --mib 16,64
#
# Environment:
#   EINSHARD_BENCH_RANKS       rank counts to run (default "2 4"; empty: build only)
#   EINSHARD_BENCH_DIST_BUILD  build directory (default <repo>/build/bench-dist, git-ignored)
#   EINSHARD_SOURCE_DIR        einshard tree to benchmark (default this checkout); point it at a
#                              patched copy to measure a library change with the same benchmark
#   EINSHARD_MPIRUN_ARGS       extra mpirun arguments (e.g. "--bind-to none")
#   EINSHARD_NUM_THREADS       torch intra-op threads per rank (default 1)
#
# The build is a scratch CMake project: it finds LibTorch the way einshard does, then
# add_subdirectory()s the einshard tree (tests, docs, examples and benchmarks off) and this
# directory, Release with -O2.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
# shellcheck source=scripts/env.sh
source "${repo}/scripts/env.sh"

build="${EINSHARD_BENCH_DIST_BUILD:-${repo}/build/bench-dist}"
source_dir="$(cd "${EINSHARD_SOURCE_DIR:-${repo}}" && pwd)"
ranks="${EINSHARD_BENCH_RANKS-2 4}"

mkdir -p "${build}/project"
cat > "${build}/project/CMakeLists.txt.new" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(einshard_bench_distributed_build LANGUAGES CXX)
# LibTorch is found in this top directory, so its imported targets (whose interface properties
# name torch_cpu in generator expressions) are visible to every directory below, also with einshard
# trees that do not find it GLOBAL themselves (patched copies of older checkouts).
list(APPEND CMAKE_MODULE_PATH "\${EINSHARD_SOURCE_DIR}/cmake")
include(einshardDependencies)
einshard_torch_before_find()
find_package(Torch REQUIRED)
einshard_torch_after_find()
set(EINSHARD_BUILD_TESTS OFF)
set(EINSHARD_BUILD_EXAMPLES OFF)
set(EINSHARD_BUILD_BENCHMARKS OFF)
set(EINSHARD_BUILD_DOCS OFF)
set(EINSHARD_INSTALL OFF)
add_subdirectory("\${EINSHARD_SOURCE_DIR}" einshard-build)
add_subdirectory("\${EINSHARD_BENCH_DIR}" bench-distributed)
CMAKE
# Rewrite only on change, so re-runs do not reconfigure.
if ! cmp -s "${build}/project/CMakeLists.txt.new" "${build}/project/CMakeLists.txt"; then
  mv "${build}/project/CMakeLists.txt.new" "${build}/project/CMakeLists.txt"
else
  rm "${build}/project/CMakeLists.txt.new"
fi

generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
if [[ ! -f "${build}/cmake/CMakeCache.txt" ]]; then
  cmake -S "${build}/project" -B "${build}/cmake" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
    "-DCMAKE_PREFIX_PATH=${EINSHARD_TORCH_CMAKE_PREFIX}" \
    "-DEINSHARD_SOURCE_DIR=${source_dir}" \
    "-DEINSHARD_BENCH_DIR=${here}" >&2
else
  cmake "${build}/cmake" "-DEINSHARD_SOURCE_DIR=${source_dir}" "-DEINSHARD_BENCH_DIR=${here}" > /dev/null
fi
cmake --build "${build}/cmake" --parallel "${EINSHARD_JOBS}" >&2

exe="${build}/cmake/bench-distributed/einshard_bench_distributed"
# shellcheck disable=SC2086
for p in ${ranks}; do
  mpirun --oversubscribe -n "${p}" -x OMP_NUM_THREADS=1 ${EINSHARD_MPIRUN_ARGS:-} "${exe}" "$@"
done
