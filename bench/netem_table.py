#!/usr/bin/python3
"""bench/netem_grid.sh's tables and plot: every cell's measurement (fsdp-bench's JSON records,
one file per cell) next to the time model's prediction, written to OUT/table.md and
OUT/step_vs_link.png (the plot needs Debian's python3-matplotlib; without it the tables are still
made).

Usage: bench/netem_table.py OUT [BASE]
BASE: an earlier grid's folder: its cells that OUT has no file for join the table (a grid re-run
in part, e.g. with --repeats, next to the rest of the first run).
"""
import glob
import json
import os
import sys


def rows(out, base=None):
    """Every record of OUT's JSON files, and of BASE's files that OUT lacks."""
    paths = {os.path.basename(p): p for p in glob.glob(os.path.join(base, "*.json"))} if base else {}
    paths.update({os.path.basename(p): p for p in glob.glob(os.path.join(out, "*.json"))})
    records = []
    for _, path in sorted(paths.items()):
        with open(path) as f:
            for r in json.load(f):
                r["cell"] = os.path.basename(path)[:-5]
                records.append(r)
    return records


def link_gbit(r):
    """The emulated link's rate (what netem.sh was given), from the cell's label "H x R, RATE"."""
    rate = r["label"].split(", ")[1]
    return float(rate.replace("gbit", ""))


def hosts(r):
    return int(r["label"].split(" x ")[0])


def backend(r):
    """gloo, mpi, or mpi without its progress thread (the label says so)."""
    return r["backend"] + (" (no progress thread)" if "no progress" in r["label"] else "")


def repeats(r):
    """How many times fsdp-bench ran the cell, each repeat with its own compute alone (records
    from before --repeats carried one prediction and no list)."""
    return len(r.get("predicted_steps", [0]))


def collectives_cpu(r):
    """The CPU seconds a step took beyond the compute alone's (the process's, the busiest rank's),
    measured, and the collectives' CPU seconds the model counts; None where the record predates
    them (2026-11-27)."""
    profiles = r.get("compute_alone_profiles")
    if not profiles or "cpu" not in r["median"]:
        return None, None
    alone = sum(p["cpu"] for p in profiles) / len(profiles)
    return r["median"]["cpu"] - alone, r["predicted"]["comm_cpu"]


def compute_idle(r):
    """Pinned runs since 2026-11-27 (late): the time a step the training threads' CPUs sat idle
    (fsdp-bench's compute_cpus_idle_ns), the exposed communication on the compute's own
    timeline; else None."""
    return r.get("cpus", {}).get("compute_idle_seconds")


def cell(value):
    return "-" if value is None else f"{value:.2f}"


def table(records):
    head = ("| hosts x ranks | link | backend | dtype | strategy | variant | step (s) | "
            "compute alone (s) | "
            "exposed (s) | waited in collectives (s) | collectives, predicted (s) | "
            "exposed / collectives | compute CPUs idle (s) | idle / collectives | "
            "CPU beyond compute's (s) | collectives' CPU, predicted (s) | "
            "CPU bound (s) | predicted step (s) | predicted / measured | repeats | "
            "tokens/s | peak RSS (MiB) |\n" + "| --- " * 22 + "|\n")
    lines = []
    errors = []
    for r in records:
        p = r["predicted"]
        step = r["median"]["step"]
        alone = p["compute"] + p["optimizer"]
        exposed = step - alone
        link = "loopback" if hosts(r) == 1 else r["label"].split(", ")[1]
        ratio = p["step"] / step
        errors.append(ratio - 1)
        cpu_measured, cpu_predicted = collectives_cpu(r)
        bound = p.get("cpu_bound") or None
        idle = compute_idle(r)
        idle_share = idle / p["in_collectives"] if idle is not None and p["in_collectives"] > 0 \
            else None
        lines.append(
            f"| {r['label'].split(', ')[0]} | {link} | {backend(r)} | {r['dtype']} | {r['strategy']} | "
            f"{r['variant']} | {step:.2f} | {alone:.2f} | {exposed:.2f} | "
            f"{r['median']['in_collectives']:.2f} | {p['in_collectives']:.2f} | "
            f"{exposed / p['in_collectives'] if p['in_collectives'] > 0 else 0:.2f} | "
            f"{cell(idle)} | {cell(idle_share)} | "
            f"{cell(cpu_measured)} | {cell(cpu_predicted)} | {cell(bound)} | "
            f"{p['step']:.2f} | {ratio:.3f} | {repeats(r)} | {r['tokens_per_second']:.0f} | "
            f"{r['peak_rss_bytes'] / 2**20:.0f} |")
    within = sum(1 for e in errors if abs(e) <= 0.15)
    worst = max(errors, key=abs) if errors else 0
    summary = (f"\n{within} of {len(errors)} cells predicted within 15% of the measured step; "
               f"the largest error {worst * 100:+.1f}%.\n")
    return head + "\n".join(lines) + "\n" + summary


