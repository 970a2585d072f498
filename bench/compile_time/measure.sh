#!/usr/bin/env bash
# Compile-time benchmark of the installed package: what one translation unit costs a CMake user who
# links `einshard::einshard`, in both modes of the package (compiled: the default, with the library
# einshard_compiled; header-only: EINSHARD_HEADER_ONLY=ON), at -O2, against the ATen-only TU.
#
#   bench/compile_time/measure.sh [--reps N] [--modes "compiled header_only"] [--keep DIR]
#   bench/compile_time/measure.sh --notations [...]   the 50-notation comparison (measure_notations.sh)
#
# For each mode: configure this source tree (Release, CMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG", no
# tests, examples, tools or benchmarks), build, `cmake --install` it into a prefix, configure a
# consumer project against that prefix with find_package(einshard) and one object library per TU
# linking einshard::einshard, and time each TU's compile command from the consumer's
# compile_commands.json (exactly what its build runs), N times, interleaved:
#
#   a_aten    <ATen/ATen.h> and one at::einsum                     (the baseline)
#   b_local   <einshard/einshard.hpp> and one local es::einshard call
#   c_dist    <einshard/einshard.hpp> and one distributed call (column-parallel, .mesh = mesh)
#   d_solve   <einshard/sparse.hpp> and one DSparseTensor::solve
#
# Prints JSON lines: "compile_time_pkg" per compile, "compile_time_pkg_tu" per (mode, TU) with the
# median CPU (user+system) and wall seconds, peak RSS and the ratio to a_aten of the same mode and
# run, and "compile_time_pkg_library": the one-off cost of compiling einshard_compiled itself (per source).
# Needs GNU time (/usr/bin/time) and jq.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
if [[ ${1:-} == --notations ]]; then shift; exec bash "$here/measure_notations.sh" "$@"; fi
reps=3 modes="compiled header_only" keep=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "measure.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "measure.sh: needs jq" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "measure.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
if [[ -n $keep ]]; then work=$keep; mkdir -p "$work"; else
  work=$(mktemp -d "${TMPDIR:-/tmp}/einshard-compile-time-pkg.XXXXXX"); trap 'rm -rf "$work"' EXIT; fi
# shellcheck source=/dev/null
source "$root/scripts/env.sh"
load() { cut -d' ' -f1 /proc/loadavg; }

# ---- the consumer project ------------------------------------------------------------------
consumer=$work/consumer-src
mkdir -p "$consumer"
cat >"$consumer/a_aten.cpp" <<'CPP'
#include <ATen/ATen.h>
at::Tensor f(const at::Tensor& x, const at::Tensor& w) { return at::einsum("bnc,hc->bnh", {x, w}); }
CPP
cat >"$consumer/b_local.cpp" <<'CPP'
#include <einshard/einshard.hpp>
namespace es = einshard;
at::Tensor f(const at::Tensor& x, const at::Tensor& w) { return es::einshard<"b n c, h c -> b n h">(x, w); }
CPP
cat >"$consumer/c_dist.cpp" <<'CPP'
#include <einshard/einshard.hpp>
namespace es = einshard;
at::Tensor f(const at::Tensor& x, const at::Tensor& w, const es::Mesh& mesh) {
  return es::einshard<"b n c, h/tp c -> b n h/tp">(x, w, {.mesh = mesh});
}
CPP
cat >"$consumer/d_solve.cpp" <<'CPP'
#include <einshard/sparse.hpp>
namespace sp = einshard::sparse;
sp::SolveResult f(const sp::DSparseTensor& D, const sp::DVector& b) { return D.solve(b); }
CPP
cat >"$consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(einshard_compile_time LANGUAGES CXX)
find_package(einshard CONFIG REQUIRED)
foreach(tu a_aten b_local c_dist d_solve)
  add_library(${tu} OBJECT ${tu}.cpp)
  target_link_libraries(${tu} PRIVATE einshard::einshard)
endforeach()
CMAKE
tus=(a_aten b_local c_dist d_solve)

common=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"
        "-DCMAKE_PREFIX_PATH=${EINSHARD_TORCH_CMAKE_PREFIX}")
