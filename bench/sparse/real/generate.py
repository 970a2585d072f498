#!/usr/bin/env python3
"""The "real" problem set of bench/sparse/run.sh --suite real: finite-element matrices assembled by
scikit-fem (its own mesh generators; unstructured triangles and tetrahedra), written as Matrix
Market files, and the independent check of the solutions a benchmark run wrote back.

    generate.py DIR            assemble every problem missing under DIR (cached: a problem whose
                               meta.json exists is not assembled again)
    generate.py DIR --check    the true relative residual ||b - A x|| / ||b|| of every solution
                               DIR/*/x_*.mtx, computed here with SciPy from the files alone (JSON lines)

Each problem is a folder with A.mtx (symmetric when the operator is), b.mtx (the right-hand side,
array), meta.json (size, unknowns per node, dimension, symmetry) and, for elasticity, coords.mtx
(array, nodes x dim: the node of each block of `functions` rows, for the rigid body modes). Dirichlet
boundary conditions are eliminated (the rows and columns of the fixed unknowns removed), as FE
codes do before a solve; a node's unknowns are fixed together, so rows stay in whole nodes.

Problems (unknowns):
  elasticity3d_p1   linear elasticity, E = 1, nu = 0.3, unit ball, P1 tetrahedra, clamped where
                    z < -0.8, gravity; 3 unknowns per node, interleaved            (17 409)
  elasticity3d_p2   the same with P2 tetrahedra on a coarser ball                     (17 409)
  floating3d_p1     elasticity3d_p1's ball unclamped: singular (the 6 rigid body modes), gravity's
                    net force not balanced, meta "null_space": "rigid_body"
  poisson2d_p1/p2   -Δu = 1 on the unit disc, P1 / P2 triangles, u = 0 on the circle  (32 513)
  poisson3d_p1/p2   -Δu = 1 on the unit ball, P1 / P2 tetrahedra                      (41 727)
  aniso2d_p1        -div(K grad u) = 1, K with eigenvalues 1 and 1e-3 along axes turned 30°,
                    unit square, P1 triangles with the interior nodes jittered          (65 025)
  convdiff2d_p1     -eps Δu + w·grad u = 1, |w| = 1 at 30°, Péclet |w| L / eps = 1e3, SUPG
                    streamline diffusion, unit square, P1 (nonsymmetric)                (65 025)
  convdiff3d_p1     the same in the unit cube, Péclet 1e2, P1 tetrahedra, jittered     (29 791)
  convdiff3d_ball_p1  the same on the unit ball, Péclet 1e3, P1 tetrahedra            (41 727)
  beam3d_p1         elasticity of a 6 x 1 x 1 cantilever, structured P1 tetrahedra, clamped
                    at x = 0, gravity along z                                        (11 664)
  elasticity2d_p1/p2  plane elasticity of the unit disc, P1 / P2 triangles, clamped where
                    y < -0.8; 2 unknowns per node                                     (15 832)
  neumann2d_p1      -Δu = 1 + x on the unit disc with zero flux on the whole circle, P1: singular
                    (the constants), and b not consistent (the source does not integrate to zero):
                    solved in the least-squares sense, meta "null_space": "constants" (33 025)
  neumann3d_p1      the same on the unit ball, P1 tetrahedra                          (45 825)

A problem with a "null_space" ("constants", or "rigid_body": the modes of coords.mtx) is checked
against the consistent part of b: ||P b - A x|| / ||P b||, P the projection onto the null space's
orthogonal complement, with P applied to x as well.
"""
import json
import os
import sys

import numpy as np
import scipy.io
import scipy.sparse as sps

import skfem
from skfem import (Basis, BilinearForm, ElementTetP1, ElementTetP2, ElementTriP1, ElementTriP2, ElementVector,
                   LinearForm, MeshTet, MeshTri, asm, condense)
from skfem.models.elasticity import lame_parameters, linear_elasticity


def grad(u):
    """The gradient of a basis function in a form (scikit-fem keeps it on the function)."""
    return u.grad


def dot(a, b):
    """Σ_i a_i b_i over the leading (spatial) axis."""
    return sum(a[i] * b[i] for i in range(a.shape[0]))


def jitter(mesh, amount, seed):
    """The mesh with every interior node moved by up to `amount` of the local edge length at random:
    the generators' regular refinements become unstructured in geometry."""
    rng = np.random.default_rng(seed)
    p = mesh.p.copy()
    interior = np.setdiff1d(np.arange(p.shape[1]), mesh.boundary_nodes())
    h = np.min(np.linalg.norm(p[:, mesh.edges[0]] - p[:, mesh.edges[1]], axis=0)) if hasattr(mesh, "edges") and \
        mesh.dim() == 3 else np.min(np.linalg.norm(p[:, mesh.facets[0]] - p[:, mesh.facets[1]], axis=0))
    p[:, interior] += amount * h * rng.uniform(-1, 1, size=(p.shape[0], interior.size))
    return type(mesh)(p, mesh.t)


