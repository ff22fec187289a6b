// The planner against the runtime: on every rank of an mpirun job, a small model planned with
// plan_training and then trained one step after a warm-up step (which records the unit order)
// must show exactly the planned model state, gathered-unit and gradient-buffer peaks (the
// runtime's own accounting) and collective bytes (counted by count_traffic), for each strategy
// and prefetch choice. Activations are an estimate, compared with measured memory by the benchmark;
// here only the part the attention kernel decides (PlanActivations).
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <map>

#include "factory/model_factory.h"
#include "fsdp/comm_stats.h"
#include "fsdp/fsdp.h"
#include "fsdp/plan/fits.h"
#include "fsdp/plan/plan.h"
#include "test_util.h"

namespace fsdp {
namespace {

TrainConfig small_config(ModelType type) {
  TrainConfig c;
  c.model.type = type;
  c.model.vocab_size = 101;  // odd sizes: no world size 2-4 divides the units
  c.model.n_layer = 3;
  c.model.n_head = 4;
  c.model.n_embd = 36;
  c.model.dim = 36;
  c.model.intermediate_size = 52;
  c.data.seq_len = 8;
  c.train.micro_batch_size = 2;
  // The root's reduction in one piece: the split's late rows depend on the batch's tokens, which
  // the plan only bounds (PlanSplitRoot checks them).
  c.fsdp.split_root_reduction = false;
  return c;
}

// model_shapes, known from the config alone, is what build_model registers: every name, shape and
// count, for each family and each option that adds or reshapes a parameter.
TEST(ModelShapes, AreWhatBuildModelRegisters) {
  std::vector<TrainConfig> configs;
  configs.push_back(small_config(ModelType::kGPT2));
  configs.back().model.n_positions = 12;
  TrainConfig llama = small_config(ModelType::kLlama);
  llama.model.n_head = 2;  // rotary embeddings need an even head size: 18
  configs.push_back(llama);
  TrainConfig qwen = llama;
  qwen.model.n_kv_head = 1;
  qwen.model.qkv_bias = true;
  qwen.model.tie_embeddings = true;
  configs.push_back(qwen);
  TrainConfig wide = llama;
  wide.model.head_dim = 12;  // heads wider than dim / n_head
  wide.model.o_bias = true;
  wide.model.mlp_bias = true;
  configs.push_back(wide);
  TrainConfig qwen3 = wide;  // q/k norms over the head's 12 channels; NoPE adds no parameter
  qwen3.model.qk_norm = true;
  qwen3.model.nope_layers = {0};
  configs.push_back(qwen3);
  TrainConfig phi3 = llama;  // fused qkv_proj and gate_up_proj
  phi3.model.fused_projections = true;
  configs.push_back(phi3);
  TrainConfig gemma3 = qwen3;  // sandwich norms; fused projections beside q/k norms too
  gemma3.model.sandwich_norms = true;
  gemma3.model.norm_offset = true;
  gemma3.model.fused_projections = true;
  configs.push_back(gemma3);
  for (const TrainConfig& c : configs) {
    const CausalLM lm = build_model(c);
    std::map<std::string, std::vector<int64_t>> built, known;
    for (const auto& p : lm.module->named_parameters()) built[p.key()] = p.value().sizes().vec();
    const ModelShapes shapes = model_shapes(c);
    for (const auto& p : shapes.outer) known[p.name] = p.shape;
    for (int64_t b = 0; b < shapes.blocks; ++b) {
      for (const auto& p : shapes.block) known[block_parameter_name(p, b)] = p.shape;
    }
    EXPECT_EQ(known, built) << to_string(c.model.type);
    EXPECT_EQ(shapes.parameters(), count_parameters(*lm.module));
  }
  TrainConfig huge = llama;
  huge.model.n_layer = 1000000000;
  huge.model.dim = 1 << 20;
  huge.model.n_head = 1 << 10;
  EXPECT_EQ(model_shapes(huge).parameters(), INT64_MAX);  // saturates, builds nothing
}

// A job that cannot fit the host is refused before anything is built: from the config alone when
// even the fp32 state is too large (10^9 layers: no model is built, so this returns at once),
// else from the plan's total; one that fits passes. The message names the figure and the limit.
TEST(HostMemoryCheck, RefusesWhatCannotFitNamingThePlanAndTheLimit) {
  TrainConfig c = small_config(ModelType::kLlama);
  c.model.n_head = 2;
  const Plan plan = plan_training(c, 2, 2);
  const auto error = [&](const TrainConfig& config, int64_t bytes, bool training = true) {
    try {
      check_host_memory(config, 2, 2, HostMemory{bytes, "the test's limit"}, training);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(c, 2 * plan.memory.total()), "no error");
  EXPECT_EQ(error(c, 0), "no error");  // an unknown limit refuses nothing
  std::string e = error(c, 2 * plan.memory.total() - 2);
  EXPECT_NE(e.find("the plan (fsdp-plan: FULL_SHARD over 2 ranks) needs"), std::string::npos) << e;
  EXPECT_NE(e.find("the 2 ranks on this host need"), std::string::npos) << e;
  EXPECT_NE(e.find("(the test's limit); nothing was built"), std::string::npos) << e;
  // Without gradients and optimizer state (eval, sample) the same host holds it.
  EXPECT_EQ(error(c, 2 * plan.memory.total() - 2, /*training=*/false), "no error");
  TrainConfig huge = c;
  huge.model.n_layer = 1000000000;
  e = error(huge, int64_t{24} << 30);
  EXPECT_NE(e.find("parameters (fp32, with gradients and AdamW's state) need at least"),
            std::string::npos)
      << e;
  EXPECT_GT(host_memory_limit().bytes, 0);  // /proc/meminfo is there on Linux
}

struct Measured {
  MemoryStats memory;
  int64_t peak_live_tensors = 0;  // host tensor bytes at the step's peak, above its start
  int64_t optimizer_bytes = 0;
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0;
};

Measured run_one_step(const TrainConfig& c) {
  auto counts = std::make_shared<TrafficCounts>();
  CommPtr world = count_traffic(test::world(), counts);
  CausalLM lm = build_model(c);
  auto model = fully_shard(lm.module, world, c.sharding_options().param_init(lm.param_init));
  AdamW opt(sharded_params(*model), AdamWOptions());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5 + world->rank());
  const int64_t T = c.data.seq_len;
  auto step = [&] {
    opt.zero_grad();
    for (int64_t m = 0; m < c.train.gradient_accumulation_steps; ++m) {
      model->set_requires_gradient_sync(m + 1 == c.train.gradient_accumulation_steps);
      at::Tensor t =
          at::randint(c.model.vocab_size, {c.train.micro_batch_size, T + 1}, gen, at::kLong);
      next_token_loss(lm, t.narrow(1, 0, T), t.narrow(1, 1, T), c.train.fused_loss).backward();
    }
  };
  step();
  counts->reset();  // with forward prefetch the optimizer step starts the root's next gather
  opt.step();
  model->reset_peak_memory();
  reset_host_memory_peak();
  const int64_t live_before = host_memory().live;
  step();
  Measured out;
  out.peak_live_tensors = host_memory().peak_live - live_before;
  out.memory = model->memory();
  out.optimizer_bytes = opt.state_bytes();
  out.all_gather = counts->all_gather_bytes;
  out.reduce_scatter = counts->reduce_scatter_bytes;
  out.all_reduce = counts->all_reduce_bytes;
  return out;
}

void expect_plan_holds(const TrainConfig& c) {
  const int n = test::world()->size();
  const Plan plan = plan_training(c, n, n);
  const Measured got = run_one_step(c);
  EXPECT_EQ(got.memory.sharded_param_bytes, plan.memory.params);
  EXPECT_EQ(got.memory.sharded_grad_bytes, plan.memory.grads);
  EXPECT_EQ(got.optimizer_bytes, plan.memory.optimizer);
  EXPECT_EQ(got.memory.peak_gathered_param_bytes, plan.memory.gathered);
  EXPECT_EQ(got.memory.peak_grad_buffer_bytes, plan.memory.grad_buffers);
  EXPECT_EQ(got.all_gather, plan.comm.all_gather);
  EXPECT_EQ(got.reduce_scatter, plan.comm.reduce_scatter);
  EXPECT_EQ(got.all_reduce, plan.comm.all_reduce);
  EXPECT_EQ(got.memory.sharded_frozen_bytes, plan.memory.frozen);
  EXPECT_EQ(
      got.memory.host_shard_bytes,
      plan.memory.offloaded ? plan.memory.params + plan.memory.grads + plan.memory.frozen : 0);
  EXPECT_EQ(plan.memory.host(), plan.memory.offloaded ? plan.memory.model_state() : 0);
  EXPECT_EQ(plan.memory.offloaded, c.fsdp.offload_params);
  // fp32 AdamW: 16 bytes per parameter that trains over the shard count, and the compute dtype's
  // per frozen one, plus padding (< 1 element per unit, kind and shard).
  const int64_t units = static_cast<int64_t>(plan.units.size());
  const int64_t e = dtype_size(c.mixed_precision);
  const int64_t ideal = 16 * plan.trainable + e * (plan.parameters - plan.trainable);
  EXPECT_GE(plan.memory.model_state() * plan.shard_count, ideal);
  EXPECT_LT(plan.memory.model_state() * plan.shard_count,
            ideal + (16 + e) * units * plan.shard_count);
}

std::vector<std::string> frozen_patterns() {
  return {"transformer.wpe.weight", "transformer.h.0.*", "transformer.h.1.attn.*"};
}

struct Case {
  const char* name;
  void (*tune)(TrainConfig&);
};

const Case kCases[] = {
    {"defaults", [](TrainConfig&) {}},
    {"no_prefetch",
     [](TrainConfig& c) { c.fsdp.backward_prefetch = BackwardPrefetch::kNoPrefetch; }},
    {"post_and_forward",
     [](TrainConfig& c) {
       c.fsdp.backward_prefetch = BackwardPrefetch::kBackwardPost;
       c.fsdp.forward_prefetch = true;
     }},
    {"deep_limited",
     [](TrainConfig& c) {
       c.fsdp.forward_prefetch = true;
       c.fsdp.prefetch_depth = 3;
       c.fsdp.limit_all_gathers = 2;
     }},
    {"bf16_checkpointed",
     [](TrainConfig& c) {
       c.mixed_precision = DType::kBFloat16;
       c.fsdp.activation_checkpointing = true;
     }},
    {"accumulation", [](TrainConfig& c) { c.train.gradient_accumulation_steps = 3; }},
    // fp16 is planned as bf16 is: 2-byte gathered parameters, gradient buffers and reductions.
    {"fp16", [](TrainConfig& c) { c.mixed_precision = DType::kFloat16; }},
    {"offload",
     [](TrainConfig& c) {
       c.fsdp.offload_params = true;
       c.fsdp.forward_prefetch = true;
     }},
    // Frozen parameters (train.freeze): in the root, a whole block, half a block. The other
    // cases' rules with them, in fp32 and in bf16 with checkpointing and offload.
    {"frozen", [](TrainConfig& c) { c.train.freeze = frozen_patterns(); }},
    {"frozen_bf16_offload",
     [](TrainConfig& c) {
       c.train.freeze = frozen_patterns();
       c.mixed_precision = DType::kBFloat16;
       c.fsdp.activation_checkpointing = true;
       c.fsdp.offload_params = true;
     }},
};

using PlanCase = std::tuple<ShardingStrategy, int>;
class PlanMatchesRuntime : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanMatchesRuntime, Gpt2) {
  const auto [strategy, which] = GetParam();
  TrainConfig c = small_config(ModelType::kGPT2);
  c.fsdp.sharding_strategy = strategy;
  const int n = test::world()->size();
  if (is_hybrid(strategy)) {
    if (n % 2 != 0) GTEST_SKIP() << "a 2-rank shard group needs an even world size";
    c.fsdp.shard_group_size = 2;
  }
  kCases[which].tune(c);
  if (c.mixed_precision == DType::kFloat16 && !test::fp16_skip_reason().empty()) {
    GTEST_SKIP() << test::fp16_skip_reason();
  }
  expect_plan_holds(c);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, PlanMatchesRuntime,
    ::testing::Combine(::testing::Values(ShardingStrategy::kFullShard,
                                         ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard,
                                         ShardingStrategy::kHybridShard,
                                         ShardingStrategy::kHybridShardZero2),
                       ::testing::Range(0, static_cast<int>(std::size(kCases)))),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" +
             kCases[std::get<1>(info.param)].name;
    });

