#!/usr/bin/env bash
# Issue 12's headline ratios in one go (about 3-4 minutes on 2 idle cores): LSQR and LSMR per
# iteration against PETSc's KSPLSQR (fields "ratio", "ratio_paired", "*_allreduce_per_it") and
# 8 right-hand sides as one block against 8 single solves at 10⁶ unknowns (field
# "throughput_ratio", "variant" standard = CG, and BiCGStab), at 1, 2 and 4 ranks.
# Builds through bench/sparse/run.sh (its own Release tree, build/bench-sparse: PETSc is needed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export EINSHARD_BENCH_SPARSE_TARGET=einshard_bench_sparse_lsqr EINSHARD_BENCH_RANKS="${EINSHARD_BENCH_RANKS:-1 2 4}"
"${here}/run.sh" --cases lsqr --iters 200 --reps 3 --grid 500
"${here}/run.sh" --cases multi_rhs --iters 40 --reps 2 --multi-grid 1000 --multi-variants standard,bicgstab
