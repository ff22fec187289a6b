#!/usr/bin/python3
"""An independent check of safetensors files, with nothing but Python's standard library.

It re-implements the format's rules from its specification (huggingface/safetensors: README and
tensor.rs) rather than sharing any code with src/checkpoint/safetensors.cpp, so a bug in our writer
cannot hide behind the same bug in our reader:

  - 8-byte little-endian header length N, at most 100 MB, 8 + N within the file;
  - N bytes of UTF-8 JSON: an object without repeated keys;
  - "__metadata__", an object of strings, with "format": "pt" (transformers requires it);
  - every other entry {"dtype": known, "shape": [non-negative ints], "data_offsets": [b, e]},
    with e - b equal to the shape's byte size;
  - sorted by offset, the tensors tile the byte buffer exactly: from 0, no overlap, no hole, to the
    end of the file.

With --hf-layout (the default) it also checks the layout Hugging Face's writer produces, which ours
copies: N a multiple of 8 with space padding, "__metadata__" first, tensors listed in offset order,
and offsets ordered by dtype alignment (descending) then name.

  safetensors_check.py [--require NAME]... [--forbid NAME]... [--no-hf-layout] FILE...
  safetensors_check.py --self-test     # the checker refuses a broken file for each rule

Exit status 0 when every file passes, 1 otherwise (one line per file says why).
"""

import argparse
import json
import os
import struct
import sys
import tempfile

# safetensors' Dtype enum, in its order (ascending alignment), with bits per element.
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
DTYPE_RANK = {name: rank for rank, name in enumerate(DTYPE_BITS)}
MAX_HEADER = 100_000_000
INT64_MAX = 2**63 - 1


class Invalid(Exception):
    pass


def unique_keys(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise Invalid(f"key {key!r} appears twice in an object of the header")
        seen.add(key)
    return dict(pairs)


def is_count(value):
    # bool is a subclass of int in Python; JSON true is not a count.
    return type(value) is int and 0 <= value <= INT64_MAX


def read_header(path):
    size = os.path.getsize(path)
    if size < 8:
        raise Invalid(f"{size} bytes: too short for the header length")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER:
            raise Invalid(f"header length {n} is over the 100 MB limit")
        if 8 + n > size:
            raise Invalid(f"header length {n} runs past the end of the {size}-byte file")
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid(f"header is not UTF-8: {e}")
    try:
        header = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        raise Invalid(f"header is not JSON: {e}")
    if not isinstance(header, dict):
        raise Invalid("header is not a JSON object")
    return size, n, text, header


def check_metadata(header):
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise Invalid('"__metadata__" is missing or not an object of strings')
    if meta.get("format") != "pt":
        raise Invalid(f'"__metadata__" has format {meta.get("format")!r}, not "pt"')


def check_entry(name, entry):
    """Returns (begin, end, name, dtype)."""
    if not isinstance(entry, dict):
        raise Invalid(f"tensor {name!r}: entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise Invalid(f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(is_count(d) for d in shape):
        raise Invalid(f"tensor {name!r}: shape {shape!r} is not a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(is_count(o) for o in offsets)
            or offsets[0] > offsets[1]):
        raise Invalid(f"tensor {name!r}: data_offsets {offsets!r} is not [begin <= end]")
    numel = 1
    for d in shape:
        numel *= d
    bits = numel * DTYPE_BITS[dtype]
    if numel > INT64_MAX or bits // 8 > INT64_MAX or bits % 8:
        raise Invalid(f"tensor {name!r}: {dtype} {shape} is not a valid byte size")
    if offsets[1] - offsets[0] != bits // 8:
        raise Invalid(f"tensor {name!r}: offsets {offsets} hold {offsets[1] - offsets[0]} bytes, "
                      f"{dtype} {shape} needs {bits // 8}")
    return offsets[0], offsets[1], name, dtype


def check_tiling(entries, buffer_bytes):
    position = 0
    for begin, end, name, _ in sorted(entries):
        if begin != position:
            kind = "overlaps the previous tensor" if begin < position else "leaves a hole"
            raise Invalid(f"tensor {name!r}: starts at {begin}, expected {position}: {kind}")
        position = end
    if position != buffer_bytes:
        raise Invalid(f"tensors cover {position} bytes of a {buffer_bytes}-byte buffer")


def check_hf_layout(n, text, header, entries):
    if n % 8:
        raise Invalid(f"header length {n} is not a multiple of 8")
    body = text.rstrip(" ")
    if not body.endswith("}"):
        raise Invalid("header padding is not spaces after the JSON object")
    keys = list(header)
    if keys[0] != "__metadata__":
        raise Invalid('"__metadata__" is not the first key')
    by_offset = [name for _, _, name, _ in sorted(entries)]
    if keys[1:] != by_offset:
        raise Invalid("tensors are not listed in offset order")
    hf_order = [e[2] for e in sorted(entries, key=lambda e: (-DTYPE_RANK[e[3]], e[2].encode()))]
    if by_offset != hf_order:
        raise Invalid("offsets are not ordered by dtype alignment (descending), then name")


def check_file(path, hf_layout=True, require=(), forbid=()):
    size, n, text, header = read_header(path)
    check_metadata(header)
    entries = [check_entry(k, v) for k, v in header.items() if k != "__metadata__"]
    check_tiling(entries, size - 8 - n)
    if hf_layout:
        check_hf_layout(n, text, header, entries)
    names = {e[2] for e in entries}
    for name in require:
        if name not in names:
            raise Invalid(f"required tensor {name!r} is absent")
    for name in forbid:
        if name in names:
            raise Invalid(f"tensor {name!r} must not be stored")
    return len(entries), size - 8 - n


# --- self-test: one broken file per rule, each of which must be refused ---------------------------

def craft(directory, index, header, data_bytes, length=None):
    path = os.path.join(directory, f"case{index}.safetensors")
    raw = header.encode("utf-8") if isinstance(header, str) else header
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length) + raw + bytes(data_bytes))
    return path


