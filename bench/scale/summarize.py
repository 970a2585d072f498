#!/usr/bin/env python3
"""Markdown tables of bench/scale's results (the JSON lines run.sh writes).

    python3 bench/scale/summarize.py build/scale/results
    python3 bench/scale/summarize.py bench/results/scale --plot docs/images/scale_weak.png
    python3 bench/scale/summarize.py bench/results/scale --only sparse      # or notation, memory, amg

Reads validate.jsonl, weak.jsonl and strong.jsonl (whichever exist) and prints: the simulated
against the real runs at 1-8 ranks, weak and strong scaling on the fat tree, and the per-rank MPI
counts of each phase against the number of ranks. From notation.jsonl and notation_comm_only.jsonl
(notation_scaling.cpp): the notation's phases against P, their counts per rank, and the planner's
cost model (es::last_plan()) beside the counted figures. From memory_comm_only.jsonl and
memory_notation_comm_only.jsonl: each phase's memory per rank against P (memory_count.hpp). From
prepared_*_comm_only.jsonl: the stencil operations per call against the same prepared once. From
amg_validate.jsonl, amg.jsonl and amg_comm_only.jsonl: CG + BoomerAMG's setup, time per iteration and
iterations, real against simulated and against P.
"""
import json
import sys
from pathlib import Path


def load(path):
    runs, counts = [], []
    if not path.exists():
        return runs, counts
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:  # a run cut short (timeout) can leave half a line
            continue
        if d["bench"].endswith("_model"):
            continue  # notation_scaling's planner figures: load_models
        (counts if d["bench"].endswith("_counts") else runs).append(d)
    return runs, counts


