// safetensors tests. Single-process suites (SafetensorsFile, SafetensorsWriter, SafetensorsHeader):
// round trips of every dtype and odd shapes, Hugging Face's exact header bytes, element-range
// reads and conversions, the writer's refusals and atomic publication, and one hand-crafted file
// per rule a header can break. Multi-rank suite (FullState, every world size and backend):
// export from a sharded GPT-2 under each strategy equals its gathered parameters; import at another
// world size, strategy and wrap is bit-identical; a forward after loading uses the loaded values;
// bf16 files; tied parameters stored once; mismatched files refused on every rank alike.
// PythonCheckSample writes the files tests/safetensors_check.py checks independently.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "fsdp/checkpoint/full_state.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/fsdp.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using D = SafetensorsDType;

// --- helpers ------------------------------------------------------------------------------------

// A fresh folder for one single-process test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fsdp_st_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

at::Tensor sample(at::ScalarType type, const std::vector<int64_t>& shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (type == at::kBool) return at::randint(0, 2, shape, gen, at::kLong).to(at::kBool);
  if (type == at::kByte) return at::randint(0, 256, shape, gen, at::kLong).to(type);
  if (at::isFloatingType(type)) return at::randn(shape, gen, at::kDouble).to(type);
  return at::randint(-128, 128, shape, gen, at::kLong).to(type);
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

std::string shape_name(const std::vector<int64_t>& shape) {
  std::string s = "s";
  for (int64_t d : shape) s += "_" + std::to_string(d);
  return s;
}

// Writes tensors whole, in the map's order.
void write_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                std::map<std::string, std::string> metadata = {}) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    specs.push_back({name, to_safetensors_dtype(t.scalar_type()), t.sizes().vec()});
  }
  SafetensorsWriter w(path, specs, std::move(metadata));
  for (const auto& [name, t] : tensors) w.write(name, t);
  w.commit();
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs `f` and checks it throws SafetensorsError whose message holds every one of `parts`.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const SafetensorsError& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

// --- round trips --------------------------------------------------------------------------------

TEST(SafetensorsFile, RoundTripsEveryDtypeAndOddShapes) {
  TempDir dir;
  const std::vector<at::ScalarType> types = {
      at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,        at::kInt,
      at::kShort,  at::kChar,  at::kByte, at::kBool,     at::kComplexFloat};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {1}, {7, 15}, {3, 0, 2}, {2, 3, 5}};
  std::map<std::string, at::Tensor> tensors;
  std::vector<SafetensorsTensorSpec> specs;
  uint64_t seed = 1;
  for (auto type : types) {
    for (const auto& shape : shapes) {
      const std::string name = std::string(c10::toString(type)) + "." + shape_name(shape);
      const at::Tensor re = sample(at::isComplexType(type) ? at::kFloat : type, shape, seed++);
      tensors[name] =
          at::isComplexType(type) ? at::complex(re, sample(at::kFloat, shape, seed++)) : re;
      specs.push_back({name, to_safetensors_dtype(type), shape});
    }
  }
  const std::string path = dir.file("all.safetensors");
  {
    SafetensorsWriter w(path, specs, {{"step", "12"}});
    // Reverse order; every other tensor in three pieces, the last one first.
    bool pieces = false;
    for (auto it = tensors.rbegin(); it != tensors.rend(); ++it, pieces = !pieces) {
      const at::Tensor c = it->second.contiguous();
      const int64_t n = static_cast<int64_t>(c.nbytes());
      if (!pieces || n < 3) {
        w.write(it->first, c);
        continue;
      }
      const char* p = static_cast<const char*>(c.data_ptr());
      w.write_bytes(it->first, 2 * n / 3, p + 2 * n / 3, n - 2 * n / 3);
      w.write_bytes(it->first, 0, p, n / 3);
      w.write_bytes(it->first, n / 3, p + n / 3, 2 * n / 3 - n / 3);
    }
    EXPECT_FALSE(fs::exists(path)) << "published before commit";
    w.commit();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  EXPECT_EQ(r.data_offset() % 8, 0);
  ASSERT_EQ(r.tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_NE(r.find(name), nullptr) << name;
    EXPECT_EQ(r.info(name).shape, t.sizes().vec()) << name;
    at::Tensor back = at::zeros(t.sizes(), t.options());
    r.read(name, back);
    EXPECT_TRUE(same_bytes(back, t)) << name;
  }
  // Hugging Face's order: dtype alignment descending, then name.
  const auto& order = r.tensors();
  for (size_t i = 1; i < order.size(); ++i) {
    const auto &a = order[i - 1], &b = order[i];
    EXPECT_TRUE(a.dtype > b.dtype || (a.dtype == b.dtype && a.name < b.name))
        << a.name << " before " << b.name;
  }
}

