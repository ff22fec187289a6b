// load_tokenizer and tokenizer_fingerprint (fsdp/data/tokenizer.h): which family a folder's files
// belong to, and their fingerprint without parsing them.
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "data/fingerprint.h"
#include "fsdp/data/hf_tokenizer.h"
#include "fsdp/data/tokenizer.h"
#include "util/json.h"

namespace fsdp::data {
namespace {

namespace fs = std::filesystem;

// The files a tokenizer folder is read from: tokenizer.json (+ tokenizer_config.json, which may
// be missing), or encoder.json + vocab.bpe (vocab.json + merges.txt in a transformers folder).
struct TokenizerFiles {
  bool tokenizer_json;
  std::string first, second;
};

// The files, or nullopt when the folder has neither kind.
std::optional<TokenizerFiles> files_in(const std::string& dir) {
  const std::string d = fs::path(dir).lexically_normal().string();
  // tokenizer.json in any form (a folder, a FIFO, a link to a device) is the tokenizer the folder
  // means: its reader names what it is, instead of "no tokenizer".
  std::error_code ec;
  if (fs::exists(fs::symlink_status(d + "/tokenizer.json", ec)))
    return TokenizerFiles{true, d + "/tokenizer.json", d + "/tokenizer_config.json"};
  if (fs::is_regular_file(d + "/encoder.json") && fs::is_regular_file(d + "/vocab.bpe"))
    return TokenizerFiles{false, d + "/encoder.json", d + "/vocab.bpe"};
  // The same two files under the names transformers' GPT2Tokenizer gives them.
  if (fs::is_regular_file(d + "/vocab.json") && fs::is_regular_file(d + "/merges.txt"))
    return TokenizerFiles{false, d + "/vocab.json", d + "/merges.txt"};
  return std::nullopt;
}

TokenizerFiles find_files(const std::string& dir) {
  if (auto f = files_in(dir)) return *f;
  const std::string d = fs::path(dir).lexically_normal().string();
  throw std::runtime_error("tokenizer folder " + dir +
                           (fs::is_directory(d) ? "" : " (no such folder)") + ": found neither " +
                           d + "/tokenizer.json nor GPT-2's " + d + "/encoder.json + " + d +
                           "/vocab.bpe (or vocab.json + merges.txt)");
}

// A file of the tokenizer, bounded as the tokenizer's loader bounds it; "" when absent.
std::string read_if_present(const std::string& path) {
  if (!fs::exists(fs::symlink_status(path))) return "";
  return json_bounds::read_file(path, json_bounds::kMaxTokenizerJsonBytes, "a tokenizer file");
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  const TokenizerFiles f = find_files(dir);
  if (f.tokenizer_json) return std::make_unique<HFTokenizer>(HFTokenizer::load(dir));
  return std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::load(f.first, f.second));
}

bool has_tokenizer(const std::string& dir) { return files_in(dir).has_value(); }

uint64_t tokenizer_fingerprint(const std::string& dir) {
  const TokenizerFiles f = find_files(dir);
  const std::string first = read_if_present(f.first), second = read_if_present(f.second);
  return files_fingerprint(f.tokenizer_json ? "tokenizer.json" : "gpt2-files", {first, second});
}

}  // namespace fsdp::data
