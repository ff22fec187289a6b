// The fused element-wise nodes (fsdp/models/fused_ops.h) against the composite ops they replace,
// on the device under test (FSDP_TEST_DEVICE: the CPU in test_fused_ops, the GPU's kernels in
// fused_ops_cuda, skipped with the reason where there is none): RMSNorm (Llama's and Gemma's),
// the gated activations (SiLU and GELU, two tensors and one halved), the rotary embedding (whole
// and partial, one table or one per row), then whole Llama blocks with and without them.
//
// What must hold, and why these bounds:
// - forward equals the composite ops within one rounding of the dtype (2 eps relative to the
//   largest value, eps = 2^-10, 2^-7 for fp16, bf16; fp32 1e-6, a few roundings of a sum over a
//   thousand channels: 4.3e-7 measured): the kernels round at the same points, but sum a row's
//   squares in another order (and a GPU's take exp, tanh and rsqrt from CUDA's library, and may
//   contract a product and a sum into one rounding);
// - backward against the derivative in fp64 from the same inputs (autograd through the composite
//   ops): the fused node computes in fp32 and rounds once, so its error is one rounding of its
//   output plus fp32's arithmetic: within 2 eps of the largest gradient (fp32: 1e-5, for sums
//   over a thousand channels). The gated activation on the CPU is ATen's ops with autograd's own
//   arithmetic, so there it equals the composite forward and backward bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

#include "fsdp/models/attention.h"
#include "fsdp/models/fused_ops.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/models/llama.h"
#include "test_util.h"