declare -A cmd
for mode in $modes; do
  header_only=OFF; [[ $mode == header_only ]] && header_only=ON
  build=$work/build-$mode prefix=$work/prefix-$mode
  cmake -S "$root" -B "$build" "${common[@]}" -DEINSHARD_HEADER_ONLY=$header_only -DEINSHARD_INSTALL=ON \
        -DEINSHARD_BUILD_TESTS=OFF -DEINSHARD_BUILD_EXAMPLES=OFF -DEINSHARD_BUILD_TOOLS=OFF \
        -DEINSHARD_BUILD_BENCHMARKS=OFF -DEINSHARD_BUILD_DOCS=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/$mode-configure.log"
  if [[ $mode == compiled ]]; then  # the one-off cost: einshard_compiled's own TUs
    for src in src/einshard.cpp src/sparse.cpp; do
      lib=$(jq -r --arg f "$src" '.[] | select(.file | endswith($f)) | .command' "$build/compile_commands.json")
      /usr/bin/time -o "$work/lib.time" -f '%e %U %S %M' bash -c "cd '$build' && $lib"
      read -r e u s m <"$work/lib.time"
      printf '{"bench":"compile_time_pkg_library","target":"einshard_compiled","source":"%s","wall_s":%s,"cpu_s":%.2f,"peak_rss_mb":%.1f,"loadavg":%s}\n' \
        "$src" "$e" "$(awk -v u="$u" -v s="$s" 'BEGIN{print u+s}')" "$(awk -v m="$m" 'BEGIN{print m/1024}')" "$(load)"
    done
  fi
  cmake --build "$build" -j 1 >"$work/$mode-build.log"
  rm -rf "$prefix"
  cmake --install "$build" --prefix "$prefix" >"$work/$mode-install.log"
  cmake -S "$consumer" -B "$work/consumer-$mode" "${common[@]}" "-DCMAKE_PREFIX_PATH=$prefix;${EINSHARD_TORCH_CMAKE_PREFIX}" \
        -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/$mode-consumer.log"
  for tu in "${tus[@]}"; do
    cmd[$mode/$tu]=$(jq -r --arg f "$tu.cpp" '.[] | select(.file | endswith($f)) | .command' \
                       "$work/consumer-$mode/compile_commands.json")
  done
  printf '{"bench":"compile_time_pkg_setup","mode":"%s","compiler":"%s","command_c_dist":"%s","cores":%s,"loadavg":%s}\n' \
    "$mode" "$(c++ --version | head -n1)" "$(sed 's/\\/\\\\/g; s/"/\\"/g' <<<"${cmd[$mode/c_dist]}")" "$(nproc)" "$(load)"
done

declare -A cpu wall rss
for ((r = 1; r <= reps; ++r)); do
  for tu in "${tus[@]}"; do
    for mode in $modes; do
      log=$work/$mode-$tu.time
      /usr/bin/time -o "$log" -f '%e %U %S %M' bash -c "cd '$work/consumer-$mode' && ${cmd[$mode/$tu]}"
      read -r e u s m <"$log"
      c=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
      m=$(awk -v k="$m" 'BEGIN { printf "%.1f", k / 1024 }')
      cpu[$mode/$tu]+="$c " wall[$mode/$tu]+="$e " rss[$mode/$tu]=$m
      printf '{"bench":"compile_time_pkg","mode":"%s","tu":"%s","rep":%d,"wall_s":%s,"cpu_s":%s,"peak_rss_mb":%s,"loadavg":%s}\n' \
        "$mode" "$tu" "$r" "$e" "$c" "$m" "$(load)"
    done
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for mode in $modes; do
  base=$(median <<<"${cpu[$mode/a_aten]}")
  for tu in "${tus[@]}"; do
    c=$(median <<<"${cpu[$mode/$tu]}")
    printf '{"bench":"compile_time_pkg_tu","mode":"%s","tu":"%s","median_cpu_s":%s,"median_wall_s":%s,"peak_rss_mb":%s,"over_aten":%s}\n' \
      "$mode" "$tu" "$c" "$(median <<<"${wall[$mode/$tu]}")" "${rss[$mode/$tu]}" \
      "$(awk -v c="$c" -v b="$base" 'BEGIN { printf "%.2f", c / b }')"
  done
done
