// fsdp-run: the torchrun-compatible launcher. Starts a program once per rank with the variables
// fsdp.cpp (and PyTorch) read to join a group, relays and logs their output, stops every rank
// when one fails, and restarts the group if asked. The logic lives in src/launch/, which needs
// neither LibTorch nor the fsdp library; see docs/launch.md.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "launch/options.h"
#include "launch/supervisor.h"

int main(int argc, char** argv) {
  using namespace fsdp::launch;
  Options options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "fsdp-run: %s\n(fsdp-run --help lists the flags)\n", e.what());
    return 2;
  }
  if (options.help) {
    std::fputs(usage_text().c_str(), stdout);
    return 0;
  }
  try {
    return supervise(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-run: %s\n", e.what());
    return 1;
  }
}
