// What a run checks before it builds anything, and how it names an allocation that fails anyway.
// Train, eval and sample each call preflight() first: a model folder's weights against its
// config.json (hf/folder.h), then the job against this host's memory (fsdp/plan/fits.h), so that
// a config that cannot be built is refused in seconds, naming the field or the plan's figure,
// instead of running out of memory minutes later. building() wraps what allocates the model.
#pragma once

#include <functional>
#include <string>

#include "fsdp/comm.h"
#include "fsdp/config/config.h"

namespace fsdp {

// `training` false: eval and sample (no gradients or optimizer state). `from_folder`: the weights
// come from config.model.pretrained now (not from a checkpoint, which may have outlived the
// folder). Throws ConfigError or std::invalid_argument naming what does not fit; every rank reaches
// the same verdict.
void preflight(const TrainConfig& config, const Comm& world, bool training, bool from_folder);

// Runs `build`; an allocation that fails inside it (std::bad_alloc, or LibTorch's allocator error)
// is rethrown as std::runtime_error saying what was being built, with the allocator's first line.
void building(const std::string& what, const std::function<void()>& build);

}  // namespace fsdp
