// Fuzz target: a whole safetensors file (SafetensorsReader), written to a temporary file since the
// reader reads with pread. Anything malformed is a SafetensorsError; a file it accepts has every
// tensor inside the file, and every tensor's bytes can be read.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdp/checkpoint/safetensors.h"
#include "fuzz_target.h"

namespace {

// One file per process, rewritten for each input.
const std::string& scratch_path() {
  static const std::string path =
      (std::filesystem::temp_directory_path() /
       ("fsdp_fuzz_safetensors." + std::to_string(getpid()) + ".safetensors"))
          .string();
  return path;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  fsdp::fuzz::require(f != nullptr, "cannot create " + path);
  fsdp::fuzz::require(std::fwrite(data, 1, size, f) == size && std::fclose(f) == 0,
                      "cannot write " + path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  write_file(path, data, size);
  try {
    fsdp::SafetensorsReader reader(path);
    const auto file_bytes = static_cast<int64_t>(size);
    std::vector<char> buffer;
    for (const auto& t : reader.tensors()) {
      fsdp::fuzz::require(
          t.begin >= 0 && t.begin <= t.end && reader.data_offset() + t.end <= file_bytes,
          "tensor '" + t.name + "' accepted with offsets outside the file");
      buffer.resize(static_cast<size_t>(t.nbytes()));
      reader.read_bytes(t.name, 0, t.nbytes(), buffer.data());
    }
  } catch (const fsdp::SafetensorsError&) {
  }
  std::remove(path.c_str());
  return 0;
}
