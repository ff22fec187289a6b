// Output sinks and mpirun's tag demultiplexer. Terminal output that needs no prefix is passed
// through in raw chunks as it arrives (progress bars and prompts without a newline still show);
// prefixed output, tails and mpirun's tags need whole lines, so partial lines wait in a buffer.
#include "launch/output.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <regex>

namespace fsdp {
namespace launch {
namespace {

constexpr size_t kMaxLine = 64 * 1024;  // a longer unterminated line is cut into pieces
constexpr size_t kMaxTailLine = 2000;   // characters of one line kept in the tail

int terminal_fd(Stream stream) { return stream == Stream::kOut ? STDOUT_FILENO : STDERR_FILENO; }

int index(Stream stream) { return static_cast<int>(stream); }

}  // namespace

void write_fd(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

OutputSink::~OutputSink() {
  if (opt_.log_fd >= 0) close(opt_.log_fd);
}

void OutputSink::write(Stream stream, const char* data, size_t size) {
  const int i = index(stream);
  if (opt_.log_fd >= 0) write_fd(opt_.log_fd, std::string(data, size));
  if (opt_.show[i] && !opt_.prefix[i]) write_fd(terminal_fd(stream), std::string(data, size));
  std::string& partial = partial_[i];
  partial.append(data, size);
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    complete_line(stream, partial.substr(start, nl - start));
  }
  partial.erase(0, start);
  if (partial.size() > kMaxLine) {
    complete_line(stream, partial);
    partial.clear();
  }
}

void OutputSink::finish() {
  for (Stream stream : {Stream::kOut, Stream::kErr}) {
    std::string& partial = partial_[index(stream)];
    if (!partial.empty()) complete_line(stream, partial);
    partial.clear();
  }
}

void OutputSink::log_note(const std::string& line) {
  if (opt_.log_fd >= 0) write_fd(opt_.log_fd, line + "\n");
}

void OutputSink::complete_line(Stream stream, const std::string& line) {
  const int i = index(stream);
  if (opt_.show[i] && opt_.prefix[i]) {
    write_fd(terminal_fd(stream), "[" + opt_.label + "] " + line + "\n");
  }
  tail_.push_back(line.substr(0, kMaxTailLine));
  if (tail_.size() > opt_.tail_lines) tail_.pop_front();
}

namespace {

// Parses mpirun's tag "[JOB,RANK]<stdout>:" (or <stderr>, <stddiag>; followed by one space in
// Open MPI 5's style) at `pos`. Returns its length, 0 when there is none.
size_t parse_tag(const std::string& s, size_t pos, MpiTagStyle style, int* rank, Stream* stream) {
  size_t p = pos;
  auto digits = [&](long* value) {
    const size_t begin = p;
    *value = 0;
    while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p])) && p - begin < 9) {
      *value = *value * 10 + (s[p++] - '0');
    }
    return p > begin;
  };
  long job = 0, r = 0;
  if (s.compare(p, 1, "[") != 0 || (++p, !digits(&job)) || s.compare(p, 1, ",") != 0 ||
      (++p, !digits(&r)) || s.compare(p, 2, "]<") != 0) {
    return 0;
  }
  p += 2;
  for (const char* name : {"stdout>:", "stderr>:", "stddiag>:"}) {
    const std::string n(name);
    if (s.compare(p, n.size(), n) == 0) {
      *rank = static_cast<int>(r);
      *stream = n[3] == 'o' ? Stream::kOut : Stream::kErr;
      p += n.size();
      if (style == MpiTagStyle::kOpenMpi5 && s.compare(p, 1, " ") == 0) ++p;
      return p - pos;
    }
  }
  return 0;
}

// The first tag at or after `from`: its position (npos if none) and length.
size_t find_tag(const std::string& s, size_t from, MpiTagStyle style, size_t* length, int* rank,
                Stream* stream) {
  for (size_t p = s.find('[', from); p != std::string::npos; p = s.find('[', p + 1)) {
    if ((*length = parse_tag(s, p, style, rank, stream)) > 0) return p;
  }
  return std::string::npos;
}

}  // namespace

int mpirun_first_failed_rank(const std::deque<std::string>& mpirun_lines) {
  static const std::regex name(R"(Process name:\s*\[.*[,@](\d+)\]\s*$)");
  for (const std::string& line : mpirun_lines) {
    std::smatch m;
    if (std::regex_search(line, m, name)) return std::stoi(m[1].str());
  }
  return -1;
}

MpiTagStyle mpi_tag_style(const std::string& version) {
  const std::string marker = "(Open MPI) ";
  const size_t at = version.find(marker);
  if (at == std::string::npos) return MpiTagStyle::kOpenMpi4;
  const int major = std::atoi(version.c_str() + at + marker.size());
  return major >= 5 ? MpiTagStyle::kOpenMpi5 : MpiTagStyle::kOpenMpi4;
}

void MpiDemux::write(Stream stream, const char* data, size_t size) {
  std::string& pending = pending_[index(stream)];
  pending.append(data, size);
  size_t start = 0;
  for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    route_line(stream, pending.substr(start, nl - start), true);
  }
  pending.erase(0, start);
  if (pending.size() > kMaxLine) {
    route_line(stream, pending, false);
    pending.clear();
  }
}

void MpiDemux::finish() {
  for (Stream stream : {Stream::kOut, Stream::kErr}) {
    std::string& pending = pending_[index(stream)];
    if (!pending.empty()) route_line(stream, pending, false);
    pending.clear();
  }
  for (OutputSink* sink : ranks_) sink->finish();
  mpirun_->finish();
}

// One line of mpirun's output: untagged text first (if any), then one segment per tag. Only the
// last segment ends with the line's newline; the others are partial lines of their ranks.
void MpiDemux::route_line(Stream stream, const std::string& line, bool terminated) {
  size_t length = 0;
  int rank = 0;
  Stream rank_stream = stream;
  size_t tag = find_tag(line, 0, style_, &length, &rank, &rank_stream);
  const std::string newline = terminated ? "\n" : "";
  if (tag != 0) {
    const std::string text = line.substr(0, tag);
    mpirun_->write(stream, text.data(), text.size());
    if (tag == std::string::npos) mpirun_->write(stream, newline.data(), newline.size());
  }
  while (tag != std::string::npos) {
    OutputSink* sink = rank >= 0 && rank < static_cast<int>(ranks_.size()) ? ranks_[rank] : mpirun_;
    const Stream to = rank_stream;
    const size_t begin = tag + length;
    tag = find_tag(line, begin, style_, &length, &rank, &rank_stream);
    std::string text =
        line.substr(begin, tag == std::string::npos ? std::string::npos : tag - begin);
    if (tag == std::string::npos) text += newline;
    sink->write(to, text.data(), text.size());
  }
}

}  // namespace launch
}  // namespace fsdp
