# shellcheck shell=bash
# Sourced by the bench/*/run.sh scripts: configures a scratch CMake project that finds LibTorch
# the way einshard does, then add_subdirectory()s an einshard tree (tests, docs, examples and
# benchmarks off) and one benchmark directory, Release with -O2.
#
#   einshard_bench_configure <build dir> <benchmark dir> <name> <einshard source dir>
#
# leaves the configured tree in <build dir>/cmake, the benchmark's targets under
# <build dir>/cmake/<name>. Re-runs do not reconfigure unless something changed.
einshard_bench_configure() {
  local build="$1" bench_dir="$2" name="$3" source_dir="$4"
  mkdir -p "${build}/project"
  cat > "${build}/project/CMakeLists.txt.new" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(einshard_${name//-/_}_build LANGUAGES CXX)
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
add_subdirectory("\${EINSHARD_BENCH_DIR}" ${name})
CMAKE
  # Rewrite only on change, so re-runs do not reconfigure.
  if ! cmp -s "${build}/project/CMakeLists.txt.new" "${build}/project/CMakeLists.txt"; then
    mv "${build}/project/CMakeLists.txt.new" "${build}/project/CMakeLists.txt"
  else
    rm "${build}/project/CMakeLists.txt.new"
  fi
  local generator=()
  if command -v ninja > /dev/null; then generator=(-G Ninja); fi
  if [[ ! -f "${build}/cmake/CMakeCache.txt" ]]; then
    cmake -S "${build}/project" -B "${build}/cmake" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      "-DCMAKE_PREFIX_PATH=${EINSHARD_TORCH_CMAKE_PREFIX}" \
      "-DEINSHARD_SOURCE_DIR=${source_dir}" \
      "-DEINSHARD_BENCH_DIR=${bench_dir}" >&2
  else
    cmake "${build}/cmake" "-DEINSHARD_SOURCE_DIR=${source_dir}" "-DEINSHARD_BENCH_DIR=${bench_dir}" > /dev/null
  fi
}
