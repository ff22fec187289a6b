// Precompiled for every translation unit of the library, tools and tests: <torch/torch.h> alone
// costs about 20 s per file on this machine.
#pragma once
#include <torch/torch.h>
