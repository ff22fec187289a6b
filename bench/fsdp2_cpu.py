#!/usr/bin/env python3
"""PyTorch FSDP2 on the CPU: the anchor fsdp-bench is compared with (bench/vs_fsdp2.sh).

One rank of a job started by a torchrun-compatible launcher (fsdp-run: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), fully_shard on every block and on the root (FULL_SHARD: resharded after
forward), fp32 or bf16 (MixedPrecisionPolicy), AdamW, Gloo, one of two GPT-2s (no dropout, as
fsdp.cpp's):
  --impl hf (default): Hugging Face's GPT2LMHeadModel and its own loss (`labels=input_ids`: it
    shifts them, so s tokens predict s - 1, where fsdp-bench's predict s); computed from the
    logits with cross_entropy instead, it peaked about 150 MiB higher and ran about 6% slower.
  --impl llama (with --model llama-1b): Hugging Face's LlamaForCausalLM at Llama 3.2 1B's shape,
    fsdp-bench's `llama-1b`, built on the meta device, sharded, then materialised shard by shard
    (to_empty and random values: FSDP2's recipe for a model larger than a rank); --lora R wraps it
    in PEFT's LoRA first (get_peft_model, r R, alpha 2R, target_modules all-linear: the base
    frozen, mixed requires_grad within each block, as fsdp-bench's --lora), AdamW over the
    adapters only.
  --impl nanogpt: the lean model a performance-minded user writes (nanoGPT's: fused qkv,
    F.scaled_dot_product_attention with is_causal, GELU tanh, the head tied to the token table,
    F.cross_entropy on the logits of s tokens against the next s). Each block
prefetches the next one's all-gather in forward and the previous one's in backward, as
fsdp-bench's `prefetch` variant (forward prefetch, BACKWARD_PRE) does; --no-prefetch leaves
FSDP2 to its defaults. A warm-up step, then --steps timed steps on random tokens; rank 0 prints
one JSON record (and writes it to --out): the median step (the slowest rank's), tokens/s over
all ranks, and per rank the resident set's peak over the whole process (VmHWM: Python and the
libraries included) and its size before the model was built.

    fsdp-run --nproc-per-node 2 python3 bench/fsdp2_cpu.py [--out fsdp2.json] \\
        [--model 124m] [--seq 512] [--batch 2] [--steps 5] [--threads 1] [--dtype fp32|bf16]
        [--impl hf|nanogpt|llama] [--lora R]

Debian's torch has no libuv: the launcher's environment must carry USE_LIBUV=0.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

SHAPES = {"124m": dict(n_layer=12, n_head=12, n_embd=768)}  # fsdp-bench's --model names
LLAMA_SHAPES = {  # fsdp-bench's llama-1b: Llama 3.2 1B's config.json
    "llama-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                     num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                     rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                     max_position_embeddings=131072,
                     rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                       high_freq_factor=4.0,
                                       original_max_position_embeddings=8192)),
}


def nanogpt(n_layer, n_head, n_embd, vocab_size=50257, n_positions=1024):
    """nanoGPT's GPT-2 (Karpathy's model.py, bias and no dropout): returns the model; its forward
    takes (idx, targets) and returns the mean cross entropy."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(n_embd), Attention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * n_embd, n_embd))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.wpe = nn.Embedding(n_positions, n_embd)
            self.h = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return GPT()

def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="the JSON record (rank 0 writes it; printed either way)")
    p.add_argument("--model", default="124m", choices=sorted(SHAPES) + sorted(LLAMA_SHAPES))
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--no-prefetch", dest="prefetch", action="store_false")
    p.add_argument("--impl", default="hf", choices=("hf", "nanogpt", "llama"))
    p.add_argument("--lora", type=int, default=0, help="PEFT's LoRA of this rank (llama only)")
    p.add_argument("--layers", type=int, default=0, help="the Llama's depth instead (0: its own)")
    args = p.parse_args()
    if (args.impl == "llama") != (args.model in LLAMA_SHAPES):
        p.error("--impl llama goes with --model llama-1b, and only with it")
    if args.lora and args.impl != "llama":
        p.error("--lora needs --impl llama")
    return args


