// HFTokenizer (hf_tokenizer.h): reads tokenizer.json into a PipelineSpec and a BpeModel, each
// component type by its own small reader, refusing what the engine does not implement by name;
// regexes are compiled here, once per tokenizer, so a bad one is named before anything runs. Then
// tokenizer_config.json's BOS and EOS. The fingerprint hashes the files' bytes.
#include "fsdp/data/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "data/fingerprint.h"
#include "data/hf_pipeline.h"
#include "data/onig_regex.h"
#include "data/pretokenize.h"
#include "data/utf8.h"
#include "util/json.h"

namespace fsdp::data {
namespace {

using hf::DecoderStep;
using hf::NormalizerStep;
using hf::PipelineSpec;
using hf::PreTokenizerStep;
using nlohmann::json;

// The Split patterns of Llama 3 and Qwen2 tokenizers, which name the family in logs.
const char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Reads one tokenizer.json; `where` (the file's path) starts every error message.
class SpecReader {
 public:
  explicit SpecReader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(where_ + ": " + what);
  }
  [[noreturn]] void unsupported(const std::string& component, const std::string& type,
                                const std::string& supported) const {
    fail("unsupported " + component + " type \"" + type + "\" (fsdp.cpp reads " + supported + ")");
  }

  json parse(const std::string& text) const {
    const size_t deep = json_bounds::too_deep_at(text);
    if (deep != std::string::npos) {
      throw std::runtime_error(json_bounds::too_deep_message(where_, deep));
    }
    try {
      return json::parse(text);
    } catch (const json::exception& e) {
      fail(std::string("malformed JSON: ") + e.what());
    }
  }

  std::string type_of(const json& j, const std::string& component) const {
    if (!j.is_object()) fail(component + " is not an object");
    auto it = j.find("type");
    if (it == j.end() || !it->is_string()) fail(component + " has no \"type\"");
    return it->get<std::string>();
  }

  // A field of the expected JSON type; `fallback` when absent or null.
  template <class T>
  T get(const json& j, const std::string& key, T fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      fail("field \"" + key + "\" has the wrong type in " + json_bounds::excerpt(j, 200));
    }
  }

  // A non-negative integer that fits an int32 (ids, counts): Hugging Face reads these as u32 or
  // usize and refuses floats and negatives; so do we, rather than convert out of range.
  int32_t count(const json& v, const std::string& what) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                                : v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
      fail(what + " is not an integer in [0, 2^31): " + json_bounds::excerpt(v));
    return v.get<int32_t>();
  }

