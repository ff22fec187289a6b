#!/usr/bin/env python3
"""The table of bench/vs_fsdp2.sh: fsdp.cpp (fsdp-bench's JSON, fsdp-cpp-N.json) beside PyTorch
FSDP2 (bench/fsdp2_cpu.py's: fsdp2-hf-N.json with Hugging Face's GPT-2, fsdp2-nanogpt-N.json with
the lean nanoGPT one; fsdp2-N.json, Hugging Face's, in folders from before 2026-11-28) from one
run's folder.

    vs_fsdp2_table.py DIR > table.md

Per side: the median over the repeats of each repeat's median step (the slowest rank's), its
tokens/s, and the largest absolute peak resident set over the ranks and repeats (VmHWM: for FSDP2
Python, torch and transformers included; for fsdp.cpp its libraries), then the ratios
fsdp.cpp / each FSDP2. Also, for fsdp.cpp, where its memory goes: the peak of live tensors and of
what its host allocator holds, above the process's size before the model was built.
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


def faults(values):
    """The median over repeats of a step's minor page faults (fresh pages touched), or '-' for
    records from before they were counted."""
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):,.0f}" if known else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    ours = load(folder, "fsdp-cpp")
    sides = {}  # FSDP2's records by model
    for r in load(folder, "fsdp2"):
        impl = {"fsdp2": "hf"}.get(r["impl"], r["impl"][len("fsdp2-"):])
        if r.get("malloc", "glibc") != "glibc":
            impl += "+" + r["malloc"]
        sides.setdefault(impl, []).append(r)
    ours_step = statistics.median(r["median"]["step"] for r in ours)
    first = ours[0]
    tokens = first["world_size"] * first["batch_per_rank"] * first["seq"]
    ours_peak = max(r["peak_rss_absolute_bytes"] for r in ours)
    links = first.get("links")  # fsdp-bench's, when bench/netem.sh ran both sides
    where = (f"over emulated hosts linked at {links['inter_gbit']:.3g} Gbit/s" if links
             else "on one host")
    loss = "fused head and loss" if first.get("fused_loss") else "logits whole"
    model = ("Llama 3.2 1B's shape, LoRA r " + str(first["lora_r"]) + " on every linear layer"
             if first.get("lora_r") else "GPT-2 124M")
    print(f"{model}, {first['dtype']}, {first['world_size']} ranks x "
          f"{first['threads_per_rank']} thread {where}, batch {first['batch_per_rank']} x "
          f"{first['seq']} tokens per rank, FULL_SHARD with prefetch, Gloo; fsdp.cpp's "
          f"{loss}; {len(ours)} runs of {first['timed_steps']} timed steps a side\n")
    print("| | step (s) | tokens/s | peak RSS per rank (GiB) | page faults a step |")
    print("|---|---|---|---|---|")
    ours_faults = faults(r["median"].get("page_faults") for r in ours)
    print(f"| fsdp.cpp | {ours_step:.2f} | {tokens / ours_step:.1f} | {ours_peak / GIB:.2f} | "
          f"{ours_faults} |")
    names = {"hf": "Hugging Face GPT2LMHeadModel", "nanogpt": "nanoGPT",
             "nanogpt+jemalloc": "nanoGPT, jemalloc keeping its pages",
             "llama": "Hugging Face LlamaForCausalLM in PEFT's LoRA"}
    ratios, starts = [], []
    for impl, theirs in sorted(sides.items()):
        step = statistics.median(r["step_s"] for r in theirs)
        peak = max(max(r["peak_rss_bytes"]) for r in theirs)
        starts.append(max(max(r["start_rss_bytes"]) for r in theirs))
        print(f"| PyTorch FSDP2 ({theirs[0]['torch']}), {names.get(impl, impl)} | {step:.2f} | "
              f"{tokens / step:.1f} | {peak / GIB:.2f} | "
              f"{faults(r.get('page_faults') for r in theirs)} |")
        ratios.append(f"| fsdp.cpp / FSDP2 {names.get(impl, impl)} | {ours_step / step:.2f} | "
                      f"{step / ours_step:.2f} | {ours_peak / peak:.2f} | |")
    print("\n".join(ratios))
    theirs_start = max(starts)
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