def load_models(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if d.get("bench", "").endswith("_model"):
            out.append(d)
    return out


def fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return "\n".join(out)


def key(d):
    return (d["dim"], d["ranks"])


def standard(d):
    return d.get("cg_variant", "standard") == "standard"


def variants(comm_runs, compute):
    """CG per iteration by variant (no computation charged), with the computation of one rank added,
    and that estimate's efficiency against the same variant at 8 ranks."""
    lines = []
    for dim in (2, 3):
        rs = [d for d in comm_runs if d["dim"] == dim and d["ranks"] >= 8 and dim in compute]
        names = sorted({d.get("cg_variant", "standard") for d in rs})
        if len(names) < 2:
            continue
        rows = []
        for name in names:
            vs = sorted((d for d in rs if d.get("cg_variant", "standard") == name), key=key)
            base = next((d for d in vs if d["ranks"] == 8), None)
            for d in vs:
                est = compute[dim] + d["cg_iter_us"]
                eff = (compute[dim] + base["cg_iter_us"]) / est if base else None
                rows.append([name, d["ranks"], d["cg_iter_us"], est, eff])
        lines.append(f"\n**{dim}-D Poisson, CG's variants, no computation charged** (+ {compute[dim]:.3g} us of "
                     "computation per iteration, measured at one rank)\n")
        lines.append(table(["variant", "ranks", "CG it. (us)", "+ computation (us)", "eff. against 8 ranks"], rows))
    return "\n".join(lines)


def validation(runs):
    by = {}
    for d in runs:
        by[(d["runner"], d["platform"], d["dim"], d["ranks"])] = d
    lines = []
    for dim in (2, 3):
        rows = []
        for p in (1, 2, 4, 8):
            r = by.get(("mpirun", "this_machine", dim, p))
            m = by.get(("smpi", "this_machine", dim, p))
            f = by.get(("smpi", "fat_tree", dim, p))
            if not r:
                continue
            for what, k, scale in (("from_local (ms)", "assemble_s", 1e3), ("halo (us)", "halo_us", 1),
                                   ("CG it. (us)", "cg_iter_us", 1), ("solve (ms)", "solve_s", 1e3)):
                rv = r[k] * scale
                mv = m[k] * scale if m else None
                fv = f[k] * scale if f else None
                rows.append([str(p), what, rv, mv, (mv / rv) if (mv and rv) else None, fv])
        if rows:
            lines.append(f"\n**{dim}-D Poisson, {'64²' if dim == 2 else '16³'} rows per rank** "
                         "(real: mpirun on this machine; simulated: SMPI)\n")
            lines.append(table(["ranks", "phase", "real", "SMPI this machine", "ratio", "SMPI fat tree"], rows))
    return "\n".join(lines)


def scaling(runs, mode, title="", compute=None):
    """compute: {dim: CG iteration at 1 rank with computation charged}; given for the comm-only runs,
    it adds an estimate: that computation (the same rows per rank at every P) plus the simulated
    communication, and its efficiency."""
    lines = []
    for dim in (2, 3):
        rs = sorted((d for d in runs if d["dim"] == dim and d["platform"] == "fat_tree" and standard(d)), key=key)
        if not rs:
            continue
        base = rs[0]
        if mode == "weak":  # against 8 ranks (a 4 x 2 or 2 x 2 x 2 grid), or the first P past 1
            base = next((d for d in rs if d["ranks"] == 8), next((d for d in rs if d["ranks"] > 1), rs[0]))
        rows = []
        for d in rs:
            if mode == "weak":
                eff_cg = base["cg_iter_us"] / d["cg_iter_us"] if d["cg_iter_us"] > 0 else None
                eff_halo = base["halo_us"] / d["halo_us"] if d["halo_us"] > 0 and base["halo_us"] > 0 else None
            else:
                eff_cg = base["cg_iter_us"] * base["ranks"] / (d["cg_iter_us"] * d["ranks"])
                eff_halo = None
            row = [d["ranks"], d["rows"], d["rows_per_rank"], d["neighbours_max"], d["mesh_s"] * 1e3,
                   d["assemble_s"] * 1e3, d["halo_us"], d["cg_iter_us"], eff_cg, eff_halo, d["wall_s"]]
            if compute and dim in compute:
                est = compute[dim] + d["cg_iter_us"]
                row[9:9] = [est, (compute[dim] + base["cg_iter_us"]) / est]
            rows.append(row)
        lines.append(f"\n**{dim}-D Poisson, {mode} scaling on the fat tree{title}** (efficiency against "
                     f"{base['ranks']} rank{'s' if base['ranks'] > 1 else ''})\n")
        header = ["ranks", "rows", "rows/rank", "neighbours", "Mesh (ms)", "from_local (ms)", "halo (us)",
                  "CG it. (us)", "CG eff.", "halo eff.", "wall (s)"]
        if compute and dim in compute:
            header[9:9] = [f"CG it. + {compute[dim]:.3g} us compute", "its eff."]
        lines.append(table(header, rows))
    return "\n".join(lines)


def counts_table(counts, runs, comm_counts=()):
    """Per rank (max over ranks): what each phase asks of MPI, against P (weak runs), and the
    simulated time inside MPI in the runs with no computation charged."""
    lines = []
    iters = {(d["dim"], d["ranks"]): (d["cg_iters"], d.get("halo_reps", 20)) for d in runs if standard(d)}
    for dim in (2, 3):
        cs = [c for c in counts if c["dim"] == dim and c.get("platform") == "fat_tree" and standard(c)]
        if not cs:
            continue
        ranks = sorted({c["ranks"] for c in cs})
        for phase, per in (("mesh", None), ("assemble", None), ("halo", "exchange"), ("cg", "iteration")):
            rows = []
            fns = set()
            for p in ranks:
                c = next((c for c in cs if c["ranks"] == p and c["phase"] == phase), None)
                if c:
                    fns |= set(c["fn"])
            fns = sorted(fns)
            for p in ranks:
                c = next((c for c in cs if c["ranks"] == p and c["phase"] == phase), None)
                if not c:
                    continue
                div = 1
                if per == "exchange":
                    div = iters.get((dim, p), (20, 20))[1]
                elif per == "iteration":
                    div = iters.get((dim, p), (20, 20))[0] or 1
                dense = sum(v["dense"] for v in c["fn"].values())
                cc = next((x for x in comm_counts
                           if x["dim"] == dim and x["ranks"] == p and x["phase"] == phase and standard(x)), None)
                row = [p, c["collectives"] / div, c["sends"] / div, c["bytes"] / div, dense / div,
                       cc["mpi_seconds"] * 1e6 / div if cc else None]
                row += [f"{c['fn'][f]['calls'] / div:g}" if f in c["fn"] else "-" for f in fns]
                rows.append(row)
            label = f" per {per}" if per else ""
            lines.append(f"\n**{dim}-D, phase `{phase}`{label}: per rank, max over ranks**\n")
            lines.append(table(["ranks", "collectives", "messages sent", "bytes sent", "P-sized count entries",
                                "in MPI, comm only (us)"]
                               + [f"{f} calls" for f in fns], rows))
    return "\n".join(lines)


def plot(comm_runs, weak_runs, path):
    """Weak efficiency against ranks (log scale), against 8 ranks: the CG iteration (the simulated
    communication plus the computation of one rank) and the halo exchange, 2-D and 3-D."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    one = {d["dim"]: d["cg_iter_us"] for d in weak_runs if d["ranks"] == 1}
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for dim, style in ((2, "-"), (3, "--")):
        rs = sorted((d for d in comm_runs if d["dim"] == dim and d["ranks"] >= 8 and standard(d)), key=key)
        if not rs or dim not in one:
            continue
        base = rs[0]
        ps = [d["ranks"] for d in rs]
        ax.plot(ps, [(one[dim] + base["cg_iter_us"]) / (one[dim] + d["cg_iter_us"]) for d in rs], "o" + style,
                label=f"{dim}-D CG + Jacobi, per iteration")
        ax.plot(ps, [base["halo_us"] / d["halo_us"] for d in rs], "s" + style, label=f"{dim}-D halo exchange")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("simulated ranks (fat tree, 4,096 rows per rank)")
    ax.set_ylabel("weak efficiency against 8 ranks")
    ax.set_ylim(0, 1.3)
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---- the notation (notation_scaling.cpp) ---------------------------------------------------------

NOTATION_PHASES = (("contract_first", "contraction, 1st call", False), ("contract", "contraction", True),
                   ("repart_first", "repartition, 1st", False), ("repart", "repartition", True),
                   ("mlp_first", "TP MLP step, 1st", False), ("mlp", "TP MLP step", True),
                   ("rowrepart_first", "row repartition, 1st", False), ("rowrepart", "row repartition", True),
                   ("halo_first", "halo exchange, 1st", False), ("halo", "halo exchange", True),
                   ("fft_first", "pencil FFT, 1st", False), ("fft", "pencil FFT", True))


def notation_times(runs, title):
    """Simulated time per phase against P (repeated phases per call) and the repeated phases'
    efficiency against 8 ranks."""
    rs = sorted(runs, key=lambda d: d["ranks"])
    if not rs:
        return ""
    base = next((d for d in rs if d["ranks"] == 8), None)
    header = ["ranks", "mesh p x q"] + [f"{label} (us)" for _, label, _ in NOTATION_PHASES]
    rows = []
    for d in rs:
        rows.append([d["ranks"], f"{d['mesh2'][0]} x {d['mesh2'][1]}"]
                    + [d.get(f"{k}_s", 0) * 1e6 if f"{k}_s" in d else None for k, _, _ in NOTATION_PHASES])
    lines = [f"\n**Simulated time per phase, {title}** (repeated calls: per call)\n", table(header, rows)]
    if base:
        eff = []
        for d in rs:
            if d["ranks"] < 8:
                continue
            eff.append([d["ranks"]] + [base[f"{k}_s"] / d[f"{k}_s"] if d.get(f"{k}_s") else None
                                       for k, _, rep in NOTATION_PHASES if rep] + [d["wall_s"]])
        lines.append(f"\n**Weak efficiency against 8 ranks, {title}** (time at 8 ranks / time at P)\n")
        lines.append(table(["ranks"] + [label for _, label, rep in NOTATION_PHASES if rep] + ["wall (s)"], eff))
    return "\n".join(lines)


def notation_counts(counts, runs):
    """Per rank (max over ranks) for each phase: collectives, messages, bytes, P-sized count entries,
    and calls per MPI function (repeated phases: per call)."""
    reps = {d["ranks"]: d["reps"] for d in runs}
    repart_reps = {d["ranks"]: d.get("repart_reps", d["reps"]) for d in runs}
    lines = []
    for phase, label, rep in NOTATION_PHASES:
        cs = sorted((c for c in counts if c["phase"] == phase), key=lambda c: c["ranks"])
        if not cs:
            continue
        fns = sorted({f for c in cs for f in c["fn"]})
        rows = []
        for c in cs:
            div = (repart_reps if phase == "repart" else reps).get(c["ranks"], 1) if rep else 1
            dense = sum(v["dense"] for v in c["fn"].values())
            ag = c["fn"].get("Allgather", {}).get("bytes", 0) / div
            rows.append([c["ranks"], c["collectives"] / div, c["sends"] / div, c["bytes"] / div, dense / div,
                         ag * c["ranks"], c["mpi_seconds"] * 1e6 / div]
                        + [f"{c['fn'][f]['calls'] / div:g}" if f in c["fn"] else "-" for f in fns])
        lines.append(f"\n**Phase `{phase}` ({label}{', per call' if rep else ''}): per rank, max over ranks**\n")
        lines.append(table(["ranks", "collectives", "messages sent", "bytes sent", "P-sized count entries",
                            "bytes received by the agreement's all-gather", "in MPI (us)"]
                           + [f"{f} calls" for f in fns], rows))
    return "\n".join(lines)


def notation_model(models, counts, runs):
    """The planner's per-rank figures (es::last_plan() after the repeated calls: rank 0's, and the
    maximum over ranks where the run recorded it) beside the counted ones (per call, max over ranks). Collectives: the plan's communication steps against the counted calls less the
    agreement's all-gather; bytes: the plan's bytes sent (all-reduce: a ring's 2(P-1)/P of the
    buffer) against the counted bytes handed to MPI (all-reduce: the buffer; point-to-point: the
    payload)."""
    reps = {d["ranks"]: d["reps"] for d in runs}
    repart_reps = {d["ranks"]: d.get("repart_reps", d["reps"]) for d in runs}
    rows = []
    ranks = sorted({m["ranks"] for m in models if m["ranks"] > 1})
    for p in ranks:
        ms = {m["phase"]: m for m in models if m["ranks"] == p}
        for phase, parts in (("contract", (("contract", "fwd"),)), ("repart", (("repart", "fwd"),)),
                             ("rowrepart", (("rowrepart", "fwd"),)), ("halo", (("halo", "fwd"),)),
                             ("mlp", (("mlp_row", "fwd"), ("mlp_row", "bwd"), ("mlp_column", "fwd"),
                                      ("mlp_column", "bwd"))),
                             ("fft", (("fft", "fwd"),))):
            c = next((c for c in counts if c["ranks"] == p and c["phase"] == phase), None)
            if not c or any(m not in ms for m, _ in parts):
                continue
            div = (repart_reps if phase == "repart" else reps).get(p, 1)
            coll = sum(ms[m][f"{d}_collectives"] for m, d in parts)
            sent = sum(ms[m][f"{d}_sent"] for m, d in parts)
            # The maximum over ranks of the plan's figure (what the counts report), where recorded.
            sent_max = (sum(ms[m][f"max_{d}_sent"] for m, d in parts)
                        if all(f"max_{d}_sent" in ms[m] for m, d in parts) else None)
            ag = c["fn"].get("Allgather", {})
            counted_coll = (c["collectives"] - ag.get("calls", 0)) / div
            p2p = sum(c["fn"].get(f, {}).get("calls", 0) for f in ("Isend", "Send", "Issend")) / div
            counted_bytes = (c["bytes"] - ag.get("bytes", 0)) / div
            steps = " + ".join(ms[m]["steps"] for m in dict.fromkeys(m for m, _ in parts))
            ring = 2 * (p - 1) / p if p > 1 else 0
            note = ""
            if "allreduce" in steps and p > 1:
                note = f"buffer x 2(P-1)/P = {fmt(counted_bytes * ring)}"
            rows.append([p, phase, coll, counted_coll, p2p, sent, sent_max, counted_bytes, note, steps])
    if not rows:
        return ""
    return ("\n**Cost model (es::last_plan(), per rank) against the counts (per call)**\n\n" +
            table(["ranks", "phase", "model: communication steps", "counted collectives (less the agreement)",
                   "counted messages", "model: bytes sent (rank 0)", "model: max over ranks",
                   "counted: bytes handed to MPI", "", "plan (rank 0's)"], rows))


def notation(out):
    cr, cc = load(out / "notation_comm_only.jsonl")
    wr, wc = load(out / "notation.jsonl")
    models = load_models(out / "notation_comm_only.jsonl")
    # Reruns of single points (run.sh notation-one-comm notation_comm_only_<name>.jsonl ...) replace them.
    for extra in sorted(out.glob("notation_comm_only_*.jsonl")):
        er, ec = load(extra)
        again = {d["ranks"] for d in er}
        cr = [d for d in cr if d["ranks"] not in again] + er
        cc = [c for c in cc if c["ranks"] not in again] + ec
        models = [m for m in models if m["ranks"] not in again] + load_models(extra)
    if not (cr or wr):
        return
    print("\n### The notation: weak scaling on the fat tree\n")
    if wr:
        print(notation_times(wr, "computation charged"))
    if cr:
        print(notation_times(cr, "no computation charged"))
        print("\n### The notation: per-rank MPI counts against P (no computation charged)\n")
        print(notation_counts(cc, cr))
        print(notation_model(models, cc, cr))


# The stencil operations, each per call (agreement included), prepared once, then the prepared call.
PREPARED = (("halo", "halo_prepare", "halo_prepared", "`einhalo` / `prepare_halo`"),
            ("window", "window_prepare", "window_prepared", "`einwindow` / `prepare_window`"),
            ("conv", "conv_prepare", "conv_prepared", "`einconv` / `prepare_conv`"),
            ("roll", "roll_prepare", "roll_prepared", "`einroll` / `prepare_roll`"))


def prepared(out):
    """From prepared_*_comm_only.jsonl (run.sh notation-one-comm FILE fat_tree P --phases halo or
    stencil): per operation and P, the simulated time of a call, of preparing once and of a prepared
    call, and the counts per call (max over ranks) of the call and of the prepared call."""
    runs, counts = [], []
    for f in sorted(out.glob("prepared_*_comm_only.jsonl")):
        r, c = load(f)
        runs += r
        counts += c
    if not runs:
        return
    rows = []
    for each, prep, done, label in PREPARED:
        for d in sorted((d for d in runs if f"{done}_s" in d), key=lambda d: d["ranks"]):
            p, reps = d["ranks"], d["reps"]
            cs = {c["phase"]: c for c in counts if c["ranks"] == p and c["reps"] == reps
                  and c["phase"] in (each, done)}
            if each not in cs or done not in cs:
                continue
            per = [(cs[k]["collectives"] / reps, cs[k]["sends"] / reps, cs[k]["bytes"] / reps) for k in (each, done)]
            rows.append([label, p, d[f"{each}_s"] * 1e6, d[f"{prep}_s"] * 1e6, d[f"{done}_s"] * 1e6,
                         d[f"{each}_s"] / d[f"{done}_s"], reps,
                         f"{per[0][0]:g} / {per[0][1]:g} / {per[0][2]:,.0f}",
                         f"{per[1][0]:g} / {per[1][1]:g} / {per[1][2]:,.0f}", d.get("wall_s")])
    print("\n### The stencil operations prepared once (no computation charged)\n")
    print("\n**Per call, simulated; counts per call per rank, max over ranks: collectives / messages sent / "
          "bytes handed to MPI**\n")
    print(table(["operation", "ranks", "per call (us)", "prepare once (us)", "prepared call (us)", "ratio",
                 "calls timed", "counted per call", "counted per prepared call", "wall (s)"], rows))


# The phases of each program in the order they run; the others (sync, model, init) hold what lies
# between them.
MEMORY_PHASES = {
    "poisson_scaling": ["mesh", "mesh3", "triples", "assemble", "halo_first", "halo", "rhs", "cg_first", "cg",
                        "solve", "save", "load"],
    "notation_scaling": ["mesh", "contract_first", "contract", "repart_first", "repart", "mlp_first", "mlp", "mesh2",
                         "rowrepart_first", "rowrepart", "halo_first", "halo", "halo_prepare", "halo_prepared",
                         "fft_first", "fft"],
}


def memory_tables(counts, title):
    """Per rank, max over ranks, per phase against P: the most bytes held above the phase's start
    (peak) and the bytes it leaves held (held), tensors and heap (bench/scale/memory_count.hpp)."""
    cs = [c for c in counts if "mem" in c and standard(c)]
    if not cs:
        return ""
    bench = cs[0]["bench"].removesuffix("_counts")
    ranks = sorted({c["ranks"] for c in cs})
    lines = []
    for kind, what in (("tensor", "tensor storage"), ("heap", "C++ heap")):
        rows = []
        for phase in MEMORY_PHASES[bench]:
            row, seen = [f"`{phase}`"], False
            for p in ranks:
                c = next((c for c in cs if c["ranks"] == p and c["phase"] == phase), None)
                if c:
                    seen = True
                    m = c["mem"]
                    row.append(f"{m[kind + '_peak']:,.0f} / {m[kind + '_held']:,.0f}")
                else:
                    row.append("-")
            if seen:
                rows.append(row)
        # Everything held at the end of the last phase that ran (the program's data included).
        last = []
        for p in ranks:
            done = [c for c in cs if c["ranks"] == p and c["phase"] in MEMORY_PHASES[bench]]
            last.append(f"{done[-1]['mem'][kind + '_total']:,.0f}" if done else "-")
        rows.append(["held in all, at the end"] + last)
        lines.append(f"\n**{title}: {what}, bytes per rank (max over ranks), peak above the phase's start / "
                     "held after it**\n")
        lines.append(table(["phase"] + [f"P = {p:,}" for p in ranks], rows))
    return "\n".join(lines)


def memory(out):
    _, pc = load(out / "memory_comm_only.jsonl")
    _, nc = load(out / "memory_notation_comm_only.jsonl")
    if not (pc or nc):
        return
    print("\n### Per-rank memory against P (weak runs, communication only)\n")
    for dim, box in ((2, "64²"), (3, "16³")):
        t = memory_tables([c for c in pc if c.get("dim") == dim], f"{dim}-D Poisson, {box} rows per rank")
        if t:
            print(t)
    t = memory_tables(nc, "The notation")
    if t:
        print(t)


def amg(out):
    """From amg.jsonl and amg_comm_only.jsonl (run.sh amg): CG + BoomerAMG to rtol 1e-8, weak."""
    runs = {}
    for name, label in (("amg.jsonl", "charged"), ("amg_comm_only.jsonl", "comm")):
        for d in load(out / name)[0]:
            runs[(label, d["ranks"])] = d
    if not runs:
        return
    ranks = sorted({p for _, p in runs})
    base = {label: runs.get((label, 8)) for label in ("charged", "comm")}
    # The estimate: one rank's computation (charged, 1 rank) plus each P's simulated communication.
    one = runs.get(("charged", 1))
    estimate = {p: one["cg_iter_us"] + runs[("comm", p)]["cg_iter_us"] for p in ranks
                if one and ("comm", p) in runs}
    rows = []
    for p in ranks:
        row = [p]
        for label in ("charged", "comm"):
            d = runs.get((label, p))
            b = base[label]
            it = d["cg_iter_us"] if d else None
            row += [1e3 * d["setup_s"] if d else None, it, d["solve_iters"] if d else None,
                    b["cg_iter_us"] / it if d and b and it else None]
        row += [estimate.get(p), estimate[8] / estimate[p] if 8 in estimate and p in estimate else None]
        rows.append(row)
    val = {}
    for d in load(out / "amg_validate.jsonl")[0]:
        val[(d.get("runner"), d["ranks"])] = d
    vrows = []
    for p in sorted({p for _, p in val}):
        r, m = val.get(("mpirun", p)), val.get(("smpi", p))
        if not (r and m):
            continue
        vrows.append([p, 1e3 * r["setup_s"], 1e3 * m["setup_s"], m["setup_s"] / r["setup_s"], r["cg_iter_us"],
                      m["cg_iter_us"], m["cg_iter_us"] / r["cg_iter_us"], f'{r["solve_iters"]} / {m["solve_iters"]}'])
    if vrows:
        print("\n### CG + BoomerAMG, simulated against real, 1-8 ranks\n")
        print("**2-D Poisson, 64² rows per rank** (real: mpirun with Debian's hypre; simulated: SMPI on this "
              "machine's model with hypre built for it)\n")
        print(table(["ranks", "setup real (ms)", "setup SMPI (ms)", "ratio", "CG + AMG it. real (us)",
                     "it. SMPI (us)", "ratio", "iterations real / SMPI"], vrows))
    print("\n### CG + BoomerAMG, weak scaling (hypre built for SMPI)\n")
    print("**2-D Poisson, 64² rows per rank, rtol 1e-8, einshard's AMG defaults** (efficiency: CG + AMG per "
          "iteration against 8 ranks)\n")
    print(table(["ranks", "setup (ms)", "CG + AMG it. (us)", "iterations", "eff.",
                 "setup, comm only (ms)", "it., comm only (us)", "iterations, comm only", "eff., comm only",
                 "estimate: 1-rank it. + comm (us)", "est. eff."], rows))


def main():
    args = [a for a in sys.argv[1:] if a not in ("--plot", "--only")]
    plot_to = sys.argv[sys.argv.index("--plot") + 1] if "--plot" in sys.argv else None
    if plot_to:
        args.remove(plot_to)
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None  # sparse or notation
    if only:
        args.remove(only)
    out = Path(args[0] if args else "build/scale/results")
    if only == "notation":
        notation(out)
        prepared(out)
        return
    if only == "memory":
        memory(out)
        return
    if only == "amg":
        amg(out)
        return
    vr, _ = load(out / "validate.jsonl")
    wr, wc = load(out / "weak.jsonl")
    # Reruns of single points (run.sh one weak_<name>.jsonl ...) replace those points.
    for extra in sorted(out.glob("weak_*.jsonl")):
        if extra.name == "weak_comm_only.jsonl":
            continue
        er, ec = load(extra)
        again = {(d["dim"], d["ranks"]) for d in er}
        wr = [d for d in wr if (d["dim"], d["ranks"]) not in again] + er
        wc = [c for c in wc if (c["dim"], c["ranks"]) not in again] + ec
    sr, _ = load(out / "strong.jsonl")
    cr, cc = load(out / "weak_comm_only.jsonl")
    if vr:
        print("### Simulated against real, 1-8 ranks\n")
        print(validation(vr))
    if wr:
        print("\n### Weak scaling\n")
        print(scaling(wr, "weak"))
    if cr:
        print("\n### Weak scaling, communication only (no computation charged)\n")
        one = {d["dim"]: d["cg_iter_us"] for d in wr if d["ranks"] == 1}
        print(scaling(cr, "weak", ", no computation charged", one))
        print(variants(cr, one))
    if sr:
        print("\n### Strong scaling\n")
        print(scaling(sr, "strong"))
    # Where no run with computation charged reached a P, the counts of the communication-only run.
    charged = {(c["dim"], c["ranks"]) for c in wc}
    wc = wc + [c for c in cc if (c["dim"], c["ranks"]) not in charged]
    wr = wr + [d for d in cr if (d["dim"], d["ranks"]) not in {(e["dim"], e["ranks"]) for e in wr}]
    if wc:
        print("\n### Per-rank MPI counts against P (weak runs)\n")
        print(counts_table(wc, wr, cc))
    if plot_to and cr:
        plot(cr, wr, plot_to)
    if only is None:
        amg(out)
        notation(out)
        prepared(out)
        memory(out)


if __name__ == "__main__":
    main()