@BilinearForm
def laplace(u, v, w):
    return dot(grad(u), grad(v))


@LinearForm
def unit(v, w):
    return 1.0 * v


def elasticity(mesh, element, clamped):
    """Linear elasticity, E = 1, nu = 0.3, under gravity along the last axis; `clamped(locations)`
    marks the unknowns held at zero, every unknown of a clamped node (so rows stay in whole nodes).
    `clamped` None: a floating body, A singular (its rigid body modes), and gravity's net force
    makes b inconsistent."""
    dim = mesh.dim()
    basis = Basis(mesh, ElementVector(element))
    A = asm(linear_elasticity(*lame_parameters(1.0, 0.3)), basis)

    @LinearForm
    def gravity(v, w):
        return -1e-2 * v[dim - 1]

    b = asm(gravity, basis)
    locs = basis.doflocs
    if clamped is None:
        free = np.arange(A.shape[0])
    else:
        A, b, _, free = condense(A, b, D=np.nonzero(clamped(locs))[0])
    nodes = locs[:, free[::dim]].T
    assert all(np.all(free[f::dim] == free[::dim] + f) for f in range(dim)) and np.all(free[::dim] % dim == 0)
    meta = {"functions": dim, "dim": dim, "symmetric": True}
    if clamped is None:
        meta["null_space"] = "rigid_body"
    return A, b, meta, nodes


def poisson(mesh, element):
    basis = Basis(mesh, element)
    A, b = asm(laplace, basis), asm(unit, basis)
    A, b, _, _ = condense(A, b, D=basis.get_dofs())
    return A, b, {"functions": 1, "dim": mesh.dim(), "symmetric": True}, None


def neumann(mesh, element):
    basis = Basis(mesh, element)

    @LinearForm
    def source(v, w):
        return (1.0 + w.x[0]) * v

    A, b = asm(laplace, basis), asm(source, basis)
    return A, b, {"functions": 1, "dim": mesh.dim(), "symmetric": True, "null_space": "constants"}, None


def anisotropic():
    mesh = jitter(MeshTri.init_sqsymmetric().refined(7), 0.2, 1)
    theta, eps = np.pi / 6, 1e-3
    c, s = np.cos(theta), np.sin(theta)
    K = np.array([[c, -s], [s, c]]) @ np.diag([1.0, eps]) @ np.array([[c, s], [-s, c]])

    @BilinearForm
    def form(u, v, w):
        g = grad(u)
        return (K[0, 0] * g[0] + K[0, 1] * g[1]) * grad(v)[0] + (K[1, 0] * g[0] + K[1, 1] * g[1]) * grad(v)[1]

    basis = Basis(mesh, ElementTriP1())
    A, b = asm(form, basis), asm(unit, basis)
    A, b, _, _ = condense(A, b, D=basis.get_dofs())
    return A, b, {"functions": 1, "dim": 2, "symmetric": True}, None


def convection_diffusion(mesh, peclet):
    dim = mesh.dim()
    wind = np.array([np.cos(np.pi / 6), np.sin(np.pi / 6), 0.3][:dim])
    wind /= np.linalg.norm(wind)
    eps = 1.0 / peclet
    basis = Basis(mesh, ElementTriP1() if dim == 2 else ElementTetP1())

    @BilinearForm
    def form(u, v, w):
        h = w.h
        # SUPG: tau = h / (2|w|) (coth(Pe_h) - 1 / Pe_h), Pe_h = |w| h / (2 eps)
        pe = h / (2 * eps)
        tau = h / 2 * (1 / np.tanh(pe) - 1 / pe)
        wg_u = sum(wind[i] * grad(u)[i] for i in range(dim))
        wg_v = sum(wind[i] * grad(v)[i] for i in range(dim))
        return eps * dot(grad(u), grad(v)) + wg_u * v + tau * wg_u * wg_v

    @LinearForm
    def rhs(v, w):
        pe = w.h / (2 * eps)
        tau = w.h / 2 * (1 / np.tanh(pe) - 1 / pe)
        return 1.0 * v + tau * sum(wind[i] * grad(v)[i] for i in range(dim))

    A, b = asm(form, basis), asm(rhs, basis)
    A, b, _, _ = condense(A, b, D=basis.get_dofs())
    return A, b, {"functions": 1, "dim": dim, "symmetric": False, "peclet": peclet}, None


def below(axis, level):
    return lambda locs: locs[axis] < level


