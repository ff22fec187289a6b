// Corpus preparation (fsdp/data/corpus.h): resolving a source to documents or token files,
// the validation split, the cache key, and the locked, atomic build of a cache entry. The entry's
// manifest is its commit marker: it is written (atomically) only after both token files are in
// place, and a reader trusts an entry only through it.
#include "fsdp/data/corpus.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "data/cache_entry.h"
#include "data/parallel.h"
#include "fsdp/data/tokenizer.h"
#include "util/files.h"

namespace fsdp::data {
namespace fs = std::filesystem;
namespace {

using cache::fnv1a;
using cache::fsync_path;
using cache::hex64;
using cache::Manifest;
using cache::manifest_int;
using cache::read_file;
using cache::read_manifest;
using cache::write_text_atomic;

constexpr const char* kCacheFormat = "fsdp-data-cache 2";  // bump when the token layout changes

// ---- small file helpers ----------------------------------------------------------------------

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Regular files in `dir` whose names end in `ext`, sorted by name (byte order).
std::vector<std::string> list_files(const std::string& dir, const std::string& ext) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && ends_with(name, ext)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The last component of a path ("data/books/" -> "books"), without its extension for a file.
std::string source_name(const std::string& path, bool is_file) {
  fs::path p = fs::absolute(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return (is_file ? p.stem() : p.filename()).string();
}

// A cache-entry name made of the source's name: letters, digits, '-', '_' and '.' kept.
std::string safe_name(const std::string& name) {
  std::string out;
  for (char c : name)
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "corpus" : out;
}

void check_options(const CorpusOptions& o) {
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    throw std::invalid_argument("CorpusOptions: val_fraction " + std::to_string(o.val_fraction) +
                                " outside [0, 1)");
  if (o.threads < 0)
    throw std::invalid_argument("CorpusOptions: threads " + std::to_string(o.threads) +
                                " must be >= 0");
}

// ---- text corpora: the plan ------------------------------------------------------------------

// A text corpus before tokenization: its documents in stream order and where validation starts.
struct TextPlan {
  std::string name;
  std::vector<std::string> files;  // one document per file
  size_t first_val_doc = 0;        // documents [first_val_doc, end) are validation
  bool split_by_tokens = false;    // one file: the last val_fraction of tokens instead
  double val_fraction = 0;
  std::string split;  // in words; also part of the cache key
};

// <year>_..., as the SOTU files are named.
int year_of(const std::string& name, const std::string& dir) {
  const bool ok =
      name.size() > 5 && name[4] == '_' &&
      std::all_of(name.begin(), name.begin() + 4, [](char c) { return std::isdigit(c); });
  if (!ok)
    throw std::runtime_error("corpus sotu: " + dir + "/" + name +
                             " is not named <year>_<president>_<party>.txt");
  return std::stoi(name.substr(0, 4));
}

TextPlan plan_sotu(const CorpusOptions& o) {
  if (!fs::is_directory(o.sotu_dir))
    throw std::invalid_argument("corpus sotu: no folder " + o.sotu_dir +
                                " (scripts/fetch_assets.sh fetches the addresses)");
  TextPlan p{
      "sotu", {}, 0,
      false,  0,  "addresses from " + std::to_string(o.sotu_val_from_year) + " on are validation"};
  const auto names = list_files(o.sotu_dir, ".txt");
  for (const auto& name : names) {
    if (year_of(name, o.sotu_dir) < o.sotu_val_from_year) ++p.first_val_doc;
    p.files.push_back((fs::path(o.sotu_dir) / name).string());
  }
  // Names start with the year, so name order is year order and validation is a suffix.
  if (p.first_val_doc == 0 || p.first_val_doc == names.size())
    throw std::invalid_argument(
        "corpus sotu: sotu_val_from_year " + std::to_string(o.sotu_val_from_year) + " leaves " +
        (p.first_val_doc == 0 ? "no training" : "no validation") + " address among the " +
        std::to_string(names.size()) + " in " + o.sotu_dir);
  return p;
}

TextPlan plan_text_folder(const std::string& dir, const CorpusOptions& o) {
  TextPlan p{safe_name(source_name(dir, false)), {}, 0, false, 0, ""};
  for (const auto& name : list_files(dir, ".txt"))
    p.files.push_back((fs::path(dir) / name).string());
  const size_t n = p.files.size();
  if (n == 0) throw std::invalid_argument("corpus " + dir + ": no .txt or .bin files in it");
  size_t n_val = o.val_fraction > 0
                     ? std::max<size_t>(1, static_cast<size_t>(std::llround(o.val_fraction * n)))
                     : 0;
  if (n_val >= n)
    throw std::invalid_argument("corpus " + dir + ": val_fraction " +
                                std::to_string(o.val_fraction) + " of its " + std::to_string(n) +
                                " documents leaves none for training");
  p.first_val_doc = n - n_val;
  p.split = "the last " + std::to_string(n_val) + " of " + std::to_string(n) +
            " documents (val_fraction " + std::to_string(o.val_fraction) + ") are validation";
  return p;
}

TextPlan plan_text_file(const std::string& path, const CorpusOptions& o) {
  TextPlan p{safe_name(source_name(path, true)),
             {path},
             1,
             true,
             o.val_fraction,
             "the last " + std::to_string(o.val_fraction) + " of the tokens are validation"};
  return p;
}

// ---- text corpora: the cache -----------------------------------------------------------------

// Everything the tokens depend on, one line each; its hash names the cache entry.
std::string cache_key_text(const TextPlan& p, uint64_t tokenizer_fingerprint) {
  std::ostringstream k;
  k << kCacheFormat << "\nsplit " << p.split << "\nfirst_val_doc " << p.first_val_doc
    << "\ntokenizer " << hex64(tokenizer_fingerprint) << "\n";
  for (const auto& f : p.files)
    k << "document " << fs::path(f).filename().string() << " " << fs::file_size(f) << " "
      << hex64(hash_file(f)) << "\n";
  return k.str();
}

// What precedes every document: the tokenizer's BOS, else its EOS (GPT-2: <|endoftext|> either
// way), else nothing.
std::optional<int32_t> document_separator(const Tokenizer& tok) {
  return tok.bos_id() ? tok.bos_id() : tok.eos_id();
}

std::vector<std::vector<int32_t>> tokenize(const Tokenizer& tok,
                                           const std::vector<std::string>& files, int threads) {
  std::vector<std::vector<int32_t>> out(files.size());
  const std::optional<int32_t> separator = document_separator(tok);
  parallel_for(files.size(), threads, [&](size_t i) {
    if (separator) out[i].push_back(*separator);
    const auto ids = tok.encode(read_file(files[i]));
    out[i].insert(out[i].end(), ids.begin(), ids.end());
  });
  return out;
}

std::vector<int32_t> concat(std::vector<std::vector<int32_t>>& docs, size_t begin, size_t end) {
  std::vector<int32_t> out;
  for (size_t i = begin; i < end; ++i) {
    out.insert(out.end(), docs[i].begin(), docs[i].end());
    std::vector<int32_t>().swap(docs[i]);
  }
  return out;
}

// Tokenizes the plan's documents and writes train.bin, val.bin and (last) the manifest.
void build_entry(const TextPlan& p, const std::string& entry, const std::string& key_text,
                 const CorpusOptions& o) {
  const auto tok = load_tokenizer(o.tokenizer_dir);
  auto docs = tokenize(*tok, p.files, o.threads);
  std::vector<int32_t> train = concat(docs, 0, p.first_val_doc);
  std::vector<int32_t> val = concat(docs, p.first_val_doc, docs.size());
  if (p.split_by_tokens) {
    const auto n_val = static_cast<size_t>(std::floor(p.val_fraction * train.size()));
    val.assign(train.end() - n_val, train.end());
    train.resize(train.size() - n_val);
  }
  write_token_file(entry + "/train.bin", train);
  write_token_file(entry + "/val.bin", val);
  std::ostringstream m;
  m << "tokenizer_family " << tok->family() << " (" << o.tokenizer_dir << ")\n";
  m << "train_tokens " << train.size() << "\nval_tokens " << val.size() << "\ntrain_documents "
    << (p.split_by_tokens ? 1 : p.first_val_doc) << "\nval_documents "
    << (p.split_by_tokens ? 0 : p.files.size() - p.first_val_doc) << "\nsplit " << p.split
    << "\n# inputs\n"
    << key_text;
  write_text_atomic(entry + "/manifest.txt", m.str());
  fsync_path(entry, O_RDONLY | O_DIRECTORY);
}

// Reads a committed entry, checking the token files against the manifest.
Corpus read_entry(const TextPlan& p, const std::string& entry) {
  const std::string mpath = entry + "/manifest.txt";
  const Manifest m = read_manifest(mpath);
  Corpus c;
  c.name = p.name;
  c.cache_entry = entry;
  c.split = p.split;
  c.train_tokens = manifest_int(m, "train_tokens", mpath);
  c.val_tokens = manifest_int(m, "val_tokens", mpath);
  c.train_documents = manifest_int(m, "train_documents", mpath);
  c.val_documents = manifest_int(m, "val_documents", mpath);
  const std::pair<const char*, int64_t> expected[] = {{"/train.bin", c.train_tokens},
                                                      {"/val.bin", c.val_tokens}};
  for (const auto& [file, count] : expected) {
    const TokenFile f = TokenFile::open(entry + file);
    if (f.size() != count)
      throw std::runtime_error("corpus cache: " + f.path() + " holds " + std::to_string(f.size()) +
                               " tokens but " + mpath + " says " + std::to_string(count) +
                               "; delete " + entry + " to rebuild it");
  }
  c.train.push_back({entry + "/train.bin", 0, c.train_tokens});
  if (c.val_tokens > 0) c.val.push_back({entry + "/val.bin", 0, c.val_tokens});
  return c;
}

// The tokenizer's fingerprint; a folder without tokenizer files is an option we cannot honour.
uint64_t fingerprint_or_throw(const TextPlan& p, const CorpusOptions& o) {
  try {
    return tokenizer_fingerprint(o.tokenizer_dir);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument("corpus " + p.name + ": " + e.what() +
                                " (scripts/fetch_assets.sh fetches GPT-2's)");
  }
}

Corpus prepare_text(const TextPlan& p, const CorpusOptions& o) {
  const std::string key_text = cache_key_text(p, fingerprint_or_throw(p, o));
  Corpus c;
  const cache::Entry e = cache::with_entry(
      o.cache_dir, p.name, key_text,
      [&](const std::string& entry) { build_entry(p, entry, key_text, o); },
      [&](const std::string& entry) { c = read_entry(p, entry); });
  c.built = e.built;
  return c;
}

// ---- token files -----------------------------------------------------------------------------

Corpus prepare_bin_file(const std::string& path, const CorpusOptions& o) {
  const TokenFile f = TokenFile::open(path);
  const auto n_val = static_cast<int64_t>(std::floor(o.val_fraction * f.size()));
  Corpus c;
  c.name = source_name(path, true);
  c.train_tokens = f.size() - n_val;
  c.val_tokens = n_val;
  c.train.push_back({path, 0, c.train_tokens});
  if (n_val > 0) c.val.push_back({path, c.train_tokens, f.size()});
  c.split = "the last " + std::to_string(o.val_fraction) + " of the tokens are validation";
  return c;
}

Corpus prepare_shard_folder(const std::string& dir, const std::vector<std::string>& bins) {
  Corpus c;
  c.name = source_name(dir, false);
  for (const auto& name : bins) {
    const bool train = name.find("_train") != std::string::npos;
    const bool val = name.find("_val") != std::string::npos;
    if (train == val)
      throw std::invalid_argument("corpus " + dir + ": shard " + name +
                                  " is named neither *_train*.bin nor *_val*.bin");
    const TokenFile f = TokenFile::open((fs::path(dir) / name).string());
    (train ? c.train : c.val).push_back({f.path(), 0, f.size()});
    (train ? c.train_tokens : c.val_tokens) += f.size();
  }
  if (c.train.empty())
    throw std::invalid_argument("corpus " + dir + ": no *_train*.bin shard among its .bin files");
  c.split = "*_val*.bin shards are validation";
  return c;
}

// ---- the vocabulary check -------------------------------------------------------------------

// What a file's largest token is remembered with: the file is the same while these are.
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return fs::absolute(path).string() + "\n" + std::to_string(st.st_size) + " " +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "\n";
}

// The file's largest token: from the cache entry when its identity matches, else scanned (and
// remembered, best effort: a cache that cannot be written only costs the next run a scan).
int64_t largest_token(const TokenFile& f, const std::string& cache_dir) {
  const std::string identity = file_identity(f.path());
  const std::string dir = cache_dir + "/token-max";
  const std::string entry = dir + "/" + hex64(fnv1a(identity.data(), identity.size())) + ".txt";
  std::ifstream in(entry, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string cached = text.str();
  if (!identity.empty() && cached.size() > identity.size() &&
      cached.compare(0, identity.size(), identity) == 0) {
    return std::strtoll(cached.c_str() + identity.size(), nullptr, 10);
  }
  const int64_t most = f.max_token();
  if (!identity.empty()) {
    try {
      fs::create_directories(dir);
      write_text_atomic(entry, identity + std::to_string(most) + "\n");
    } catch (const std::exception&) {
      // an optimisation only: the next run scans again
    }
  }
  return most;
}

}  // namespace

void check_vocabulary(const std::vector<TokenRange>& ranges, int64_t vocab_size,
                      const std::string& cache_dir) {
  std::set<std::string> seen;
  for (const TokenRange& r : ranges) {
    if (!seen.insert(r.path).second) continue;
    const TokenFile f = TokenFile::open(r.path);
    if (largest_token(f, cache_dir) >= vocab_size) f.check_vocab(vocab_size);  // names the token
  }
}

uint64_t hash_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("corpus: cannot read " + path + ": " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  uint64_t h = fnv1a(nullptr, 0);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = fnv1a(buf.data(), static_cast<size_t>(in.gcount()), h);
  }
  if (in.bad()) throw std::runtime_error("corpus: error reading " + path);
  return h;
}

Corpus prepare_corpus(const std::string& source, const CorpusOptions& options) {
  check_options(options);
  if (source == "sotu") return prepare_text(plan_sotu(options), options);
  if (fs::is_directory(source)) {
    const auto bins = list_files(source, ".bin");
    if (!bins.empty()) return prepare_shard_folder(source, bins);
    return prepare_text(plan_text_folder(source, options), options);
  }
  if (fs::is_regular_file(source)) {
    if (ends_with(source, ".bin")) return prepare_bin_file(source, options);
    return prepare_text(plan_text_file(source, options), options);
  }
  std::error_code ec;
  const std::string what =
      !fs::exists(source, ec)
          ? "no such file or folder"
          : "neither a regular file nor a folder (a device, a pipe or a socket)";
  throw std::invalid_argument("corpus " + source + ": " + what +
                              " (a source is 'sotu', a text file, a "
                              "folder of .txt files, a .bin token file or a folder of llm.c "
                              "*_train*.bin/*_val*.bin shards)");
}

}  // namespace fsdp::data