// The exact bytes safetensors' own serializer produces for one F32 tensor [1, 2, 3] = 0..5 with
// metadata {"format": "pt"}: compact JSON, metadata first, spaces to a multiple of 8.
TEST(SafetensorsFile, HeaderBytesMatchHuggingFaceWriter) {
  TempDir dir;
  const std::string path = dir.file("hf.safetensors");
  write_file(path, {{"attn.0", at::arange(6, at::kFloat).view({1, 2, 3})}});
  std::string header = R"({"__metadata__":{"format":"pt"},"attn.0":{"dtype":"F32","shape":[1,2,3],)"
                       R"("data_offsets":[0,24]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string expected(8, '\0');
  expected[0] = static_cast<char>(header.size());
  expected += header;
  for (float v = 0; v < 6; ++v) expected.append(reinterpret_cast<const char*>(&v), 4);
  EXPECT_EQ(file_bytes(path), expected);
}

// Bytes written by safetensors' own test suite (tensor.rs, test_serialization): no metadata,
// header length 64 -> accepted, values 0..5.
TEST(SafetensorsFile, ReadsAFileHuggingFaceWrote) {
  TempDir dir;
  const std::string path = dir.file("rust.safetensors");
  std::string bytes(8, '\0');
  bytes[0] = 64;
  bytes += R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(bytes.size(), 72u);
  for (float v = 0; v < 6; ++v) bytes.append(reinterpret_cast<const char*>(&v), 4);
  std::ofstream(path, std::ios::binary) << bytes;
  SafetensorsReader r(path);
  EXPECT_TRUE(r.metadata().empty());
  at::Tensor t = at::empty({1, 2, 3}, at::kFloat);
  r.read("attn.0", t);
  EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat).view({1, 2, 3})));
}

TEST(SafetensorsFile, ReadsElementRangesBytesAndConvertsFloats) {
  TempDir dir;
  const std::string path = dir.file("ranges.safetensors");
  const at::Tensor w = sample(at::kFloat, {7, 15}, 1), b = sample(at::kBFloat16, {100}, 2);
  const at::Tensor i = sample(at::kLong, {5}, 3);
  write_file(path, {{"w", w}, {"b", b}, {"i", i}});
  SafetensorsReader r(path);

  at::Tensor part = at::empty({20}, at::kFloat);
  r.read_elements("w", 10, 20, part);
  EXPECT_TRUE(same_bytes(part, w.view({-1}).narrow(0, 10, 20)));
  float raw[2];
  r.read_bytes("w", 40, 8, raw);
  EXPECT_EQ(raw[0], w.view({-1})[10].item<float>());
  EXPECT_EQ(raw[1], w.view({-1})[11].item<float>());

  at::Tensor f = at::empty({100}, at::kFloat);
  r.read("b", f);
  EXPECT_TRUE(same_bytes(f, b.to(at::kFloat)));
  at::Tensor d = at::empty({7, 15}, at::kDouble);
  r.read("w", d);
  EXPECT_TRUE(same_bytes(d, w.to(at::kDouble)));
  at::Tensor h = at::empty({7, 15}, at::kBFloat16);
  r.read("w", h);
  EXPECT_TRUE(same_bytes(h, w.to(at::kBFloat16)));
  // A strided destination: every other element of a larger tensor.
  at::Tensor holder = at::zeros({50, 2}, at::kFloat);
  r.read_elements("b", 30, 50, holder.select(1, 0));
  EXPECT_TRUE(same_bytes(holder.select(1, 0).contiguous(), b.narrow(0, 30, 50).to(at::kFloat)));
  EXPECT_EQ(holder.select(1, 1).abs().sum().item<float>(), 0.0f);

  expect_error([&] { r.read("i", at::empty({5}, at::kFloat)); }, {path, "'i'", "cannot read I64"});
  expect_error([&] { r.read("w", at::empty({15, 7}, at::kFloat)); }, {path, "'w'", "[7, 15]"});
  expect_error([&] { r.read_elements("w", 100, 6, at::empty({6}, at::kFloat)); },
               {"'w'", "outside"});
  expect_error([&] { r.read_bytes("w", 0, 421, raw); }, {"'w'", "outside"});
  expect_error([&] { r.read("nope", at::empty({1})); }, {path, "'nope'", "not in the file"});
}

// --- the writer ---------------------------------------------------------------------------------

