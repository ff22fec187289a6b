// Full-state export and import between a sharded model and one safetensors file (see
// full_state.h). Saving: unit by unit, the ranks of replica 0 all-gather the unit's fp32 flat
// parameter over their shard group and rank 0 streams each original parameter into a
// SafetensorsWriter; after each step rank 0 broadcasts whether it is still fine, so that a write
// error stops every rank at the same point instead of leaving them in the next all-gather.
// Loading: each rank checks the file against the model, the ranks agree (an all-reduce of
// failures) that it fits everywhere, then each reads the element ranges of its own shard straight
// into the shard, and they agree again: a failure anywhere makes the call throw on every rank.
#include "fsdp/checkpoint/full_state.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/buffers.h"
#include "checkpoint/file_io.h"
#include "checkpoint/format.h"
#include "core/buffers.h"
#include "core/collectives.h"
#include "fsdp/checkpoint/ownership.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/checkpoint/safetensors_set.h"

namespace fsdp {
namespace {

// --- shared -------------------------------------------------------------------------------------

template <typename F>
std::exception_ptr guarded(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

std::string display_name(const UnitInfo& unit) {
  return unit.name.empty() ? std::string("(root)") : unit.name;
}

[[noreturn]] void fail_full_state_tensor(const std::string& path, const std::string& name,
                                         const std::string& what) {
  throw SafetensorsError("safetensors '" + path + "': tensor '" + name + "': " + what);
}

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Every flat parameter of the model, the trainable ones first, and this rank's shards of them in
// the same order: a full state holds frozen parameters too.
std::vector<UnitInfo> all_units(const FullyShardedModel& model) {
  std::vector<UnitInfo> units = model.units();
  for (UnitInfo& u : model.frozen_units()) units.push_back(std::move(u));
  return units;
}

std::vector<UnitShard> all_shards(const FullyShardedModel& model) {
  std::vector<UnitShard> shards = model.shards();
  for (UnitShard& s : model.frozen_shards()) shards.push_back(std::move(s));
  return shards;
}

// --- save ---------------------------------------------------------------------------------------

SafetensorsDType file_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return SafetensorsDType::kF32;
    case DType::kBFloat16:
      return SafetensorsDType::kBF16;
    case DType::kFloat16:
      return SafetensorsDType::kF16;
    default:
      break;
  }
  throw std::invalid_argument(std::string("save_full_safetensors: dtype ") + dtype_name(dtype) +
                              " is not a floating type; use fp32, bf16 or fp16");
}

// Primary names only: an alias is the same tensor, which Hugging Face also stores once.
std::vector<SafetensorsTensorSpec> param_specs(const std::vector<UnitInfo>& units,
                                               SafetensorsDType dtype) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& unit : units) {
    for (const auto& p : unit.params) specs.push_back({p.name, dtype, p.shape});
  }
  return specs;
}

// Rank 0 tells every rank whether it is still fine; all throw together when it is not.
void agree(Comm& world, const std::exception_ptr& rank0_error, const std::string& path,
           const std::string& stage) {
  int64_t failed = rank0_error ? 1 : 0;
  world.set_context("save_full_safetensors '" + path + "': " + stage);
  world.broadcast(&failed, 1, DType::kInt64, 0);
  if (failed == 0) return;
  if (rank0_error) std::rethrow_exception(rank0_error);
  throw SafetensorsError("save_full_safetensors: rank 0 failed to write '" + path + "' (" + stage +
                         "); its error says why");
}

// The unit's padded flat parameter (fp32, or a frozen one's param_dtype), gathered over the shard
// group, in host memory (the shard itself when there is one shard on the CPU: nothing is copied).
at::Tensor gather_unit(Comm& shard_group, const UnitInfo& unit, const at::Tensor& shard) {
  if (unit.shard_count == 1) return shard.to(at::kCPU);
  at::Tensor full = at::empty({unit.padded_numel}, shard.options());
  shard_group.set_context("save_full_safetensors: all-gather of unit '" + display_name(unit) + "'");
  all_gather(shard_group, shard, full)->wait();
  return full.to(at::kCPU);
}

