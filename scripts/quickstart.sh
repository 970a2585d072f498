#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# README command 1: install the dependencies, build einshard's examples (release preset, no
# tests) and run, on 4 MPI ranks, the flagship example: a distributed Poisson solve with CG + AMG
# (examples/poisson.cpp), then the tensor-notation tour (examples/einshard_demo.cpp).
# Idempotent; runs from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

"${here}/install-deps.sh"
# shellcheck source=env.sh
source "${here}/env.sh"
cd "${EINSHARD_ROOT}"

cmake --preset release
cmake --build --preset release -j "${EINSHARD_JOBS}"

mpi_flags=(--oversubscribe)
[[ "$(id -u)" == 0 ]] && mpi_flags+=(--allow-run-as-root)
for example in poisson einshard_demo; do
  exe="${EINSHARD_ROOT}/build/release/examples/${example}"
  if [[ ! -x "${exe}" ]]; then
    echo "quickstart: ${exe} was not built" >&2
    exit 1
  fi
  echo "quickstart: mpirun -n 4 ${mpi_flags[*]} ${exe}"
  OMP_NUM_THREADS=1 EINSHARD_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
    mpirun -n 4 "${mpi_flags[@]}" "${exe}"
done
