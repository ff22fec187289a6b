// Hugging Face chat templates: a conversation rendered to the text a chat model was trained on,
// as transformers' tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) renders it. The template is the model folder's own (Jinja), run by
// our engine (src/data/jinja.h, a subset of Jinja: docs/chat.md) in the environment transformers
// gives it: messages, add_generation_prompt, tools and documents (None unless passed), the
// tokenizer's named special tokens (bos_token, eos_token, ...), raise_exception() and
// strftime_now(), and any extra variables the caller passes (date_string, enable_thinking, ...).
//
// A template is parsed once, when loaded: a construct outside the subset is a ChatTemplateError
// then, naming the construct, the file and the line. Rendering a parsed template is const and may
// run on several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::data {

// A message's content is a string, or, as multimodal datasets and templates (Gemma 3's) write it,
// a list of parts [{"type": "text", "text": ...}, ...]: `parts` then holds the text of each (text
// parts only: fsdp.cpp trains text models) and the template gets that list, as transformers
// passes it; `content` is unused.
// A message read from a dataset keeps its JSON object in `json`, and the template gets that
// object as it is (transformers passes the dataset's dicts): its tool_calls, name, tool_call_id
// or a content of null reach the template; role, content and parts then only describe it.
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content)
      : role(std::move(role)), content(std::move(content)) {}

  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
  std::optional<std::vector<std::string>> parts;
  std::string json;  // the message as a JSON object, when it came as one
};

// An extra template variable: a string, a boolean, an integer or a float (a constructor each,
// so that a string literal never turns into a boolean), or any JSON value given as its text
// (ChatValue::json: `tools`, a list of JSON schemas, say).
class ChatValue {
 public:
  enum class Type { kString, kBool, kInt, kFloat, kJson };
  static ChatValue json(std::string text) {
    ChatValue v(std::move(text));
    v.type_ = Type::kJson;
    return v;
  }
  ChatValue(const char* s) : type_(Type::kString), s_(s) {}  // NOLINT: implicit on purpose
  ChatValue(std::string s) : type_(Type::kString), s_(std::move(s)) {}  // NOLINT
  ChatValue(bool b) : type_(Type::kBool), b_(b) {}                      // NOLINT
  ChatValue(int i) : type_(Type::kInt), i_(i) {}                        // NOLINT
  ChatValue(int64_t i) : type_(Type::kInt), i_(i) {}                    // NOLINT
  ChatValue(double f) : type_(Type::kFloat), f_(f) {}                   // NOLINT
  Type type() const { return type_; }
  const std::string& str() const { return s_; }  // kString; kJson: the JSON text
  bool boolean() const { return b_; }
  int64_t integer() const { return i_; }
  double real() const { return f_; }

 private:
  Type type_;
  std::string s_;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
};

using ChatVariables = std::map<std::string, ChatValue>;

// Every failure of loading or rendering a template. what(): "<origin> line N: <message>".
// raised(): the template itself refused the conversation with raise_exception(message) (Gemma's
// and Mistral's "Conversation roles must alternate ..."); message() is then the template's text.
class ChatTemplateError : public std::runtime_error {
 public:
  ChatTemplateError(const std::string& what, std::string message, int line, bool raised)
      : std::runtime_error(what), message_(std::move(message)), line_(line), raised_(raised) {}
  const std::string& message() const { return message_; }
  int line() const { return line_; }  // of the template; 0 when none applies
  bool raised() const { return raised_; }

 private:
  std::string message_;
  int line_;
  bool raised_;
};

// A rendering with the byte ranges [first, second) of the text that each assistant message
// produced (its content and the template's text around it up to the next message: the end of turn
// token a model must learn to emit), in the order of the messages.
struct ChatRendering {
  std::string text;
  std::vector<std::pair<size_t, size_t>> assistant_spans;
};

struct ChatTemplateImpl;

class ChatTemplate {
 public:
  // The template of a tokenizer folder, as transformers 5 finds it: <dir>/chat_template.jinja when
  // present, else tokenizer_config.json's "chat_template" (a string, or a list of {"name",
  // "template"} of which the one named "default"); the special tokens from tokenizer_config.json
  // (strings or {"content": ...}), falling back to special_tokens_map.json. Throws
  // ChatTemplateError naming the folder when it has no chat template, or the file when it cannot
  // be read or parsed.
  static ChatTemplate from_folder(const std::string& dir);
  // From a template's text. `special_tokens`: variables such as {"bos_token", "<s>"}; `origin`
  // names the template in errors.
  static ChatTemplate from_string(const std::string& source,
                                  std::map<std::string, std::string> special_tokens = {},
                                  std::string origin = "chat template");

  // apply_chat_template(messages, tokenize=False, add_generation_prompt=...): `extra` adds
  // variables or overrides the special tokens. Throws ChatTemplateError.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const ChatVariables& extra = {}) const;

  // render(messages, false), with where each assistant message is in it, found as TRL does: the
  // assistant message i spans from the end of render(messages[:i], true) to the end of
  // render(messages[:i+1], false). The first must be a prefix of the second, and the second of
  // the whole rendering, except for text the template writes only to close a conversation (Phi-3
  // and Phi-4-mini end with eos_token when add_generation_prompt is false), which the whole
  // rendering must end with too: the span then stops before it. A template for which this does
  // not hold (Qwen3 writes an empty <think></think> into the last assistant turn only, and drops
  // the reasoning of earlier turns) is a ChatTemplateError saying so and naming the message.
  ChatRendering render_with_spans(const std::vector<ChatMessage>& messages,
                                  const ChatVariables& extra = {}) const;

  // Whether `text`, render(messages, ..., extra), holds what the conversation gives, where
  // transformers renders whatever the template makes of it and a model would learn something else
  // than the conversation. Throws ChatTemplateError naming the message and what the template did:
  //  - content given as parts: a template written for string content prints the list in
  //    Python's form (Llama 3's `content | trim`: "[{'type': 'text', ...}]") or leaves it out
  //    (one that renders content that is not a string as ""): refused when the list's Python
  //    form is in `text`, or a part's text (stripped) is not, in order;
  //  - tool calls (a message's "tool_calls"), and the tools `extra` offers: a template without
  //    tool support (Phi-3.5's, SmolLM2's) renders the conversation the same without them.
  void check_rendering(const std::vector<ChatMessage>& messages, const std::string& text,
                       bool add_generation_prompt, const ChatVariables& extra = {}) const;

  // Whether the template marks assistant text with {% generation %} tags (rendered as their body).
  bool has_generation_tags() const;
  const std::string& source() const;
  const std::string& origin() const;
  const std::map<std::string, std::string>& special_tokens() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const ChatTemplateImpl> impl) : impl_(std::move(impl)) {}
  bool renders_as(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                  const ChatVariables& extra, const std::string& text) const;
  std::shared_ptr<const ChatTemplateImpl> impl_;
};

}  // namespace fsdp::data
