// The fused element-wise nodes (fsdp/models/fused_ops.h): the composite ops they replace (the
// reference) and their autograd functions, which call a device's kernels (fused_kernels.h: the
// CPU's loops, CUDA's kernels) and compute with ATen's ops where a table has no entry for the
// operation or the dtype (the gated activation on the CPU, fp64 anywhere).
#include "fsdp/models/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "models/fused_kernels.h"

namespace fsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The kernels for t's device and dtype (fp32, fp16, bf16), or nullptr: then the node computes with
// ATen's ops (any floating dtype on any device: fp64 for the tests' exact reference).
const detail::FusedKernels* kernels_for(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  if (s != at::kFloat && s != at::kHalf && s != at::kBFloat16) return nullptr;
  if (t.is_cpu()) return detail::cpu_fused_kernels();
  return t.is_cuda() ? detail::cuda_fused_kernels() : nullptr;
}

bool fusable(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()); }

// --- RMSNorm ---------------------------------------------------------------------------------

// HF's order exactly, over x [..., C]: Llama normalises in fp32, casts back, then scales; Gemma
// scales by (1 + weight) in fp32 and casts last. With the rsqrt of each row [R] kept. The
// composite ops themselves when autograd records them; the fused node's ATen forward when not.
std::pair<at::Tensor, at::Tensor> rms_norm_forward_aten(const at::Tensor& x, const at::Tensor& w,
                                                        double eps, bool offset) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor rstd = at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
  const at::Tensor h = x32 * rstd;
  at::Tensor y =
      offset ? (h * (1.0 + w.to(at::kFloat))).to(x.scalar_type()) : w * h.to(x.scalar_type());
  return {std::move(y), rstd.view({-1})};
}

