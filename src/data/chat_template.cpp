// ChatTemplate (fsdp/data/chat_template.h): where a tokenizer folder keeps its chat template and
// special tokens (transformers 5's rules), the variables transformers' render_jinja_template passes
// to the template, and assistant spans found by rendering prefixes. The language itself is the
// Jinja engine's (data/jinja.h).
#include "fsdp/data/chat_template.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "data/jinja.h"
#include "util/json.h"

namespace fsdp::data {

struct ChatTemplateImpl {
  std::string source, origin;
  std::map<std::string, std::string> special_tokens;
  jinja::Template tmpl;
};

namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// The named special tokens transformers passes to templates (SPECIAL_TOKENS_ATTRIBUTES).
const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

ChatTemplateError convert(const jinja::Error& e) {
  return ChatTemplateError(e.what(), e.message(), e.line(), e.raised());
}

ChatTemplateError plain_error(const std::string& what) {
  return ChatTemplateError(what, what, 0, false);
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

nlohmann::json read_json(const std::string& path, size_t cap) {
  try {
    return json_bounds::parse(json_bounds::read_file(path, cap, "a tokenizer file"), path);
  } catch (const nlohmann::json::exception& e) {
    throw plain_error(path + ": not valid JSON: " + e.what());
  } catch (const std::runtime_error& e) {
    throw plain_error(e.what());
  }
}

// Named special tokens of a tokenizer_config.json or special_tokens_map.json: strings, or
// AddedToken objects {"content": ...}; null and other shapes are skipped as unset.
void read_special_tokens(const nlohmann::json& j, std::map<std::string, std::string>& out) {
  if (!j.is_object()) return;
  for (const char* name : kSpecialTokens) {
    if (out.count(name) || !j.contains(name)) continue;
    const nlohmann::json& v = j[name];
    if (v.is_string()) {
      out[name] = v.get<std::string>();
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      out[name] = v["content"].get<std::string>();
    }
  }
}

// tokenizer_config.json's chat_template: a string, or the list entry named "default".
std::string template_in_config(const nlohmann::json& config, const std::string& path) {
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array())
    throw plain_error(path + ": chat_template is " + json_bounds::excerpt(t) +
                      ", neither a string nor a list of {\"name\", \"template\"}");
  std::string names;
  for (const nlohmann::json& e : t) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) continue;
    const std::string name = e["name"].get<std::string>();
    if (name == "default" && e.contains("template") && e["template"].is_string())
      return e["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + name;
  }
  throw plain_error(path + ": chat_template lists no template named \"default\" (it has: " +
                    (names.empty() ? "none" : names) + ")");
}

// A JSON value as Python's json.loads makes it (objects keep their keys' order).
jinja::Value from_json(const OrderedJson& j) {
  switch (j.type()) {
    case OrderedJson::value_t::null:
      return jinja::Value::none();
    case OrderedJson::value_t::boolean:
      return jinja::Value::boolean(j.get<bool>());
    case OrderedJson::value_t::number_integer:
      return jinja::Value::integer(j.get<int64_t>());
    case OrderedJson::value_t::number_unsigned:
      if (j.get<uint64_t>() > uint64_t(INT64_MAX)) return jinja::Value::real(j.get<double>());
      return jinja::Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case OrderedJson::value_t::number_float:
      return jinja::Value::real(j.get<double>());
    case OrderedJson::value_t::string:
      return jinja::Value::string(j.get<std::string>());
    case OrderedJson::value_t::array: {
      std::vector<jinja::Value> items;
      items.reserve(j.size());
      for (const OrderedJson& v : j) items.push_back(from_json(v));
      return jinja::Value::list(std::move(items));
    }
    case OrderedJson::value_t::object: {
      std::vector<std::pair<std::string, jinja::Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(*it));
      return jinja::Value::dict(std::move(items));
    }
    default:
      return jinja::Value::none();  // binary and discarded values: no JSON text makes them
  }
}

OrderedJson parse_json(const std::string& text, const std::string& what) {
  try {
    return json_bounds::parse<OrderedJson>(text, what);
  } catch (const nlohmann::json::exception& e) {
    throw plain_error(what + ": not valid JSON: " + e.what());
  } catch (const std::runtime_error& e) {
    throw plain_error(e.what());
  }
}

