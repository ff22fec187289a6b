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

#include "util/files.h"

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
  if (!files::write_all(fd, data, n)) fail(path, "write failed: " + errno_text());
}

// The tokens in the file's width: uint16 when every one fits, else uint32.
std::string encode_tokens(const std::string& path, const std::vector<int32_t>& tokens,
                          int32_t& version) {
  int32_t most = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0)
      fail(path, "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                     " is negative");
    most = std::max(most, tokens[i]);
  }
  version = most <= kMaxTokenId ? kTokenFileVersion : kTokenFileVersionU32;
  std::string out;
  if (version == kTokenFileVersion) {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    out.assign(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
  } else {
    out.assign(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  }
  return out;
}

// The width of a token (2 or 4 bytes) that a header's magic and version announce.
int token_width(const std::string& path, int32_t magic, int32_t version) {
  if (magic == kLlmcU32Magic) {
    if (version != kLlmcU32Version)
      fail(path, "unsupported version " + std::to_string(version) + " for magic " +
                     std::to_string(kLlmcU32Magic) + " (expected " +
                     std::to_string(kLlmcU32Version) + ", llm.c's uint32 tokens)");
    return 4;
  }
  if (magic != kTokenFileMagic)
    fail(path, "bad magic " + std::to_string(magic) + " (expected " +
                   std::to_string(kTokenFileMagic) + "): not an llm.c token file");
  if (version != kTokenFileVersion && version != kTokenFileVersionU32)
    fail(path, "unsupported version " + std::to_string(version) + " (expected " +
                   std::to_string(kTokenFileVersion) + ", uint16 tokens, or " +
                   std::to_string(kTokenFileVersionU32) + ", uint32 tokens)");
  return version == kTokenFileVersion ? 2 : 4;
}

struct Header {
  int64_t tokens;
  int width;
};

// Reads the header with pread and checks it against the file's size.
Header check_header(int fd, const std::string& path, int64_t file_bytes) {
  if (file_bytes < kTokenFileHeaderBytes)
    fail(path, "truncated: " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kTokenFileHeaderBytes) + "-byte header");
  int32_t header[kTokenFileHeaderInts];
  if (::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    fail(path, "cannot read the header: " + errno_text());
  const int width = token_width(path, header[0], header[1]);
  const int64_t n = header[2];
  const int64_t payload = file_bytes - kTokenFileHeaderBytes;
  if (n < 0 || payload != width * n)
    fail(path, "header says " + std::to_string(n) + " tokens (" + std::to_string(width * n) +
                   " bytes) but " + std::to_string(payload) + " bytes follow the header" +
                   (payload < width * n ? " (truncated)" : ""));
  return {n, width};
}

}  // namespace

struct TokenFile::Mapping {
  std::string path;
  int64_t tokens = 0;
  int width = 2;         // bytes per token
  void* base = nullptr;  // the whole file, header included; null for an empty mapping
  size_t bytes = 0;
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(static_cast<const char*>(base) + kTokenFileHeaderBytes);
  }
  // Tokens [begin, begin + n) widened to int64.
  void copy(int64_t begin, int64_t n, int64_t* out) const {
    if (width == 2)
      std::copy(data<uint16_t>() + begin, data<uint16_t>() + begin + n, out);
    else
      std::copy(data<uint32_t>() + begin, data<uint32_t>() + begin + n, out);
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
  const Header h = check_header(f.fd, path, st.st_size);
  m->tokens = h.tokens;
  m->width = h.width;
  m->bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, m->bytes, PROT_READ, MAP_SHARED, f.fd, 0);
  if (base == MAP_FAILED) fail(path, "cannot map: " + errno_text());
  m->base = base;
  return TokenFile(std::move(m));
}

const std::string& TokenFile::path() const { return m_->path; }
int64_t TokenFile::size() const { return m_->tokens; }
int TokenFile::token_bytes() const { return m_->width; }

void TokenFile::read(int64_t begin, int64_t n, int64_t* out, int64_t vocab_size) const {
  if (begin < 0 || n < 0 || begin + n > m_->tokens)
    throw std::out_of_range("token file " + m_->path + ": tokens [" + std::to_string(begin) + ", " +
                            std::to_string(begin + n) + ") outside its " +
                            std::to_string(m_->tokens) + " tokens");
  m_->copy(begin, n, out);
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

namespace {
template <class T>
int64_t max_of(const T* p, int64_t n) {
  T most = 0;
  for (int64_t i = 0; i < n; ++i) most = std::max(most, p[i]);  // vectorizes
  return n == 0 ? -1 : static_cast<int64_t>(most);
}
}  // namespace

int64_t TokenFile::max_token() const {
  return m_->width == 2 ? max_of(m_->data<uint16_t>(), m_->tokens)
                        : max_of(m_->data<uint32_t>(), m_->tokens);
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens) {
  int32_t version = kTokenFileVersion;
  const std::string payload = encode_tokens(path, tokens, version);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    fail(path, std::to_string(tokens.size()) + " tokens do not fit the header's int32 count");
  int32_t header[kTokenFileHeaderInts] = {kTokenFileMagic, version,
                                          static_cast<int32_t>(tokens.size())};
  // A temporary of this writer's own (util/files.h), removed if anything fails: a failed write
  // leaves nothing behind. The cache's file is replaced whatever it held (its builder holds the
  // cache's lock).
  files::TempGuard guard;
  Fd f{-1};
  try {
    f.fd = files::create_temp_file(path, &guard);
  } catch (const std::runtime_error& e) {
    fail(path, e.what());
  }
  const std::string& tmp = guard.path();
  write_all(f.fd, header, sizeof header, tmp);
  write_all(f.fd, payload.data(), payload.size(), tmp);
  if (::fsync(f.fd) != 0) fail(tmp, "fsync failed: " + errno_text());
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    fail(path, "cannot rename " + tmp + " over it: " + errno_text());
  guard.keep();
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