TEST(SafetensorsWriter, RefusesBadDeclarations) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto make = [&](std::vector<SafetensorsTensorSpec> specs,
                  std::map<std::string, std::string> metadata = {}) {
    return [=] { SafetensorsWriter w(path, specs, metadata); };
  };
  expect_error(make({{"a", D::kF32, {2}}, {"a", D::kF32, {3}}}), {"'a'", "declared twice"});
  expect_error(make({{"__metadata__", D::kF32, {2}}}), {"'__metadata__'", "reserved"});
  expect_error(make({{"a", D::kF32, {2, -1}}}), {"'a'", "negative"});
  expect_error(make({{"a", D::kF32, {int64_t{1} << 40, int64_t{1} << 40}}}), {"'a'", "int64"});
  expect_error(make({{"a", D::kF4, {3}}}), {"'a'", "whole number of bytes"});
  expect_error(make({{std::string("bad\xff"), D::kF32, {1}}}), {"not valid UTF-8"});
  expect_error(make({{"a", D::kF32, {1}}}, {{"format", "np"}}), {path, "\"format\"", "pt"});
  expect_error([&] { SafetensorsWriter w(dir.file("no/such/folder/x"), {}); },
               {"no/such/folder/x.tmp", "cannot create"});
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsWriter, RefusesBadWritesAndIncompleteCommits) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const at::Tensor a = sample(at::kFloat, {4}, 1), b = sample(at::kLong, {2}, 2);
  SafetensorsWriter w(path, {{"a", D::kF32, {4}}, {"b", D::kI64, {2}}});
  const char* pa = static_cast<const char*>(a.data_ptr());
  expect_error([&] { w.write_bytes("c", 0, pa, 4); }, {path, "'c'", "not declared"});
  expect_error([&] { w.write_bytes("a", 8, pa, 16); }, {"'a'", "outside its 16 bytes"});
  w.write_bytes("a", 0, pa, 8);
  expect_error([&] { w.write_bytes("a", 4, pa + 4, 8); }, {"'a'", "overlap"});
  expect_error([&] { w.write("b", at::zeros({2}, at::kFloat)); }, {"'b'", "declared I64"});
  expect_error([&] { w.write("b", at::zeros({3}, at::kLong)); }, {"'b'", "[2]", "[3]"});
  w.write("b", b);
  expect_error([&] { w.commit(); }, {path, "'a'", "only 8 of its 16 bytes"});
  EXPECT_FALSE(fs::exists(path));
  w.write_bytes("a", 8, pa + 8, 8);
  w.commit();
  expect_error([&] { w.write_bytes("a", 0, pa, 4); }, {"'a'", "after commit"});
  SafetensorsReader r(path);
  at::Tensor back = at::empty({4});
  r.read("a", back);
  EXPECT_TRUE(same_bytes(back, a));
}

TEST(SafetensorsWriter, PublishesOnlyOnCommit) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const at::Tensor v1 = at::full({3}, 1.0f), v2 = at::full({3}, 2.0f);
  write_file(path, {{"x", v1}});
  // The writer's temporary is its own ("model.safetensors.tmp-PID-RANDOM": util/files.h).
  const auto temporaries = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
      n += e.path().filename().string().rfind("model.safetensors.tmp-", 0) == 0;
    }
    return n;
  };
  {
    SafetensorsWriter w(path, {{"x", D::kF32, {3}}});
    w.write("x", v2);
    EXPECT_EQ(temporaries(), 1);
  }  // abandoned: no commit
  EXPECT_EQ(temporaries(), 0);
  at::Tensor back = at::empty({3});
  SafetensorsReader(path).read("x", back);
  EXPECT_TRUE(at::equal(back, v1)) << "an abandoned writer changed the published file";
  write_file(path, {{"x", v2}});
  SafetensorsReader(path).read("x", back);
  EXPECT_TRUE(at::equal(back, v2));
}

// --- malformed headers, crafted by hand ---------------------------------------------------------

class SafetensorsHeader : public ::testing::Test {
 protected:
  // A file with `header` after its length (`length` when given, else the header's size) and
  // `data_bytes` zero bytes after that.
  std::string craft(const std::string& header, size_t data_bytes,
                    std::optional<uint64_t> length = std::nullopt) {
    const std::string path = dir_.file("case" + std::to_string(count_++) + ".safetensors");
    const uint64_t n = length.value_or(header.size());
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(n >> (8 * i)));
    bytes += header + std::string(data_bytes, '\0');
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  void refused(const std::string& path, std::vector<std::string> parts) {
    parts.insert(parts.begin(), path);
    expect_error([&] { SafetensorsReader r(path); }, parts);
  }
  // One tensor entry.
  static std::string t(const std::string& name, const std::string& dtype, const std::string& shape,
                       const std::string& offsets) {
    return "\"" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape +
           R"(,"data_offsets":)" + offsets + "}";
  }
  TempDir dir_;
  int count_ = 0;
};

