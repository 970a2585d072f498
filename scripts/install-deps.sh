#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Installs what einshard needs on Debian 12, as root; idempotent, and a quick no-op when
# everything is already there.
#
#   1. Debian packages (apt-get install of the missing ones only; `apt-get update` only if needed):
#        catch2 2.13.10, Open MPI 4.1.4, METIS 5.1.0, Doxygen 1.9.4, PETSc 3.18.5 and FFTW 3.3.10
#        (with FFTW-MPI; the benchmarks' anchors), hypre 2.26.0 (BoomerAMG), SLEPc 3.18.2 (the
#        eigensolver anchor), clang 14 (the second compiler and libFuzzer), SimGrid 3.32 (SMPI: smpicxx and smpirun, for
#        bench/scale's simulated clusters) (pinned), pkg-config, ninja, cmake, g++,
#        python3-venv, python3-pip, git, ca-certificates
#   2. LibTorch, as the PyPI wheel torch==2.15.0 in a Python venv at
#        ${EINSHARD_DEPS_DIR:-/opt/einshard-deps}/venv
#      (skipped when that venv already has torch 2.15.0, or when you bring your own LibTorch by
#      setting EINSHARD_TORCH_CMAKE_PREFIX or Torch_DIR).
#   3. matplotlib==3.9.2 in the same venv, for bench/plot.py (the plots under docs/images).
#
# Environment:
#   EINSHARD_DEPS_DIR        venv location (default /opt/einshard-deps)
#   EINSHARD_TORCH_INDEX_URL pip index for torch, e.g. https://download.pytorch.org/whl/cpu for the
#                            CPU-only wheel (~0.2 GB instead of ~3 GB of CUDA libraries); default PyPI
#   EINSHARD_SKIP_APT=1      do not touch Debian packages (e.g. not root, packages managed elsewhere)
set -euo pipefail

# shellcheck source=env.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"

TORCH_VERSION=2.15.0

# package=version pins; unpinned packages have no '='.
APT_PACKAGES=(
  catch2=2.13.10-1
  libopenmpi-dev=4.1.4-3+b1
  openmpi-bin=4.1.4-3+b1
  libmetis-dev=5.1.0.dfsg-7
  doxygen=1.9.4-4
  libpetsc-real-dev=3.18.5+dfsg1-1
  libfftw3-dev=3.3.10-1
  libfftw3-mpi-dev=3.3.10-1
  libhypre-dev=2.26.0-3
  libslepc-real-dev=3.18.2+dfsg1-2
  clang-14=1:14.0.6-12
  libclang-rt-14-dev=1:14.0.6-12
  libsimgrid-dev=3.32-2+b2
  jq=1.6-2.1+deb12u1
  time=1.9-0.2
  pkg-config
  ninja-build
  cmake
  g++
  python3-venv
  python3-pip
  git
  curl
  ca-certificates
)

log() { printf 'install-deps: %s\n' "$*"; }

# ---- 1. Debian packages ---------------------------------------------------------------------
apt_missing() {
  local spec name want have
  for spec in "${APT_PACKAGES[@]}"; do
    name="${spec%%=*}"
    want=""
    [[ "${spec}" == *=* ]] && want="${spec#*=}"
    have="$(dpkg-query -W -f='${db:Status-Status} ${Version}' "${name}" 2>/dev/null || true)"
    if [[ "${have}" != installed\ * ]]; then
      printf '%s\n' "${spec}"
    elif [[ -n "${want}" && "${have#installed }" != "${want}" ]]; then
      printf '%s\n' "${spec}"
    fi
  done
}

if [[ "${EINSHARD_SKIP_APT:-0}" != 1 ]]; then
  mapfile -t missing < <(apt_missing)
  if ((${#missing[@]} == 0)); then
    log "Debian packages: all present"
  else
    if [[ "$(id -u)" != 0 ]]; then
      log "missing Debian packages: ${missing[*]}"
      log "run this script as root, or install them yourself and set EINSHARD_SKIP_APT=1"
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    log "installing: ${missing[*]}"
    # Update the package lists only when apt does not know a wanted version (fresh container).
    if ! apt-get install -y --no-install-recommends --dry-run "${missing[@]}" >/dev/null 2>&1; then
      log "apt-get update"
      apt-get update
    fi
    apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

# ---- 2. LibTorch (PyPI wheel in a venv) -----------------------------------------------------
if [[ "${EINSHARD_TORCH_BYO}" == 1 ]]; then
  log "LibTorch: bring your own (${EINSHARD_TORCH_CMAKE_PREFIX:-Torch_DIR=${Torch_DIR:-}}), no venv"
  exit 0
fi

torch_ok() {
  [[ -x "${EINSHARD_VENV}/bin/python" ]] &&
    "${EINSHARD_VENV}/bin/python" - "${TORCH_VERSION}" >/dev/null 2>&1 <<'PY'
import importlib.metadata, sys
assert importlib.metadata.version("torch").startswith(sys.argv[1])
PY
}

if torch_ok; then
  log "LibTorch: torch ${TORCH_VERSION} present in ${EINSHARD_VENV}"
else
  if [[ ! -x "${EINSHARD_VENV}/bin/python" ]]; then
    log "creating the venv ${EINSHARD_VENV}"
    mkdir -p "$(dirname "${EINSHARD_VENV}")"
    python3 -m venv "${EINSHARD_VENV}"
  fi
  pip_args=(install --disable-pip-version-check --no-input "torch==${TORCH_VERSION}")
  if [[ -n "${EINSHARD_TORCH_INDEX_URL:-}" ]]; then
    pip_args+=(--index-url "${EINSHARD_TORCH_INDEX_URL}")
  fi
  log "pip ${pip_args[*]} (a few GB with the CUDA libraries of the default wheel; be patient)"
  "${EINSHARD_VENV}/bin/pip" "${pip_args[@]}"
  if ! torch_ok; then
    log "torch ${TORCH_VERSION} is still not importable from ${EINSHARD_VENV}"
    exit 1
  fi
fi

# Re-derive the LibTorch CMake prefix now that the venv exists.
EINSHARD_TORCH_BYO=0 source "${EINSHARD_ROOT}/scripts/env.sh"
if [[ -z "${EINSHARD_TORCH_CMAKE_PREFIX}" ]]; then
  log "no torch/share/cmake/Torch/TorchConfig.cmake under ${EINSHARD_VENV}"
  exit 1
fi
log "LibTorch CMake prefix: ${EINSHARD_TORCH_CMAKE_PREFIX}"

# ---- 3. matplotlib for bench/plot.py (the PNGs under docs/images), in the same venv ----------
MATPLOTLIB_VERSION=3.9.2
if "${EINSHARD_VENV}/bin/python" - "${MATPLOTLIB_VERSION}" >/dev/null 2>&1 <<'PY'
import importlib.metadata, sys
assert importlib.metadata.version("matplotlib") == sys.argv[1]
PY
then
  log "matplotlib ${MATPLOTLIB_VERSION} present in ${EINSHARD_VENV}"
else
  log "pip install matplotlib==${MATPLOTLIB_VERSION} (bench/plot.py)"
  "${EINSHARD_VENV}/bin/pip" install --disable-pip-version-check --no-input "matplotlib==${MATPLOTLIB_VERSION}"
fi
