"""Turns the benchmarks' JSON lines (bench/results/*.jsonl, written by bench/record.sh) into the
PNGs under docs/images that docs/performance.md and docs/sparse.md show. Reruns from the committed
JSON alone; needs matplotlib (pinned in scripts/install-deps.sh).

    /opt/einshard-deps/venv/bin/python bench/plot.py [--results bench/results] [--out docs/images]

Each plot is drawn only when its input file is there, so a partial set of results still plots.
Every figure shows einshard against the anchor measured in the same run (PETSc, torch::einsum):
the machine is shared and noisy, so ratios are what carries over, not absolute times.
"""

import argparse
import json
import os
import sys
from collections import defaultdict

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter
except ImportError:  # reported by main(), which knows whether a missing matplotlib is a skip
    plt = None


def rank_axis(ax, ranks):
    """A log axis of rank counts, labelled at the counts measured only."""
    ax.set_xscale("log")
    ax.set_xticks(ranks, labels=[str(x) for x in ranks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def load(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit("%s:%d: not JSON: %s" % (path, number, e))
    return rows


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.tight_layout()
    # No timestamps in the file, so a rerun on the same data gives the same bytes.
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    written.append(path)


def sparse_scaling(rows, out, written):
    """Strong scaling of CG and SpMV at 1-8 ranks, einshard against PETSc in the same launch."""
    cg = [r for r in rows if r.get("bench") == "sparse_cg"]
    spmv = [r for r in rows if r.get("bench") == "sparse_spmv"]
    if cg:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        by = defaultdict(list)
        for r in cg:
            by[r["precond"]].append(r)
        for precond, rs in sorted(by.items()):
            rs.sort(key=lambda r: r["ranks"])
            ranks = [r["ranks"] for r in rs]
            left.plot(ranks, [r["einshard_ms_per_it"] for r in rs], "o-", label="einshard, %s" % precond)
            left.plot(ranks, [r["petsc_ms_per_it"] for r in rs], "s--", label="PETSc, %s" % precond)
            right.plot(ranks, [r["ratio_paired"] for r in rs], "o-", label=precond)
        g = cg[0]
        all_ranks = sorted({r["ranks"] for r in cg})
        left.set(yscale="log", xlabel="ranks", ylabel="ms per CG iteration",
                 title="CG, %d x %d Poisson, %d iterations" % (g["grid"], g["grid"], g["iterations"]))
        rank_axis(left, all_ranks)
        left.legend(fontsize=8)
        right.axhline(1.0, color="gray", lw=0.8)
        right.set(xlabel="ranks", ylabel="PETSc time / einshard time (median of reps)",
                  title="against PETSc, same launch (> 1: einshard faster)")
        rank_axis(right, all_ranks)
        right.legend(fontsize=8)
        save(fig, out, "sparse_cg_scaling.png", written)
    if spmv:
        spmv.sort(key=lambda r: r["ranks"])
        ranks = [r["ranks"] for r in spmv]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(ranks, [r["einshard_apply_gbs"] for r in spmv], "o-", label="einshard apply")
        ax.plot(ranks, [r["einshard_matvec_gbs"] for r in spmv], "^-", label="einshard matvec")
        ax.plot(ranks, [r["petsc_gbs"] for r in spmv], "s--", label="PETSc MatMult")
        ax.plot(ranks, [r["triad_gbs"] for r in spmv], ":", color="gray", label="STREAM triad")
        ax.set(xlabel="ranks", ylabel="GB/s (minimal traffic)",
               title="SpMV, %d x %d Poisson" % (spmv[0]["grid"], spmv[0]["grid"]))
        rank_axis(ax, ranks)
        ax.legend(fontsize=8)
        save(fig, out, "sparse_spmv_scaling.png", written)


def local_overhead(rows, out, written):
    """Per-call time of local einshard against torch::einsum, case by case."""
    rs = [r for r in rows if r.get("bench") == "local" and "ratio_to_einsum" in r]
    if not rs:
        return
    fig, ax = plt.subplots(figsize=(10, 4.5))
    cases = sorted({r["case"] for r in rs})
    # einshard's two front ends, and the fastest hand-written torch call for the case (a matmul, a
    # permute, a reshape: what one would write instead of a notation).
    series = {"einshard<\"...\"> (compile time)": {}, "einshard(\"...\") (run time)": {},
              "hand-written torch": {}}
    for r in rs:
        if r.get("grad"):
            continue
        keys = {"einshard_static": "einshard<\"...\"> (compile time)", "einshard_runtime": "einshard(\"...\") (run time)"}
        if r["variant"] in keys:
            series[keys[r["variant"]]][r["case"]] = r["ratio_to_einsum"]
        elif r["variant"].startswith("direct"):
            d = series["hand-written torch"]
            d[r["case"]] = min(d.get(r["case"], float("inf")), r["ratio_to_einsum"])
    width = 0.8 / len(series)
    for k, (label, ratio) in enumerate(series.items()):
        xs = [i + k * width for i, c in enumerate(cases) if c in ratio]
        ax.bar(xs, [ratio[c] for c in cases if c in ratio], width, label=label)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))], labels=cases, rotation=30, ha="right",
                  fontsize=8)
    ax.set(ylabel="time / torch::einsum time", title="Local per-call overhead against torch::einsum (lower is better)")
    ax.legend(fontsize=8)
    save(fig, out, "local_overhead.png", written)


