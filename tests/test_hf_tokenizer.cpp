// Tests for the tokenizer.json families (fsdp/data/hf_tokenizer.h) against what Hugging Face's
// `tokenizers` 0.23 computes (tests/data/hf/tokenizers/<family>/reference.json, made by
// scripts/hf_fixtures.sh): for each family, the ids of the whole State of the Union corpus (count,
// FNV-1a hash and first ids), every torture text's ids with and without special tokens and its
// decoded text, the vocabulary size, BOS/EOS and special tokens; then the errors a tokenizer we do
// not read gets. The corpus checks need assets/sotu (scripts/fetch_assets.sh) and skip without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "data/onig_regex.h"
#include "data/pretokenize.h"
#include "data/unicode.h"
#include "fsdp/data/hf_tokenizer.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace fsdp::data;

namespace {

const std::string kFixtures = FSDP_HF_TOKENIZERS_DIR;
const std::string kSotu = FSDP_SOTU_DIR;
const std::string kGpt2 = FSDP_ASSETS_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json reference(const std::string& family) {
  return json::parse(read_file(kFixtures + "/" + family + "/reference.json"));
}

// FNV-1a 64 over the ids as little-endian uint32, as reference.json's corpus.fnv1a64.
uint64_t fnv1a_ids(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids)
    for (int b = 0; b < 4; ++b)
      h = (h ^ ((static_cast<uint32_t>(id) >> (8 * b)) & 0xFF)) * 0x100000001B3ull;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<std::string> sotu_documents() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kSotu))
    if (e.path().extension() == ".txt") names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  std::vector<std::string> docs;
  for (const auto& n : names) docs.push_back(read_file(n));
  return docs;
}

// Each document encoded on its own (no special tokens), on two threads, concatenated in order.
std::vector<int32_t> encode_corpus(const Tokenizer& tok, const std::vector<std::string>& docs) {
  std::vector<std::vector<int32_t>> parts(docs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < docs.size();) parts[i] = tok.encode(docs[i]);
  };
  std::thread helper(work);
  work();
  helper.join();
  std::vector<int32_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return "[" + s + "]";
}

template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const std::runtime_error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
}

struct Family {
  std::string name, expected_family;
};

class HFTokenizerFamily : public testing::TestWithParam<Family> {
 protected:
  std::string dir() const { return kFixtures + "/" + GetParam().name; }
};

}  // namespace

