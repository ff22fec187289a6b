// Chat templates and the Jinja engine under them. ChatGoldens: every case of
// tests/data/chat/goldens.json (transformers' render_jinja_template on the templates of
// assets/chat_templates, scripts/chat_fixtures.sh) rendered by ours, byte for byte, and the same
// error where the template raises; skipped without the assets (scripts/fetch_assets.sh). The rest
// needs no asset: the engine's semantics (whitespace control, loops, scoping, macros, filters,
// undefined values, Python's rendering of values), what it refuses with the line, every cap, the
// folder rules of ChatTemplate::from_folder and assistant spans.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/jinja.h"
#include "fsdp/data/chat_template.h"

namespace {

using fsdp::data::ChatMessage;
using fsdp::data::ChatTemplate;
using fsdp::data::ChatTemplateError;
using fsdp::data::ChatValue;
using fsdp::data::ChatVariables;
namespace jinja = fsdp::data::jinja;
namespace fs = std::filesystem;

// Ordered, as json.loads reads the goldens: messages and tools reach the template with their keys
// in the generator's order (templates print tools with tojson).
using Json = nlohmann::ordered_json;

const std::string kAssets = FSDP_CHAT_TEMPLATES_DIR;
const std::string kGoldens = std::string(FSDP_TEST_DATA_DIR) + "/chat/goldens.json";

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// SHA-256 (FIPS 180-4), to tell a fetched template that changed from a wrong rendering.
std::string sha256(const std::string& data) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = data;
  m += '\x80';
  while (m.size() % 64 != 56) m += '\0';
  for (int i = 7; i >= 0; --i) m += static_cast<char>((uint64_t(data.size()) * 8) >> (i * 8));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(uint8_t(m[off + 4 * i])) << 24 | uint32_t(uint8_t(m[off + 4 * i + 1])) << 16 |
             uint32_t(uint8_t(m[off + 4 * i + 2])) << 8 | uint32_t(uint8_t(m[off + 4 * i + 3]));
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a[8];
    std::copy(h, h + 8, a);
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = a[7] + (rotr(a[4], 6) ^ rotr(a[4], 11) ^ rotr(a[4], 25)) +
                          ((a[4] & a[5]) ^ (~a[4] & a[6])) + k[i] + w[i];
      const uint32_t t2 = (rotr(a[0], 2) ^ rotr(a[0], 13) ^ rotr(a[0], 22)) +
                          ((a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]));
      for (int j = 7; j > 0; --j) a[j] = a[j - 1];
      a[4] += t1;
      a[0] = t1 + t2;
    }
    for (int i = 0; i < 8; ++i) h[i] += a[i];
  }
  char hex[65];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 8 * i, 9, "%08x", h[i]);
  return std::string(hex, 64);
}

// ---- the goldens ----

struct Goldens {
  Json file;
  std::map<std::string, std::string> templates;  // model -> template (the first of duplicates)
};

const Goldens& goldens() {
  static const Goldens g = [] {
    Goldens out;
    out.file = Json::parse(read(kGoldens));
    for (const auto& e : nlohmann::json::parse(read(kAssets + "/templates.json")))
      out.templates.emplace(e["model"].get<std::string>(), e["chat_template"].get<std::string>());
    return out;
  }();
  return g;
}

bool assets_present() { return fs::exists(kAssets + "/templates.json"); }

std::vector<ChatMessage> conversation(const std::string& name) {
  std::vector<ChatMessage> out;
  for (const auto& m : goldens().file["conversations"][name]) {
    ChatMessage msg(m["role"].get<std::string>(), "");
    if (m["content"].is_string()) {
      msg.content = m["content"].get<std::string>();
    } else if (m["content"].is_array()) {
      msg.parts.emplace();
      for (const auto& part : m["content"]) msg.parts->push_back(part["text"].get<std::string>());
    }
    msg.json = m.dump();
    out.push_back(std::move(msg));
  }
  return out;
}

ChatVariables extra_of(const Json& j) {
  ChatVariables out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_structured()) {
      out.emplace(it.key(), ChatValue::json(it->dump()));  // tools
    } else if (it->is_boolean()) {
      out.emplace(it.key(), it->get<bool>());
    } else {
      out.emplace(it.key(), it->get<std::string>());
    }
  }
  return out;
}

ChatTemplate family_template(const std::string& model, const Json& tokens) {
  return ChatTemplate::from_string(goldens().templates.at(model),
                                   tokens.get<std::map<std::string, std::string>>(), model);
}

// The special tokens the goldens give a family's template (its tokenizer_config.json's).
Json family_tokens(const std::string& model) {
  for (const auto& c : goldens().file["cases"])
    if (c["model"] == model) return c["tokens"];
  return Json::object();
}

