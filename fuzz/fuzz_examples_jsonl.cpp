// Fuzz target: an instruction fine-tuning JSONL file (fsdp/data/examples.h), as the trainer reads
// it: detect_format on it, read_conversations (the messages format's checks), and prepare_examples
// in the text, prompt/completion and messages formats into a cache of its own, with a 263-token
// GPT-2 style tokenizer (the tokenizer_files seed mini_vocab: GPT-2's own took a second an input
// to load under the sanitizers) and a chat template that takes content as a string or as a list
// of text parts (Gemma 3's way), tool calls and tools, so that assistant spans and the
// rendering's checks run too.
// Malformed files are a std::runtime_error; a file tokenized into the cache has, per split, one
// flag per token, no more targets than tokens, and one line number per example.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "fsdp/data/examples.h"
#include "fuzz_target.h"

namespace {

namespace fs = std::filesystem;
using fsdp::data::DataFormat;

// A folder of this process's own (made once; a fuzzing run reuses it input after input), with
// the tokenizer in tok/: mini_vocab is encoder.json, a NUL byte, then vocab.bpe.
const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("fsdp_fuzz_examples_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "tok");
    std::ifstream in(FSDP_FUZZ_DIR "/corpus/tokenizer_files/mini_vocab", std::ios::binary);
    const std::string both((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t nul = both.find('\0');
    fsdp::fuzz::require(nul != std::string::npos, "mini_vocab: no NUL between its two files");
    std::ofstream(d / "tok" / "encoder.json", std::ios::binary) << both.substr(0, nul);
    std::ofstream(d / "tok" / "vocab.bpe", std::ios::binary) << both.substr(nul + 1);
    std::ofstream(d / "tok" / "chat_template.jinja", std::ios::binary)
        << "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}<{{ m.role }}>"
           "{% if m.content is string %}{{ m.content | trim }}{% elif m.content %}"
           "{% for p in m.content %}{% if p.type == 'text' %}{{ p.text | trim }}{% endif %}"
           "{% endfor %}{% endif %}{% for c in m.tool_calls %}{{ c.function | tojson }}"
           "{% endfor %}</s>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
    return d;
  }();
  return dir;
}

void check_split(const fsdp::data::ExampleSplit& s) {
  using fsdp::data::TokenFile;
  using fsdp::fuzz::require;
  require(s.targets <= s.tokens, "more targets than tokens in " + s.tokens_path);
  require(TokenFile::open(s.tokens_path).size() == s.tokens, "token count of " + s.tokens_path);
  require(TokenFile::open(s.flags_path).size() == s.tokens,
          "one flag per token in " + s.flags_path);
  require(TokenFile::open(s.lines_path).size() == s.examples, "one line per example");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path file = scratch() / "data.jsonl";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    fsdp::data::detect_format(file.string(), DataFormat::kAuto);
  } catch (const std::runtime_error&) {
  }
  try {
    fsdp::data::read_conversations(file.string());
  } catch (const std::runtime_error&) {
  }
  for (DataFormat format :
       {DataFormat::kJsonlText, DataFormat::kPromptCompletion, DataFormat::kMessages}) {
    fsdp::data::ExampleOptions o;
    o.format = format;
    o.tokenizer_dir = (scratch() / "tok").string();
    o.cache_dir = (scratch() / "cache").string();
    o.val_fraction = 0.5;
    o.threads = 1;
    try {
      const auto corpus = fsdp::data::prepare_examples(file.string(), o);
      check_split(corpus.train);
      if (corpus.val.examples > 0) check_split(corpus.val);
    } catch (const std::runtime_error&) {
    }
    fs::remove_all(o.cache_dir);  // every input is a new cache entry
  }
  return 0;
}