// The file's dtype goes straight from the gathered buffer; others in bounded converted pieces.
void write_param(SafetensorsWriter& writer, const ParamLayout& p, const at::Tensor& full,
                 at::ScalarType type) {
  const at::Tensor src = full.narrow(0, p.offset, p.numel);
  if (type == src.scalar_type()) {
    writer.write_bytes(p.name, 0, src.data_ptr(), p.numel * static_cast<int64_t>(src.itemsize()));
    return;
  }
  constexpr int64_t kChunk = int64_t{1} << 22;
  const int64_t esize = static_cast<int64_t>(c10::elementSize(type));
  for (int64_t i = 0; i < p.numel; i += kChunk) {
    const int64_t n = std::min(kChunk, p.numel - i);
    const at::Tensor piece = src.narrow(0, i, n).to(type);
    writer.write_bytes(p.name, i * esize, piece.data_ptr(), n * esize);
  }
}

std::unique_ptr<SafetensorsWriter> open_writer(FullyShardedModel& model,
                                               const std::vector<UnitInfo>& units,
                                               const std::string& path,
                                               const FullStateSaveOptions& options) {
  // Rank 0 writes what its shard group gathers, so it must belong to replica 0: true of every
  // strategy's mesh, checked so that a new one cannot silently break it.
  if (model.replicate_group().rank() != 0) {
    throw SafetensorsError("save_full_safetensors: world rank 0 is not in replica 0");
  }
  std::vector<SafetensorsTensorSpec> specs = param_specs(units, file_dtype(options.dtype_));
  for (const NamedBuffer& b : model.buffers()) {  // in their own dtypes, as torch's state_dict
    specs.push_back({b.name, to_safetensors_dtype(b.tensor.scalar_type()), b.tensor.sizes().vec()});
  }
  return std::make_unique<SafetensorsWriter>(path, std::move(specs), options.metadata_);
}

void write_model_buffers(SafetensorsWriter& writer, const std::vector<NamedBuffer>& buffers) {
  for (const NamedBuffer& b : buffers) writer.write(b.name, b.tensor.to(at::kCPU).contiguous());
}

// --- load ---------------------------------------------------------------------------------------

void check_fits(const std::string& path, const SafetensorsTensorInfo& t, const ParamLayout& p) {
  if (t.shape != p.shape) {
    fail_full_state_tensor(path, t.name,
                           "shape " + dims_text(t.shape) + " in the file, the model's '" + p.name +
                               "' is " + dims_text(p.shape));
  }
  const std::optional<at::ScalarType> type = to_scalar_type(t.dtype);
  if (!type || !at::isFloatingType(*type)) {
    fail_full_state_tensor(path, t.name,
                           std::string("dtype ") + safetensors_dtype_name(t.dtype) +
                               " does not convert to the model's fp32 parameters");
  }
}

std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 5);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

// The set's tensor for each parameter of each unit (primary name first, else an alias), after
// checking the whole set against the model: nothing is read before everything fits.
using Plan = std::vector<std::vector<std::string>>;

