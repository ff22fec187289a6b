// Learning-rate schedules: linear warmup then cosine decay (GPT-2 / llm.c style).
#include <cmath>
#include <stdexcept>
#include <string>

#include "fsdp/optim.h"

namespace fsdp {

double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double max_lr, double min_lr) {
  if (warmup < 0 || total < warmup || step < 0) {
    throw std::invalid_argument(
        "warmup_cosine_lr needs 0 <= warmup <= total and step >= 0; got step " +
        std::to_string(step) + ", warmup " + std::to_string(warmup) + ", total " +
        std::to_string(total));
  }
  if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  const double pi = std::acos(-1.0);
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(pi * r));
}

}  // namespace fsdp
