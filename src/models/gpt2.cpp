// GPT-2: configuration checks, the modules' forward passes, the loss and the deterministic
// initialisation. Meant to be read in one sitting; no dropout. Attention goes through
// causal_attention (fsdp/models/attention.h): fused on LibTorch 2.x, written out on 1.13.
//
// Shape legend (as in llm.c):
//   B  batch size            T  time (sequence length, <= n_positions)
//   C  channels (n_embd)     V  vocabulary size
//   nh heads (n_head)        hs head size, C / nh
#include "fsdp/models/gpt2.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "fsdp/hooks.h"
#include "fsdp/init.h"
#include "fsdp/models/fused_loss.h"
#include "fsdp/models/matmul.h"

namespace fsdp {

// --- configuration ------------------------------------------------------------------------------

namespace {

void require_positive(const char* field, int64_t value) {
  if (value <= 0) {
    throw std::invalid_argument(std::string("GPT2Config.") + field + " must be positive, got " +
                                std::to_string(value));
  }
}

}  // namespace

void GPT2Config::validate() const {
  require_positive("vocab_size", vocab_size);
  require_positive("n_positions", n_positions);
  require_positive("n_embd", n_embd);
  require_positive("n_layer", n_layer);
  require_positive("n_head", n_head);
  if (n_embd % n_head != 0) {
    throw std::invalid_argument("GPT2Config.n_embd (" + std::to_string(n_embd) +
                                ") must be divisible by n_head (" + std::to_string(n_head) + ")");
  }
  if (!(layer_norm_eps > 0)) {
    throw std::invalid_argument("GPT2Config.layer_norm_eps must be positive, got " +
                                std::to_string(layer_norm_eps));
  }
  check_attention_kernel(attention, "GPT2Config.attention");
}

GPT2Config GPT2Config::gpt2_124m() { return GPT2Config{}; }

GPT2Config GPT2Config::tiny() {
  GPT2Config c;
  c.vocab_size = 256;
  c.n_positions = 64;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  return c;
}

// --- modules ------------------------------------------------------------------------------------

Conv1DImpl::Conv1DImpl(int64_t in_features, int64_t out_features) {
  // Zeros until init_gpt2_weights draws the values (GPT2Impl's constructor does).
  weight = register_parameter("weight", at::zeros({in_features, out_features}));
  bias = register_parameter("bias", at::zeros({out_features}));
}

at::Tensor Conv1DImpl::forward(const at::Tensor& x) {
  // HF's Conv1D exactly: bias + x W on a 2-D view, then the leading dimensions restored (in bf16
  // on a CPU without oneDNN's bf16 GEMM, fsdp/models/matmul.h's product through fp32).
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = weight.size(1);
  const at::Tensor y = bf16_matmul_through_fp32(x)
                           ? fsdp::linear(x, weight.t(), bias)
                           : at::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(out_shape);
  return lora_.attached() ? y + lora_.forward(x, is_training()) : y;
}

GPT2AttentionImpl::GPT2AttentionImpl(const GPT2Config& config)
    : n_head(config.n_head), attention(config.attention) {
  c_attn = register_module("c_attn", Conv1D(config.n_embd, 3 * config.n_embd));
  c_proj = register_module("c_proj", Conv1D(config.n_embd, config.n_embd));
}

at::Tensor GPT2AttentionImpl::forward(const at::Tensor& x, const SequenceLayout& layout) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head;
  // [B, T, 3C] -> q, k, v, each [B, nh, T, hs]
  auto qkv = c_attn->forward(x).split(C, /*dim=*/2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
  at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  // [B, nh, T, hs] -> [B, T, C]
  AttentionOptions options;
  options.same_sequence = layout.same_sequence;
  at::Tensor y = causal_attention(q, k, v, attention, /*softmax_in_fp32=*/false, options)
                     .transpose(1, 2)
                     .contiguous()
                     .view({B, T, C});
  return c_proj->forward(y);
}

GPT2MLPImpl::GPT2MLPImpl(const GPT2Config& config) {
  c_fc = register_module("c_fc", Conv1D(config.n_embd, 4 * config.n_embd));
  c_proj = register_module("c_proj", Conv1D(4 * config.n_embd, config.n_embd));
}

at::Tensor GPT2MLPImpl::forward(const at::Tensor& x) {
  return c_proj->forward(at::gelu(c_fc->forward(x), "tanh"));
}

namespace {
torch::nn::LayerNorm layer_norm(const GPT2Config& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.n_embd}).eps(config.layer_norm_eps));
}
}  // namespace