PROBLEMS = {
    "elasticity3d_p1": lambda: elasticity(MeshTet.init_ball(4), ElementTetP1(), below(2, -0.8)),
    "elasticity3d_p2": lambda: elasticity(MeshTet.init_ball(3), ElementTetP2(), below(2, -0.8)),
    "floating3d_p1": lambda: elasticity(MeshTet.init_ball(4), ElementTetP1(), None),
    "beam3d_p1": lambda: elasticity(
        MeshTet.init_tensor(np.linspace(0, 6, 49), np.linspace(0, 1, 9), np.linspace(0, 1, 9)), ElementTetP1(),
        below(0, 1e-9)),
    "elasticity2d_p1": lambda: elasticity(MeshTri.init_circle(6), ElementTriP1(), below(1, -0.8)),
    "elasticity2d_p2": lambda: elasticity(MeshTri.init_circle(5), ElementTriP2(), below(1, -0.8)),
    "poisson2d_p1": lambda: poisson(MeshTri.init_circle(7), ElementTriP1()),
    "poisson2d_p2": lambda: poisson(MeshTri.init_circle(6), ElementTriP2()),
    "poisson3d_p1": lambda: poisson(MeshTet.init_ball(5), ElementTetP1()),
    "poisson3d_p2": lambda: poisson(MeshTet.init_ball(4), ElementTetP2()),
    "neumann2d_p1": lambda: neumann(MeshTri.init_circle(7), ElementTriP1()),
    "neumann3d_p1": lambda: neumann(MeshTet.init_ball(5), ElementTetP1()),
    "aniso2d_p1": anisotropic,
    "convdiff2d_p1": lambda: convection_diffusion(jitter(MeshTri.init_sqsymmetric().refined(7), 0.2, 2), 1e3),
    "convdiff3d_p1": lambda: convection_diffusion(
        jitter(MeshTet.init_tensor(*[np.linspace(0, 1, 33)] * 3), 0.2, 3), 1e2),
    "convdiff3d_ball_p1": lambda: convection_diffusion(MeshTet.init_ball(5), 1e3),
}


def generate(root, names):
    for name in names:
        folder = os.path.join(root, name)
        if os.path.exists(os.path.join(folder, "meta.json")):
            continue
        os.makedirs(folder, exist_ok=True)
        A, b, meta, nodes = PROBLEMS[name]()
        A = sps.csr_matrix(A)
        A.sum_duplicates()
        A.eliminate_zeros()
        symmetric = meta["symmetric"]
        if symmetric:
            assert abs(A - A.T).max() <= 1e-12 * abs(A).max(), name
        scipy.io.mmwrite(os.path.join(folder, "A.mtx"), sps.tril(A) if symmetric else A,
                         symmetry="symmetric" if symmetric else "general", precision=17)
        scipy.io.mmwrite(os.path.join(folder, "b.mtx"), np.asarray(b).reshape(-1, 1), precision=17)
        if nodes is not None:
            scipy.io.mmwrite(os.path.join(folder, "coords.mtx"), nodes, precision=17)
        meta.update(name=name, n=int(A.shape[0]), nnz=int(A.nnz), row_entries=A.nnz / A.shape[0],
                    generator="scikit-fem " + skfem.__version__)
        with open(os.path.join(folder, "meta.json"), "w") as f:
            json.dump(meta, f)
        print(json.dumps({"bench": "real_problem", **meta}), flush=True)


def null_space_projection(meta, folder, n):
    """v -> v minus its component in the problem's null space (the identity when it has none)."""
    kind = meta.get("null_space")
    if kind is None:
        return lambda v: v
    if kind == "constants":
        basis = np.ones((n, 1))
    else:  # the rigid body modes of the nodes, 3 unknowns per node
        xyz = np.asarray(scipy.io.mmread(os.path.join(folder, "coords.mtx")))
        x, y, z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        zero, one = np.zeros_like(x), np.ones_like(x)
        modes = [(one, zero, zero), (zero, one, zero), (zero, zero, one), (-y, x, zero), (zero, -z, y), (z, zero, -x)]
        basis = np.stack([np.stack(m, axis=1).ravel() for m in modes], axis=1)
    q, _ = np.linalg.qr(basis)
    return lambda v: v - q @ (q.T @ v)


def check(root):
    """||b - A x|| / ||b|| of every written solution, from the files alone."""
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        solutions = sorted(f for f in os.listdir(folder) if f.startswith("x_")) if os.path.isdir(folder) else []
        if not solutions:
            continue
        A = sps.csr_matrix(scipy.io.mmread(os.path.join(folder, "A.mtx")))
        b = np.asarray(scipy.io.mmread(os.path.join(folder, "b.mtx"))).ravel()
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
        project = null_space_projection(meta, folder, b.size)
        b = project(b)
        for f in solutions:
            x = project(np.asarray(scipy.io.mmread(os.path.join(folder, f))).ravel())
            r = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
            print(json.dumps({"bench": "real_residual", "problem": name, "solution": f[2:-4],
                              "true_relative_residual": float(r)}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if "--check" in sys.argv[2:]:
        check(sys.argv[1])
    else:
        generate(sys.argv[1], [a for a in sys.argv[2:] if not a.startswith("-")] or list(PROBLEMS))
