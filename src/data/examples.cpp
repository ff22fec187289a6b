// Instruction data (fsdp/data/examples.h): reading a JSONL file line by line with bounds, each
// line's checks, its tokens and their flags by format, and the cache entry they are kept in.
#include "fsdp/data/examples.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "data/cache_entry.h"
#include "data/parallel.h"
#include "fsdp/data/chat_template.h"
#include "fsdp/data/corpus.h"
#include "fsdp/data/tokenizer.h"
#include "util/json.h"

namespace fsdp::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kExampleCacheFormat = "fsdp-examples 2";  // bump when the layout changes

// Ordered: a message's keys reach the template in the file's order, as json.loads keeps them
// (a template printing a tool's schema with tojson prints them in that order).
using Json = nlohmann::ordered_json;

// ---- reading lines ---------------------------------------------------------------------------

// The file's lines, each with its 1-based number; blank lines (only whitespace) are skipped. A line
// longer than kMaxExampleLineBytes is refused before more of it is read.
struct Line {
  int64_t number = 0;
  std::string text;
};

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

std::string where(const std::string& path, int64_t line) {
  return "'" + path + "' line " + std::to_string(line);
}

// Calls fn(line) for each non-blank line; stops when fn returns false.
template <typename Fn>
void for_each_line(const std::string& path, Fn fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot read: " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  Line line{1, {}};
  auto finish = [&]() {
    if (!line.text.empty() && line.text.back() == '\r') line.text.pop_back();
    const bool go_on = blank(line.text) || fn(line);
    line.text.clear();
    ++line.number;
    return go_on;
  };
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < got;) {
      const char* nl = static_cast<const char*>(std::memchr(buf.data() + i, '\n', got - i));
      const size_t end = nl ? static_cast<size_t>(nl - buf.data()) : got;
      if (static_cast<int64_t>(line.text.size() + (end - i)) > kMaxExampleLineBytes) {
        throw std::runtime_error(where(path, line.number) + ": longer than " +
                                 std::to_string(kMaxExampleLineBytes >> 20) +
                                 " MiB (one example a line; is this a JSONL file?)");
      }
      line.text.append(buf.data() + i, end - i);
      i = end;
      if (nl) {
        ++i;
        if (!finish()) return;
      }
    }
  }
  if (in.bad()) throw std::runtime_error("'" + path + "': error reading it");
  if (!line.text.empty()) finish();
}

Json parse_line(const Line& line, const std::string& path) {
  try {
    Json j = json_bounds::parse<Json>(line.text, where(path, line.number));
    if (!j.is_object()) {
      throw std::runtime_error(where(path, line.number) + ": a JSON " + j.type_name() +
                               ", not an object (each line is one example: {\"messages\": ...}, "
                               "{\"prompt\": ..., \"completion\": ...} or {\"text\": ...})");
    }
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where(path, line.number) + ": not JSON (" + e.what() + ")");
  }
}

// ---- one example -----------------------------------------------------------------------------

struct Example {
  int64_t line = 0;
  std::vector<int32_t> ids;
  std::vector<int32_t> flags;
  bool boundary_mismatch = false;
};

std::string text_field(const Json& j, const std::string& key, const std::string& at) {
  const auto it = j.find(key);
  if (it == j.end()) throw std::runtime_error(at + ": no \"" + key + "\" field");
  if (!it->is_string()) {
    throw std::runtime_error(at + ": \"" + key + "\" is a JSON " + it->type_name() +
                             ", not a string");
  }
  return it->get<std::string>();
}

// Flags for ids [0, n): the first starts the example; [from, to) are targets (never the first).
std::vector<int32_t> flags_for(size_t n, const std::vector<std::pair<size_t, size_t>>& targets) {
  std::vector<int32_t> flags(n, 0);
  for (const auto& [from, to] : targets) {
    for (size_t i = std::max<size_t>(from, 1); i < std::min(to, n); ++i) flags[i] = kTokenTarget;
  }
  if (n > 0) flags[0] = kTokenStarts;
  return flags;
}