TEST_P(HFTokenizerFamily, SizesAndSpecialTokens) {
  const json ref = reference(GetParam().name);
  const auto tok = load_tokenizer(dir());
  EXPECT_EQ(tok->family(), GetParam().expected_family);
  EXPECT_EQ(tok->vocab_size(), ref["vocab_size"].get<size_t>());
  auto optional_id = [](const json& j) {
    return j.is_null() ? std::optional<int32_t>() : std::optional<int32_t>(j.get<int32_t>());
  };
  EXPECT_EQ(tok->bos_id(), optional_id(ref["bos_id"]));
  EXPECT_EQ(tok->eos_id(), optional_id(ref["eos_id"]));
  std::vector<std::pair<std::string, int32_t>> special;
  for (const auto& [content, id] : ref["special_tokens"].items())
    special.emplace_back(content, id.get<int32_t>());
  std::sort(special.begin(), special.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  EXPECT_EQ(tok->special_tokens(), special);
}

TEST_P(HFTokenizerFamily, TortureTexts) {
  const json ref = reference(GetParam().name);
  const auto tok = load_tokenizer(dir());
  ASSERT_GE(ref["torture"].size(), 20u);
  for (const json& t : ref["torture"]) {
    const std::string text = t["text"].get<std::string>();
    const auto ids = t["ids"].get<std::vector<int32_t>>();
    const auto with_special = t["ids_with_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(show(tok->encode(text)), show(ids)) << "text " << t["text"].dump();
    EXPECT_EQ(show(tok->encode_with_special_tokens(text)), show(with_special))
        << "text " << t["text"].dump();
    EXPECT_EQ(tok->decode(ids), t["decoded"].get<std::string>()) << "text " << t["text"].dump();
  }
}

TEST_P(HFTokenizerFamily, WholeCorpus) {
  if (!fs::is_directory(kSotu))
    GTEST_SKIP() << "no folder " << kSotu << " (scripts/fetch_assets.sh)";
  const json ref = reference(GetParam().name)["corpus"];
  const auto docs = sotu_documents();
  ASSERT_EQ(docs.size(), ref["documents"].get<size_t>());
  const auto tok = load_tokenizer(dir());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = encode_corpus(*tok, docs);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %zu documents into %zu tokens in %.2f s\n", GetParam().name.c_str(), docs.size(),
              ids.size(), s);
  EXPECT_EQ(ids.size(), ref["tokens"].get<size_t>());
  EXPECT_EQ(hex64(fnv1a_ids(ids)), ref["fnv1a64"].get<std::string>());
  const auto first = ref["first_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), first.size());
  EXPECT_EQ(show(std::vector<int32_t>(ids.begin(), ids.begin() + first.size())), show(first));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, HFTokenizerFamily,
    testing::Values(Family{"bytelevel", "bpe-bytelevel"}, Family{"llama3", "bpe-llama3"},
                    Family{"qwen2", "bpe-qwen2"}, Family{"llama2", "bpe-sentencepiece"},
                    Family{"metaspace", "bpe-sentencepiece"},
                    // Issue 46: every pre-tokenizer, normalizer and
                    // post-processor kind, regexes through Oniguruma.
                    Family{"smollm2", "bpe-bytelevel"}, Family{"o200k", "bpe-bytelevel"},
                    Family{"nfkc", "bpe-bytelevel"}, Family{"whitespace", "bpe"},
                    Family{"roberta", "bpe"}, Family{"splits", "bpe-bytelevel"},
                    Family{"metaspace_always", "bpe-sentencepiece"},
                    Family{"metaspace_never", "bpe-sentencepiece"}),
    [](const auto& info) { return info.param.name; });

// ---- bytes that are not UTF-8 -------------------------------------------------------------------

// Hugging Face never sees them (Python hands it str); we keep them, so the regexes search each one
// as U+FFFD with the text's own offsets, and the normalizers pass them through, composing nothing
// across one.
TEST(HFTokenizerStrayBytes, RegexSearchesThemAsReplacementCharacters) {
  const Regex letters(R"(\p{L}+)", false, "test");
  using Matches = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(letters.find_all("ab\xff"
                             "cd\xc3"),
            (Matches{{0, 2}, {3, 5}}));
  const Regex symbols(R"(\p{So})", false, "test");  // U+FFFD is a symbol
  EXPECT_EQ(symbols.find_all("a\x80\xf0\x9f"), (Matches{{1, 2}, {2, 3}, {3, 4}}));
  const Regex literal("a.b", true, "test");  // {"String"}: plain text
  EXPECT_EQ(literal.find_all("axb a.b"), (Matches{{4, 7}}));
  const Regex empty_ok("x*", false, "test");  // empty matches as onig's find_iter yields them
  EXPECT_EQ(empty_ok.find_all("axxb"), (Matches{{0, 0}, {1, 3}, {4, 4}}));
  // ByteLevel's regex through a stray byte: the pieces cover the text, byte for byte.
  const std::string text = "it\xe2\x80 's \xc0\xaf 12";
  std::string joined;
  for (const auto& [b, e] :
       split_spans(regex_spans(gpt2_regex(), text, false), SplitBehavior::kIsolated))
    joined += text.substr(b, e - b);
  EXPECT_EQ(joined, text);
}

TEST(HFTokenizerStrayBytes, NormalizersKeepThem) {
  EXPECT_EQ(normalize_unicode("e\xcc\x81\xff"
                              "e\xcc\x81",
                              NormalForm::kNfc),
            "\xc3\xa9\xff\xc3\xa9");
  EXPECT_EQ(normalize_unicode("\xef\xac\x81\x80", NormalForm::kNfkc), "fi\x80");
  EXPECT_EQ(normalize_unicode("e\xff\xcc\x81", NormalForm::kNfc), "e\xff\xcc\x81");  // no composing
  EXPECT_EQ(to_lowercase("\xc4\xb0\xfe"
                         "A"),
            "i\xcc\x87\xfe"
            "a");  // U+0130: two characters
  EXPECT_EQ(to_lowercase("\xce\xa3\xce\x91\xce\xa3"),
            "\xcf\x83\xce\xb1\xcf\x83");  // no final sigma
  for (const std::string family : {"o200k", "nfkc", "whitespace", "roberta", "splits"}) {
    const auto tok = load_tokenizer(kFixtures + "/" + family);
    EXPECT_FALSE(tok->encode("caf\xc3 \xff\xfe 12\xe2\x82 x\xf0\x9f").empty()) << family;
  }
}

// ---- what is refused ---------------------------------------------------------------------------

namespace {

// A fresh, empty folder, removed when the test program exits.
std::string temp_dir(const std::string& name) {
  static struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
      std::error_code ignored;
      for (const auto& d : dirs) fs::remove_all(d, ignored);
    }
  } cleanup;
  const std::string dir =
      testing::TempDir() + "fsdp_hf_tokenizer_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  cleanup.dirs.push_back(dir);
  return dir;
}

// The bytelevel fixture's tokenizer.json with `edit` applied, written to a fresh folder.
std::string edited_fixture(const std::string& name, const std::function<void(json&)>& edit) {
  json j = json::parse(read_file(kFixtures + "/bytelevel/tokenizer.json"));
  edit(j);
  const std::string dir = temp_dir(name);
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  return dir;
}

}  // namespace

