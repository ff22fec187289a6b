// Instruction fine-tuning against transformers (tests/data/hf/sft, made by scripts/hf_fixtures.sh
// --only sft): each example's token ids and targets, the rows first-fit packing makes, and the
// loss over them, packed (positions restarting, attention inside each example) and one example a
// row, equal to transformers' with labels -100 off the targets. Then the data layer's refusals of
// hostile JSONL files, each naming the file and the line.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "factory/model_factory.h"
#include "fsdp/checkpoint/full_state.h"
#include "fsdp/comm.h"
#include "fsdp/config/config.h"
#include "fsdp/data/examples.h"
#include "fsdp/data/packing.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/fully_shard.h"
#include "fsdp/models/gpt2.h"
#include "fsdp/models/llama.h"
#include "hf/folder.h"
#include "train/run_data.h"

namespace fsdp {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSft = fs::path(FSDP_HF_FIXTURES) / "sft";

json reference() {
  std::ifstream in(kSft / "reference.json");
  return json::parse(in);
}

// A fresh cache per test, so that every test tokenizes.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/fsdp_sft.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

data::ExampleOptions options_for(const fs::path& cache, data::DataFormat format) {
  data::ExampleOptions o;
  o.format = format;
  o.tokenizer_dir = (kSft / "model").string();
  o.cache_dir = cache.string();
  o.val_fraction = 0;
  return o;
}

std::vector<int32_t> concatenated(const json& examples, const char* field) {
  std::vector<int32_t> out;
  for (const auto& e : examples) {
    for (const auto& v : e[field]) out.push_back(v.get<int32_t>());
  }
  return out;
}

// Every case of the fixture: its file, format and reference.
struct Case {
  std::string name;
  data::DataFormat format;
};
std::vector<Case> cases() {
  std::vector<Case> out;
  const json ref = reference();  // alive while its items are walked
  for (const auto& [name, unused] : ref["cases"].items()) {
    out.push_back({name, name.rfind("messages", 0) == 0 ? data::DataFormat::kMessages
                                                        : data::DataFormat::kPromptCompletion});
  }
  return out;
}

TEST(Sft, TokensAndTargetsAreTransformers) {
  const json ref = reference();
  ASSERT_EQ(cases().size(), 3u)
      << "the fixture holds a prompt/completion case and two messages cases (one with tools)";
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    TempDir cache;
    const std::string file = (kSft / (k.name + ".jsonl")).string();
    EXPECT_EQ(data::detect_format(file, data::DataFormat::kAuto), k.format);
    const data::ExampleCorpus c = data::prepare_examples(file, options_for(cache.path, k.format));
    const json& examples = ref["cases"][k.name]["examples"];
    EXPECT_EQ(c.train.examples, static_cast<int64_t>(examples.size()));
    EXPECT_EQ(data::TokenFile::open(c.train.tokens_path).tokens(), concatenated(examples, "ids"));
    EXPECT_EQ(data::TokenFile::open(c.train.flags_path).tokens(), concatenated(examples, "flags"));
    EXPECT_EQ(c.val.examples, 0);
  }
}

