#!/usr/bin/env bash
# Scaling of einshard's sparse headline work to 4,096 simulated ranks, with SimGrid's SMPI.
#
#   bench/scale/run.sh [all|headline|build|validate|weak|comm|strong|amg|summary]   (default: all)
#
#   build     header-only builds of bench/scale/poisson_scaling.cpp: with smpicxx (SMPI) and with
#             mpicxx (the real runs), into $SCALE_BUILD (default build/scale)
#   validate  1, 2, 4, 8 ranks: real mpirun on this machine beside SMPI on its model
#             (platforms/this_machine.xml) and on the cluster model (platforms/fat_tree.xml)
#   weak      fat tree, 1, 4, 8, 16 ... $SCALE_MAX_P ranks: 2-D 5-point Poisson, a 64^2 box per rank, and
#             3-D 7-point, a 16^3 box per rank
#   comm      the weak series with no computation charged: the network and algorithms alone
#   strong    fat tree, 16 ... $SCALE_MAX_P ranks: 2-D 1024^2 and 3-D 64^3
#   notation  bench/scale/notation_scaling.cpp (the tensor notation's distributed calls), weak: 1 and 8
#             ranks with computation charged, then 1, 8, 64, 256, 1,024 ranks with none charged
#   amg       CG + hypre BoomerAMG (einshard's defaults) to rtol 1e-8, 2-D, a 64^2 box per rank, 1 ...
#             $SCALE_MAX_P_AMG (default 256) ranks, charged and communication only, and real mpirun
#             beside SMPI on this machine's model at 1-8 ranks; builds hypre 2.26.0 from source
#             with smpicc first (build/scale/hypre-smpi; needs curl once)
#   summary   bench/scale/summarize.py: markdown tables of the results
#   headline  the performance page's headline in about 25 minutes, to 1,024 ranks: build, validate,
#             one rank with computation charged, then CG (both variants), the halo exchange and
#             from_local on the fat tree with none charged at 8, 64, 256 and 1,024 ranks, 16,384
#             (128^2, 2-D) and 13,824 (24^3, 3-D) rows per rank; its own results directory
#             ($SCALE_OUT/headline) and summary
#   one FILE PLATFORM P ARGS...   one simulation, appended to $SCALE_OUT/FILE
#   one-comm FILE PLATFORM P ARGS...   the same with no computation charged
#   notation-one, notation-one-comm FILE PLATFORM P ARGS...   the same for notation_scaling
#
# Every run prints JSON lines (poisson_scaling.cpp's), each tagged here with "runner" (mpirun or
# smpi) and "platform", appended to $SCALE_OUT/<section>.jsonl (default build/scale/results).
#
# Environment: SCALE_MAX_P (default 4096), SCALE_TIMEOUT (seconds per simulation, default 470;
# 1,800 at 4,096 ranks, SCALE_TIMEOUT_4096), SCALE_NICE (the niceness of the simulations and real
# runs, default 19: at 19 a run gets almost no CPU while others' builds run at 0),
# SCALE_BUILD, SCALE_OUT, EINSHARD_VENV (the venv with torch; default /opt/einshard-deps/venv),
# SCALE_CPU_THRESHOLD (smpi/cpu-threshold: computation bursts shorter are not charged; default
# 1.5 times SMPI's own time per MPI call on this machine, at least SMPI's 1e-6 s, docs/scale.md).
# Needs libsimgrid-dev (scripts/install-deps.sh installs it) and Open MPI for the real runs.
#
# Why these SMPI settings (docs/scale.md has the measurements):
#   * The collectives are named one by one, as Open MPI's tuned component picks them for small
#     messages (recursive doubling, binomial trees, Bruck, pairwise all-to-allv: SMPI's
#     ompi_basic_linear all-to-allv did not finish from_local at 256 ranks in 5 minutes, pairwise
#     takes 3 s). SMPI's
#     smpi/coll-selector:ompi gives the same algorithms but first builds SMP leader
#     communicators for every new communicator (a ring all-gather: P^2 simulated messages each),
#     minutes of wall time per communicator at 1,024 ranks; the default selector is naive.
#   * smpi/lat-factor and smpi/bw-factor 0:1 (factor 1 from size 0 up): the platform's latencies and bandwidths as given
#     (SMPI's default factors are fitted to an Ethernet cluster).
#   * smpi/host-speed 1Gf on 1 Gflop/s cores: measured CPU time is charged one to one.
#   * smpi/iprobe and smpi/test 1e-7: SMPI charges each MPI_Iprobe / MPI_Test 100 us of simulated
#     time by default (to stop busy loops from spinning), where a poll costs about 0.1 us on a
#     real machine. einshard's sparse exchange no longer polls (it waits in MPI_Waitany); any other
#     poll is charged what a real one costs.
#   * The programs are built with -fno-gnu-unique so that every simulated rank gets its own copy
#     of the library's function-local statics (smpirun loads one copy of the program per rank).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="${ROOT}/bench/scale"
BUILD="${SCALE_BUILD:-${ROOT}/build/scale}"
OUT="${SCALE_OUT:-${BUILD}/results}"
MAX_P="${SCALE_MAX_P:-4096}"
TIMEOUT="${SCALE_TIMEOUT:-470}"
TIMEOUT_4096="${SCALE_TIMEOUT_4096:-1800}"
NICE="${SCALE_NICE:-19}"
VENV="${EINSHARD_VENV:-/opt/einshard-deps/venv}"
mkdir -p "${BUILD}" "${OUT}"