GPT2BlockImpl::GPT2BlockImpl(const GPT2Config& config) {
  ln_1 = register_module("ln_1", layer_norm(config));
  attn = register_module("attn", GPT2Attention(config));
  ln_2 = register_module("ln_2", layer_norm(config));
  mlp = register_module("mlp", GPT2MLP(config));
}

at::Tensor GPT2BlockImpl::forward(const at::Tensor& x, const SequenceLayout& layout) {
  at::Tensor h = x + attn->forward(ln_1->forward(x), layout);
  return h + mlp->forward(ln_2->forward(h));
}

namespace {
// With config.deferred, a submodule gives its parameters' bytes up as soon as it is built, so that
// building the model never holds more than its largest submodule (fsdp/init.h).
template <typename M>
M built(M module, const GPT2Config& config) {
  if (config.deferred) fsdp::defer_parameters(*module);
  return module;
}
}  // namespace

GPT2TransformerImpl::GPT2TransformerImpl(const GPT2Config& config) {
  wte =
      register_module("wte", built(torch::nn::Embedding(config.vocab_size, config.n_embd), config));
  wpe = register_module("wpe",
                        built(torch::nn::Embedding(config.n_positions, config.n_embd), config));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(built(GPT2Block(config), config));
  ln_f = register_module("ln_f", built(layer_norm(config), config));
}

GPT2Impl::GPT2Impl(GPT2Config config) : config_(config) {
  config_.validate();
  transformer_ = register_module("transformer", GPT2Transformer(config_));
  for (const auto& block : *transformer_->h) {
    blocks_.emplace_back(std::dynamic_pointer_cast<GPT2BlockImpl>(block));
  }
  if (!config_.deferred) init_gpt2_weights(*this, 0);
}

at::Tensor GPT2Impl::hidden_states(const at::Tensor& idx, const SequenceLayout& layout) {
  if (idx.dim() != 2 || idx.scalar_type() != at::kLong) {
    throw std::invalid_argument("GPT2::forward expects token ids [B, T] of type int64, got " +
                                std::to_string(idx.dim()) + "-D " +
                                std::string(c10::toString(idx.scalar_type())));
  }
  const int64_t T = idx.size(1);
  if (T > config_.n_positions) {
    throw std::invalid_argument(
        "GPT2::forward: sequence length " + std::to_string(T) +
        " exceeds the context length n_positions = " + std::to_string(config_.n_positions));
  }
  check_layout(layout, idx, config_.n_positions, "GPT2::forward");
  auto& tr = *transformer_;
  const at::Tensor pos =
      layout.positions.defined() ? layout.positions.to(idx.device()) : at::arange(T, idx.options());
  at::Tensor x = tr.wte->forward(idx) + tr.wpe->forward(pos);  // [B, T, C]
  for (auto& block : blocks_) {
    x = fsdp::forward(block, x, layout);  // the runtime's interception point
  }
  return tr.ln_f->forward(x);
}

at::Tensor GPT2Impl::forward(const at::Tensor& idx, const SequenceLayout& layout) {
  // The blocks first, then the head's transpose: autograd runs later-made nodes first, so the
  // head's gradient is ready before the blocks' (the split root reduction sends it early).
  const at::Tensor x = hidden_states(idx, layout);
  return at::matmul(x, transformer_->wte->weight.t());  // [B, T, V], tied to the embeddings
}

at::Tensor GPT2Impl::forward(const at::Tensor& idx, const SequenceLayout& layout,
                             const LossTargets& loss) {
  const at::Tensor x = hidden_states(idx, layout);
  return linear_cross_entropy(x.reshape({-1, x.size(-1)}), transformer_->wte->weight,
                              loss.targets.reshape({-1}), loss.mean);
}

namespace {

// at::cross_entropy_loss's default: targets of this value take no part in the loss or its mean.
constexpr int64_t kIgnoredTarget = -100;
// fp32 scratch of at most this many bytes at a time: rows of the logits are taken in chunks.
constexpr int64_t kChunkBytes = int64_t{64} << 20;

// Cross entropy over the vocabulary, logits [N, V] in any float dtype, computed in fp32 a chunk
// of rows at a time. Why its own autograd function: it keeps only the logits as they are for
// backward and makes one tensor of their size and dtype there (softmax minus the one-hot target),
// where `.to(kFloat)` then log_softmax and nll_loss keep an fp32 copy and log_softmax's output and
// make two fp32 tensors more in backward, three at once. At GPT-2's 50257 entries the loss is the
// step's peak of live memory (bf16, 16 x 512 tokens: 785 MiB per bf16 copy, 1571 per fp32 one).
// The loss is log_softmax's (lse - logit, lse by max shift); the gradient exp(logit - lse) (fp32
// logits, in place) or softmax (below fp32, in scratch), minus 1 at the target, rounded to the
// logits' dtype once.
struct VocabCrossEntropy : public torch::autograd::Function<VocabCrossEntropy> {
  // Calls fn(first row, rows) for each chunk of the logits' rows.
  template <typename Fn>
  static void for_each_chunk(const at::Tensor& logits, Fn fn) {
    const int64_t n = logits.size(0);
    const int64_t step = std::max<int64_t>(1, kChunkBytes / (logits.size(1) * 4));
    for (int64_t r = 0; r < n; r += step) fn(r, std::min(step, n - r));
  }