void append_eos(std::vector<int32_t>& ids, const Tokenizer& tok) {
  if (tok.eos_id() && (ids.empty() || ids.back() != *tok.eos_id())) ids.push_back(*tok.eos_id());
}

Example text_example(const Json& j, const std::string& at, const Tokenizer& tok) {
  Example e;
  e.ids = tok.encode_with_special_tokens(text_field(j, "text", at));
  append_eos(e.ids, tok);
  e.flags = flags_for(e.ids.size(), {{0, e.ids.size()}});
  return e;
}

// TRL's completion-only rule: the prompt's own token count marks where the answer starts.
Example prompt_completion_example(const Json& j, const std::string& at, const Tokenizer& tok,
                                  TrainOn train_on) {
  const std::string prompt = text_field(j, "prompt", at);
  const std::string completion = text_field(j, "completion", at);
  const std::vector<int32_t> prompt_ids = tok.encode_with_special_tokens(prompt);
  Example e;
  e.ids = tok.encode_with_special_tokens(prompt + completion);
  e.boundary_mismatch = e.ids.size() < prompt_ids.size() ||
                        !std::equal(prompt_ids.begin(), prompt_ids.end(), e.ids.begin());
  append_eos(e.ids, tok);
  const size_t from = train_on == TrainOn::kAll ? 0 : std::min(prompt_ids.size(), e.ids.size());
  e.flags = flags_for(e.ids.size(), {{from, e.ids.size()}});
  return e;
}

// Whether a message calls tools: a "tool_calls" list that is not empty (anything else but null
// is refused).
bool calls_tools(const Json& m, const std::string& here) {
  const auto it = m.find("tool_calls");
  if (it == m.end() || it->is_null()) return false;
  if (!it->is_array()) {
    throw std::runtime_error(here + ": \"tool_calls\" is a JSON " + std::string(it->type_name()) +
                             ", not a list of {\"type\": \"function\", \"function\": ...} "
                             "objects");
  }
  return !it->empty();
}

// A message's content: a string, or a list of text parts [{"type": "text", "text": ...}] (the
// form multimodal templates take); another part type is refused, since the model reads text only.
// An answer that calls tools may have none (null or no "content"), as transformers' own examples
// write it; the template then gets it so.
ChatMessage content_of(const Json& m, const std::string& role, bool calls,
                       const std::string& here) {
  ChatMessage msg;
  const auto it = m.find("content");
  const bool none = it == m.end() || it->is_null();
  if (none && role == "assistant" && calls) return msg;
  if (it == m.end() || it->is_string()) {
    msg.content = text_field(m, "content", here);
    return msg;
  }
  if (!it->is_array()) {
    throw std::runtime_error(here + ": \"content\" is a JSON " + std::string(it->type_name()) +
                             ", neither a string nor a list of {\"type\": \"text\", \"text\": "
                             "...} parts" +
                             (it->is_null() ? " (null only where an answer calls tools)" : ""));
  }
  msg.parts.emplace();
  for (size_t k = 0; k < it->size(); ++k) {
    const Json& part = (*it)[k];
    const std::string at = here + ": content[" + std::to_string(k) + "]";
    if (!part.is_object()) {
      throw std::runtime_error(at + " is a JSON " + std::string(part.type_name()) +
                               ", not a {\"type\": \"text\", \"text\": ...} object");
    }
    const std::string type = text_field(part, "type", at);
    if (type != "text") {
      throw std::runtime_error(at + ": a part of type '" + type +
                               "'; only text parts can be trained on (the model reads text)");
    }
    msg.parts->push_back(text_field(part, "text", at));
  }
  // A template written for strings prints an empty list as "[]", which no check could tell from
  // words; an empty message is "".
  if (msg.parts->empty()) {
    throw std::runtime_error(here +
                             ": \"content\" is an empty list of parts (an empty message "
                             "is \"\")");
  }
  return msg;
}