SMPI_OPTS=(
  --cfg=smpi/host-speed:1Gf
  --cfg=smpi/lat-factor:0:1 --cfg=smpi/bw-factor:0:1
  --cfg=smpi/allreduce:rdb --cfg=smpi/bcast:binomial_tree --cfg=smpi/barrier:ompi_recursivedoubling
  --cfg=smpi/allgather:bruck --cfg=smpi/allgatherv:ompi_bruck --cfg=smpi/alltoall:bruck
  --cfg=smpi/alltoallv:pair --cfg=smpi/gather:ompi_binomial --cfg=smpi/reduce:ompi_binomial
  --cfg=smpi/scatter:ompi_binomial --cfg=smpi/reduce_scatter:ompi_basic_recursivehalving
  --cfg=smpi/iprobe:1e-7 --cfg=smpi/test:1e-7
  --log=root.thres:warning
)

# 20 CG iterations and 20 halo exchanges per run: a simulation runs every rank on this machine's
# two cores, so its wall time is the sum of all ranks' work.
COMMON=(--iters 20 --halo-reps 20)

# More smpirun options, and the runner's name in the JSON lines (the comm section changes them).
EXTRA=()
RUNNER=smpi
# The simulated program (the notation section changes it) and the section being run.
PROGRAM=poisson_scaling
SECTION="${1:-all}"

log() { printf 'bench/scale: %s\n' "$*" >&2; }

# compile PROGRAM COMPILER SUFFIX FLAGS...: builds bench/scale/PROGRAM.cpp into $BUILD/PROGRAM_SUFFIX when
# it is missing or older than a header.
compile() {
  local prog="$1" cxx="$2" suffix="$3"
  shift 3
  local out="${BUILD}/${prog}_${suffix}" newest
  newest="$(find "${ROOT}/include" "${HERE}" -newer "${out}" -name '*.?pp' 2>/dev/null | head -1 || true)"
  if [[ ! -x "${out}" || -n "${newest}" ]]; then
    log "${cxx} ${prog} (header-only einshard, ${suffix})"
    nice -n 19 "${cxx}" "${HERE}/${prog}.cpp" "$@" -o "${out}"
  fi
}

