"""The live instruction fine-tuning round trip (scripts/sft_roundtrip.sh runs it, by hand).

make OUT: for each chat family, a tiny random model folder of roundtrip.py's shapes whose
tokenizer (trained on our corpus) gains the family's chat special tokens and its published chat
template (assets/chat_templates, from @huggingface/ollama-utils), a generation_config.json that
stops at the EOS and the end-of-turn token as the instruct models' do, and the bundled
conversations (examples/instruct/sotu_chat.jsonl) without their system prompts (Mistral's and
Gemma's templates take none or fold it in; the goldens of test_chat_template cover them).
check OUT: after fsdp-train fine-tuned each folder on them (2 ranks) and exported it,
`generate(apply_chat_template(question, add_generation_prompt=True))` of the exported folder,
greedy, equals the text `fsdp-train sample --chat question --temperature 0` printed; the same ids
decode to the same text, so equal texts are equal tokens here (no id decodes to nothing). For the
longrope models (Phi) generate() runs without its KV cache: with it, transformers rotates the
cached keys with the short factors past original_max_position_embeddings, which its own
cache-free forward does not (the argmax loop equals ours there).
"""
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roundtrip import MODELS, REPO, TOKENIZERS  # noqa: E402

QUESTION = "How did President Lincoln open the 1862 State of the Union address?"
NEW_TOKENS = 24
# The same question with a tool offered, for the families whose templates show tools: `sample
# --chat-file` must print generate(apply_chat_template(..., tools=TOOLS)).
TOOLS = [{"type": "function", "function": {
    "name": "find_address", "description": "The State of the Union address of a year.",
    "parameters": {"type": "object", "properties": {"year": {"type": "integer"}},
                   "required": ["year"]}}}]
TOOL_FAMILIES = ["llama3.2", "qwen2.5", "qwen3"]
# family: (roundtrip.py's model, the template's model in templates.json, the chat special tokens,
#          the end-of-turn token, data.train_on)
FAMILIES = {
    "llama3.2": ("llama", "library/llama3.2:3b",
                 ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|eot_id|>",
                 "assistant"),
    "qwen2.5": ("qwen2", "library/qwen2.5:0.5b", ["<|im_start|>", "<|im_end|>"], "<|im_end|>",
                "assistant"),
    # Qwen3's template rewrites earlier turns (their reasoning): only the last is trained.
    "qwen3": ("qwen3", "library/qwen3:0.6b", ["<|im_start|>", "<|im_end|>", "<think>", "</think>"],
              "<|im_end|>", "last_assistant"),
    "smollm2": ("smollm2", "library/smollm2:135m", ["<|im_start|>", "<|im_end|>"], "<|im_end|>",
                "assistant"),
    "mistral": ("mistral", "library/mistral:7b-instruct-fp16", ["[INST]", "[/INST]"], None,
                "assistant"),
    "phi3.5": ("phi3", "library/phi3.5:3.8b", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
               "<|end|>", "assistant"),
    "phi4-mini": ("phi4-mini", "library/phi4-mini:3.8b",
                  ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<|end|>", "assistant"),
    "gemma3": ("gemma3", "library/gemma3:1b", ["<start_of_turn>", "<end_of_turn>"],
               "<end_of_turn>", "assistant"),
}


def templates():
    with open(os.path.join(REPO, "assets", "chat_templates", "templates.json"), encoding="utf-8") as f:
        return {t["model"]: t["chat_template"] for t in json.load(f)}


def make(out):
    torch.manual_seed(0)
    found = templates()
    with open(os.path.join(REPO, "examples", "instruct", "sotu_chat.jsonl"), encoding="utf-8") as f:
        conversations = [json.loads(line)["messages"] for line in f if line.strip()]
    conversations = [[m for m in c if m["role"] != "system"] for c in conversations[:96]]
    for family, (shape, template, specials, eot, _train_on) in FAMILIES.items():
        model_type, tok_family, fields, dtype, _shard = MODELS[shape]
        folder = os.path.join(out, "in", family)
        shutil.rmtree(folder, ignore_errors=True)
        tok = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, tok_family))
        tok.add_special_tokens({"additional_special_tokens": specials})
        tok.chat_template = found[template]
        config = AutoConfig.for_model(model_type, vocab_size=len(tok) + 3, **fields)
        model = AutoModelForCausalLM.from_config(config).to(dtype)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        eos = [tok.eos_token_id] + ([tok.convert_tokens_to_ids(eot)] if eot else [])
        GenerationConfig(do_sample=False, eos_token_id=eos, bos_token_id=tok.bos_token_id,
                         max_new_tokens=NEW_TOKENS).save_pretrained(folder)
        with open(os.path.join(folder, "chat.jsonl"), "w", encoding="utf-8") as f:
            for c in conversations:
                f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
        if family in TOOL_FAMILIES:
            with open(os.path.join(folder, "ask_tools.jsonl"), "w", encoding="utf-8") as f:
                f.write(json.dumps({"messages": [{"role": "user", "content": QUESTION}],
                                    "tools": TOOLS}) + "\n")
        print("made", folder, "vocab", len(tok), "template", template)


def compare(model, tok, messages, printed_file, tools=None):
    """generate(apply_chat_template(messages, tools=tools)) against sample's printed text."""
    ids = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    # generate()'s KV cache keeps the keys rotated with longrope's short factors once a
    # generation crosses original_max_position_embeddings, where the argmax loop (and sample)
    # recomputes with the long ones: for longrope models generate() runs without the cache.
    longrope = (getattr(model.config, "rope_parameters", None) or {}).get("rope_type") == "longrope"
    with torch.no_grad():
        gen = model.generate(**ids, do_sample=False, max_new_tokens=NEW_TOKENS,
                             use_cache=not longrope)[0]
    printed = open(printed_file, encoding="utf-8").read()
    # The text follows the "--- sample 1 of 1 (...)" line and ends with one newline of ours.
    ours = printed.split("\n--- sample 1 of 1", 1)[-1].split("\n", 1)[-1]
    ours = ours[:-1] if ours.endswith("\n") else ours
    theirs = tok.decode(gen)
    new = len(gen) - ids["input_ids"].shape[1]
    return dict(sample_equals_generate=ours == theirs, generate=theirs, sample=ours,
                generate_use_cache=not longrope, new_tokens=new, stopped=int(gen[-1]))


def check(out):
    failures = 0
    report = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
    for family in FAMILIES:
        dst = os.path.join(out, "out", family)
        model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        tok = AutoTokenizer.from_pretrained(dst)
        runs = {family: compare(model, tok, [{"role": "user", "content": QUESTION}],
                                os.path.join(out, "out", family + ".sample.txt"))}
        if family in TOOL_FAMILIES:
            runs[family + " tools"] = compare(
                model, tok, [{"role": "user", "content": QUESTION}],
                os.path.join(out, "out", family + ".tools.sample.txt"), TOOLS)
        for name, r in runs.items():
            ok = r["sample_equals_generate"]
            failures += not ok
            report["models"][name] = r
            print("%-16s %s  %d new tokens, last %d%s" % (
                name, "ok  " if ok else "FAIL", r["new_tokens"], r["stopped"],
                "" if ok else "\n  ours:   %r\n  theirs: %r" % (r["sample"], r["generate"])))
    json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
