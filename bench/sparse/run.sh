#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/../..
# The sparse benchmarks (bench/sparse/*.cpp), built in their own tree and run under mpirun; JSON
# lines on stdout (each program's header describes its lines). A named suite runs the cases that
# docs/performance.md publishes, at the rank counts it publishes:
#
#   bench/sparse/run.sh --suite NAME [ARGS...]   # ARGS are added to every launch of the suite
#   bench/sparse/run.sh --list                   # the suites, one line each
#
#   spmv             SpMV and the STREAM triad against PETSc MatMult, 2000², 1 and 2 ranks
#   krylov           CG, BiCGStab, GMRES (one-pass and DGKS) per iteration against KSPCG, KSPBCGS,
#                    KSPGMRES; 1000², 200 iterations, none and Jacobi; 1 and 2 ranks
#   preconditioners  Jacobi, SSOR, Neumann against PCJACOBI, PCSOR, PCKSP: iterations and time to
#                    solution, 500², 2 ranks
#   history          residual histories of CG with PETSc's beside, 100², 2 ranks (a plot)
#   scaling          CG and SpMV per iteration against PETSc, 500², 1 2 4 8 ranks (a plot)
#   amg              time to solution, CG + AMG against PETSc's CG + BoomerAMG and GAMG: 2-D 1000²,
#                    3-D 100³, 2-D 2000²; 1, 2 and 4 ranks
#   amg_vs_jacobi    CG + AMG against CG + Jacobi, 2-D 1000², 1, 2 and 4 ranks
#   mixed            Precision::mixed and single_values CG + Jacobi (500²) and CG + AMG (1000²) against PETSc's float64
#                    CG + PCJACOBI and CG + BoomerAMG, time to solution at rtol 1e-8; 1, 2, 4 ranks
#   pipecg           pipelined CG against KSPPIPECG, 1000², 1, 2 and 4 ranks
#   lsqr             LSQR and LSMR per iteration against KSPLSQR, and the two products alone
#   multi_rhs        k = 8, 16, 32 right-hand sides as one block against k single solves and PETSc's
#                    KSPMatSolve, 10⁴ to 10⁶ unknowns, 5-, 7- and 27-point stencils, CG, GMRES
#                    (up to 10⁵, float64 and float32 basis) and BiCGStab; 1, 2 and 4 ranks
#   stencil          CG per iteration with the matrix-free StencilOperator against the CSR path and
#                    KSPCG on AIJ: 2-D 5-point 1000², 3-D 7-point 100³, none and Jacobi; 1, 2, 4 ranks
#   backward         the differentiable solve: backward time over forward time
#   eigsh            eigsh against SLEPc's LOBPCG (needs SLEPc)
#   operations       save/load against write()/read(), connected components against label
#                    propagation
#   real             finite-element matrices (bench/sparse/real/generate.py, scikit-fem, built once
#                    into build/bench-real): time to solution against PETSc GAMG and BoomerAMG,
#                    1, 2 and 4 ranks, and the true residuals checked from the files with SciPy
#
# Without --suite, the arguments go to einshard_bench_sparse_cg (cg_petsc.cpp) at the ranks of
# EINSHARD_BENCH_RANKS; a first argument `amg` runs einshard_bench_sparse_amg (amg_petsc.cpp)
# instead:
#
#   bench/sparse/run.sh --quick                           # smoke test (300², 3 reps)
#   bench/sparse/run.sh --grid 1000 --cases cg --precond none,jacobi,block_jacobi
#   bench/sparse/run.sh amg --grid 1000 --solvers es_amg,petsc_hypre_x
#
# Environment:
#   EINSHARD_BENCH_RANKS         rank counts (default: the suite's; else "1 2 4"; empty: build only)
#   EINSHARD_BENCH_SPARSE_BUILD  build directory (default <repo>/build/bench-sparse, git-ignored)
#   EINSHARD_SOURCE_DIR          einshard tree to benchmark (default this checkout)
#   EINSHARD_MPIRUN_ARGS         extra mpirun arguments (e.g. "--bind-to none")
#   EINSHARD_NUM_THREADS         torch intra-op threads per rank (default 1)
#   EINSHARD_BENCH_SPARSE_TARGET the program run without --suite (default einshard_bench_sparse_cg)
#
# PETSc comes through pkg-config (Debian: libpetsc-real-dev), SLEPc likewise (libslepc-real-dev);
# without them their programs are not built and the script says so (multi_rhs and operations need
# neither). The build is a scratch CMake project: it finds LibTorch the way einshard does, then
# add_subdirectory()s the einshard tree (tests, docs, examples and benchmarks off) and this
# directory, Release with -O2.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"