TEST_F(SafetensorsHeader, AcceptsWellFormedFiles) {
  SafetensorsReader(craft("{}", 0));
  SafetensorsReader(craft(R"({"__metadata__":{"format":"pt"}}  )", 0));
  SafetensorsReader(
      craft("{" + t("e", "F32", "[0,3]", "[0,0]") + "," + t("w", "F32", "[2]", "[0,8]") + "}", 8));
  SafetensorsReader(craft(R"({"w":{"shape":[2],"data_offsets":[0,8],"dtype":"I32","x":1}})", 8));
}

TEST_F(SafetensorsHeader, RefusesBadLengths) {
  const std::string tiny = dir_.file("tiny.safetensors");
  std::ofstream(tiny, std::ios::binary) << "abcde";
  refused(tiny, {"5 bytes", "too short"});
  refused(craft("{}", 0, 100000001), {"100000001", "limit"});
  refused(craft("{}", 0, uint64_t{1} << 63), {"limit"});
  refused(craft("{}", 10, 50), {"header length 50", "past the end"});
}

TEST_F(SafetensorsHeader, RefusesBadJson) {
  refused(craft(R"({"w": {"dtype": "F32",)", 0), {"not valid UTF-8 JSON"});
  refused(craft("{\"w\xff\":{}}", 0), {"not valid UTF-8 JSON"});
  refused(craft("[1,2]", 0), {"array", "not an object"});
  // 100,000 nested arrays once overflowed the stack in the error message's dump() (issue 45).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  refused(craft("{\"w\":" + deep + "}", 0), {"JSON nested deeper than 64 levels"});

  refused(craft(std::string("{}\0\0\0\0\0\0", 8), 0), {"not valid UTF-8 JSON"});
  refused(craft(R"({"__metadata__":{"format":1}})", 0), {"__metadata__", "'format'"});
  refused(craft(R"({"__metadata__":[]})", 0), {"__metadata__"});
  refused(
      craft("{" + t("w", "F32", "[2]", "[0,8]") + "," + t("w", "F32", "[2]", "[8,16]") + "}", 16),
      {"'w'", "twice"});
}

TEST_F(SafetensorsHeader, RefusesBadTensorEntries) {
  refused(craft(R"({"w":5})", 0), {"tensor 'w'", "not an object"});
  refused(craft("{" + t("w", "F33", "[2]", "[0,8]") + "}", 8),
          {"tensor 'w'", "unknown dtype \"F33\""});
  refused(craft(R"({"w":{"dtype":"F32","shape":[2]}})", 8), {"tensor 'w'", "data_offsets"});
  refused(craft(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8), {"tensor 'w'", "shape"});
  refused(craft("{" + t("w", "F32", "[-2]", "[0,8]") + "}", 8), {"tensor 'w'", "non-negative"});
  refused(craft("{" + t("w", "F32", "[2.5]", "[0,8]") + "}", 8), {"tensor 'w'", "non-negative"});
  refused(craft("{" + t("w", "F32", "2", "[0,8]") + "}", 8), {"tensor 'w'", "not an array"});
  refused(craft("{" + t("w", "F32", "[2]", "[0]") + "}", 8), {"tensor 'w'", "[begin, end]"});
  refused(craft("{" + t("w", "F32", "[2]", "[8,0]") + "}", 8), {"tensor 'w'", "end before"});
  refused(craft("{" + t("w", "F32", "[2]", "[0,18446744073709551615]") + "}", 8),
          {"tensor 'w'", "overflows int64"});
}

TEST_F(SafetensorsHeader, RefusesSizesThatOverflowOrDisagree) {
  refused(craft("{" + t("w", "F32", "[4294967296,4294967296]", "[0,8]") + "}", 8),
          {"tensor 'w'", "more elements than int64"});
  refused(craft("{" + t("w", "F32", "[2305843009213693952]", "[0,8]") + "}", 8),
          {"tensor 'w'", "more bytes than int64"});
  refused(craft("{" + t("w", "F4", "[3]", "[0,1]") + "}", 1), {"tensor 'w'", "whole number"});
  refused(craft("{" + t("w", "F32", "[3]", "[0,8]") + "}", 8),
          {"tensor 'w'", "span 8 bytes", "needs 12"});
}