TEST(Sft, RowsAreFirstFit) {
  const json ref = reference();
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    TempDir cache;
    const data::ExampleCorpus c = data::prepare_examples((kSft / (k.name + ".jsonl")).string(),
                                                         options_for(cache.path, k.format));
    data::PackingOptions p;
    p.seq_len = ref["cases"][k.name]["seq_len"].get<int64_t>();
    const data::PackedExamples rows(c.train, p);
    const json& want = ref["cases"][k.name]["rows"];
    ASSERT_EQ(rows.rows(), static_cast<int64_t>(want.size()));
    const json& examples = ref["cases"][k.name]["examples"];
    std::vector<int64_t> tokens(p.seq_len), targets(p.seq_len), positions(p.seq_len);
    for (int64_t r = 0; r < rows.rows(); ++r) {
      rows.fill(r, tokens.data(), targets.data(), positions.data());
      int64_t at = 0;
      for (const auto& e : want[r]) {
        const json& ex = examples[e.get<size_t>()];
        for (size_t j = 0; j < ex["ids"].size(); ++j, ++at) {
          ASSERT_EQ(tokens[at], ex["ids"][j].get<int64_t>()) << "row " << r;
          ASSERT_EQ(positions[at], static_cast<int64_t>(j));
          const bool next_trained = j + 1 < ex["flags"].size() && ex["flags"][j + 1] == 1;
          ASSERT_EQ(targets[at], next_trained ? ex["ids"][j + 1].get<int64_t>() : -100);
        }
      }
      for (; at < p.seq_len; ++at) ASSERT_EQ(targets[at], -100);
    }
    EXPECT_EQ(rows.targets(), ref["cases"][k.name]["targets"].get<int64_t>());
  }
}

// The folder's model, loaded whole into one process.
CausalLM load_model(const TrainConfig& c) {
  CausalLM lm = build_model(c);
  auto sharded = fully_shard(
      lm.module, make_local_comm(),
      c.sharding_options().param_init([](const std::string&, at::Tensor& t) { t.zero_(); }));
  FullStateLoadOptions options;
  options.name_map(hf::weight_name_map(c.model.type));
  load_full_safetensors(*sharded, c.model.pretrained, options);
  return lm;
}

// The mean over every target of every row, as transformers' loss over the same rows takes it.
// Tolerance: 1e-5 relative, the issue's bound; both sides are fp32 over 64-channel layers, where
// summation order alone moves the fifth digit by about 1e-7.
TEST(Sft, LossIsTransformersPackedAndPadded) {
  const json ref = reference();
  const TrainConfig c = load_config("",
                                    {{"model.pretrained", (kSft / "model").string()},
                                     {"model.attention", "explicit"},
                                     {"data.seq_len", "640"}},  // the context the cases' rows need
                                    {}, hf::read_folder_settings);
  const CausalLM lm = load_model(c);
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    TempDir cache;
    const data::ExampleCorpus x = data::prepare_examples((kSft / (k.name + ".jsonl")).string(),
                                                         options_for(cache.path, k.format));
    const bool alone =
        static_cast<int64_t>(ref["cases"][k.name]["rows"].size()) == x.train.examples;
    for (const bool pack : {true, false}) {
      if (!pack && alone) continue;  // every example has a row of its own: the rows are the same
      data::PackingOptions p;
      p.seq_len = ref["cases"][k.name]["seq_len"].get<int64_t>();
      p.pack = pack;
      const data::PackedExamples rows(x.train, p);
      std::vector<int64_t> all(static_cast<size_t>(rows.rows()));
      for (int64_t r = 0; r < rows.rows(); ++r) all[r] = r;
      const data::Batch b = rows.batch(all);
      at::NoGradGuard no_grad;
      const double sum =
          token_loss_sum(forward_batch(lm, b, c10::Device(c10::kCPU)), b.targets).item<double>();
      const double count = b.targets.ne(-100).sum().item<double>();
      const double want = ref["cases"][k.name][pack ? "loss_packed" : "loss_padded"];
      EXPECT_NEAR(sum / count, want, 1e-5 * want) << (pack ? "packed" : "padded");
    }
  }
}