// One case: "" when ours agrees, else what differs.
std::string check_case(const Json& c) {
  const std::string model = c["model"];
  if (!goldens().templates.count(model)) return "the assets have no template for it";
  if (sha256(goldens().templates.at(model)) != c["sha256"])
    return "the fetched template changed (sha256): rerun scripts/chat_fixtures.sh";
  try {
    const ChatTemplate t = family_template(model, c["tokens"]);
    const std::string got =
        t.render(conversation(c["conversation"]), c["add_generation_prompt"], extra_of(c["extra"]));
    if (c.contains("error"))
      return "rendered, where transformers raised: " + c["error"].get<std::string>();
    if (got != c["expected"]) {
      return "differs:\n--- transformers:\n" + c["expected"].get<std::string>() + "\n--- ours:\n" +
             got;
    }
  } catch (const ChatTemplateError& e) {
    if (!c.contains("error")) return std::string("raised ") + e.what();
    if (c["raised"] && (!e.raised() || e.message() != c["error"]))
      return std::string("raised ") + e.what() +
             ", where the template raised: " + c["error"].get<std::string>();
  }
  return "";
}

// Noon UTC of the goldens' day, as SOURCE_DATE_EPOCH's seconds: templates that print today's
// date (Granite's, Devstral's) printed that day's.
std::string goldens_epoch() {
  const std::string day = goldens().file.at("rendered_on");
  std::tm tm{};
  if (strptime(day.c_str(), "%Y-%m-%d", &tm) == nullptr) ADD_FAILURE() << "rendered_on " << day;
  tm.tm_hour = 12;
  return std::to_string(timegm(&tm));
}

