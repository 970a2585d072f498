#!/usr/bin/env bash
# Compile-time benchmark: how long one translation unit with 50 distinct `es::einshard<"...">`
# notations takes to compile, against the same TU calling `at::einsum` with the equivalent
# equations, a TU that only static_asserts the 50 notations (the constexpr parser alone), and the
# baselines that include the same headers and do nothing.
#
#   bench/compile_time/measure.sh --notations [--reps N] [--build-dir DIR] [--keep DIR]
#
# --reps N         compile every TU N times (default 3), interleaved TU by TU so drift spreads evenly
# --build-dir DIR  take the compiler and flags from DIR/compile_commands.json (the flags of
#                  bench/local_overhead.cpp in that build); default build/release, then build/bench.
#                  Without one: c++ -O2 -std=c++20 with LibTorch's include directories from
#                  $EINSHARD_TORCH_CMAKE_PREFIX (scripts/env.sh) and MPI's from mpicxx --showme.
# --keep DIR       generate the TUs into DIR and keep them (default: a temporary directory)
#
# Prints JSON lines: one per compile ("compile_time"), one summary per TU ("compile_time_tu": median
# and min wall seconds, median CPU seconds, peak RSS), and the marginal costs
# ("compile_time_marginal": TU minus its baseline, per notation). Peak memory needs GNU time
# (/usr/bin/time); without it the script falls back to bash's `time` and reports null memory.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
reps=3
build_dir=""
keep=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "measure.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

if [[ -n $keep ]]; then
  work=$keep
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/einshard-compile-time.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
bash "$here/generate.sh" "$here/notations.txt" "$work"
count=$(grep -cv '^[[:space:]]*\(#\|$\)' "$here/notations.txt")

# ---- compiler and flags ---------------------------------------------------------------------
compiler="" flags=() source_of_flags=""
if [[ -z $build_dir ]]; then
  for d in "$root/build/release" "$root/build/bench"; do
    [[ -f $d/compile_commands.json ]] && { build_dir=$d; break; }
  done
fi
if [[ -n $build_dir && -f $build_dir/compile_commands.json ]] && command -v jq >/dev/null; then
  # The command that compiled bench/local_overhead.cpp, minus its -o/-c/source/dependency arguments.
  cmd=$(jq -r '.[] | select(.file | endswith("bench/local_overhead.cpp")) |
               (.command // (.arguments | join(" ")))' "$build_dir/compile_commands.json" | head -n1)
  if [[ -n $cmd ]]; then
    read -r -a words <<<"$cmd"
    compiler=${words[0]}
    for ((i = 1; i < ${#words[@]}; ++i)); do
      case ${words[i]} in
        -o|-c|-MF|-MT|-MQ) ((++i)) ;;
        -MD|-MMD) ;;
        *local_overhead.cpp) ;;
        *) flags+=("${words[i]}") ;;
      esac
    done
    source_of_flags="$build_dir/compile_commands.json"
  fi
fi
if [[ -z $compiler ]]; then
  # shellcheck source=/dev/null
  [[ -f $root/scripts/env.sh ]] && source "$root/scripts/env.sh"
  torch_include="${EINSHARD_TORCH_CMAKE_PREFIX:?set EINSHARD_TORCH_CMAKE_PREFIX or build first}/../../include"
  compiler=${CXX:-c++}
  flags=(-O2 -DNDEBUG -std=c++20 -I"$root/include" -isystem "$torch_include"
         -isystem "$torch_include/torch/csrc/api/include")
  if command -v mpicxx >/dev/null; then
    for f in $(mpicxx --showme:compile 2>/dev/null); do flags+=("$f"); done
  fi
  source_of_flags="fallback (-O2 -std=c++20)"
fi

have_gnu_time=0
[[ -x /usr/bin/time ]] && /usr/bin/time -f '%e' true >/dev/null 2>&1 && have_gnu_time=1

json_flags=$(printf '%s ' "$compiler" "${flags[@]}" | sed 's/\\/\\\\/g; s/"/\\"/g; s/ $//')
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo null; }
printf '{"bench":"compile_time_setup","notations":%d,"reps":%d,"compiler":"%s","flags_from":"%s","command":"%s","cores":%s,"loadavg":%s}\n' \
  "$count" "$reps" "$("$compiler" --version | head -n1 | sed 's/"/\\"/g')" "$source_of_flags" \
  "$json_flags" "$(nproc)" "$(load)"

