// The families' matrix products (fsdp/models/matmul.h): ATen's ops, or for bf16 on CPUs whose
// bf16 GEMM is ATen's slow fallback, one autograd node per product that runs fp32 GEMMs on the
// bf16 inputs and rounds each result (output and gradients) to bf16 once.
#include "fsdp/models/matmul.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace fsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<CpuBf16Matmul> g_mode{CpuBf16Matmul::kAuto};

// What ATen asks before it gives a bf16 GEMM to oneDNN (mkldnn_bf16_device_check): AVX-512 BW,
// VL and DQ. Elsewhere its fallback runs.
bool cpu_has_onednn_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

at::Tensor fp32(const at::Tensor& t) { return t.to(at::kFloat); }

// A weight [out, in] is converted to fp32 a block of rows at a time, each at most this many
// elements (16 MiB in fp32): a 7B MLP's whole weight in fp32 would be 172 MiB a product, beside
// the bf16 one the plan counts, and the host allocator keeps such blocks cached (measured: 744
// MiB held above the live tensors at that model's peak with whole conversions).
constexpr int64_t kWeightBlockElems = int64_t{1} << 22;

int64_t weight_block_rows(const at::Tensor& w) {
  return std::max<int64_t>(1, kWeightBlockElems / std::max<int64_t>(1, w.size(1)));
}

// y = x W^T + b with x [..., in] as rows [R, in]; gradients dx = dy W, dW = dy^T x, db = sum dy.
// Without a bias, b is an empty tensor (LibTorch 1.13's custom functions take no undefined
// tensor among their inputs) and `has_bias` false.
struct LinearThroughFp32 : public torch::autograd::Function<LinearThroughFp32> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, bool has_bias) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["bias"] = has_bias;
    const at::Tensor x32 = fp32(x);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    at::Tensor y = at::empty(shape, x.options());
    const int64_t rows = weight_block_rows(w);
    for (int64_t r = 0; r < w.size(0); r += rows) {
      const int64_t n = std::min(rows, w.size(0) - r);
      const at::Tensor part = at::linear(x32, fp32(w.narrow(0, r, n)),
                                         has_bias ? fp32(b.narrow(0, r, n)) : at::Tensor());
      y.narrow(-1, r, n).copy_(part);  // rounded to bf16 once
    }
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor dy = fp32(grads[0]);
    at::Tensor dx, dw, db;
    const int64_t rows = weight_block_rows(w);
    if (ctx->needs_input_grad(0)) {  // dy W, summed in fp32 over the weight's blocks of rows
      at::Tensor sum;
      for (int64_t r = 0; r < w.size(0); r += rows) {
        const int64_t n = std::min(rows, w.size(0) - r);
        const at::Tensor part = at::matmul(dy.narrow(-1, r, n), fp32(w.narrow(0, r, n)));
        sum = sum.defined() ? sum.add_(part) : part;
      }
      dx = sum.to(x.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {  // dy^T x, a block of the weight's rows at a time
      const at::Tensor dy_rows = dy.reshape({-1, dy.size(-1)});
      const at::Tensor x_rows = fp32(x).reshape({-1, x.size(-1)});
      dw = at::empty(w.sizes(), w.options().memory_format(at::MemoryFormat::Contiguous));
      for (int64_t r = 0; r < w.size(0); r += rows) {
        const int64_t n = std::min(rows, w.size(0) - r);
        dw.narrow(0, r, n).copy_(at::mm(dy_rows.narrow(1, r, n).t(), x_rows));
      }
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) {
      db = dy.reshape({-1, dy.size(-1)}).sum(0).to(x.scalar_type());
    }
    return {dx, dw, db, at::Tensor()};
  }
};

