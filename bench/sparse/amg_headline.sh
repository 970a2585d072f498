#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../..
# Issue 14's headline in one command: time to solution (setup + solve) of einshard CG + amg with
# its defaults against PETSc CG + BoomerAMG (PETSc's settings, and einshard's) and PETSc CG + GAMG,
# on 2-D Poisson 1000² (3 reps) and 2000² (1 rep; GAMG left out: it took 2x to 2.6x BoomerAMG's
# time there in every earlier run) and 3-D Poisson 100³ (2 reps; PCHYPRE with PETSc's own settings
# left out: θ = 0.25 in 3-D made it 2.3x to 6x slower than PCHYPRE with einshard's settings in every
# earlier run, and 4x this script's time), at 1, 2 and 4 ranks
# (EINSHARD_BENCH_RANKS). About 4 minutes on 2 idle cores once built (bench/sparse/run.sh builds
# first). Read the "amg_summary" lines: ratio_vs_best_petsc (≤ 1: einshard is sooner), with
# best_petsc naming PETSc's fastest configuration; the "amg_solve" lines have each solver's
# iterations, setup_s, solve_s and total_s (medians over the reps, slowest rank).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
s=es_amg,petsc_hypre,petsc_hypre_x
"${here}/run.sh" amg --grid 1000 --reps 3 --solvers "${s},petsc_gamg" "$@"
"${here}/run.sh" amg --problem poisson3d --grid 100 --reps 2 --solvers es_amg,petsc_hypre_x,petsc_gamg "$@"
"${here}/run.sh" amg --grid 2000 --reps 1 --solvers "${s}" "$@"