// y_j = w'_j h_j with h = x r, r = (mean(x^2) + eps)^(-1/2) and w' = w or 1 + w, so with
// dh = dy w': dx = r dh - r^3 x mean(dh x), and dw = the rows' sum of dy h (h rounded to x's
// dtype first where forward rounded it before the scaling).
std::pair<at::Tensor, at::Tensor> rms_norm_backward_aten(const at::Tensor& dy, const at::Tensor& x,
                                                         const at::Tensor& w,
                                                         const at::Tensor& rstd, bool offset) {
  const at::Tensor x32 = x.to(at::kFloat), g32 = dy.to(at::kFloat);
  const at::Tensor r = rstd.unsqueeze(1);
  const at::Tensor dh = g32 * (offset ? w.to(at::kFloat) + 1.0 : w.to(at::kFloat));
  const at::Tensor mean_dhx = (dh * x32).mean(-1, /*keepdim=*/true);
  at::Tensor dx = (r * dh - x32 * (r.pow(3) * mean_dhx)).to(x.scalar_type());
  at::Tensor h = x32 * r;
  if (!offset) h = h.to(x.scalar_type()).to(at::kFloat);
  return {std::move(dx), (g32 * h).sum(0)};
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            double eps, bool offset) {
    const at::Tensor rows = x.contiguous().view({-1, x.size(-1)});
    const at::Tensor weight = w.contiguous();
    const detail::FusedKernels* k = kernels_for(x);
    auto [y, rstd] = k ? k->rms_norm_forward(rows, weight, eps, offset)
                       : rms_norm_forward_aten(rows, weight, eps, offset);
    ctx->save_for_backward({rows, weight, rstd});
    ctx->saved_data["offset"] = offset;
    // Not a view of y: autograd would refuse in-place changes of a view made inside a function.
    return at::_unsafe_view(y, x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &w = saved[1], &rstd = saved[2];
    const bool offset = ctx->saved_data["offset"].toBool();
    const at::Tensor dy = grads[0].contiguous().view(rows.sizes());
    const detail::FusedKernels* k = kernels_for(rows);
    auto [dx, dw] = k ? k->rms_norm_backward(dy, rows, w, rstd, offset)
                      : rms_norm_backward_aten(dy, rows, w, rstd, offset);
    return {dx.view(grads[0].sizes()), dw.to(w.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

// --- gated activation ------------------------------------------------------------------------

at::Tensor activation(const at::Tensor& gate, GateActivation act) {
  return act == GateActivation::kGeluTanh ? at::gelu(gate, "tanh") : at::silu(gate);
}

at::Tensor activation_backward(const at::Tensor& grad, const at::Tensor& gate, GateActivation act) {
  return act == GateActivation::kGeluTanh ? at::gelu_backward(grad, gate, "tanh")
                                          : at::silu_backward(grad, gate);
}

// Rows [R, F] of t's last dimension: a view wherever the leading dimensions collapse (a
// projection's halves are rows 2F apart), a contiguous copy otherwise.
at::Tensor as_rows(const at::Tensor& t) {
  at::Tensor rows = t.reshape({-1, t.size(-1)});
  return rows.stride(1) == 1 ? rows : rows.contiguous();
}

at::Tensor gated_forward(const at::Tensor& gate, const at::Tensor& up, GateActivation act) {
  const detail::FusedKernels* k = kernels_for(gate);
  if (k && k->gated_forward) {
    return at::_unsafe_view(
        k->gated_forward(as_rows(gate), as_rows(up), act == GateActivation::kGeluTanh),
        gate.sizes());
  }
  return activation(gate, act) * up;  // the composite ops' own arithmetic (and roundings)
}

// Autograd's own arithmetic through the composite ops: the product's two gradients, then the
// activation's. {d gate, d up}.
std::pair<at::Tensor, at::Tensor> gated_backward_aten(const at::Tensor& dy, const at::Tensor& gate,
                                                      const at::Tensor& up, GateActivation act) {
  return {activation_backward(dy * up, gate, act), dy * activation(gate, act)};
}

struct GatedFunction : public torch::autograd::Function<GatedFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up,
                            int64_t act) {
    ctx->save_for_backward({gate, up});
    ctx->saved_data["act"] = act;
    return gated_forward(gate, up, static_cast<GateActivation>(act));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    const auto act = static_cast<GateActivation>(ctx->saved_data["act"].toInt());
    const at::Tensor dy = grads[0].contiguous();
    const detail::FusedKernels* k = kernels_for(gate);
    if (!k || !k->gated_backward) {
      auto [dgate, dup] = gated_backward_aten(dy, gate, up, act);
      return {dgate, dup, at::Tensor()};
    }
    const at::Tensor dgate = at::empty(gate.sizes(), gate.options());
    const at::Tensor dup = at::empty(up.sizes(), up.options());
    k->gated_backward(as_rows(dy), as_rows(gate), as_rows(up), act == GateActivation::kGeluTanh,
                      as_rows(dgate), as_rows(dup));
    return {dgate, dup, at::Tensor()};
  }
};

// One tensor [..., 2F], gate then up: its gradient is written as one tensor, in halves.
struct GatedPairFunction : public torch::autograd::Function<GatedPairFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, int64_t act) {
    ctx->save_for_backward({gate_up});
    ctx->saved_data["act"] = act;
    const int64_t F = gate_up.size(-1) / 2;
    return gated_forward(gate_up.narrow(-1, 0, F), gate_up.narrow(-1, F, F),
                         static_cast<GateActivation>(act));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const auto act = static_cast<GateActivation>(ctx->saved_data["act"].toInt());
    const int64_t F = gate_up.size(-1) / 2;
    const at::Tensor gate = gate_up.narrow(-1, 0, F), up = gate_up.narrow(-1, F, F);
    const at::Tensor dy = grads[0].contiguous();
    const detail::FusedKernels* k = kernels_for(gate_up);
    if (!k || !k->gated_backward) {
      auto [dgate, dup] = gated_backward_aten(dy, gate, up, act);
      return {at::cat({dgate, dup}, -1), at::Tensor()};
    }
    const at::Tensor d = at::empty(gate_up.sizes(), gate_up.options());
    // Views of d (its rows collapse: it is contiguous), so the kernel writes d itself.
    k->gated_backward(as_rows(dy), as_rows(gate), as_rows(up), act == GateActivation::kGeluTanh,
                      d.narrow(-1, 0, F).reshape({-1, F}), d.narrow(-1, F, F).reshape({-1, F}));
    return {d, at::Tensor()};
  }
};

