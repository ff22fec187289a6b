// Token files (fsdp/data/token_file.h): the header checks, the read-only mapping and the atomic
// writer. The layout is little-endian; this file assumes a little-endian host and says so at
// compile time rather than swapping bytes on every read.
#include "fsdp/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

namespace fsdp::data {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian; reading them on a big-endian host needs byte swaps");

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("token file " + path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

// Closes a descriptor on every path out of a function.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(path, "write failed: " + errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::vector<uint16_t> narrow(const std::string& path, const std::vector<int32_t>& tokens) {
  std::vector<uint16_t> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > kMaxTokenId)
      fail(path, "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                     " does not fit the format's uint16");
    out[i] = static_cast<uint16_t>(tokens[i]);
  }
  return out;
}

// Reads the header with pread and checks it against the file's size; returns the token count.
int64_t check_header(int fd, const std::string& path, int64_t file_bytes) {
  if (file_bytes < kTokenFileHeaderBytes)
    fail(path, "truncated: " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kTokenFileHeaderBytes) + "-byte header");
  int32_t header[kTokenFileHeaderInts];
  if (::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    fail(path, "cannot read the header: " + errno_text());
  if (header[0] != kTokenFileMagic)
    fail(path, "bad magic " + std::to_string(header[0]) + " (expected " +
                   std::to_string(kTokenFileMagic) + "): not an llm.c token file");
  if (header[1] != kTokenFileVersion)
    fail(path, "unsupported version " + std::to_string(header[1]) + " (expected " +
                   std::to_string(kTokenFileVersion) + ", uint16 tokens)");
  const int64_t n = header[2];
  const int64_t payload = file_bytes - kTokenFileHeaderBytes;
  if (n < 0 || payload != 2 * n)
    fail(path, "header says " + std::to_string(n) + " tokens (" + std::to_string(2 * n) +
                   " bytes) but " + std::to_string(payload) + " bytes follow the header" +
                   (payload < 2 * n ? " (truncated)" : ""));
  return n;
}

}  // namespace

struct TokenFile::Mapping {
  std::string path;
  int64_t tokens = 0;
  void* base = nullptr;  // the whole file, header included; null for an empty mapping
  size_t bytes = 0;
  const uint16_t* data() const {
    return reinterpret_cast<const uint16_t*>(static_cast<const char*>(base) +
                                             kTokenFileHeaderBytes);
  }
  ~Mapping() {
    if (base) ::munmap(base, bytes);
  }
};

TokenFile::TokenFile(std::shared_ptr<const Mapping> m) : m_(std::move(m)) {}

TokenFile TokenFile::open(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail(path, "cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(path, "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  auto m = std::make_shared<Mapping>();
  m->path = path;
  m->tokens = check_header(f.fd, path, st.st_size);
  m->bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, m->bytes, PROT_READ, MAP_SHARED, f.fd, 0);
  if (base == MAP_FAILED) fail(path, "cannot map: " + errno_text());
  m->base = base;
  return TokenFile(std::move(m));
}

const std::string& TokenFile::path() const { return m_->path; }
int64_t TokenFile::size() const { return m_->tokens; }

void TokenFile::read(int64_t begin, int64_t n, int64_t* out, int64_t vocab_size) const {
  if (begin < 0 || n < 0 || begin + n > m_->tokens)
    throw std::out_of_range("token file " + m_->path + ": tokens [" + std::to_string(begin) + ", " +
                            std::to_string(begin + n) + ") outside its " +
                            std::to_string(m_->tokens) + " tokens");
  const uint16_t* src = m_->data() + begin;
  for (int64_t i = 0; i < n; ++i) out[i] = src[i];
  if (vocab_size <= 0) return;
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] >= vocab_size)
      fail(m_->path, "token " + std::to_string(out[i]) + " at position " +
                         std::to_string(begin + i) + " is outside the vocabulary of " +
                         std::to_string(vocab_size));
  }
}

std::vector<int32_t> TokenFile::tokens(int64_t begin, int64_t n, int64_t vocab_size) const {
  if (n < 0) n = m_->tokens - begin;
  std::vector<int64_t> wide(static_cast<size_t>(std::max<int64_t>(n, 0)));
  read(begin, n, wide.data(), vocab_size);
  return std::vector<int32_t>(wide.begin(), wide.end());
}

void TokenFile::check_vocab(int64_t vocab_size) const {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> buf(kChunk);
  for (int64_t at = 0; at < m_->tokens; at += kChunk)
    read(at, std::min(kChunk, m_->tokens - at), buf.data(), vocab_size);
}

int64_t TokenFile::max_token() const {
  const uint16_t* p = m_->data();
  uint16_t most = 0;
  for (int64_t i = 0; i < m_->tokens; ++i) most = std::max(most, p[i]);  // vectorizes
  return m_->tokens == 0 ? -1 : most;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens) {
  const std::vector<uint16_t> narrow_tokens = narrow(path, tokens);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    fail(path, std::to_string(tokens.size()) + " tokens do not fit the header's int32 count");
  int32_t header[kTokenFileHeaderInts] = {kTokenFileMagic, kTokenFileVersion,
                                          static_cast<int32_t>(tokens.size())};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) fail(tmp, "cannot create: " + errno_text());
    write_all(f.fd, header, sizeof header, tmp);
    write_all(f.fd, narrow_tokens.data(), narrow_tokens.size() * 2, tmp);
    if (::fsync(f.fd) != 0) fail(tmp, "fsync failed: " + errno_text());
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail(path, "cannot rename " + tmp + " over it: " + errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());  // a failed write leaves nothing behind
    throw;
  }
}

OpenedRanges open_ranges(const std::vector<TokenRange>& ranges) {
  OpenedRanges out;
  for (const TokenRange& r : ranges) {
    TokenFile f = TokenFile::open(r.path);
    TokenRange resolved{r.path, r.begin, r.end < 0 ? f.size() : r.end};
    if (resolved.begin < 0 || resolved.begin > resolved.end || resolved.end > f.size())
      fail(r.path, "range [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                       ") outside its " + std::to_string(f.size()) + " tokens");
    out.files.push_back(std::move(f));
    out.ranges.push_back(std::move(resolved));
  }
  return out;
}

}  // namespace fsdp::data