// The split root reduction against the runtime: gradient buffers and reductions exactly; the
// all-gathers between the row counts alone and the plan's bound on the rows (the batch's distinct
// tokens decide). A 4096-token table's rows go as rows at every world size; a 16-token table's,
// touched whole, are reduced a second time, which the plan counts exactly. The early part in
// pieces: automatic (3, one per block, for the 4096-token root; 1 for the 16-token one), 1, 2
// under gradient accumulation, and 5, more than the blocks (the last two sent at the end).
TEST(PlanSplitRoot, MatchesRuntime) {
  const int n = test::world()->size();
  struct Pieces {
    int chunks, micro_batches;
  };
  for (const int64_t vocab : {4096, 16}) {
    for (const ShardingStrategy s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                     ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard}) {
      for (const Pieces pieces : {Pieces{0, 1}, Pieces{1, 1}, Pieces{2, 2}, Pieces{5, 1}}) {
        if (is_hybrid(s) && n % 2 != 0) continue;
        SCOPED_TRACE(std::string(to_string(s)) + ", vocabulary " + std::to_string(vocab) + ", " +
                     std::to_string(pieces.chunks) + " pieces, " +
                     std::to_string(pieces.micro_batches) + " micro-batches");
        TrainConfig c = small_config(ModelType::kGPT2);
        c.model.vocab_size = vocab;
        c.fsdp.sharding_strategy = s;
        c.fsdp.shard_group_size = is_hybrid(s) ? 2 : 0;
        c.fsdp.root_reduction_chunks = pieces.chunks;
        c.train.gradient_accumulation_steps = pieces.micro_batches;
        c.fsdp.split_root_reduction = true;
        const Plan plan = plan_training(c, n, n);
        c.fsdp.split_root_reduction = false;
        const Plan whole = plan_training(c, n, n);
        c.fsdp.split_root_reduction = true;
        if (n > 1 && pieces.chunks == 0) {
          EXPECT_EQ(root_reduction_pieces(plan, c), vocab == 4096 ? 3 : 1);
        }
        const Measured got = run_one_step(c);
        EXPECT_EQ(got.memory.peak_grad_buffer_bytes, plan.memory.grad_buffers);
        EXPECT_EQ(got.reduce_scatter, plan.comm.reduce_scatter);
        EXPECT_EQ(got.all_reduce, plan.comm.all_reduce);
        EXPECT_LE(got.all_gather, plan.comm.all_gather);
        if (n == 1) {
          EXPECT_EQ(got.all_gather, whole.comm.all_gather);  // one rank: no split
          continue;
        }
        const LateRootPart late = late_root_part(plan, c);
        EXPECT_EQ(late.as_rows, vocab == 4096);
        if (late.as_rows) {
          EXPECT_GT(got.all_gather, whole.comm.all_gather + n * 8);  // counts, then rows
        } else {
          EXPECT_EQ(got.all_gather, whole.comm.all_gather + n * 8);  // the counts only
          EXPECT_GT(plan.comm.reduce_scatter + plan.comm.all_reduce,
                    whole.comm.reduce_scatter + whole.comm.all_reduce);
        }
      }
    }
  }
}