TEST(ChatGoldens, EveryCaseRendersAsTransformersDoes) {
  if (!assets_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets;
  setenv("SOURCE_DATE_EPOCH", goldens_epoch().c_str(), 1);
  size_t checked = 0, errors = 0, failed = 0;
  for (const auto& c : goldens().file["cases"]) {
    const std::string problem = check_case(c);
    if (!problem.empty() && ++failed > 20) continue;  // the first 20 in full
    EXPECT_EQ(problem, "") << c["model"] << " (" << c["family"] << "), conversation "
                           << c["conversation"] << ", add_generation_prompt "
                           << c["add_generation_prompt"] << ", extra " << c["extra"].dump();
    ++checked;
    errors += c.contains("error");
  }
  unsetenv("SOURCE_DATE_EPOCH");
  EXPECT_EQ(failed, 0u) << "cases that differ, of " << checked;
  EXPECT_GT(checked, 600u);
  std::cout << checked << " cases (" << errors << " where the template raises) from "
            << goldens().file["generator"].get<std::string>() << "\n";
}

TEST(ChatGoldens, TheFamiliesAreAllThere) {
  if (!assets_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets;
  for (const char* family :
       {"llama3.1", "llama3.2", "qwen2.5", "qwen3", "mistral-7b-instruct", "mistral-small",
        "gemma3", "phi3.5-mini", "phi4", "phi4-mini", "smollm2"})
    EXPECT_TRUE(goldens().file["families"].contains(family)) << family;
}

// Assistant spans by prefixes, on each family's answered conversations: every span holds its
// message's content (stripped, as most templates strip it), and the spans cover only assistant
// text; Qwen3 drops earlier turns' reasoning, so its spans of a reasoning conversation are refused.
TEST(ChatGoldens, AssistantSpansByPrefixes) {
  if (!assets_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets;
  const auto& families = goldens().file["families"];
  size_t spans = 0;
  for (auto it = families.begin(); it != families.end(); ++it) {
    const std::string model = it.value();
    const ChatTemplate t = family_template(model, family_tokens(model));
    const ChatVariables extra = {{"date_string", "26 Jul 2024"}};
    for (const char* name : {"multi_turn", "system_answered", "unicode"}) {
      const std::vector<ChatMessage> conv = conversation(name);
      fsdp::data::ChatRendering r;
      try {
        r = t.render_with_spans(conv, extra);
      } catch (const ChatTemplateError& e) {
        if (e.raised() || std::string(e.what()).find("has no attribute") != std::string::npos)
          continue;  // a conversation this template refuses (Mistral's system turn, say)
        if (it.key() == "qwen3" &&
            std::string(e.what()).find("not prefix-stable") != std::string::npos)
          continue;
        ADD_FAILURE() << it.key() << " " << name << ": " << e.what();
        continue;
      }
      EXPECT_EQ(r.text, t.render(conv, false, extra));
      size_t k = 0;
      for (const ChatMessage& m : conv) {
        if (m.role != "assistant") continue;
        ASSERT_LT(k, r.assistant_spans.size());
        const auto [b, e] = r.assistant_spans[k++];
        ASSERT_LE(b, e);
        ASSERT_LE(e, r.text.size());
        const std::string span = r.text.substr(b, e - b);
        std::string content = m.content;
        content.erase(content.find_last_not_of(" \n") + 1);
        EXPECT_NE(span.find(content), std::string::npos) << it.key() << " " << name << ": " << span;
        ++spans;
      }
      EXPECT_EQ(k, r.assistant_spans.size());
    }
  }
  EXPECT_GT(spans, 30u);
  const ChatTemplate qwen3 = family_template(families["qwen3"], Json::object());
  try {
    qwen3.render_with_spans(conversation("think"));
    ADD_FAILURE() << "Qwen3's reasoning conversation was taken as prefix-stable";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("not prefix-stable"), std::string::npos) << e.what();
  }
}

// The families' templates on the same words as parts: a template written for them (Gemma 3's)
// passes the check and renders what it renders for string content; one written for strings only
// (Llama 3's prints the list, where transformers would have trained on that text; Qwen's fail on
// it) is refused.
TEST(ChatGoldens, PartsOfEachFamilyAreRenderedOrRefused) {
  if (!assets_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets;
  const auto& families = goldens().file["families"];
  std::set<std::string> rendered, refused;
  for (auto it = families.begin(); it != families.end(); ++it) {
    const ChatTemplate t = family_template(it.value(), family_tokens(it.value()));
    const ChatVariables extra = {{"date_string", "26 Jul 2024"}};
    const std::vector<ChatMessage> parts = conversation("parts");
    std::string text;
    try {
      text = t.render(parts, false, extra);
      t.check_rendering(parts, text, false, extra);
    } catch (const ChatTemplateError&) {
      refused.insert(it.key());
      continue;
    }
    rendered.insert(it.key());
    EXPECT_EQ(text, t.render(conversation("multi_turn"), false, extra)) << it.key();
  }
  std::string listed;
  for (const std::string& f : rendered) listed += " " + f;
  std::cout << "[ parts ] rendered by" << listed << "; refused for the " << refused.size()
            << " others\n";
  EXPECT_TRUE(rendered.count("gemma3")) << "Gemma 3's template renders parts";
  EXPECT_TRUE(refused.count("llama3.1")) << "Llama 3.1's prints the list";
  EXPECT_TRUE(refused.count("qwen3")) << "Qwen3's adds it to a string";
}

// Tool calls through the families' templates: where a template renders them, the assistant spans
// are the call as the template writes it and the answer after the tool's result, never the
// result; a template without tool support (it renders the conversation the same without the
// call) is refused.
TEST(ChatGoldens, ToolCallsOfEachFamilyAreTrainedOnOrRefused) {
  if (!assets_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets;
  const auto& families = goldens().file["families"];
  std::set<std::string> trained;
  for (auto it = families.begin(); it != families.end(); ++it) {
    const ChatTemplate t = family_template(it.value(), family_tokens(it.value()));
    ChatVariables extra = {{"date_string", "26 Jul 2024"}};
    extra.emplace("tools", ChatValue::json(goldens().file["tools"].dump()));
    for (const char* name : {"tool_call", "tool_call_text"}) {
      const std::vector<ChatMessage> conv = conversation(name);
      fsdp::data::ChatRendering r;
      try {
        r = t.render_with_spans(conv, extra);
        t.check_rendering(conv, r.text, false, extra);
      } catch (const ChatTemplateError&) {
        continue;  // raised, failed on a null content, refused, or (Qwen3) not prefix-stable
      }
      trained.insert(it.key() + " " + name);
      ASSERT_GE(r.assistant_spans.size(), 1u);
      const auto [b, e] = r.assistant_spans[0];
      const std::string call = r.text.substr(b, e - b);
      EXPECT_NE(call.find("get_weather"), std::string::npos) << it.key() << ": " << call;
      EXPECT_NE(call.find("Paris"), std::string::npos) << it.key() << ": " << call;
      for (const auto& [from, to] : r.assistant_spans) {
        const std::string span = r.text.substr(from, to - from);
        EXPECT_EQ(span.find("21\n"), std::string::npos) << it.key() << " trains on the result";
        EXPECT_EQ(span.find("temperature"), std::string::npos) << it.key() << ": " << span;
      }
    }
  }
  std::string listed;
  for (const std::string& f : trained) listed += ", " + f;
  std::cout << "[ tools ] trained on" << listed.substr(1) << "\n";
  for (const char* f : {"llama3.1 tool_call", "llama3.2 tool_call_text", "qwen2.5 tool_call",
                        "qwen2.5 tool_call_text"})
    EXPECT_TRUE(trained.count(f)) << f;
  for (const char* f : {"phi3.5-mini tool_call_text", "smollm2 tool_call_text"})
    EXPECT_FALSE(trained.count(f)) << f << ": renders no tool calls";
  // Phi-3.5's renders the conversation, without the call: refused by the check, not the renderer.
  const ChatTemplate phi = family_template(families["phi3.5-mini"], Json::object());
  const std::vector<ChatMessage> conv = conversation("tool_call_text");
  EXPECT_THROW(phi.check_rendering(conv, phi.render(conv, false), false), ChatTemplateError);
}

// ---- the engine ----

std::string render(const std::string& src,
                   std::vector<std::pair<std::string, jinja::Value>> vars = {},
                   const jinja::Limits& limits = {}) {
  return jinja::Template::parse(src, "t", limits).render(vars);
}

// The error text of parsing or rendering `src`, or "" when it renders.
std::string error_of(const std::string& src, const jinja::Limits& limits = {}) {
  try {
    render(src, {}, limits);
  } catch (const jinja::Error& e) {
    return e.what();
  }
  return "";
}

jinja::Value list(std::vector<jinja::Value> xs) { return jinja::Value::list(std::move(xs)); }
jinja::Value str(const std::string& s) { return jinja::Value::string(s); }
jinja::Value num(int64_t i) { return jinja::Value::integer(i); }

TEST(Jinja, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indent before it.
  EXPECT_EQ(render("a\n  {% if true %}\n    b\n  {% endif %}\nc\n"), "a\n    b\nc");
  EXPECT_EQ(render("  {%- if true -%}  x  {%- endif -%}  \n y {{- ' z ' -}} \n"), "xy z ");
  EXPECT_EQ(render("{{- 'a' }}\n\n{{- 'b' -}}\n\n{{ 'c' }}"), "abc");
  EXPECT_EQ(render("{# c #}\n{% if true %}\nx\n{% endif %}\n{#- c -#}\n  y"), "x\ny");
  EXPECT_EQ(render("a {%+ if true %}b{% endif +%}\nc"), "a b\nc");
  EXPECT_EQ(render("{{ 'x' }}\n"), "x");      // one trailing newline dropped
  EXPECT_EQ(render("{{ 'x' }}\n\n"), "x\n");  // only one
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
  EXPECT_EQ(
      render("x {% if true %}\n\ty{% endif %}\n   {% for x in [1] %}\n{{ x }}\n   {% endfor %}"),
      "x \ty1\n");
}

TEST(Jinja, ValuesRenderAsPythonWritesThem) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 2.0 * 3 }}"),
            "1.0 1e+20 1.5e-07 0.30000000000000004 0.3333333333333333 6.0");
  EXPECT_EQ(
      render("{{ none }} {{ true }} {{ [1, 'a', none, true] }} {{ {'a': (1, 2)} }} {{ (1,) }}"),
      "None True [1, 'a', None, True] {'a': (1, 2)} (1,)");
  EXPECT_EQ(render("{{ [\"it's\", 'a\\nb'] }}"), "[\"it's\", 'a\\nb']");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'a' ~ 1.0 "
                   "~ none }}"),
            "3 -4 3.5 2 1024 a1.0None");
  EXPECT_EQ(render("{{ d }}", {{"d", jinja::Value::dict({{"z", num(1)}, {"a", num(2)}})}}),
            "{'z': 1, 'a': 2}");  // insertion order
}