// A packed row gives each of its sequences the logits it has alone in a row, on GPT-2 and on
// Llama (with a Gemma-style sliding window shorter than one of the sequences), on the explicit
// kernel and, where this LibTorch has it, the fused one with the block-diagonal mask. Tolerance:
// 1e-5, fp32 through two layers of 32 channels (the rows differ only in summation order where the
// fused kernel tiles them differently).
TEST(Sft, PackedRowsGiveEachSequenceItsOwnLogits) {
  torch::manual_seed(0);
  const std::vector<int64_t> lengths = {5, 9, 3};  // one row of 17 tokens
  const int64_t T = 17;
  const at::Tensor ids = torch::randint(0, 64, {1, T}, torch::kLong);
  std::vector<int64_t> pos;
  for (int64_t n : lengths) {
    for (int64_t j = 0; j < n; ++j) pos.push_back(j);
  }
  const at::Tensor positions = torch::tensor(pos, torch::kLong).view({1, T});
  std::vector<AttentionKernel> kernels = {AttentionKernel::kExplicit};
  if (attention_kernel_available(AttentionKernel::kFused))
    kernels.push_back(AttentionKernel::kFused);
  auto check = [&](const std::function<at::Tensor(const at::Tensor&, const SequenceLayout&)>& f,
                   const std::string& what) {
    at::NoGradGuard no_grad;
    const at::Tensor packed = f(ids, packed_layout(positions, c10::Device(c10::kCPU)));
    int64_t at = 0;
    for (int64_t n : lengths) {
      const at::Tensor alone = f(ids.narrow(1, at, n), {});
      EXPECT_TRUE(torch::allclose(packed.narrow(1, at, n), alone, 1e-5, 1e-5))
          << what << ": the sequence at " << at << " differs by "
          << (packed.narrow(1, at, n) - alone).abs().max().item<double>();
      at += n;
    }
  };
  for (AttentionKernel kernel : kernels) {
    const std::string name = kernel == AttentionKernel::kFused ? "fused" : "explicit";
    GPT2Config g;
    g.vocab_size = 64;
    g.n_positions = 32;
    g.n_embd = 32;
    g.n_layer = 2;
    g.n_head = 4;
    g.attention = kernel;
    GPT2 gpt2(g);
    check([&](const at::Tensor& x, const SequenceLayout& l) { return gpt2->forward(x, l); },
          "GPT-2, " + name);
    LlamaConfig c = LlamaConfig::tiny();
    c.vocab_size = 64;
    c.max_position_embeddings = 32;
    c.attention = kernel;
    c.sliding_layers = {0};
    c.sliding_window = 4;
    Llama llama(c);
    check([&](const at::Tensor& x, const SequenceLayout& l) { return llama->forward(x, l); },
          "Llama with a window of 4, " + name);
  }
}

// ---- content as a list of parts ----------------------------------------------------------------

// The fixture's tokenizer with a published template of assets/chat_templates (by its model).
fs::path tokenizer_with_template(const fs::path& dir, const std::string& model) {
  std::ifstream in(fs::path(FSDP_CHAT_TEMPLATES_DIR) / "templates.json");
  for (const auto& e : json::parse(in)) {
    if (e["model"] != model) continue;
    fs::create_directories(dir);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(kSft / "model" / f, dir / f);
    std::ofstream(dir / "chat_template.jinja", std::ios::binary)
        << e["chat_template"].get<std::string>();
    return dir;
  }
  ADD_FAILURE() << "no template of " << model << " in the assets";
  return dir;
}

// The fixture's conversations with each content (or the system messages' only) as one text part:
// [{"type": "text", "text": c}].
std::string as_parts(const fs::path& jsonl, bool system_only = false) {
  std::ifstream in(jsonl);
  std::string line, out;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    for (auto& m : j["messages"]) {
      if (system_only && m["role"] != "system") continue;
      m["content"] = json::array({{{"type", "text"}, {"text", m["content"]}}});
    }
    out += j.dump() + "\n";
  }
  return out;
}

data::ExampleCorpus prepare_with(const fs::path& dir, const fs::path& tokenizer,
                                 const std::string& name, const std::string& text) {
  const fs::path file = dir / name;
  std::ofstream(file, std::ios::binary) << text;
  data::ExampleOptions o = options_for(dir / ("cache-" + name), data::DataFormat::kMessages);
  o.tokenizer_dir = tokenizer.string();
  return data::prepare_examples(file.string(), o);
}