  // mean: divided by the number of targets that count; else their sum.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, bool mean) {
    const at::Tensor valid = targets.ne(kIgnoredTarget);
    const at::Tensor index = targets.masked_fill(valid.logical_not(), 0).unsqueeze(1);
    at::Tensor lse = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
    for_each_chunk(logits, [&](int64_t r, int64_t rows) {
      lse.narrow(0, r, rows).copy_(at::logsumexp(logits.narrow(0, r, rows).to(at::kFloat), {1}));
    });
    const at::Tensor picked = logits.gather(1, index).squeeze(1).to(at::kFloat);
    const at::Tensor count =
        mean ? valid.sum().to(at::kFloat) : at::ones({}, logits.options().dtype(at::kFloat));
    ctx->save_for_backward({logits, lse, index, valid, count});
    return ((lse - picked) * valid).sum() / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &lse = saved[1], &index = saved[2];
    const at::Tensor scale = (grads[0] / saved[4] * saved[3]).unsqueeze(1);  // 0 where ignored
    at::Tensor grad = at::empty_like(logits);
    for_each_chunk(logits, [&](int64_t r, int64_t rows) {
      const at::Tensor x = logits.narrow(0, r, rows),
                       minus_one = at::full({rows, 1}, -1.0, lse.options());
      at::Tensor out = grad.narrow(0, r, rows);
      if (x.scalar_type() == at::kFloat) {  // in the gradient itself: no scratch
        at::sub_out(out, x, lse.narrow(0, r, rows).unsqueeze(1)).exp_();
        out.scatter_add_(1, index.narrow(0, r, rows), minus_one).mul_(scale.narrow(0, r, rows));
      } else {  // softmax into fp32 scratch (one fused pass from bf16 on GPUs), rounded once
        at::Tensor g = at::softmax(x, 1, at::kFloat);
        g.scatter_add_(1, index.narrow(0, r, rows), minus_one);
        at::mul_out(out, g, scale.narrow(0, r, rows));
      }
    });
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor gpt2_loss(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return VocabCrossEntropy::apply(logits.reshape({-1, V}), targets.reshape({-1}), true);
}

at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return VocabCrossEntropy::apply(logits.reshape({-1, V}), targets.reshape({-1}), false);
}

// --- initialisation -----------------------------------------------------------------------------

namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The owning module's own name: "transformer.h.0.ln_1.weight" -> "ln_1".
std::string owner_of(const std::string& name) {
  const auto last = name.rfind('.');
  if (last == std::string::npos || last == 0) return "";
  const auto before = name.rfind('.', last - 1);
  return name.substr(before == std::string::npos ? 0 : before + 1,
                     last - (before == std::string::npos ? 0 : before + 1));
}

// Draws N(0, std) from the parameter's own generator, in fp32 whatever the parameter's dtype, so
// that a bf16 model gets the rounded fp32 values.
void fill_normal(at::Tensor& p, double std, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor values = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
  values.normal_(0.0, std, gen);
  p.copy_(values);
}

}  // namespace

uint64_t parameter_seed(const std::string& name, uint64_t seed) {
  return splitmix64(fnv1a64(name) ^ splitmix64(seed));
}

void init_gpt2_parameter(const GPT2Config& config, const std::string& name, at::Tensor& p,
                         uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double std = 0.02;
  // GPT-2 paper: residual projections scaled by 1/sqrt(number of residual additions).
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  const std::string owner = owner_of(name);
  if (ends_with(name, ".bias")) {
    p.zero_();
  } else if (owner.rfind("ln_", 0) == 0) {
    p.fill_(1.0);
  } else {
    fill_normal(p, owner == "c_proj" ? residual_std : std, parameter_seed(name, seed));
  }
}

void init_gpt2_weights(GPT2Impl& model, uint64_t seed) {
  for (auto& item : model.named_parameters()) {
    init_gpt2_parameter(model.config(), item.key(), item.value(), seed);
  }
}

ParamInit gpt2_param_init(const GPT2Config& config, uint64_t seed) {
  return [config, seed](const std::string& name, at::Tensor& full) {
    init_gpt2_parameter(config, name, full, seed);
  };
}

}  // namespace fsdp