TEST(Jinja, UndefinedIsEmptyFalseAndEmptyButNotUsable) {
  EXPECT_EQ(
      render("[{{ nothing }}]{% if not nothing %}f{% endif %}{% for x in nothing %}x{% endfor %}"
             "{{ nothing is defined }}{{ nothing|default('d') }}{{ nothing|length }}"),
      "[]fFalsed0");
  EXPECT_EQ(render("{{ d.missing }}|{{ d['missing'] is defined }}|{{ xs[10] }}|{{ none.x }}",
                   {{"d", jinja::Value::dict({})}, {"xs", list({})}}),
            "|False||");
  EXPECT_NE(error_of("{{ nothing.x }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ nothing + 1 }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ nothing < 1 }}").find("undefined"), std::string::npos);
}

TEST(Jinja, LoopsScopesAndNamespaces) {
  const auto xs = list({num(1), num(2), num(3)});
  EXPECT_EQ(
      render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
             "{{ loop.last }}{{ loop.length }}{{ loop.previtem|default('-') }}"
             "{{ loop.nextitem|default('-') }}{{ loop.cycle('a', 'b') }};{% endfor %}",
             {{"xs", xs}}),
      "103TrueFalse3-2a;212FalseFalse313b;321FalseTrue32-a;");
  EXPECT_EQ(render("{% for x in xs if x != 2 %}{{ x }}{{ loop.length }}{% endfor %}"
                   "{% for x in [] %}x{% else %}empty{% endfor %}",
                   {{"xs", xs}}),
            "1232empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  // A set in a loop ends with its iteration; in an if it stays; a namespace carries it out.
  EXPECT_EQ(
      render("{% set x = 0 %}{% for i in xs %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
             {{"xs", xs}}),
      "0101010");
  EXPECT_EQ(render("{% if true %}{% set z = 5 %}{% endif %}{{ z }}"), "5");
  EXPECT_EQ(
      render(
          "{% set ns = namespace(a=1, found=false) %}{% for x in xs %}{% set ns.a = ns.a + x %}"
          "{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.a }}{{ ns.found }}",
          {{"xs", xs}}),
      "7True");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}"
                   "{% if x == 3 %}{% break %}{% endif %}{% endfor %}",
                   {{"xs", list({num(1), num(2), num(3), num(4)})}}),
            "13");
  EXPECT_EQ(
      render("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set blk %}in {{ a }}{% endset %}[{{ blk }}]"),
      "12[in 1]");
}