def llama(model, lora, layers):
    """LlamaForCausalLM on the meta device, in PEFT's LoRA when lora > 0."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(LLAMA_SHAPES[model])
    if layers:
        shape["num_hidden_layers"] = layers
    config = LlamaConfig(attention_dropout=0.0, **shape)
    with torch.device("meta"):
        m = LlamaForCausalLM(config)
        if lora:
            from peft import LoraConfig, get_peft_model

            m = get_peft_model(m, LoraConfig(r=lora, lora_alpha=2 * lora, lora_dropout=0.0,
                                             target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    return m


def blocks_of(model):
    """The decoder blocks fully_shard wraps one by one."""
    for path in ("transformer.h", "h", "model.layers", "base_model.model.model.layers"):
        node = model
        try:
            for part in path.split("."):
                node = getattr(node, part)
        except AttributeError:
            continue
        return list(node)
    raise RuntimeError("no blocks found in " + type(model).__name__)


def materialise(model):
    """Each rank's shards of a meta-device model, with random values (std 0.02, LoRA's B zero as
    PEFT starts it), and the rotary tables the model computes at construction."""
    import torch

    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if "lora_B" in name:
                local.zero_()
            elif "norm" in name:
                local.fill_(1.0)
            else:
                local.normal_(0.0, 0.02)
        for m in model.modules():
            if hasattr(m, "rope_init_fn") and hasattr(m, "inv_freq"):
                inv_freq, _ = m.rope_init_fn(m.config, torch.device("cpu"))
                m.inv_freq.copy_(inv_freq)
                if hasattr(m, "original_inv_freq"):
                    m.original_inv_freq = inv_freq


def shard(model, dtype, prefetch):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {}
    if dtype == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.bfloat16)
    blocks = blocks_of(model)
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

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    start_kib = status_kib("VmRSS:")
    torch.manual_seed(0)  # every rank builds the same model; fully_shard keeps each one's shard
    if args.impl == "hf":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_positions=1024, vocab_size=50257, resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0, **SHAPES[args.model])
        model = GPT2LMHeadModel(config)
    elif args.impl == "llama":
        model = llama(args.model, args.lora, args.layers)
    else:
        model = nanogpt(**SHAPES[args.model])
    model = shard(model, args.dtype, args.prefetch)
    if args.impl == "llama":
        materialise(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=6e-4)
    vocab = LLAMA_SHAPES[args.model]["vocab_size"] if args.impl == "llama" else 50257
    gen = torch.Generator().manual_seed(rank + 1)
    tokens = torch.randint(vocab, (args.batch, args.seq + 1), generator=gen)

    def step():
        dist.barrier()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        opt.zero_grad()
        inputs = tokens[:, :-1]
        if args.impl in ("hf", "llama"):
            loss = model(input_ids=inputs, labels=inputs).loss  # Hugging Face's own loss, as its users train
        else:
            loss = model(inputs, tokens[:, 1:])
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - t0
        # Fresh pages the step touched (glibc hands large tensors back to the kernel when freed).
        return seconds, loss.item(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults

    step()  # warm-up: AdamW's state, every buffer
    times, faults, loss = [], [], 0.0
    for _ in range(args.steps):
        t, loss, f = step()
        times.append(t)
        faults.append(f)
    mine = [times, status_kib("VmHWM:") * 1024, start_kib * 1024, statistics.median(faults)]
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        slowest = [max(r[0][i] for r in every) for i in range(args.steps)]
        median = statistics.median(slowest)
        record = {
            "impl": "fsdp2-" + args.impl, "torch": torch.__version__,
            "model": args.model if args.impl == "llama" else "gpt2-" + args.model,
            "lora_r": args.lora,
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "dtype": args.dtype, "world_size": world, "threads": args.threads,
            "batch": args.batch, "seq": args.seq, "steps": args.steps,
            "variant": "prefetch" if args.prefetch else "plain", "step_s": median,
            "tokens_per_s": world * args.batch * args.seq / median, "loss": loss,
            "peak_rss_bytes": [r[1] for r in every], "start_rss_bytes": [r[2] for r in every],
            "page_faults": max(r[3] for r in every),  # a step's minor faults, median; worst rank
            # The heap: glibc's, or one preloaded (bench/vs_fsdp2.sh's jemalloc side).
            "malloc": "jemalloc" if "jemalloc" in os.environ.get("LD_PRELOAD", "") else "glibc",
        }
        if args.out:
            with open(args.out, "w") as f:
                json.dump(record, f)
        print(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