// The model's buffers the set holds (checked: same shape, a dtype that converts), and their
// names in `known`; one it lacks is `missing` unless options.may_lack_ allows it.
std::vector<NamedBuffer> plan_buffers(const SafetensorsSet& set,
                                      const std::vector<NamedBuffer>& buffers,
                                      const FullStateLoadOptions& options,
                                      std::set<std::string>& known,
                                      std::vector<std::string>& missing) {
  std::vector<NamedBuffer> read;
  for (const NamedBuffer& b : buffers) {
    known.insert(b.name);
    const SafetensorsTensorInfo* t = set.find(b.name);
    if (t == nullptr) {
      if (!options.may_lack_ || !options.may_lack_(b.name)) missing.push_back(b.name);
      continue;
    }
    const std::optional<at::ScalarType> type = to_scalar_type(t->dtype);
    const at::ScalarType want = b.tensor.scalar_type();
    const bool converts =
        type && (*type == want || (at::isFloatingType(*type) && at::isFloatingType(want)));
    if (t->shape != b.tensor.sizes().vec() || !converts) {
      fail_full_state_tensor(set.file_of(b.name), b.name,
                             "the model's buffer is " + dims_text(b.tensor.sizes().vec()) + " " +
                                 safetensors_dtype_name(to_safetensors_dtype(want)) +
                                 ", the file's " + dims_text(t->shape) + " " +
                                 safetensors_dtype_name(t->dtype));
    }
    read.push_back(b);
  }
  return read;
}

void read_set_buffers(const SafetensorsSet& set, const std::vector<NamedBuffer>& buffers) {
  at::NoGradGuard no_grad;
  for (const NamedBuffer& b : buffers) {
    const at::Tensor host = at::empty({b.tensor.numel()}, b.tensor.options().device(at::kCPU));
    set.read_elements(b.name, 0, b.tensor.numel(), host);
    at::Tensor(b.tensor).copy_(host.view(b.tensor.sizes()));
  }
}

// A parameter the set lacks and options.may_lack_ allows gets the source "": it is not read.
// `buffers`: the model's, of which those to read are left in `buffers_read`.
Plan plan_load(const SafetensorsSet& set, const std::vector<UnitInfo>& units,
               const std::vector<NamedBuffer>& buffers, const FullStateLoadOptions& options,
               std::vector<NamedBuffer>& buffers_read) {
  const bool strict = options.strict_;
  Plan plan;
  std::set<std::string> known;
  std::vector<std::string> missing;
  buffers_read = plan_buffers(set, buffers, options, known, missing);
  for (const auto& unit : units) {
    plan.emplace_back();
    for (const auto& p : unit.params) {
      std::string source = p.name;
      for (size_t a = 0; set.find(source) == nullptr && a < p.aliases.size(); ++a) {
        source = p.aliases[a];
      }
      known.insert(p.name);
      known.insert(p.aliases.begin(), p.aliases.end());
      if (const SafetensorsTensorInfo* t = set.find(source)) {
        check_fits(set.file_of(source), *t, p);
      } else if (options.may_lack_ && options.may_lack_(p.name)) {
        source.clear();
      } else {
        missing.push_back(p.name);
      }
      plan.back().push_back(source);
    }
  }
  if (!missing.empty()) {
    throw SafetensorsError("safetensors '" + set.path() + "': no tensor for the model's " +
                           name_list(missing));
  }
  std::vector<std::string> unexpected;
  for (const auto& name : set.names()) {
    if (known.count(name) == 0) unexpected.push_back(name);
  }
  if (strict && !unexpected.empty()) {
    throw SafetensorsError("safetensors '" + set.path() + "': tensor " + name_list(unexpected) +
                           " names no parameter of the model (load with strict(false) to ignore)");
  }
  return plan;
}

// For each parameter with a source, `fill(i, param_begin, shard_begin, count)` on the elements of
// it in this rank's shard [r * S, (r + 1) * S) of the unit's flat parameter; then the padding past
// the unit's last element is zeroed, as the runtime's shard layout requires. A parameter without
// a source keeps its values.
void fill_shard(const UnitInfo& unit, const std::vector<std::string>& sources,
                const at::Tensor& shard,
                const std::function<void(size_t, int64_t, int64_t, int64_t)>& fill) {
  const int64_t lo = static_cast<int64_t>(unit.shard_rank) * unit.shard_numel;
  const int64_t hi = lo + unit.shard_numel;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const ParamLayout& p = unit.params[i];
    const int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
    if (e <= b || sources[i].empty()) continue;
    fill(i, b - p.offset, b - lo, e - b);
  }
  const int64_t valid = std::clamp<int64_t>(unit.numel - lo, 0, unit.shard_numel);
  shard.narrow(0, valid, unit.shard_numel - valid).zero_();
}

