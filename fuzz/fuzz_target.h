// What every fuzz target shares: the libFuzzer entry point's signature, and how a target states a
// property it found broken. A target accepts any input; the parser under test may refuse it only
// with the error type it documents (any other exception escapes and is reported as a crash), and
// input it accepts must satisfy the target's round-trip or bounds property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fsdp::fuzz {

// Aborts (a crash to libFuzzer and to the replay driver) with `what` on stderr.
[[noreturn]] inline void property_broken(const std::string& what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what.c_str());
  std::abort();
}

inline void require(bool ok, const std::string& what) {
  if (!ok) property_broken(what);
}

}  // namespace fsdp::fuzz
