"""PEFT's LoRA on the tiny model fixtures: goldens for tests/test_lora.cpp.

For each family's base (tests/data/hf/models/<family>, transformers 5.12 folders), PEFT (its
source on PYTHONPATH; peft is not packaged in Debian) wraps the model with a LoraConfig of that
family's targets, its lora_B drawn at random (PEFT starts B at zero, which would leave A's first
gradient zero and prove nothing about it), and save_pretrained writes the adapter folder our test
reads with model.adapter. On a fixed batch in fp32 it records PEFT's loss, the gradient of every
trainable tensor (under the adapter file's keys), the logits, greedy generation with the adapter,
and merge_and_unload's merged weights of the adapted layers.

Written under tests/data/hf/lora/<family>/: adapter/ (adapter_config.json,
adapter_model.safetensors), grads.safetensors, merged.safetensors, reference.json.
Run inside the sid chroot by scripts/lora_fixtures.sh; CI reads the committed files.
"""

import json
import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "hf")

# family: (base folder, LoraConfig arguments) Llama: the usual four attention projections, the
# head trained in full (modules_to_save); Qwen3 (q/k norms, tied embeddings): all-linear; Gemma 3
# (sandwich norms, GeGLU): rsLoRA on the MLP; Phi-3: its fused qkv_proj and gate_up_proj; GPT-2:
# Conv1D layers (PEFT's fan_in_fan_out).
FAMILIES = {
    "llama": ("llama", dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                            modules_to_save=["lm_head"])),
    "qwen3": ("qwen3", dict(r=4, lora_alpha=16, target_modules="all-linear")),
    "gemma3": ("gemma3", dict(r=8, lora_alpha=8, use_rslora=True,
                              target_modules=["gate_proj", "up_proj", "down_proj"])),
    "phi3": ("phi3", dict(r=4, lora_alpha=8, target_modules=["qkv_proj", "gate_up_proj", "o_proj",
                                                            "down_proj"])),
    "gpt2": ("gpt2", dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"])),
}


def saved_key(name):
    """A wrapped model's parameter name as save_pretrained writes it (adapter name dropped)."""
    name = name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")
    return name.replace(".modules_to_save.default.", ".")


def make(family, base_name, lora_args):
    torch.manual_seed(1234)
    base_dir = os.path.join(ROOT, "models", base_name)
    out = os.path.join(ROOT, "lora", family)
    os.makedirs(out, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.name_or_path = ""  # the test names its base; no path of this machine in the fixture
    peft_model = get_peft_model(model, LoraConfig(lora_dropout=0.0, task_type="CAUSAL_LM",
                                                  **lora_args))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0.0, 0.05)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    os.remove(os.path.join(out, "adapter", "README.md"))

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(99)
    ids = torch.randint(0, vocab, (2, 12), generator=gen)
    # Eval mode: GPT-2's own dropout (resid_pdrop 0.1) would otherwise draw; the adapters' is 0.
    peft_model.eval()
    loss = peft_model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = {saved_key(n): p.grad.detach().clone().contiguous()
             for n, p in peft_model.named_parameters() if p.requires_grad}
    save_file(grads, os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})

    with torch.no_grad():
        logits = peft_model(input_ids=ids).logits
        prompt = ids[:1, :5]
        # Without the KV cache: with it, Phi-3's adapted model continues otherwise than its own
        # full forward does at the fourth token (margin 0.02 against 0.16 and 0.12 uncached;
        # transformers 5.12, peft 0.20), and the full forward is what greedy decoding means.
        greedy = peft_model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                     max_new_tokens=6, do_sample=False, pad_token_id=0,
                                     use_cache=False)
        targets = {saved_key(n).replace("base_model.model.", "").rsplit(".lora_A.", 1)[0]
                   for n, _ in peft_model.named_parameters() if ".lora_A." in n}
        merged = peft_model.merge_and_unload()
        state = merged.state_dict()
        save_file({t + ".weight": state[t + ".weight"].contiguous() for t in sorted(targets)},
                  os.path.join(out, "merged.safetensors"), metadata={"format": "pt"})
    reference = {
        "input_ids": ids.tolist(),
        "loss": loss.item(),
        "last_logits": logits[:, -1].tolist(),
        "greedy_prompt": prompt[0].tolist(),
        "greedy": greedy[0, prompt.shape[1]:].tolist(),
        "trainable": sorted(grads),
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    print(family, "loss", loss.item(), "trainable tensors", len(grads))


def main():
    only = sys.argv[1:] or list(FAMILIES)
    for family in only:
        make(family, *FAMILIES[family])


if __name__ == "__main__":
    main()
