#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Correctness past 8 ranks: the MPI suites (notation, sparse, spectral, stencil, model) at 13
# (prime), 16 and 32 real ranks, oversubscribed on this machine. Offline: slow on a few cores (each
# rank busy-polls), so it runs one suite at one rank count at a time, each under a timeout, and
# reports every run's verdict at the end. The mesh shapes follow from the rank count: the tests
# loop over every factorization of P into 1, 2 and 3 mesh dimensions (tests/support/test_support.hpp),
# so 13 gives 13, 13x1, 1x13, ...; 16 gives 4x4, 2x8, 2x2x4, ...; 32 gives 2x4x4, 8x4, ...
#
#   scripts/run-many-ranks.sh                       every suite at 13, 16, 32 ranks
#   RANKS="16" SUITES="sparse mpi" scripts/run-many-ranks.sh
#   FILTER_sparse='[cg]' scripts/run-many-ranks.sh  a Catch filter for one suite
#   BUILD_DIR=build/dev TIMEOUT=1800 scripts/run-many-ranks.sh
#
# Builds nothing: build the suites first (cmake --build build/dev --target einshard_<suite>_tests).
# Logs go to $LOG_DIR (default build/many-ranks/<suite>.np<N>.log). Exits nonzero if any run fails.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=env.sh
source "${here}/env.sh"
cd "${EINSHARD_ROOT}"

build_dir="${BUILD_DIR:-build/dev}"
log_dir="${LOG_DIR:-build/many-ranks}"
ranks="${RANKS:-13 16 32}"
suites="${SUITES:-sparse mpi spectral stencil model}"
timeout_s="${TIMEOUT:-3600}"
mkdir -p "${log_dir}"

# The environment of the ctest MPI runs (cmake/EinshardTesting.cmake): one thread per rank, no
# CMA single copy in containers, oversubscription and root allowed. The watchdog ends a hung run a
# minute before the timeout and names the test case and rank.
export OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
       OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
       OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
       EINSHARD_TEST_DATA="${EINSHARD_ROOT}/tests/data"
export EINSHARD_TEST_WATCHDOG_SECONDS="${EINSHARD_TEST_WATCHDOG_SECONDS:-$((timeout_s > 120 ? timeout_s - 60 : timeout_s))}"

launcher=(mpirun --oversubscribe)
[[ "$(id -u)" == 0 ]] && launcher+=(--allow-run-as-root)

status=0
summary=()
for n in ${ranks}; do
  for suite in ${suites}; do
    exe="${build_dir}/tests/einshard_${suite}_tests"
    if [[ ! -x "${exe}" ]]; then
      summary+=("${suite}.np${n}: not built (${exe})")
      status=1
      continue
    fi
    filter_var="FILTER_${suite}"
    filter="${!filter_var:-}"
    args=()
    if [[ -n "${filter}" ]]; then
      args+=("${filter}")
    elif [[ "${suite}" == sparse ]]; then
      args+=("~[unit]")   # the sparse suite's one-process cases run without mpirun (sparse.unit)
    fi
    args+=(--durations yes)   # rank 0 prints each test case's time as it ends: progress, and what is slow
    log="${log_dir}/${suite}.np${n}.log"
    start=${SECONDS}
    timeout --kill-after=30 "${timeout_s}" "${launcher[@]}" -np "${n}" "${exe}" "${args[@]}" >"${log}" 2>&1
    rc=$?
    took=$((SECONDS - start))
    verdict=$(grep -E "^(test cases|All tests passed)" "${log}" | tail -1)
    summary+=("${suite}.np${n}: rc ${rc}, ${took} s, ${verdict:-no Catch summary} (${log})")
    echo "${summary[-1]}"
    [[ ${rc} -ne 0 ]] && status=1
  done
done

echo
echo "summary:"
printf '  %s\n' "${summary[@]}"
exit ${status}