# FLAGS: what every program is compiled with (header-only einshard, LibTorch from the venv), and
# the hostfiles of the platforms.
prepare() {
  local tp
  tp="$("${VENV}/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
  # shellcheck disable=SC2054  # -Wl,-rpath,DIR is one argument
  FLAGS=(-std=c++20 -O2 -fno-gnu-unique -I "${ROOT}/include" -I "${tp}/include"
         -L "${tp}/lib" -ltorch_cpu -lc10 -Wl,-rpath,"${tp}/lib" -lmetis)
  [[ -f "${BUILD}/hosts_fat_tree" ]] || for i in $(seq 0 4095); do echo "node-$i"; done >"${BUILD}/hosts_fat_tree"
  [[ -f "${BUILD}/hosts_this_machine" ]] || for _ in $(seq 0 63); do echo node-0; done >"${BUILD}/hosts_this_machine"
}

build() {
  prepare
  # -Bsymbolic: the program's calls to MPI_* reach mpi_count.hpp's definitions in it under mmap
  # privatization too (then smpirun loads it once, after libsimgrid, whose MPI_* come first).
  local progs=(poisson_scaling)
  [[ "${SECTION}" != notation* ]] || progs=(notation_scaling)
  for prog in "${progs[@]}"; do
    compile "${prog}" smpicxx smpi "${FLAGS[@]}" -Wl,-Bsymbolic
    [[ "${prog}" == notation_scaling ]] || compile "${prog}" mpicxx mpi "${FLAGS[@]}"
  done
}

# CPU_THRESHOLD: smpi/cpu-threshold. SMPI charges the time between MPI calls as computation, and
# that time includes the simulator's own work inside each call (1.8-2.1 us per all-reduce on the
# 2-core VM of 2026-12-07, under SMPI's default threshold of 1 us on the one of 2026-12-04):
# charged, it doubled a CG iteration at one rank. Measured once per run of this script.
calibrate() {
  [[ -z "${CPU_THRESHOLD:-}" ]] || return 0
  if [[ -n "${SCALE_CPU_THRESHOLD:-}" ]]; then
    CPU_THRESHOLD="${SCALE_CPU_THRESHOLD}"
    return 0
  fi
  prepare
  [[ -x "${BUILD}/smpi_call_cost" ]] || smpicc -O2 "${HERE}/smpi_call_cost.c" -o "${BUILD}/smpi_call_cost"
  local cost
  cost="$(cd "${BUILD}" && smpirun -np 1 -platform "${HERE}/platforms/this_machine.xml" -hostfile "${BUILD}/hosts_this_machine" \
          --cfg=smpi/host-speed:1Gf --cfg=smpi/cpu-threshold:0 --log=root.thres:warning ./smpi_call_cost 2>/dev/null)"
  CPU_THRESHOLD="$(python3 -c "print('%.2g' % max(1e-6, 1.5 * float('${cost:-0}')))")"
  log "SMPI's own time per MPI call ${cost} s: smpi/cpu-threshold ${CPU_THRESHOLD}"
}

# tag RUNNER PLATFORM: adds the two keys to every JSON line.
tag() { sed -u "s/^{/{\"runner\":\"$1\",\"platform\":\"$2\",/"; }

