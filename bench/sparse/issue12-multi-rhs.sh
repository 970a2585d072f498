#!/usr/bin/env bash
# Issue 12's multi-RHS ratios in one go (about 4 minutes on 2 idle cores): 8 right-hand sides as
# one block (D.solve(B), B an (n_local, 8) block) against 8 single solves of its columns, CG
# ("variant" standard) and BiCGStab, Jacobi, a fixed iteration count, at 1, 2 and 4 ranks, over
# problem sizes and stencils: 2-D 5-point at 10⁴, 10⁵, 10⁶ unknowns, 3-D 7-point at 10⁶ and 3-D
# 27-point at 5.1·10⁵. JSON lines "sparse_multi_rhs", field "throughput_ratio" (singles / block),
# with "stencil", "n", "ranks", "isa" (the block product's instruction set: avx2, and portable,
# what a CPU without AVX2 runs, at 1 rank for the 10⁶ 5-point and the 27-point problems).
# Builds through bench/sparse/run.sh (its own Release tree, build/bench-sparse: PETSc is needed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
EINSHARD_BENCH_RANKS='' EINSHARD_BENCH_SPARSE_TARGET=einshard_bench_sparse_lsqr "${here}/run.sh"
exe="${EINSHARD_BENCH_SPARSE_BUILD:-${here}/../../build/bench-sparse}/cmake/bench-sparse/einshard_bench_sparse_lsqr"
export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS=1
run() {  # ranks, then the benchmark's arguments
  local p="$1"
  shift
  mpirun --allow-run-as-root --oversubscribe -n "${p}" -x OMP_NUM_THREADS -x EINSHARD_NUM_THREADS "${exe}" \
    --cases multi_rhs --multi-variants standard,bicgstab "$@" | grep '"sparse_multi_rhs"'
}
for p in ${EINSHARD_BENCH_RANKS:-1 2 4}; do
  isa=avx2
  [[ "${p}" == 1 ]] && isa=avx2,portable
  run "${p}" --multi-grid 100 --iters 200 --reps 3
  run "${p}" --multi-grid 316 --iters 60 --reps 3
  run "${p}" --multi-grid 1000 --iters 20 --reps 2 --multi-isa "${isa}"
  run "${p}" --multi-grid 100 --multi-stencil 7 --iters 20 --reps 2
  run "${p}" --multi-grid 80 --multi-stencil 27 --iters 20 --reps 2 --multi-isa "${isa}"
done