def entry(name, dtype, shape, offsets):
    return f'"{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offsets}}}'


def pad(header):
    return header + " " * (-len(header) % 8)


META = '"__metadata__":{"format":"pt"}'
W = entry("w", "F32", "[2]", "[0,8]")
BROKEN = [
    ("header length over 100 MB", "{}", 0, 100_000_001),
    ("header length past the end", "{}", 0, 64),
    ("not UTF-8", b'{"\xff":1}', 0, None),
    ("not JSON", '{"w":', 0, None),
    ("not an object", "[1]", 0, None),
    ("no format pt", pad("{" + W + "}"), 8, None),
    ("format not pt", pad('{"__metadata__":{"format":"np"},' + W + "}"), 8, None),
    ("repeated key", pad("{" + META + "," + W + "," + W + "}"), 8, None),
    ("unknown dtype", pad("{" + META + "," + entry("w", "F33", "[2]", "[0,8]") + "}"), 8, None),
    ("negative dimension", pad("{" + META + "," + entry("w", "F32", "[-2]", "[0,8]") + "}"), 8, None),
    ("bytes disagree", pad("{" + META + "," + entry("w", "F32", "[3]", "[0,8]") + "}"), 8, None),
    ("overlap", pad("{" + META + "," + W + "," + entry("v", "F32", "[2]", "[4,12]") + "}"), 12, None),
    ("hole", pad("{" + META + "," + W + "," + entry("v", "F32", "[2]", "[12,20]") + "}"), 20, None),
    ("unindexed tail", pad("{" + META + "," + W + "}"), 12, None),
    ("past the end", pad("{" + META + "," + W + "}"), 4, None),
    ("unpadded header", "{" + META + "," + W + "} ", 8, None),
    ("not in HF order", pad("{" + META + "," + entry("b", "F32", "[1]", "[0,4]") + ","
                            + entry("a", "F32", "[1]", "[4,8]") + "}"), 8, None),
]
GOOD = pad("{" + META + "," + entry("a", "F32", "[1]", "[0,4]") + ","
           + entry("b", "F32", "[0]", "[4,4]") + "," + entry("c", "BF16", "[2]", "[4,8]") + "}")


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as directory:
        try:
            check_file(craft(directory, "good", GOOD, 8))
        except Invalid as e:
            print(f"FAIL: a well-formed file was refused: {e}")
            failures += 1
        for index, (rule, header, data_bytes, length) in enumerate(BROKEN):
            try:
                check_file(craft(directory, index, header, data_bytes, length))
                print(f"FAIL: accepted a file breaking '{rule}'")
                failures += 1
            except Invalid as e:
                print(f"ok: refused '{rule}': {e}")
    print(f"{len(BROKEN) + 1 - failures} of {len(BROKEN) + 1} self-test cases behave")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--require", action="append", default=[], help="a tensor that must exist")
    parser.add_argument("--forbid", action="append", default=[], help="a tensor that must not")
    parser.add_argument("--no-hf-layout", action="store_true", help="skip the layout checks")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.files:
        parser.error("no file to check")
    status = 0
    for path in args.files:
        try:
            count, data = check_file(path, not args.no_hf_layout, args.require, args.forbid)
            print(f"ok: {path}: {count} tensors, {data} data bytes")
        except (Invalid, OSError) as e:
            print(f"invalid: {path}: {e}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
