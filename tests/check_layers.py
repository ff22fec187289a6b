#!/usr/bin/env python3
"""The map of docs/design.md against the tree: every folder under src/ is a room the map names,
and every #include "..." of a room's files (src/ROOM/ and its public headers include/fsdp/ROOM/)
reaches only itself, the rooms its row says it may use, and the shared files (compat.h, pch.h,
util/). Public headers at include/fsdp/ itself belong to the runtime's rooms (kTopLevel).
Usage: check_layers.py SOURCE_DIR; exit 1 listing each include the map does not allow, or each
folder it does not name; `--self-test` checks that a forbidden include is caught."""
import os
import re
import sys

# include/fsdp/X.h: the room whose API it is. fsdp.h, the umbrella users include, is the library.
kTopLevel = {"comm.h": "comm", "comm_stats.h": "comm", "optim.h": "optim",
             "grad_scaler.h": "optim", "fsdp.h": "umbrella"}
kShared = {"compat.h", "pch.h", "util"}
kUmbrella = {"comm", "core", "optim", "models"}


def room_of_include(path):
    parts = path.split("/")
    if parts[0] == "fsdp":
        return kTopLevel.get(parts[1], "core") if len(parts) == 2 else parts[1]
    return parts[0]


def read_map(design_md):
    """Rows of the table under '## The map' as {room: set of rooms it may use}."""
    text = open(design_md, encoding="utf-8").read()
    start = text.index("## The map")
    end = text.find("\n## ", start + 1)
    allowed = {}
    for line in text[start:end if end > 0 else None].splitlines():
        m = re.match(r"\|\s*`(\w+)/`\s*\|.*\|\s*([^|]*)\|\s*$", line)
        if m:
            uses = m.group(2).strip()
            allowed[m.group(1)] = (None if uses == "anything" else
                                   {u.strip(" `/") for u in uses.split(",") if u.strip(" -—")})
    return allowed


def files_by_room(root):
    for base, rooms_at in (("src", 1), (os.path.join("include", "fsdp"), 0)):
        top = os.path.join(root, base)
        for dirpath, _, names in os.walk(top):
            rel = os.path.relpath(dirpath, top).split(os.sep)
            for name in names:
                if not name.endswith((".h", ".cpp", ".inc")):
                    continue
                if rel == ["."]:
                    room = "shared" if base == "src" else room_of_include("fsdp/" + name)
                else:
                    room = rel[0]
                yield room, os.path.join(dirpath, name)


def check(root, allowed):
    problems = []
    for d in sorted(os.listdir(os.path.join(root, "src"))):
        if os.path.isdir(os.path.join(root, "src", d)) and d not in allowed and d not in kShared:
            problems.append(f"src/{d}/: a folder docs/design.md's map does not name")
    for room, path in files_by_room(root):
        if room in ("shared", "umbrella") or room in kShared:
            continue
        may = allowed.get(room, set())
        if may is None:
            continue
        may = may | {room} | kShared
        if "umbrella" in may:
            may |= kUmbrella
        text = open(path, encoding="utf-8", errors="replace").read()
        for m in re.finditer(r'^#include "([^"]+)"', text, re.M):
            target = room_of_include(m.group(1))
            ok = target in may or (target == "umbrella" and kUmbrella <= may)
            if not ok:
                problems.append(f"{os.path.relpath(path, root)}: includes {m.group(1)} "
                                f"({target}), which room {room} may not use")
    return problems


def main():
    if sys.argv[1:2] == ["--self-test"]:
        allowed = {"core": {"comm"}, "comm": set()}
        assert room_of_include("fsdp/checkpoint/checkpoint.h") == "checkpoint"
        assert room_of_include("core/unit.h") == "core"
        assert room_of_include("fsdp/comm.h") == "comm"
        import tempfile
        with tempfile.TemporaryDirectory() as root:
            for d in ("src/core", "src/comm", "include/fsdp"):
                os.makedirs(os.path.join(root, d))
            with open(os.path.join(root, "src/comm/a.cpp"), "w") as f:
                f.write('#include "core/unit.h"\n')
            with open(os.path.join(root, "src/core/b.cpp"), "w") as f:
                f.write('#include "fsdp/comm.h"\n')
            problems = check(root, allowed)
            assert len(problems) == 1 and "src/comm/a.cpp" in problems[0], problems
        print("check_layers: self-test passed")
        return 0
    root = sys.argv[1]
    allowed = read_map(os.path.join(root, "docs", "design.md"))
    if len(allowed) < 5:
        print(f"check_layers: docs/design.md's map has {len(allowed)} rooms; is its table there?")
        return 1
    problems = check(root, allowed)
    for p in problems:
        print("check_layers:", p)
    if not problems:
        print(f"check_layers: {len(allowed)} rooms, every include as the map allows")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