TEST_F(SafetensorsHeader, RefusesOffsetsThatDoNotTileTheBuffer) {
  refused(craft("{" + t("w", "F32", "[2]", "[0,8]") + "}", 4), {"tensor 'w'", "past the end"});
  refused(
      craft("{" + t("a", "F32", "[2]", "[0,8]") + "," + t("b", "F32", "[2]", "[4,12]") + "}", 12),
      {"tensor 'b'", "overlap", "'a'"});
  refused(
      craft("{" + t("a", "F32", "[2]", "[0,8]") + "," + t("b", "F32", "[2]", "[12,20]") + "}", 20),
      {"tensor 'b'", "hole [8, 12)"});
  refused(craft("{" + t("a", "F32", "[2]", "[4,12]") + "}", 12), {"tensor 'a'", "hole [0, 4)"});
  refused(craft("{" + t("w", "F32", "[2]", "[0,8]") + "}", 12),
          {"8 bytes of a 12-byte", "unindexed"});
  refused(craft("{" + t("a", "F32", "[2]", "[0,8]") + "," + t("z", "F32", "[0]", "[4,4]") + "}", 8),
          {"tensor 'z'", "overlap"});
}

TEST(SafetensorsDTypes, TableMatchesTheFormat) {
  for (int i = 0; i <= static_cast<int>(D::kU64); ++i) {
    const auto d = static_cast<D>(i);
    EXPECT_EQ(parse_safetensors_dtype(safetensors_dtype_name(d)), d);
    const auto type = to_scalar_type(d);
    if (type) {
      EXPECT_EQ(to_safetensors_dtype(*type), d);
      EXPECT_EQ(safetensors_dtype_bits(d), 8 * static_cast<int>(c10::elementSize(*type)));
    }
  }
  EXPECT_EQ(parse_safetensors_dtype("f32"), std::nullopt);
  EXPECT_EQ(to_scalar_type(D::kU32), std::nullopt);
}

// --- full state of a sharded model (multi-rank) -------------------------------------------------

GPT2Config tiny_config() {
  GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 16;
  c.n_embd = 25;  // odd sizes: units of 7825 and 2875 elements get padded at 2, 3 and 4 shards
  c.n_layer = 2;
  c.n_head = 5;
  return c;
}

struct Layout {
  ShardingStrategy strategy;
  bool wrap_blocks;
  DType param_dtype;
};

std::string describe(const Layout& l) {
  return std::string(to_string(l.strategy)) + (l.wrap_blocks ? " by block" : " one unit") +
         (l.param_dtype == DType::kBFloat16 ? " bf16" : "");
}

// One of every strategy, alternating wrap policies.
std::vector<Layout> every_strategy() {
  return {{ShardingStrategy::kFullShard, true, DType::kFloat32},
          {ShardingStrategy::kShardGradOp, false, DType::kFloat32},
          {ShardingStrategy::kNoShard, true, DType::kFloat32},
          {ShardingStrategy::kHybridShard, false, DType::kFloat32},
          {ShardingStrategy::kHybridShardZero2, true, DType::kFloat32}};
}

struct Sharded {
  GPT2 model;
  std::shared_ptr<FullyShardedModel> fsdp;
};

// HYBRID meshes: 2 x 2 at 4 ranks, otherwise all replicas (one rank per shard group).
Sharded make_sharded(const CommPtr& comm, const Layout& l, uint64_t seed) {
  GPT2 model(tiny_config());
  init_gpt2_weights(*model, seed);
  ShardingOptions o;
  o.strategy(l.strategy).param_dtype(l.param_dtype);
  if (l.wrap_blocks) o.wrap(WrapPolicy::by_type({"GPT2Block"}));
  if (is_hybrid(l.strategy)) o.shard_group_size(comm->size() == 4 ? 2 : 1);
  return {model, fully_shard(model.ptr(), comm, o)};
}

at::Tensor tokens(int64_t rows, int64_t cols, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(tiny_config().vocab_size, {rows, cols}, gen, at::kLong);
}

// A forward and backward (so the runtime has been through a step), then every shard scaled, as
// an optimizer would change it: the values a save must see are the shards' current ones.
void train_and_change(Sharded& s) {
  const at::Tensor t = tokens(2, tiny_config().n_positions + 1, 5);
  const int64_t T = tiny_config().n_positions;
  gpt2_loss(fsdp::forward(s.model, t.narrow(1, 0, T)), t.narrow(1, 1, T)).backward();
  at::NoGradGuard no_grad;
  for (const auto& shard : s.fsdp->shards()) shard.param.mul_(1.5);
}

at::Tensor logits(Sharded& s) {
  at::NoGradGuard no_grad;
  return fsdp::forward(s.model, tokens(2, tiny_config().n_positions, 9)).to(at::kFloat);
}

void expect_params_equal(const std::map<std::string, at::Tensor>& got,
                         const std::map<std::string, at::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, t] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": " << name;
    EXPECT_TRUE(same_bytes(it->second, t)) << what << ": " << name;
  }
}

