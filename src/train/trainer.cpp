// The training run, as a story: train() calls one function per step of it, in order. The pieces
// (data, model, sharding, optimizer, checkpoints) come from the layers below; this file only
// decides how they are put together, and what a checkpoint's train state holds.
#include "fsdp/train/trainer.h"

#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "checkpoint/errors.h"
#include "config/saved.h"
#include "core/collectives.h"
#include "core/device_memory.h"
#include "factory/model_factory.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/ownership.h"
#include "fsdp/data/corpus.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/fully_shard.h"
#include "fsdp/grad_scaler.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/optim.h"
#include "hf/export.h"
#include "hf/folder.h"
#include "hf/peft.h"
#include "train/preflight.h"
#include "train/run_data.h"
#include "train/run_log.h"

namespace fsdp {

namespace {

using Clock = std::chrono::steady_clock;

// --- the world and the data ---------------------------------------------------------------------

void check_world(const TrainConfig& c, const Comm& world) {
  if (c.num_processes > 0 && c.num_processes != world.size()) {
    throw std::invalid_argument(
        "num_processes: the config expects " + std::to_string(c.num_processes) + " processes but " +
        std::to_string(world.size()) +
        " were started (start it with fsdp-run --nproc-per-node N, or set num_processes: 0)");
  }
  // The launcher tells the ranks per node; a lone process or a split group does not (0).
  const int local = world.local_size();
  if (local > 0 && c.num_machines * local != world.size()) {
    throw std::invalid_argument(
        "num_machines: the config expects " + std::to_string(c.num_machines) +
        " machines but the launcher "
        "started " +
        std::to_string(world.size()) + " ranks, " + std::to_string(local) + " per node");
  }
}

int64_t max_over_ranks(Comm& world, int64_t mine) {
  std::vector<int64_t> all(static_cast<size_t>(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::kInt64);
  return *std::max_element(all.begin(), all.end());
}

int64_t peak_rss_over_ranks(Comm& world) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return max_over_ranks(world, static_cast<int64_t>(usage.ru_maxrss) * 1024);
}

// -1 where the allocator cannot say (CPU training), the same on every rank.
int64_t peak_gpu_over_ranks(Comm& world, c10::Device device) {
  const DeviceMemory m = device_memory(device);
  return m.known ? max_over_ranks(world, m.peak_allocated_bytes) : -1;
}

// --- the model ----------------------------------------------------------------------------------

// fsdp_sync_module_states: every shard takes the values replica 0 holds (rank 0's, for the
// parameters rank 0 holds), over the group of ranks that hold the same shard.
void broadcast_shards(FullyShardedModel& model) {
  Comm& replicas = model.replicate_group();
  if (replicas.size() == 1) return;
  replicas.set_context("fsdp_sync_module_states broadcast");
  for (const auto& shards : {model.shards(), model.frozen_shards()}) {
    for (const UnitShard& s : shards) broadcast(replicas, s.param, 0)->wait();
  }
}

AdamWOptions adamw_options(const OptimConfig& o) {
  AdamWOptions a;
  a.lr = o.lr;
  a.beta1 = o.beta1;
  a.beta2 = o.beta2;
  a.eps = o.eps;
  a.weight_decay = o.weight_decay;
  a.impl = o.fused == FusedOptimizer::kOn    ? AdamWImpl::kFused
           : o.fused == FusedOptimizer::kOff ? AdamWImpl::kReference
                                             : AdamWImpl::kAuto;
  return a;
}

// "fused", "op by op" or "fused on K of N shards" (optim.fused).
std::string adamw_kernels(const AdamW& opt) {
  const size_t n = opt.params().size();
  size_t fused = 0;
  for (size_t i = 0; i < n; ++i) fused += opt.fused(i) ? 1 : 0;
  if (fused == n) return "fused";
  if (fused == 0) return "op by op";
  return "fused on " + std::to_string(fused) + " of " + std::to_string(n) + " shards";
}

// The optimizer over the model's shards; a shard the fused kernel asked for cannot take is the
// config's error, named by its key.
AdamW make_adamw(const FullyShardedModel& model, const OptimConfig& o) {
  try {
    return AdamW(sharded_params(model), adamw_options(o));
  } catch (const std::invalid_argument& e) {
    if (o.fused != FusedOptimizer::kOn) throw;
    throw ConfigError("", 0, "optim.fused", std::string("true, but ") + e.what());
  }
}

// --- checkpoints and their train state ----------------------------------------------------------

// The fingerprint of the weights a run with frozen parameters reads them from (its model.init_from,
// else model.pretrained: hf::weights_fingerprint); empty for a run that freezes nothing.
std::string frozen_base_fingerprint(const TrainConfig& c) {
  const std::string& weights = c.model.start_weights();
  return c.freezes_parameters() && !weights.empty() ? hf::weights_fingerprint(weights) : "";
}

// `scaler`: the fp16 loss scaler, or null. Its scale is an fp32 value, which a JSON number holds
// exactly, so a resumed run scales as the uninterrupted one. `base`: frozen_base_fingerprint.
std::string train_state_json(const TrainConfig& c, const data::LoaderState& loader,
                             const ShardedGradScaler* scaler, const std::string& base) {
  nlohmann::json j;
  j["loader"] = {{"epoch", loader.epoch}, {"position", loader.position}};
  config::put_saved_config(c, j);
  if (!base.empty()) j["frozen_base"] = base;
  if (scaler) {
    const GradScalerState g = scaler->state();
    j["grad_scaler"] = {{"scale", g.scale}, {"growth_tracker", g.growth_tracker}};
  }
  return j.dump();
}

data::LoaderState saved_loader_state(const std::string& train_state, const std::string& where) {
  const auto j = nlohmann::json::parse(train_state, nullptr, false);
  const auto* l = j.is_object() && j.contains("loader") ? &j["loader"] : nullptr;
  if (!l || !l->is_object() || !l->contains("epoch") || !l->contains("position")) {
    throw CheckpointError(where + ": the train state has no data loader position");
  }
  return {(*l)["epoch"].get<int64_t>(), (*l)["position"].get<int64_t>()};
}

// Where a run resumes from, and what the log says about how it was found (or not).
struct ResumePlan {
  std::optional<std::string> path;
  std::string note;  // "" when there is nothing to add to "resumed from PATH at step N"
};

bool is_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

// Names of step folders under root that hold no COMMITTED marker (saves that did not finish).
std::vector<std::string> unfinished_steps(const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && !std::filesystem::exists(e.path() / "COMMITTED")) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string name_of(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

bool holds_only_its_lock(const std::string& root) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (e.path().filename() != kCheckpointLockFile) return false;
  }
  return !ec;
}

// A root without `latest` (copied without it, say): its newest committed step folder, PyTorch
// users' expectation, with a note saying which and why; or none, with a note saying why.
ResumePlan without_latest(const std::string& key, const std::string& root) {
  const std::vector<std::string> committed = committed_checkpoints(root);
  if (!committed.empty()) {
    return {committed.back(), key + ": '" + root + "' has no `latest` pointer; using its newest " +
                                  "committed step folder, " + name_of(committed.back()) + " (of " +
                                  std::to_string(committed.size()) + " committed)"};
  }
  std::string why = "no such folder";
  if (holds_only_its_lock(root)) {
    why = "it was empty or did not exist";  // the run made it, and took its lock
  } else if (is_dir(root)) {
    const std::vector<std::string> unfinished = unfinished_steps(root);
    why = unfinished.empty() ? "no `latest`, no committed step folder"
                             : "its step folders have no COMMITTED marker, saves that did not "
                               "finish: " +
                                   joined(unfinished);
  }
  return {std::nullopt,
          key + ": no checkpoint under '" + root + "' (" + why + "); starting a fresh run"};
}

// train.resume: "" none, "auto" the newest under checkpoint_dir if any, else a path. A fresh run
// never writes over another run's checkpoints.
ResumePlan resume_plan(const TrainLoopConfig& t) {
  if (t.resume.empty()) {
    if (t.checkpoint_every > 0) {
      std::optional<std::string> existing = latest_checkpoint(t.checkpoint_dir);
      if (!existing) existing = without_latest("", t.checkpoint_dir).path;
      if (existing) {
        throw std::invalid_argument(
            "train.checkpoint_dir: '" + t.checkpoint_dir + "' already holds a run (newest " +
            *existing + "); continue it with --resume, or choose another train.checkpoint_dir");
      }
    }
    return {};
  }
  const bool automatic = t.resume == "auto";
  const std::string root = automatic ? t.checkpoint_dir : t.resume;
  if (auto latest = latest_checkpoint(root)) return {*latest, ""};
  const bool step_folder = std::filesystem::exists(std::filesystem::path(root) / "metadata.json");
  if (!automatic && step_folder) return {root, ""};
  ResumePlan plan = without_latest("train.resume", root);
  // A path the user named must hold a checkpoint: loading it says why it does not.
  if (!plan.path && !automatic) return {root, ""};
  return plan;
}

// Loads the checkpoint into model and optimizer, checks it holds the same model, and moves the
// loader to where the saved run was. Returns the step to continue from.
// The fp16 scaler's state from a train state; a checkpoint of a run without one (fp32, bf16)
// leaves the scaler at its initial scale, and the log says so.
void restore_scaler(const std::string& train_state, const std::string& where,
                    ShardedGradScaler& scaler, RunLog& log) {
  const auto j = nlohmann::json::parse(train_state, nullptr, false);
  const auto* g = j.is_object() && j.contains("grad_scaler") ? &j["grad_scaler"] : nullptr;
  if (!g) {
    log.info("resume: " + where +
             " holds no loss-scaler state (trained without fp16); the loss "
             "scale starts at grad_scaler.init_scale");
    return;
  }
  try {
    scaler.load_state({(*g).at("scale").get<float>(), (*g).at("growth_tracker").get<int64_t>()});
  } catch (const std::exception& e) {
    throw CheckpointError(where + ": the train state's grad_scaler is damaged: " + e.what());
  }
}

// A checkpoint of a run with frozen parameters holds what trained; resumed onto other weights its
// trained parameters would meet another frozen base: refused, naming both fingerprints.
void check_frozen_base(const LoadedCheckpoint& loaded, const TrainConfig& c) {
  const auto j = nlohmann::json::parse(loaded.train_state, nullptr, false);
  if (!j.is_object() || !j.contains("frozen_base") || !j["frozen_base"].is_string()) return;
  const std::string saved = j["frozen_base"].get<std::string>(), now = frozen_base_fingerprint(c);
  if (now.empty() || now == saved) return;
  const std::string& weights = c.model.start_weights();
  throw CheckpointError("train.resume: checkpoint '" + loaded.path +
                        "' trained on frozen weights of another fingerprint (" + saved + ") than " +
                        weights + " has now (" + now +
                        "): resume onto the weights the run started from");
}

int64_t resume(const std::string& path, const TrainConfig& c, FullyShardedModel& model, AdamW& opt,
               data::BatchSource& loader, ShardedGradScaler* scaler, RunLog& log) {
  LoadedCheckpoint loaded = load_checkpoint(path, model, &opt);
  const TrainConfig saved = config::saved_config(loaded.train_state, loaded.path);
  const std::vector<std::string> differences = architecture_differences(saved, c);
  if (!differences.empty()) {
    std::string list;
    for (const auto& d : differences) list += "\n  " + d;
    throw CheckpointError("train.resume: checkpoint '" + loaded.path +
                          "' holds another model; what differs (the checkpoint's value, then this "
                          "run's):" +
                          list);
  }
  check_frozen_base(loaded, c);
  loader.set_state(saved_loader_state(loaded.train_state, loaded.path));
  if (scaler) restore_scaler(loaded.train_state, loaded.path, *scaler, log);
  log.info("resumed from " + loaded.path + " at step " + std::to_string(loaded.step));
  return loaded.step;
}

// resume() from the planned step, or, when that step folder is gone by the time it is read (a run
// beside this one, saving with train.keep_last, removed it: the plan was made before the data
// and the model), once more from the newest step rank 0 finds then. A step that is gone again is
// named as removed, never as "not a checkpoint folder".
int64_t resume_beside_owner(const std::string& path, const TrainConfig& c, FullyShardedModel& model,
                            AdamW& opt, data::BatchSource& loader, ShardedGradScaler* scaler,
                            RunLog& log, Comm& world) {
  const auto gone = [](const std::string& dir) {
    std::error_code ec;
    return !std::filesystem::exists(dir, ec);
  };
  try {
    return resume(path, c, model, opt, loader, scaler, log);
  } catch (const CheckpointError&) {
    // Every rank failed (the load agrees on failure); rank 0's view decides for all of them.
    const std::string gone_here = world.rank() == 0 && gone(path) ? "gone" : "";
    if (ckpt::gather_errors(world, gone_here)[0].empty()) throw;
    std::string next;
    if (world.rank() == 0) next = resume_plan(c.train).path.value_or("");
    next = ckpt::gather_errors(world, next)[0];
    if (next.empty() || next == path) {
      throw CheckpointError("train.resume: checkpoint '" + path +
                            "' was removed before it could be read (the run saving into its folder "
                            "keeps only its newest steps), and no newer one is there");
    }
    log.info("train.resume: '" + path + "' was removed before it could be read (the run saving " +
             "into its folder keeps only its newest steps); resuming from '" + next + "'");
    try {
      return resume(next, c, model, opt, loader, scaler, log);
    } catch (const CheckpointError&) {
      if (!gone(next)) throw;
      throw CheckpointError("train.resume: checkpoints '" + path + "' and then '" + next +
                            "' were removed before they could be read (the run saving into their "
                            "folder keeps only its newest steps; resume from a copy, or while it "
                            "does not save)");
    }
  }
}

// A folder the checkpoints cannot be written to fails the run now, not at the first save; one that
// another run holds fails it too. `owner` then holds the folder for the rest of the run.
void own_checkpoint_folder(const std::string& root, Comm& world,
                           std::optional<CheckpointRootLock>& owner) {
  try {
    check_checkpoint_root_writable(root, world);
    owner.emplace(root, world);
  } catch (const CheckpointError& e) {
    throw CheckpointError(
        std::string("train.checkpoint_dir: ") + e.what() + " (checked before the first step)",
        e.collective());
  }
}

std::string save(const TrainConfig& c, int64_t step, FullyShardedModel& model, const AdamW& opt,
                 const data::BatchSource& loader, const ShardedGradScaler* scaler, RunLog& log) {
  CheckpointOptions options;
  options.keep_last = c.train.checkpoint_keep_last;
  const auto t0 = Clock::now();
  const std::string dir = save_checkpoint(
      c.train.checkpoint_dir, step, model, &opt,
      train_state_json(c, loader.state(), scaler, frozen_base_fingerprint(c)), options);
  if (c.fsdp.state_dict_type == StateDictType::kFullStateDict) {
    save_full_safetensors(model, dir + "/model.safetensors");
  }
  std::ostringstream took;
  took.precision(3);
  took << std::chrono::duration<double>(Clock::now() - t0).count();
  log.info("checkpoint " + dir + " (" + took.str() + " s)");
  return dir;
}

// train.export_dir is written after the last step: refuse one export would refuse then, or one
// inside the checkpoints, before the first.
void check_export_folder(const TrainConfig& c) {
  if (c.train.export_dir.empty()) return;
  try {
    check_checkpoint_output(c.train.export_dir, c.train.checkpoint_dir,
                            "train.checkpoint_dir, which the run owns", OutputKind::kNewFolder);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string("train.export_dir: ") + e.what() +
                                " (checked before the first step)");
  }
}

