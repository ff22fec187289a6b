// fsdp.cpp: fully sharded data parallel training for LibTorch. The one header users include.
#pragma once

#include "fsdp/comm.h"
#include "fsdp/comm_stats.h"
#include "fsdp/fully_shard.h"
#include "fsdp/grad_scaler.h"
#include "fsdp/hooks.h"
#include "fsdp/host_memory.h"
#include "fsdp/init.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/models/llama.h"
#include "fsdp/optim.h"
#include "fsdp/options.h"
#include "fsdp/units.h"