// What prepare_with refuses `text` with, or "no error".
std::string prepare_error(const fs::path& dir, const fs::path& tokenizer, const std::string& text) {
  try {
    prepare_with(dir, tokenizer, "bad.jsonl", text);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// Through Gemma 3's published template, which takes content as a string or as parts (a system
// message only as parts: it reads content[0].text), the same words give the same tokens and the
// same targets either way. Through Llama 3.1's, written for strings (it prints the list in
// Python's form, as transformers would train on), the line is refused; so are parts other than
// text, and content of another type.
TEST(Sft, ContentAsTextPartsTrainsOnItsWords) {
  if (!fs::exists(fs::path(FSDP_CHAT_TEMPLATES_DIR) / "templates.json"))
    GTEST_SKIP() << "run scripts/fetch_assets.sh for " << FSDP_CHAT_TEMPLATES_DIR;
  TempDir dir;
  const fs::path gemma = tokenizer_with_template(dir.path / "gemma3", "library/gemma3:1b");
  const data::ExampleCorpus a =
      prepare_with(dir.path, gemma, "strings.jsonl", as_parts(kSft / "messages.jsonl", true));
  const data::ExampleCorpus b =
      prepare_with(dir.path, gemma, "parts.jsonl", as_parts(kSft / "messages.jsonl"));
  EXPECT_EQ(b.train.examples, a.train.examples);
  EXPECT_GT(a.train.targets, 0);
  EXPECT_EQ(data::TokenFile::open(b.train.tokens_path).tokens(),
            data::TokenFile::open(a.train.tokens_path).tokens());
  EXPECT_EQ(data::TokenFile::open(b.train.flags_path).tokens(),
            data::TokenFile::open(a.train.flags_path).tokens());

  const fs::path llama = tokenizer_with_template(dir.path / "llama3.1", "library/llama3.1:8b");
  const auto error = [&](const fs::path& tokenizer, const std::string& text) {
    return prepare_error(dir.path, tokenizer, text);
  };
  const std::string llama_error = error(llama, as_parts(kSft / "messages.jsonl"));
  EXPECT_NE(llama_error.find("bad.jsonl' line 1: "), std::string::npos) << llama_error;
  EXPECT_NE(llama_error.find("message 0 has its content as a list of parts, and the template "
                             "prints that list as a string"),
            std::string::npos)
      << llama_error;
  // Qwen2.5's adds the list to a string: the engine's error, and why.
  const fs::path qwen = tokenizer_with_template(dir.path / "qwen2.5", "library/qwen2.5:0.5b");
  const std::string qwen_error = error(qwen, as_parts(kSft / "messages.jsonl"));
  EXPECT_NE(qwen_error.find("bad.jsonl' line 1: "), std::string::npos) << qwen_error;
  EXPECT_NE(qwen_error.find("(a message's content is a list of parts; this template may take "
                            "string content only)"),
            std::string::npos)
      << qwen_error;
  const std::string user = R"({"messages": [{"role": "user", "content": )";
  const std::string answer = R"(}, {"role": "assistant", "content": "a"}]})"
                             "\n";
  EXPECT_NE(error(gemma, user + R"([{"type": "text", "text": "x"}, {"type": "image"}])" + answer)
                .find("line 1: messages[0]: content[1]: a part of type 'image'; only text parts"),
            std::string::npos);
  EXPECT_NE(error(gemma, user + R"(["x"])" + answer)
                .find("line 1: messages[0]: content[0] is a JSON string, not a {\"type\""),
            std::string::npos);
  EXPECT_NE(error(gemma, user + R"([{"type": "text"}])" + answer)
                .find("line 1: messages[0]: content[0]: no \"text\" field"),
            std::string::npos);
  EXPECT_NE(error(gemma, user + "[]" + answer).find("line 1: messages[0]: \"content\" is an empty"),
            std::string::npos);
  EXPECT_NE(error(gemma, user + "7" + answer)
                .find("line 1: messages[0]: \"content\" is a JSON number, neither a string nor"),
            std::string::npos);
}

// A tool-calling conversation (an answer that calls a tool with no content, the tool's result, the
// answer after it) with the tools it offers, through Qwen2.5's published template: the targets are
// the call as the template writes it and the last answer, each with its end of turn, and never
// the tool's result. What the messages and the line give is refused by name where it is wrong.
TEST(Sft, ToolCallsAreTrainedOnAndTheirResultsAreNot) {
  if (!fs::exists(fs::path(FSDP_CHAT_TEMPLATES_DIR) / "templates.json"))
    GTEST_SKIP() << "run scripts/fetch_assets.sh for " << FSDP_CHAT_TEMPLATES_DIR;
  TempDir dir;
  const fs::path qwen = tokenizer_with_template(dir.path / "qwen2.5", "library/qwen2.5:0.5b");
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": )"
      R"({"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  const std::string call =
      R"({"role": "assistant", "content": null, "tool_calls": [{"type": "function", )"
      R"("function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})";
  const std::string line =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"}, )" + call +
      R"(, {"role": "tool", "name": "get_weather", "content": "sunny and 21"}, )"
      R"({"role": "assistant", "content": "It is sunny."}], )" +
      tools + "}\n";
  const data::ExampleCorpus c = prepare_with(dir.path, qwen, "tools.jsonl", line);
  const std::vector<int32_t> ids = data::TokenFile::open(c.train.tokens_path).tokens();
  const std::vector<int32_t> flags = data::TokenFile::open(c.train.flags_path).tokens();
  const auto tok = data::load_tokenizer(qwen.string());
  std::vector<std::string> targets;  // each run of target tokens, decoded
  for (size_t i = 0; i < ids.size(); ++i) {
    if (flags[i] != data::kTokenTarget) continue;
    if (i == 0 || flags[i - 1] != data::kTokenTarget) targets.emplace_back();
    targets.back() += tok->decode({ids[i]});
  }
  EXPECT_EQ(targets, (std::vector<std::string>{
                         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                         "\"Paris\"}}\n</tool_call><|im_end|>\n",
                         "It is sunny.<|im_end|>\n"}));
  const std::string whole = tok->decode(ids);
  EXPECT_NE(whole.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
                       "\"get_weather\""),
            std::string::npos)
      << whole;  // the tools, their keys in the file's order
  EXPECT_NE(whole.find("<tool_response>\nsunny and 21\n</tool_response>"), std::string::npos);

  const auto error = [&](const std::string& text) { return prepare_error(dir.path, qwen, text); };
  const std::string user = R"({"messages": [{"role": "user", "content": "x"}, )";
  EXPECT_NE(error(user + R"({"role": "assistant", "content": null}]})"
                         "\n")
                .find("line 1: messages[1]: \"content\" is a JSON null, neither a string nor a "
                      "list of {\"type\": \"text\", \"text\": ...} parts (null only where an "
                      "answer calls tools)"),
            std::string::npos);
  EXPECT_NE(error(user + R"({"role": "assistant", "content": "", "tool_calls": {}}]})"
                         "\n")
                .find("line 1: messages[1]: \"tool_calls\" is a JSON object, not a list"),
            std::string::npos);
  EXPECT_NE(error(user + R"({"role": "assistant", "content": "a"}], "tools": "get_weather"})"
                         "\n")
                .find("line 1: \"tools\" is a JSON string, not a list of tools"),
            std::string::npos);
  EXPECT_NE(error(user + R"({"role": "function", "content": "a"}]})"
                         "\n")
                .find("role 'function' is not one of system, user, assistant, tool"),
            std::string::npos);
}

