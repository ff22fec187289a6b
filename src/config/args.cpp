// fsdp-train's command line: a subcommand, a few flags of its own (one table, which also writes the
// flags' part of --help), and `--KEY VALUE` config overrides, which go to the option table. The
// text of --help is generated from both tables, so it cannot name a flag or key the parser does
// not read.
#include <cstdint>
#include <sstream>

#include "config/schema.h"
#include "fsdp/config/config.h"
#include "util/number_flag.h"

namespace fsdp {
namespace {

// What parsing collects before the config is loaded.
struct ArgsState {
  ParsedArgs out;
  std::vector<ConfigOverride> overrides;
  bool has_config = false;
};

enum Commands { kForTrain = 1, kForSample = 2, kForEval = 4, kForModel = 6, kForAll = 7 };

struct Flag {
  const char* name;
  const char* metavar;  // nullptr: a switch
  bool optional_value;  // --resume and --resume=DIR
  int commands;
  const char* help;
  // Default as --help shows it; nullptr: none.
  std::string (*default_text)();
  // `value` is nullptr for a switch given without one.
  void (*set)(ArgsState& s, const std::string& flag, const std::string* value);
};

// The sample flags' numbers go through the parser every tool shares (util/number_flag.h).
int64_t sample_int(const std::string& flag, const std::string& value, int64_t lo, int64_t hi) {
  try {
    return flags::parse_int(flag, value, lo, hi);
  } catch (const flags::NumberError& e) {
    throw ConfigError("", 0, flag, e.detail());
  }
}

double sample_number(const std::string& flag, const std::string& value, double hi) {
  try {
    return flags::parse_number(flag, value, 0, hi);
  } catch (const flags::NumberError& e) {
    throw ConfigError("", 0, flag, e.detail());
  }
}

bool sample_bool(const std::string& flag, const std::string& value) {
  try {
    return config::to_bool(config::RawValue::scalar(value));
  } catch (const config::ValueError& e) {
    throw ConfigError("", 0, flag, e.what());
  }
}

constexpr int64_t kMaxCount = int64_t{1} << 20;  // tokens or samples one run generates

const SampleOptions kSampleDefaults;

const Flag kFlags[] = {
    {"--config", "FILE", false, kForAll,
     "YAML config: ours, or an Accelerate config file (defaults < FILE < --KEY VALUE)", nullptr,
     [](ArgsState& s, const std::string& flag, const std::string* v) {
       if (s.has_config) throw ConfigError("", 0, flag, "given twice");
       if (v->empty()) {
         throw ConfigError("", 0, flag,
                           "is empty: name a YAML file (leave --config out for the defaults)");
       }
       s.has_config = true;
       s.out.config_file = *v;
     }},
    {"--print-config", nullptr, false, kForAll, "print the merged config as YAML and exit", nullptr,
     [](ArgsState& s, const std::string&, const std::string*) { s.out.print_config = true; }},
    {"--resume", "DIR", true, kForTrain,
     "resume from the newest checkpoint in train.checkpoint_dir (if any), or from DIR: "
     "--train.resume auto / DIR",
     nullptr,
     [](ArgsState& s, const std::string&, const std::string* v) {
       s.overrides.push_back({"train.resume", v ? *v : "auto"});
     }},
    {"--help", nullptr, false, kForAll, "print this text and exit (also -h)", nullptr,
     [](ArgsState& s, const std::string&, const std::string*) { s.out.help = true; }},
    {"--checkpoint", "DIR", false, kForModel, "checkpoint step folder, or a root with `latest`",
     [] { return std::string("model.pretrained if set, else train.checkpoint_dir"); },
     [](ArgsState& s, const std::string&, const std::string* v) {
       s.out.sample.checkpoint = s.out.eval.checkpoint = *v;
     }},
    {"--prompt", "TEXT", false, kForSample,
     "text to continue (repeatable: each continued on its own); none: a document's start",
     [] { return std::string("\"\""); },
     [](ArgsState& s, const std::string&, const std::string* v) {
       s.out.sample.prompts.push_back(*v);
     }},
    {"--chat", "TEXT", false, kForSample,
     "a user message answered through the model folder's chat template (repeatable: each its "
     "own conversation); generation stops at the template's end of turn",
     [] { return std::string("none"); },
     [](ArgsState& s, const std::string&, const std::string* v) {
       s.out.sample.chats.push_back(*v);
     }},
    {"--chat-file", "FILE", false, kForSample,
     "a JSONL file of {\"messages\": [...]} conversations, each answered through the chat "
     "template",
     [] { return std::string("none"); },
     [](ArgsState& s, const std::string&, const std::string* v) { s.out.sample.chat_file = *v; }},
    {"--max-new-tokens", "N", false, kForSample,
     "tokens generated per sample at most (generation stops at an EOS id)",
     [] { return std::string("the folder's generation_config.json, else 100"); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       s.out.sample.max_new_tokens = sample_int(f, *v, 1, kMaxCount);
     }},
    {"--do-sample", "BOOL", false, kForSample, "true: sample; false: greedy (argmax)",
     [] { return std::string("generation_config.json's do_sample; without one, true"); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       s.out.sample.do_sample = sample_bool(f, *v);
     }},
    {"--temperature", "T", false, kForSample,
     "logits are divided by T before sampling; alone, 0 means greedy and above 0 sampling",
     [] { return std::string("generation_config.json's, else 0.8"); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       s.out.sample.temperature = sample_number(f, *v, 1e6);
     }},
    {"--top-k", "K", false, kForSample, "sample among the K most likely tokens; 0: all",
     [] { return std::string("generation_config.json's, else 200"); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       s.out.sample.top_k = sample_int(f, *v, 0, INT32_MAX);
     }},
    {"--top-p", "P", false, kForSample,
     "sample among the likeliest tokens whose probabilities sum to P (nucleus); 1: all",
     [] { return std::string("generation_config.json's, else 1"); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       const double p = sample_number(f, *v, 1.0);
       if (p <= 0) throw ConfigError("", 0, f, "must be above 0 and at most 1, got " + *v);
       s.out.sample.top_p = p;
     }},
    {"--num-samples", "N", false, kForSample, "independent samples",
     [] { return std::to_string(kSampleDefaults.num_samples); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       s.out.sample.num_samples = sample_int(f, *v, 1, kMaxCount);
     }},
    {"--seed", "S", false, kForSample, "sampling seed",
     [] { return std::to_string(kSampleDefaults.seed); },
     [](ArgsState& s, const std::string& f, const std::string* v) {
       s.out.sample.seed = sample_int(f, *v, 0, INT64_MAX);
     }},
};

int command_bit(TrainCommand c) {
  return c == TrainCommand::kTrain ? kForTrain : c == TrainCommand::kSample ? kForSample : kForEval;
}
const char* command_name(TrainCommand c) {
  return c == TrainCommand::kTrain ? "train" : c == TrainCommand::kSample ? "sample" : "eval";
}

// "--max_new_tokens" -> "--max-new-tokens"; "-h" -> "--help". Config keys keep underscores.
std::string flag_name(std::string name) {
  if (name == "-h") return "--help";
  for (size_t i = 2; i < name.size(); ++i) {
    if (name[i] == '_') name[i] = '-';
  }
  return name;
}

const Flag* find_flag(const std::string& name) {
  for (const Flag& f : kFlags) {
    if (flag_name(name) == f.name) return &f;
  }
  return nullptr;
}

[[noreturn]] void unknown_option(const std::string& spelled, TrainCommand command) {
  std::string best;
  size_t best_distance = 3;
  for (const Flag& f : kFlags) {
    const size_t d = config::edit_distance(flag_name(spelled), f.name);
    if ((f.commands & command_bit(command)) && d < best_distance) {
      best = f.name;
      best_distance = d;
    }
  }
  if (best.empty() && spelled.size() > 2) {
    const std::string key = config::closest_key(spelled.substr(2));
    if (!key.empty()) best = "--" + key;
  }
  throw ConfigError("", 0, spelled,
                    "unknown option" + (best.empty() ? "" : "; did you mean " + best + "?"));
}

// The config key `--optim.max_steps` (or `--optim.max-steps`) names, or nullptr.
const config::Option* find_key(const std::string& spelled) {
  if (spelled.size() < 3 || spelled.compare(0, 2, "--") != 0) return nullptr;
  std::string key = spelled.substr(2);
  if (const config::Option* option = config::find_option(key)) return option;
  for (char& c : key) {
    if (c == '-') c = '_';
  }
  return config::find_option(key);
}

// One argument split at '=': "--optim.lr=3e-4" is {"--optim.lr", "3e-4", inline}.
struct Arg {
  std::string spelled;
  std::string value;
  bool has_value = false;
};

// A config key's value: inline, else the next argument unless that is an option, else "true" for
// a bool key. Negative numbers ("-1") are values, not options.
void take_key(ArgsState& s, const config::Option& option, Arg a,
              const std::vector<std::string>& args, size_t& i) {
  if (!a.has_value) {
    if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      a.value = args[++i];
    } else if (option.type == "bool") {
      a.value = "true";
    } else {
      throw ConfigError("", 0, a.spelled, "needs a value (" + option.type + ")");
    }
  }
  s.overrides.push_back({option.key, a.value});
}

void take_flag(ArgsState& s, const Flag& flag, Arg a, const std::vector<std::string>& args,
               size_t& i) {
  if (!(flag.commands & command_bit(s.out.command))) {
    throw ConfigError(
        "", 0, a.spelled,
        std::string("is not a flag of `fsdp-train ") + command_name(s.out.command) + "`");
  }
  if (!flag.metavar && a.has_value) throw ConfigError("", 0, a.spelled, "takes no value");
  if (flag.metavar && !flag.optional_value && !a.has_value) {
    // Taken whatever it looks like: a prompt may well start with dashes.
    if (i + 1 >= args.size()) {
      throw ConfigError("", 0, a.spelled, std::string("needs a value (") + flag.metavar + ")");
    }
    a.value = args[++i];
    a.has_value = true;
  }
  flag.set(s, a.spelled, a.has_value ? &a.value : nullptr);
}

// The option at args[i], a config key or a flag; advances i past its value.
void parse_one(ArgsState& s, const std::vector<std::string>& args, size_t& i) {
  const std::string& arg = args[i];
  if (arg.size() < 2 || arg[0] != '-') {
    throw ConfigError("", 0, arg, "unexpected argument (options are --KEY VALUE)");
  }
  Arg a;
  const size_t eq = arg.find('=');
  a.spelled = arg.substr(0, eq);
  if (eq != std::string::npos) {
    a.value = arg.substr(eq + 1);
    a.has_value = true;
  }
  if (const config::Option* option = find_key(a.spelled)) return take_key(s, *option, a, args, i);
  const Flag* flag = find_flag(a.spelled);
  if (!flag) unknown_option(a.spelled, s.out.command);
  take_flag(s, *flag, a, args, i);
}

bool asks_for_help(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

// `text` wrapped at 100 columns, every line indented by `indent` spaces.
std::string wrap(const std::string& text, size_t indent) {
  constexpr size_t kWidth = 100;
  std::istringstream words(text);
  std::string out(indent, ' '), word;
  size_t column = indent;
  while (words >> word) {
    if (column > indent && column + 1 + word.size() > kWidth) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out + "\n";
}

void write_flags(std::ostream& out, TrainCommand command) {
  out << "flags:\n";
  for (const Flag& f : kFlags) {
    if (!(f.commands & command_bit(command))) continue;
    std::string head = std::string("  ") + f.name;
    if (f.metavar)
      head += f.optional_value ? std::string("[=") + f.metavar + "]" : std::string(" ") + f.metavar;
    if (f.default_text) head += "  (default: " + f.default_text() + ")";
    out << head << "\n" << wrap(f.help, 6);
  }
}

void write_keys(std::ostream& out, ConfigKey::Kind kind, const std::string& title) {
  out << "\n" << title << "\n";
  for (const ConfigKey& k : config_keys()) {
    if (k.kind != kind) continue;
    std::string head = "  --" + k.key + " " + k.type;
    if (kind == ConfigKey::Kind::kSetting) head += "  (default: " + k.default_value + ")";
    std::string help = k.help;
    if (!k.model_type.empty()) help += " [" + k.model_type + " only]";
    out << head << "\n" << wrap(help, 6);
  }
}

}  // namespace

ParsedArgs parse_train_args(const std::vector<std::string>& args, MachineChecks machine,
                            const FolderReader& read_folder) {
  ArgsState s;
  size_t i = 0;
  for (TrainCommand c : {TrainCommand::kTrain, TrainCommand::kSample, TrainCommand::kEval}) {
    if (!args.empty() && args[0] == command_name(c)) {
      s.out.command = c;
      i = 1;
    }
  }
  if (asks_for_help(args)) {
    s.out.help = true;  // nothing else is read: the rest may be what the user needs help with
    return s.out;
  }
  for (; i < args.size(); ++i) parse_one(s, args, i);
  s.out.config = load_config(s.out.config_file, s.overrides, machine, read_folder);
  s.out.sample.overrides = s.out.eval.overrides = s.overrides;
  // Without --checkpoint a model folder is the model (sample and eval take it), else the run's
  // checkpoints.
  if (s.out.sample.checkpoint.empty() && s.out.config.model.pretrained.empty()) {
    s.out.sample.checkpoint = s.out.eval.checkpoint = s.out.config.train.checkpoint_dir;
  }
  return s.out;
}

ParsedArgs parse_train_args(int argc, const char* const* argv, MachineChecks machine,
                            const FolderReader& read_folder) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_train_args(args, machine, read_folder);
}

std::string train_usage(TrainCommand command) {
  std::ostringstream out;
  if (command == TrainCommand::kTrain) {
    out << "usage: fsdp-train [train] [--config FILE] [--print-config] [--resume[=DIR]] "
           "[--KEY VALUE]...\n"
           "       fsdp-train sample [--checkpoint DIR] [--prompt TEXT] ... (sample --help)\n"
           "       fsdp-train eval [--checkpoint DIR] [--KEY VALUE]... (eval --help)\n\n"
        << wrap(
               "Trains a GPT-2 or Llama model with fully sharded data parallelism on the ranks "
               "fsdp-run starts. Settings come from the defaults, then --config FILE, then "
               "--KEY VALUE overrides, later ones winning. KEY is the dotted path of the YAML "
               "nesting (optim.lr is lr: under optim:); --KEY=VALUE works too, list values are "
               "comma-separated, and a bool key alone means true. See docs/config.md.",
               0)
        << "\n";
  } else if (command == TrainCommand::kEval) {
    out << "usage: fsdp-train eval [--checkpoint DIR] [--config FILE] [--KEY VALUE]...\n\n"
        << wrap(
               "Prints the loss and perplexity of a model on held-out data: the last "
               "data.val_split of data.dataset, or data.val_dataset, read with the model's "
               "tokenizer; at most train.eval_batches batches of train.micro_batch_size "
               "sequences of data.seq_len tokens per rank. The model is a checkpoint "
               "(--checkpoint), or a Hugging Face folder (--model.pretrained DIR). Any number of "
               "ranks; no optimizer state is built.",
               0)
        << "\n";
  } else {
    out << "usage: fsdp-train sample [--checkpoint DIR] [--prompt TEXT]... [--chat TEXT]...\n"
           "                         [--chat-file FILE] [--max-new-tokens N]\n"
           "                         [--do-sample BOOL] [--temperature T] [--top-k K] [--top-p P]\n"
           "                         [--num-samples N] [--seed S]\n"
           "                         [--config FILE] [--KEY VALUE]...\n\n"
        << wrap(
               "Generates text from a checkpoint, or from a Hugging Face folder "
               "(--model.pretrained DIR) as transformers' generate() does: each prompt encoded "
               "with the tokenizer's special tokens, the folder's generation_config.json for "
               "what a flag leaves unset, and a stop at its EOS ids. --config and --KEY VALUE "
               "are read as for training (fsdp-train --help lists the keys).",
               0)
        << "\n";
  }
  write_flags(out, command);
  if (command != TrainCommand::kTrain) return out.str();
  write_keys(out, ConfigKey::Kind::kSetting,
             "settings (--KEY VALUE on the command line, KEY: VALUE in the file):");
  write_keys(out, ConfigKey::Kind::kAlias, "other spellings of settings (Accelerate, TorchAcc):");
  write_keys(out, ConfigKey::Kind::kAccepted,
             "accepted in files for compatibility with Accelerate and TorchAcc:");
  write_keys(out, ConfigKey::Kind::kRejected,
             "sections of features fsdp.cpp does not have (an error unless empty):");
  return out.str();
}

}  // namespace fsdp
