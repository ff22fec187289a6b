"""The live round trip against transformers (scripts/hf_roundtrip.sh runs it, by hand).

make OUT: in the sid chroot, tiny random models of every family fsdp.cpp imports, saved with
save_pretrained beside a tokenizer trained on our corpus (tests/data/hf/tokenizers), and for each a
fixed batch of held-out tokens as an llm.c token file (batch.bin).
check OUT: after fsdp-train fine-tuned each folder (2 ranks, 20 steps) and exported it
(train.export_dir), and `fsdp-train eval` scored the exported folder on batch.bin (ours.txt):
transformers loads each exported folder with no missing or unexpected keys, its tokenizer gives the
input folder's ids, and its loss on batch.bin equals ours within 1e-5 relative.
"""
import json
import os
import shutil
import struct
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZERS = os.path.join(REPO, "tests", "data", "hf", "tokenizers")
SEQ, WINDOWS = 64, 8
PROMPT = "Fellow citizens of the Senate"  # scripts/hf_roundtrip.sh PROMPT

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.1)
MODELS = {
    "gpt2": ("gpt2", "bytelevel", dict(n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                       initializer_range=0.1), torch.float32, None),
    "llama": ("llama", "llama3", dict(SMALL, tie_word_embeddings=False, rope_theta=500000.0,
                                      rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 32}),
              torch.bfloat16, "200KB"),
    "llama-tied": ("llama", "llama2", dict(SMALL, tie_word_embeddings=True, rope_theta=10000.0),
                   torch.float32, None),
    "llama-linear": ("llama", "metaspace", dict(SMALL, rope_scaling={"rope_type": "linear",
                                                                     "factor": 2.0}),
                     torch.float32, None),
    "qwen2": ("qwen2", "qwen2", dict(SMALL, tie_word_embeddings=True), torch.float32, None),
    "mistral": ("mistral", "llama2", dict(SMALL, sliding_window=None), torch.float32, None),
    # SmolLM2 as published: a tied Llama with the StarCoder-style Digits + ByteLevel tokenizer.
    "smollm2": ("llama", "smollm2", dict(SMALL, tie_word_embeddings=True, rope_theta=100000.0),
                torch.float32, None),
    "qwen3": ("qwen3", "qwen2", dict(SMALL, tie_word_embeddings=True, head_dim=32),
              torch.bfloat16, None),
    "smollm3": ("smollm3", "llama3", dict(SMALL, no_rope_layers=[1, 0], attention_bias=True,
                                          pad_token_id=None), torch.float32, None),
    # Phi-3.5 and Phi-4-mini shapes: longrope with the long factors at 64 tokens (above 32), partial
    # rotary 0.75 for the second.
    "phi3": ("phi3", "llama2", dict(SMALL, original_max_position_embeddings=32, pad_token_id=None,
                                    rope_scaling={"rope_type": "longrope",
                                                  "short_factor": [1.0, 1.1, 1.3, 1.0, 2.0, 1.5, 1.2, 1.0],
                                                  "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 40.0]}),
             torch.float32, None),
    "phi4-mini": ("phi3", "o200k", dict(SMALL, original_max_position_embeddings=32,
                                            partial_rotary_factor=0.75, tie_word_embeddings=True,
                                            pad_token_id=None,
                                            rope_scaling={"rope_type": "longrope",
                                                          "short_factor": [1.0, 1.2, 1.0, 1.5, 1.0, 1.1],
                                                          "long_factor": [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]}),
                  torch.bfloat16, None),
    # Gemma 3 1B's layout: every 2nd layer full, the others sliding over 16 of the 64 tokens.
    "gemma3": ("gemma3_text", "llama2", dict(SMALL, head_dim=16, query_pre_attn_scalar=24,
                                             sliding_window=16, pad_token_id=None,
                                             layer_types=["sliding_attention", "full_attention"]),
               torch.float32, None),
}


def write_tokens(path, ids):
    assert max(ids) < 65536
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(ids), *ids))


