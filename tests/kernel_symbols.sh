#!/usr/bin/env bash
# The per-ISA objects of the fused AdamW kernel (src/optim/kernels/) may define only their own
# namespaced functions. A weak function there (an inline function or template of a header, emitted
# out of line) would be compiled with AVX2 or AVX-512 instructions, and the linker keeps one copy
# of such a function for every caller: a CPU without them would then die on an illegal instruction
# far from this kernel. This lists any such function and fails. (Weak data, e.g. the
# DW.ref.__gxx_personality_v0 pointer a sanitized build adds, holds no instructions.)
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
done
((status == 0)) && echo "kernel symbols: $# object(s), none shared"
exit $status