// fsdp-plan counts fp16 as bf16: both are 2 bytes wherever the compute dtype is (gathered
// parameters, gradient buffers, reductions, activations); only the loss scaler differs, and it
// holds no memory across the step. Pure arithmetic, so on every LibTorch.
TEST(PlanFp16, CountsLikeBf16) {
  TrainConfig c = small_config(ModelType::kGPT2);
  c.mixed_precision = DType::kBFloat16;
  const Plan bf16 = plan_training(c, 4, 4);
  c.mixed_precision = DType::kFloat16;
  const Plan fp16 = plan_training(c, 4, 4);
  EXPECT_EQ(fp16.memory.gathered, bf16.memory.gathered);
  EXPECT_EQ(fp16.memory.grad_buffers, bf16.memory.grad_buffers);
  EXPECT_EQ(fp16.memory.activations, bf16.memory.activations);
  EXPECT_EQ(fp16.memory.model_state(), bf16.memory.model_state());
  EXPECT_EQ(fp16.comm.all_gather, bf16.comm.all_gather);
  EXPECT_EQ(fp16.comm.reduce_scatter, bf16.comm.reduce_scatter);
  c.mixed_precision = DType::kFloat32;
  EXPECT_GT(plan_training(c, 4, 4).memory.gathered, fp16.memory.gathered);
}