// The elements of this rank's shards past their unit's last element: the runtime needs them zero.
std::vector<at::Tensor> shard_padding(FullyShardedModel& m) {
  std::vector<at::Tensor> out;
  const auto units = m.units();
  const auto shards = m.shards();
  for (size_t u = 0; u < units.size(); ++u) {
    const int64_t lo = units[u].shard_rank * units[u].shard_numel;
    const int64_t valid = std::clamp<int64_t>(units[u].numel - lo, 0, units[u].shard_numel);
    out.push_back(shards[u].param.narrow(0, valid, units[u].shard_numel - valid));
  }
  return out;
}

// A folder every rank names alike (from rank 0's pid), created by rank 0, removed at the end.
class SharedDir {
 public:
  SharedDir() {
    Comm& world = *test::world();
    int64_t id = world.rank() == 0 ? ::getpid() : 0;
    world.broadcast(&id, 1, DType::kInt64, 0);
    static int count = 0;
    path_ = (fs::temp_directory_path() /
             ("fsdp_st_" + std::to_string(id) + "_" + std::to_string(count++)))
                .string();
    if (world.rank() == 0) fs::create_directories(path_);
    world.barrier();
  }
  ~SharedDir() {
    test::world()->barrier();
    if (test::world()->rank() == 0) fs::remove_all(path_);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

TEST(FullState, ExportEqualsGatheredParamsUnderEveryStrategy) {
  SharedDir dir;
  for (const Layout& layout : every_strategy()) {
    SCOPED_TRACE(describe(layout));
    Sharded a = make_sharded(test::world(), layout, 3);
    train_and_change(a);
    const auto expected = a.fsdp->gather_full_params();
    const std::string path = dir.file("export.safetensors");
    save_full_safetensors(*a.fsdp, path);
    ASSERT_TRUE(fs::exists(path)) << "the file must exist on every rank on return";

    SafetensorsReader r(path);  // one process reads the whole file
    EXPECT_EQ(r.metadata().at("format"), "pt");
    EXPECT_EQ(r.find("lm_head.weight"), nullptr) << "tied to transformer.wte.weight";
    std::map<std::string, at::Tensor> back;
    for (const auto& t : r.tensors()) {
      EXPECT_EQ(t.dtype, D::kF32) << t.name;
      back[t.name] = at::empty(t.shape, at::kFloat);
      r.read(t.name, back[t.name]);
    }
    expect_params_equal(back, expected, "file vs gathered");
    test::world()->barrier();  // everyone has read it before the next save replaces it
  }
}

// Export from the whole world under one layout; import on two subgroups at once (ranks 0..n-2,
// and rank n-1 alone), under other strategies and wrap policies, from a different initialisation.
TEST(FullState, ImportsAtOtherWorldSizesAndStrategies) {
  SharedDir dir;
  const CommPtr world = test::world();
  const int n = world->size();
  const CommPtr part = world->split(n > 1 && world->rank() == n - 1 ? 1 : 0, world->rank());
  const auto layouts = every_strategy();
  for (size_t i = 0; i < layouts.size(); ++i) {
    Layout to = layouts[(i + 2) % layouts.size()];
    to.wrap_blocks = !to.wrap_blocks;
    SCOPED_TRACE(describe(layouts[i]) + " (world " + std::to_string(n) + ") -> " + describe(to) +
                 " (world " + std::to_string(part->size()) + ")");
    Sharded a = make_sharded(world, layouts[i], 3);
    train_and_change(a);
    const auto expected = a.fsdp->gather_full_params();
    const std::string path = dir.file("import.safetensors");
    save_full_safetensors(*a.fsdp, path);

    Sharded b = make_sharded(part, to, 99);
    for (const auto& pad : shard_padding(*b.fsdp)) pad.fill_(7.0f);  // must not survive a load
    load_full_safetensors(*b.fsdp, path);
    for (const auto& pad : shard_padding(*b.fsdp)) EXPECT_EQ(pad.abs().sum().item<float>(), 0.0f);
    expect_params_equal(b.fsdp->gather_full_params(), expected, "after load");
    world->barrier();
  }
}

TEST(FullState, ForwardAfterLoadUsesLoadedValues) {
  SharedDir dir;
  const std::vector<std::pair<Layout, Layout>> pairs = {
      {{ShardingStrategy::kFullShard, true, DType::kFloat32},
       {ShardingStrategy::kNoShard, false, DType::kFloat32}},  // NO_SHARD fp32: buffer is shard
      {{ShardingStrategy::kNoShard, true, DType::kFloat32},
       {ShardingStrategy::kFullShard, true, DType::kFloat32}},
      {{ShardingStrategy::kShardGradOp, true, DType::kBFloat16},
       {ShardingStrategy::kHybridShard, true, DType::kBFloat16}},
      {{ShardingStrategy::kFullShard, false, DType::kBFloat16},
       {ShardingStrategy::kNoShard, true, DType::kBFloat16}}};
  for (const auto& [from, to] : pairs) {
    SCOPED_TRACE(describe(from) + " -> " + describe(to));
    Sharded a = make_sharded(test::world(), from, 4);
    train_and_change(a);
    const at::Tensor want = logits(a);
    const std::string path = dir.file("forward.safetensors");
    save_full_safetensors(*a.fsdp, path);

    Sharded b = make_sharded(test::world(), to, 5);
    train_and_change(b);  // b is mid-training: gradients, resharded units, changed shards
    EXPECT_FALSE(at::allclose(logits(b), want)) << "the test needs models that differ";
    load_full_safetensors(*b.fsdp, path);
    EXPECT_TRUE(at::allclose(logits(b), want, 0, 1e-6)) << "the forward did not use the new shards";
    test::world()->barrier();
  }
}

TEST(FullState, Bf16FileHoldsRoundedParams) {
  SharedDir dir;
  Sharded a = make_sharded(test::world(), every_strategy()[0], 6);
  train_and_change(a);
  const auto expected = a.fsdp->gather_full_params();
  const std::string path = dir.file("bf16.safetensors");
  save_full_safetensors(*a.fsdp, path,
                        FullStateSaveOptions().dtype(DType::kBFloat16).metadata({{"step", "7"}}));
  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}}));
  std::map<std::string, at::Tensor> rounded;
  for (const auto& [name, t] : expected) {
    EXPECT_EQ(r.info(name).dtype, D::kBF16) << name;
    at::Tensor back = at::empty(t.sizes(), at::kBFloat16);
    r.read(name, back);
    EXPECT_TRUE(same_bytes(back, t.to(at::kBFloat16))) << name;
    rounded[name] = t.to(at::kBFloat16).to(at::kFloat);
  }
  Sharded b = make_sharded(test::world(), every_strategy()[3], 7);
  load_full_safetensors(*b.fsdp, path);
  expect_params_equal(b.fsdp->gather_full_params(), rounded, "bf16 file loaded");
  EXPECT_THROW(save_full_safetensors(*a.fsdp, path, FullStateSaveOptions().dtype(DType::kInt64)),
               std::invalid_argument);
}