TEST(Jinja, MacrosGenerationAndFilterBlocks) {
  EXPECT_EQ(render("{% macro f(a, b='B', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}"
                   "{{ f(1) }}{{ f(1, 2) }}{{ f(1, c=3) }}"),
            "[1|B|None][1|2|None][1|B|3]");
  EXPECT_EQ(render("{% macro fact(n) %}{{ 1 if n <= 1 else n * fact(n - 1)|int }}{% endmacro %}{{ "
                   "fact(5) }}"),
            "120");
  EXPECT_TRUE(jinja::Template::parse("{% generation %}x{% endgeneration %}").has_generation());
  EXPECT_EQ(render("a{% generation %}gen{% endgeneration %}b"), "agenb");
  EXPECT_EQ(render("{% filter upper %}abc {{ 'x' }}{% endfilter %}"), "ABC X");
}

TEST(Jinja, FiltersTestsAndMethods) {
  EXPECT_EQ(
      render("{{ '  a b  '|trim }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|"
             "{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.endswith(('x', 'c')) }}"),
      "a b|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|True");
  EXPECT_EQ(render("{{ 'hello world'|title }} {{ 'hELLO'|capitalize }} {{ 'héllo'|upper }} "
                   "{{ 'abcabc'.replace('b', 'X') }} {{ 'abcabc'|replace('b', 'Y', 1) }}"),
            "Hello World Hello HÉLLO aXcaXc aYcabc");
  EXPECT_EQ(render("{{ {'k': [1.5, none, true, 'é\\n\"']}|tojson }} {{ [1, 2]|tojson(indent=2) }}"),
            "{\"k\": [1.5, null, true, \"é\\n\\\"\"]} [\n  1,\n  2\n]");
  EXPECT_EQ(render("{{ [1]|tojson(false, 1) }}"),
            "[\n 1\n]");  // transformers' order: ensure_ascii, indent
  EXPECT_EQ(render("{{ ms|map(attribute='role')|join(' ') }}|{{ ms|selectattr('role', 'equalto', "
                   "'user')|list|length }}"
                   "|{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='c')|list }}",
                   {{"ms", list({jinja::Value::dict({{"role", str("user")}, {"c", num(1)}}),
                                 jinja::Value::dict({{"role", str("bot")}, {"c", num(2)}})})}}),
            "user bot|1|[2]");
  EXPECT_EQ(
      render("{{ '3'|int + 1 }} {{ 'x'|int }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ [1, 2, "
             "1]|unique|list }}"
             " {{ {'b': 1, 'a': 2}|dictsort }} {{ 'a<b'|e }} {{ [3, 1]|sort }} {{ 'ab'|reverse }}"),
      "4 0 2.57 2.0 [1, 2] [('a', 2), ('b', 1)] a&lt;b [1, 3] ba");
  EXPECT_EQ(
      render("{{ 1 is number }}{{ 1.0 is integer }}{{ 'a' is string }}{{ {} is mapping }}{{ 3 is "
             "odd }}"
             "{{ 'a' is in ['a'] }}{{ none is none }}{{ [] is iterable }}{{ true is boolean }}"),
      "TrueFalseTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ '日本語'[1:] }}{{ 'abc'[::-1] }}{{ 'é'|length }}{{ [1, 2, 3][-2:] }}"),
            "本語cba1[2, 3]");
  EXPECT_EQ(
      render(
          "{{ '{} and {}'.format(1, 'x') }} {{ {'a': 1}.get('z', 7) }} {{ range(1, 10, 3)|list }}"),
      "1 and x 7 [1, 4, 7]");
}

// jinja2's map, select, selectattr, items, unique and reverse return iterators: true even when
// empty (a template testing `{% if xs|selectattr(...) %}` takes that branch), without a length.
TEST(Jinja, FiltersThatReturnIteratorsBehaveAsThem) {
  EXPECT_EQ(
      render("{% if []|select %}t{% else %}f{% endif %}{% if not undefined_x|items %}n{% endif %}"
             "{{ [1, 2]|reverse|join }}{{ [1, 2]|map('string')|first }}{{ [2, 1]|unique|list }}"),
      "t211[2, 1]");
  EXPECT_NE(error_of("{{ [1]|select|length }}").find("has no len()"), std::string::npos);
  EXPECT_NE(error_of("{{ [1]|select|last }}").find("not reversible"), std::string::npos);
  EXPECT_EQ(render("{{ [1]|select }}"), "<generator object>");
  // attribute= is a dotted path, as jinja2's make_attrgetter reads it.
  EXPECT_EQ(render("{{ [{'f': {'n': 'a'}}, {'f': {'n': 'b'}}]|map(attribute='f.n')|join(',') }}"
                   "{{ [[1, 2], [3, 4]]|map(attribute='1')|list }}"),
            "a,b[2, 4]");
  // jinja2 maps and selects only `if value`: None (a tool call's content) gives nothing, where
  // iterating None is an error (Llama Guard 3's template selects the image parts of each content).
  EXPECT_EQ(render("{{ none|selectattr('type', 'equalto', 'image')|list }}{{ none|map('x')|list }}"
                   "{{ ''|reject|list }}"),
            "[][][]");
  EXPECT_NE(error_of("{% for x in none %}{% endfor %}").find("not iterable"), std::string::npos);
  EXPECT_NE(error_of("{% if 1 if 2 %}{% endif %}").find("expected `%}`"), std::string::npos);
}

