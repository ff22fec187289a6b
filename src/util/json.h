// JSON from outside the process (safetensors headers, config.json, tokenizer files, checkpoint
// metadata, index files), read with bounds: a nesting depth checked before nlohmann parses (its
// parser is iterative, but dump(), comparisons and our own walks recurse, and 100,000 nested
// arrays overflowed the stack in an error message's dump()), a size checked before a file is read,
// and excerpts of values for error messages that never serialise more than a few dozen bytes.
// Header-only, so that every layer that reads JSON (data, checkpoint, config, hf) shares it without
// a dependency between them.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace fsdp {
namespace json_bounds {

// Deeper than any file we read (a tokenizer.json's normalizer sequence: about 6 levels).
inline constexpr int kMaxDepth = 64;

// Where `text`, read as JSON, first nests deeper than `max_depth` arrays and objects: the byte
// offset of that bracket, or std::string::npos. Brackets inside strings do not count.
inline size_t too_deep_at(const std::string& text, int max_depth = kMaxDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// The error for text nested too deeply, naming `source` (a file, or what the text is).
inline std::string too_deep_message(const std::string& source, size_t at,
                                    int max_depth = kMaxDepth) {
  return source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " +
         std::to_string(at) + "); no file fsdp.cpp reads nests that deep";
}

// nlohmann's parse after the depth check; a text too deep throws std::runtime_error with
// too_deep_message, a malformed one nlohmann's parse_error as before.
template <typename Json = nlohmann::json>
Json parse(const std::string& text, const std::string& source, int max_depth = kMaxDepth) {
  const size_t at = too_deep_at(text, max_depth);
  if (at != std::string::npos) throw std::runtime_error(too_deep_message(source, at, max_depth));
  return Json::parse(text);
}

// The same without exceptions: a discarded value for text too deep or malformed.
template <typename Json = nlohmann::json>
Json parse_or_discard(const std::string& text, int max_depth = kMaxDepth) {
  if (too_deep_at(text, max_depth) != std::string::npos) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, false);
}

namespace detail {

template <typename Json>
void write_excerpt(const Json& v, std::string& out, size_t limit, int depth) {
  if (out.size() >= limit) return;
  if (depth > kMaxDepth) {
    out += "...";
    return;
  }
  const auto quoted = [&](const std::string& s) {
    const size_t room = limit > out.size() ? limit - out.size() : 0;
    // A cut inside a UTF-8 sequence is written as U+FFFD instead of failing dump().
    out += Json(s.substr(0, room)).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  if (v.is_string()) {
    quoted(v.template get_ref<const typename Json::string_t&>());
  } else if (v.is_array() || v.is_object()) {
    out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() < limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (v.is_object()) {
        quoted(it.key());
        out += ':';
      }
      write_excerpt(*it, out, limit, depth + 1);
    }
    out += v.is_array() ? ']' : '}';
  } else {
    out += v.dump();  // a number, true, false or null: a few bytes
  }
}

}  // namespace detail

// `v` as JSON text for an error message, at most about `limit` bytes ("..." where it was cut).
template <typename Json>
std::string excerpt(const Json& v, size_t limit = 80) {
  std::string out;
  detail::write_excerpt(v, out, limit, 0);
  if (out.size() > limit) {
    out.resize(limit);
    out += "...";
  }
  return out;
}

// The whole of the regular file `path`, refused before reading when it is larger than `max_bytes`
// or not a regular file (a folder, a FIFO, a device such as /dev/zero): std::runtime_error naming
// the path and what it is. `what` names the file's role in messages ("a tokenizer.json").
inline std::string read_file(const std::string& path, size_t max_bytes, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw std::runtime_error(path + ": cannot open " + what + ": " + std::strerror(errno));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw std::runtime_error(path + ": cannot stat " + what + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw std::runtime_error(path + ": is a folder, not " + what);
  if (!S_ISREG(st.st_mode)) {
    throw std::runtime_error(path + ": is not a regular file (a device, FIFO or socket), not " +
                             what);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes, more than " +
                             what + " may hold (" + std::to_string(max_bytes >> 20) + " MiB)");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;  // shrank while read: what was there
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

// Caps for files of the Hugging Face layout (docs/hardening.md): small JSON files as YAML configs
// are capped, and tokenizer.json far above any published one (Llama 3's: 9 MB; Gemma 3's: 33 MB).
inline constexpr size_t kMaxSmallJsonBytes = size_t{1} << 20;       // config.json and the like
inline constexpr size_t kMaxTokenizerJsonBytes = size_t{64} << 20;  // tokenizer.json
// tokenizer_config.json: Gemma 3's lists 6,000 added tokens one by one (over 1 MB as published).
inline constexpr size_t kMaxTokenizerConfigBytes = size_t{16} << 20;

}  // namespace json_bounds
}  // namespace fsdp