// Files written by rank 0 with the plain writer, then loaded by every rank: each must fail on
// every rank alike (no rank left in a collective), naming the file and the tensor, and leave the
// model untouched.
TEST(FullState, LoadRefusesFilesThatDoNotFitTheModel) {
  SharedDir dir;
  Sharded a = make_sharded(test::world(), every_strategy()[0], 8);
  const auto params = a.fsdp->gather_full_params();
  Sharded b = make_sharded(test::world(), every_strategy()[2], 9);
  const auto before = b.fsdp->gather_full_params();
  auto write_on_rank0 = [&](const std::string& name, std::map<std::string, at::Tensor> tensors) {
    const std::string path = dir.file(name);
    if (test::world()->rank() == 0) write_file(path, tensors);
    test::world()->barrier();
    return path;
  };
  auto edited = [&](const std::string& key, at::Tensor value) {
    auto m = params;
    if (value.defined()) m[key] = value;
    if (!value.defined()) m.erase(key);
    return m;
  };
  const std::string missing =
      write_on_rank0("missing.safetensors", edited("transformer.ln_f.bias", {}));
  expect_error([&] { load_full_safetensors(*b.fsdp, missing); },
               {missing, "no tensor for", "'transformer.ln_f.bias'"});
  const std::string extra = write_on_rank0(
      "extra.safetensors", edited("transformer.h.0.attn.bias", at::ones({4, 4}, at::kBool)));
  expect_error([&] { load_full_safetensors(*b.fsdp, extra); },
               {extra, "'transformer.h.0.attn.bias'", "strict(false)"});
  const at::Tensor wpe = params.at("transformer.wpe.weight");
  const std::string shape =
      write_on_rank0("shape.safetensors", edited("transformer.wpe.weight", wpe.t().contiguous()));
  expect_error([&] { load_full_safetensors(*b.fsdp, shape); },
               {shape, "tensor 'transformer.wpe.weight'", "shape [25, 16]", "[16, 25]"});
  const std::string dtype = write_on_rank0(
      "dtype.safetensors",
      edited("transformer.ln_f.weight", params.at("transformer.ln_f.weight").to(at::kLong)));
  expect_error([&] { load_full_safetensors(*b.fsdp, dtype); },
               {dtype, "tensor 'transformer.ln_f.weight'", "I64 does not convert"});
  expect_error([&] { load_full_safetensors(*b.fsdp, dir.file("absent.safetensors")); },
               {"absent.safetensors", "cannot open"});
  // One rank cannot open the file: the others must not change their shards either.
  const std::string good = write_on_rank0("good.safetensors", params);
  const bool odd_one = test::world()->rank() == test::world()->size() - 1;
  expect_error(
      [&] { load_full_safetensors(*b.fsdp, odd_one ? dir.file("gone.safetensors") : good); },
      {odd_one ? "cannot open" : "other rank(s) failed checking"});
  expect_params_equal(b.fsdp->gather_full_params(), before, "after refused loads");

  load_full_safetensors(*b.fsdp, extra, FullStateLoadOptions().strict(false));
  expect_params_equal(b.fsdp->gather_full_params(), params, "non-strict load");
}

