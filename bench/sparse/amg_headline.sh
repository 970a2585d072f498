#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../..
# Issue 14's headline in one command: time to solution (setup + solve) of einshard CG + amg with
# its defaults against PETSc CG + BoomerAMG (PETSc's settings, and einshard's) and PETSc CG + GAMG,
# on 2-D Poisson 1000² (3 reps) and 3-D Poisson 100³ (3 reps), and 2-D Poisson 2000² (1 rep,
# against PETSc's BoomerAMG with einshard's settings, the best PETSc at 1000² in every run), at 1,
# 2 and 4 ranks (EINSHARD_BENCH_RANKS). Every solver runs once untimed before the reps (the
# benchmark's --warmup 1), and the order rotates from rep to rep. Left out: GAMG at 2000² and 3-D
# (2x to 3x BoomerAMG's time there in every earlier run) and PCHYPRE with PETSc's own settings in
# 3-D (θ = 0.25 in 3-D made it 2.3x to 6x slower than with einshard's settings). About 4 minutes
# on 2 idle cores once built (bench/sparse/run.sh builds first). Read the "amg_summary" lines:
# paired_ratio (the median over reps of einshard / best PETSc within one rep, ≤ 1: einshard is
# sooner) and ratio_vs_best_petsc (the ratio of the medians), with best_petsc naming PETSc's
# fastest configuration; the "amg_solve" lines have each solver's iterations, setup_s, solve_s and
# total_s (medians over the reps, slowest rank) and every rep's samples (*_reps_s).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"${here}/run.sh" amg --grid 1000 --reps 3 --solvers es_amg,petsc_hypre,petsc_hypre_x,petsc_gamg "$@"
"${here}/run.sh" amg --problem poisson3d --grid 100 --reps 3 --solvers es_amg,petsc_hypre_x "$@"
"${here}/run.sh" amg --grid 2000 --reps 1 --solvers es_amg,petsc_hypre_x "$@"
