// Token files in llm.c's .bin shard layout, the form every corpus takes before training: a header
// of 256 little-endian int32 followed by the tokens, little-endian:
//
//   header[0]  magic 20240520
//   header[1]  version: 1 = uint16 tokens (llm.c's GPT-2 shards), 2 = uint32 tokens
//   header[2]  number of tokens
//   header[3..255]  0
//
// Version 1 is exactly what llm.c's data scripts (fineweb.py, tinyshakespeare.py) write for GPT-2,
// so their shards are read as they are; version 2 is ours, for vocabularies past 65,536 ids (Llama
// 3's 128,256). llm.c's own uint32 layout (magic 20240801, version 7, its Llama 3 shards) is read
// too. The writer picks version 1 when every id fits a uint16, else version 2. Readers tell the
// width from the header alone.
//
// This file owns reading (a read-only memory mapping: only the pages a reader touches are loaded),
// writing (temporary file, fsync, rename, so that a reader never sees a half-written file) and the
// checks on both.
//
// Every malformed file is a std::runtime_error whose message starts "token file <path>: " and says
// what is wrong: missing, shorter than the header, wrong magic or version, or a token count that
// disagrees with the file's size.
//
// Thread-safety: a TokenFile is immutable once opened; any number of threads may read it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fsdp::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;     // uint16 tokens (llm.c's GPT-2 shards)
inline constexpr int32_t kTokenFileVersionU32 = 2;  // uint32 tokens
inline constexpr int32_t kLlmcU32Magic = 20240801;  // llm.c's uint32 shards (Llama 3) ...
inline constexpr int32_t kLlmcU32Version = 7;       // ... read, never written
inline constexpr int64_t kTokenFileHeaderInts = 256;
inline constexpr int64_t kTokenFileHeaderBytes = kTokenFileHeaderInts * 4;
inline constexpr int64_t kMaxTokenId = 65535;  // what a uint16 (version 1) holds

// Writes `tokens` to `path` atomically: to `<path>.tmp-<pid>` in the same folder, fsync'd, then
// renamed over `path`; version 1 when every token is at most kMaxTokenId, else version 2. Throws
// std::runtime_error naming the path for a negative token (nothing is written then) or a failed
// write.
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens);

// A read-only view of one token file. Copies share the mapping, which lives until the last copy
// goes.
class TokenFile {
 public:
  // Checks the header against the file's size and maps it; throws as described above.
  static TokenFile open(const std::string& path);

  const std::string& path() const;
  int64_t size() const;     // number of tokens
  int token_bytes() const;  // 2 (uint16) or 4 (uint32)

  // Copies tokens [begin, begin + n) to out[0..n), widened to int64. When vocab_size > 0, a token
  // >= vocab_size is a std::runtime_error naming the file, the token's position and its id.
  // Throws std::out_of_range for a range outside [0, size()).
  void read(int64_t begin, int64_t n, int64_t* out, int64_t vocab_size = 0) const;
  // The tokens [begin, begin + n) as int32 (n = -1: to the end), with read()'s checks.
  std::vector<int32_t> tokens(int64_t begin = 0, int64_t n = -1, int64_t vocab_size = 0) const;
  // Scans every token against vocab_size (touches the whole file); throws like read().
  void check_vocab(int64_t vocab_size) const;
  // The largest token id in the file (touches the whole file); -1 for a file of no tokens.
  int64_t max_token() const;

 private:
  struct Mapping;
  explicit TokenFile(std::shared_ptr<const Mapping> m);
  std::shared_ptr<const Mapping> m_;
};

// A contiguous run of tokens in one token file: [begin, end), end = -1 meaning the file's end.
// Corpora hand these out, so a validation split of one pre-tokenized file needs no copy.
struct TokenRange {
  std::string path;
  int64_t begin = 0;
  int64_t end = -1;
};

// Opens each range's file and resolves end = -1; throws (naming the file) for a malformed file or
// a range outside it. The resolved ranges pair with the returned files index by index.
struct OpenedRanges {
  std::vector<TokenFile> files;
  std::vector<TokenRange> ranges;  // end >= begin, both within the file
};
OpenedRanges open_ranges(const std::vector<TokenRange>& ranges);

}  // namespace fsdp::data