suites="spmv krylov preconditioners history scaling amg amg_vs_jacobi mixed pipecg lsqr multi_rhs stencil backward eigsh operations real"
if [[ "${1:-}" == --list ]]; then
  sed -n '/^#   spmv /,/^#$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
suite=""
if [[ "${1:-}" == --suite ]]; then
  suite="${2:?bench/sparse/run.sh: --suite needs a name (--list shows them)}"
  shift 2
  if [[ " ${suites} " != *" ${suite} "* ]]; then
    echo "bench/sparse/run.sh: unknown suite '${suite}'; one of: ${suites}" >&2
    exit 2
  fi
fi

# shellcheck source=scripts/env.sh
source "${repo}/scripts/env.sh"

build="${EINSHARD_BENCH_SPARSE_BUILD:-${repo}/build/bench-sparse}"
source_dir="$(cd "${EINSHARD_SOURCE_DIR:-${repo}}" && pwd)"

# shellcheck source=bench/scratch-build.sh
source "${here}/../scratch-build.sh"
einshard_bench_configure "${build}" "${here}" bench-sparse "${source_dir}"

export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS="${EINSHARD_NUM_THREADS:-1}"
mpi_flags=(--oversubscribe)
[[ "$(id -u)" == 0 ]] && mpi_flags+=(--allow-run-as-root)

# Builds a program; false (with a message) if its dependency was not found at configure time.
built() {
  local target="$1"
  if ! grep -q "${target}" "${build}/cmake/build.ninja" "${build}/cmake/Makefile" 2> /dev/null; then
    echo "bench/sparse/run.sh: ${target} is not configured (PETSc or SLEPc not found through pkg-config); skipped" >&2
    return 1
  fi
  cmake --build "${build}/cmake" --parallel "${EINSHARD_JOBS}" --target "${target}" >&2
}

# bench TARGET RANKS ARGS...: TARGET at each rank count of RANKS (EINSHARD_BENCH_RANKS, when set,
# replaces them), with ARGS and the script's own extra arguments.
extra=("$@")
bench() {
  local target="$1" ranks="$2"
  shift 2
  built "${target}" || return 0
  ranks="${EINSHARD_BENCH_RANKS-${ranks}}"
  local p
  for p in ${ranks}; do
    # shellcheck disable=SC2086
    mpirun "${mpi_flags[@]}" -n "${p}" -x OMP_NUM_THREADS -x EINSHARD_NUM_THREADS ${EINSHARD_MPIRUN_ARGS:-} \
      "${build}/cmake/bench-sparse/${target}" "$@" ${extra[@]+"${extra[@]}"}
  done
}

