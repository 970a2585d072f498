#!/usr/bin/env python3
"""Fails when a header of include/einshard includes one of a layer it must not stand on.

The layers (docs/design.md, "Layers"), each allowed to include itself and the layers it lists:

  core      error.hpp, version.hpp, config.hpp
  notation  notation.hpp, notation/                     core
  shape     mesh_shape.hpp, group.hpp, shapes.hpp       core, notation
  plan      plan/                                       ... shape           (pure: no MPI, no torch)
  comm      comm/                                       ... plan
  mesh      mesh.hpp                                    ... comm
  options   options.hpp                                 ... mesh
  exec      exec/                                       ... options
  model     model/                                      ... exec
  ops       ops/                                        ... model
  sparse    sparse/, in rooms, each above the ones before it (never options, exec, ops):
    sparse.matrix          sparse/matrix/           core ... mesh
    sparse.preconditioner  sparse/preconditioner/   ... sparse.matrix
    sparse.io              sparse/io/               ... sparse.matrix
    sparse.krylov          sparse/krylov/           ... sparse.preconditioner
    sparse.analysis        sparse/analysis/         ... sparse.krylov, sparse.io
  umbrella  einshard.hpp, sparse.hpp, model.hpp      everything

The layers core, notation, shape and plan include neither <mpi.h> nor LibTorch. Plus the rules
inside a layer that docs/design.md states (`FORBIDDEN`). Only quoted includes of
"einshard/..." are read; system headers are the compiler's business. Usage:

  scripts/check-layers.py [include-dir]     (default: include/ next to this script's parent)

Prints every offending include as `file:line: layer 'a' includes 'b' (layer 'c')` and exits 1.
"""

import pathlib
import re
import sys

LINEAR = ["core", "notation", "shape", "plan", "comm", "mesh", "options", "exec", "model", "ops"]
ALLOWED = {layer: set(LINEAR[: i + 1]) for i, layer in enumerate(LINEAR)}
# The sparse part stands on the communication layer and the mesh, never on the notation's
# executor or operations; inside it the rooms are ordered as a PETSc user would expect them
# (Mat < PC < KSP), with files above the matrix and the analyses on top.
SPARSE_BASE = set(LINEAR[: LINEAR.index("mesh") + 1])
SPARSE_ROOMS = {
    "sparse.matrix": set(),
    "sparse.preconditioner": {"sparse.matrix"},
    "sparse.io": {"sparse.matrix"},
    "sparse.krylov": {"sparse.matrix", "sparse.preconditioner"},
    "sparse.analysis": {"sparse.matrix", "sparse.preconditioner", "sparse.krylov", "sparse.io"},
}
for room, below in SPARSE_ROOMS.items():
    ALLOWED[room] = SPARSE_BASE | below | {room}
ALLOWED["umbrella"] = set(LINEAR) | set(SPARSE_ROOMS) | {"umbrella"}

# (includer, included) pairs that are wrong although their layers allow them.
FORBIDDEN = {
    # The solve vocabulary (options, results) must not bring every preconditioner implementation.
    ("sparse/krylov/options.hpp", "sparse/preconditioner/factory.hpp"),
}

FILES = {
    "error.hpp": "core",
    "version.hpp": "core",
    "config.hpp": "core",
    "notation.hpp": "notation",
    "mesh_shape.hpp": "shape",
    "group.hpp": "shape",
    "shapes.hpp": "shape",
    "mesh.hpp": "mesh",
    "options.hpp": "options",
    "einshard.hpp": "umbrella",
    "sparse.hpp": "umbrella",
    "model.hpp": "umbrella",
}
DIRECTORIES = {"notation": "notation", "plan": "plan", "comm": "comm", "exec": "exec", "model": "model", "ops": "ops"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"einshard/([^"]+)"')
SYSTEM = re.compile(r'^\s*#\s*include\s+<((?:mpi\.h|ATen/|torch/|c10/)[^>]*)>')
# Layers that compile without MPI and without LibTorch (the planners are unit-tested without both).
PURE = {"core", "notation", "shape", "plan"}


def layer_of(relative: str) -> str:
    if relative in FILES:
        return FILES[relative]
    parts = relative.split("/")
    if parts[0] == "sparse" and len(parts) == 3 and f"sparse.{parts[1]}" in SPARSE_ROOMS:
        return f"sparse.{parts[1]}"
    top = parts[0]
    if top in DIRECTORIES and len(parts) == 2:
        return DIRECTORIES[top]
    raise KeyError(relative)


def main() -> int:
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else (
        pathlib.Path(__file__).resolve().parent.parent / "include")
    base = root / "einshard"
    if not base.is_dir():
        print(f"check-layers: no directory {base}", file=sys.stderr)
        return 2
    problems = []
    headers = sorted(base.rglob("*.hpp"))
    for path in headers:
        relative = path.relative_to(base).as_posix()
        try:
            mine = layer_of(relative)
        except KeyError:
            problems.append(f"{path}: header 'einshard/{relative}' belongs to no layer; "
                            "add it to scripts/check-layers.py and docs/design.md")
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            heavy = SYSTEM.match(line)
            if heavy and mine in PURE:
                problems.append(f"{path}:{number}: layer '{mine}' is pure but includes "
                                f"<{heavy.group(1)}>")
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if not (base / target).is_file():
                problems.append(f"{path}:{number}: includes 'einshard/{target}', which does not exist")
                continue
            try:
                theirs = layer_of(target)
            except KeyError:
                continue  # reported once, for the file itself
            if theirs not in ALLOWED[mine]:
                problems.append(f"{path}:{number}: layer '{mine}' includes 'einshard/{target}' "
                                f"(layer '{theirs}'); '{mine}' may stand on "
                                f"{', '.join(sorted(ALLOWED[mine] - {mine})) or 'nothing'} only")
            elif (relative, target) in FORBIDDEN:
                problems.append(f"{path}:{number}: 'einshard/{relative}' must not include "
                                f"'einshard/{target}' (see docs/design.md)")
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} upward or forbidden include(s)", file=sys.stderr)
        return 1
    print(f"check-layers: {len(headers)} headers, every include goes down a layer or stays in one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