def cg_history(rows, out, written):
    """Residual histories of einshard's and PETSc's CG on the same matrix, by preconditioner."""
    rs = [r for r in rows if r.get("bench") == "sparse_cg_history"]
    if not rs:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {}
    for r in rs:
        colour = colours.setdefault(r["precond"], "C%d" % len(colours))
        res = r["residuals"]
        if not res:
            continue
        rel = [v / res[0] for v in res]
        if r["solver"] == "einshard":
            ax.semilogy(range(len(rel)), rel, "-", color=colour, lw=1.8, label="einshard, %s (%d it)" % (r["precond"], r["iterations"]))
        else:
            ax.semilogy(range(len(rel)), rel, "--", color="black", lw=0.9, dashes=(3, 3),
                        label="PETSc, %s (%d it)" % (r["precond"], r["iterations"]))
    g = rs[0]
    ax.set(xlabel="iteration", ylabel="||r_k|| / ||r_0|| (unpreconditioned)",
           title="CG on %d x %d Poisson, %d ranks: einshard (colour) and PETSc (dashed)" % (g["grid"], g["grid"], g["ranks"]))
    ax.legend(fontsize=8)
    save(fig, out, "sparse_cg_history.png", written)


def compile_time(rows, out, written):
    """CPU seconds to compile each TU of bench/compile_time, einshard's next to at::einsum's."""
    rs = {r["tu"]: r for r in rows if r.get("bench") == "compile_time_tu"}
    if not rs:
        return
    # Pairs in reading order: what a TU costs with einshard, and the same TU with ATen alone.
    pairs = [("baseline (includes only)", "baseline_einshard", "baseline_aten"),
             ("one notation", "notation1_einshard", "notation1_einsum"),
             ("50 notations", "notations_einshard", "notations_einsum")]
    pairs = [p for p in pairs if p[1] in rs and p[2] in rs]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(pairs))
    ax.bar([x - 0.2 for x in xs], [rs[p[1]]["median_cpu_s"] for p in pairs], 0.4, label="einshard<\"...\">")
    ax.bar([x + 0.2 for x in xs], [rs[p[2]]["median_cpu_s"] for p in pairs], 0.4, label="at::einsum")
    if "notations_check" in rs:
        ax.axhline(rs["notations_check"]["median_cpu_s"], color="gray", lw=0.8, ls=":",
                   label="parsing 50 notations alone (es::check)")
    ax.set_xticks(list(xs), labels=[p[0] for p in pairs])
    ax.set(ylabel="CPU seconds per TU (-O3)", title="Compile time of one translation unit")
    ax.set_ylim(0, 1.3 * max(rs[p[1]]["median_cpu_s"] for p in pairs))
    ax.legend(fontsize=8, loc="upper left")
    save(fig, out, "compile_time.png", written)