// ---- hostile files ---------------------------------------------------------------------------

std::string error_of(const std::string& text, data::DataFormat format = data::DataFormat::kAuto) {
  TempDir dir;
  const fs::path file = dir.path / "bad.jsonl";
  std::ofstream(file, std::ios::binary) << text;
  try {
    const data::DataFormat f = data::detect_format(file.string(), format);
    if (f == data::DataFormat::kText) return "read as text";
    data::prepare_examples(file.string(), options_for(dir.path / "cache", f));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(SftErrors, BadLinesAreNamedByLine) {
  const std::string pc = R"({"prompt": "a", "completion": "b"})";
  EXPECT_NE(error_of(pc + "\n\n{\"prompt\": 1, \"completion\": \"b\"}\n")
                .find("line 3: \"prompt\" is a JSON number, not a string"),
            std::string::npos);
  EXPECT_NE(error_of(pc + "\n{\"prompt\": \"a\"}\n").find("line 2: no \"completion\" field"),
            std::string::npos);
  EXPECT_NE(error_of(pc + "\nnot json\n").find("line 2: not JSON"), std::string::npos);
  EXPECT_NE(error_of(pc + "\n[1, 2]\n").find("line 2: a JSON array, not an object"),
            std::string::npos);
  EXPECT_NE(error_of(pc + "\n" + std::string(200, '[') + "\n").find("line 2"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"messages": [{"role": "bot", "content": "x"}]})"
               "\n")
          .find("line 1: messages[0]: role 'bot' is not one of system, user, assistant, tool"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"messages": "hi"})"
                     "\n")
                .find("line 1: \"messages\" is a JSON string"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": []})"
                     "\n")
                .find("line 1: \"messages\" is empty"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"input": "x", "output": "y"})"
                     "\n")
                .find("line 1: a JSON object with none of the fields"),
            std::string::npos);
  EXPECT_NE(error_of("\n \n", data::DataFormat::kPromptCompletion).find("no examples"),
            std::string::npos);
  // Text that happens to start with a brace stays text.
  EXPECT_EQ(error_of("{not json} just prose\n"), "read as text");
}

