#!/usr/bin/env python3
"""Writes tests/data/chat/goldens.json: the chat templates of assets/chat_templates/templates.json
(scripts/fetch_assets.sh) rendered by transformers' own render_jinja_template (the function
tokenizer.apply_chat_template calls), which test_chat_template.cpp compares our engine with byte
for byte. The families fsdp.cpp trains (FAMILIES) are rendered on every conversation below, with
add_generation_prompt false and true; every other template of the package on two conversations,
as a wider check of the engine. A template that raises on a conversation records the error: the
message, when the template called raise_exception, must then be ours too.
Each case names its template by model and sha256, so that the test can tell a changed asset from
a wrong rendering. Run through scripts/chat_fixtures.sh (inside the sid chroot, transformers 5.x)."""
import datetime
import hashlib
import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ASSETS = os.path.join(ROOT, "assets", "chat_templates")
OUT = os.path.join(ROOT, "tests", "data", "chat", "goldens.json")

# The special tokens each family's tokenizer_config.json gives (transformers passes every named
# one that is set as a template variable).
LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
GEMMA = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
PHI3 = {"bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "unk_token": "<unk>"}
PHI4 = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|dummy_85|>"}
SMOL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>"}
GENERIC = {"bos_token": "<s>", "eos_token": "</s>"}
DATE = {"date_string": "26 Jul 2024"}

# family: (model in the package, special tokens, extra variables sets)
FAMILIES = {
    "llama3.1": ("library/llama3.1:8b", LLAMA3, [DATE]),
    "llama3.2": ("library/llama3.2:3b", LLAMA3, [DATE]),
    "llama3.1-nemotron": ("library/nemotron:70b", LLAMA3, [DATE]),
    "qwen2.5": ("library/qwen2.5:0.5b", QWEN, [{}]),
    "qwen3": ("library/qwen3:0.6b", QWEN, [{}, {"enable_thinking": False}]),
    "mistral-7b-instruct": ("library/mistral:7b-instruct-fp16", MISTRAL, [{}]),
    "mistral-small": ("library/mistral-small:24b", MISTRAL, [{}]),
    "gemma3": ("library/gemma3:1b", GEMMA, [{}]),
    "gemma3-270m": ("library/gemma3:270m", GEMMA, [{}]),
    "phi3.5-mini": ("library/phi3.5:3.8b", PHI3, [{}]),
    "phi4": ("library/phi4:14b", PHI4, [{}]),
    "phi4-mini": ("library/phi4-mini:3.8b", PHI3, [{}]),
    "smollm2": ("library/smollm2:135m", SMOL, [{}]),
}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "single_user": [msg("user", "Hello!")],
    "multi_turn": [msg("user", "What is 2+2?"), msg("assistant", "4."),
                   msg("user", "And 3+3?"), msg("assistant", "6.")],
    "system": [msg("system", "You are a terse assistant."), msg("user", "Name a colour."),
               msg("assistant", "Blue."), msg("user", "Another?")],
    "system_answered": [msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                        msg("user", "Bye"), msg("assistant", "Goodbye.")],
    "empty_content": [msg("user", ""), msg("assistant", "")],
    "unicode": [msg("user", "日本語で答えて 🙂 — café, ñ, e\u0301, Z\u0351\u0361a"),
                msg("assistant", "はい、わかりました。👍 Ω ≈ ∑")],
    "special_text": [msg("user", "ignore <|im_end|> and <end_of_turn> and <|eot_id|> and </s> [INST]"),
                     msg("assistant", "<|im_start|>assistant\nnot a real turn<|end|>")],
    "whitespace": [msg("system", "  padded system  \n"), msg("user", "\n\n  question with spaces   \n"),
                   msg("assistant", " answer\n\n"), msg("user", "\ttab\t")],
    "think": [msg("user", "Think first."),
              msg("assistant", "<think>\nLet me reason.\n</think>\n\nThe answer is 42."),
              msg("user", "Why?"), msg("assistant", "<think>\nBecause.\n</think>\n\nIt just is.")],
    "two_users": [msg("user", "one"), msg("user", "two")],
    "assistant_first": [msg("assistant", "I speak first."), msg("user", "ok")],
}


def text(*texts):
    """Content as a list of text parts, the form multimodal templates (Gemma 3's) take."""
    return [{"type": "text", "text": t} for t in texts]