// A batched product [B, n, k] x [B, k, m] runs a slice of B at a time, so that its fp32 copies
// (both inputs and the result before rounding) hold at most an eighth of the batch and at most
// kSliceElems elements: whole, they are twice the bf16 scores of an attention block over again at
// the backward's peak (1.2 of the plan's difference between the attention kernels where the
// native product holds 1.04-1.08, PlanActivations; at sequence 4096 and 32 heads 4 GiB a block).
constexpr int64_t kSliceElems = int64_t{1} << 20;

int64_t batch_slice(int64_t batch, int64_t elems_per_item) {
  const int64_t by_size = kSliceElems / std::max<int64_t>(1, elems_per_item);
  return std::max<int64_t>(1, std::min({batch, (batch + 7) / 8, by_size}));
}

// out[i] = op(a[i], b[i]) rounded into `out`'s dtype, for 3-d a, b, out, a slice at a time.
template <class Op>
void sliced_bmm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, Op op) {
  const int64_t batch = out.size(0);
  const int64_t step = batch_slice(batch, a[0].numel() + b[0].numel() + out.size(1) * out.size(2));
  for (int64_t i = 0; i < batch; i += step) {
    const int64_t n = std::min(step, batch - i);
    out.narrow(0, i, n).copy_(op(fp32(a.narrow(0, i, n)), fp32(b.narrow(0, i, n))));
  }
}

// y = a b over matching batch dimensions; da = dy b^T, db = a^T dy.
struct MatmulThroughFp32 : public torch::autograd::Function<MatmulThroughFp32> {
  static at::Tensor product(const at::Tensor& a, const at::Tensor& b, bool transpose_a,
                            bool transpose_b) {
    const int64_t n = a.size(transpose_a ? -1 : -2), m = b.size(transpose_b ? -2 : -1);
    const at::Tensor a3 = a.reshape({-1, a.size(-2), a.size(-1)});
    const at::Tensor b3 = b.reshape({-1, b.size(-2), b.size(-1)});
    at::Tensor out = at::empty({a3.size(0), n, m}, a.options());
    sliced_bmm(a3, b3, out, [&](const at::Tensor& x, const at::Tensor& y) {
      return at::bmm(transpose_a ? x.transpose(1, 2) : x, transpose_b ? y.transpose(1, 2) : y);
    });
    std::vector<int64_t> shape = a.sizes().vec();
    shape[shape.size() - 2] = n;
    shape.back() = m;
    return out.view(shape);
  }

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return product(a, b, false, false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &dy = grads[0];
    at::Tensor da, db;
    if (ctx->needs_input_grad(0)) da = product(dy, b, false, true).to(a.scalar_type());
    if (ctx->needs_input_grad(1)) db = product(a, dy, true, false).to(b.scalar_type());
    return {da, db};
  }
};

}  // namespace

void set_cpu_bf16_matmul(CpuBf16Matmul mode) { g_mode.store(mode); }

CpuBf16Matmul cpu_bf16_matmul() { return g_mode.load(); }

bool bf16_matmul_through_fp32(const at::Tensor& t) {
  if (!t.is_cpu() || t.scalar_type() != at::kBFloat16) return false;
  switch (g_mode.load()) {
    case CpuBf16Matmul::kNative:
      return false;
    case CpuBf16Matmul::kFp32:
      return true;
    case CpuBf16Matmul::kAuto:
      break;
  }
  static const bool has_onednn_bf16 = cpu_has_onednn_bf16();
  return !(has_onednn_bf16 && at::globalContext().userEnabledMkldnn());
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!bf16_matmul_through_fp32(x) || weight.scalar_type() != at::kBFloat16) {
    return at::linear(x, weight, bias);
  }
  if (bias.defined()) return LinearThroughFp32::apply(x, weight, bias, true);
  return LinearThroughFp32::apply(x, weight, at::empty({0}, weight.options()), false);
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  if (!bf16_matmul_through_fp32(a) || b.scalar_type() != at::kBFloat16 || a.dim() != b.dim() ||
      a.dim() < 2 || a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2)) {
    return at::matmul(a, b);
  }
  return MatmulThroughFp32::apply(a, b);
}

}  // namespace fsdp