namespace fsdp {
namespace {

// max |a - b| over max |b|: a relative error that a few near-zero entries do not dominate.
double rel(const at::Tensor& a, const at::Tensor& b) {
  if (b.numel() == 0) return a.numel() == 0 ? 0.0 : 1.0;
  const at::Tensor a64 = a.detach().to(at::kCPU).to(at::kDouble);
  const at::Tensor b64 = b.detach().to(at::kCPU).to(at::kDouble);
  return (a64 - b64).abs().max().item<double>() / std::max(1e-30, b64.abs().max().item<double>());
}

double eps_of(at::ScalarType t) {
  return t == at::kFloat ? 1.0 / (1 << 23) : t == at::kHalf ? 1.0 / (1 << 10) : 1.0 / (1 << 7);
}

double forward_bound(at::ScalarType t) { return t == at::kFloat ? 1e-6 : 2 * eps_of(t); }

double backward_bound(at::ScalarType t) { return t == at::kFloat ? 1e-5 : 2 * eps_of(t); }

std::vector<at::ScalarType> dtypes() {
  // fp16 on the CPU needs LibTorch 2.x's kernels (1.13 has no fp16 SiLU or GELU there).
  if (test::device_under_test().is_cpu() && !test::fp16_skip_reason().empty()) {
    return {at::kFloat, at::kBFloat16};
  }
  return {at::kFloat, at::kHalf, at::kBFloat16};
}

// Inputs on the device in `dtype`, requiring gradients.
std::vector<at::Tensor> leaves(const std::vector<at::Tensor>& values, at::ScalarType dtype) {
  std::vector<at::Tensor> out;
  for (const auto& v : values) {
    out.push_back(v.to(test::device_under_test()).to(dtype).detach().requires_grad_(true));
  }
  return out;
}

struct Run {
  at::Tensor y;
  std::vector<at::Tensor> grads;
};

// y = f(inputs), then backward with upstream gradient `dy` (to y's device and dtype).
Run run(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
        const std::vector<at::Tensor>& inputs, const at::Tensor& dy) {
  at::Tensor y = f(inputs);
  y.backward(dy.to(y.device()).to(y.scalar_type()));
  Run r{y.detach(), {}};
  for (const auto& x : inputs) r.grads.push_back(x.grad());
  return r;
}

// The fused node against the composite ops on the device under test in every dtype, and the
// fused gradients against the composite ones in fp64 from the same inputs. `bitwise_on_cpu`: on the
// CPU the fused node is the composite ops' arithmetic, forward and backward.
void expect_matches_composite(
    const std::string& what,
    const std::function<at::Tensor(const std::vector<at::Tensor>&, bool fused)>& f,
    const std::vector<at::Tensor>& values, const at::Tensor& dy, bool bitwise_on_cpu) {
  const c10::Device device = test::device_under_test();
  for (const at::ScalarType dtype : dtypes()) {
    SCOPED_TRACE(what + " in " + c10::toString(dtype) + " on " + device.str());
    auto fused_f = [&](const std::vector<at::Tensor>& in) { return f(in, true); };
    auto composite_f = [&](const std::vector<at::Tensor>& in) { return f(in, false); };
    const std::vector<at::Tensor> inputs = leaves(values, dtype);
    const Run fused = run(fused_f, inputs, dy);
    const Run composite = run(composite_f, leaves(values, dtype), dy);
    // fp64 from the very inputs the two above started from, on the CPU.
    std::vector<at::Tensor> exact_inputs;
    for (const auto& x : inputs) {
      exact_inputs.push_back(x.detach().to(at::kCPU).to(at::kDouble).requires_grad_(true));
    }
    const Run exact = run(composite_f, exact_inputs, dy.to(dtype).to(at::kDouble));

    EXPECT_EQ(fused.y.scalar_type(), composite.y.scalar_type());
    EXPECT_EQ(fused.y.sizes(), composite.y.sizes());
    EXPECT_LE(rel(fused.y, composite.y), forward_bound(dtype)) << "forward";
    if (bitwise_on_cpu && device.is_cpu()) {
      EXPECT_TRUE(at::equal(fused.y, composite.y));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      SCOPED_TRACE("gradient of input " + std::to_string(i));
      ASSERT_TRUE(fused.grads[i].defined());
      EXPECT_EQ(fused.grads[i].scalar_type(), inputs[i].scalar_type());
      EXPECT_EQ(fused.grads[i].sizes(), inputs[i].sizes());
      EXPECT_LE(rel(fused.grads[i], exact.grads[i]), backward_bound(dtype));
      if (bitwise_on_cpu && device.is_cpu()) {
        EXPECT_TRUE(at::equal(fused.grads[i], composite.grads[i]));
      }
    }
  }
}

// Shapes for a GPU's kernels as much as for the CPU's loops: 96 and 128 channels (a head's
// width: one warp a row), 129 and 300 (128 threads), 1,000 (256, not a multiple of any block),
// 150 rows (the weight's gradient summed in 3 parts), 40,000 rows of 8 (512 parts, the most, each
// lane looping), no rows at all; on a GPU also 2^20 + 5 rows (more than the grid: the row loop).
// Llama's and Gemma's forms.
TEST(FusedOps, RmsNormMatchesTheComposite) {
  torch::manual_seed(1);
  std::vector<std::vector<int64_t>> shapes = {{3, 5, 96},   {2, 3, 128}, {2, 3, 129}, {3, 50, 300},
                                              {3, 5, 1000}, {40000, 8},  {0, 64}};
  if (test::device_under_test().is_cuda()) shapes.push_back({(1 << 20) + 5, 1});
  for (const auto& shape : shapes) {
    const int64_t C = shape.back();
    for (const bool offset : {false, true}) {
      const at::Tensor x = torch::randn(shape) * 3 + 0.5;
      const at::Tensor w = torch::randn({C}) * 0.5 + (offset ? 0.0 : 1.0);
      auto f = [&](const std::vector<at::Tensor>& in, bool fused) {
        return rms_norm(in[0], in[1], 1e-6, offset, fused);
      };
      expect_matches_composite("rms_norm " + std::to_string(x.numel() / std::max<int64_t>(C, 1)) +
                                   " rows x " + std::to_string(C) + (offset ? " offset" : ""),
                               f, {x, w}, torch::randn(shape), /*bitwise_on_cpu=*/false);
    }
  }
}

// What a caller may do with a node's input and output as with the composite ops': a frozen
// weight, a forward without autograd, an input that is not contiguous (a transpose), the output
// changed in place before backward.
TEST(FusedOps, NodesBehaveAsTheCompositeOpsForCallers) {
  torch::manual_seed(5);
  const c10::Device device = test::device_under_test();
  const at::Tensor x0 = torch::randn({6, 32}).to(device);
  const at::Tensor w = (torch::randn({32}) + 1).to(device);  // frozen: no gradient wanted
  at::Tensor x = x0.clone().requires_grad_(true);
  rms_norm(x, w, 1e-6, false, true).sum().backward();
  at::Tensor xc = x0.clone().requires_grad_(true);
  rms_norm(xc, w, 1e-6, false, false).sum().backward();
  EXPECT_LE(rel(x.grad(), xc.grad()), 1e-5);
  {
    torch::NoGradGuard no_grad;
    EXPECT_LE(rel(rms_norm(x0, w, 1e-6, false, true), rms_norm(x0, w, 1e-6, false, false)), 1e-6);
  }
  const at::Tensor t = x0.t().contiguous().t();  // [6, 32], not contiguous
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_LE(rel(rms_norm(t, w, 1e-6, true, true), rms_norm(t, w, 1e-6, true, false)), 1e-6);
  for (const bool fused : {true, false}) {
    at::Tensor a = x0.clone().requires_grad_(true);
    at::Tensor y = rms_norm(a, w, 1e-6, false, fused);
    y.add_(1);
    at::Tensor g = gated_activation(y, y * 2, GateActivation::kSilu, fused);
    g.mul_(3);
    EXPECT_NO_THROW(g.sum().backward()) << (fused ? "fused" : "composite");
  }
}

TEST(FusedOps, GatedActivationsMatchTheComposite) {
  torch::manual_seed(2);
  for (const auto act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
    const std::string name = act == GateActivation::kSilu ? "silu" : "gelu_tanh";
    auto two = [&](const std::vector<at::Tensor>& in, bool fused) {
      return gated_activation(in[0], in[1], act, fused);
    };
    expect_matches_composite(name + " gate, up", two,
                             {torch::randn({2, 7, 300}) * 3, torch::randn({2, 7, 300})},
                             torch::randn({2, 7, 300}), /*bitwise_on_cpu=*/true);
    auto halves = [&](const std::vector<at::Tensor>& in, bool fused) {
      return gated_activation(in[0], act, fused);
    };
    expect_matches_composite(name + " gate_up", halves, {torch::randn({2, 7, 600}) * 3},
                             torch::randn({2, 7, 300}), /*bitwise_on_cpu=*/true);
    // More rows than a GPU grid's second dimension, one tensor of two halves.
    expect_matches_composite(name + " gate_up 70000 rows", halves, {torch::randn({70000, 12})},
                             torch::randn({70000, 6}), /*bitwise_on_cpu=*/true);
    // Two views of one tensor: rows 33,000 apart in the inputs, 16,500 in the output, wider than
    // a GPU row's blocks cover in one pass.
    auto strided = [&](const std::vector<at::Tensor>& in, bool fused) {
      return gated_activation(in[0].narrow(-1, 0, 16500), in[0].narrow(-1, 16500, 16500), act,
                              fused);
    };
    expect_matches_composite(name + " strided", strided, {torch::randn({2, 33000})},
                             torch::randn({2, 16500}), /*bitwise_on_cpu=*/true);
  }
}

TEST(FusedOps, RotaryEmbeddingMatchesTheComposite) {
  torch::manual_seed(3);
  // Whole and partial (12 of 16 channels: Phi-4-mini's 0.75), one table for every row and one
  // per row (packed sequences' positions). Random tables: the backward must not lean on cos and
  // sin repeating over the halves, as RoPE's own do.
  for (const int64_t rd : {16, 12}) {
    for (const int64_t table_rows : {1, 2}) {
      const at::Tensor cos = torch::rand({table_rows, 6, rd}) * 2 - 1;
      const at::Tensor sin = torch::rand({table_rows, 6, rd}) * 2 - 1;
      auto f = [&](const std::vector<at::Tensor>& in, bool fused) {
        return rotary_embedding(in[0], cos.to(in[0].options()), sin.to(in[0].options()), fused);
      };
      expect_matches_composite(
          "rotary rd=" + std::to_string(rd) + " tables=" + std::to_string(table_rows), f,
          {torch::randn({2, 6, 3, 16})}, torch::randn({2, 6, 3, 16}), /*bitwise_on_cpu=*/false);
    }
  }
  // More (b, t) rows than a GPU grid's second dimension, with a table per row and a partial
  // rotation; then a row wider than a GPU row's blocks cover in one pass.
  struct Large {
    std::vector<int64_t> x;
    int64_t table_rows, rd;
  };
  for (const Large& l : {Large{{2, 33000, 1, 8}, 2, 6}, Large{{1, 2, 130, 128}, 1, 64}}) {
    const at::Tensor cos = torch::rand({l.table_rows, l.x[1], l.rd}) * 2 - 1;
    const at::Tensor sin = torch::rand({l.table_rows, l.x[1], l.rd}) * 2 - 1;
    auto f = [&](const std::vector<at::Tensor>& in, bool fused) {
      return rotary_embedding(in[0], cos.to(in[0].options()), sin.to(in[0].options()), fused);
    };
    expect_matches_composite("rotary " + std::to_string(l.x[1]) + " positions", f,
                             {torch::randn(l.x)}, torch::randn(l.x), /*bitwise_on_cpu=*/false);
  }
}

TEST(FusedOps, RotaryEmbeddingRefusesMismatchedTables) {
  const at::Tensor x = torch::randn({2, 6, 3, 16});
  const at::Tensor odd = torch::randn({1, 6, 7});
  EXPECT_THROW(rotary_embedding(x, odd, odd, true), std::invalid_argument);
  const at::Tensor wide = torch::randn({1, 6, 18});
  EXPECT_THROW(rotary_embedding(x, wide, wide, true), std::invalid_argument);
  const at::Tensor rows = torch::randn({3, 6, 16});  // neither 1 nor B tables
  EXPECT_THROW(rotary_embedding(x, rows, rows, true), std::invalid_argument);
}

// Whole models: a Llama with every fused node in use (Qwen3's q/k norms, Phi-3's fused
// projections with a partial rotation, Gemma's offset and sandwich norms with GeGLU), with and
// without them, from the same weights on the same tokens, plain and packed (positions per row).
// fp32: the loss within 1e-6 (the norms' sums in another order), the gradients within fp32
// roundings of a written-out derivative through 2 layers: 1e-5 of the largest (1e-4 on a GPU).
TEST(FusedOps, LlamaTrainsTheSameWithAndWithout) {
  const c10::Device device = test::device_under_test();
  LlamaConfig kin = LlamaConfig::tiny();
  kin.qk_norm = true;
  kin.fused_projections = true;
  kin.partial_rotary_factor = 0.75;
  kin.norm_offset = true;
  kin.sandwich_norms = true;
  kin.gelu_tanh = true;
  for (const LlamaConfig& base : {LlamaConfig::tiny(), kin}) {
    for (const bool packed : {false, true}) {
      SCOPED_TRACE(std::string(base.qk_norm ? "Llama kin" : "Llama") + (packed ? " packed" : ""));
      torch::manual_seed(4);
      const at::Tensor idx = torch::randint(0, base.vocab_size, {2, 12}, torch::kLong);
      SequenceLayout layout;
      if (packed) {
        layout = packed_layout(
            torch::tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6}).view({1, 12}).repeat({2, 1}),
            device);
      }
      std::vector<at::Tensor> losses;
      std::vector<std::vector<at::Tensor>> grads;
      for (const bool fused : {true, false}) {
        LlamaConfig c = base;
        c.fused_ops = fused;
        Llama model(c);
        init_llama_weights(*model, 9);
        model->to(device);
        const at::Tensor logits = model->forward(idx.to(device), layout);
        const at::Tensor loss = gpt2_loss(logits, idx.to(device));
        loss.backward();
        losses.push_back(loss.detach());
        std::vector<at::Tensor> g;
        for (const auto& p : model->parameters()) g.push_back(p.grad());
        grads.push_back(g);
      }
      EXPECT_LE(rel(losses[0], losses[1]), 1e-6);
      for (size_t i = 0; i < grads[0].size(); ++i) {
        EXPECT_LE(rel(grads[0][i], grads[1][i]), device.is_cpu() ? 1e-5 : 1e-4)
            << "parameter " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fsdp
