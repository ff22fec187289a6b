#!/usr/bin/python3
"""Golden numbers for tests/test_gpt2.cpp (GPT2.GoldenAgainstPyTorch).

An independent GPT-2 forward in PyTorch that transcribes Hugging Face transformers' GPT2LMHeadModel
(modeling_gpt2.py: Conv1D, GPT2Attention._attn with the causal mask filled with finfo.min,
NewGELUActivation written out, pre-norm blocks, lm_head tied to wte). The weights are not random:
parameter k (in HF's registration order) is filled from a formula that the C++ test evaluates with
the same LibTorch operations, so both sides start from bit-identical values.

Run with Debian's python3-torch (1.13): /usr/bin/python3 tests/golden/gpt2_reference.py
"""
import math

import torch

VOCAB, CTX, C, LAYERS, HEADS = 97, 16, 32, 2, 4
B, T = 2, 12


def formula(k, shape, scale, offset):
    n = math.prod(shape)
    v = torch.arange(n, dtype=torch.float64).mul(0.1).add(k).sin().mul(scale).add(offset)
    return v.to(torch.float32).view(shape)


def hf_params():
    """(name, shape, scale, offset) in GPT2LMHeadModel's named_parameters() order."""
    out = [("transformer.wte.weight", (VOCAB, C), 0.15, 0.0),
           ("transformer.wpe.weight", (CTX, C), 0.3, 0.0)]
    for i in range(LAYERS):
        h = f"transformer.h.{i}."
        out += [(h + "ln_1.weight", (C,), 0.1, 1.0), (h + "ln_1.bias", (C,), 0.05, 0.0),
                (h + "attn.c_attn.weight", (C, 3 * C), 0.3, 0.0),
                (h + "attn.c_attn.bias", (3 * C,), 0.05, 0.0),
                (h + "attn.c_proj.weight", (C, C), 0.2, 0.0), (h + "attn.c_proj.bias", (C,), 0.05, 0.0),
                (h + "ln_2.weight", (C,), 0.1, 1.0), (h + "ln_2.bias", (C,), 0.05, 0.0),
                (h + "mlp.c_fc.weight", (C, 4 * C), 0.3, 0.0), (h + "mlp.c_fc.bias", (4 * C,), 0.05, 0.0),
                (h + "mlp.c_proj.weight", (4 * C, C), 0.2, 0.0), (h + "mlp.c_proj.bias", (C,), 0.05, 0.0)]
    out += [("transformer.ln_f.weight", (C,), 0.1, 1.0), ("transformer.ln_f.bias", (C,), 0.05, 0.0)]
    return {name: formula(k, shape, s, o) for k, (name, shape, s, o) in enumerate(out)}


def conv1d(x, w, b):  # transformers.pytorch_utils.Conv1D.forward
    size_out = x.size()[:-1] + (w.size(-1),)
    return torch.addmm(b, x.view(-1, x.size(-1)), w).view(size_out)


def gelu_new(x):  # transformers.activations.NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def attention(x, p, h):  # GPT2Attention.forward / _attn, no dropout, no cache
    q, k, v = conv1d(x, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]).split(C, dim=2)
    split = lambda t: t.view(t.size(0), t.size(1), HEADS, C // HEADS).permute(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5)
    causal = torch.tril(torch.ones((T, T), dtype=torch.bool)).view(1, 1, T, T)
    w = torch.where(causal, w, torch.full([], torch.finfo(w.dtype).min))
    y = torch.matmul(torch.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous().view(B, T, C)
    return conv1d(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])


def forward(idx, p):
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (C,), p[n + ".weight"], p[n + ".bias"], 1e-5)
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][torch.arange(T)]
    for i in range(LAYERS):
        h = f"transformer.h.{i}."
        x = x + attention(ln(x, h + "ln_1"), p, h)
        m = gelu_new(conv1d(ln(x, h + "ln_2"), p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]))
        x = x + conv1d(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
    x = ln(x, "transformer.ln_f")
    return torch.matmul(x, p["transformer.wte.weight"].t())


def main():
    tokens = torch.tensor([[(b * 31 + t * 17 + 5) % VOCAB for t in range(T + 1)] for b in range(B)])
    logits = forward(tokens[:, :T], hf_params())
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    print(f"loss {loss.item():.9g}")
    for b, t, v in [(0, 0, 0), (0, 5, 17), (1, 11, 96), (1, 7, 40)]:
        print(f"logits[{b},{t},{v}] {logits[b, t, v].item():.9g}")


if __name__ == "__main__":
    main()
