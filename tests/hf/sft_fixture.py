"""tests/data/hf/sft: instruction fine-tuning as transformers computes it, for fsdp.cpp to match.

A small Llama with the llama3 fixture's tokenizer (plus Llama 3's header and end-of-turn special
tokens and, when given, a published chat template), a prompt/completion JSONL file and, with a
template, two conversation JSONL files (the second with a tool call, its result and the tool
offered). reference.json holds, for each file:
  - every example's token ids and target flags, made the way the data layer documents
    (fsdp/data/examples.h): prompt/completion as TRL does it (tokenizer(prompt + completion) with
    special tokens, then EOS; the prompt's own token count marks where the loss starts), and
    conversations through apply_chat_template(tokenize=True) with each assistant turn the tokens
    between the renderings of messages[:i] with the generation prompt and of messages[:i + 1];
  - the rows first-fit packing makes of them at seq_len, in file order;
  - transformers' loss over all rows at once: labels -100 off the targets, position_ids restarting
    per example (transformers then keeps attention inside each example), and again with one
    example a row, padded: the mean over every target of the global batch.
The example count is chosen so that the rows split evenly into 4, so one optimizer step of
fsdp-train covers every row at world sizes 1 and 2 with or without gradient accumulation.
"""
import json
import os
import random
import shutil

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

# Llama 3's system header alone is ~40 tokens; with a tool, its instructions and schema ~450
# (the tool case's examples: up to 564 tokens, one a row).
SEQ_LEN = {"prompt_completion": 64, "messages": 256, "messages_tools": 640}
WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at "
         "which nation people war peace congress union year government").split()
UNICODE = ["naïve café", "日本語のテキスト", "emoji 🎉 here", "Ωμέγα"]


def first_fit(lengths, capacity):
    rows, room = [], []
    for i, n in enumerate(lengths):
        for r, free in enumerate(room):
            if free >= n:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(capacity - n)
    return rows


def prompt_completion(tok, rng, count):
    lines, examples = [], []
    for i in range(count):
        prompt = f"Question {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))
        if i % 5 == 3:
            prompt += " " + UNICODE[i % len(UNICODE)]
        prompt += "?\nAnswer:"
        completion = " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20)))
        lines.append({"prompt": prompt, "completion": completion})
        prompt_ids = tok(prompt)["input_ids"]
        ids = tok(prompt + completion)["input_ids"]
        if ids[-1] != tok.eos_token_id:
            ids.append(tok.eos_token_id)
        flags = [1 if j >= len(prompt_ids) else 0 for j in range(len(ids))]
        flags[0] = 2
        examples.append({"ids": ids, "flags": flags})
    return lines, examples


def conversations(tok, rng, count):
    lines, examples = [], []
    for i in range(count):
        messages = []
        if i % 3 == 0:
            messages.append({"role": "system", "content": "You answer briefly."})
        for turn in range(1 + i % 3):
            question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10))) + "?"
            if (i + turn) % 4 == 1:
                question += " " + UNICODE[(i + turn) % len(UNICODE)]
            answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))
            messages += [{"role": "user", "content": question},
                         {"role": "assistant", "content": answer}]
        lines.append({"messages": messages})
        examples.append(chat_example(tok, messages))
    return lines, examples


def chat_example(tok, messages, tools=None):
    """apply_chat_template's ids; targets each assistant turn: the tokens between the renderings
    of messages[:k] with the generation prompt and of messages[:k + 1]."""
    ids = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)
    flags = [0] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(tok.apply_chat_template(messages[:k], tools=tools, tokenize=True,
                                            return_dict=False, add_generation_prompt=True))
        end = len(tok.apply_chat_template(messages[:k + 1], tools=tools, tokenize=True,
                                          return_dict=False))
        for j in range(max(start, 1), end):
            flags[j] = 1
    flags[0] = 2
    return {"ids": ids, "flags": flags}


TOOLS = [{"type": "function", "function": {
    "name": "find_address", "description": "The State of the Union address of a year.",
    "parameters": {"type": "object", "properties": {"year": {"type": "integer"}},
                   "required": ["year"]}}}]