TEST(Jinja, RefusesWhatItDoesNotHoldNamingTheLine) {
  EXPECT_EQ(error_of("line 1\n{{ x }}\n{% include 'other' %}"),
            "t line 3: `{% include %}` is not supported");
  EXPECT_EQ(error_of("{% extends 'base' %}"), "t line 1: `{% extends %}` is not supported");
  EXPECT_EQ(error_of("\n{% block b %}{% endblock %}"), "t line 2: `{% block %}` is not supported");
  EXPECT_EQ(error_of("{% import 'm' as m %}"), "t line 1: `{% import %}` is not supported");
  EXPECT_EQ(error_of("{% raw %}x{% endraw %}"), "t line 1: `{% raw %}` is not supported");
  EXPECT_EQ(error_of("{% call m() %}x{% endcall %}"), "t line 1: `{% call %}` is not supported");
  EXPECT_EQ(error_of("\n\n{{ x|frobnicate }}"), "t line 3: unknown filter `frobnicate`");
  EXPECT_EQ(error_of("{% if x is frobnicated %}{% endif %}"),
            "t line 1: unknown test `frobnicated`");
  EXPECT_EQ(error_of("{% frob %}"), "t line 1: unknown statement `{% frob %}`");
  EXPECT_NE(error_of("{% if true %}\nx").find("never closed"), std::string::npos);
  EXPECT_NE(error_of("{% for x in xs recursive %}{% endfor %}").find("recursive"),
            std::string::npos);
  EXPECT_NE(error_of("{{ f(*args) }}").find("*args"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside"), std::string::npos);
  // Found by comparing fuzzer inputs with jinja2: a NUL byte is no whitespace inside a tag, `+`
  // only closes a block, `{% endmacro %}` takes no name, filters and tests take so many arguments.
  EXPECT_EQ(error_of(std::string("{{ 1\0 }}", 8)), "t line 1: unexpected character '\0' in a tag");
  EXPECT_EQ(error_of("{{ 1 +}}"), "t line 1: unexpected `}}` in an expression");
  EXPECT_NE(error_of("{% macro m() %}{% endmacro m %}").find("expected `%}`"), std::string::npos);
  EXPECT_EQ(error_of("{{ [1]|join(',', 'a', 'b') }}"),
            "t line 1: filter 'join' takes at most 2 positional argument(s), 3 given");
  EXPECT_EQ(error_of("{{ 1 is none(2) }}"),
            "t line 1: test 'none' takes at most 0 positional argument(s), 1 given");
  EXPECT_NE(error_of("{{ 2 ** 5e3 }}").find("out of range"), std::string::npos);
  EXPECT_EQ(error_of("{{ 'a' %}"), "t line 1: a tag is never closed with `}}`");
  EXPECT_EQ(error_of("{{ 'a' + }}"), "t line 1: unexpected `}}` in an expression");
}

TEST(Jinja, RaiseExceptionCarriesTheTemplatesMessage) {
  try {
    render("\n{{ raise_exception('roles must alternate ' ~ 2) }}");
    FAIL() << "no error";
  } catch (const jinja::Error& e) {
    EXPECT_TRUE(e.raised());
    EXPECT_EQ(e.message(), "roles must alternate 2");
    EXPECT_EQ(e.line(), 2);
  }
}

TEST(Jinja, StrftimeNowIsTodaysDate) {
  char want[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(want, sizeof want, "%d %b %Y", &tm);
  const std::string got = render("{{ strftime_now('%d %b %Y') }}");
  // A midnight between the two clocks: tolerate the next day.
  if (got != want) {
    const std::time_t later = std::time(nullptr);
    localtime_r(&later, &tm);
    std::strftime(want, sizeof want, "%d %b %Y", &tm);
  }
  EXPECT_EQ(got, want);
}

// Every cap: hostile templates end in an Error naming it, quickly and within bounded memory.
TEST(Jinja, CapsOnHostileTemplates) {
  jinja::Limits small;
  small.max_source_bytes = 100;
  EXPECT_NE(error_of(std::string(101, 'x'), small).find("cap"), std::string::npos);
  EXPECT_NE(error_of("{{" + std::string(1000, '(') + "1" + std::string(1000, ')') + "}}")
                .find("nested deeper"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").find("cap on expressions"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks).find("nested deeper"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("cap on recursion"),
            std::string::npos);
  EXPECT_NE(
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
          .find("cap on loops"),
      std::string::npos);
  EXPECT_NE(error_of("{{ range(10**9) }}").find("range()"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 10**9 }}").find("cap"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("cap"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}")
                .find("cap on the output"),
            std::string::npos);
  EXPECT_NE(
      error_of("{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}"
               "{% endfor %}{{ ns.v }}")
          .find("cap on values"),
      std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = ns %}").find("namespace"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("overflow"), std::string::npos);
  jinja::Limits few;
  few.max_steps = 1000;
  EXPECT_NE(error_of("{% for i in range(10000) %}{{ i }}{% endfor %}", few).find("cap on work"),
            std::string::npos);
}

// ---- ChatTemplate ----

struct TempFolder {
  fs::path path;
  TempFolder() {
    char tmpl[] = "/tmp/chat_template_test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempFolder() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

const char* kSimple =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

TEST(ChatTemplate, FromFolderReadsTokenizerConfig) {
  TempFolder d;
  nlohmann::json config = {{"chat_template", kSimple},
                           {"bos_token", "<s>"},
                           {"eos_token", {{"content", "</s>"}, {"lstrip", false}}},
                           {"pad_token", nullptr}};
  d.write("tokenizer_config.json", config.dump());
  const ChatTemplate t = ChatTemplate::from_folder(d.path.string());
  const std::vector<ChatMessage> ms = {{"user", "hi"}, {"assistant", "yo"}};
  EXPECT_EQ(t.render(ms, false), "<s><user>hi</s><assistant>yo</s>");
  EXPECT_EQ(t.render({{"user", "hi"}}, true), "<s><user>hi</s><assistant>");
  EXPECT_EQ(t.special_tokens().count("pad_token"), 0u);
  EXPECT_EQ(t.render(ms, false, {{"bos_token", "[B]"}}).substr(0, 3), "[B]");  // extra wins

  // A list of named templates: the "default" one.
  config["chat_template"] = {{{"name", "tool_use"}, {"template", "T"}},
                             {{"name", "default"}, {"template", "D"}}};
  d.write("tokenizer_config.json", config.dump());
  EXPECT_EQ(ChatTemplate::from_folder(d.path.string()).render(ms, false), "D");
  // chat_template.jinja wins over tokenizer_config.json.
  d.write("chat_template.jinja", "J{{ messages|length }}\n");
  EXPECT_EQ(ChatTemplate::from_folder(d.path.string()).render(ms, false), "J2");
}

TEST(ChatTemplate, ErrorsNameTheFolderAndTheFile) {
  TempFolder d;
  d.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  try {
    ChatTemplate::from_folder(d.path.string());
    FAIL() << "no error";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(std::string(e.what()).find(d.path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  d.write("chat_template.jinja", "ok\n{% include 'x' %}");
  try {
    ChatTemplate::from_folder(d.path.string());
    FAIL() << "no error";
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(std::string(e.what()), (d.path / "chat_template.jinja").string() +
                                         " line 2: `{% include %}` is not supported");
    EXPECT_EQ(e.line(), 2);
  }
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  fs::remove(d.path / "chat_template.jinja");
  try {
    ChatTemplate::from_folder(d.path.string());
    FAIL() << "no error";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("no template named \"default\" (it has: tool_use)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChatTemplate, SpansAndThePrefixRule) {
  const ChatTemplate t =
      ChatTemplate::from_string(kSimple, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  const std::vector<ChatMessage> ms = {
      {"user", "hi"}, {"assistant", "yo"}, {"user", "?"}, {"assistant", "ok"}};
  const auto r = t.render_with_spans(ms);
  ASSERT_EQ(r.assistant_spans.size(), 2u);
  EXPECT_EQ(r.text.substr(r.assistant_spans[0].first,
                          r.assistant_spans[0].second - r.assistant_spans[0].first),
            "yo</s>");
  EXPECT_EQ(r.text.substr(r.assistant_spans[1].first), "ok</s>");
  // A template whose last message renders differently is not prefix-stable.
  const ChatTemplate last = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.content }}{% if loop.last %}!{% endif %}{% endfor %}");
  EXPECT_THROW(last.render_with_spans(ms), ChatTemplateError);
  EXPECT_FALSE(t.has_generation_tags());
}

// Content as a list of text parts reaches the template as transformers passes it, and the check
// after rendering tells a template that rendered the parts' words from one that printed the list
// as a string or left it out (the two ways a template written for string content meets a list).
ChatMessage parts_message(const std::string& role, std::vector<std::string> parts) {
  ChatMessage m(role, "");
  m.parts = std::move(parts);
  return m;
}

std::string parts_error(const ChatTemplate& t, const std::vector<ChatMessage>& ms) {
  try {
    t.check_rendering(ms, t.render(ms, false), false);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, PartsAreRenderedOrRefused) {
  const std::vector<ChatMessage> ms = {parts_message("user", {" Hi ", "there\n"}),
                                       parts_message("assistant", {"it's \"me\""})};
  const ChatTemplate parts = ChatTemplate::from_string(
      "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}"
      "{% for p in m.content %}{% if p.type == 'text' %}{{ p.text | trim }}{% endif %}{% endfor %}"
      "{% endif %}{% endfor %}",
      {}, "parts.jinja");
  EXPECT_EQ(parts.render(ms, false), "<user>Hithere<assistant>it's \"me\"");
  EXPECT_EQ(parts_error(parts, ms), "");
  // The Python form of the list, as jinja2's trim filter writes it; found and refused.
  const ChatTemplate trim = ChatTemplate::from_string(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}", {}, "trim.jinja");
  EXPECT_EQ(trim.render({ms[1]}, false), "<assistant>[{'type': 'text', 'text': 'it\\'s \"me\"'}]");
  EXPECT_EQ(parts_error(trim, ms),
            "trim.jinja: message 0 has its content as a list of parts, and the template prints "
            "that list as a string (it expects string content): give the content as a string");
  // A template that renders content that is not a string as "".
  const ChatTemplate dropped = ChatTemplate::from_string(
      "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}"
      "{% endif %}{% endfor %}",
      {}, "dropped.jinja");
  EXPECT_EQ(parts_error(dropped, ms),
            "dropped.jinja: message 0 has its content as a list of parts, and the template "
            "leaves the text of part 0 out of the rendering (it expects string content): give "
            "the content as a string");
  // Parts in the other order are a rendering of other words.
  const ChatTemplate reversed = ChatTemplate::from_string(
      "{% for m in messages %}{% for p in m.content | reverse %}{{ p.text }}{% endfor %}"
      "{% endfor %}",
      {}, "reversed.jinja");
  EXPECT_NE(parts_error(reversed, ms).find("leaves the text of part 1 out"), std::string::npos);
  // String content is not the check's business.
  EXPECT_EQ(parts_error(trim, {{"user", "[{'type': 'text', 'text': 'x'}]"}}), "");
}

// A message's JSON object reaches the template as it is (tool_calls, name, a content of null),
// and so do the tools a conversation offers; a template that renders the conversation the same
// without its tool calls, or without its tools, is refused: the model would learn to answer
// without the call it was shown, or to call tools it was never shown.
ChatMessage json_message(const std::string& json, const std::string& role) {
  ChatMessage m(role, "");
  m.json = json;
  return m;
}

TEST(ChatTemplate, ToolCallsAndToolsAreRenderedOrRefused) {
  const std::vector<ChatMessage> ms = {
      {"user", "Weather?"},
      json_message(R"({"role": "assistant", "content": null, "tool_calls": [{"type": "function",)"
                   R"( "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})",
                   "assistant"),
      json_message(R"({"role": "tool", "name": "get_weather", "content": "21"})", "tool")};
  const ChatVariables tools = {
      {"tools", ChatValue::json(R"([{"type": "function", "function": {"name": "get_weather"}}])")}};
  const ChatTemplate calls = ChatTemplate::from_string(
      "{% if tools %}[{% for t in tools %}{{ t.function.name }}{% endfor %}]{% endif %}"
      "{% for m in messages %}<{{ m.role }}>{% if m.content is none %}none{% endif %}"
      "{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}"
      "{% endfor %}{{ m.content or '' }}{% endfor %}",
      {}, "calls.jinja");
  const std::string text = calls.render(ms, false, tools);
  EXPECT_EQ(text,
            "[get_weather]<user>Weather?<assistant>noneget_weather{\"city\": \"Paris\"}<tool>21");
  EXPECT_NO_THROW(calls.check_rendering(ms, text, false, tools));
  EXPECT_EQ(calls.render(ms, false),
            "<user>Weather?<assistant>noneget_weather{\"city\": "
            "\"Paris\"}<tool>21");  // tools: None unless offered
  // Phi-3.5's way: the answer's content only.
  const ChatTemplate content_only = ChatTemplate::from_string(
      "{% for m in messages %}<{{ m.role }}>{{ m.content or '' }}{% endfor %}", {}, "plain.jinja");
  try {
    content_only.check_rendering(ms, content_only.render(ms, false), false);
    ADD_FAILURE() << "tool calls left out, not refused";
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plain.jinja: message 1 calls tools (\"tool_calls\"), and the template renders the "
              "conversation the same without them: it has no tool calls");
  }
  // Tools offered to a template that shows none of them.
  const ChatTemplate no_tools = ChatTemplate::from_string(
      "{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.name }}{% endfor %}"
      "{% endfor %}",
      {}, "no_tools.jinja");
  try {
    no_tools.check_rendering(ms, no_tools.render(ms, true, tools), true, tools);
    ADD_FAILURE() << "tools left out, not refused";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("no_tools.jinja: the conversation offers tools, and the "
                                         "template renders it the same without them"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(calls.render(ms, false, {{"tools", ChatValue::json("[1,")}}), ChatTemplateError);
}

}  // namespace
