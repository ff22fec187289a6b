#!/usr/bin/env python3
"""The table of bench/vs_fsdp2.sh: fsdp.cpp (fsdp-bench's JSON, fsdp-cpp-N.json) beside PyTorch
FSDP2 (bench/fsdp2_cpu.py's, fsdp2-N.json) from one run's folder.

    vs_fsdp2_table.py DIR > table.md

Per side: the median over the repeats of each repeat's median step (the slowest rank's), its
tokens/s, and the largest absolute peak resident set over the ranks and repeats (VmHWM: for FSDP2
Python, torch and transformers included; for fsdp.cpp its libraries), then the ratios
fsdp.cpp / FSDP2. Also, for fsdp.cpp, where its memory goes: the peak of live tensors and of what
its host allocator holds, above the process's size before the model was built.
"""
import glob
import json
import os
import statistics
import sys

GIB = 1024.0**3
MIB = 1024.0**2


def load(folder, prefix):
    records = []
    for path in sorted(glob.glob(os.path.join(folder, prefix + "-*.json"))):
        with open(path) as f:
            text = f.read().strip()
        # fsdp-bench writes a list of records, fsdp2_cpu.py one.
        data = json.loads(text)
        records.extend(data if isinstance(data, list) else [data])
    if not records:
        sys.exit(f"vs_fsdp2_table.py: no {prefix}-*.json in {folder}")
    return records


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    ours, theirs = load(folder, "fsdp-cpp"), load(folder, "fsdp2")
    ours_step = statistics.median(r["median"]["step"] for r in ours)
    theirs_step = statistics.median(r["step_s"] for r in theirs)
    first = ours[0]
    tokens = first["world_size"] * first["batch_per_rank"] * first["seq"]
    ours_peak = max(r["peak_rss_absolute_bytes"] for r in ours)
    theirs_peak = max(max(r["peak_rss_bytes"]) for r in theirs)
    theirs_start = max(max(r["start_rss_bytes"]) for r in theirs)
    links = first.get("links")  # fsdp-bench's, when bench/netem.sh ran both sides
    where = (f"over emulated hosts linked at {links['inter_gbit']:.3g} Gbit/s" if links
             else "on one host")
    print(f"GPT-2 124M, {first['dtype']}, {first['world_size']} ranks x "
          f"{first['threads_per_rank']} thread {where}, batch {first['batch_per_rank']} x "
          f"{first['seq']} tokens per rank, FULL_SHARD with prefetch, Gloo; {len(ours)} and "
          f"{len(theirs)} runs of {first['timed_steps']} timed steps\n")
    print("| | step (s) | tokens/s | peak RSS per rank (GiB) |")
    print("|---|---|---|---|")
    print(f"| fsdp.cpp | {ours_step:.2f} | {tokens / ours_step:.1f} | {ours_peak / GIB:.2f} |")
    print(f"| PyTorch FSDP2 ({theirs[0]['torch']}) | {theirs_step:.2f} | "
          f"{tokens / theirs_step:.1f} | {theirs_peak / GIB:.2f} |")
    print(f"| fsdp.cpp / FSDP2 | {ours_step / theirs_step:.2f} | "
          f"{theirs_step / ours_step:.2f} | {ours_peak / theirs_peak:.2f} |")
    held = max(r["peak_held_bytes"] for r in ours)
    live = max(r["peak_tensor_bytes"] for r in ours)
    above = max(r["peak_rss_bytes"] for r in ours)
    plan = first["plan"]["total_bytes"]
    print(f"\nfsdp.cpp above its size before the model was built, during the timed steps (MiB): "
          f"live tensors {live / MIB:.0f} (plan {plan / MIB:.0f}), held by its host allocator "
          f"{held / MIB:.0f}, resident {above / MIB:.0f}. FSDP2's processes held "
          f"{theirs_start / MIB:.0f} MiB before building the model (Python, torch, transformers).")


if __name__ == "__main__":
    main()