def against_anchor(ax_time, ax_ratio, series, title, anchor_label):
    """Time per call of einshard and its anchor against the rank count, and their ratio."""
    for label, rs in series:
        rs = sorted(rs, key=lambda r: r["ranks"])
        ranks = [r["ranks"] for r in rs]
        line, = ax_time.plot(ranks, [r["einshard_ms"] for r in rs], "o-", label="einshard, %s" % label)
        ax_time.plot(ranks, [r["anchor_ms"] if "anchor_ms" in r else r["fftw_ms"] for r in rs], "s--",
                     color=line.get_color(), alpha=0.6, label="%s, %s" % (anchor_label, label))
        ax_ratio.plot(ranks, [r["ratio_paired"] for r in rs], "o-", color=line.get_color(), label=label)
    all_ranks = sorted({r["ranks"] for _, rs in series for r in rs})
    ax_time.set(yscale="log", xlabel="ranks", ylabel="ms per call", title=title)
    rank_axis(ax_time, all_ranks)
    ax_time.legend(fontsize=7)
    ax_ratio.axhline(1.0, color="gray", lw=0.8)
    ax_ratio.set(xlabel="ranks", ylabel="einshard / %s (time)" % anchor_label,
                 title="median same-round ratio (< 1: einshard faster)")
    rank_axis(ax_ratio, all_ranks)
    ax_ratio.legend(fontsize=7)


def repartition_scaling(rows, out, written):
    """The all-to-all repartition a/p b -> a b/p against a hand-written MPI_Alltoallv at 1-8 ranks."""
    anchor = "mpi_pack_alltoallv_alloc"  # packs, exchanges, unpacks into a new tensor, as einshard must
    rs = [r for r in rows if r.get("bench") == "distributed" and r.get("anchor") == anchor
          and r.get("case", "").startswith("repartition")]
    if not rs:
        return
    series = defaultdict(list)
    for r in rs:
        series["%s %s, %g MiB/rank" % (r["case"], r["dtype"], r["mib_per_rank"])].append(r)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    against_anchor(left, right, sorted(series.items()), "repartition %s" % rs[0]["notation"], "hand-written MPI")
    save(fig, out, "repartition_scaling.png", written)


def fft_scaling(rows, out, written):
    """Distributed 3-D complex FFTs (einfft) against FFTW-MPI at 1-8 ranks, by output layout."""
    rs = [r for r in rows if r.get("bench") == "fft3d"]
    if not rs:
        return
    series = defaultdict(list)
    for r in rs:
        series["%s, n=%d" % (r["layout"], r["n"])].append(r)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    against_anchor(left, right, sorted(series.items()), "3-D complex FFT, complex128", "FFTW-MPI")
    save(fig, out, "fft_scaling.png", written)


PLOTS = {
    "repartition_scaling.jsonl": repartition_scaling,
    "fft_scaling.jsonl": fft_scaling,
    "compile_time.jsonl": compile_time,
    "sparse_cg_history.jsonl": cg_history,
    "sparse_scaling.jsonl": sparse_scaling,
    "local_overhead.jsonl": local_overhead,
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=os.path.join(here, "results"))
    p.add_argument("--out", default=os.path.join(here, "..", "docs", "images"))
    p.add_argument("--skip-without-matplotlib", action="store_true",
                   help="exit 77 (ctest's skip) instead of 1 when matplotlib is not installed")
    a = p.parse_args()
    if plt is None:
        print("bench/plot.py: matplotlib is not installed (scripts/install-deps.sh pins it in the venv)")
        sys.exit(77 if a.skip_without_matplotlib else 1)
    os.makedirs(a.out, exist_ok=True)
    written = []
    for name, plot in PLOTS.items():
        path = os.path.join(a.results, name)
        if os.path.exists(path):
            plot(load(path), a.out, written)
    if not written:
        sys.exit("bench/plot.py: no results under %s (run bench/record.sh first)" % a.results)
    for w in written:
        print("wrote", os.path.relpath(w))


if __name__ == "__main__":
    main()