# sim FILE PLATFORM P ARGS...: one simulation, its JSON lines appended to FILE.
sim() {
  local file="$1" platform="$2" p="$3"
  shift 3
  # smpirun's default privatization (a copy of the program dlopen()ed per rank) crashes past
  # about 1,000 copies here; mmap privatization swaps the data segment instead (it does not
  # privatize thread_local variables: fine for the sparse part, not for the notation's caches).
  local priv=dlopen
  ((p <= 512)) || priv=mmap
  log "smpi ${platform} P=${p} ${PROGRAM} $* (privatization ${priv})"
  local start=$SECONDS limit="${TIMEOUT}" fewer=() common=("${COMMON[@]}") context=()
  if [[ "${PROGRAM}" == poisson_scaling* ]]; then
    # At 4,096 ranks: 5 CG iterations and halo exchanges (a simulation repeats them exactly) and no
    # 3-D Mesh (its 7 communicators cost the simulator O(P^2) each).
    ((p < 4096)) || { limit="${TIMEOUT_4096}"; fewer=(--iters 5 --halo-reps 5 --mesh3 0); }
  else
    # The notation keeps its caches and replay records in thread_local variables, and LibTorch its
    # autograd state: every simulated rank runs on its own OS thread (neither privatization
    # privatizes thread_locals when the ranks share one thread).
    common=(--reps 10)
    context=(--cfg=contexts/factory:thread)
    # From 256 ranks on no repartition over all P ranks: P^2 simulated messages per call (the
    # first call at 256 ranks ran over 8 minutes here, against 2 s at 64); the one inside the rows of the 2-D mesh (sqrt(P) ranks) stays. Past 256
    # ranks 1 repeated call: at 1,024 ranks the first FFT alone took 9 minutes of wall time here.
    ((p < 256)) || fewer=(--phases contract,mlp,rowrepart,halo,fft)
    ((p <= 256)) || fewer+=(--reps 1)
    ((p < 256)) || limit="${TIMEOUT_4096}"
  fi
  calibrate
  if ! (cd "${BUILD}" && OMP_NUM_THREADS=1 nice -n "${NICE}" timeout "${limit}" smpirun -np "${p}" \
        -platform "${HERE}/platforms/${platform}.xml" -hostfile "${BUILD}/hosts_${platform}" "${SMPI_OPTS[@]}" \
        --cfg=smpi/cpu-threshold:"${CPU_THRESHOLD}" \
        --cfg=smpi/privatization:${priv} "${context[@]}" "${EXTRA[@]}" \
        "./${PROGRAM}_smpi" "${common[@]}" "${fewer[@]}" "$@" 2>"${BUILD}/last_smpi.err" | tag "${RUNNER}" "${platform}" >>"${OUT}/${file}"); then
    log "  failed or timed out after $((SECONDS - start)) s (${BUILD}/last_smpi.err)"
    return 0
  fi
  log "  $((SECONDS - start)) s"
}

# real FILE P ARGS...: one mpirun on this machine.
real() {
  local file="$1" p="$2"
  shift 2
  log "mpirun P=${p} $*"
  OMP_NUM_THREADS=1 nice -n "${NICE}" timeout "${TIMEOUT}" mpirun --allow-run-as-root --oversubscribe -np "${p}" \
    -x OMP_NUM_THREADS "${BUILD}/${PROGRAM}_mpi" "${COMMON[@]}" "$@" | tag mpirun this_machine >>"${OUT}/${file}" || log "  failed"
}

validate() {
  for p in 1 2 4 8; do
    for args in "--dim 2 --box 64 --rtol 1e-6" "--dim 3 --box 16 --rtol 1e-6"; do
      # shellcheck disable=SC2086
      real validate.jsonl "$p" $args
      # shellcheck disable=SC2086
      sim validate.jsonl this_machine "$p" $args
      # shellcheck disable=SC2086
      sim validate.jsonl fat_tree "$p" $args
    done
  done
}

# Weak efficiency is against 8 ranks (a 4 x 2 / 2 x 2 x 2 grid: 3 neighbours at most).
weak() {
  for p in 1 4 8 16 64 256 1024 4096; do
    ((p <= MAX_P)) || break
    sim weak.jsonl fat_tree "$p" --dim 2 --box 64
    sim weak.jsonl fat_tree "$p" --dim 3 --box 16
  done
}

strong() {
  for p in 16 64 256 1024 4096; do
    ((p <= MAX_P)) || break
    sim strong.jsonl fat_tree "$p" --dim 2 --grid 1024
    sim strong.jsonl fat_tree "$p" --dim 3 --grid 64
  done
}