// A {"messages": [...]} line's conversation; the template gets each message's object as it is,
// and the line's "tools" (a list of JSON schemas) as its `tools`.
Conversation conversation_of(const Json& j, const std::string& at) {
  const auto it = j.find("messages");
  if (it == j.end()) throw std::runtime_error(at + ": no \"messages\" field");
  if (!it->is_array()) {
    throw std::runtime_error(at + ": \"messages\" is a JSON " + std::string(it->type_name()) +
                             ", not a list of {\"role\", \"content\"} objects");
  }
  Conversation out;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string here = at + ": messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      throw std::runtime_error(here + " is a JSON " + std::string(m.type_name()) +
                               ", not a {\"role\", \"content\"} object");
    }
    const std::string role = text_field(m, "role", here);
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      throw std::runtime_error(here + ": role '" + role +
                               "' is not one of system, user, assistant, tool");
    }
    ChatMessage msg = content_of(m, role, calls_tools(m, here), here);
    msg.role = role;
    msg.json = m.dump();
    out.messages.push_back(std::move(msg));
  }
  if (out.messages.empty()) throw std::runtime_error(at + ": \"messages\" is empty");
  const auto tools = j.find("tools");
  if (tools != j.end() && !tools->is_null()) {
    if (!tools->is_array()) {
      throw std::runtime_error(at + ": \"tools\" is a JSON " + std::string(tools->type_name()) +
                               ", not a list of tools (JSON schemas)");
    }
    out.variables.emplace("tools", ChatValue::json(tools->dump()));
  }
  return out;
}

// The byte ranges of the assistant turns to train on in `whole`, the conversation's rendering:
// each from the end of the rendering of the messages before it with the generation prompt to
// where its own rendering ends (ChatTemplate::render_with_spans). With kLastAssistant and an
// answer last, only that answer, whose end is the text's: a template that rewrites earlier turns
// (Qwen3 drops their reasoning) still has it.
std::vector<std::pair<size_t, size_t>> answer_spans(const Conversation& c, const std::string& whole,
                                                    const ChatTemplate& chat, TrainOn train_on,
                                                    const std::string& at) {
  const std::vector<ChatMessage>& messages = c.messages;
  const bool last_only = train_on == TrainOn::kLastAssistant;
  if (last_only && messages.back().role == "assistant") {
    const std::vector<ChatMessage> before(messages.begin(), messages.end() - 1);
    const std::string asked = chat.render(before, /*add_generation_prompt=*/true, c.variables);
    if (whole.compare(0, asked.size(), asked) != 0) {
      throw std::runtime_error(at +
                               ": the chat template renders the conversation before its "
                               "last answer, with the generation prompt, as something other "
                               "than the start of the whole; its answer cannot be found");
    }
    return {{asked.size(), whole.size()}};
  }
  std::vector<std::pair<size_t, size_t>> spans;
  try {
    spans = chat.render_with_spans(messages, c.variables).assistant_spans;
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(at + ": " + e.what() +
                             "; use data.train_on last_assistant (with the answer last) or all");
  }
  if (last_only) spans.erase(spans.begin(), spans.end() - 1);
  return spans;
}

// Why a template may have failed on a conversation, where the data's form is the likely cause.
std::string likely_cause(const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages) {
    if (m.parts)
      return " (a message's content is a list of parts; this template may take string "
             "content only)";
  }
  for (const ChatMessage& m : messages) {
    if (!m.parts && m.role == "assistant" && m.content.empty() && !m.json.empty() &&
        !Json::parse(m.json).value("content", Json()).is_string())
      return " (an answer that calls tools has no content; this template may need \"\" there)";
  }
  return "";
}