# ---- compile --------------------------------------------------------------------------------
tus=(baseline_aten notation1_einsum notations_einsum baseline_notation notations_check
     baseline_einshard notation1_einshard notations_einshard)
declare -A wall cpu rss
for ((r = 1; r <= reps; ++r)); do
  for tu in "${tus[@]}"; do
    src=$work/$tu.cpp obj=$work/$tu.o log=$work/$tu.time
    if ((have_gnu_time)); then
      /usr/bin/time -o "$log" -f '%e %U %S %M' "$compiler" "${flags[@]}" -c "$src" -o "$obj"
      read -r e u s m <"$log"
      m=$(awk -v k="$m" 'BEGIN { printf "%.1f", k / 1024 }')
    else
      TIMEFORMAT='%R %U %S'
      { time "$compiler" "${flags[@]}" -c "$src" -o "$obj" 2>"$work/$tu.err"; } 2>"$log"
      read -r e u s <"$log"
      m=null
    fi
    c=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    wall[$tu]+="$e " cpu[$tu]+="$c " rss[$tu]=$m
    printf '{"bench":"compile_time","tu":"%s","rep":%d,"wall_s":%s,"cpu_s":%s,"peak_rss_mb":%s,"loadavg":%s}\n' \
      "$tu" "$r" "$e" "$c" "$m" "$(load)"
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minimum() { tr ' ' '\n' | grep . | sort -g | head -n1; }
declare -A med
for tu in "${tus[@]}"; do
  med[$tu]=$(median <<<"${cpu[$tu]}")
  printf '{"bench":"compile_time_tu","tu":"%s","median_wall_s":%s,"min_wall_s":%s,"median_cpu_s":%s,"peak_rss_mb":%s}\n' \
    "$tu" "$(median <<<"${wall[$tu]}")" "$(minimum <<<"${wall[$tu]}")" "${med[$tu]}" "${rss[$tu]}"
done
marginal() {  # name tu baseline notations: median CPU seconds above the baseline, per notation
  awk -v n="$1" -v t="${med[$2]}" -v b="${med[$3]}" -v k="$4" -v tu="$2" -v base="$3" 'BEGIN {
    printf "{\"bench\":\"compile_time_marginal\",\"what\":\"%s\",\"tu\":\"%s\",\"baseline\":\"%s\",\"notations\":%d,\"marginal_cpu_s\":%.2f,\"per_notation_ms\":%.1f}\n", n, tu, base, k, t - b, 1000 * (t - b) / k }'
}
# All 50 over the TU that includes the same headers; the first notation alone (one-off cost: the
# engine's inline functions are instantiated once per TU); the 49 further notations; the parser
# alone; and what including <einshard/einshard.hpp> costs over <ATen/ATen.h>.
marginal einshard_all notations_einshard baseline_einshard "$count"
marginal einshard_first notation1_einshard baseline_einshard 1
marginal einshard_each_further notations_einshard notation1_einshard $((count - 1))
marginal einsum_all notations_einsum baseline_aten "$count"
marginal einsum_first notation1_einsum baseline_aten 1
marginal einsum_each_further notations_einsum notation1_einsum $((count - 1))
marginal parser_only notations_check baseline_notation "$count"
marginal einshard_headers baseline_einshard baseline_aten 1
awk -v a="${med[notations_einshard]}" -v a1="${med[notation1_einshard]}" -v b="${med[baseline_einshard]}" \
    -v c="${med[notations_einsum]}" -v c1="${med[notation1_einsum]}" -v d="${med[baseline_aten]}" -v k="$count" 'BEGIN {
  printf "{\"bench\":\"compile_time_ratio\",\"einshard_tu_over_einsum_tu\":%.2f,\"einshard_marginal_over_einsum_marginal\":%.1f,\"extra_per_notation_ms\":%.1f,\"extra_per_further_notation_ms\":%.1f}\n", a / c, ((c - d) > 0 ? (a - b) / (c - d) : -1), 1000 * ((a - b) - (c - d)) / k, 1000 * ((a - a1) - (c - c1)) / (k - 1) }'
