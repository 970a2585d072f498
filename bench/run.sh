#!/usr/bin/env bash
# Builds the benchmarks (release preset) and runs them; JSON lines on stdout, build output on stderr.
#
#   bench/run.sh --suite NAME [ARGS...]   one capability, as docs/performance.md publishes it
#   bench/run.sh [--quick] [--no-grad] [--no-compile-time] [--reps N] [--build-dir DIR] [-- ARGS...]
#
# Suites (ARGS go to the benchmark program, or to the script it delegates to):
#   local          per-call overhead against torch::einsum, forward and forward + backward
#   compile_time   compile time of one TU against the ATen-only TU (installed package, compiled mode)
#   distributed    collectives and repartitions against hand-written MPI (bench/distributed/run.sh)
#   contraction    the tensor-parallel MLP step and a tiny cached call against the same by hand
#   fft            einfft against FFTW-MPI: 3-D 128³ and 256³ complex and real (r2c, c2r), 1-D 2^20 and 2^22
#   halo           einhalo against a hand-written neighbour exchange
#   model          a data-parallel step with gradient hooks against MPI_Allreduce per bucket
# The sparse suites are bench/sparse/run.sh's (bench/sparse/run.sh --list).
#
# Without --suite: the local benchmark and the compile-time notations, as below.
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

if [[ ${1:-} == --suite ]]; then
  suite=${2:?bench/run.sh: --suite needs a name}
  shift 2
  # shellcheck source=/dev/null
  [[ -f $root/scripts/env.sh ]] && source "$root/scripts/env.sh"
  cd "$root"
  export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS="${EINSHARD_NUM_THREADS:-1}"
  mpi=(mpirun --oversubscribe -x OMP_NUM_THREADS -x EINSHARD_NUM_THREADS)
  [[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
  build() {  # the release preset's targets
    { cmake --preset release -DEINSHARD_BUILD_BENCHMARKS=ON
      cmake --build build/release -j "${EINSHARD_JOBS:-2}" --target "$@"; } >&2
  }
  b=build/release/bench
  case $suite in
    local)
      build einshard_bench_local
      "$b/einshard_bench_local" "$@"
      "$b/einshard_bench_local" --grad "$@" ;;
    compile_time)
      bash "$here/compile_time/measure.sh" --modes compiled --reps 2 "$@" ;;
    distributed)
      EINSHARD_BENCH_RANKS="${EINSHARD_BENCH_RANKS-2 4}" bash "$here/distributed/run.sh" --iters 15 "$@" ;;
    contraction)
      build einshard_bench_contraction
      for p in 2 4; do "${mpi[@]}" -n $p "$b/contraction/einshard_bench_contraction" --widths 512,1024,2048 --iters 21 "$@"; done ;;
    fft)
      build einshard_bench_fft einshard_bench_rfft einshard_bench_fft1d
      for p in 1 2 4; do "${mpi[@]}" -n $p "$b/fft/einshard_bench_fft" --n 128 --iters 9 "$@"; done
      for p in 1 2 4; do "${mpi[@]}" -n $p "$b/fft/einshard_bench_fft" --n 256 --iters 5 "$@"; done
      for p in 1 2 4; do "${mpi[@]}" -n $p "$b/fft/einshard_bench_rfft" --n 256 --iters 5 "$@"; done
      for p in 1 2 4; do "${mpi[@]}" -n $p "$b/fft/einshard_bench_fft1d" --log2n 20 --iters 9 --prime "$@"; done
      for p in 2 4; do "${mpi[@]}" -n $p "$b/fft/einshard_bench_fft1d" --log2n 22 --iters 7 "$@"; done ;;
    halo)
      build einshard_bench_halo
      "${mpi[@]}" -n 2 "$b/halo/einshard_bench_halo" --iters 201 "$@" ;;
    model)
      build einshard_bench_ddp_hooks
      for mib in 25 4 1; do
        "${mpi[@]}" -n 2 "$b/model/einshard_bench_ddp_hooks" --layers 8 --width 512 --batch 64 --bucket-mib $mib --iters 30 "$@"
      done ;;
    *) echo "bench/run.sh: unknown suite '$suite' (local, compile_time, distributed, contraction, fft, halo, model;" \
         "the sparse ones are bench/sparse/run.sh --list)" >&2; exit 2 ;;
  esac
  exit 0
fi

while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1; reps=1; shift ;;
    --no-grad) grad=0; shift ;;
    --no-compile-time) compile_time=0; shift ;;
    --reps) reps=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