  int32_t count_field(const json& j, const std::string& key, int32_t fallback) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? fallback : count(*it, "\"" + key + "\"");
  }

  std::vector<int32_t> ids(const json& j) const {
    std::vector<int32_t> out;
    if (!j.is_array()) fail("\"ids\" is not an array: " + json_bounds::excerpt(j));
    for (const json& v : j) out.push_back(count(v, "an id"));
    return out;
  }

  std::unordered_map<std::string, int32_t> vocab(const json& j) const {
    if (!j.is_object()) fail("the model's \"vocab\" is not an object");
    // An empty vocabulary encoded a whole corpus to end-of-text tokens without a word.
    if (j.empty()) fail("the model's \"vocab\" is empty");
    std::unordered_map<std::string, int32_t> out;
    std::unordered_map<int32_t, std::string> owner;
    for (const auto& [token, id] : j.items()) {
      const int32_t n = count(id, "the id of \"" + token + "\"");
      const auto [it, fresh] = owner.emplace(n, token);
      if (!fresh) {
        fail("tokens \"" + it->second + "\" and \"" + token + "\" both have id " +
             std::to_string(n) + " in the model's \"vocab\"");
      }
      out[token] = n;
    }
    return out;
  }

  std::optional<std::string> optional_string(const json& j, const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) fail("field \"" + key + "\" is not a string");
    return it->get<std::string>();
  }

  // A pattern: {"String": s} (matched as plain text) or {"Regex": r}, compiled by Oniguruma.
  std::shared_ptr<const Regex> pattern(const json& j, const std::string& component) const {
    const json p = j.value("pattern", json());
    for (const char* form : {"String", "Regex"}) {
      if (!p.is_object() || !p.contains(form)) continue;
      if (!p[form].is_string() || p.size() != 1)
        fail(component + " pattern " + json_bounds::excerpt(p, 200) + " is not one string");
      const std::string text = p[form].get<std::string>();
      // An empty {"String"} matches between every two characters in tokenizers; no file means it.
      if (text.empty()) fail(component + " has an empty pattern");
      return std::make_shared<const Regex>(text, form[0] == 'S', where_ + " (" + component + ")");
    }
    fail(component + " has no pattern ({\"String\": ...} or {\"Regex\": ...}): " +
         json_bounds::excerpt(p, 200));
  }

  // SplitDelimiterBehavior's names.
  SplitBehavior behavior(const json& j, const std::string& component,
                         const std::string& fallback) const {
    const std::string b = get<std::string>(j, "behavior", fallback);
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    fail("unknown " + component + " behavior \"" + b +
         "\" (Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
  }

  hf::PrependScheme prepend_scheme(const json& j) const {
    const std::string s = get<std::string>(j, "prepend_scheme", "always");
    hf::PrependScheme scheme = s == "first"   ? hf::PrependScheme::kFirst
                               : s == "never" ? hf::PrependScheme::kNever
                                              : hf::PrependScheme::kAlways;
    if (s != "first" && s != "never" && s != "always") fail("unknown prepend_scheme \"" + s + "\"");
    if (!get<bool>(j, "add_prefix_space", true)) {  // the legacy spelling of "never"
      if (j.contains("prepend_scheme") && scheme != hf::PrependScheme::kNever)
        fail("Metaspace add_prefix_space does not match declared prepend_scheme");
      scheme = hf::PrependScheme::kNever;
    }
    return scheme;
  }

  // A field that must hold one character (Rust's char), as its UTF-8.
  std::string one_char(const json& j, const std::string& key, const std::string& component) const {
    const std::string s = get<std::string>(j, key, "");
    if (s.empty() || decode_utf8(s, 0).end != s.size())
      fail(component + " \"" + key + "\" is not one character: \"" + s + "\"");
    return s;
  }

  // Sequences nest; a file nested deeper than this is refused rather than recursed into. Each
  // component may compile a regex, so a file with more of them than any tokenizer has (a few
  // each) is refused before it takes seconds and gigabytes.
  void check_depth(int depth) const {
    if (depth > 32) fail("components nested more than 32 deep");
    constexpr size_t kMaxComponents = 1024;
    if (++components_ > kMaxComponents)
      fail("more than " + std::to_string(kMaxComponents) +
           " normalizers, pre-tokenizers, post-processors and decoders");
  }

  void normalizer(const json& j, std::vector<NormalizerStep>& out, int depth = 0) const {
    if (j.is_null()) return;
    check_depth(depth);
    using K = NormalizerStep::Kind;
    const std::string type = type_of(j, "normalizer");
    if (type == "Sequence") {
      for (const json& n : j.value("normalizers", json::array())) normalizer(n, out, depth + 1);
      return;
    }
    static const std::pair<const char*, K> kPlain[] = {{"NFC", K::kNfc},
                                                       {"NFKC", K::kNfkc},
                                                       {"NFD", K::kNfd},
                                                       {"NFKD", K::kNfkd},
                                                       {"Lowercase", K::kLowercase}};
    for (const auto& [name, kind] : kPlain) {
      if (type == name) {
        out.emplace_back(kind);
        return;
      }
    }
    if (type == "Strip") {
      out.emplace_back(K::kStrip);
      out.back().left = get<bool>(j, "strip_left", false);
      out.back().right = get<bool>(j, "strip_right", false);
    } else if (type == "Prepend") {
      out.emplace_back(K::kPrepend);
      out.back().text = get<std::string>(j, "prepend", "");
    } else if (type == "Replace") {
      out.emplace_back(K::kReplace);
      out.back().regex = pattern(j, "Replace normalizer");
      out.back().content = get<std::string>(j, "content", "");
    } else {
      unsupported("normalizer", type,
                  "Sequence, NFC, NFKC, NFD, NFKD, Lowercase, Strip, Prepend, Replace");
    }
  }

  PreTokenizerStep split(const json& j) const {
    PreTokenizerStep s(PreTokenizerStep::Kind::kSplit);
    s.regex = pattern(j, "Split pre_tokenizer");
    if (!j.contains("behavior")) fail("Split pre_tokenizer has no \"behavior\"");
    s.behavior = behavior(j, "Split", "");
    s.invert = get<bool>(j, "invert", false);
    return s;
  }

  PreTokenizerStep metaspace(const json& j) const {
    PreTokenizerStep s(PreTokenizerStep::Kind::kMetaspace);
    s.replacement = one_char(j, "replacement", "Metaspace");
    s.prepend_scheme = prepend_scheme(j);
    s.split = get<bool>(j, "split", true);
    return s;
  }

  PreTokenizerStep pre_tokenizer_step(const json& j, const std::string& type) const {
    using K = PreTokenizerStep::Kind;
    if (type == "Split") return split(j);
    if (type == "Metaspace") return metaspace(j);
    if (type == "ByteLevel") {  // trim_offsets changes offsets only, which we do not keep
      PreTokenizerStep s(K::kByteLevel);
      s.add_prefix_space = get<bool>(j, "add_prefix_space", true);
      s.use_regex = get<bool>(j, "use_regex", true);
      return s;
    }
    if (type == "Digits") {
      PreTokenizerStep s(K::kDigits);
      s.individual_digits = get<bool>(j, "individual_digits", false);
      return s;
    }
    if (type == "Punctuation") {
      PreTokenizerStep s(K::kPunctuation);
      s.behavior = behavior(j, "Punctuation", "Isolated");
      return s;
    }
    if (type == "Whitespace") return PreTokenizerStep(K::kWhitespace);
    if (type == "WhitespaceSplit") return PreTokenizerStep(K::kWhitespaceSplit);
    unsupported("pre_tokenizer", type,
                "Sequence, ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, "
                "Punctuation");
  }

  void pre_tokenizer(const json& j, std::vector<PreTokenizerStep>& out, int depth = 0) const {
    if (j.is_null()) return;
    check_depth(depth);
    const std::string type = type_of(j, "pre_tokenizer");
    if (type != "Sequence") {
      out.push_back(pre_tokenizer_step(j, type));
      return;
    }
    for (const json& p : j.value("pretokenizers", json::array())) pre_tokenizer(p, out, depth + 1);
  }

  void decoder(const json& j, std::vector<DecoderStep>& out, int depth = 0) const {
    check_depth(depth);
    const std::string type = type_of(j, "decoder");
    DecoderStep d(DecoderStep::Kind::kFuse);
    if (type == "Sequence") {
      for (const json& s : j.value("decoders", json::array())) decoder(s, out, depth + 1);
      return;
    } else if (type == "ByteLevel") {
      d.kind = DecoderStep::Kind::kByteLevel;
    } else if (type == "Metaspace") {
      d.kind = DecoderStep::Kind::kMetaspace;
      d.text = one_char(j, "replacement", "Metaspace decoder");
      d.prepend_scheme = prepend_scheme(j);
    } else if (type == "Replace") {
      d.kind = DecoderStep::Kind::kReplace;
      d.regex = pattern(j, "Replace decoder");
      d.content = get<std::string>(j, "content", "");
    } else if (type == "ByteFallback") {
      d.kind = DecoderStep::Kind::kByteFallback;
    } else if (type == "Fuse") {
      d.kind = DecoderStep::Kind::kFuse;
    } else if (type == "Strip") {
      d.kind = DecoderStep::Kind::kStrip;
      d.content = one_char(j, "content", "Strip decoder");
      d.start = static_cast<size_t>(count_field(j, "start", 0));
      d.stop = static_cast<size_t>(count_field(j, "stop", 0));
    } else {
      unsupported("decoder", type,
                  "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip");
    }
    out.push_back(d);
  }

  // TemplateProcessing's single template: {"SpecialToken": {"id": name}} items take their ids
  // from special_tokens[name].ids, {"Sequence": {"id": "A"}} is the input.
  std::vector<hf::TemplateItem> template_single(const json& j) const {
    const json specials = j.value("special_tokens", json::object());
    std::vector<hf::TemplateItem> items;
    for (const json& piece : j.value("single", json::array())) {
      if (piece.is_object() && piece.contains("Sequence")) {
        items.push_back({true, {}});
        continue;
      }
      const json special = piece.is_object() ? piece.value("SpecialToken", json()) : json();
      const std::string name = special.is_object() ? get<std::string>(special, "id", "") : "";
      auto it = specials.find(name);
      if (it == specials.end())
        fail("TemplateProcessing names special token \"" + name + "\" missing from special_tokens");
      items.push_back({false, ids(it->is_object() ? it->value("ids", json::array()) : json())});
    }
    return items;
  }

  // RobertaProcessing's "cls" or "sep": [token, id]; the id is taken as written, as Hugging Face
  // does.
  hf::TemplateItem roberta_token(const json& j, const std::string& key) const {
    const json t = j.value(key, json());
    if (!t.is_array() || t.size() != 2 || !t[0].is_string())
      fail("RobertaProcessing \"" + key + "\" is not [token, id]: " + json_bounds::excerpt(t));
    return {false, {count(t[1], "RobertaProcessing's " + key + " id")}};
  }

  // Only the single-sequence form of a post-processor is read: a causal LM encodes one sequence,
  // so TemplateProcessing's "pair" and RobertaProcessing's pair form are never applied.
  void post_processor(const json& j, PipelineSpec& spec, int depth = 0) const {
    if (j.is_null()) return;
    check_depth(depth);
    const std::string type = type_of(j, "post_processor");
    if (type == "Sequence") {
      for (const json& p : j.value("processors", json::array())) post_processor(p, spec, depth + 1);
    } else if (type == "TemplateProcessing") {
      spec.templates.push_back(template_single(j));
    } else if (type == "RobertaProcessing") {  // its trim_offsets changes offsets only
      spec.templates.push_back(
          {roberta_token(j, "cls"), hf::TemplateItem{true, {}}, roberta_token(j, "sep")});
    } else if (type != "ByteLevel") {  // ByteLevel only trims offsets, which we do not keep
      unsupported("post_processor", type,
                  "Sequence, TemplateProcessing, RobertaProcessing, ByteLevel");
    }
  }

  std::vector<hf::AddedToken> added_tokens(const json& j) const {
    // Each added token is a matcher the encoder tries at every position: a list this long is not
    // a tokenizer anyone trains with (Gemma 3 has 6,000), and building it took seconds and GBs.
    constexpr size_t kMaxAddedTokens = 100000;
    if (j.is_array() && j.size() > kMaxAddedTokens) {
      fail("\"added_tokens\" lists " + std::to_string(j.size()) + " tokens, more than " +
           std::to_string(kMaxAddedTokens) + " (refused before building them)");
    }
    std::vector<hf::AddedToken> out;
    for (const json& t : j.is_array() ? j : json::array()) {
      hf::AddedToken a;
      a.content = get<std::string>(t, "content", "");
      a.single_word = get<bool>(t, "single_word", false);
      a.lstrip = get<bool>(t, "lstrip", false);
      a.rstrip = get<bool>(t, "rstrip", false);
      a.special = get<bool>(t, "special", false);
      a.normalized = get<bool>(t, "normalized", !a.special);
      out.push_back(a);
    }
    return out;
  }

  std::vector<std::pair<std::string, std::string>> merges(const json& j) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const json& m : j.is_array() ? j : json::array()) {
      if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        continue;
      }
      const std::string line = m.is_string() ? m.get<std::string>() : "";
      const size_t sp = line.find(' ');
      if (line.rfind("#version", 0) == 0) continue;
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        fail("malformed merge " + json_bounds::excerpt(m) + " (merge " +
             std::to_string(out.size() + 1) + ")");
      out.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    return out;
  }

  BpeModel model(const json& j) const {
    if (!j.is_object()) fail("no \"model\"");
    const std::string type = j.contains("type") ? type_of(j, "model") : "BPE";
    if (type != "BPE") fail("unsupported model type \"" + type + "\" (fsdp.cpp reads BPE models)");
    if (get<double>(j, "dropout", 0.0) != 0.0) fail("unsupported BPE dropout (not deterministic)");
    BpeOptions o;
    o.unk_token = optional_string(j, "unk_token");
    o.fuse_unk = get<bool>(j, "fuse_unk", false);
    o.byte_fallback = get<bool>(j, "byte_fallback", false);
    o.ignore_merges = get<bool>(j, "ignore_merges", false);
    o.continuing_subword_prefix = optional_string(j, "continuing_subword_prefix");
    o.end_of_word_suffix = optional_string(j, "end_of_word_suffix");
    return BpeModel(vocab(j.value("vocab", json::object())),
                    merges(j.value("merges", json::array())), std::move(o), where_);
  }

  const std::string& where() const { return where_; }

 private:
  std::string where_;
  mutable size_t components_ = 0;
};