// A message as the template sees it: its JSON object as given, else role and content (a
// string, or the list of {"type": "text", "text": ...} parts).
jinja::Value message_value(const ChatMessage& m) {
  if (!m.json.empty()) return from_json(parse_json(m.json, "a message"));
  jinja::Value content = jinja::Value::string(m.content);
  if (m.parts) {
    std::vector<jinja::Value> parts;
    parts.reserve(m.parts->size());
    for (const std::string& text : *m.parts) {
      parts.push_back(jinja::Value::dict(
          {{"type", jinja::Value::string("text")}, {"text", jinja::Value::string(text)}}));
    }
    content = jinja::Value::list(std::move(parts));
  }
  return jinja::Value::dict({{"role", jinja::Value::string(m.role)}, {"content", content}});
}

// Python's str.strip() on ASCII whitespace.
std::string_view stripped(std::string_view s) {
  const char* const space = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

// What a template that prints a message's content as a string writes: Python's repr of it.
std::string python_form_of_content(const ChatMessage& m) {
  static const jinja::Template print = jinja::Template::parse("{{ m.content }}", "content");
  return print.render({{"m", message_value(m)}});
}

// Whether a message calls tools: a "tool_calls" that is not null or empty.
bool calls_tools(const ChatMessage& m) {
  if (m.json.empty()) return false;
  const OrderedJson j = parse_json(m.json, "a message");
  const auto it = j.find("tool_calls");
  return it != j.end() && !it->is_null() && !(it->is_array() && it->empty());
}

ChatMessage without_tool_calls(const ChatMessage& m) {
  ChatMessage out = m;
  OrderedJson j = parse_json(m.json, "a message");
  j.erase("tool_calls");
  out.json = j.dump();
  return out;
}

jinja::Value chat_value(const ChatValue& v) {
  switch (v.type()) {
    case ChatValue::Type::kString:
      return jinja::Value::string(v.str());
    case ChatValue::Type::kBool:
      return jinja::Value::boolean(v.boolean());
    case ChatValue::Type::kInt:
      return jinja::Value::integer(v.integer());
    case ChatValue::Type::kJson:
      return from_json(parse_json(v.str(), "a template variable"));
    default:
      return jinja::Value::real(v.real());
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_string(const std::string& source,
                                       std::map<std::string, std::string> special_tokens,
                                       std::string origin) {
  try {
    jinja::Template t = jinja::Template::parse(source, origin);
    return ChatTemplate(std::make_shared<const ChatTemplateImpl>(
        ChatTemplateImpl{source, std::move(origin), std::move(special_tokens), std::move(t)}));
  } catch (const jinja::Error& e) {
    throw convert(e);
  }
}

ChatTemplate ChatTemplate::from_folder(const std::string& dir) {
  const std::string d = fs::path(dir).lexically_normal().string();
  const std::string jinja_path = d + "/chat_template.jinja",
                    config_path = d + "/tokenizer_config.json",
                    map_path = d + "/special_tokens_map.json";
  nlohmann::json config;
  if (exists(config_path)) config = read_json(config_path, json_bounds::kMaxTokenizerConfigBytes);
  std::map<std::string, std::string> tokens;
  read_special_tokens(config, tokens);
  if (exists(map_path))
    read_special_tokens(read_json(map_path, json_bounds::kMaxSmallJsonBytes), tokens);
  if (exists(jinja_path)) {  // transformers 5: the separate file wins
    std::string source;
    try {
      source = json_bounds::read_file(jinja_path, jinja::Limits{}.max_source_bytes,
                                      "a chat_template.jinja");
    } catch (const std::runtime_error& e) {
      throw plain_error(e.what());
    }
    return from_string(source, std::move(tokens), jinja_path);
  }
  if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null())
    return from_string(template_in_config(config, config_path), std::move(tokens),
                       config_path + " (chat_template)");
  throw plain_error("tokenizer folder " + dir + ": no chat template (neither " + jinja_path +
                    " nor a \"chat_template\" in " + config_path +
                    (exists(config_path) ? "" : ", which does not exist") + ")");
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const ChatVariables& extra) const {
  std::vector<jinja::Value> ms;
  ms.reserve(messages.size());
  for (const ChatMessage& m : messages) ms.push_back(message_value(m));
  // As render_jinja_template passes them: the special tokens, then the caller's keywords (which
  // win), and messages, tools, documents and add_generation_prompt.
  std::map<std::string, jinja::Value> vars;
  for (const auto& [name, token] : impl_->special_tokens) vars[name] = jinja::Value::string(token);
  for (const auto& [name, v] : extra) vars[name] = chat_value(v);
  vars["messages"] = jinja::Value::list(std::move(ms));
  vars.emplace("tools", jinja::Value::none());  // unless the caller offers tools
  vars.emplace("documents", jinja::Value::none());
  vars["add_generation_prompt"] = jinja::Value::boolean(add_generation_prompt);
  try {
    return impl_->tmpl.render({vars.begin(), vars.end()});
  } catch (const jinja::Error& e) {
    throw convert(e);
  }
}

namespace {

size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Where the assistant message that `turn` ends with stops in `full`: the end of `turn`, or, when
// the template closes a conversation with text of its own (Phi-3's eos_token without the
// generation prompt), where the two part, provided `full` ends with that same closing text. npos
// when `turn` is not a prefix of `full` in this sense.
size_t turn_end(const std::string& prompt, const std::string& turn, const std::string& full) {
  if (turn.compare(0, prompt.size(), prompt) != 0) return std::string::npos;
  const size_t n = common_prefix(turn, full);
  if (n == turn.size()) return n;
  const std::string closing = turn.substr(n);
  const bool closes = n > prompt.size() && full.size() >= closing.size() &&
                      full.compare(full.size() - closing.size(), closing.size(), closing) == 0;
  return closes ? n : std::string::npos;
}

}  // namespace

ChatRendering ChatTemplate::render_with_spans(const std::vector<ChatMessage>& messages,
                                              const ChatVariables& extra) const {
  ChatRendering out;
  out.text = render(messages, false, extra);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + long(i));
    const std::vector<ChatMessage> upto(messages.begin(), messages.begin() + long(i) + 1);
    const std::string prompt = render(before, true, extra), turn = render(upto, false, extra);
    const size_t end = turn_end(prompt, turn, out.text);
    if (end == std::string::npos)
      throw plain_error(impl_->origin +
                        ": not prefix-stable, so assistant spans cannot be found by rendering "
                        "prefixes: the conversation up to assistant message " +
                        std::to_string(i) +
                        " does not render as the start of the whole conversation (or the prompt "
                        "before that message not as the start of it)");
    out.assistant_spans.emplace_back(prompt.size(), end);
  }
  return out;
}

