#!/usr/bin/env bash
# Builds the benchmarks (release) and runs them all; JSON lines on stdout, build output on stderr.
#
#   bench/run.sh [--quick] [--no-grad] [--no-compile-time] [--reps N] [--build-dir DIR] [-- ARGS...]
#
# --quick            few iterations (smoke run), one compile per TU
# --no-grad          skip the forward+backward pass of the local benchmark
# --no-compile-time  skip bench/compile_time/measure.sh
# --reps N           compiles per TU in the compile-time benchmark (default 3)
# --build-dir DIR    build there with a plain configure instead of the `release` preset
# ARGS after --      passed to einshard_bench_local (e.g. -- --case linear_small)
#
# Uses the `release` preset of CMakePresets.json (build/release) when there is one, else a plain
# Release build in build/bench. EINSHARD_NUM_THREADS sets the intra-op threads (default 1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
quick=0 grad=1 compile_time=1 reps=3 build_dir="" extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1; reps=1; shift ;;
    --no-grad) grad=0; shift ;;
    --no-compile-time) compile_time=0; shift ;;
    --reps) reps=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

# shellcheck source=/dev/null
[[ -f $root/scripts/env.sh ]] && source "$root/scripts/env.sh"
cd "$root"
targets=(einshard_bench_local einshard_bench_compile_verify)
jobs=${EINSHARD_JOBS:-2}

{
  if [[ -z $build_dir ]] && [[ -f CMakePresets.json ]] && grep -q '"name": *"release"' CMakePresets.json; then
    build_dir=$root/build/release
    cmake --preset release -DEINSHARD_BUILD_BENCHMARKS=ON
  else
    build_dir=${build_dir:-$root/build/bench}
    cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
      -DEINSHARD_BUILD_BENCHMARKS=ON -DEINSHARD_BUILD_TESTS=OFF -DEINSHARD_BUILD_EXAMPLES=OFF \
      -DEINSHARD_BUILD_DOCS=OFF ${EINSHARD_TORCH_CMAKE_PREFIX:+-DCMAKE_PREFIX_PATH="$EINSHARD_TORCH_CMAKE_PREFIX"}
  fi
  cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
} >&2

bench_args=()
((quick)) && bench_args+=(--quick)
exe=$build_dir/bench/einshard_bench_local
"$exe" "${bench_args[@]}" ${extra[@]+"${extra[@]}"}
((grad)) && "$exe" --grad "${bench_args[@]}" ${extra[@]+"${extra[@]}"}
"$build_dir/bench/einshard_bench_compile_verify"
if ((compile_time)); then
  bash "$here/compile_time/measure.sh" --notations --reps "$reps" --build-dir "$build_dir"
fi