bool has_pre(const PipelineSpec& s, PreTokenizerStep::Kind k, const char* pattern = nullptr) {
  return std::any_of(s.pre_tokenizers.begin(), s.pre_tokenizers.end(), [&](const auto& step) {
    return step.kind == k && (!pattern || (step.regex && step.regex->pattern() == pattern));
  });
}

std::string family_of(const PipelineSpec& s, const BpeOptions& o) {
  using K = PreTokenizerStep::Kind;
  if (has_pre(s, K::kSplit, kLlama3Pattern)) return "bpe-llama3";
  if (has_pre(s, K::kSplit, kQwen2Pattern)) return "bpe-qwen2";
  if (has_pre(s, K::kByteLevel)) return "bpe-bytelevel";
  const bool prepends = std::any_of(s.normalizers.begin(), s.normalizers.end(), [](const auto& n) {
    return n.kind == NormalizerStep::Kind::kPrepend;
  });
  if (has_pre(s, K::kMetaspace) || prepends || o.byte_fallback) return "bpe-sentencepiece";
  return "bpe";
}

// bos_token / eos_token of tokenizer_config.json: a string, an AddedToken object, or null.
std::optional<std::string> config_token(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

struct HFTokenizer::Impl {
  hf::Pipeline pipeline;
  std::string family;
  uint64_t fingerprint = 0;
  std::optional<int32_t> bos, eos;
};

namespace {

PipelineSpec read_spec(const SpecReader& r, const json& root) {
  PipelineSpec spec;
  spec.added_tokens = r.added_tokens(root.value("added_tokens", json::array()));
  r.normalizer(root.value("normalizer", json()), spec.normalizers);
  r.pre_tokenizer(root.value("pre_tokenizer", json()), spec.pre_tokenizers);
  r.post_processor(root.value("post_processor", json()), spec);
  const json decoder = root.value("decoder", json());
  spec.has_decoder = !decoder.is_null();
  if (spec.has_decoder) r.decoder(decoder, spec.decoders);
  return spec;
}

// The id of tokenizer_config.json's `key` (bos_token, eos_token), which must name a token.
std::optional<int32_t> config_id(const SpecReader& c, const json& config, const std::string& key,
                                 const hf::Pipeline& pipeline) {
  const auto token = config_token(config, key);
  if (!token) return std::nullopt;
  const int32_t id = pipeline.token_to_id(*token);
  if (id < 0) c.fail(key + " \"" + *token + "\" is not in the tokenizer's vocabulary");
  return id;
}

}  // namespace

HFTokenizer HFTokenizer::parse(const std::string& tokenizer_json, const std::string& config_json,
                               const std::string& name) {
  const SpecReader r(name + "/tokenizer.json");
  const json root = r.parse(tokenizer_json);
  if (!root.is_object()) r.fail("not a JSON object");
  BpeModel model = r.model(root.value("model", json()));
  PipelineSpec spec = read_spec(r, root);
  hf::assign_added_ids(spec.added_tokens, model);
  const std::string family = family_of(spec, model.options());
  auto impl = std::make_unique<Impl>(
      Impl{hf::Pipeline(std::move(spec), std::move(model)), family, 0, std::nullopt, std::nullopt});
  impl->fingerprint = files_fingerprint("tokenizer.json", {tokenizer_json, config_json});
  if (!config_json.empty()) {
    const SpecReader c(name + "/tokenizer_config.json");
    const json config = c.parse(config_json);
    impl->bos = config_id(c, config, "bos_token", impl->pipeline);
    impl->eos = config_id(c, config, "eos_token", impl->pipeline);
  }
  return HFTokenizer(std::move(impl));
}

HFTokenizer HFTokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string folder = fs::path(dir).lexically_normal().string();
  const std::string config = folder + "/tokenizer_config.json";
  // Bounded before reading (docs/hardening.md): tokenizer.json far above any published one;
  // tokenizer_config.json above Gemma 3's (over 1 MB: 6,000 added tokens listed one by one).
  const std::string tokenizer_json = json_bounds::read_file(
      folder + "/tokenizer.json", json_bounds::kMaxTokenizerJsonBytes, "a tokenizer.json");
  const std::string config_json =
      fs::exists(fs::symlink_status(config))
          ? json_bounds::read_file(config, json_bounds::kMaxTokenizerConfigBytes,
                                   "a tokenizer_config.json")
          : "";
  return parse(tokenizer_json, config_json, folder);
}

