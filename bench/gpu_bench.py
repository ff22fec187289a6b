#!/usr/bin/env python3
"""PyTorch's side of the GPU benchmark, and the table that sets fsdp.cpp beside it.

scripts/gpu.sh runs, in one call on the GPU machine (docs/cuda.md, ../shared/GPU.md), fsdp-bench
on the GPU and then this script's `torch` command on the same GPU, model shapes, batch, sequence
and dtypes: Hugging Face's GPT2LMHeadModel (or, --model llama-1b, LlamaForCausalLM in Llama 3.2
1B's shape, SDPA attention) in eager PyTorch, under FSDP1 (a unit per block, MixedPrecision
bf16), under FSDP2 (fully_shard per block, MixedPrecisionPolicy bf16), FSDP2 with every block
torch.compile'd (fsdp2_compile: the blocks compiled after fully_shard, as the FSDP2 tutorial does)
and FSDP2 with CPUOffloadPolicy, at world size 1 over NCCL. Each run: AdamW, bf16 compute
(gradients reduced in bf16, as fsdp-train's mixed_precision: bf16 does), warm-up steps, then timed steps, each ended by
torch.cuda.synchronize(); its median step and the caching allocator's peak
(torch.cuda.max_memory_allocated) over the timed steps.

    gpu_bench.py torch --out torch.json [--model 124m --batch 16 --seq 512 --runs eager,fsdp1,fsdp2]
                       [--dtype bf16|fp16]

--dtype fp16: fp16 compute and reduction, with loss scaling as each API does it (eager: autocast
and torch.amp.GradScaler; FSDP1 and FSDP2: MixedPrecision fp16 and ShardedGradScaler), the
workload of fsdp-bench --dtype fp16.
    gpu_bench.py table torch.json ours.json [more.json ...] > table.md

`table` reads this script's JSON and fsdp-bench's (--json) and prints one Markdown table: tokens/s,
step time and peak GPU memory, with each fsdp.cpp row's ratio to every PyTorch row of the same
model, batch and dtype; with --peak-tflops P also each row's MFU (per GPU), from fsdp-bench's
FLOPs a token for that model (bench/README.md, "FLOPs and MFU").
"""
import argparse
import json
import os
import statistics
import sys
import time

SHAPES = {  # GPT-2's published sizes, at its 1024 positions (fsdp-bench's --model)
    "124m": dict(n_layer=12, n_head=12, n_embd=768),
    "large": dict(n_layer=36, n_head=20, n_embd=1280),
    "xl": dict(n_layer=48, n_head=25, n_embd=1600),
}
LLAMA_1B = dict(  # Llama 3.2 1B's config.json (fsdp-bench --model llama-1b)
    vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
    rms_norm_eps=1e-5, tie_word_embeddings=True,
    rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0,
                         low_freq_factor=1.0, high_freq_factor=4.0,
                         original_max_position_embeddings=8192))
MODELS = sorted(SHAPES) + ["llama-1b"]
RUNS = ("eager", "fsdp1", "fsdp2", "fsdp2_compile", "fsdp2_offload")


def model_name(name):
    return name if name.startswith("llama") else "gpt2-" + name  # as fsdp-bench names it


def build_model(name):
    if name == "llama-1b":
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(attn_implementation="sdpa", **LLAMA_1B))
    from transformers import GPT2Config, GPT2LMHeadModel

    # No dropout: fsdp.cpp's GPT-2 has none, and it would only add kernels to one side.
    config = GPT2Config(n_positions=1024, vocab_size=50257, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, **SHAPES[name])
    return GPT2LMHeadModel(config)


def blocks_of(model):
    return model.model.layers if hasattr(model, "model") else model.transformer.h


def wrap(run, model, device, dtype):
    """The model as `run` trains it, and whether its optimizer steps on the CPU."""
    bf16 = dtype  # the name the bf16 runs were written with; fp16 runs pass torch.float16
    if run == "eager":
        return model.to(device), False
    if run == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return FullyShardedDataParallel(
            model, auto_wrap_policy=ModuleWrapPolicy({type(blocks_of(model)[0])}), device_id=device,
            mixed_precision=MixedPrecision(param_dtype=bf16, reduce_dtype=bf16,
                                           buffer_dtype=bf16),
            use_orig_params=True), False
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    offload = run == "fsdp2_offload"
    kwargs = dict(mp_policy=MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16))
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    else:
        model = model.to(device)
    for block in blocks_of(model):
        fully_shard(block, **kwargs)
        if run == "fsdp2_compile":
            block.compile()
    fully_shard(model, **kwargs)
    return model, offload