# The weak series again with no computation charged (smpi/simulate-computation:no): what the
# network and the algorithms cost alone, free of the CPU time measured on this shared machine.
comm_only() {
  EXTRA=(--cfg=smpi/simulate-computation:no)
  RUNNER=smpi_comm_only
}
comm() {
  comm_only
  for p in 1 4 8 16 64 256 1024 4096; do
    ((p <= MAX_P)) || break
    sim weak_comm_only.jsonl fat_tree "$p" --dim 2 --box 64
    sim weak_comm_only.jsonl fat_tree "$p" --dim 3 --box 16
  done
  EXTRA=()
  RUNNER=smpi
}

# The notation's weak series (notation_scaling.cpp: the first and repeated calls of a contraction,
# a repartition, a tensor-parallel MLP step and a pencil FFT) on the fat tree, with no computation
# charged: with hundreds of ranks on two cores the measured computation is cold caches and other
# builds' load, not the ranks' work (the per-rank computation is in the runs with it charged, at
# 1 and 8 ranks, notation.jsonl).
notation() {
  PROGRAM=notation_scaling
  for p in 1 8; do
    sim notation.jsonl fat_tree "$p"
  done
  comm_only
  # Not 4,096: at 1,024 ranks the simulation took 13 minutes here, a simulated message about 1 ms of
  # wall time (a thread per rank); 4,096 would be hours (run it with notation-one-comm).
  for p in 1 8 64 256 1024; do
    ((p <= MAX_P)) || break
    sim notation_comm_only.jsonl fat_tree "$p"
  done
  EXTRA=()
  RUNNER=smpi
}

# CG + BoomerAMG under SMPI. Debian's libHYPRE is linked against Open MPI, which a simulated
# rank cannot call, so the same release (2.26.0, as scripts/install-deps.sh pins) is built from
# its source with smpicc into $BUILD/hypre-smpi, static: smpirun privatizes the program's globals,
# and hypre's must be among them. SMPI_PRETEND_CC lets hypre's configure run its test programs
# outside smpirun. Needs the network once (the source tarball, checked against its SHA-256).
HYPRE_VERSION=2.26.0
HYPRE_SHA256=c214084bddc61a06f3758d82947f7f831e76d7e3edeac2c78bb82d597686e05d
hypre_smpi() {
  local dir="${BUILD}/hypre-smpi" tarball="${BUILD}/hypre_${HYPRE_VERSION}.orig.tar.gz"
  [[ -f "${dir}/lib/libHYPRE.a" ]] && return 0
  log "hypre ${HYPRE_VERSION} for SMPI (smpicc, static) into ${dir}"
  [[ -f "${tarball}" ]] || curl -fsSL -o "${tarball}" \
    "http://deb.debian.org/debian/pool/main/h/hypre/hypre_${HYPRE_VERSION}.orig.tar.gz"
  echo "${HYPRE_SHA256}  ${tarball}" | sha256sum -c --quiet
  rm -rf "${BUILD}/hypre-${HYPRE_VERSION}"
  tar -xzf "${tarball}" -C "${BUILD}"
  (cd "${BUILD}/hypre-${HYPRE_VERSION}/src" &&
    SMPI_PRETEND_CC=1 ./configure CC=smpicc CXX=smpicxx CFLAGS="-O2" --disable-fortran --enable-shared=no \
      --without-openmp --prefix="${dir}" > "${BUILD}/hypre-smpi.log" 2>&1 &&
    nice -n 19 make -j 2 >> "${BUILD}/hypre-smpi.log" 2>&1 && make install >> "${BUILD}/hypre-smpi.log" 2>&1)
}

