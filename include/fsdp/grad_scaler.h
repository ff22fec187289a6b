// Dynamic loss scaling for fp16 mixed precision over sharded gradients: PyTorch's
// ShardedGradScaler contract. fp16 keeps 5 exponent bits, so small gradients underflow to zero
// unless the loss is multiplied by a large factor first; the scaler picks that factor, divides it
// back out of each rank's fp32 gradient shard before clipping and the optimizer, and skips the
// step (on every rank together) when any rank's shard holds an inf or NaN.
//
// One step, as PyTorch writes it (`scaler.scale(loss).backward(); scaler.unscale_(opt);
// clip_grad_norm_(...); scaler.step(opt); scaler.update()`):
//   scale(loss).backward()     loss * scale
//   unscale(opt, world)        every gradient shard *= 1/scale; one all-reduce of a 0/1 flag over
//                              `world` tells every rank whether any rank found inf or NaN
//   clip_grad_norm(...)        on the unscaled gradients, only when nothing was found
//   step(opt, world)           the optimizer steps unless something was found (unscales first if
//                              unscale was not called)
//   update()                   found: scale *= backoff_factor, the good-step count restarts;
//                              else, after growth_interval good steps in a row,
//                              scale *= growth_factor
// The scale is an fp32 value updated in fp32, as PyTorch's tensor is, so a checkpoint that
// stores state() resumes bit for bit.
//
// The options and state are plain structs (the trainer's config holds GradScalerOptions), so this
// header needs no LibTorch header.
//
// Thread-safety: none; one training thread uses a scaler.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "fsdp/comm.h"

namespace at {
class Tensor;
}

namespace fsdp {

class ShardedOptimizer;

// torch.cuda.amp.GradScaler's defaults, and a floor (DeepSpeed's min_loss_scale).
struct GradScalerOptions {
  double init_scale = 65536.0;     // 2^16: the first step's scale
  double growth_factor = 2.0;      // scale *= this after growth_interval good steps in a row; > 1
  double backoff_factor = 0.5;     // scale *= this after a step with inf/NaN gradients; in (0, 1)
  int64_t growth_interval = 2000;  // good steps in a row before the scale grows; >= 1
  // A backoff below this stops the run with LossScaleUnderflow: at such a scale every step has
  // been skipped for a while, and a smaller one would only train on zeros. Default 1 (DeepSpeed's
  // min_loss_scale); > 0.
  double min_scale = 1.0;
};

// What a checkpoint keeps of a scaler: with it a resumed run scales, skips and grows exactly as the
// uninterrupted one.
struct GradScalerState {
  float scale = 65536.0f;
  int64_t growth_tracker = 0;  // good steps in a row since the scale last changed
};

// The scale fell below GradScalerOptions::min_scale: the gradients are not finite at any scale
// (a NaN loss, a diverged run), and skipping more steps would not help.
class LossScaleUnderflow : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShardedGradScaler {
 public:
  // Throws std::invalid_argument naming the option out of range.
  explicit ShardedGradScaler(GradScalerOptions options = {});

  // loss * scale, in the loss's dtype (fp32: the trainer's loss is computed in fp32).
  at::Tensor scale(const at::Tensor& loss) const;

  // Multiplies each of `opt`'s gradient shards by 1/scale in place and finds whether any rank of
  // `world` holds an inf or NaN in its shards: one all-reduce of a flag, never of the gradients.
  // A collective: every rank of `world` calls it. Returns whether one was found (the same on every
  // rank). Throws std::logic_error if called twice before update().
  bool unscale(const ShardedOptimizer& opt, Comm& world);
  // opt.step() unless unscale found an inf or NaN (unscale runs first if it has not). Returns
  // whether the optimizer stepped.
  bool step(ShardedOptimizer& opt, Comm& world);
  // The end of a step: backs off or grows the scale (see above). Throws std::logic_error without
  // a step() since the last update(), LossScaleUnderflow when the backed-off scale falls below
  // min_scale (the message names the scale and how many steps in a row were skipped).
  void update();

  float get_scale() const { return state_.scale; }
  // Whether this step's unscale found an inf or NaN (false before unscale).
  bool found_inf() const { return found_inf_; }
  // Steps skipped in a row, up to the last update().
  int64_t skipped_in_a_row() const { return skipped_in_a_row_; }
  const GradScalerOptions& options() const { return options_; }

  GradScalerState state() const { return state_; }
  // Throws std::invalid_argument for a scale that is not finite and positive, or a negative count.
  void load_state(const GradScalerState& state);

 private:
  enum class Phase { kReady, kUnscaled, kStepped };

  GradScalerOptions options_;
  GradScalerState state_;
  Phase phase_ = Phase::kReady;
  bool found_inf_ = false;
  int64_t skipped_in_a_row_ = 0;
};

}  // namespace fsdp