TEST(PlanLlama, MatchesRuntime) {
  TrainConfig c = small_config(ModelType::kLlama);
  c.model.dim = 40;  // head size 10: rotary embeddings need it even
  c.model.n_kv_head = 2;
  c.fsdp.forward_prefetch = true;
  expect_plan_holds(c);
}

// One step's live-tensor peak and the plan's total under two settings of `c` (`set(c, false)`,
// then `set(c, true)`), and how much the first exceeds the second, measured and planned: what
// the PlanActivations tests hold the plan to.
struct PeakDifference {
  int64_t first_peak = 0, first_plan = 0, second_peak = 0, second_plan = 0;
  double measured() const { return static_cast<double>(first_peak - second_peak); }
  double planned() const { return static_cast<double>(first_plan - second_plan); }
};
PeakDifference peak_difference(TrainConfig c, const std::function<void(TrainConfig&, bool)>& set) {
  const int n = test::world()->size();
  PeakDifference d;
  set(c, false);
  d.first_peak = run_one_step(c).peak_live_tensors;
  d.first_plan = plan_training(c, n, n).memory.total();
  set(c, true);
  d.second_peak = run_one_step(c).peak_live_tensors;
  d.second_plan = plan_training(c, n, n).memory.total();
  return d;
}

// The activation estimate follows the attention kernel. At sequence 128 the explicit kernel's
// saved scores (b a s^2; Llama's also in fp32 before the cast back, below fp32) outweigh the rest
// of a block, and the fused kernel keeps only an fp32 log-sum-exp. The same step's live-tensor
// peaks under the two kernels must differ by what the plan says they differ, give or take what
// the plan leaves out: at the backward's peak the explicit kernel also holds the gradient of one
// block's scores, at most about one block's share of the 12 (1/12 above; measured on LibTorch
// 2.6: 1.04 to 1.08), and nothing should come in below (2 % for allocator rounding). With the
// scores counted for both kernels the planned difference would be 0; with Llama's counted at e
// bytes, a third of what it is in bf16. Both kernels exist on LibTorch 2.x only.
TEST(PlanActivations, FollowTheAttentionKernel) {
  if (!attention_kernel_available(AttentionKernel::kFused)) {
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has the explicit attention kernel only";
  }
  for (ModelType type : {ModelType::kGPT2, ModelType::kLlama}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      TrainConfig c = small_config(type);
      c.model.dim = 40;  // Llama: head size 10, even for rotary embeddings
      c.model.n_layer = 12;
      c.data.seq_len = 128;
      c.mixed_precision = dtype;
      const PeakDifference d = peak_difference(c, [](TrainConfig& t, bool fused) {
        t.model.attention = fused ? AttentionKernel::kFused : AttentionKernel::kExplicit;
      });
      const double planned = d.planned(), measured = d.measured();
      ASSERT_GT(planned, 0);
      const std::string what = std::string(to_string(type)) + " " + dtype_name(dtype);
      if (test::world()->rank() == 0) {
        std::cout << "[ activations ] " << what
                  << ": explicit - fused, measured / planned = " << measured / planned << "\n";
      }
      EXPECT_GE(measured / planned, 0.98) << what << ": measured " << measured << " bytes";
      EXPECT_LE(measured / planned, 1.0 + 1.5 / c.model.n_layer)
          << what << ": measured " << measured << " bytes";
    }
  }
}