def make(out):
    torch.manual_seed(0)
    corpus = sorted(f for f in os.listdir(os.path.join(REPO, "assets", "sotu")) if f.endswith(".txt"))
    held_out = "".join(open(os.path.join(REPO, "assets", "sotu", f), encoding="utf-8").read()
                       for f in corpus[-3:])
    for name, (model_type, tok_family, fields, dtype, shard) in MODELS.items():
        folder = os.path.join(out, "in", name)
        tok = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, tok_family))
        config = AutoConfig.for_model(model_type, vocab_size=len(tok), **fields)
        model = AutoModelForCausalLM.from_config(config).to(dtype)
        for layer in model.model.layers if model_type != "gpt2" else []:
            # Non-zero biases and norms other than one, so that a dropped tensor shows.
            attn = layer.self_attn
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                proj = getattr(attn, name, None)
                if proj is not None and proj.bias is not None:
                    torch.nn.init.normal_(proj.bias, std=0.1)
            if model_type == "gemma3_text":  # (1 + weight) norms away from one
                for norm in (attn.q_norm, attn.k_norm, layer.input_layernorm,
                             layer.post_attention_layernorm, layer.pre_feedforward_layernorm,
                             layer.post_feedforward_layernorm):
                    torch.nn.init.normal_(norm.weight, std=0.2)
            if model_type == "qwen3":
                torch.nn.init.normal_(attn.q_norm.weight, mean=1.0, std=0.2)
                torch.nn.init.normal_(attn.k_norm.weight, mean=1.0, std=0.2)
        model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
        tok.save_pretrained(folder)
        ids = tok(held_out, add_special_tokens=False)["input_ids"][: SEQ * WINDOWS + 1]
        assert len(ids) == SEQ * WINDOWS + 1, len(ids)
        write_tokens(os.path.join(folder, "batch.bin"), ids)
        print("made", folder, "vocab", len(tok), "files", sorted(os.listdir(folder)))


def loss_on(model, ids):
    windows = torch.stack([ids[i * SEQ:i * SEQ + SEQ + 1] for i in range(WINDOWS)])
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                             windows[:, 1:].reshape(-1)).item()


def check(out):
    failures = 0
    report = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
    for name in MODELS:
        src, dst = os.path.join(out, "in", name), os.path.join(out, "out", name)
        model, info = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32,
                                                           output_loading_info=True,
                                                           attn_implementation="eager")
        model.eval()
        keys_ok = not info["missing_keys"] and not info["unexpected_keys"]
        text = "Fellow citizens, 2026 — naïve café ☕ <|endoftext|>"
        tok_ok = (AutoTokenizer.from_pretrained(dst)(text)["input_ids"] ==
                  AutoTokenizer.from_pretrained(src)(text)["input_ids"])
        raw = open(os.path.join(src, "batch.bin"), "rb").read()[1024:]
        ids = torch.tensor(struct.unpack("<%dH" % (len(raw) // 2), raw), dtype=torch.long)
        theirs = loss_on(model, ids)
        ours = float(open(os.path.join(dst, "..", name + ".ours.txt")).read().split()[2].rstrip(","))
        rel = abs(theirs - ours) / theirs
        type_ok = model.config.model_type == AutoConfig.from_pretrained(src).model_type
        # fsdp-train sample --temperature 0 against generate(**tokenizer(prompt)), greedy.
        tok = AutoTokenizer.from_pretrained(dst)
        with torch.no_grad():
            gen = model.generate(**tok(PROMPT, return_tensors="pt"), do_sample=False,
                                 max_new_tokens=12)[0]
        printed = open(os.path.join(dst, "..", name + ".sample.txt"), encoding="utf-8").read()
        # The text follows the "--- sample 1 of 1 (...)" line.
        ours_text = printed.split("\n--- sample 1 of 1", 1)[-1].split("\n", 1)[-1].rstrip("\n")
        sample_ok = ours_text == tok.decode(gen)
        ok = keys_ok and tok_ok and type_ok and sample_ok and rel < 1e-5
        failures += not ok
        report["models"][name] = dict(missing=sorted(info["missing_keys"]), unexpected=sorted(info["unexpected_keys"]),
                                      tokenizer_ids_equal=tok_ok, loss_transformers=theirs,
                                      sample_equals_generate=sample_ok, generate=tok.decode(gen),
                                      sample=ours_text,
                                      loss_fsdp_cpp=ours, relative_difference=rel,
                                      model_type=model.config.model_type,
                                      files=sorted(os.listdir(dst)))
        print("%-13s %s  type %s  keys %s  tokenizer %s  sample %s  loss transformers %.6f fsdp.cpp %.6f (rel %.1e)" %
              (name, "ok  " if ok else "FAIL", model.config.model_type, "ok" if keys_ok else info, tok_ok, sample_ok, theirs, ours, rel))
    json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