// This rank's shard of the unit read from the set.
void load_unit(const SafetensorsSet& set, const UnitInfo& unit,
               const std::vector<std::string>& sources, const at::Tensor& shard) {
  fill_shard(unit, sources, shard, [&](size_t i, int64_t begin, int64_t at, int64_t count) {
    set.read_elements(sources[i], begin, count, shard.narrow(0, at, count));
  });
}

void load_shards(FullyShardedModel& model, const SafetensorsSet& set,
                 const std::vector<UnitInfo>& units, const Plan& plan) {
  const std::vector<UnitShard> shards = all_shards(model);
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) load_unit(set, units[u], plan[u], shards[u].param);
}

void fail_together(Comm& world, const std::exception_ptr& error, const std::string& path,
                   const std::string& stage);

// This rank's slice of a unit read whole (`flat`, padded) into its shard.
void copy_read_params(const UnitInfo& unit, const std::vector<std::string>& sources,
                      const at::Tensor& flat, const at::Tensor& shard) {
  const int64_t lo = static_cast<int64_t>(unit.shard_rank) * unit.shard_numel;
  fill_shard(unit, sources, shard, [&](size_t, int64_t, int64_t at, int64_t count) {
    shard.narrow(0, at, count).copy_(flat.narrow(0, lo + at, count));
  });
}

// from_rank0: rank 0 reads each unit whole (a one-shard view of its layout), broadcasts it, and
// every rank keeps its own slice.
void load_broadcast_from_rank0(FullyShardedModel& model, const SafetensorsSet* set,
                               const std::vector<UnitInfo>& units, const Plan& plan,
                               const std::string& path) {
  Comm& world = model.world();
  const std::vector<UnitShard> shards = all_shards(model);
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    UnitInfo whole = units[u];
    whole.shard_rank = 0;
    whole.shard_numel = whole.padded_numel;
    at::Tensor flat = at::empty({whole.padded_numel}, at::kFloat);
    std::exception_ptr error;
    if (set) error = guarded([&] { load_unit(*set, whole, plan[u], flat); });
    fail_together(world, error, path, "reading unit '" + display_name(units[u]) + "' of");
    world.set_context("load_full_safetensors '" + path + "': broadcast of unit '" +
                      display_name(units[u]) + "'");
    world.broadcast(flat.data_ptr(), static_cast<size_t>(whole.padded_numel), DType::kFloat32, 0);
    // Which parameters rank 0 read (the others have no plan): 1 for each read, "" for the others.
    std::vector<int64_t> read(units[u].params.size(), 1);
    for (size_t i = 0; set && i < read.size(); ++i) read[i] = plan[u][i].empty() ? 0 : 1;
    world.broadcast(read.data(), read.size(), DType::kInt64, 0);
    std::vector<std::string> sources;
    for (const int64_t r : read) sources.push_back(r ? "read" : "");
    copy_read_params(units[u], sources, flat, shards[u].param);
  }
}

// Every rank learns how many failed; all throw together when any did, so that none goes on to a
// collective the others have left.
void fail_together(Comm& world, const std::exception_ptr& error, const std::string& path,
                   const std::string& stage) {
  int64_t failed = error ? 1 : 0;
  world.set_context("load_full_safetensors '" + path + "': " + stage);
  world.all_reduce(&failed, 1, DType::kInt64, ReduceOp::kSum);
  if (error) std::rethrow_exception(error);
  if (failed > 0) {
    throw SafetensorsError("load_full_safetensors: " + std::to_string(failed) +
                           " other rank(s) failed " + stage + " '" + path +
                           "'; their errors say why");
  }
}

}  // namespace

