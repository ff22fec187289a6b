#!/usr/bin/env bash
# The per-ISA objects of the fused AdamW kernel (src/optim/kernels/) may define only their own
# namespaced functions. A weak function there (an inline function or template of a header, emitted
# out of line) would be compiled with AVX2 or AVX-512 instructions, and the linker keeps one copy
# of such a function for every caller: a CPU without them would then die on an illegal instruction
# far from this kernel. This lists any such function and fails. (Weak data, e.g. the
# DW.ref.__gxx_personality_v0 pointer a sanitized build adds, holds no instructions.) Static
# initialisers run at load on every CPU, whatever variant is chosen: the one the headers bring
# (<iostream>'s std::ios_base::Init) is plain code, and one with AVX instructions (VEX- or
# EVEX-encoded, ymm/zmm/mask registers) fails.
# Usage: kernel_symbols.sh OBJECT...
set -uo pipefail
status=0
for obj in "$@"; do
  found=$(nm --defined-only "$obj" | awk '$2 == "W" || $2 == "i"' | c++filt)
  if [[ -n "$found" ]]; then
    echo "FAIL: $obj defines symbols the linker may share with baseline code:"
    echo "$found"
    status=1
  fi
  wide=$(objdump -d --no-show-raw-insn "$obj" | awk '/^[0-9a-f]+ <_GLOBAL__sub_I/ { on = 1; next }
    /^[0-9a-f]+ </ { on = 0 } on' | grep -E '%[yz]mm|%k[0-7]|:[[:space:]]+v[a-z]' || true)
  if [[ -n "$wide" ]]; then
    echo "FAIL: $obj has a static initialiser with AVX instructions, run at load on every CPU:"
    echo "$wide"
    status=1
  fi
done
((status == 0)) && echo "kernel symbols: $# object(s), none shared"
exit $status