cg=einshard_bench_sparse_cg amg=einshard_bench_sparse_amg lsqr=einshard_bench_sparse_lsqr
case "${suite}" in
  "")
    target="${EINSHARD_BENCH_SPARSE_TARGET:-${cg}}"
    if [[ "${1:-}" == amg ]]; then
      target="${amg}"
      shift
      extra=("$@")
    fi
    bench "${target}" "1 2 4"
    ;;
  spmv)
    bench "${cg}" "1 2" --grid 2000 --cases spmv --reps 5
    ;;
  krylov)
    for m in "gmres" "gmres --gmres-one-pass" "bicgstab" "cg"; do
      # shellcheck disable=SC2086
      bench "${cg}" "1 2" --grid 1000 --iters 200 --reps 5 --cases cg --precond none,jacobi --method ${m}
    done
    ;;
  preconditioners)
    bench "${cg}" "2" --grid 500 --iters 200 --reps 5 --precond jacobi,ssor,neumann --cases cg,history
    ;;
  history)
    bench "${cg}" "2" --grid 100 --cases history --precond none,jacobi,block_jacobi,amg
    ;;
  scaling)
    bench "${cg}" "1 2 4 8" --grid 500 --iters 100 --reps 3 --precond none,jacobi
    ;;
  amg)
    # Every solver runs once untimed first (--warmup 1) and the order rotates from rep to rep.
    # GAMG is left out at 2000² and in 3-D, and PCHYPRE with PETSc's own settings in 3-D: neither
    # was ever PETSc's fastest there. Read the "amg_summary" lines: paired_ratio and
    # ratio_vs_best_petsc (≤ 1: einshard is sooner), best_petsc naming PETSc's fastest.
    bench "${amg}" "1 2 4" --grid 1000 --reps 3 --solvers es_amg,es_sa,petsc_hypre,petsc_hypre_x,petsc_gamg
    bench "${amg}" "1 2 4" --problem poisson3d --grid 100 --reps 3 --solvers es_amg,petsc_hypre_x
    bench "${amg}" "1 2 4" --grid 2000 --reps 1 --solvers es_amg,petsc_hypre_x
    ;;
  amg_vs_jacobi)
    bench "${amg}" "1 2 4" --grid 1000 --reps 1 --warmup 0 --solvers es_amg,es_jacobi
    ;;
  mixed)
    # Precision::mixed and single_values against PETSc's float64 solve of the same system, and
    # einshard's own float64 one, to rtol 1e-8; each line's true_residual is PETSc's MatMult of its
    # solution. The values are scaled by 0.1, which float32 cannot hold (the 4 and -1 of the plain
    # stencil it holds exactly). Read the "mixed_summary" lines (ratio ≤ 0.7 is the goal).
    bench "${amg}" "1 2 4" --grid 500 --scale 0.1 --reps 3 --jacobi-reps 3 \
      --solvers es_jacobi_mixed,es_jacobi_values,es_jacobi,petsc_jacobi
    bench "${amg}" "1 2 4" --grid 1000 --scale 0.1 --reps 3 \
      --solvers es_amg_mixed,es_amg_values,es_amg,es_sa_mixed,es_sa,petsc_hypre_x,petsc_hypre,petsc_gamg
    ;;
  pipecg)
    bench "${amg}" "1 2 4" --grid 1000 --reps 3 --cases pipecg --iters 100
    ;;
  lsqr)
    bench "${lsqr}" "1 2 4" --cases lsqr --iters 200 --reps 7 --grid 500
    ;;
  backward)
    bench "${lsqr}" "1 2" --cases backward --reps 5 --backward-grid 150
    ;;
  multi_rhs)
    # k = 8, 16 and 32 right-hand sides; 200 / 60 / 20 iterations at 10⁴ / 10⁵ / ≥ 5·10⁵ unknowns;
    # GMRES(30) up to 10⁵ only (its block basis is 31 blocks of (n_local, k)), its basis in float64
    # and in float32 (gmres_reduced); PETSc's KSPMatSolve
    # and k KSPSolves beside CG and GMRES. At 1 rank the largest 5-point and the 27-point problems
    # also run with the portable block product (a CPU without AVX2).
    built einshard_bench_sparse_multi_rhs || exit 0
    for p in ${EINSHARD_BENCH_RANKS-1 2 4}; do
      isa=avx2
      [[ "${p}" == 1 ]] && isa=avx2,portable
      k=(--k 8,16,32)
      small=(--variants standard,gmres,gmres_reduced,bicgstab "${k[@]}")
      large=(--variants standard,bicgstab "${k[@]}")
      EINSHARD_BENCH_RANKS="${p}" bench einshard_bench_sparse_multi_rhs "" "${small[@]}" --grid 100 --iters 200 --reps 3
      EINSHARD_BENCH_RANKS="${p}" bench einshard_bench_sparse_multi_rhs "" "${small[@]}" --grid 316 --iters 60 --reps 3
      EINSHARD_BENCH_RANKS="${p}" bench einshard_bench_sparse_multi_rhs "" "${small[@]}" --grid 46 --stencil 7 --iters 60 --reps 3
      EINSHARD_BENCH_RANKS="${p}" bench einshard_bench_sparse_multi_rhs "" "${large[@]}" --grid 1000 --iters 20 --reps 3 --isa "${isa}"
      EINSHARD_BENCH_RANKS="${p}" bench einshard_bench_sparse_multi_rhs "" "${large[@]}" --grid 100 --stencil 7 --iters 20 --reps 3
      EINSHARD_BENCH_RANKS="${p}" bench einshard_bench_sparse_multi_rhs "" "${large[@]}" --grid 80 --stencil 27 --iters 20 --reps 2 --isa "${isa}"
    done
    ;;
  stencil)
    bench einshard_bench_sparse_stencil "1 2 4" --dims 2 --grid 1000 --iters 200 --reps 3
    bench einshard_bench_sparse_stencil "1 2 4" --dims 3 --grid 100 --iters 200 --reps 3
    ;;
  eigsh)
    bench einshard_bench_sparse_eigsh "1 2 4" --grid 50 --k 4 --which LA --tol 1e-8 --reps 1
    ;;
  operations)
    bench einshard_bench_sparse_operations "1 2 4" --path 1000 --lp-sweeps 10 --grid 1000 --reps 7
    ;;
  real)
    # scikit-fem and SciPy in a venv of their own (EINSHARD_BENCH_REAL_DIR, default
    # build/bench-real); the problems are assembled once and kept there.
    real="${EINSHARD_BENCH_REAL_DIR:-${repo}/build/bench-real}"
    [[ -x "${real}/venv/bin/python" ]] || python3 -m venv "${real}/venv"
    "${real}/venv/bin/python" -c "import skfem, scipy" 2> /dev/null ||
      "${real}/venv/bin/pip" install --quiet scikit-fem scipy >&2
    "${real}/venv/bin/python" "${here}/real/generate.py" "${real}/problems" >&2
    # es_functions: the unknowns per node alone; es_systems: functions, nodal and the rigid body
    # modes; es_2d: the settings of a 2-D stencil
    # forced (docs/sparse.md, "AMG on finite-element matrices").
    run_real() {
      local solvers="$1" problem
      shift
      for problem in "$@"; do
        bench einshard_bench_sparse_real "1 2 4" --dir "${real}/problems/${problem}" --reps 3 --write-solutions \
          --solvers "${solvers}"
      done
    }
    run_real es_default,es_functions,es_systems,es_sa,petsc_gamg,petsc_hypre elasticity3d_p1 elasticity3d_p2 beam3d_p1 elasticity2d_p1 \
      elasticity2d_p2 floating3d_p1
    run_real es_default,es_2d,es_sa,petsc_gamg,petsc_hypre poisson2d_p1 poisson2d_p2 aniso2d_p1
    run_real es_default,es_sa,petsc_gamg,petsc_hypre poisson3d_p1 poisson3d_p2 neumann2d_p1 neumann3d_p1
    # GAMG (its defaults) does not reach 1e-8 in 1000 GMRES iterations at Péclet 1e3: left out.
    # GMRES with one Gram–Schmidt pass (_one_pass) as PETSc's KSPGMRES runs by default.
    run_real es_default,es_default_one_pass,es_ilu,es_ilu_one_pass,petsc_hypre,petsc_ilu convdiff2d_p1 convdiff3d_p1 \
      convdiff3d_ball_p1
    "${real}/venv/bin/python" "${here}/real/generate.py" "${real}/problems" --check
    ;;
esac