def time_run(args, run, device):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    model, on_cpu = wrap(run, build_model(args.model), device, dtype)
    scaler = None
    if args.dtype == "fp16":
        if run == "eager":
            scaler = torch.amp.GradScaler("cuda")
        else:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
            scaler = ShardedGradScaler()
    # Fused AdamW where the parameters are on the GPU (PyTorch's fastest); offloaded parameters
    # are CPU tensors, stepped by the default (foreach) CPU AdamW.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not on_cpu)
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size if hasattr(model, "config") else 50257
    tokens = torch.randint(vocab, (args.batch, args.seq + 1), generator=gen).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=run == "eager"):
            logits = model(inputs).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        if scaler is None:
            loss.backward()
            opt.step()
            return loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    record = {
        "impl": "pytorch " + torch.__version__, "run": run, "model": model_name(args.model),
        "parameters": sum(p.numel() for p in model.parameters()), "batch": args.batch,
        "seq": args.seq, "dtype": args.dtype, "step_seconds": times, "median_step": median,
        "tokens_per_second": args.batch * args.seq / median,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(), "loss": loss.item(),
    }
    del model, opt
    torch.cuda.empty_cache()
    return record


def torch_command(args):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1)
    records = []
    for run in args.runs.split(","):
        if run not in RUNS:
            sys.exit(f"gpu_bench.py: --runs: {run} is not one of {', '.join(RUNS)}")
        try:
            records.append(time_run(args, run, device))
            r = records[-1]
            print(f"gpu_bench: {run} {model_name(args.model)} batch {args.batch}: "
                  f"{r['median_step'] * 1e3:.1f} ms, {r['tokens_per_second']:.0f} tokens/s, "
                  f"peak {r['peak_allocated_bytes'] / 2**30:.2f} GiB", flush=True)
        except Exception as e:  # one failing run (out of memory) must not lose the others
            print(f"gpu_bench: {run} failed: {type(e).__name__}: {e}", flush=True)
            records.append({"impl": "pytorch", "run": run, "model": model_name(args.model),
                            "batch": args.batch, "seq": args.seq, "dtype": args.dtype,
                            "error": str(e)[:500]})
            torch.cuda.empty_cache()
    dist.destroy_process_group()
    with open(args.out, "w") as f:
        json.dump(records, f, indent=1)


def rows_of(path):
    """(model, batch, dtype, label, tokens/s, step s, peak bytes, ranks) of each record in one
    file."""
    rows = []
    for r in json.load(open(path)):
        dtype = r.get("dtype", "bf16")
        if "error" in r:
            rows.append((r["model"], r["batch"], dtype, f"{r['impl']} {r['run']}", None, None,
                         None, 1))
        elif "run" in r:  # ours above, PyTorch's
            rows.append((r["model"], r["batch"], dtype, f"PyTorch {r['run']}",
                         r["tokens_per_second"], r["median_step"], r["peak_allocated_bytes"], 1))
        else:  # fsdp-bench
            label = f"fsdp.cpp {r['strategy']} {r['variant']} ({r['backend']})"
            rows.append((r["model"], r["batch_per_rank"], dtype, label, r["tokens_per_second"],
                         r["median"]["step"], r["peak_device_allocated_bytes"], r["world_size"]))
    return rows


def flops_per_token(paths):
    """fsdp-bench's FLOPs a token by model and sequence, from its records among `paths`."""
    flops = {}
    for path in paths:
        for r in json.load(open(path)):
            if "flops_per_token" in r:
                flops[(r["model"], r["seq"])] = r["flops_per_token"]
    return flops


def table_command(args):
    rows = [row for path in args.files for row in rows_of(path)]
    seqs = {}
    for path in args.files:
        for r in json.load(open(path)):
            seqs.setdefault(r["model"], r["seq"])
    flops = flops_per_token(args.files)
    print("| model | batch | dtype | run | tokens/s | step (ms) | peak allocated (GiB) | MFU "
          "| vs PyTorch (same dtype) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, batch, dtype, label, tps, step, peak, ranks in rows:
        if tps is None:
            print(f"| {model} | {batch} | {dtype} | {label} | failed | | | | |")
            continue
        per_token = flops.get((model, seqs.get(model)))
        mfu = (f"{100 * per_token * tps / ranks / (args.peak_tflops * 1e12):.1f} %"
               if per_token and args.peak_tflops else "-")
        ratios = [f"{tps / t:.2f}x {l.split(' ', 1)[1]}" for m, b, d, l, t, _, _, _ in rows
                  if l.startswith("PyTorch") and not label.startswith("PyTorch") and m == model
                  and b == batch and d == dtype and t]
        print(f"| {model} | {batch} | {dtype} | {label} | {tps:.0f} | {step * 1e3:.1f} | "
              f"{peak / 2**30:.2f} | {mfu} | {', '.join(ratios)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("torch", help="time PyTorch eager, FSDP1 and FSDP2 on the GPU")
    t.add_argument("--model", choices=MODELS, default="124m")
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--seq", type=int, default=512)
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--runs", default="eager,fsdp1,fsdp2")
    t.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    t.add_argument("--out", required=True)
    tab = sub.add_parser("table", help="one Markdown table of PyTorch's and fsdp-bench's JSON")
    tab.add_argument("files", nargs="+")
    tab.add_argument("--peak-tflops", type=float, default=0,
                     help="the GPU's dense peak in the compute dtype (H100 SXM bf16: 989)")
    args = parser.parse_args()
    torch_command(args) if args.command == "torch" else table_command(args)


if __name__ == "__main__":
    main()
