#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../..
# Builds bench/sparse/cg_petsc.cpp (target einshard_bench_sparse_cg) in its own build tree and runs
# it under mpirun at 1, 2 and 4 ranks; JSON lines on stdout (see the header of cg_petsc.cpp).
# Arguments are passed to the benchmark:
#
#   bench/sparse/run.sh                       # 2000 x 2000 Poisson, 200 CG iterations, 5 reps
#   bench/sparse/run.sh --quick               # smoke test (300 x 300, 3 reps)
#   bench/sparse/run.sh --reps 3 --precond none,jacobi,block_jacobi
#
# Environment:
#   EINSHARD_BENCH_RANKS         rank counts to run (default "1 2 4"; empty: build only)
#   EINSHARD_BENCH_SPARSE_BUILD  build directory (default <repo>/build/bench-sparse, git-ignored)
#   EINSHARD_SOURCE_DIR          einshard tree to benchmark (default this checkout)
#   EINSHARD_MPIRUN_ARGS         extra mpirun arguments (e.g. "--bind-to none")
#   EINSHARD_NUM_THREADS         torch intra-op threads per rank (default 1)
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

mkdir -p "${build}/project"
cat > "${build}/project/CMakeLists.txt.new" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(einshard_bench_sparse_build LANGUAGES CXX)
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
add_subdirectory("\${EINSHARD_BENCH_DIR}" bench-sparse)
CMAKE
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

exe="${build}/cmake/bench-sparse/einshard_bench_sparse_cg"
if ! grep -q einshard_bench_sparse_cg "${build}/cmake/build.ninja" "${build}/cmake/Makefile" 2> /dev/null; then
  echo "bench/sparse/run.sh: PETSc was not found (pkg-config PETSc/petsc); nothing to run" >&2
  exit 0
fi
cmake --build "${build}/cmake" --parallel "${EINSHARD_JOBS}" --target einshard_bench_sparse_cg >&2

export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS="${EINSHARD_NUM_THREADS:-1}"
# shellcheck disable=SC2086
for p in ${ranks}; do
  mpirun --oversubscribe -n "${p}" -x OMP_NUM_THREADS -x EINSHARD_NUM_THREADS ${EINSHARD_MPIRUN_ARGS:-} \
    "${exe}" "$@"
done
