#!/usr/bin/python3
"""scripts/bench.sh's memory plot: each fsdp-bench run's per-rank peak (live tensor bytes, the
host allocator's held bytes and the resident set, each the busiest rank's peak above the process
before the model was built) beside fsdp-plan's prediction, its parts stacked (model state,
gathered parameters, gradient buffers, and the larger of the activations and the embedding's
gradients), one panel per configuration (model, dtype, world size, sequence, allocator), strategy
by strategy and variant by variant, written to bench/results/memory-by-strategy.png (the plot
needs Debian's python3-matplotlib; without it the table is still printed). Prints a Markdown
table of the same numbers (GiB: 2^30 bytes).

Usage: bench/memory_plot.py [--out PNG] [JSON ...]
JSON: fsdp-bench --json files (default: bench/results/gpt2-124m-fp32.json,
gpt2-124m-bf16.json, gpt2-124m-fp32-glibc.json and gpt2-large-fp32.json).
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
DEFAULT = [os.path.join(RESULTS, n + ".json") for n in
           ("gpt2-124m-fp32", "gpt2-124m-bf16", "gpt2-124m-fp32-glibc", "gpt2-large-fp32")]
STRATEGIES = ["NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"]
VARIANTS = ["plain", "prefetch", "ac", "prefetch+ac"]
GIB = float(1 << 30)


def date_of(path):
    """The day the file's runs were made: the header of the table.md scripts/bench.sh wrote
    beside it in the same run (one with the file's "== NAME" section), else the file's last
    commit, else its modification time."""
    name = os.path.basename(path)[:-len(".json")] if path.endswith(".json") else None
    try:
        with open(os.path.join(os.path.dirname(path), "table.md")) as f:
            m = re.match(r"# fsdp-bench results, (\d{4}-\d\d-\d\d)", f.readline())
            if m and name and f"== {name}\n" in f.read():
                return m.group(1)
    except OSError:
        pass
    try:
        day = subprocess.run(["git", "-C", os.path.dirname(path), "log", "-1", "--format=%cs",
                              "--", os.path.basename(path)], capture_output=True, text=True,
                             check=True).stdout.strip()
        if day:
            return day
    except (OSError, subprocess.CalledProcessError):
        pass
    import time
    return time.strftime("%Y-%m-%d", time.gmtime(os.path.getmtime(path)))


def records(paths):
    """Every record of the files, each with its file's date and its configuration's key."""
    out = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        day = date_of(path)
        for r in data if isinstance(data, list) else [data]:
            if "plan" not in r or "peak_tensor_bytes" not in r:
                continue
            r["date"] = r.get("date", day)
            r["config"] = (r["model"], r["dtype"], r["world_size"], r.get("seq"),
                           r.get("batch_per_rank"), r.get("allocator", "fsdp"),
                           r.get("device", "cpu"))
            out.append(r)
    return out


def config_title(key):
    model, dtype, world, seq, batch, allocator, device = key
    text = f"{model} {dtype}, {world} ranks, seq {seq} x batch {batch}"
    if allocator != "fsdp":
        text += f", {allocator} heap"
    if device != "cpu":
        text += f", {device}"
    return text


def order(r):
    s = STRATEGIES.index(r["strategy"]) if r["strategy"] in STRATEGIES else len(STRATEGIES)
    v = VARIANTS.index(r["variant"]) if r["variant"] in VARIANTS else len(VARIANTS)
    return (s, r["strategy"], v, r["variant"])


def grouped(recs):
    """The configurations in the order first met, each with its records by strategy and variant;
    a (configuration, strategy, variant) met twice keeps its last record."""
    configs = {}
    for r in recs:
        configs.setdefault(r["config"], {})[(r["strategy"], r["variant"])] = r
    return [(key, sorted(runs.values(), key=order)) for key, runs in configs.items()]


def plan_parts(r):
    """fsdp-plan's total in its parts, bytes: the last is activations or the embedding's
    gradients, whichever is larger (the plan counts only the larger: the embedding's gradient
    is made after the activations are freed)."""
    p = r["plan"]
    act, emb = p.get("activation_bytes", 0), p.get("embedding_grad_bytes", 0)
    parts = [("model state", p.get("model_state_bytes", 0)),
             ("gathered parameters", p.get("gathered_bytes", 0)),
             ("gradient buffers", p.get("grad_buffer_bytes", 0)),
             ("activations", act) if act >= emb else ("embedding gradients", emb)]
    rest = p["total_bytes"] - sum(b for _, b in parts)
    if rest:
        parts.append(("other", rest))
    return parts


def cpu_name(label):
    """"AMD EPYC, 2 cores" from scripts/bench.sh's label ("cpu: ..., N cores; blas: ...")."""
    head = (label or "").split(";")[0].strip()
    return head[len("cpu:"):].strip() if head.startswith("cpu:") else head


def table(groups):
    text = ("| configuration | strategy | variant | planned (GiB) | tensor peak (GiB) | "
            "tensor peak / plan | held (GiB) | RSS (GiB) |\n" + "| --- " * 8 + "|\n")
    for key, runs in groups:
        for r in runs:
            plan = r["plan"]["total_bytes"]
            text += (f"| {config_title(key)} | {r['strategy']} | {r['variant']} | "
                     f"{plan / GIB:.2f} | {r['peak_tensor_bytes'] / GIB:.2f} | "
                     f"{r['peak_tensor_bytes'] / plan:.3f} | "
                     f"{r.get('peak_held_bytes', 0) / GIB:.2f} | "
                     f"{r['peak_rss_bytes'] / GIB:.2f} |\n")
    return text


COLORS = {"model state": "#4c72b0", "gathered parameters": "#dd8452",
          "gradient buffers": "#55a868", "activations": "#8172b3",
          "embedding gradients": "#da8bc3", "other": "#bbbbbb"}


def rows_of(groups, width):
    """The panels packed into rows of at most `width` bar pairs (a panel at least 3 wide)."""
    rows, row, used = [], [], 0
    for key, runs in groups:
        w = max(len(runs), 3)
        if row and used + w > width:
            rows.append(row)
            row, used = [], 0
        row.append((key, runs, w))
        used += w
    if row:
        rows.append(row)
    return rows


def plot(groups, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        print("memory_plot.py: no matplotlib (python3-matplotlib): no plot", file=sys.stderr)
        return
    width = max(max(len(runs), 3) for _, runs in groups)
    rows = rows_of(groups, width)
    fig = plt.figure(figsize=(max(8.0, 1.15 * width + 1.5), 4.3 * len(rows) + 1.3))
    grid = fig.add_gridspec(len(rows), width, hspace=0.6, wspace=1.2 if width > 3 else 0.6)
    used_parts = set()
    for i, row in enumerate(rows):
        col = 0
        for key, runs, w in row:
            ax = fig.add_subplot(grid[i, col:col + w])
            col += w
            bar = 0.38
            for x, r in enumerate(runs):
                bottom = 0.0
                for name, b in plan_parts(r):
                    ax.bar(x - bar / 2, b / GIB, bar, bottom=bottom, color=COLORS[name],
                           edgecolor="white", linewidth=0.4)
                    bottom += b / GIB
                    used_parts.add(name)
                tensors = r["peak_tensor_bytes"] / GIB
                ax.bar(x + bar / 2, tensors, bar, color="#444444")
                held = r.get("peak_held_bytes")
                if held and held != r["peak_tensor_bytes"]:
                    ax.plot([x + 0.02, x + bar - 0.02], [held / GIB] * 2, color="#c44e52", lw=2)
                ax.plot(x + bar / 2, r["peak_rss_bytes"] / GIB, marker="D", color="black",
                        markersize=5, markerfacecolor="#f2c45a")
                ratio = r["peak_tensor_bytes"] / r["plan"]["total_bytes"]
                ax.text(x + bar / 2, tensors * 0.97, f"{ratio:.2f}x", ha="center", va="top",
                        fontsize=7.5, color="white")
            ax.set_xticks(range(len(runs)))
            ax.set_xticklabels([r["variant"] for r in runs], rotation=35, ha="right",
                               fontsize=8)
            pad = (w - len(runs)) / 2  # a panel wider than its bars keeps their width
            ax.set_xlim(-0.6 - pad, len(runs) - 0.4 + pad)
            ax.set_ylabel("GiB per rank")
            ax.grid(axis="y", alpha=0.3)
            ax.set_axisbelow(True)
            ax.set_title(config_title(key), fontsize=10)
            # The strategies' names under their variants, a line between strategies.
            start = 0
            for j in range(1, len(runs) + 1):
                if j == len(runs) or runs[j]["strategy"] != runs[start]["strategy"]:
                    ax.annotate(runs[start]["strategy"], xy=((start + j - 1) / 2, 0),
                                xycoords=("data", "axes fraction"), xytext=(0, -48),
                                textcoords="offset points", ha="center", va="top", fontsize=9,
                                fontweight="bold")
                    if j < len(runs):
                        ax.axvline(j - 0.5, color="grey", lw=0.8, ls=":")
                    start = j
    handles = [Patch(color=COLORS[n], label=f"plan: {n}") for n in COLORS if n in used_parts]
    handles += [Patch(color="#444444", label="measured: live tensors (peak / plan inside)"),
                Line2D([], [], color="#c44e52", lw=2, label="measured: allocator held"),
                Line2D([], [], color="black", marker="D", markerfacecolor="#f2c45a", ls="",
                       label="measured: resident set (RSS)")]
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=8,
               frameon=False)
    recs = [r for _, runs in groups for r in runs]
    cpus = sorted({cpu_name(r.get("label")) for r in recs} - {""})
    days = sorted({r["date"] for r in recs})
    when = days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"
    fig.suptitle("Per-rank peak memory, measured (fsdp-bench) beside the plan (fsdp-plan): "
                 "left bar plan, right bar measured\n"
                 + "; ".join(cpus or ["unknown machine"]) + f"; {when}", fontsize=11)
    fig.subplots_adjust(top=1 - 1.0 / fig.get_figheight(), bottom=1.45 / fig.get_figheight(),
                        left=0.7 / fig.get_figwidth(), right=1 - 0.2 / fig.get_figwidth())
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=130)
    print(f"memory_plot.py: wrote {out}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(
        description="fsdp-bench's per-rank peak memory beside fsdp-plan's, as a plot and a table")
    parser.add_argument("json", nargs="*", default=DEFAULT,
                        help="fsdp-bench --json files (default: scripts/bench.sh's four)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "memory-by-strategy.png"),
                        help="the PNG (default: bench/results/memory-by-strategy.png)")
    args = parser.parse_args()
    missing = [p for p in args.json if not os.path.isfile(p)]
    if missing:
        sys.exit("memory_plot.py: no such file: " + ", ".join(missing))
    groups = grouped(records(args.json))
    if not groups:
        sys.exit("memory_plot.py: no fsdp-bench record with a plan in " + ", ".join(args.json))
    print(table(groups))
    plot(groups, args.out)


if __name__ == "__main__":
    main()
