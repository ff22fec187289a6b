// Instruction fine-tuning data: a JSONL file of examples, each line one JSON object, tokenized
// into token files with a loss mask beside them. Three line formats (DataFormat):
//  - text:       {"text": "..."}: the text with the tokenizer's special tokens (a BOS where its
//                post-processor adds one), then its EOS; every token trained;
//  - prompt/completion: {"prompt": "...", "completion": "..."}: prompt + completion tokenized
//                together as above, then EOS; the tokens after the prompt's own count are the
//                answer (TRL's rule for completion-only loss);
//  - messages:   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}:
//                rendered with the tokenizer folder's chat template (fsdp/data/chat_template.h)
//                and tokenized without added special tokens, as apply_chat_template(tokenize=True)
//                does; assistant turn i is the tokens from the rendering of messages[:i] with the
//                generation prompt to the rendering of messages[:i + 1] (their token counts).
// TrainOn chooses the targets: every token, the answers (the completion, every assistant turn) or
// the last answer only. An example's first token is never a target (nothing precedes it).
//
// Storage: like a text corpus (fsdp/data/corpus.h), in a cache entry keyed by the file's bytes,
// the format, TrainOn, the tokenizer's files and the split: train.bin and val.bin hold the tokens
// (fsdp/data/token_file.h), train.flags.bin and val.flags.bin one flag per token (kTokenTarget,
// kTokenStarts), train.lines.bin and val.lines.bin each example's line number, the manifest last.
// Validation is the last val_fraction of the examples.
//
// Hostile files: a line longer than kMaxExampleLineBytes, nested deeper than JSON's bound, not an
// object, missing its fields, with a field of the wrong type, an unknown role or a conversation
// without an answer is a std::runtime_error naming the file, the line and what is wrong; nothing
// is allocated beyond the line being read and the tokens made so far.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/data/chat_template.h"
#include "fsdp/data/token_file.h"

namespace fsdp::data {

enum class DataFormat {
  kAuto,              // from the file: a JSON object on its first line decides, else kText
  kText,              // plain text, a folder of .txt, a token file (fsdp/data/corpus.h)
  kJsonlText,         // {"text": ...}
  kPromptCompletion,  // {"prompt": ..., "completion": ...}
  kMessages,          // {"messages": [...]}
};
const char* to_string(DataFormat format);  // "auto", "text", "jsonl_text", ...

enum class TrainOn {
  kAssistant,      // the completion, or every assistant turn; every token of a text example
  kLastAssistant,  // the completion, or the last assistant turn
  kAll,            // every token
};
const char* to_string(TrainOn train_on);  // "assistant", "last_assistant", "all"

// Flags stored per token.
inline constexpr int32_t kTokenTarget = 1;  // the token is a target: the loss is taken on it
inline constexpr int32_t kTokenStarts = 2;  // the token begins an example

// Longer lines are refused (a line is held whole while it is parsed).
inline constexpr int64_t kMaxExampleLineBytes = int64_t{16} << 20;

struct ExampleOptions {
  DataFormat format = DataFormat::kAuto;
  TrainOn train_on = TrainOn::kAssistant;
  std::string tokenizer_dir = "assets/gpt2";  // its tokenizer, and for messages its chat template
  std::string cache_dir = ".cache/data";
  double val_fraction = 0.05;  // of the examples, from the end, in [0, 1)
  int threads = 0;             // tokenizing threads; 0: one per hardware thread
};

// One split's files: the tokens, their flags, each example's line in the source file (for
// messages about an example), and what they hold.
struct ExampleSplit {
  std::string tokens_path, flags_path, lines_path;
  std::string source;  // the JSONL file the examples came from
  int64_t examples = 0, tokens = 0, targets = 0;
};

struct ExampleCorpus {
  std::string name;  // the file's name without its extension
  DataFormat format = DataFormat::kAuto;
  TrainOn train_on = TrainOn::kAssistant;
  ExampleSplit train, val;
  std::string cache_entry;
  bool built = false;  // tokenized by this call, not found in the cache
  // Examples whose answer's tokens do not follow the prompt's own tokens (the tokenizer merged
  // across the boundary: the count decides, as in TRL); for the log.
  int64_t boundary_mismatches = 0;
};

// The format of `source`: `requested` unless kAuto; else from the first non-blank line of a
// regular file (a JSON object with "messages", "prompt" and "completion", or "text"), kText for
// anything else (a folder, "sotu", a token file, text). Throws std::runtime_error for a JSON
// object with none of those fields, naming the file and the fields it has.
DataFormat detect_format(const std::string& source, DataFormat requested);

// A {"messages": [...]} line: its messages (each with its JSON object), and what else the line
// gives the template: "tools" (a list of JSON schemas) as `tools`.
struct Conversation {
  std::vector<ChatMessage> messages;
  ChatVariables variables;
};

// The conversations of a JSONL file of {"messages": [...]} lines, checked as training data is
// (roles system, user, assistant, tool; contents strings or lists of text parts, none where an
// answer calls tools); throws std::runtime_error naming the line.
std::vector<Conversation> read_conversations(const std::string& path);

// Tokenizes `source` (a JSONL file in options.format, not kAuto or kText) into the cache, or finds
// it there. Throws as described above.
ExampleCorpus prepare_examples(const std::string& source, const ExampleOptions& options);

}  // namespace fsdp::data