Example messages_example(const Json& j, const std::string& at, const Tokenizer& tok,
                         const ChatTemplate& chat, TrainOn train_on) {
  const Conversation c = conversation_of(j, at);
  const std::vector<ChatMessage>& messages = c.messages;
  const bool answered = std::any_of(messages.begin(), messages.end(),
                                    [](const ChatMessage& m) { return m.role == "assistant"; });
  if (!answered && train_on != TrainOn::kAll) {
    throw std::runtime_error(at + ": no assistant message to train on (data.train_on " +
                             std::string(to_string(train_on)) + ")");
  }
  Example e;
  std::string whole;
  try {
    whole = chat.render(messages, /*add_generation_prompt=*/false, c.variables);
    chat.check_rendering(messages, whole, /*add_generation_prompt=*/false, c.variables);
  } catch (const ChatTemplateError& err) {
    // Templates written for string content fail on a list of parts or a null content (Qwen's
    // adds it to a string): the error names the template's line, this says why.
    throw std::runtime_error(at + ": " + err.what() +
                             (!err.raised() && err.line() > 0 ? likely_cause(messages) : ""));
  }
  e.ids = tok.encode(whole);
  if (train_on == TrainOn::kAll) {
    e.flags = flags_for(e.ids.size(), {{0, e.ids.size()}});
    return e;
  }
  // Token boundaries are the token counts of the text's prefixes, TRL's rule; a prefix whose
  // tokens are not the start of the whole's (a merge across the boundary) is counted for the log.
  std::vector<std::pair<size_t, size_t>> spans;
  for (const auto& [from, to] : answer_spans(c, whole, chat, train_on, at)) {
    const std::vector<int32_t> asked = tok.encode(std::string_view(whole).substr(0, from));
    e.boundary_mismatch |= !std::equal(asked.begin(), asked.end(), e.ids.begin());
    const size_t end = to == whole.size()
                           ? e.ids.size()
                           : tok.encode(std::string_view(whole).substr(0, to)).size();
    spans.emplace_back(asked.size(), end);
  }
  e.flags = flags_for(e.ids.size(), spans);
  return e;
}

// ---- the whole file --------------------------------------------------------------------------

struct Tokenized {
  std::vector<Example> examples;  // in line order
  int64_t mismatches = 0;
};

// Lines are read (and held) first, then tokenized by `threads` threads; each line's errors name it.
Tokenized tokenize_lines(const std::string& path, const ExampleOptions& o, const Tokenizer& tok,
                         const ChatTemplate* chat) {
  std::vector<Line> lines;
  for_each_line(path, [&](const Line& line) {
    lines.push_back(line);
    return true;
  });
  if (lines.empty()) throw std::runtime_error("'" + path + "': no examples (every line is blank)");
  Tokenized out;
  out.examples.resize(lines.size());
  parallel_for(lines.size(), o.threads, [&](size_t i) {
    const std::string at = where(path, lines[i].number);
    const Json j = parse_line(lines[i], path);
    Example& e = out.examples[i];
    switch (o.format) {
      case DataFormat::kJsonlText:
        e = text_example(j, at, tok);
        break;
      case DataFormat::kPromptCompletion:
        e = prompt_completion_example(j, at, tok, o.train_on);
        break;
      default:
        e = messages_example(j, at, tok, *chat, o.train_on);
        break;
    }
    e.line = lines[i].number;
    std::string().swap(lines[i].text);
  });
  for (const Example& e : out.examples) out.mismatches += e.boundary_mismatch ? 1 : 0;
  return out;
}

ExampleSplit write_split(const std::vector<Example>& examples, size_t begin, size_t end,
                         const std::string& entry, const std::string& name) {
  std::vector<int32_t> ids, flags, lines;
  ExampleSplit s;
  for (size_t i = begin; i < end; ++i) {
    lines.push_back(static_cast<int32_t>(std::min<int64_t>(examples[i].line, INT32_MAX)));
    ids.insert(ids.end(), examples[i].ids.begin(), examples[i].ids.end());
    flags.insert(flags.end(), examples[i].flags.begin(), examples[i].flags.end());
    s.targets += std::count(examples[i].flags.begin(), examples[i].flags.end(), kTokenTarget);
  }
  s.examples = static_cast<int64_t>(end - begin);
  s.tokens = static_cast<int64_t>(ids.size());
  s.tokens_path = entry + "/" + name + ".bin";
  s.flags_path = entry + "/" + name + ".flags.bin";
  s.lines_path = entry + "/" + name + ".lines.bin";
  write_token_file(s.tokens_path, ids);
  write_token_file(s.flags_path, flags);
  write_token_file(s.lines_path, lines);
  return s;
}

