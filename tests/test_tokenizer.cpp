// Tests for fsdp::data::GPT2Tokenizer: token-for-token agreement with the npm package gpt-3-encoder
// (OpenAI's encoder ported to JavaScript) on tests/data/tokenizer_vectors.txt, where it agrees with
// Hugging Face (the file notes where it does not: a literal <|endoftext|> is the special token),
// round trips through decode, and errors that name the bad file. Needs assets/gpt2 from
// scripts/fetch_assets.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fsdp/data/tokenizer.h"

using fsdp::data::GPT2Tokenizer;

namespace {

const std::string kAssets = FSDP_ASSETS_DIR;
const std::string kEncoder = kAssets + "/encoder.json";
const std::string kMerges = kAssets + "/vocab.bpe";

bool assets_present() { return std::ifstream(kEncoder).good() && std::ifstream(kMerges).good(); }

// Loading takes a few hundred milliseconds: share one tokenizer across the tests.
const GPT2Tokenizer& tokenizer() {
  static const GPT2Tokenizer tok = GPT2Tokenizer::load(kEncoder, kMerges);
  return tok;
}

#define REQUIRE_ASSETS() \
  if (!assets_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets

struct Vector {
  std::string text;
  std::vector<int32_t> ids;
  int line;
};

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<Vector> load_vectors() {
  std::ifstream in(std::string(FSDP_TEST_DATA_DIR) + "/tokenizer_vectors.txt");
  std::vector<Vector> out;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#') continue;
    size_t tab1 = line.find('\t'), tab2 = line.find('\t', tab1 + 1);
    Vector v{from_hex(line.substr(0, tab1)), {}, no};
    std::istringstream ids(line.substr(tab1 + 1, tab2 - tab1 - 1));
    for (int32_t id; ids >> id;) v.ids.push_back(id);
    out.push_back(std::move(v));
  }
  return out;
}

std::string write_temp(const std::string& name, const std::string& content) {
  std::string path = testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Expects load() to throw a runtime_error whose message contains each of `parts`.
void expect_load_error(const std::string& enc, const std::string& bpe,
                       const std::vector<std::string>& parts) {
  try {
    GPT2Tokenizer::load(enc, bpe);
    ADD_FAILURE() << "no error for " << enc << " / " << bpe;
  } catch (const std::runtime_error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Tokenizer, Sizes) {
  REQUIRE_ASSETS();
  EXPECT_EQ(tokenizer().vocab_size(), 50257u);
  EXPECT_EQ(tokenizer().eot(), 50256);
  EXPECT_EQ(tokenizer().decode({tokenizer().eot()}), "<|endoftext|>");
}

TEST(Tokenizer, MatchesReferenceVectors) {
  REQUIRE_ASSETS();
  auto vectors = load_vectors();
  ASSERT_GE(vectors.size(), 50u);
  for (const auto& v : vectors) {
    EXPECT_EQ(tokenizer().encode(v.text), v.ids) << "vector at line " << v.line;
    EXPECT_EQ(tokenizer().decode(v.ids), v.text) << "vector at line " << v.line;
  }
}

// Pseudo-random lowercase words: unlike repeated text, most of them miss the cache.
std::string random_words(size_t bytes) {
  std::string out;
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u, state >> 8; };
  while (out.size() < bytes) {
    out += ' ';
    for (uint32_t n = 2 + next() % 9; n > 0; --n) out += static_cast<char>('a' + next() % 26);
  }
  return out;
}

// A few KB of mixed text, encoded twice (the second time from the cache) and decoded back.
TEST(Tokenizer, RoundTripsMixedText) {
  REQUIRE_ASSETS();
  std::string text;
  for (int rep = 0; rep < 2; ++rep)
    for (const auto& v : load_vectors()) text += v.text + (text.size() % 3 ? " " : "\n");
  // Bytes that are not valid UTF-8 (stray continuation, truncated and surrogate sequences) too.
  const char raw[] = "\x80\xff invalid \xc3 utf8 \xed\xa0\x80 \xf0\x9f";
  text += std::string(raw, sizeof(raw) - 1) + random_words(1000);
  ASSERT_GT(text.size(), 4000u);
  auto ids = tokenizer().encode(text);
  EXPECT_EQ(tokenizer().decode(ids), text);
  EXPECT_EQ(tokenizer().encode(text), ids);
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  REQUIRE_ASSETS();
  EXPECT_THROW(tokenizer().decode({50257}), std::out_of_range);
  EXPECT_THROW(tokenizer().decode({-1}), std::out_of_range);
}

TEST(Tokenizer, MissingFilesNameThePath) {
  REQUIRE_ASSETS();
  expect_load_error("/nonexistent/encoder.json", kMerges, {"/nonexistent/encoder.json"});
  expect_load_error(kEncoder, "/nonexistent/vocab.bpe", {"/nonexistent/vocab.bpe"});
}

TEST(Tokenizer, MalformedJsonNamesFileAndOffset) {
  std::string bad = write_temp("bad_encoder.json", "{\"a\": 0,\n \"b\" 1}");
  expect_load_error(bad, "unused", {bad, "line 2", "offset 14"});
  std::string surrogate = write_temp("bad_surrogate.json", "{\"\\ud83d\": 0}");
  expect_load_error(surrogate, "unused", {surrogate, "surrogate"});
}

TEST(Tokenizer, MalformedMergesNameFileAndLine) {
  REQUIRE_ASSETS();
  std::string bad = write_temp("bad_vocab.bpe", "#version: 0.2\nĠ t\nthree tokens here\n");
  expect_load_error(kEncoder, bad, {bad, "line 3"});
}

// Prints encoding speed, for text that hits the cache (repeated) and text that mostly misses it.
TEST(Tokenizer, EncodeSpeed) {
  REQUIRE_ASSETS();
  std::string repeated;
  for (const auto& v : load_vectors()) repeated += v.text + " ";
  while (repeated.size() < (1u << 20)) repeated += repeated;
  for (const auto& [name, text] : {std::pair<const char*, std::string>{"repeated", repeated},
                                   {"random words", random_words(1 << 20)}}) {
    auto t0 = std::chrono::steady_clock::now();
    auto ids = tokenizer().encode(text);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %.2f MB into %zu tokens in %.3f s (%.3f s/MB)\n", name, text.size() / 1e6,
                ids.size(), s, s / (text.size() / 1e6));
    EXPECT_EQ(tokenizer().decode(ids), text);
  }
}