void save_full_safetensors(FullyShardedModel& model, const std::string& path,
                           const FullStateSaveOptions& options) {
  const at::ScalarType type = *to_scalar_type(file_dtype(options.dtype_));
  const std::vector<UnitInfo> units = all_units(model);
  Comm& world = model.world();
  model.sync_buffers();  // what the next forward would start from (BufferSync); rank 0's written
  std::unique_ptr<SafetensorsWriter> writer;
  std::exception_ptr error;
  if (world.rank() == 0) {
    error = guarded([&] { writer = open_writer(model, units, path, options); });
  }
  agree(world, error, path, "creating the file");

  // Other replicas hold copies of the same shards: they only follow rank 0's progress.
  const bool gathers = model.replicate_group().rank() == 0;
  const std::vector<UnitShard> shards = gathers ? all_shards(model) : std::vector<UnitShard>{};
  for (size_t u = 0; u < units.size(); ++u) {
    at::Tensor full;
    if (gathers) full = gather_unit(model.shard_group(), units[u], shards[u].param);
    if (writer) {
      error = guarded([&] {
        for (const auto& p : units[u].params) write_param(*writer, p, full, type);
      });
    }
    agree(world, error, path, "unit '" + display_name(units[u]) + "'");
  }
  if (writer) {
    error = guarded([&] {
      write_model_buffers(*writer, model.buffers());
      writer->commit();
    });
  }
  agree(world, error, path, "commit");
}

void load_full_safetensors(FullyShardedModel& model, const std::string& path,
                           const FullStateLoadOptions& options) {
  Comm& world = model.world();
  const std::vector<UnitInfo> units = all_units(model);
  const bool reads = !options.from_rank0_ || world.rank() == 0;
  std::unique_ptr<SafetensorsSet> set;
  Plan plan;
  std::vector<NamedBuffer> buffers;
  // No rank changes its shards unless the files fit the model on every rank that reads them.
  std::exception_ptr error = guarded([&] {
    if (!reads) return;
    set = std::make_unique<SafetensorsSet>(path, options.name_map_);
    plan = plan_load(*set, units, model.buffers(), options, buffers);
  });
  fail_together(world, error, path, "checking");
  if (options.from_rank0_) {
    load_broadcast_from_rank0(model, set.get(), units, plan, path);
    error = guarded([&] {
      if (set) read_set_buffers(*set, buffers);
    });
    fail_together(world, error, path, "reading the buffers of");
    // Rank 0's buffers, read or kept, to every rank.
    world.set_context("load_full_safetensors '" + path + "': broadcast of the buffers");
    broadcast_buffers(world, model.buffers());
    return;
  }
  error = guarded([&] {
    load_shards(model, *set, units, plan);
    read_set_buffers(*set, buffers);
  });
  fail_together(world, error, path, "reading");
}

