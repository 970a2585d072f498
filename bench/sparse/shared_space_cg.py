"""Iterations of block CG over a Krylov space shared by k right-hand sides (O'Leary's block CG,
with the search block orthonormalized and rank-revealed each step, columns dropped as they
converge) against k independent CG recurrences (what einshard's block solve runs), on 2-D 5-point
and 3-D 7-point Dirichlet Poisson, random right-hand sides, rtol 1e-8, one process, torch.

    /opt/einshard-deps/venv/bin/python bench/sparse/shared_space_cg.py [--grid2 316] [--grid3 46]

One JSON line per (problem, k): iterations and seconds of each, and the largest true relative
residual of the shared-space solution. Why einshard does not offer the shared space:
docs/sparse.md, "Why not a block Krylov space shared by the columns".
"""
import argparse
import json
import time

import torch


def poisson(n, dim):
    shape = (n,) * dim
    count = n**dim
    idx = torch.arange(count)
    coords = torch.stack(torch.unravel_index(idx, shape))
    rows, cols, vals = [idx], [idx], [torch.full((count,), 2.0 * dim)]
    for axis in range(dim):
        for step in (-1, 1):
            moved = coords.clone()
            moved[axis] += step
            inside = (moved[axis] >= 0) & (moved[axis] < n)
            flat = torch.zeros(count, dtype=torch.long)
            for a in range(dim):
                flat = flat * n + moved[a]
            rows.append(idx[inside])
            cols.append(flat[inside])
            vals.append(torch.full((int(inside.sum()),), -1.0))
    a = torch.sparse_coo_tensor(torch.stack([torch.cat(rows), torch.cat(cols)]), torch.cat(vals), (count, count))
    return a.coalesce().to_sparse_csr()


def independent_cg(a, b, rtol):
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rr = (r * r).sum(0)
    stop = rtol * rr.sqrt()
    for it in range(1, 100000):
        q = a @ p
        alpha = rr / (p * q).sum(0)
        x += p * alpha
        r -= q * alpha
        rr_next = (r * r).sum(0)
        if (rr_next.sqrt() <= stop).all():
            return x, it
        p = r + p * (rr_next / rr)
        rr = rr_next


def orthonormal(w, drop=1e-12):
    g = w.T @ w
    d = g.diagonal().sqrt()
    lam, v = torch.linalg.eigh(g / d[:, None] / d[None, :])
    keep = lam > drop * lam.max()
    return w @ ((v[:, keep] / lam[keep].sqrt()) / d[:, None])


def shared_space_cg(a, b, rtol):
    x = torch.zeros_like(b)
    r = b.clone()
    stop = rtol * b.norm(dim=0)
    active = torch.ones(b.shape[1], dtype=torch.bool)
    p = orthonormal(r)
    for it in range(1, 100000):
        q = a @ p
        factor = torch.linalg.cholesky(p.T @ q)
        alpha = torch.cholesky_solve(p.T @ r[:, active], factor)
        x[:, active] += p @ alpha
        r[:, active] -= q @ alpha
        active = r.norm(dim=0) > stop
        if not active.any():
            return x, it
        z = r[:, active]
        p = orthonormal(z - p @ torch.cholesky_solve(q.T @ z, factor))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid2", type=int, default=316)
    parser.add_argument("--grid3", type=int, default=46)
    parser.add_argument("--k", default="8,16,32")
    parser.add_argument("--rtol", type=float, default=1e-8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    for dim, n in ((2, args.grid2), (3, args.grid3)):
        a = poisson(n, dim)
        for k in (int(v) for v in args.k.split(",")):
            torch.manual_seed(0)
            b = torch.rand(a.shape[0], k)
            t = time.perf_counter()
            _, its_independent = independent_cg(a, b, args.rtol)
            s_independent = time.perf_counter() - t
            t = time.perf_counter()
            x, its_shared = shared_space_cg(a, b, args.rtol)
            s_shared = time.perf_counter() - t
            residual = ((b - a @ x).norm(dim=0) / b.norm(dim=0)).max().item()
            print(json.dumps({"bench": "shared_space_cg", "dim": dim, "grid": n, "k": k, "rtol": args.rtol,
                              "independent_iterations": its_independent, "shared_iterations": its_shared,
                              "independent_s": round(s_independent, 3), "shared_s": round(s_shared, 3),
                              "shared_true_residual": residual}), flush=True)


if __name__ == "__main__":
    main()