TEST(HFTokenizerErrors, UnsupportedModelType) {
  const std::string dir = edited_fixture("wordpiece", [](json& j) {
    j["model"] = {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"vocab", json::object()}};
  });
  expect_error([&] { load_tokenizer(dir); }, {dir + "/tokenizer.json", "model type", "WordPiece"});
}

TEST(HFTokenizerErrors, UnknownPreTokenizer) {
  const std::string dir = edited_fixture("bert_pre", [](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "BertPreTokenizer"}}}}};
  });
  expect_error([&] { load_tokenizer(dir); },
               {dir + "/tokenizer.json", "pre_tokenizer", "BertPreTokenizer"});
}

// A regex Oniguruma does not compile is named with the pattern and Oniguruma's own message,
// wherever it sits: a Split, a Replace normalizer, a Replace decoder.
TEST(HFTokenizerErrors, InvalidRegexNamesPatternAndOnigurumaMessage) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"split", R"(\p{L}+|(\p{N}+)", "end pattern with unmatched parenthesis"},
      {"replace", R"(\p{NoSuchProperty})", "invalid character property name"},
      {"decoder", "a{2,1}x[", "premature end of char-class"},
  };
  for (const auto& [where, pattern, message] : cases) {
    const std::string dir = edited_fixture("regex_" + where, [&, w = where](json& j) {
      const json p = {{"Regex", pattern}};
      if (w == "split")
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", p}, {"behavior", "Isolated"}, {"invert", false}};
      else if (w == "replace")
        j["normalizer"] = {{"type", "Replace"}, {"pattern", p}, {"content", ""}};
      else
        j["decoder"] = {{"type", "Replace"}, {"pattern", p}, {"content", ""}};
    });
    expect_error([&] { load_tokenizer(dir); },
                 {dir + "/tokenizer.json", "invalid regex", "\"" + pattern + "\"", message});
  }
}

// Options of the new kinds that are misspelt or missing are named too.
TEST(HFTokenizerErrors, BadOptionsOfTheNewKindsAreNamed) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"behavior \"Merged\"",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", "Merged"}};
       }},
      {"Split pre_tokenizer has no \"behavior\"",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "x"}}}};
       }},
      {"Replace normalizer has no pattern",
       [](json& j) {
         j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Glob", "*"}}}, {"content", ""}};
       }},
      {"empty pattern",
       [](json& j) {
         j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}};
       }},
      {"RobertaProcessing \"sep\" is not [token, id]",
       [](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"<s>", 0}}, {"sep", 2}};
       }},
      {"more than 1024 normalizers, pre-tokenizers",
       [](json& j) {
         json many = json::array();
         for (int i = 0; i < 2000; ++i)
           many.push_back(
               {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}});
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", many}};
       }},
      {"more than 16384",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"Regex", std::string(20000, 'a')}}},
                               {"behavior", "Isolated"}};
       }},
  };
  for (const auto& [what, edit] : cases) {
    const std::string dir = edited_fixture("option", edit);
    expect_error([&] { load_tokenizer(dir); }, {dir + "/tokenizer.json", what});
  }
}

TEST(HFTokenizerErrors, OtherUnsupportedComponentsAreNamed) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"BertNormalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "Sequence"},
                            {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}};
       }},
      {"Precompiled",
       [](json& j) {
         j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
       }},
      {"WordPiece",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
       }},
      {"BertProcessing",
       [](json& j) {
         j["post_processor"] = {{"type", "Sequence"},
                                {"processors", {{{"type", "BertProcessing"}}}}};
       }},
      {"UnicodeScripts",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
       }},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }},
  };
  for (const auto& [what, edit] : cases) {
    const std::string dir = edited_fixture(what, edit);
    expect_error([&] { load_tokenizer(dir); }, {dir + "/tokenizer.json", what});
  }
}

TEST(HFTokenizerErrors, MissingFilesNameTheFolder) {
  const std::string dir = temp_dir("empty");
  expect_error([&] { load_tokenizer(dir); }, {dir, "tokenizer.json", "encoder.json", "vocab.bpe"});
  expect_error([&] { load_tokenizer(dir + "/nope"); }, {dir + "/nope", "no such folder"});
  std::ofstream(dir + "/tokenizer.json") << "{\"model\": ";
  expect_error([&] { load_tokenizer(dir); }, {dir + "/tokenizer.json", "malformed JSON"});
}

