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

# shellcheck source=bench/scratch-build.sh
source "${here}/../scratch-build.sh"
einshard_bench_configure "${build}" "${here}" bench-distributed "${source_dir}"
cmake --build "${build}/cmake" --parallel "${EINSHARD_JOBS}" >&2

exe="${build}/cmake/bench-distributed/einshard_bench_distributed"
# shellcheck disable=SC2086
for p in ${ranks}; do
  mpirun --oversubscribe -n "${p}" -x OMP_NUM_THREADS=1 ${EINSHARD_MPIRUN_ARGS:-} "${exe}" "$@"
done