TEST(SftErrors, ALineLongerThanTheBoundIsRefusedBeforeItIsRead) {
  TempDir dir;
  const fs::path file = dir.path / "long.jsonl";
  {
    std::ofstream out(file, std::ios::binary);
    out << R"({"text": "a"})"
        << "\n{\"text\": \"";
    const std::string block(1 << 20, 'x');
    for (int64_t i = 0; i <= data::kMaxExampleLineBytes >> 20; ++i) out << block;
  }
  try {
    data::prepare_examples(file.string(),
                           options_for(dir.path / "cache", data::DataFormat::kJsonlText));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: longer than 16 MiB"), std::string::npos)
        << e.what();
  }
}

TEST(SftErrors, AnExampleLongerThanTheRowIsRefusedOrTruncated) {
  TempDir dir;
  const data::ExampleCorpus c =
      data::prepare_examples((kSft / "prompt_completion.jsonl").string(),
                             options_for(dir.path, data::DataFormat::kPromptCompletion));
  data::PackingOptions p;
  p.seq_len = 8;
  try {
    data::PackedExamples rows(c.train, p);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_completion.jsonl' line 1 has "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("more than data.seq_len 8 (set data.truncate true"),
              std::string::npos)
        << e.what();
  }
  p.truncate = true;
  const data::PackedExamples rows(c.train, p);
  EXPECT_EQ(rows.rows(), rows.examples());  // each truncated to a full row
  EXPECT_EQ(rows.truncated(), rows.examples());
  EXPECT_EQ(rows.padding_fraction(), 0.0);
}

TEST(SftErrors, DamagedFlagsAreNamed) {
  TempDir dir;
  const data::ExampleCorpus c =
      data::prepare_examples((kSft / "prompt_completion.jsonl").string(),
                             options_for(dir.path, data::DataFormat::kPromptCompletion));
  std::vector<int32_t> flags = data::TokenFile::open(c.train.flags_path).tokens();
  flags[5] = 7;
  data::write_token_file(c.train.flags_path, flags);
  try {
    data::PackedExamples rows(c.train, data::PackingOptions{});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("flag 7 at token 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdp
