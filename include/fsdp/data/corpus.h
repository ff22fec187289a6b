// Corpora: from a source a user names to the train and validation token ranges the loaders read.
// Text is tokenized once, with the tokenizer in CorpusOptions::tokenizer_dir (either family of
// fsdp/data/tokenizer.h), into a cache entry and read from there afterwards; token files are used
// where they lie. Sources (docs/data.md has the details):
//  - "sotu": the State of the Union addresses in CorpusOptions::sotu_dir (scripts/fetch_assets.sh
//    puts them there), one file per address named <year>_<president>_<party>.txt; the addresses
//    from sotu_val_from_year on are validation.
//  - a folder of .txt files: one document per file, in file-name order; the last val_fraction of
//    the documents are validation.
//  - one text file: one document; the last val_fraction of its tokens are validation.
//  - a .bin token file: used as it is; its last val_fraction of tokens are validation.
//  - a folder of llm.c shards: *_train*.bin files are training data, *_val*.bin validation.
// In tokenized text every document is preceded by the tokenizer's BOS token, or its EOS token when
// it has no BOS (GPT-2: <|endoftext|>, 50256, as llm.c's data scripts write it; Qwen2: its EOS),
// so the model sees a document boundary before each document's first token. Documents are
// encoded without the post-processor's special tokens.
//
// The cache. A text corpus lives in <cache_dir>/<name>-<key>/ as train.bin, val.bin and
// manifest.txt. The key is a 64-bit hash of what the tokens depend on: the file names and contents
// of the documents, the tokenizer's fingerprint (its files' contents), the split rule and the cache
// format, so a changed input or rule makes a new entry. Token files are written atomically (uint16
// or, for ids past 65,535, uint32: token_file.h) and the manifest last, and an entry without a
// manifest is never read: a build killed midway is redone by the next call. Processes that prepare
// the same corpus at once (the ranks of one host) take turns on a file lock (<entry>/.lock, flock),
// so the corpus is tokenized once. Old entries are not removed.
//
// Errors are exceptions naming the source, file or value at fault: std::invalid_argument for a
// source or option that cannot be honoured, std::runtime_error for unreadable or malformed files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/data/token_file.h"

namespace fsdp::data {

struct CorpusOptions {
  // Where tokenized text corpora are kept (created if missing).
  std::string cache_dir = ".cache/data";
  // The tokenizer's folder: a Hugging Face tokenizer.json (+ tokenizer_config.json), or GPT-2's
  // encoder.json and vocab.bpe (scripts/fetch_assets.sh fetches those to the default).
  std::string tokenizer_dir = "assets/gpt2";
  // The "sotu" corpus: <year>_<president>_<party>.txt files.
  std::string sotu_dir = "assets/sotu";
  // SOTU addresses given in this year or later are validation: 2000 takes the 22 addresses of
  // 2000-2021, about 7% of the tokens.
  int sotu_val_from_year = 2000;
  // Other corpora: the fraction, in [0, 1), of documents (a folder of .txt) or tokens (one text
  // or .bin file) taken from the end as validation. 0: no validation data. Unused for shard
  // folders, whose _val files are the validation data.
  double val_fraction = 0.05;
  // Threads that tokenize documents at once; 0: one per hardware thread.
  int threads = 0;
};

struct Corpus {
  std::string name;                    // "sotu", or the source's file or folder name
  std::vector<TokenRange> train, val;  // val is empty when the corpus has no validation data
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_documents = 0, val_documents = 0;  // 0 for token files (not counted)
  std::string cache_entry;  // the cache folder holding the token files; empty for token files
  bool built = false;       // true when this call tokenized the corpus (not found in the cache)
  std::string split;        // how validation was chosen, in words, for logs
};

// Resolves `source` as described above, tokenizing a text corpus unless the cache has it.
Corpus prepare_corpus(const std::string& source, const CorpusOptions& options = {});

// Checks that every token of `ranges` is below vocab_size, before training: a token file with a
// few tokens outside the vocabulary fails at once, not when their window happens to be drawn.
// Each file is scanned once; its largest token id is remembered under <cache_dir>/token-max/ with
// the file's path, size and modification time, and scanned again only when one of them changes.
// Throws std::runtime_error naming the file, the first bad token's position and its id.
void check_vocabulary(const std::vector<TokenRange>& ranges, int64_t vocab_size,
                      const std::string& cache_dir);

// The cache key's input: a 64-bit FNV-1a hash of a file's bytes (exposed for tests and tools).
uint64_t hash_file(const std::string& path);

}  // namespace fsdp::data