namespace {

// The name `set` holds a frozen parameter under: its own, else an alias's.
std::string frozen_source(const SafetensorsSet& set, const CheckpointParam& p) {
  for (size_t a = 0; set.find(p.name) == nullptr && a < p.aliases.size(); ++a) {
    if (set.find(p.aliases[a]) != nullptr) return p.aliases[a];
  }
  return p.name;
}

// A tensor of the consolidated file: a parameter the checkpoint holds, or a frozen one it names,
// read from the run's weights (`frozen_from`).
struct Entry {
  const CheckpointParam* param = nullptr;
  bool frozen = false;
};

// The checkpoint's buffers (those `extras.omit` keeps), copied byte for byte in their own dtypes
// from its verified buffer file into `writer`, a chunk at a time.
std::vector<const CheckpointBuffer*> kept_buffers(const CheckpointMetadata& meta,
                                                  const ConsolidateExtras& extras) {
  std::vector<const CheckpointBuffer*> out;
  for (const auto& b : meta.buffers) {
    if (!extras.omit || !extras.omit(b.name)) out.push_back(&b);
  }
  return out;
}

void copy_checkpoint_buffers(const CheckpointReader& reader,
                             const std::vector<const CheckpointBuffer*>& kept,
                             SafetensorsWriter& writer, int64_t chunk_bytes) {
  if (kept.empty()) return;
  const std::vector<std::string> problems = ckpt::verify_buffers(reader.dir(), reader.metadata());
  if (!problems.empty()) throw CheckpointError(problems.front());
  const SafetensorsReader file(ckpt::join(reader.dir(), reader.metadata().buffers_file));
  std::vector<unsigned char> buf(static_cast<size_t>(chunk_bytes));
  for (const CheckpointBuffer* b : kept) {
    const int64_t bytes = file.info(b->name).nbytes();
    for (int64_t i = 0; i < bytes; i += chunk_bytes) {
      const int64_t n = std::min(chunk_bytes, bytes - i);
      file.read_bytes(b->name, i, n, buf.data());
      writer.write_bytes(b->name, i, buf.data(), n);
    }
  }
}

// The checkpoint's parameters `entries` into one file at `out_path`, a chunk at a time, and
// `buffers` after them.
void write_consolidated(CheckpointReader& reader, const ConsolidateExtras& extras,
                        const std::vector<Entry>& entries, const std::string& out_path, DType dtype,
                        int64_t chunk_elements,
                        const std::vector<const CheckpointBuffer*>& buffers = {}) {
  const SafetensorsSet* frozen_from = extras.frozen_from;
  const SafetensorsDType file_type = file_dtype(dtype);
  const at::ScalarType type = *to_scalar_type(file_type);
  std::vector<SafetensorsTensorSpec> specs;
  for (const Entry& e : entries) specs.push_back({e.param->name, file_type, e.param->shape});
  for (const CheckpointBuffer* b : buffers) {
    specs.push_back({b->name, *parse_safetensors_dtype(b->dtype), b->shape});
  }
  SafetensorsWriter writer(out_path, specs);
  const int64_t esize = static_cast<int64_t>(c10::elementSize(type));
  at::Tensor buf = at::empty({chunk_elements}, at::kFloat);
  for (const Entry& e : entries) {
    const CheckpointParam* p = e.param;
    const at::Tensor addend = extras.addend ? extras.addend(p->name) : at::Tensor();
    for (int64_t i = 0; i < p->numel; i += chunk_elements) {
      const int64_t n = std::min(chunk_elements, p->numel - i);
      at::Tensor piece = buf.narrow(0, 0, n);
      if (e.frozen) {
        frozen_from->read_elements(frozen_source(*frozen_from, *p), i, n, piece);
      } else {
        reader.read(p->name, "param", i, n, piece.data_ptr<float>());
      }
      if (addend.defined()) piece.add_(addend.narrow(0, i, n));
      if (type != at::kFloat) piece = piece.to(type);
      writer.write_bytes(p->name, i * esize, piece.data_ptr(), n * esize);
    }
  }
  copy_checkpoint_buffers(reader, buffers, writer, chunk_elements * 4);
  writer.commit();
}

// Every parameter the checkpoint describes: those it holds, then its frozen ones, which come
// from `frozen_from` (checked against their shapes before anything is written).
std::vector<Entry> all_params(const CheckpointReader& reader, const ConsolidateExtras& extras) {
  const SafetensorsSet* frozen_from = extras.frozen_from;
  const auto kept = [&](const CheckpointParam& p) { return !extras.omit || !extras.omit(p.name); };
  std::vector<Entry> out;
  const CheckpointMetadata& meta = reader.metadata();
  for (const auto& unit : meta.units) {
    for (const auto& p : unit.params) {
      if (kept(p)) out.push_back({&p, false});
    }
  }
  if (meta.frozen.empty()) return out;
  if (frozen_from == nullptr) {
    throw CheckpointError("checkpoint '" + reader.dir() + "' does not hold its " +
                          std::to_string(meta.frozen.size()) + " frozen parameters ('" +
                          meta.frozen.front().name +
                          "', ...): they are the weights the run started from, which a "
                          "consolidation must be given (fsdp-ckpt export reads its "
                          "model.pretrained or model.init_from)");
  }
  for (const auto& p : meta.frozen) {
    const SafetensorsTensorInfo* t = frozen_from->find(frozen_source(*frozen_from, p));
    if (t == nullptr || t->shape != p.shape) {
      throw CheckpointError("checkpoint '" + reader.dir() + "': its frozen parameter '" + p.name +
                            "' " + dims_text(p.shape) + " is " +
                            (t == nullptr ? "not in '" : "of another shape in '") +
                            frozen_from->path() + "'");
    }
    if (kept(p)) out.push_back({&p, true});
  }
  return out;
}

void check_chunk(int64_t chunk_elements) {
  if (chunk_elements <= 0) {
    throw std::invalid_argument("consolidate_checkpoint: chunk_elements <= 0");
  }
}

std::string shard_file_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

}  // namespace