HFTokenizer::HFTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HFTokenizer::HFTokenizer(HFTokenizer&&) noexcept = default;
HFTokenizer& HFTokenizer::operator=(HFTokenizer&&) noexcept = default;
HFTokenizer::~HFTokenizer() = default;

std::vector<int32_t> HFTokenizer::encode(std::string_view text) const {
  return impl_->pipeline.encode(text, false);
}
std::vector<int32_t> HFTokenizer::encode_with_special_tokens(std::string_view text) const {
  return impl_->pipeline.encode(text, true);
}
std::string HFTokenizer::decode(const std::vector<int32_t>& ids) const {
  return impl_->pipeline.decode(ids);
}
size_t HFTokenizer::vocab_size() const { return impl_->pipeline.vocab_size(); }
int32_t HFTokenizer::max_id() const { return impl_->pipeline.max_id(); }
std::optional<int32_t> HFTokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> HFTokenizer::eos_id() const { return impl_->eos; }
std::string HFTokenizer::family() const { return impl_->family; }
uint64_t HFTokenizer::fingerprint() const { return impl_->fingerprint; }
int32_t HFTokenizer::token_to_id(const std::string& token) const {
  return impl_->pipeline.token_to_id(token);
}

std::vector<std::pair<std::string, int32_t>> HFTokenizer::special_tokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const hf::AddedToken& t : impl_->pipeline.added_tokens())
    if (t.special) out.emplace_back(t.content, t.id);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

}  // namespace fsdp::data