# The weak series of CG + AMG (einshard's defaults: hypre BoomerAMG) to rtol 1e-8, 64^2 rows per
# rank: the setup, the time per iteration and the iterations. With computation charged and without;
# past 256 ranks hypre's own setup makes the simulation slow (64 ranks: 25 s of wall time, about
# P^1.6), so the series stops there unless SCALE_MAX_P_AMG says otherwise.
amg() {
  hypre_smpi
  prepare
  compile poisson_scaling smpicxx amg_smpi "${FLAGS[@]}" -DEINSHARD_HAS_HYPRE -I "${BUILD}/hypre-smpi/include" \
    -Wl,-Bsymbolic "${BUILD}/hypre-smpi/lib/libHYPRE.a" -lm
  # The real runs beside them: the same program with mpicxx and Debian's hypre.
  compile poisson_scaling mpicxx amg_mpi "${FLAGS[@]}" -DEINSHARD_HAS_HYPRE -I /usr/include/hypre -lHYPRE
  PROGRAM=poisson_scaling_amg
  local max="${SCALE_MAX_P_AMG:-256}" args=(--dim 2 --box 64 --precond amg --rtol 1e-8 --iters 10 --mesh3 0)
  for p in 1 2 4 8; do
    real amg_validate.jsonl "$p" "${args[@]}"
    sim amg_validate.jsonl this_machine "$p" "${args[@]}"
  done
  for p in 1 4 8 16 64 256 1024; do
    ((p <= max && p <= MAX_P)) || break
    sim amg.jsonl fat_tree "$p" "${args[@]}"
  done
  comm_only
  for p in 1 4 8 16 64 256 1024; do
    ((p <= max && p <= MAX_P)) || break
    sim amg_comm_only.jsonl fat_tree "$p" "${args[@]}"
  done
  EXTRA=()
  RUNNER=smpi
  PROGRAM=poisson_scaling
}

summary() { python3 "${HERE}/summarize.py" "${OUT}"; }

# The rows per rank of a simulation code's weak-scaling run (PETSc's users are told to keep 10^4
# or more per process), where two all-reduces per CG iteration stay behind the computation.
headline() {
  OUT="${OUT}/headline"
  mkdir -p "${OUT}"
  rm -f "${OUT}"/*.jsonl
  validate
  sim weak.jsonl fat_tree 1 --dim 2 --box 128
  sim weak.jsonl fat_tree 1 --dim 3 --box 24
  comm_only
  # No 3-D Mesh (its communicators cost the simulator O(P^2) each) and 5 halo exchanges (a
  # simulation repeats them exactly): a 3-D run at 1,024 ranks took over 470 s with them.
  for p in 8 64 256 1024; do
    ((p <= MAX_P)) || break
    for cg in standard single_reduction; do
      sim weak_comm_only.jsonl fat_tree "$p" --dim 2 --box 128 --cg "${cg}" --mesh3 0 --halo-reps 5
      sim weak_comm_only.jsonl fat_tree "$p" --dim 3 --box 24 --cg "${cg}" --mesh3 0 --halo-reps 5
    done
  done
  EXTRA=()
  RUNNER=smpi
  summary
}

case "${1:-all}" in
  build) build ;;
  validate) build && validate ;;
  weak) build && weak ;;
  strong) build && strong ;;
  comm) build && comm ;;
  one) shift && build && sim "$@" ;;  # one simulation: run.sh one weak.jsonl fat_tree 1024 --dim 2 --box 64
  one-comm) shift && build && comm_only && sim "$@" ;;  # the same with no computation charged
  notation) build && notation ;;
  notation-one) shift && build && PROGRAM=notation_scaling && sim "$@" ;;  # run.sh notation-one notation.jsonl fat_tree 64
  notation-one-comm) shift && build && PROGRAM=notation_scaling && comm_only && sim "$@" ;;
  amg) amg ;;
  summary) summary ;;
  headline) build && headline ;;
  all) build && validate && weak && comm && strong && summary ;;
  *) echo "usage: $0 [all|headline|build|validate|weak|comm|strong|notation|summary|one|one-comm|notation-one|notation-one-comm FILE PLATFORM P ARGS...]" >&2; exit 2 ;;
esac
