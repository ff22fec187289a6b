// The CPU's table of fused_kernels.h: RMSNorm and the rotary embedding as loops over rows (two
// passes over a row where the composite ops make a dozen over the whole tensor, with fp32 copies),
// threads over rows through at::parallel_for. The gated activation is left to ATen's ops (its
// vectorised exp and tanh beat a scalar loop; its autograd's arithmetic is already the fused
// node's), so that entry is empty. Arithmetic in fp32 with the roundings of fused_kernels.cu.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "models/fused_kernels.h"

namespace fsdp {
namespace detail {
namespace {

// Rows per task: a row of a residual stream is a few thousand elements.
constexpr int64_t kRowGrain = 16;

template <typename T>
float rounded(float v) {
  return static_cast<float>(static_cast<T>(v));
}

std::pair<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& w,
                                                   double eps, bool offset) {
  const int64_t rows = x.size(0), cols = x.size(1);
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    float* rp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const scalar_t* xr = xp + row * cols;
        scalar_t* yr = yp + row * cols;
        float ss = 0.f;
        for (int64_t j = 0; j < cols; ++j) {
          const float v = static_cast<float>(xr[j]);
          ss += v * v;
        }
        const float r = 1.f / std::sqrt(ss / static_cast<float>(cols) + static_cast<float>(eps));
        rp[row] = r;
        for (int64_t j = 0; j < cols; ++j) {
          const float h = static_cast<float>(xr[j]) * r;
          const float wj = static_cast<float>(wp[j]);
          yr[j] = static_cast<scalar_t>(offset ? h * (1.f + wj) : wj * rounded<scalar_t>(h));
        }
      }
    });
  });
  return {y, rstd};
}

// dx = r dh - r^3 x mean(dh x), dh = dy w'; dw summed over each task's rows into a row of fp32
// partial sums of its own, then over the tasks.
std::pair<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                                    const at::Tensor& w, const at::Tensor& rstd,
                                                    bool offset) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw_parts = at::zeros({parts, cols}, x.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = dy.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const float* rp = rstd.data_ptr<float>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    float* partial = dw_parts.data_ptr<float>();
    at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
      for (int64_t part = first; part < last; ++part) {
        float* dw = partial + part * cols;
        for (int64_t row = rows * part / parts; row < rows * (part + 1) / parts; ++row) {
          const scalar_t* xr = xp + row * cols;
          const scalar_t* gr = gp + row * cols;
          const float r = rp[row];
          float s = 0.f;
          for (int64_t j = 0; j < cols; ++j) {
            const float wj = static_cast<float>(wp[j]) + (offset ? 1.f : 0.f);
            s += static_cast<float>(gr[j]) * wj * static_cast<float>(xr[j]);
          }
          const float k = r * r * r * s / static_cast<float>(cols);
          for (int64_t j = 0; j < cols; ++j) {
            const float wj = static_cast<float>(wp[j]) + (offset ? 1.f : 0.f);
            const float g = static_cast<float>(gr[j]), v = static_cast<float>(xr[j]);
            dxp[row * cols + j] = static_cast<scalar_t>(r * g * wj - v * k);
            const float h = v * r;
            dw[j] += g * (offset ? h : rounded<scalar_t>(h));
          }
        }
      }
    });
  });
  return {dx, dw_parts.sum(0)};
}

// Forward, channel d < rd of a head: x_d cos_d + rot_d sin_d with rot = (-x2, x1) over the
// halves, each product rounded as the composite ops round it; backward the transpose (see
// fused_kernels.cu). Channels from rd on pass.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  bool backward) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), rd = cos.size(2);
  const int64_t half = rd / 2, per_batch_tables = cos.size(0) == 1 ? 0 : 1;
  at::Tensor y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rotary", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* cp = cos.data_ptr<scalar_t>();
    const scalar_t* sp = sin.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, B * T, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t bt = begin; bt < end; ++bt) {
        const int64_t table = ((bt / T) * per_batch_tables * T + bt % T) * rd;
        const scalar_t* c = cp + table;
        const scalar_t* s = sp + table;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t* xr = xp + (bt * H + h) * D;
          scalar_t* yr = yp + (bt * H + h) * D;
          for (int64_t d = 0; d < rd; ++d) {
            const float v = static_cast<float>(xr[d]), cd = static_cast<float>(c[d]);
            if (!backward) {
              const float rot =
                  d < half ? -static_cast<float>(xr[d + half]) : static_cast<float>(xr[d - half]);
              yr[d] = static_cast<scalar_t>(rounded<scalar_t>(v * cd) +
                                            rounded<scalar_t>(rot * static_cast<float>(s[d])));
            } else {
              const float other =
                  d < half ? static_cast<float>(xr[d + half]) * static_cast<float>(s[d + half])
                           : -static_cast<float>(xr[d - half]) * static_cast<float>(s[d - half]);
              yr[d] = static_cast<scalar_t>(v * cd + other);
            }
          }
          std::copy(xr + rd, xr + D, yr + rd);
        }
      }
    });
  });
  return y;
}

const FusedKernels kCpu = {rms_norm_forward, rms_norm_backward, nullptr, nullptr, rotary};

}  // namespace

const FusedKernels* cpu_fused_kernels() { return &kCpu; }

}  // namespace detail
}  // namespace fsdp
