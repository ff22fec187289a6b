// fsdp-train: the trainer's command line. Parses the arguments (fsdp/config/config.h), joins the
// ranks the launcher started (or runs alone as one rank), and runs `train`, `sample` or `eval`.
//
//   fsdp-run --nproc-per-node 2 build/bin/fsdp-train --config configs/default.yaml
//   build/bin/fsdp-train sample --checkpoint build/checkpoints --prompt "My fellow citizens"
//   build/bin/fsdp-train eval --model.pretrained path/to/hf_folder
//
// Exit codes: 0 done, 1 a failure during the run, 2 a bad command line or config.
#include <malloc.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/comm.h"
#include "fsdp/config/config.h"
#include "fsdp/host_memory.h"
#include "fsdp/train/trainer.h"
#include "hf/folder.h"
#include "tools/tool_util.h"
#include "util/files.h"

namespace {

// After a failure every rank threw together (fsdp::CheckpointError::collective), each rank has
// reported it: wait, briefly, for the others to have done so too. Under mpirun the first rank to
// exit non-zero ends the job, and rank 0, whose report names the rank that failed, could be
// stopped before writing it.
void wait_for_peers_after(const std::exception& e, fsdp::Comm* world) {
  const auto* failure = dynamic_cast<const fsdp::CheckpointError*>(&e);
  if (!world || !failure || !failure->collective()) return;
  try {
    world->set_timeout(std::chrono::seconds(10));
    world->barrier();
  } catch (const std::exception&) {
    // A peer that is gone: nothing left to wait for.
  }
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::tools::write_whole_lines();
  fsdp::files::install_signal_cleanup();  // a stopped run leaves no export temporary behind
  fsdp::ParsedArgs args;
  try {
    args = fsdp::parse_train_args(argc, argv, {}, fsdp::hf::read_folder_settings);
  } catch (const fsdp::ConfigError& e) {
    std::cerr << "fsdp-train: " << e.what() << "\n(fsdp-train --help lists every option)\n";
    return 2;
  }
  if (args.help) {
    std::cout << fsdp::train_usage(args.command);
    return 0;
  }
  if (args.print_config) {
    std::cout << fsdp::to_yaml(args.config);
    return 0;
  }
  // Each step allocates the same large tensors (logits, activations, gathered units) and frees
  // them; every fresh page costs a fault (about 2 us per 4 KiB here). The host allocator keeps
  // large blocks for the next step without letting the heap fragment (fsdp/host_memory.h); the
  // small ones stay in malloc's heap instead of going back to the OS.
  fsdp::install_host_allocator();
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  int rank = -1;
  fsdp::CommPtr world;
  try {
    fsdp::CommOptions comm;
    comm.device = fsdp::to_string(args.config.train.device);
    comm.timeout =
        std::chrono::milliseconds(std::llround(args.config.train.process_group_timeout * 1000));
    world = fsdp::init_comm(comm);
    rank = world->rank();
    if (args.command == fsdp::TrainCommand::kSample) {
      fsdp::sample(args.config, args.sample, world, std::cout);
    } else if (args.command == fsdp::TrainCommand::kEval) {
      fsdp::evaluate_model(args.config, args.eval, world, std::cout);
    } else {
      const fsdp::TrainSummary s = fsdp::train(args.config, world, std::cout);
      if (rank == 0 && s.first_val_loss >= 0) {
        std::printf("done: step %lld, val loss %.4f -> %.4f%s%s", (long long)s.steps,
                    s.first_val_loss, s.last_val_loss,
                    s.last_checkpoint.empty() ? "" : ", checkpoint ", s.last_checkpoint.c_str());
        if (s.loss_scale >= 0) {
          std::printf(" (fp16: %lld steps skipped, loss scale %g)", (long long)s.skipped_steps,
                      static_cast<double>(s.loss_scale));
        }
        std::printf("\n");
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (rank >= 0) {
      std::cerr << "fsdp-train (rank " << rank << "): " << e.what() << "\n";
    } else {
      std::cerr << "fsdp-train: " << e.what() << "\n";
    }
    wait_for_peers_after(e, world.get());
    return 1;
  }
}