def plot(records, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("netem_table.py: no matplotlib (python3-matplotlib): no plot", file=sys.stderr)
        return
    shapes = [(2, 1, "fp32", "2 hosts x 1 rank, fp32"), (2, 2, "fp32", "2 hosts x 2 ranks, fp32")]
    fig, axes = plt.subplots(1, len(shapes), figsize=(12, 4.5))
    for ax, (h, per, dtype, title) in zip(axes, shapes):
        cells = [r for r in records if hosts(r) == h and r["world_size"] == h * per
                 and r["dtype"] == dtype and r["variant"] == "prefetch"
                 and r["backend"] == "gloo"]
        if not cells:
            continue
        for strategy in sorted({r["strategy"] for r in cells}):
            mine = sorted((r for r in cells if r["strategy"] == strategy), key=link_gbit)
            x = [link_gbit(r) for r in mine]
            line, = ax.plot(x, [r["median"]["step"] for r in mine], "o-", label=f"{strategy}")
            ax.plot(x, [r["predicted"]["step"] for r in mine], "--", color=line.get_color(),
                    label=f"{strategy}, predicted")
        full = sorted((r for r in cells if r["strategy"] == "FULL_SHARD"), key=link_gbit)
        if full:
            x = [link_gbit(r) for r in full]
            floor = [r["predicted"]["compute"] + r["predicted"]["optimizer"] for r in full]
            # Nothing hidden: every collective after the compute, or, where the collectives'
            # CPU work is more (the CPU bound), that.
            ceiling = [max(f + r["predicted"]["in_collectives"], r["predicted"].get("cpu_bound", 0))
                       for f, r in zip(floor, full)]
            ax.plot(x, floor, "k:", label="compute alone (floor)")
            ax.plot(x, ceiling, "k-.", label="FULL_SHARD, nothing hidden (ceiling)")
        ax.set_xscale("log")
        ax.set_xlabel("link between hosts (Gbit/s, tc rate)")
        ax.set_ylabel("step (s)")
        ax.set_title(title + ", prefetch")
        ax.legend(fontsize=7)
    fig.suptitle("GPT-2 124M, seq 256, batch 1 per rank, Gloo over emulated links")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "step_vs_link.png"), dpi=110)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: bench/netem_table.py OUT [BASE] (folders of bench/netem_grid.sh's JSON "
                 "files; BASE's fill in the cells OUT lacks)")
    out = sys.argv[1]
    base = sys.argv[2] if len(sys.argv) == 3 else None
    if base and not os.path.isdir(base):
        sys.exit(f"netem_table.py: BASE {base}: no such folder")
    order = ["NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"]
    records = sorted((r for r in rows(out, base) if "predicted" in r),
                     key=lambda r: (r["world_size"], hosts(r), backend(r), r["dtype"] != "fp32",
                                    link_gbit(r), order.index(r["strategy"]), r["variant"]))
    if not records:
        sys.exit(f"netem_table.py: no fsdp-bench record with a prediction in {out}")
    text = table(records)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text)
    print(text)
    plot(records, out)


if __name__ == "__main__":
    main()
