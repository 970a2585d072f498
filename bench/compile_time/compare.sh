#!/usr/bin/env bash
# Before/after compile times of measure.sh's four TUs, on two source trees (no install), in one
# interleaved run: each TU is compiled with the consumer's compile command of measure.sh (the same
# definitions, -isystem paths, -O2 -DNDEBUG; compiled mode adds -DEINSHARD_COMPILED).
#
#   bench/compile_time/compare.sh BEFORE_TREE AFTER_TREE [REPS]
#
# Prints one JSON line per compile and "SUMMARY variant tu median ratio" lines (ratio to a_aten of
# the same variant). Needs GNU time.
set -euo pipefail
before=$1 after=$2 reps=${3:-2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/../../scripts/env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/einshard-compare.XXXXXX"); trap 'rm -rf "$work"' EXIT
# The TU sources, as measure.sh writes them.
sed -n "/^cat >\"\$consumer\/a_aten.cpp\" <<'CPP'/,/^tus=/p" "$here/measure.sh" | sed 's|\$consumer|'"$work"'|g' |
  grep -v '^tus=' | sed '/CMakeLists.txt/,/^CMAKE$/d' | bash
T=$(cd "${EINSHARD_TORCH_CMAKE_PREFIX%%;*}/../../include" && pwd)  # LibTorch's headers, next to its share/cmake
defs="-DEINSHARD_HAS_FFTW=1 -DEINSHARD_HAS_HYPRE=1 -DEINSHARD_HAS_METIS=1 -DMPICH_SKIP_MPICXX=1 -DOMPI_SKIP_MPICXX=1
      -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DUSE_DISTRIBUTED -DUSE_NVSHMEM -DUSE_RPC -DUSE_TENSORPIPE"
mpi="-isystem /usr/lib/x86_64-linux-gnu/openmpi/include -isystem /usr/lib/x86_64-linux-gnu/openmpi/include/openmpi -isystem /usr/include/hypre"
declare -A all
for ((r = 0; r < reps; ++r)); do for tu in a_aten b_local c_dist d_solve; do
  for v in "before compiled $before" "after compiled $after" "before header $before" "after header $after"; do
    set -- $v
    extra=""; [[ $2 == compiled ]] && extra=-DEINSHARD_COMPILED
    # shellcheck disable=SC2086
    /usr/bin/time -o "$work/t" -f '%U %S %M' c++ $defs $extra -isystem "$3/include" -isystem "$T" \
      -isystem "$T/torch/csrc/api/include" $mpi -O2 -DNDEBUG -std=gnu++20 -c "$work/$tu.cpp" -o "$work/$tu.o"
    read -r u s m <"$work/t"; c=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    all[$1-$2-$tu]+="$c "
    echo "{\"variant\":\"$1-$2\",\"tu\":\"$tu\",\"cpu_s\":$c,\"rss_mb\":$((m / 1024)),\"load\":$(cut -d' ' -f1 /proc/loadavg)}"
  done; done; done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for v in before-compiled after-compiled before-header after-header; do
  b=$(med <<<"${all[$v-a_aten]}")
  for tu in a_aten b_local c_dist d_solve; do
    m=$(med <<<"${all[$v-$tu]}"); echo "SUMMARY $v $tu median=$m ratio=$(awk -v a="$m" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
  done
done
