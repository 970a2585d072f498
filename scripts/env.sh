# shellcheck shell=bash
# Sourced by einshard's scripts (and usable by hand: `source scripts/env.sh`).
#
# Sets, unless already set by the caller:
#   EINSHARD_DEPS_DIR            where scripts/install-deps.sh puts its Python venv
#                                (default /opt/einshard-deps)
#   EINSHARD_TORCH_CMAKE_PREFIX  the CMAKE_PREFIX_PATH entry for LibTorch, read by CMakePresets.json:
#                                - kept as is if the caller set it (bring your own LibTorch), else
#                                - the parent of $Torch_DIR if that is set (…/share/cmake/Torch), else
#                                - <venv>/lib/python3.*/site-packages/torch/share/cmake (found by
#                                  globbing; importing torch would take seconds)
# and, as root, OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 so that Open MPI's
# mpirun agrees to start.

EINSHARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export EINSHARD_ROOT
export EINSHARD_DEPS_DIR="${EINSHARD_DEPS_DIR:-/opt/einshard-deps}"
export EINSHARD_VENV="${EINSHARD_VENV:-${EINSHARD_DEPS_DIR}/venv}"

# Bring-your-own LibTorch: decided once (the scripts source this file again in child processes,
# after this file has exported EINSHARD_TORCH_CMAKE_PREFIX itself).
if [[ -z "${EINSHARD_TORCH_BYO:-}" ]]; then
  if [[ -n "${EINSHARD_TORCH_CMAKE_PREFIX:-}" || -n "${Torch_DIR:-}" ]]; then
    EINSHARD_TORCH_BYO=1
  else
    EINSHARD_TORCH_BYO=0
  fi
fi
export EINSHARD_TORCH_BYO

if [[ "${EINSHARD_TORCH_BYO}" == 1 ]]; then
  if [[ -z "${EINSHARD_TORCH_CMAKE_PREFIX:-}" ]]; then
    EINSHARD_TORCH_CMAKE_PREFIX="$(dirname "${Torch_DIR%/}")"
  fi
else
  EINSHARD_TORCH_CMAKE_PREFIX=""
  for _einshard_dir in "${EINSHARD_VENV}"/lib/python3.*/site-packages/torch/share/cmake; do
    if [[ -f "${_einshard_dir}/Torch/TorchConfig.cmake" ]]; then
      EINSHARD_TORCH_CMAKE_PREFIX="${_einshard_dir}"
    fi
  done
  unset _einshard_dir
fi
export EINSHARD_TORCH_CMAKE_PREFIX

if [[ "$(id -u)" == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Two cores are the usual CI machine; override with EINSHARD_JOBS.
export EINSHARD_JOBS="${EINSHARD_JOBS:-2}"