# The same words as list-of-parts content: templates written for it render them, others print
# the list or drop it (what fsdp.cpp's data layer then refuses).
CONVERSATIONS.update({
    "parts": [msg("user", text("What is 2+2?")), msg("assistant", text("4.")),
              msg("user", text("And 3+3?")), msg("assistant", text("6."))],
    "parts_system": [msg("system", text("Be brief.")), msg("user", text(" Hi ", "there\n")),
                     msg("assistant", "Hello."), msg("user", text()),
                     msg("assistant", text("Goodbye", " now."))],
})

# A tool call and its answer, with the tools the conversation offers (transformers' `tools`, JSON
# schemas): each template writes them its own way (Llama 3.1's JSON in the user turn, Qwen's
# <tool_call> tags); an answer that only calls a tool has no content (None) in the first, and an
# empty string in the second.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city's name."},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
CALL = {"type": "function", "id": "call00001",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CONVERSATIONS.update({
    "tool_call": [msg("user", "Weather in Paris?"),
                  {"role": "assistant", "content": None, "tool_calls": [CALL]},
                  {"role": "tool", "name": "get_weather", "tool_call_id": "call00001",
                   "content": "{\"temperature\": 21}"},
                  msg("assistant", "21 degrees in Paris.")],
    "tool_call_text": [msg("system", "Use tools."), msg("user", "Weather in Paris?"),
                       {"role": "assistant", "content": "", "tool_calls": [CALL]},
                       {"role": "tool", "name": "get_weather", "tool_call_id": "call00001",
                        "content": "21"}],
})
TOOLS = {"tool_call": [WEATHER], "tool_call_text": [WEATHER]}
WIDE = ["system", "multi_turn", "tool_call"]  # for the rest of the package's templates


def render(template, messages, agp, tokens, extra):
    try:
        out, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                       add_generation_prompt=agp, **tokens, **extra)
        return {"expected": out[0]}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception's TemplateError carries the template's text; jinja2's own errors
        # (UndefinedError, TemplateSyntaxError) are subclasses with messages of their own.
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": str(e), "raised": raised}
    except Exception as e:  # a TypeError inside the template, say
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def main():
    entries = json.load(open(os.path.join(ASSETS, "templates.json"), encoding="utf-8"))
    source = open(os.path.join(ASSETS, "SOURCE"), encoding="utf-8").read().strip()
    by_model = {}
    for e in entries:
        by_model.setdefault(e["model"], e["chat_template"])  # the first of duplicates
    cases = []

    def add(family, model, tokens, extras, conversations):
        template = by_model[model]
        sha = hashlib.sha256(template.encode("utf-8")).hexdigest()
        for extra_set in extras:
            for name in conversations:
                # A conversation's tools go in as render_jinja_template's `tools`.
                extra = dict(extra_set, **({"tools": TOOLS[name]} if name in TOOLS else {}))
                for agp in (False, True):
                    case = {"family": family, "model": model, "sha256": sha, "tokens": tokens,
                            "extra": extra, "conversation": name, "add_generation_prompt": agp}
                    case.update(render(template, CONVERSATIONS[name], agp, tokens, extra))
                    cases.append(case)

    for family, (model, tokens, extras) in FAMILIES.items():
        add(family, model, tokens, extras, list(CONVERSATIONS))
    core = {m for m, _, _ in FAMILIES.values()}
    for model in sorted(by_model):
        if model not in core:
            add("package", model, GENERIC, [DATE], WIDE)
    out = {
        "generator": f"tests/data/chat/make_chat_fixtures.py: transformers {transformers.__version__}"
                     f" render_jinja_template, jinja2 {jinja2.__version__}",
        "templates": source,
        "families": {f: m for f, (m, _, _) in FAMILIES.items()},
        "tools": [WEATHER],
        "conversations": CONVERSATIONS,
        # The day strftime_now() rendered (templates such as Granite's and Devstral's print it):
        # the test renders as of noon UTC that day (SOURCE_DATE_EPOCH).
        "rendered_on": datetime.date.today().isoformat(),
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"make_chat_fixtures: {len(cases)} cases ({errors} errors) of {len(FAMILIES)} families"
          f" and {len(by_model) - len(core)} other templates in {OUT}")


if __name__ == "__main__":
    sys.exit(main())
