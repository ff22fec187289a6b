// The steps of a Hugging Face tokenizer (tokenizers' TokenizerImpl) that fsdp.cpp reads, as plain
// data, and the engine that runs them: added tokens are split out of the text first (those not
// normalized on the raw text, the others on each normalized piece), each remaining piece is
// normalized, pre-tokenized and handed to the BPE model; the post-processor's template adds special
// tokens; decoding maps ids back to token strings and runs the decoders. Every step follows the
// Rust source of tokenizers 0.23 (named on each function), since ids must be identical to its.
// tokenizer.json's reader (hf_tokenizer.cpp) and GPT-2's files (tokenizer.cpp) both fill a
// PipelineSpec. Regexes are Oniguruma's (onig_regex.h), Unicode is utf8proc's (unicode.h).
// Thread-safe once built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_model.h"
#include "data/pretokenize.h"

namespace fsdp::data::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

struct NormalizerStep {
  enum class Kind { kNfc, kNfkc, kNfd, kNfkd, kLowercase, kStrip, kPrepend, kReplace } kind;
  explicit NormalizerStep(Kind k) : kind(k) {}
  std::string text;                    // kPrepend: the text prepended
  std::shared_ptr<const Regex> regex;  // kReplace: every match becomes `content`
  std::string content;
  bool left = false, right = false;  // kStrip
};

enum class PrependScheme { kFirst, kNever, kAlways };

struct PreTokenizerStep {
  enum class Kind {
    kByteLevel,
    kSplit,
    kMetaspace,
    kDigits,
    kWhitespace,
    kWhitespaceSplit,
    kPunctuation
  } kind;
  explicit PreTokenizerStep(Kind k) : kind(k) {}
  bool add_prefix_space = false, use_regex = true;    // kByteLevel
  std::shared_ptr<const Regex> regex;                 // kSplit
  bool invert = false;                                // kSplit
  SplitBehavior behavior = SplitBehavior::kIsolated;  // kSplit, kPunctuation
  bool individual_digits = false;                     // kDigits
  std::string replacement;                            // kMetaspace
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
};

struct DecoderStep {
  enum class Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } kind;
  explicit DecoderStep(Kind k) : kind(k) {}
  std::shared_ptr<const Regex> regex;                     // kReplace: each match becomes content
  std::string text, content;                              // kMetaspace: text = replacement;
                                                          // kStrip: content = the character
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  size_t start = 0, stop = 0;                             // kStrip
};

// One item of TemplateProcessing's single template (RobertaProcessing's is cls $A sep): the input
// sequence, or these ids. A pair template is never applied: a causal LM encodes one sequence.
struct TemplateItem {
  bool sequence = false;
  std::vector<int32_t> ids;
};

struct PipelineSpec {
  std::vector<AddedToken> added_tokens;  // ids already assigned (see assign_added_ids)
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
  bool has_decoder = false;                          // none: tokens joined with spaces
  std::vector<std::vector<TemplateItem>> templates;  // applied in order with special tokens
  // Decoded bytes are returned as they are instead of replacing invalid UTF-8 with U+FFFD (the
  // GPT-2 files family keeps its byte-exact round trip).
  bool raw_bytes = false;
};

// AddedVocabulary::add_tokens: a token already in the vocabulary (added or model) keeps that id;
// the others get the next free id after the model's vocabulary. tokenizer.json's "id" fields are
// not read by Hugging Face either.
void assign_added_ids(std::vector<AddedToken>& tokens, const BpeModel& model);

class Pipeline {
 public:
  Pipeline(PipelineSpec spec, BpeModel model);

  // encode(text, add_special_tokens) of tokenizers' Tokenizer, ids only.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // decode(ids, skip_special_tokens=false); throws std::out_of_range for an id that is neither
  // an added token nor in the model's vocabulary (Hugging Face drops it silently).
  std::string decode(const std::vector<int32_t>& ids) const;

  // get_vocab_size(with_added_tokens=true).
  size_t vocab_size() const;
  int32_t max_id() const;  // the largest id of the vocabulary and the added tokens
  // The id of a token string (added tokens first, then the model's vocabulary), or -1.
  int32_t token_to_id(const std::string& token) const;
  const std::vector<AddedToken>& added_tokens() const { return spec_.added_tokens; }
  const BpeModel& model() const { return model_; }

 private:
  struct Piece;
  struct Match {
    size_t start, end;
    const AddedToken* token;
  };
  std::string normalize(std::string text, bool* at_start = nullptr) const;
  std::vector<Match> find_added(std::string_view text, bool normalized) const;
  void split_added(const Piece& piece, bool normalized, std::vector<Piece>& out) const;
  void pre_tokenize(size_t step, std::string text, bool at_start, std::vector<int32_t>& out) const;
  void apply_pre_step(const PreTokenizerStep& s, std::string& text, bool at_start,
                      std::vector<std::pair<std::string, bool>>& out) const;
  std::vector<std::string> tokens_of(const std::vector<int32_t>& ids) const;

  PipelineSpec spec_;
  BpeModel model_;
  std::vector<std::string> match_form_;  // per added token: the string matched (and decoded)
  std::vector<std::vector<size_t>> by_first_byte_[2];  // [normalized]: tokens by first byte,
                                                       // longest first
  std::unordered_map<int32_t, size_t> added_by_id_;
};

}  // namespace fsdp::data::hf