void consolidate_checkpoint(const std::string& dir, const std::string& out_path, DType dtype,
                            int64_t chunk_elements, const ConsolidateExtras& extras) {
  check_chunk(chunk_elements);
  check_checkpoint_output(out_path, dir, "the checkpoint it reads", OutputKind::kFile);
  CheckpointReader reader(dir);
  write_consolidated(reader, extras, all_params(reader, extras), out_path, dtype, chunk_elements,
                     kept_buffers(reader.metadata(), extras));
}

std::vector<std::string> consolidate_checkpoint_files(const std::string& dir,
                                                      const std::string& out_dir, DType dtype,
                                                      int64_t max_shard_bytes,
                                                      int64_t chunk_elements,
                                                      const ConsolidateExtras& extras) {
  check_chunk(chunk_elements);
  if (max_shard_bytes <= 0) {
    throw std::invalid_argument("consolidate_checkpoint_files: max_shard_bytes <= 0");
  }
  check_checkpoint_output(out_dir.empty() ? "." : out_dir, dir, "the checkpoint it reads",
                          OutputKind::kIntoFolder);
  CheckpointReader reader(dir);
  const int64_t esize = static_cast<int64_t>(c10::elementSize(*to_scalar_type(file_dtype(dtype))));
  std::vector<std::vector<Entry>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const Entry& e : all_params(reader, extras)) {
    const int64_t bytes = e.param->numel * esize;
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(e);
    in_shard += bytes;
    total += bytes;
  }
  // Buffers go in the last file, whatever their size (they are rarely more than a few MB).
  const std::vector<const CheckpointBuffer*> buffers = kept_buffers(reader.metadata(), extras);
  for (const CheckpointBuffer* b : buffers) {
    int64_t numel = 1;
    for (int64_t d : b->shape) numel *= d;
    total += numel * safetensors_dtype_bits(*parse_safetensors_dtype(b->dtype)) / 8;
  }
  const std::string folder = out_dir.empty() ? "." : out_dir;
  if (shards.size() == 1) {
    const std::string path = folder + "/" + kSafetensorsSingleName;
    write_consolidated(reader, extras, shards[0], path, dtype, chunk_elements, buffers);
    return {path};
  }
  std::vector<std::string> files;
  nlohmann::json index = {{"metadata", {{"total_size", total}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_file_name(i, shards.size());
    const bool last = i + 1 == shards.size();
    write_consolidated(reader, extras, shards[i], folder + "/" + name, dtype, chunk_elements,
                       last ? buffers : std::vector<const CheckpointBuffer*>{});
    for (const Entry& e : shards[i]) index["weight_map"][e.param->name] = name;
    if (last) {
      for (const CheckpointBuffer* b : buffers) index["weight_map"][b->name] = name;
    }
    files.push_back(folder + "/" + name);
  }
  const std::string index_path = folder + "/" + kSafetensorsIndexName;
  ckpt::write_file_atomically(index_path, index.dump(2) + "\n");
  files.push_back(index_path);
  return files;
}

}  // namespace fsdp