def tool_conversations(tok, rng, count):
    """A question, an answer that calls the tool (content null or empty), the tool's result and
    the answer after it; the line offers the tool (transformers' `tools`)."""
    lines, examples = [], []
    for i in range(count):
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))) + "?"
        call = {"type": "function",
                "function": {"name": "find_address", "arguments": {"year": 1790 + rng.randint(0, 230)}}}
        result = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10)))
        answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 10)))
        messages = [{"role": "user", "content": question},
                    {"role": "assistant", "content": None if i % 2 else "", "tool_calls": [call]},
                    {"role": "tool", "content": result},
                    {"role": "assistant", "content": answer}]
        lines.append({"messages": messages, "tools": TOOLS})
        examples.append(chat_example(tok, messages, TOOLS))
    return lines, examples


def rows_tensors(examples, rows, seq_len):
    ids, labels, positions = [], [], []
    for row in rows:
        r_ids, r_labels, r_pos = [], [], []
        for e in row:
            ex = examples[e]
            r_ids += ex["ids"]
            r_labels += [t if f == 1 else -100 for t, f in zip(ex["ids"], ex["flags"])]
            r_pos += list(range(len(ex["ids"])))
        pad = seq_len - len(r_ids)
        r_pos += list(range(r_pos[-1] + 1, r_pos[-1] + 1 + pad))
        ids.append(r_ids + [0] * pad)
        labels.append(r_labels + [-100] * pad)
        positions.append(r_pos)
    return torch.tensor(ids), torch.tensor(labels), torch.tensor(positions)


def loss_over(model, examples, rows, seq_len):
    ids, labels, positions = rows_tensors(examples, rows, seq_len)
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=positions, labels=labels, use_cache=False)
    return float(out.loss), int((labels[:, 1:] != -100).sum())


def make_case(model, tok, make, rng, seq_len):
    """Examples, a multiple of 4 of them, until first-fit packs them into a multiple of 4 rows
    (at least 8): one step then takes every row, or every example unpacked, at 1 and 2 ranks."""
    count = 12
    while True:
        lines, examples = make(tok, random.Random(rng), count)
        rows = first_fit([len(e["ids"]) for e in examples], seq_len)
        if len(rows) >= 8 and len(rows) % 4 == 0 and len(examples) % 4 == 0:
            break
        count += 1
    packed, targets = loss_over(model, examples, rows, seq_len)
    padded, _ = loss_over(model, examples, [[i] for i in range(len(examples))], seq_len)
    assert all(len(e["ids"]) <= seq_len for e in examples), "an example longer than a row"
    return lines, {"examples": examples, "rows": rows, "loss_packed": packed,
                   "loss_padded": padded, "targets": targets}


def sft_fixture(out, chat_template=None):
    folder = os.path.join(out, "sft")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizers", "llama3"))
    tok.add_special_tokens({"additional_special_tokens": [
        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
    if chat_template:
        with open(chat_template, encoding="utf-8") as f:
            template = f.read()
        # Llama 3's template writes today's date (strftime_now) unless date_string is set: fixed
        # here, so that the reference holds on any day.
        if "strftime_now" in template:
            template = '{%- set date_string = "26 Jul 2024" -%}\n' + template
        tok.chat_template = template
    torch.manual_seed(1717)
    config = transformers.AutoConfig.for_model(
        "llama", vocab_size=2048, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        initializer_range=0.1, tie_word_embeddings=False, rope_theta=500000.0,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model_dir = os.path.join(folder, "model")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    transformers.GenerationConfig(do_sample=False, eos_token_id=[tok.eos_token_id, eot],
                                  bos_token_id=tok.bos_token_id).save_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ref = {"transformers_version": transformers.__version__,
           "torch_version": torch.__version__, "cases": {}}
    cases = [("prompt_completion", prompt_completion)]
    if chat_template:
        cases += [("messages", conversations), ("messages_tools", tool_conversations)]
    for name, make in cases:
        lines, case = make_case(model, tok, make, 7, SEQ_LEN[name])
        case["seq_len"] = SEQ_LEN[name]
        with open(os.path.join(folder, name + ".jsonl"), "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        ref["cases"][name] = case
        print(f"sft {name}: {len(lines)} examples, {len(case['rows'])} rows, loss packed "
              f"{case['loss_packed']:.6f}, padded {case['loss_padded']:.6f}, "
              f"{case['targets']} targets")
    with open(os.path.join(folder, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=None, ensure_ascii=False)
        f.write("\n")
