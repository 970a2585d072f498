#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# README command 2: install the dependencies, configure and build the dev preset, and run the
# whole test suite: unit tests, MPI tests at 1, 2, 3, 4 and 8 ranks, compile-fail tests, consumer
# projects (find_package, add_subdirectory, build tree) and the warnings-clean docs build.
# Exits nonzero if anything fails. Extra arguments go to ctest (e.g. -L mpi, -R parser).
# Idempotent; runs from any directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

"${here}/install-deps.sh"
# shellcheck source=env.sh
source "${here}/env.sh"
cd "${EINSHARD_ROOT}"

cmake --preset dev
cmake --build --preset dev -j "${EINSHARD_JOBS}"
ctest --preset dev -j "${EINSHARD_JOBS}" "$@"