// Whether the template renders `messages` as `text`; a template that fails on them (Qwen2.5's
// adds an answer's null content to a string once its tool calls are gone) does not.
bool ChatTemplate::renders_as(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const ChatVariables& extra, const std::string& text) const {
  try {
    return render(messages, add_generation_prompt, extra) == text;
  } catch (const ChatTemplateError&) {
    return false;
  }
}

void ChatTemplate::check_rendering(const std::vector<ChatMessage>& messages,
                                   const std::string& text, bool add_generation_prompt,
                                   const ChatVariables& extra) const {
  const auto message = [&](size_t i) { return impl_->origin + ": message " + std::to_string(i); };
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (!m.parts) continue;
    const std::string here = message(i) + " has its content as a list of parts, and the template ";
    if (!m.parts->empty() && text.find(python_form_of_content(m)) != std::string::npos)
      throw plain_error(here + "prints that list as a string (it expects string content): " +
                        "give the content as a string");
    size_t at = 0;
    for (size_t k = 0; k < m.parts->size(); ++k) {
      const std::string_view words = stripped((*m.parts)[k]);
      const size_t found = text.find(words, at);
      if (found == std::string::npos)
        throw plain_error(here + "leaves the text of part " + std::to_string(k) +
                          " out of the rendering (it expects string content): give the "
                          "content as a string");
      at = found + words.size();
    }
  }
  // What the template makes of tool calls and tools, by rendering without them.
  const auto caller = std::find_if(messages.begin(), messages.end(), calls_tools);
  if (caller != messages.end()) {
    std::vector<ChatMessage> plain;
    for (const ChatMessage& m : messages)
      plain.push_back(calls_tools(m) ? without_tool_calls(m) : m);
    if (renders_as(plain, add_generation_prompt, extra, text))
      throw plain_error(message(size_t(caller - messages.begin())) +
                        " calls tools (\"tool_calls\"), and the template renders the "
                        "conversation the same without them: it has no tool calls");
  }
  const auto tools = extra.find("tools");
  if (tools != extra.end() && tools->second.type() == ChatValue::Type::kJson) {
    const OrderedJson offered = parse_json(tools->second.str(), "tools");
    if (!offered.is_null() && !(offered.is_array() && offered.empty())) {
      ChatVariables without = extra;
      without.erase("tools");
      if (renders_as(messages, add_generation_prompt, without, text))
        throw plain_error(impl_->origin +
                          ": the conversation offers tools, and the template renders it the same "
                          "without them: it does not show a model its tools");
    }
  }
}

bool ChatTemplate::has_generation_tags() const { return impl_->tmpl.has_generation(); }
const std::string& ChatTemplate::source() const { return impl_->source; }
const std::string& ChatTemplate::origin() const { return impl_->origin; }
const std::map<std::string, std::string>& ChatTemplate::special_tokens() const {
  return impl_->special_tokens;
}

}  // namespace fsdp::data
