"""The PEFT side of scripts/peft_roundtrip.sh: fsdp.cpp's adapter folder and merged export
against PEFT (its source on PYTHONPATH) and transformers, in the sid chroot.

  peft_roundtrip.py BASE_DIR WORK_DIR PROMPT      writes WORK_DIR/report.json; exit 1 on a mismatch
"""

import json
import os
import sys

import torch
from peft import PeftModel
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(base_dir, work, prompt):
    report = {}
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32,
                                                attn_implementation="eager")
    model = PeftModel.from_pretrained(base, os.path.join(work, "adapter")).eval()
    saved = set(load_file(os.path.join(work, "adapter", "adapter_model.safetensors")))
    expected = set("base_model.model." + k.removeprefix("base_model.model.")
                   for k in get_peft_model_state_dict(model))
    report["missing_keys"] = sorted(expected - saved)
    report["unexpected_keys"] = sorted(saved - expected)

    tok = AutoTokenizer.from_pretrained(base_dir)
    ids = tok(prompt, return_tensors="pt").input_ids
    merged_ours = AutoModelForCausalLM.from_pretrained(os.path.join(work, "merged"),
                                                       dtype=torch.float32,
                                                       attn_implementation="eager").eval()
    with torch.no_grad():
        logits_peft = model(input_ids=ids).logits
        logits_ours = merged_ours(input_ids=ids).logits
        report["logits_max_diff"] = (logits_peft - logits_ours).abs().max().item()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                             do_sample=False, use_cache=False)
        report["peft_text"] = tok.decode(out[0], skip_special_tokens=True)
        merged_peft = model.merge_and_unload().state_dict()
        ours = merged_ours.state_dict()
        report["merged_max_diff"] = max((merged_peft[k] - ours[k]).abs().max().item()
                                        for k in merged_peft if k in ours)
        report["merged_keys_equal"] = set(merged_peft) == set(ours)
    sample = open(os.path.join(work, "sample.txt")).read()
    report["sample_contains_peft_text"] = report["peft_text"] in sample
    ok = (not report["missing_keys"] and not report["unexpected_keys"] and
          report["logits_max_diff"] < 1e-4 and report["merged_max_diff"] < 1e-5 and
          report["merged_keys_equal"] and report["sample_contains_peft_text"])
    report["ok"] = ok
    with open(os.path.join(work, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