std::string cache_key(const std::string& path, const ExampleOptions& o) {
  std::ostringstream k;
  k << kExampleCacheFormat << "\nformat " << to_string(o.format) << "\ntrain_on "
    << to_string(o.train_on) << "\nval_fraction " << o.val_fraction << "\ntokenizer "
    << cache::hex64(tokenizer_fingerprint(o.tokenizer_dir)) << "\n";
  const std::string jinja = o.tokenizer_dir + "/chat_template.jinja";
  if (o.format == DataFormat::kMessages && fs::exists(jinja)) {
    k << "chat_template.jinja " << cache::hex64(hash_file(jinja)) << "\n";
  }
  k << "file " << fs::path(path).filename().string() << " " << fs::file_size(path) << " "
    << cache::hex64(hash_file(path)) << "\n";
  return k.str();
}

size_t validation_examples(size_t n, double fraction, const std::string& path) {
  if (fraction <= 0) return 0;
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(std::llround(fraction * n)));
  if (n_val >= n) {  // the file's doing: a runtime_error, as every other fault of the data
    std::ostringstream m;
    m << "'" << path << "': val_fraction " << fraction << " of its " << n
      << " examples leaves none for training";
    throw std::runtime_error(m.str());
  }
  return n_val;
}

void build(const std::string& path, const ExampleOptions& o, const std::string& entry,
           const std::string& key_text) {
  const auto tok = load_tokenizer(o.tokenizer_dir);
  std::optional<ChatTemplate> chat;
  if (o.format == DataFormat::kMessages) chat = ChatTemplate::from_folder(o.tokenizer_dir);
  Tokenized t = tokenize_lines(path, o, *tok, chat ? &*chat : nullptr);
  const size_t n = t.examples.size(), n_val = validation_examples(n, o.val_fraction, path);
  const ExampleSplit train = write_split(t.examples, 0, n - n_val, entry, "train");
  const ExampleSplit val = write_split(t.examples, n - n_val, n, entry, "val");
  std::ostringstream m;
  m << "tokenizer_family " << tok->family() << " (" << o.tokenizer_dir << ")\n";
  for (const auto& [name, s] :
       {std::pair<const char*, const ExampleSplit&>{"train", train}, {"val", val}}) {
    m << name << "_examples " << s.examples << "\n"
      << name << "_tokens " << s.tokens << "\n"
      << name << "_targets " << s.targets << "\n";
  }
  m << "boundary_mismatches " << t.mismatches << "\n# inputs\n" << key_text;
  cache::write_text_atomic(entry + "/manifest.txt", m.str());
  cache::fsync_path(entry, O_RDONLY | O_DIRECTORY);
}

ExampleSplit read_split(const std::string& entry, const std::string& name, const cache::Manifest& m,
                        const std::string& mpath) {
  ExampleSplit s;
  s.examples = cache::manifest_int(m, name + "_examples", mpath);
  s.tokens = cache::manifest_int(m, name + "_tokens", mpath);
  s.targets = cache::manifest_int(m, name + "_targets", mpath);
  s.tokens_path = entry + "/" + name + ".bin";
  s.flags_path = entry + "/" + name + ".flags.bin";
  s.lines_path = entry + "/" + name + ".lines.bin";
  if (TokenFile::open(s.lines_path).size() != s.examples) {
    throw std::runtime_error("examples cache: " + s.lines_path + " does not hold " +
                             std::to_string(s.examples) + " line numbers; delete " + entry +
                             " to rebuild it");
  }
  for (const std::string& file : {s.tokens_path, s.flags_path}) {
    const TokenFile f = TokenFile::open(file);
    if (f.size() != s.tokens) {
      throw std::runtime_error("examples cache: " + file + " holds " + std::to_string(f.size()) +
                               " tokens but " + mpath + " says " + std::to_string(s.tokens) +
                               "; delete " + entry + " to rebuild it");
    }
  }
  return s;
}

