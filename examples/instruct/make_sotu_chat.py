"""Makes sotu_chat.jsonl, the bundled instruction fine-tuning example: one conversation per State
of the Union address in assets/sotu (scripts/fetch_assets.sh), asking what the president told
Congress that year and answering with the address's opening sentences; every fourth with a system
prompt, every third with a follow-up turn answered by the next sentences. Deterministic; run from
the repository's root: python3 examples/instruct/make_sotu_chat.py"""
import glob
import json
import os
import re

SYSTEM = "You are a historian of American presidents. Answer in their own words."


def sentences(text):
    text = re.sub(r"\s+", " ", text).strip()
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if s.strip()]


def answer(parts, start, words=45):
    out, n = [], 0
    for s in parts[start:]:
        out.append(s)
        n += len(s.split())
        if n >= words:
            break
    return " ".join(out), start + len(out)


def main():
    files = sorted(glob.glob("assets/sotu/*.txt"))
    assert files, "assets/sotu is empty: run scripts/fetch_assets.sh"
    with open("examples/instruct/sotu_chat.jsonl", "w", encoding="utf-8") as out:
        for i, path in enumerate(files):
            year, *name, _party = os.path.basename(path)[:-4].split("_")
            president = " ".join(w.capitalize() for w in name)
            with open(path, encoding="utf-8") as f:
                parts = sentences(f.read())
            first, nxt = answer(parts, 0)
            messages = [{"role": "system", "content": SYSTEM}] if i % 4 == 0 else []
            messages += [
                {"role": "user", "content": f"How did President {president} open the {year} "
                                            "State of the Union address?"},
                {"role": "assistant", "content": first}]
            if i % 3 == 0 and nxt < len(parts):
                second, _ = answer(parts, nxt, 30)
                messages += [{"role": "user", "content": "And what did he say next?"},
                             {"role": "assistant", "content": second}]
            out.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
    print(f"examples/instruct/sotu_chat.jsonl: {len(files)} conversations")


if __name__ == "__main__":
    main()
