// Where a rank's output goes: its log file, the terminal (raw, or line by line with a "[rank R] "
// prefix), and an in-memory tail of its last lines for the failure report. Under --backend mpi
// every rank's output arrives through mpirun, tagged by --tag-output; MpiDemux splits it back
// into one sink per rank so that logs, prefixes and tails work the same for both backends.
#pragma once

#include <deque>
#include <string>
#include <vector>

namespace fsdp {
namespace launch {

enum class Stream { kOut = 0, kErr = 1 };

// Anything a child's stdout and stderr pipes are read into.
class OutputTarget {
 public:
  virtual ~OutputTarget() = default;
  virtual void write(Stream stream, const char* data, size_t size) = 0;
  // Both streams ended: completes unterminated last lines.
  virtual void finish() = 0;
};

struct SinkOptions {
  std::string label;                // "rank 3", or "mpirun" for mpirun's own messages
  bool show[2] = {false, false};    // on the terminal, per Stream
  bool prefix[2] = {false, false};  // shown line by line as "[label] line"
  int log_fd = -1;                  // owned by the sink; -1: no log file
  size_t tail_lines = 20;
};

class OutputSink : public OutputTarget {
 public:
  explicit OutputSink(SinkOptions options) : opt_(std::move(options)) {}
  ~OutputSink() override;
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  void write(Stream stream, const char* data, size_t size) override;
  void finish() override;
  // Writes a line of the launcher's own into the log file only (attempt markers).
  void log_note(const std::string& line);

  const std::string& label() const { return opt_.label; }
  // Everything it printed went to the terminal as it came (its tail need not be shown again).
  bool shown() const { return opt_.show[0] && opt_.show[1]; }
  // The last lines (stdout and stderr in the order they completed), oldest first.
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void complete_line(Stream stream, const std::string& line);

  SinkOptions opt_;
  std::string partial_[2];  // an unterminated last line, per stream
  std::deque<std::string> tail_;
};

// The rank mpirun's failure report names as the first to fail: the last number of its "Process
// name:" line, "[[17708,1],0]" (Open MPI 4) or "[prterun-host-7712@1,0]" (5); -1 when the lines
// hold none (Open MPI 5 prints no report when the failing rank is the last to end).
int mpirun_first_failed_rank(const std::deque<std::string>& mpirun_lines);

// How mpirun --tag-output marks a rank's text: Open MPI 4 writes "[1,R]<stdout>:text"; 5, whose
// launcher is PRRTE, writes "[1,R]<stdout>: text", and that space belongs to the tag.
enum class MpiTagStyle { kOpenMpi4, kOpenMpi5 };
// The style of the mpirun whose `mpirun --version` printed `version` ("mpirun (Open MPI) 5.0.7");
// kOpenMpi4 for an older or unrecognised one.
MpiTagStyle mpi_tag_style(const std::string& version);

// Routes mpirun's --tag-output streams ("[1,R]<stdout>:text") to sinks[R]; untagged text (mpirun's
// own messages) goes to `mpirun`. mpirun tags each chunk it forwards, so a rank's partial line is
// continued after the next tag of the same rank, possibly on the same mpirun line as other ranks.
class MpiDemux : public OutputTarget {
 public:
  MpiDemux(std::vector<OutputSink*> ranks, OutputSink* mpirun, MpiTagStyle style)
      : ranks_(std::move(ranks)), mpirun_(mpirun), style_(style) {}

  void write(Stream stream, const char* data, size_t size) override;
  void finish() override;

 private:
  void route_line(Stream stream, const std::string& line, bool terminated);

  std::vector<OutputSink*> ranks_;
  OutputSink* mpirun_;
  MpiTagStyle style_;
  std::string pending_[2];
};

// Writes all of `text` to `fd`, giving up silently on errors (a closed terminal or a full disk
// must not stop the job).
void write_fd(int fd, const std::string& text);

}  // namespace launch
}  // namespace fsdp