const char* kFormatNames[] = {"auto", "text", "jsonl_text", "prompt_completion", "messages"};
const char* kTrainOnNames[] = {"assistant", "last_assistant", "all"};

}  // namespace

const char* to_string(DataFormat format) { return kFormatNames[static_cast<int>(format)]; }
const char* to_string(TrainOn train_on) { return kTrainOnNames[static_cast<int>(train_on)]; }

DataFormat detect_format(const std::string& source, DataFormat requested) {
  if (requested != DataFormat::kAuto) return requested;
  std::error_code ec;
  if (!fs::is_regular_file(source, ec)) return DataFormat::kText;
  {
    std::ifstream in(source, std::ios::binary);
    char first = 0;
    while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
    }
    if (!in || first != '{') return DataFormat::kText;
  }
  DataFormat found = DataFormat::kText;
  for_each_line(source, [&](const Line& line) {
    const Json j = json_bounds::parse_or_discard<Json>(line.text);
    if (!j.is_object()) return false;  // text that starts with a brace
    if (j.contains("messages")) {
      found = DataFormat::kMessages;
    } else if (j.contains("prompt") && j.contains("completion")) {
      found = DataFormat::kPromptCompletion;
    } else if (j.contains("text")) {
      found = DataFormat::kJsonlText;
    } else {
      std::string keys;
      for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
      throw std::runtime_error(
          where(source, line.number) +
          ": a JSON object with none of the fields data.format can read (\"messages\"; "
          "\"prompt\" and \"completion\"; \"text\"); it has: " +
          (keys.empty() ? "none" : keys.substr(0, 200)) +
          " (set data.format text to train on the file as plain text)");
    }
    return false;
  });
  return found;
}

std::vector<Conversation> read_conversations(const std::string& path) {
  std::vector<Conversation> out;
  for_each_line(path, [&](const Line& line) {
    out.push_back(conversation_of(parse_line(line, path), where(path, line.number)));
    return true;
  });
  return out;
}

ExampleCorpus prepare_examples(const std::string& source, const ExampleOptions& options) {
  if (options.format == DataFormat::kAuto || options.format == DataFormat::kText) {
    throw std::invalid_argument("prepare_examples: a JSONL format is needed, not " +
                                std::string(to_string(options.format)));
  }
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0)) {
    throw std::invalid_argument("ExampleOptions: val_fraction " +
                                std::to_string(options.val_fraction) + " outside [0, 1)");
  }
  std::error_code ec;
  if (!fs::is_regular_file(source, ec)) {
    throw std::invalid_argument("'" + source + "': not a regular file (a JSONL data set is one)");
  }
  ExampleCorpus c;
  fs::path p = fs::absolute(source).lexically_normal();
  c.name = p.stem().string();
  c.format = options.format;
  c.train_on = options.train_on;
  std::string safe;
  for (char ch : c.name) safe += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  const std::string key_text = cache_key(source, options);
  const cache::Entry e = cache::with_entry(
      options.cache_dir, safe.empty() ? "examples" : safe, key_text,
      [&](const std::string& entry) { build(source, options, entry, key_text); },
      [&](const std::string& entry) {
        const std::string mpath = entry + "/manifest.txt";
        const cache::Manifest m = cache::read_manifest(mpath);
        c.train = read_split(entry, "train", m, mpath);
        c.val = read_split(entry, "val", m, mpath);
        c.train.source = c.val.source = source;
        c.boundary_mismatches = cache::manifest_int(m, "boundary_mismatches", mpath);
      });
  c.cache_entry = e.path;
  c.built = e.built;
  return c;
}

}  // namespace fsdp::data
