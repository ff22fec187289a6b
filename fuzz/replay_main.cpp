// The fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput once on every file named on the
// command line or found (recursively) in a folder named there. CTest uses it to replay the seed
// corpus and every crash a fuzzer ever found (fuzz/regressions/) in each ordinary and sanitized
// build, so a fixed parser bug stays fixed without clang.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace fs = std::filesystem;

namespace {

void replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    std::exit(2);
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay %s (%zu bytes)\n", file.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path arg(argv[i]);
    if (!fs::exists(arg)) {
      std::fprintf(stderr, "no such file or folder: %s\n", argv[i]);
      return 2;
    }
    if (!fs::is_directory(arg)) {
      replay(arg), ++count;
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(arg))
      if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
        files.push_back(entry.path());
    std::sort(files.begin(), files.end());  // a stable order, so a failure reproduces
    for (const auto& f : files) replay(f), ++count;
  }
  if (count == 0) {  // an empty corpus is a mistake, not a pass
    std::fprintf(stderr, "no inputs to replay\n");
    return 2;
  }
  std::printf("replayed %zu inputs, all passed\n", count);
  return 0;
}
