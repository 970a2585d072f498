#!/usr/bin/env bash
# Runs a benchmark command and keeps its JSON lines in bench/results/<name>.jsonl (the input of
# bench/plot.py), passing everything through to stdout; the rest of the output goes to stderr.
#
#   bench/record.sh <name> <command> [args...]
#   bench/record.sh sparse_scaling env EINSHARD_BENCH_RANKS="1 2 4 8" bench/sparse/run.sh --grid 600
#   bench/record.sh local_overhead build/release/bench/einshard_bench_local --seconds 0.2
#
# The file is replaced, not appended to, so a rerun of one benchmark leaves the others' files.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name=$1
shift
mkdir -p "${here}/results"
out="${here}/results/${name}.jsonl"
tmp="${out}.partial"
"$@" | tee "${tmp}.all"
grep "^{" "${tmp}.all" > "${tmp}" || true
rm -f "${tmp}.all"
mv "${tmp}" "${out}"
echo "bench/record.sh: $(wc -l < "${out}") JSON lines in ${out}" >&2