// --- rotary embedding ------------------------------------------------------------------------

// [..., rd] -> [..., rd]: (x1, x2) -> (-x2, x1) over the two halves of the last dimension.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// The rotation on the first rd channels, the rest passed; backward the transpose:
// d x = g cos - rotate_half(g sin).
at::Tensor rotary_composite(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            bool backward) {
  const int64_t D = x.size(-1), rd = cos.size(-1);
  const at::Tensor c = cos.unsqueeze(-2), s = sin.unsqueeze(-2);  // over the heads
  const at::Tensor r = rd == D ? x : x.narrow(-1, 0, rd);
  at::Tensor y = backward ? r * c - rotate_half(r * s) : r * c + rotate_half(r) * s;
  return rd == D ? y : at::cat({y, x.narrow(-1, rd, D - rd)}, -1);
}

at::Tensor rotary_on_device(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            bool backward) {
  const detail::FusedKernels* k = kernels_for(x);
  if (k && k->rotary) {
    return k->rotary(x.contiguous(), cos.contiguous(), sin.contiguous(), backward);
  }
  return rotary_composite(x, cos, sin, backward);
}

struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotary_on_device(x, cos, sin, /*backward=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    return {rotary_on_device(grads[0], saved[0], saved[1], /*backward=*/true), at::Tensor(),
            at::Tensor()};
  }
};

std::string shape(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void check_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const bool ok = x.dim() == 4 && cos.dim() == 3 && sin.sizes() == cos.sizes() &&
                  (cos.size(0) == 1 || cos.size(0) == x.size(0)) && cos.size(1) == x.size(1) &&
                  cos.size(2) % 2 == 0 && cos.size(2) <= x.size(3);
  if (!ok) {
    throw std::invalid_argument(
        "rotary_embedding: x [B, T, H, D] with cos and sin [B or 1, T, rd], rd even and at most "
        "D; got x " +
        shape(x) + ", cos " + shape(cos) + ", sin " + shape(sin));
  }
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool offset,
                    bool fused) {
  if (!fused || !fusable(x) || weight.scalar_type() != x.scalar_type() || weight.dim() != 1 ||
      x.dim() == 0 || weight.size(0) != x.size(-1) || x.size(-1) == 0 ||
      weight.device() != x.device()) {
    return rms_norm_forward_aten(x, weight, eps, offset).first;
  }
  return RmsNormFunction::apply(x, weight, eps, offset);
}

at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up, GateActivation act,
                            bool fused) {
  if (!fused || !fusable(gate) || up.sizes() != gate.sizes() || gate.dim() == 0 ||
      gate.size(-1) == 0 || up.scalar_type() != gate.scalar_type() ||
      up.device() != gate.device()) {
    return activation(gate, act) * up;
  }
  return GatedFunction::apply(gate, up, static_cast<int64_t>(act));
}

at::Tensor gated_activation(const at::Tensor& gate_up, GateActivation act, bool fused) {
  if (gate_up.size(-1) % 2 != 0) {
    throw std::invalid_argument("gated_activation: gate_up's last dimension must be even, got " +
                                std::to_string(gate_up.size(-1)));
  }
  const int64_t F = gate_up.size(-1) / 2;
  if (!fused || !fusable(gate_up) || F == 0) {
    return gate_up.narrow(-1, F, F) * activation(gate_up.narrow(-1, 0, F), act);
  }
  return GatedPairFunction::apply(gate_up, static_cast<int64_t>(act));
}

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            bool fused) {
  check_rotary(x, cos, sin);
  // Tables that want a gradient get one from the composite ops only.
  if (!fused || !fusable(x) || x.size(-1) == 0 || cos.scalar_type() != x.scalar_type() ||
      sin.scalar_type() != x.scalar_type() || cos.device() != x.device() ||
      sin.device() != x.device() || cos.requires_grad() || sin.requires_grad()) {
    return rotary_composite(x, cos, sin, /*backward=*/false);
  }
  return RotaryFunction::apply(x, cos, sin);
}

}  // namespace fsdp