// Rank 0 writes the folder; every rank learns whether it did, and all throw together if not.
void export_folder(const std::string& checkpoint, const std::string& dir, Comm& world,
                   RunLog& log) {
  std::string error;
  if (world.rank() == 0) {
    try {
      hf::export_model_folder(checkpoint, dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  int64_t failed = error.empty() ? 0 : 1;
  // The others wait for rank 0's export, which can take longer than a collective's timeout: a
  // large model is read and written whole.
  const std::chrono::milliseconds timeout = world.timeout();
  world.set_timeout(std::max(timeout, std::chrono::milliseconds(std::chrono::hours(6))));
  world.broadcast(&failed, 1, DType::kInt64, 0);
  world.set_timeout(timeout);
  if (failed) {
    throw std::runtime_error(
        "train.export_dir: " +
        (error.empty() ? "rank 0 failed to export; its error says why" : error));
  }
  log.info("exported " + checkpoint + " as a Hugging Face model folder: " + dir);
}

// --- the loop -----------------------------------------------------------------------------------

// What one step's forward and backward left for the optimizer.
struct StepGradients {
  // This rank's loss: the mean over its micro-batches, or with masked data the sum over its
  // targets (divided by `targets` once every rank's sum is in).
  double local_loss = 0;
  bool masked = false;
  int64_t targets = 0;  // masked data: the step's targets on every rank together
  // The global gradient norm before clipping; NaN when the fp16 scaler found an inf or NaN on
  // some rank (the scaler remembers that, and skips the step).
  double norm = 0;
};

// [Note: the loss of masked data] With instruction data the micro-batches and ranks of a step
// hold different numbers of targets. Each target weighs the same, as in one process over the whole
// global batch (transformers' num_items_in_batch, counted across gradient accumulation and, with
// average_tokens_across_devices, across ranks): a micro-batch's loss is its sum over its targets
// divided by the step's count on every rank, times the world size because the gradient reduction
// averages over ranks. Counting needs the step's batches first, and one all-reduce.
int64_t step_targets(const std::vector<data::Batch>& batches, Comm& world) {
  int64_t n = 0;
  for (const data::Batch& b : batches) n += b.targets.ne(-100).sum().item<int64_t>();
  world.all_reduce(&n, 1, DType::kInt64, ReduceOp::kSum);
  return n;
}

// One step's gradients: accumulate gradient_accumulation_steps micro-batches (reduced only on the
// last), then clip. With the fp16 scaler the loss is scaled before backward and the gradients
// unscaled before clipping, PyTorch's order; a step whose gradients are not finite is not clipped.
StepGradients train_step(const TrainConfig& c, const CausalLM& lm, FullyShardedModel& model,
                         AdamW& opt, data::BatchSource& loader, ShardedGradScaler* scaler,
                         Comm& world) {
  const int64_t accum = c.train.gradient_accumulation_steps;
  opt.zero_grad();
  StepGradients r;
  std::vector<data::Batch> batches;
  for (int64_t micro = 0; micro < accum; ++micro) batches.push_back(loader.next_batch());
  r.masked = batches.front().masked;
  if (r.masked) r.targets = step_targets(batches, world);
  // Without targets on any rank the step's gradients are zero (the sums are): 1 avoids 0 / 0.
  const double weight = r.masked ? static_cast<double>(world.size()) /
                                       static_cast<double>(std::max<int64_t>(1, r.targets))
                                 : 1.0 / static_cast<double>(accum);
  // On a GPU nothing in the loop waits for the device (the batch goes through pinned memory, the
  // losses are read after it): micro-batch k+1 is queued while k computes.
  const c10::Device device = model.device();
  std::vector<at::Tensor> losses;
  for (int64_t micro = 0; micro < accum; ++micro) {
    model.set_requires_gradient_sync(micro + 1 == accum);
    const data::Batch& b = batches[static_cast<size_t>(micro)];
    at::Tensor loss = batch_loss(lm, b, device, /*mean=*/!r.masked, c.train.fused_loss,
                                 /*non_blocking=*/true);
    at::Tensor share = loss * weight;
    (scaler ? scaler->scale(share) : share).backward();
    losses.push_back(loss.detach());
  }
  const at::Tensor host = at::stack(losses).to(at::kCPU, at::kDouble);
  for (int64_t micro = 0; micro < accum; ++micro) {
    r.local_loss += host[micro].item<double>() / (r.masked ? 1.0 : static_cast<double>(accum));
  }
  if (scaler && scaler->unscale(opt, world)) {
    r.norm = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  const double max_norm =
      c.optim.grad_clip > 0 ? c.optim.grad_clip : std::numeric_limits<double>::infinity();
  r.norm = clip_grad_norm(opt.params(), max_norm, model.shard_group());
  return r;
}

// The step's loss as one process over the global batch would report it.
double step_loss(const StepGradients& g, Comm& world) {
  if (!g.masked) return average_over_ranks(g.local_loss, world);
  float sum = static_cast<float>(g.local_loss);
  world.all_reduce(&sum, 1, DType::kFloat32, ReduceOp::kSum);
  return g.targets > 0 ? sum / static_cast<double>(g.targets) : 0.0;
}

// The optimizer's update: with the fp16 scaler, skipped on every rank when the gradients were not
// finite, and the scale backed off or grown (LossScaleUnderflow when it falls below its floor);
// without it a non-finite norm ends the run.
void apply_step(int64_t step, const StepGradients& g, AdamW& opt, ShardedGradScaler* scaler,
                Comm& world, StepMetrics& m) {
  if (scaler) {
    m.loss_scale = scaler->get_scale();
    m.skipped = !scaler->step(opt, world);
    try {
      scaler->update();
    } catch (const LossScaleUnderflow& e) {
      throw LossScaleUnderflow("step " + std::to_string(step + 1) + ": " + e.what());
    }
    return;
  }
  if (!std::isfinite(g.norm)) {
    throw std::runtime_error("step " + std::to_string(step + 1) + ": the gradient norm is " +
                             std::to_string(g.norm) + "; training diverged (lower optim.lr?)");
  }
  opt.step();
}

}  // namespace

TrainSummary train(const TrainConfig& c, CommPtr world, std::ostream& out,
                   const StepCallback& after_step) {
  // 1. The world, threads, output, and where to resume from (checked before any work is done).
  check_world(c, *world);
  // A run that saves owns its checkpoint folder until it ends: a second run into the folder, with
  // or without --resume, is refused before it reads what the first is writing.
  std::optional<CheckpointRootLock> owner;
  if (c.train.checkpoint_every > 0) own_checkpoint_folder(c.train.checkpoint_dir, *world, owner);
  const ResumePlan plan = resume_plan(c.train);
  const std::optional<std::string> resume_from = plan.path;
  check_export_folder(c);
  if (c.train.num_threads > 0) at::set_num_threads(c.train.num_threads);
  const bool rank0 = world->rank() == 0;
  // A progress bar only when rank 0 writes straight to a terminal: mpirun gives its ranks a
  // pseudo-terminal even when its own output goes to a file or a pipe, so not under MPI.
  const bool tty = &out == &std::cout && isatty(STDOUT_FILENO) && world->backend() != "mpi";
  RunLog log(out, rank0, tty, c.train.metrics_file, c.optim.max_steps);
  if (!plan.note.empty()) log.info(plan.note);

  // 2. Data: the corpus is tokenized once (cached), then each rank reads its windows.
  RunData d = prepare_data(c, log);
  const std::unique_ptr<data::BatchSource> loader = train_source(c, d, *world, log);
  std::unique_ptr<data::EvalSource> eval_loader;
  if (c.train.eval_every > 0) eval_loader = eval_source(c, d, *world);

  // 3. The model, deferred: shapes only, no rank ever holds all of its values. First what can be
  // known without building it: a folder's weights against its config.json, the job against this
  // host's memory.
  preflight(c, *world, /*training=*/true, !c.model.pretrained.empty() && !resume_from);
  CausalLM lm;
  building("the model", [&] { lm = build_model(c); });
  const int64_t n_params = count_parameters(*lm.module);

  // 4. Shard it: each rank materialises its own shard, every value drawn from (seed, parameter
  // name) as one process would. Then the optimizer, over this rank's shards only.
  // Values a checkpoint or init_from overwrites at once need not be drawn: zeros stand in. A
  // checkpoint holds the parameters that train only: frozen ones come from the weights again.
  const std::string& weights = c.model.start_weights();
  const bool frozen = count_parameters(*lm.module) != count_trainable_parameters(*lm.module);
  const bool from_file = !weights.empty() && (!resume_from || frozen);
  const ParamInit init = (resume_from && !frozen) || from_file
                             ? ParamInit([](const std::string&, at::Tensor& t) { t.zero_(); })
                             : lm.param_init;
  std::shared_ptr<FullyShardedModel> model;
  building("this rank's shards of the model",
           [&] { model = fully_shard(lm.module, world, c.sharding_options().param_init(init)); });
  // A fresh run may start from a full model file instead (a resumed one takes its checkpoint's).
  if (from_file) {
    FullStateLoadOptions load = hf::start_weights_options(c);
    load.from_rank0(c.fsdp.cpu_ram_efficient_loading);
    load_full_safetensors(*model, weights, load);
    log.info("parameters from " + weights +
             (c.fsdp.cpu_ram_efficient_loading ? " (read by rank 0, broadcast unit by unit)" : ""));
  }
  // A PEFT adapter to continue training (a resumed run takes its checkpoint's adapters).
  if (!c.model.adapter.empty() && !resume_from) {
    load_full_safetensors(*model, hf::adapter_weights(c.model.adapter),
                          hf::adapter_load_options(c));
    log.info("LoRA adapters from " + c.model.adapter);
  }
  if (!c.model.pretrained.empty() && std::filesystem::is_directory(c.model.pretrained)) {
    for (const auto& note :
         hf::read_folder_settings(c.model.pretrained, c.context_length()).notes) {
      log.info(note);
    }
  }
  if (c.fsdp.sync_module_states) broadcast_shards(*model);
  AdamW opt = make_adamw(*model, c.optim);
  // fp16's narrow exponent needs the loss scaled (PyTorch's ShardedGradScaler); bf16 and fp32 not.
  std::optional<ShardedGradScaler> scaler;
  if (c.mixed_precision == DType::kFloat16) scaler.emplace(c.grad_scaler);
  ShardedGradScaler* const scaler_ptr = scaler ? &*scaler : nullptr;
  const int64_t n_trainable = count_trainable_parameters(*lm.module);
  std::set<std::string> unit_names;  // a unit may train all, some or none of its parameters
  for (const auto& units : {model->units(), model->frozen_units()}) {
    for (const UnitInfo& u : units) unit_names.insert(u.name);
  }
  log.info("model: " + std::string(to_string(c.model.type)) + ", " + std::to_string(n_params) +
           " parameters" +
           (frozen ? " (" + std::to_string(n_trainable) + " of them train)" : std::string()) +
           " in " + std::to_string(unit_names.size()) + " units; " +
           to_string(c.fsdp.sharding_strategy) + " over " + std::to_string(world->size()) +
           " ranks (" + world->backend() + "); this rank holds " +
           format_bytes(model->memory().sharded_param_bytes) + " of parameters" +
           (frozen ? " and " + format_bytes(model->memory().sharded_frozen_bytes) + " frozen"
                   : std::string()) +
           (c.fsdp.offload_params ? " (offloaded: in host memory, the optimizer on the CPU)" : "") +
           "; AdamW " + adamw_kernels(opt) + "; peak RSS " +
           format_bytes(peak_rss_over_ranks(*world)) + " after sharding");

  // 5. Resume where a checkpoint left off.
  TrainSummary summary;
  if (resume_from) {
    summary.start_step =
        resume_beside_owner(*resume_from, c, *model, opt, *loader, scaler_ptr, log, *world);
  }

  // 6. The loop.
  const int64_t tokens_per_step = c.train.micro_batch_size * c.train.gradient_accumulation_steps *
                                  c.data.seq_len * world->size();
  const auto t0 = Clock::now();
  auto last_log = t0;
  int64_t last_log_step = summary.start_step;
  auto maybe_eval = [&](int64_t step) {
    if (!eval_loader) return;
    const double v = evaluate(lm, *eval_loader, *world, model->device(), c.train.fused_loss);
    log.eval(step, v);
    if (summary.first_val_loss < 0) summary.first_val_loss = v;
    summary.last_val_loss = v;
    if (!summary.history.empty() && summary.history.back().step == step) {
      summary.history.back().val_loss = v;
    }
  };
  if (summary.start_step < c.optim.max_steps) maybe_eval(summary.start_step);
  last_log = Clock::now();

  for (int64_t step = summary.start_step; step < c.optim.max_steps; ++step) {
    const double lr =
        warmup_cosine_lr(step, c.optim.warmup_steps, c.optim.max_steps, c.optim.lr, c.optim.min_lr);
    opt.set_lr(lr);
    const StepGradients g = train_step(c, lm, *model, opt, *loader, scaler_ptr, *world);
    StepMetrics m;
    apply_step(step, g, opt, scaler_ptr, *world, m);

    const int64_t done = step + 1;
    const bool last = done == c.optim.max_steps;
    // A skipped fp16 step is always shown: the user sees why the loss did not move.
    const bool logged =
        done % c.train.log_every == 0 || step == summary.start_step || last || m.skipped;
    if (m.skipped) ++summary.skipped_steps;
    m.step = done;
    m.loss = step_loss(g, *world);
    m.lr = lr;
    m.grad_norm = g.norm;
    m.peak_rss_bytes = peak_rss_over_ranks(*world);
    m.peak_gpu_bytes = peak_gpu_over_ranks(*world, model->device());
    const auto now = Clock::now();
    m.elapsed_s = std::chrono::duration<double>(now - t0).count();
    m.tokens_per_s = static_cast<double>(tokens_per_step * (done - last_log_step)) /
                     std::max(1e-9, std::chrono::duration<double>(now - last_log).count());
    log.step(m, logged);
    if (logged) {
      summary.history.push_back(m);
      last_log_step = done;
    }
    summary.last_loss = m.loss;
    summary.steps = done;

    if (c.train.eval_every > 0 && (done % c.train.eval_every == 0 || last)) maybe_eval(done);
    if (c.train.checkpoint_every > 0 && (done % c.train.checkpoint_every == 0 || last)) {
      summary.last_checkpoint = save(c, done, *model, opt, *loader, scaler_ptr, log);
    }
    if (logged) last_log = Clock::now();  // tokens/s counts training, not evaluation or saving
    if (after_step) after_step(done);
  }
  if (summary.steps == 0) summary.steps = summary.start_step;
  if (scaler) summary.loss_scale = scaler->get_scale();
  if (!c.train.export_dir.empty()) {
    // A resumed run that had no step left to take wrote no checkpoint: its newest is the model.
    const std::string from = !summary.last_checkpoint.empty()
                                 ? summary.last_checkpoint
                                 : latest_checkpoint(c.train.checkpoint_dir).value_or("");
    if (from.empty()) {
      log.info("train.export_dir: no checkpoint to export");
    } else {
      export_folder(from, c.train.export_dir, *world, log);
    }
  }
  return summary;
}

}  // namespace fsdp
