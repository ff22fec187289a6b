#!/usr/bin/env python3
"""PyTorch FSDP2 on the CPU: the anchor fsdp-bench is compared with (bench/vs_fsdp2.sh).

One rank of a job started by a torchrun-compatible launcher (fsdp-run: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT): Hugging Face's GPT2LMHeadModel (no dropout, as fsdp.cpp's GPT-2),
fully_shard on every block and on the root (FULL_SHARD: resharded after forward), fp32 or bf16
(MixedPrecisionPolicy), AdamW, Gloo. The loss is the model's own (`labels=input_ids`: it shifts
them, so s tokens predict s - 1, where fsdp-bench's predict s); computed from the logits with
cross_entropy instead, it peaked about 150 MiB higher and ran about 6% slower here. Each block
prefetches the next one's all-gather in forward and the previous one's in backward, as
fsdp-bench's `prefetch` variant (forward prefetch, BACKWARD_PRE) does; --no-prefetch leaves
FSDP2 to its defaults. A warm-up step, then --steps timed steps on random tokens; rank 0 prints
one JSON record (and writes it to --out): the median step (the slowest rank's), tokens/s over
all ranks, and per rank the resident set's peak over the whole process (VmHWM: Python and the
libraries included) and its size before the model was built.

    fsdp-run --nproc-per-node 2 python3 bench/fsdp2_cpu.py [--out fsdp2.json] \\
        [--model 124m] [--seq 512] [--batch 2] [--steps 5] [--threads 1] [--dtype fp32|bf16]

Debian's torch has no libuv: the launcher's environment must carry USE_LIBUV=0.
"""
import argparse
import json
import statistics
import sys
import time

SHAPES = {"124m": dict(n_layer=12, n_head=12, n_embd=768)}  # fsdp-bench's --model names


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="the JSON record (rank 0 writes it; printed either way)")
    p.add_argument("--model", default="124m", choices=sorted(SHAPES))
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--no-prefetch", dest="prefetch", action="store_false")
    return p.parse_args()


def shard(model, dtype, prefetch):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {}
    if dtype == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.bfloat16)
    blocks = list(model.transformer.h)
    for block in blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    if prefetch:
        for i, block in enumerate(blocks):
            if i + 1 < len(blocks):
                block.set_modules_to_forward_prefetch([blocks[i + 1]])
            if i > 0:
                block.set_modules_to_backward_prefetch([blocks[i - 1]])
    return model


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    start_kib = status_kib("VmRSS:")
    torch.manual_seed(0)  # every rank builds the same model; fully_shard keeps each one's shard
    config = GPT2Config(n_positions=1024, vocab_size=50257, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, **SHAPES[args.model])
    model = shard(GPT2LMHeadModel(config), args.dtype, args.prefetch)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4)
    gen = torch.Generator().manual_seed(rank + 1)
    tokens = torch.randint(config.vocab_size, (args.batch, args.seq + 1), generator=gen)

    def step():
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        inputs = tokens[:, :-1]
        loss = model(inputs, labels=inputs).loss  # Hugging Face's own loss, as its users train
        loss.backward()
        opt.step()
        return time.perf_counter() - t0, loss.item()

    step()  # warm-up: AdamW's state, every buffer
    times, loss = [], 0.0
    for _ in range(args.steps):
        t, loss = step()
        times.append(t)
    mine = [times, status_kib("VmHWM:") * 1024, start_kib * 1024]
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        slowest = [max(r[0][i] for r in every) for i in range(args.steps)]
        median = statistics.median(slowest)
        record = {
            "impl": "fsdp2", "torch": torch.__version__, "model": "gpt2-" + args.model,
            "dtype": args.dtype, "world_size": world, "threads": args.threads,
            "batch": args.batch, "seq": args.seq, "steps": args.steps,
            "variant": "prefetch" if args.prefetch else "plain", "step_s": median,
            "tokens_per_s": world * args.batch * args.seq / median, "loss": loss,
            "peak_rss_bytes": [r[1] for r in every], "start_rss_bytes": [r[2] for r in every],
        }
        if args.out:
            with open(args.out, "w") as f:
                json.dump(record, f)
        print(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