// The logits' share follows the loss (docs/plan.md, [Note: plan logits]): with a vocabulary of
// 50,000 and 512 rows a step, the logits whole (two fp32 copies, 195 MiB) outweigh the rest of
// this narrow model, and the fused head holds a chunk of 256 rows and the weight's gradient. The
// same step's live-tensor peaks, whole and fused, must differ by what the plan says: the fusion
// saves at least 0.95 of it, and in fp32 at most 1.10 (measured 1.000 on LibTorch 1.13). In bf16
// only the first: there the unfused loss's forward also holds a 64 MiB chunk of the logits cast
// to fp32 and its exponentials (about 100 MB at any batch, measured), which the plan leaves out,
// so more is saved than planned (measured 7.0 at this size on LibTorch 1.13 and 2.14).
TEST(PlanActivations, FollowTheLoss) {
  const int n = test::world()->size();
  if (n > 2) {
    GTEST_SKIP() << "the logits' share does not depend on the world size: sizes 1 and 2 check it "
                    "(a 50,000-token step takes 4 ranks on 2 cores 10 s)";
  }
  for (ModelType type : {ModelType::kGPT2, ModelType::kLlama}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      TrainConfig c = small_config(type);
      c.model.vocab_size = 50000;
      c.model.n_embd = c.model.dim = 32;
      c.model.n_layer = 2;
      c.data.seq_len = 256;
      c.train.micro_batch_size = 2;
      c.mixed_precision = dtype;
      for (bool fused : {false, true}) {
        c.train.fused_loss = fused;
        EXPECT_EQ(plan_training(c, n, n).memory.fused_loss, fused);
      }
      const PeakDifference d =
          peak_difference(c, [](TrainConfig& t, bool fused) { t.train.fused_loss = fused; });
      const double planned = d.planned(), measured = d.measured();
      ASSERT_GT(planned, 0);
      const std::string what = std::string(to_string(type)) + " " + dtype_name(dtype);
      if (test::world()->rank() == 0) {
        std::cout << "[ logits ] " << what
                  << ": whole - fused, measured / planned = " << measured / planned << " (whole "
                  << d.first_peak << " / " << d.first_plan << ", fused " << d.second_peak << " / "
                  << d.second_plan << ")\n";
      }
      EXPECT_GE(measured / planned, 0.95) << what << ": measured " << measured << " bytes";
      if (dtype == DType::kFloat32) {
        EXPECT_LE(measured / planned, 1.10) << what << ": measured " << measured << " bytes";
      }
    }
  }
}

