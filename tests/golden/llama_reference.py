#!/usr/bin/python3
"""Golden numbers for tests/test_llama.cpp (Llama.GoldenAgainstPyTorch, Llama.GoldenTiedAgainstPyTorch).

An independent Llama forward in PyTorch that transcribes Hugging Face transformers'
LlamaForCausalLM (modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with the default rope type,
rotate_half and apply_rotary_pos_emb, repeat_kv, eager_attention_forward with the additive causal
mask of finfo.min and an fp32 softmax, LlamaMLP with SiLU, pre-norm decoder layers, lm_head or tied
embeddings). The weights are not random: parameter k (in HF's named_parameters() order) is filled
from a formula that the C++ test evaluates with the same LibTorch operations, so both sides start
from bit-identical values.

The model uses grouped-query attention (4 query heads, 2 key/value heads) so that repeat_kv is
exercised, and a rope_theta other than 10000 so that a wrong base shows.

Run with Debian's python3-torch (1.13): /usr/bin/python3 tests/golden/llama_reference.py
"""
import math

import torch

VOCAB, CTX, C, LAYERS, HEADS, KV_HEADS, FF = 97, 16, 32, 2, 4, 2, 48
THETA, EPS = 500.0, 1e-5
HS = C // HEADS
B, T = 2, 12


def formula(k, shape, scale, offset):
    n = math.prod(shape)
    v = torch.arange(n, dtype=torch.float64).mul(0.1).add(k).sin().mul(scale).add(offset)
    return v.to(torch.float32).view(shape)


def hf_params(tied):
    """name -> tensor, filled in LlamaForCausalLM's named_parameters() order."""
    out = [("model.embed_tokens.weight", (VOCAB, C), 0.5, 0.0)]
    for i in range(LAYERS):
        h = f"model.layers.{i}."
        out += [(h + "self_attn.q_proj.weight", (HEADS * HS, C), 0.3, 0.0),
                (h + "self_attn.k_proj.weight", (KV_HEADS * HS, C), 0.3, 0.0),
                (h + "self_attn.v_proj.weight", (KV_HEADS * HS, C), 0.3, 0.0),
                (h + "self_attn.o_proj.weight", (C, HEADS * HS), 0.2, 0.0),
                (h + "mlp.gate_proj.weight", (FF, C), 0.3, 0.0),
                (h + "mlp.up_proj.weight", (FF, C), 0.3, 0.0),
                (h + "mlp.down_proj.weight", (C, FF), 0.2, 0.0),
                (h + "input_layernorm.weight", (C,), 0.1, 1.0),
                (h + "post_attention_layernorm.weight", (C,), 0.1, 1.0)]
    out += [("model.norm.weight", (C,), 0.1, 1.0)]
    if not tied:  # tied: lm_head.weight is model.embed_tokens.weight and not listed again
        out += [("lm_head.weight", (VOCAB, C), 0.3, 0.0)]
    return {name: formula(k, shape, s, o) for k, (name, shape, s, o) in enumerate(out)}


def rms_norm(x, weight):  # LlamaRMSNorm.forward
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + EPS)
    return weight * x.to(input_dtype)


def rotary(x, position_ids):  # LlamaRotaryEmbedding (rope_type "default", attention_scaling 1)
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def causal_mask(dtype):  # LlamaModel._update_causal_mask, no padding, no cache
    mask = torch.full((T, T), fill_value=torch.finfo(dtype).min, dtype=dtype)
    return torch.triu(mask, diagonal=1)[None, None, :, :]


def attention(x, p, h, cos, sin):  # LlamaAttention.forward with eager_attention_forward
    linear = lambda t, n: torch.nn.functional.linear(t, p[h + "self_attn." + n + ".weight"])
    hidden_shape = (*x.shape[:-1], -1, HS)
    q = linear(x, "q_proj").view(hidden_shape).transpose(1, 2)
    k = linear(x, "k_proj").view(hidden_shape).transpose(1, 2)
    v = linear(x, "v_proj").view(hidden_shape).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    k, v = repeat_kv(k, HEADS // KV_HEADS), repeat_kv(v, HEADS // KV_HEADS)
    w = torch.matmul(q, k.transpose(2, 3)) * HS ** -0.5
    w = w + causal_mask(w.dtype)
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    y = torch.matmul(w, v).transpose(1, 2).contiguous()
    return linear(y.reshape(*x.shape[:-1], -1).contiguous(), "o_proj")


def mlp(x, p, h):  # LlamaMLP.forward, hidden_act "silu"
    linear = lambda t, n: torch.nn.functional.linear(t, p[h + "mlp." + n + ".weight"])
    return linear(torch.nn.functional.silu(linear(x, "gate_proj")) * linear(x, "up_proj"), "down_proj")


def forward(idx, p, tied):
    x = p["model.embed_tokens.weight"][idx]
    cos, sin = rotary(x, torch.arange(T).unsqueeze(0))
    for i in range(LAYERS):  # LlamaDecoderLayer.forward
        h = f"model.layers.{i}."
        x = x + attention(rms_norm(x, p[h + "input_layernorm.weight"]), p, h, cos, sin)
        x = x + mlp(rms_norm(x, p[h + "post_attention_layernorm.weight"]), p, h)
    x = rms_norm(x, p["model.norm.weight"])
    head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
    return torch.nn.functional.linear(x, head)


def main():
    tokens = torch.tensor([[(b * 31 + t * 17 + 5) % VOCAB for t in range(T + 1)] for b in range(B)])
    for tied in (False, True):
        logits = forward(tokens[:, :T], hf_params(tied), tied)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        print("tied" if tied else "untied")
        print(f"  loss {loss.item():.9g}")
        for b, t, v in [(0, 0, 0), (0, 5, 17), (1, 11, 96), (1, 7, 40)]:
            print(f"  logits[{b},{t},{v}] {logits[b, t, v].item():.9g}")


if __name__ == "__main__":
    main()
