// The flag table and the parser and usage text generated from it. Adding a flag is one row here;
// checks that involve several flags (node rank against node count, mpi on one node) run after
// all flags are read, in validate().
#include "launch/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "util/number_flag.h"

namespace fsdp {
namespace launch {
namespace {

using Setter = void (*)(Options&, const std::string& flag, const std::string& value);

struct Flag {
  const char* name;          // spelled with dashes; underscores are accepted too
  const char* metavar;       // nullptr: a switch, which takes no value
  const char* default_text;  // shown in --help; nullptr: none
  const char* help;
  Setter set;
};

// Numbers go through the parser every tool shares (util/number_flag.h).
int parse_int(const std::string& flag, const std::string& value, int lo, int hi) {
  try {
    return static_cast<int>(flags::parse_int(flag, value, lo, hi));
  } catch (const flags::NumberError& e) {
    throw UsageError(e.what());
  }
}

double parse_seconds(const std::string& flag, const std::string& value) {
  try {
    return flags::parse_number(flag, value, 0, 3600);
  } catch (const flags::NumberError& e) {
    throw UsageError(std::string(e.what()) + " (seconds)");
  }
}

const Flag kFlags[] = {
    {"--nproc-per-node", "N", "1", "ranks to start on this node",
     [](Options& o, const std::string& f, const std::string& v) {
       o.nproc_per_node = parse_int(f, v, 1, 4096);
     }},
    {"--nnodes", "M", "1", "nodes in the job, one fsdp-run on each",
     [](Options& o, const std::string& f, const std::string& v) {
       o.nnodes = parse_int(f, v, 1, 65536);
     }},
    {"--node-rank", "K", "0", "this node's index, 0 to M-1",
     [](Options& o, const std::string& f, const std::string& v) {
       o.node_rank = parse_int(f, v, 0, 65535);
     }},
    {"--master-addr", "ADDR", "127.0.0.1", "address of node 0, where rank 0's rendezvous listens",
     [](Options& o, const std::string& f, const std::string& v) {
       if (v.empty()) throw UsageError(f + ": the address is empty");
       o.master_addr = v;
     }},
    {"--master-port", "PORT", "29500", "rendezvous port on node 0; 0 picks a free one (one node)",
     [](Options& o, const std::string& f, const std::string& v) {
       o.master_port = parse_int(f, v, 0, 65535);
     }},
    {"--standalone", nullptr, nullptr, "one node, a free port: --nnodes 1 --master-port 0",
     [](Options& o, const std::string&, const std::string&) {
       o.nnodes = 1;
       o.master_port = 0;
     }},
    {"--backend", "gloo|mpi", "gloo",
     "gloo: set torchrun's variables; mpi: start the ranks through mpirun (one node)",
     [](Options& o, const std::string& f, const std::string& v) {
       if (v != "gloo" && v != "mpi") throw UsageError(f + ": '" + v + "' is not gloo or mpi");
       o.backend = v;
     }},
    {"--log-dir", "DIR", nullptr, "write each rank's stdout and stderr to DIR/rank_<R>.log",
     [](Options& o, const std::string& f, const std::string& v) {
       if (v.empty()) throw UsageError(f + ": the directory is empty");
       o.log_dir = v;
     }},
    {"--prefix", nullptr, nullptr, "show every rank's output, each line prefixed \"[rank R] \"",
     [](Options& o, const std::string&, const std::string&) { o.tee = 3; }},
    {"--tee", "0-3", "0",
     "as torchrun: every rank's stdout (1), stderr (2) or both (3) shown, prefixed",
     [](Options& o, const std::string& f, const std::string& v) { o.tee = parse_int(f, v, 0, 3); }},
    {"--max-restarts", "R", "0", "restart the whole group up to R times when a rank fails",
     [](Options& o, const std::string& f, const std::string& v) {
       o.max_restarts = parse_int(f, v, 0, 1000000);
     }},
    {"--grace-period", "SECONDS", "5", "when stopping ranks: SIGTERM, then SIGKILL this much later",
     [](Options& o, const std::string& f, const std::string& v) {
       o.grace_period_s = parse_seconds(f, v);
     }},
    {"--help", nullptr, nullptr, "print this text and exit",
     [](Options& o, const std::string&, const std::string&) { o.help = true; }},
};

// "--nproc_per_node" -> "--nproc-per-node"; "-h" -> "--help".
std::string canonical_name(std::string name) {
  if (name == "-h") return "--help";
  for (size_t i = 2; i < name.size(); ++i) {
    if (name[i] == '_') name[i] = '-';
  }
  return name;
}

const Flag& find_flag(const std::string& spelled) {
  const std::string name = canonical_name(spelled);
  for (const Flag& flag : kFlags) {
    if (name == flag.name) return flag;
  }
  throw UsageError("unknown flag " + spelled);
}

void validate(const Options& o) {
  if (o.help) return;
  if (o.program.empty()) throw UsageError("no program given: fsdp-run [flags] PROGRAM [ARGS...]");
  if (o.node_rank >= o.nnodes) {
    throw UsageError("--node-rank: " + std::to_string(o.node_rank) + " is not below --nnodes " +
                     std::to_string(o.nnodes));
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    throw UsageError("--master-port: 0 (pick a free port) works on one node only; with --nnodes " +
                     std::to_string(o.nnodes) + " every node must be given the same port");
  }
  if (o.backend == "mpi" && o.nnodes > 1) {
    throw UsageError(
        "--backend mpi: fsdp-run starts mpirun on one node only; for several nodes run "
        "`mpirun -np N --hostfile HOSTS PROGRAM` yourself (see docs/launch.md)");
  }
}

}  // namespace

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    const size_t eq = arg.find('=');
    const std::string spelled = arg.substr(0, eq);
    const Flag& flag = find_flag(spelled);
    std::string value;
    if (eq != std::string::npos) {
      if (!flag.metavar) throw UsageError(spelled + " takes no value");
      value = arg.substr(eq + 1);
    } else if (flag.metavar) {
      if (i + 1 >= args.size()) throw UsageError(spelled + " needs a value (" + flag.metavar + ")");
      value = args[++i];
    }
    flag.set(o, spelled, value);
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  validate(o);
  return o;
}

namespace {
// `text` wrapped at 100 columns, every line after the first indented by `indent` spaces.
std::string wrap(const std::string& text, size_t indent) {
  constexpr size_t kWidth = 100;
  std::istringstream words(text);
  std::string out, word;
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
  return out;
}
}  // namespace

std::string usage_text() {
  constexpr size_t kHelpColumn = 28;
  std::ostringstream out;
  out << "usage: fsdp-run [flags] PROGRAM [ARGS...]\n\n"
         "Starts PROGRAM once per rank with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
         "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), relays its output, and stops\n"
         "every rank when one fails. Underscore spellings (--nproc_per_node) and --flag=value are\n"
         "accepted. See docs/launch.md.\n\nflags:\n";
  for (const Flag& flag : kFlags) {
    std::string left = std::string("  ") + flag.name;
    if (flag.metavar) left += std::string(" ") + flag.metavar;
    left.resize(std::max(left.size() + 1, kHelpColumn), ' ');
    std::string help = flag.help;
    if (flag.default_text) help += std::string(" (default ") + flag.default_text + ")";
    out << left << wrap(help, kHelpColumn) << "\n";
  }
  return out.str();
}

}  // namespace launch
}  // namespace fsdp
