// fsdp-ckpt: sharded checkpoints offline, without a model or processes.
//
//   fsdp-ckpt inspect DIR                       layout, step, sizes; verifies every checksum
//   fsdp-ckpt consolidate DIR OUT.safetensors [--dtype fp32|bf16|fp16]
//   fsdp-ckpt reshard DIR OUT --world-size N
//   fsdp-ckpt export DIR OUT_DIR [--dtype fp32|bf16|fp16] [--max-shard-size BYTES]
//                    [--tokenizer TOKENIZER_DIR] [--merge]
//
// DIR is a step folder or a checkpoint root (its `latest` is used). consolidate streams the
// parameters into one safetensors file with Hugging Face's names (memory bounded by a 16 MiB
// chunk); reshard rewrites the checkpoint, optimizer state included, for N ranks; export writes a
// Hugging Face model folder (config.json, weights, tokenizer: hf/export.h) that
// transformers' from_pretrained loads; for a LoRA run PEFT's adapter folder (hf/peft.h), or with
// --merge the model with the adapters merged into their weights. No output may lie inside a
// checkpoint, or be a non-empty folder for reshard and export: refused before anything is written
// (docs/checkpoint.md). Exit codes: 0 done (inspect: the checkpoint is intact), 1 a damaged
// checkpoint, a refused output or a failure, 2 a bad command.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/checkpoint/checkpoint.h"
#include "fsdp/checkpoint/full_state.h"
#include "hf/export.h"
#include "util/files.h"
#include "util/number_flag.h"

namespace {

const char* kUsage =
    "usage: fsdp-ckpt inspect DIR\n"
    "       fsdp-ckpt consolidate DIR OUT.safetensors [--dtype fp32|bf16|fp16]\n"
    "       fsdp-ckpt reshard DIR OUT --world-size N\n"
    "       fsdp-ckpt export DIR OUT_DIR [--dtype fp32|bf16|fp16] [--max-shard-size BYTES]\n"
    "                        [--tokenizer TOKENIZER_DIR] [--merge]\n"
    "DIR: a checkpoint step folder, or a root whose `latest` names one. OUT lies outside every\n"
    "checkpoint and every checkpoint root; reshard's and export's is a new or empty folder.\n";

// The most ranks --world-size writes shard files for (fsdp-run's --nproc-per-node x --nnodes
// bounds are far above any real job; this keeps a typo from writing millions of files).
constexpr int64_t kMaxWorldSize = 65536;

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Positional arguments and --flag value pairs; `allowed` lists the flags the command takes.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

// `switches`: flags that take no value (--merge), recorded as "1".
Args parse(int argc, char** argv, const std::vector<std::string>& allowed,
           const std::vector<std::string>& switches = {}) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      a.positional.push_back(arg);
      continue;
    }
    // --flag value, or --flag=value as the other tools take it.
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if (std::find(switches.begin(), switches.end(), arg) != switches.end()) {
      a.flags[arg] = "1";
      continue;
    }
    bool known = false;
    for (const auto& f : allowed) known |= f == flag;
    if (!known) throw UsageError("unknown option " + flag + " for '" + argv[1] + "'");
    if (eq != std::string::npos) {
      a.flags[flag] = arg.substr(eq + 1);
      continue;
    }
    if (i + 1 >= argc) throw UsageError(arg + " needs a value");
    a.flags[arg] = argv[++i];
  }
  return a;
}

std::string step_folder(const std::string& path) {
  if (auto latest = fsdp::latest_checkpoint(path)) return *latest;
  return path;
}

