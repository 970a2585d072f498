#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../..
# Builds bench/sparse/cg_petsc.cpp (target einshard_bench_sparse_cg; with a first argument `amg`,
# amg_petsc.cpp, einshard_bench_sparse_amg) in its own build tree and runs it under mpirun at 1, 2
# and 4 ranks; JSON lines on stdout (see the header of each program).
# Arguments are passed to the benchmark:
#
#   bench/sparse/run.sh                       # 2000 x 2000 Poisson, 200 CG iterations, 5 reps
#   bench/sparse/run.sh --quick               # smoke test (300 x 300, 3 reps)
#   bench/sparse/run.sh --reps 3 --precond none,jacobi,block_jacobi
#   bench/sparse/run.sh amg --grid 1000       # amg_petsc.cpp: time to solution with AMG
#   bench/sparse/run.sh amg --cases pipecg    #   and pipelined CG against KSPPIPECG
#
# Environment:
#   EINSHARD_BENCH_RANKS         rank counts to run (default "1 2 4"; empty: build only)
#   EINSHARD_BENCH_SPARSE_BUILD  build directory (default <repo>/build/bench-sparse, git-ignored)
#   EINSHARD_SOURCE_DIR          einshard tree to benchmark (default this checkout)
#   EINSHARD_MPIRUN_ARGS         extra mpirun arguments (e.g. "--bind-to none")
#   EINSHARD_NUM_THREADS         torch intra-op threads per rank (default 1)
#   EINSHARD_BENCH_SPARSE_TARGET which benchmark: einshard_bench_sparse_cg (default) or
#                                einshard_bench_sparse_lsqr (LSQR/LSMR vs KSPLSQR, solve backward;
#                                see the header of lsqr_petsc.cpp for its arguments)
#
# Needs PETSc through pkg-config (Debian: libpetsc-real-dev); without it nothing is built and
# the script says so. The build is a scratch CMake project: it finds LibTorch the way einshard
# does, then add_subdirectory()s the einshard tree (tests, docs, examples and benchmarks off) and
# this directory, Release with -O2.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
# shellcheck source=scripts/env.sh
source "${repo}/scripts/env.sh"

build="${EINSHARD_BENCH_SPARSE_BUILD:-${repo}/build/bench-sparse}"
source_dir="$(cd "${EINSHARD_SOURCE_DIR:-${repo}}" && pwd)"
ranks="${EINSHARD_BENCH_RANKS-1 2 4}"

# shellcheck source=bench/scratch-build.sh
source "${here}/../scratch-build.sh"
einshard_bench_configure "${build}" "${here}" bench-sparse "${source_dir}"

target="${EINSHARD_BENCH_SPARSE_TARGET:-einshard_bench_sparse_cg}"
if [[ "${1:-}" == amg ]]; then
  target=einshard_bench_sparse_amg
  shift
fi
exe="${build}/cmake/bench-sparse/${target}"
if ! grep -q "${target}" "${build}/cmake/build.ninja" "${build}/cmake/Makefile" 2> /dev/null; then
  echo "bench/sparse/run.sh: PETSc was not found (pkg-config PETSc/petsc); nothing to run" >&2
  exit 0
fi
cmake --build "${build}/cmake" --parallel "${EINSHARD_JOBS}" --target "${target}" >&2

export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS="${EINSHARD_NUM_THREADS:-1}"
# shellcheck disable=SC2086
for p in ${ranks}; do
  mpirun --oversubscribe -n "${p}" -x OMP_NUM_THREADS -x EINSHARD_NUM_THREADS ${EINSHARD_MPIRUN_ARGS:-} \
    "${exe}" "$@"
done
