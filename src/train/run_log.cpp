// Formatting of the trainer's progress, log lines and metrics records.
#include "train/run_log.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace fsdp {

namespace {

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

std::string duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600)
    return printf_string("%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
  return printf_string("%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
}

// JSON has no NaN or infinity: they are written as null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return printf_string("%.9g", v);
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  return mib >= 1024 ? printf_string("%.2f GiB", mib / 1024) : printf_string("%.1f MiB", mib);
}

RunLog::RunLog(std::ostream& out, bool active, bool progress_bar, const std::string& metrics_file,
               int64_t max_steps)
    : out_(out), active_(active), bar_(active && progress_bar), max_steps_(max_steps) {
  if (!active_ || metrics_file.empty()) return;
  const auto parent = std::filesystem::path(metrics_file).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    throw std::runtime_error("train.metrics_file: cannot create the folder '" + parent.string() +
                             "' for '" + metrics_file + "': " + error.message());
  }
  metrics_.open(metrics_file, std::ios::app);
  if (!metrics_) {
    throw std::runtime_error("train.metrics_file: cannot open '" + metrics_file +
                             "' for appending");
  }
}

void RunLog::clear_bar() {
  if (!bar_shown_) return;
  out_ << "\r\033[K";
  bar_shown_ = false;
}

void RunLog::info(const std::string& line) {
  if (!active_) return;
  clear_bar();
  out_ << line << "\n" << std::flush;
}

std::string RunLog::eta(const StepMetrics& m) const {
  const int64_t done = m.step - first_step_ + 1;
  if (done <= 0) return "?";
  return duration(m.elapsed_s / static_cast<double>(done) *
                  static_cast<double>(max_steps_ - m.step));
}

void RunLog::step(const StepMetrics& m, bool logged) {
  if (!active_) return;
  if (first_step_ < 0) first_step_ = m.step;
  const std::string gpu =
      m.peak_gpu_bytes >= 0 ? " | peak gpu " + format_bytes(m.peak_gpu_bytes) : std::string();
  std::string norm = printf_string("norm %.3f", m.grad_norm);
  if (m.loss_scale >= 0) {
    norm = m.skipped ? printf_string("skipped: inf/NaN gradients at loss scale %g", m.loss_scale)
                     : norm + printf_string(" | scale %g", m.loss_scale);
  }
  const std::string fields = printf_string(
      "step %5lld/%lld | loss %.4f | lr %.2e | %s | %.0f tok/s | peak rss %s%s | eta %s",
      (long long)m.step, (long long)max_steps_, m.loss, m.lr, norm.c_str(), m.tokens_per_s,
      format_bytes(m.peak_rss_bytes).c_str(), gpu.c_str(), eta(m).c_str());
  if (logged) info(fields);
  if (bar_) {
    const int width = 24;
    const int filled = static_cast<int>(width * m.step / std::max<int64_t>(1, max_steps_));
    out_ << "\r\033[K[" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
         << fields << std::flush;
    bar_shown_ = true;
  }
  if (logged && metrics_.is_open()) {
    metrics_ << "{\"step\": " << m.step << ", \"loss\": " << json_number(m.loss)
             << ", \"lr\": " << json_number(m.lr) << ", \"grad_norm\": " << json_number(m.grad_norm)
             << ", \"tokens_per_s\": " << json_number(m.tokens_per_s)
             << ", \"elapsed_s\": " << json_number(m.elapsed_s)
             << ", \"peak_rss_bytes\": " << m.peak_rss_bytes
             << (m.peak_gpu_bytes >= 0 ? ", \"peak_gpu_bytes\": " + std::to_string(m.peak_gpu_bytes)
                                       : std::string())
             << (m.loss_scale >= 0 ? ", \"loss_scale\": " + json_number(m.loss_scale) +
                                         ", \"skipped\": " + (m.skipped ? "true" : "false")
                                   : std::string())
             << "}\n"
             << std::flush;
  }
}

void RunLog::eval(int64_t step, double val_loss) {
  if (!active_) return;
  info(printf_string("eval  step %5lld | val loss %.4f | perplexity %.2f", (long long)step,
                     val_loss, std::exp(val_loss)));
  if (metrics_.is_open()) {
    metrics_ << "{\"step\": " << step << ", \"val_loss\": " << json_number(val_loss)
             << ", \"val_perplexity\": " << json_number(std::exp(val_loss)) << "}\n"
             << std::flush;
  }
}

}  // namespace fsdp