int inspect(const std::string& path) {
  const std::string dir = step_folder(path);
  const fsdp::CheckpointMetadata m = fsdp::read_checkpoint_metadata(dir);
  int64_t params = 0, bytes = 0;
  for (const auto& u : m.units) params += u.numel;
  for (const auto& f : m.files) bytes += f.bytes;
  std::printf("checkpoint %s\n  format version %d, step %lld, optimizer %s (%lld steps, lr %g)\n",
              dir.c_str(), m.version, (long long)m.step,
              m.optimizer.empty() ? "none" : m.optimizer.c_str(), (long long)m.optimizer_steps,
              m.lr);
  std::printf("  saved by %d ranks (%d replicas x %d shards), %s; %lld parameters in %zu units\n",
              m.world_size, m.replicate_size, m.shard_count, m.strategy.c_str(), (long long)params,
              m.units.size());
  std::printf("  %zu shard files, %.1f MiB; tensors per shard:", m.files.size(), bytes / 1048576.0);
  for (const auto& k : m.tensor_kinds) std::printf(" %s", k.c_str());
  std::printf("\n");
  for (const auto& u : m.units) {
    std::printf("  unit '%s': %lld elements, %lld per shard\n", u.name.c_str(), (long long)u.numel,
                (long long)u.shard_numel);
    for (const auto& p : u.params) {
      std::string shape;
      for (size_t i = 0; i < p.shape.size(); ++i)
        shape += (i ? " x " : "") + std::to_string(p.shape[i]);
      std::printf("    %-50s %-16s at %lld\n", p.name.c_str(), shape.c_str(), (long long)p.offset);
    }
  }
  const std::vector<std::string> problems = fsdp::verify_checkpoint(dir);
  for (const auto& p : problems) std::printf("  DAMAGED: %s\n", p.c_str());
  std::printf("  checksums: %s\n", problems.empty() ? "all verified" : "FAILED");
  return problems.empty() ? 0 : 1;
}

fsdp::DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "float32") return fsdp::DType::kFloat32;
  if (s == "bf16" || s == "bfloat16") return fsdp::DType::kBFloat16;
  if (s == "fp16" || s == "float16") return fsdp::DType::kFloat16;
  throw UsageError("--dtype: expected fp32, bf16 or fp16, got '" + s + "'");
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("no command");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "inspect") {
    const Args a = parse(argc, argv, {});
    if (a.positional.size() != 1) throw UsageError("inspect takes one folder");
    return inspect(a.positional[0]);
  }
  if (cmd == "consolidate") {
    const Args a = parse(argc, argv, {"--dtype"});
    if (a.positional.size() != 2) throw UsageError("consolidate takes a folder and an output file");
    const auto d = a.flags.find("--dtype");
    fsdp::consolidate_checkpoint(
        step_folder(a.positional[0]), a.positional[1],
        d == a.flags.end() ? fsdp::DType::kFloat32 : parse_dtype(d->second));
    std::printf("wrote %s\n", a.positional[1].c_str());
    return 0;
  }
  if (cmd == "export") {
    const Args a = parse(argc, argv, {"--dtype", "--max-shard-size", "--tokenizer"}, {"--merge"});
    if (a.positional.size() != 2) throw UsageError("export takes a folder and an output folder");
    fsdp::hf::ExportOptions options;
    if (a.flags.count("--dtype")) options.dtype = parse_dtype(a.flags.at("--dtype"));
    if (a.flags.count("--max-shard-size")) {
      options.max_shard_bytes =
          fsdp::flags::parse_int("--max-shard-size", a.flags.at("--max-shard-size"), 1, INT64_MAX);
    }
    if (a.flags.count("--tokenizer")) options.tokenizer_dir = a.flags.at("--tokenizer");
    options.merge = a.flags.count("--merge") > 0;
    const auto files =
        fsdp::hf::export_model_folder(step_folder(a.positional[0]), a.positional[1], options);
    std::printf("wrote %s: %zu files\n", a.positional[1].c_str(), files.size());
    return 0;
  }
  if (cmd == "reshard") {
    const Args a = parse(argc, argv, {"--world-size"});
    if (a.positional.size() != 2 || !a.flags.count("--world-size")) {
      throw UsageError("reshard takes a folder, an output folder and --world-size N");
    }
    const int n = static_cast<int>(
        fsdp::flags::parse_int("--world-size", a.flags.at("--world-size"), 1, kMaxWorldSize));
    fsdp::reshard_checkpoint(step_folder(a.positional[0]), a.positional[1], n);
    std::printf("wrote %s for %d ranks\n", a.positional[1].c_str(), n);
    return 0;
  }
  throw UsageError("unknown command '" + cmd + "'");
}

}  // namespace

int main(int argc, char** argv) {
  fsdp::files::install_signal_cleanup();  // Ctrl-C leaves no temporary behind
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "fsdp-ckpt: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const fsdp::flags::NumberError& e) {
    std::cerr << "fsdp-ckpt: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fsdp-ckpt: " << e.what() << "\n";
    return 1;
  }
}