TEST(FullState, SaveFailureOnRankZeroStopsEveryRank) {
  SharedDir dir;
  Sharded a = make_sharded(test::world(), every_strategy()[0], 10);
  const std::string path = dir.file("no/such/folder/model.safetensors");
  expect_error([&] { save_full_safetensors(*a.fsdp, path); },
               {test::world()->rank() == 0 ? "cannot create" : "rank 0 failed", path});
  EXPECT_FALSE(fs::exists(path));
}

// A module whose two submodules share one weight: the file stores it once, under its first name.
struct HolderImpl : torch::nn::Module {
  explicit HolderImpl(at::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  at::Tensor weight;
};

struct TiedImpl : torch::nn::Module {
  explicit TiedImpl(uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor w = at::randn({11, 5}, gen, at::kFloat);
    wte = register_module("wte", std::make_shared<HolderImpl>(w));
    bias = register_parameter("bias", at::randn({5}, gen, at::kFloat));
    lm_head = register_module("lm_head", std::make_shared<HolderImpl>(w));
  }
  std::shared_ptr<HolderImpl> wte, lm_head;
  at::Tensor bias;
};

TEST(FullState, TiedParametersStoredOnceAndRestoredToBothNames) {
  SharedDir dir;
  auto a = std::make_shared<TiedImpl>(1);
  auto sa = fully_shard(a, test::world());
  const auto expected = sa->gather_full_params();
  ASSERT_TRUE(same_bytes(expected.at("wte.weight"), expected.at("lm_head.weight")));
  const std::string path = dir.file("tied.safetensors");
  save_full_safetensors(*sa, path);
  SafetensorsReader r(path);
  EXPECT_NE(r.find("wte.weight"), nullptr);
  EXPECT_EQ(r.find("lm_head.weight"), nullptr);
  EXPECT_EQ(r.tensors().size(), 2u);

  auto b = std::make_shared<TiedImpl>(2);
  auto sb = fully_shard(b, test::world());
  load_full_safetensors(*sb, path);
  expect_params_equal(sb->gather_full_params(), expected, "tied load");

  // A file that has the weight under its alias only (as some exporters write it) loads too.
  const std::string alias = dir.file("alias.safetensors");
  if (test::world()->rank() == 0) {
    write_file(alias,
               {{"lm_head.weight", expected.at("wte.weight")}, {"bias", expected.at("bias")}});
  }
  test::world()->barrier();
  auto c = std::make_shared<TiedImpl>(3);
  auto sc = fully_shard(c, test::world());
  load_full_safetensors(*sc, alias);
  expect_params_equal(sc->gather_full_params(), expected, "alias-only load");
}

// Writes the files the Python checker reads (CTest runs it in a folder of its own): a sharded
// GPT-2 exported in fp32 and bf16, and one tensor of every dtype LibTorch has.
TEST(PythonCheckSample, WritesSampleFiles) {
  const std::string dir = "samples";
  if (test::world()->rank() == 0) fs::create_directories(dir);
  test::world()->barrier();
  Sharded a = make_sharded(test::world(), every_strategy()[0], 11);
  train_and_change(a);
  save_full_safetensors(*a.fsdp, dir + "/gpt2_fp32.safetensors");
  save_full_safetensors(*a.fsdp, dir + "/gpt2_bf16.safetensors",
                        FullStateSaveOptions().dtype(DType::kBFloat16));
  if (test::world()->rank() != 0) return;
  std::map<std::string, at::Tensor> all;
  uint64_t seed = 1;
  for (auto type : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kInt,
                    at::kShort, at::kChar, at::kByte, at::kBool}) {
    all[std::string("t.") + c10::toString(type)] = sample(type, {3, 5}, seed++);
  }
  all["t.empty"] = at::zeros({0, 4});
  all["t.scalar"] = at::ones({});
  write_file(dir + "/every_dtype.safetensors", all, {{"note", "fsdp.cpp test sample"}});
}

}  // namespace
}  // namespace fsdp