// Selective checkpointing by layer (fsdp_config.activation_checkpointing_every): of 4 blocks the
// 1st and 3rd recompute, and the 2nd and 4th keep their activations. The peak of every second
// block is at the end of forward (two blocks' activations, two inputs), that of every block during
// the last one's recomputation (four inputs, one block's activations): the plan counting a
// recomputed block on top of the kept ones there would plan twice the difference (measured 0.49
// and 0.45 of it). The same step's live-tensor peaks must differ by what the plan says, within
// 15 % (allocator rounding and the few tensors of a block the plan does not count: measured 0.93
// to 1.05 on LibTorch 1.13 at 1 and 2 ranks, 0.89 to 1.09 on 2.6 with its fused attention).
TEST(PlanActivations, FollowTheCheckpointedBlocks) {
  const int n = test::world()->size();
  if (n > 2) {
    GTEST_SKIP() << "the activations do not depend on the world size: sizes 1 and 2 check them";
  }
  for (ModelType type : {ModelType::kGPT2, ModelType::kLlama}) {
    TrainConfig c = small_config(type);
    c.model.dim = 40;  // Llama: head size 10, even for rotary embeddings
    c.model.n_layer = 4;
    c.data.seq_len = 128;
    c.fsdp.activation_checkpointing = true;
    const PeakDifference d = peak_difference(c, [](TrainConfig& t, bool every_block) {
      t.fsdp.activation_checkpointing_every = every_block ? 1 : 2;
    });
    const double planned = d.planned(), measured = d.measured();
    ASSERT_GT(planned, 0);
    const std::string what = to_string(type);
    if (test::world()->rank() == 0) {
      std::cout << "[ checkpointing ] " << what
                << ": every second - every block, measured / planned = " << measured / planned
                << "\n";
    }
    EXPECT_GE(measured / planned, 0.85) << what << ": measured " << measured << " bytes";
    EXPECT_LE(measured / planned, 1.15) << what << ": measured " << measured << " bytes";
  }
}

// The scale claim of the speed issue, as arithmetic: GPT-2 large (774M) at world size 2 in fp32
// with AdamW needs 12 GiB of model state per rank unsharded, more than half of this 24 GiB
// machine each, and half that with FULL_SHARD.
TEST(PlanScale, Gpt2LargeModelStateHalvesWithFullShard) {
  if (test::world()->rank() != 0) GTEST_SKIP() << "arithmetic: rank 0 checks it";
  TrainConfig c;
  c.model.n_layer = 36;
  c.model.n_head = 20;
  c.model.n_embd = 1280;
  c.model.n_positions = 1024;
  c.data.seq_len = 512;
  c.train.micro_batch_size = 1;
  const std::vector<UnitSize> units = plan_units(c);  // builds the model once
  c.fsdp.sharding_strategy = ShardingStrategy::kNoShard;
  const Plan unsharded = plan_training(c, 2, 2, units);
  c.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  const Plan sharded = plan_training(c, 2, 2, units);
  EXPECT_NEAR(unsharded.parameters / 1e6, 774.0, 1.0);
  EXPECT_EQ(unsharded.memory.model_state(), 16 * unsharded.parameters);
  EXPECT_NEAR(static_cast<double>(sharded.memory.model_state()) / unsharded.memory.model_state(),
              0.5, 1e-6);
}

}  // namespace
}  // namespace fsdp