// Hostile tokenizer files (issue 45): 100,000 nested arrays in a component crashed the process in
// an error message's dump(); a million added tokens took 14 s and 2.8 GB before being refused; a
// folder or a device in a file's place is named as what it is.
TEST(HFTokenizerErrors, HostileFilesAreRefusedBeforeTheyAreBuilt) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* component : {"normalizer", "pre_tokenizer"}) {
    const std::string dir = edited_fixture(std::string("deep_") + component, [](json&) {});
    std::string text = read_file(dir + "/tokenizer.json");
    text.insert(1, "\"" + std::string(component) + "_x\": " + deep + ",");
    std::ofstream(dir + "/tokenizer.json") << text;
    expect_error([&] { load_tokenizer(dir); },
                 {dir + "/tokenizer.json", "nested deeper than 64 levels"});
  }
  const std::string many = edited_fixture("added", [](json& j) {
    j["added_tokens"] = json::array();
    for (int i = 0; i < 100001; ++i) j["added_tokens"].push_back(json::object());
  });
  expect_error([&] { load_tokenizer(many); },
               {many + "/tokenizer.json", "\"added_tokens\" lists 100001 tokens", "refused"});
  const std::string dir = edited_fixture("config_folder", [](json&) {});
  std::filesystem::create_directory(dir + "/tokenizer_config.json");
  expect_error([&] { load_tokenizer(dir); },
               {dir + "/tokenizer_config.json", "is a folder, not a tokenizer_config.json"});
  // tokenizer.json itself as a folder or a link to a device: named as what it is ("holds no
  // tokenizer" before).
  const std::string folder = temp_dir("tokenizer_folder");
  std::filesystem::create_directory(folder + "/tokenizer.json");
  expect_error([&] { load_tokenizer(folder); },
               {folder + "/tokenizer.json", "is a folder, not a tokenizer.json"});
  const std::string device = temp_dir("tokenizer_device");
  std::filesystem::create_symlink("/dev/zero", device + "/tokenizer.json");
  expect_error([&] { load_tokenizer(device); },
               {device + "/tokenizer.json", "is not a regular file"});
}

// An empty vocabulary once encoded a whole corpus to end-of-text tokens without a word; two tokens
// with one id were counted as two. Both are refused by name.
TEST(HFTokenizerErrors, EmptyAndDuplicateIdsAreNamed) {
  const std::string empty =
      edited_fixture("empty_vocab", [](json& j) { j["model"]["vocab"] = json::object(); });
  expect_error([&] { load_tokenizer(empty); }, {empty + "/tokenizer.json", "\"vocab\" is empty"});
  const std::string twice = edited_fixture("same_id", [](json& j) {
    const int32_t id = j["model"]["vocab"].begin()->get<int32_t>();
    j["model"]["vocab"]["zz_same_id_again"] = id;
  });
  expect_error([&] { load_tokenizer(twice); },
               {twice + "/tokenizer.json", "\"zz_same_id_again\"", "both have id"});
}

TEST(HFTokenizerErrors, ConfigTokenMissingFromTheVocabulary) {
  const std::string dir = edited_fixture("config", [](json&) {});
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<nope>"})";
  expect_error([&] { load_tokenizer(dir); }, {dir + "/tokenizer_config.json", "<nope>"});
}

// ---- the factory and the fingerprint
// -------------------------------------------------------------

TEST(LoadTokenizer, GPT2FilesAreTheirOwnFamily) {
  if (!fs::is_regular_file(kGpt2 + "/encoder.json"))
    GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kGpt2;
  const auto tok = load_tokenizer(kGpt2);
  EXPECT_EQ(tok->family(), "gpt2-files");
  EXPECT_EQ(tok->vocab_size(), 50257u);
  EXPECT_EQ(tok->encode("a<|endoftext|>b"), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_EQ(tok->bos_id(), 50256);
  EXPECT_EQ(tok->eos_id(), 50256);
}

TEST(LoadTokenizer, FingerprintFollowsTheFiles) {
  const auto a = load_tokenizer(kFixtures + "/bytelevel");
  EXPECT_EQ(a->fingerprint(), load_tokenizer(kFixtures + "/bytelevel")->fingerprint());
  EXPECT_NE(a->fingerprint(), load_tokenizer(kFixtures + "/llama3")->fingerprint());
  const std::string dir = edited_fixture("fingerprint", [](json&) {});  // same JSON, reformatted
  EXPECT_NE(a->fingerprint(), load_tokenizer(dir)->fingerprint());
  // The files alone give the same fingerprint, for both families.
  for (const std::string& d : {kFixtures + "/bytelevel", kFixtures + "/llama2", dir})
    EXPECT_EQ(tokenizer_fingerprint(d), load_tokenizer(d)->fingerprint()) << d;
  if (fs::is_regular_file(kGpt2 + "/encoder.json")) {
    EXPECT_EQ(tokenizer_fingerprint(kGpt2), load_tokenizer(kGpt2)->fingerprint());
  }
}
