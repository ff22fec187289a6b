// What a training run shows and records, on rank 0 only: a progress bar redrawn in place when the
// output is a terminal (step, loss, tokens/s, learning rate, per-rank peak memory, ETA), plain log
// lines otherwise and every log_every steps, evaluation lines, and the metrics file (one JSON
// object per logged step, appended, so a resumed run continues the same file).
#pragma once

#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>

#include "fsdp/train/trainer.h"

namespace fsdp {

class RunLog {
 public:
  // `active`: this rank writes (rank 0). `progress_bar`: `out` is a terminal. `metrics_file`:
  // empty for none; opened for appending, created with its folder if missing.
  RunLog(std::ostream& out, bool active, bool progress_bar, const std::string& metrics_file,
         int64_t max_steps);

  void info(const std::string& line);
  // Every step: redraws the bar (terminal only); writes a log line and a metrics line when
  // `logged`.
  void step(const StepMetrics& m, bool logged);
  void eval(int64_t step, double val_loss);

 private:
  void clear_bar();
  std::string eta(const StepMetrics& m) const;

  std::ostream& out_;
  bool active_;
  bool bar_;
  bool bar_shown_ = false;
  int64_t max_steps_;
  int64_t first_step_ = -1;
  std::ofstream metrics_;
};

// "1.23 GiB", "512.0 MiB".
std::string format_bytes(int64_t bytes);

}  // namespace fsdp
