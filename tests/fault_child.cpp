// A small FSDP training program that misbehaves on request, for the fault tests (tests/faults.sh):
//   --kill-rank R --at-step S   rank R kills itself with SIGKILL at step S, mid-step
//   --stall-rank R --at-step S  rank R skips step S's backward (its collectives) and sleeps
//   --stop-rank R --at-step S   rank R stops itself (SIGSTOP, as `kill -STOP` does) after step S's
//                               forward: a hung rank, whose peers are in a backward prefetch
//   --leave-rank R --at-step S  rank R reads a sharded parameter after step S's forward (a
//                               mistake fsdp refuses), catches the error and returns from main,
//                               as a program that handles its errors does, while its peers are
//                               in that step's backward
//   --vocab V --batch B         the model's vocabulary (default 256) and sequences per step (2): a
//                               large vocabulary makes the root's backward, which overlaps the
//                               first prefetched all-gather, take long enough to matter
//   --check-listeners 1         after training, list this rank's listening TCP sockets and exit 3
//                               if any accepts connections from beyond loopback
// The other ranks must not hang: the launcher notices a dead rank; a stalled rank's peers time
// out in their next collective (--timeout-ms) and exit non-zero with the collective's name.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "fsdp/fsdp.h"

namespace {

struct Args {
  int kill_rank = -1, stall_rank = -1, stop_rank = -1, leave_rank = -1, at_step = 2, steps = 5;
  int vocab = 256, batch = 2;
  int timeout_ms = 3000;
  bool check_listeners = false;
  std::string backend = "auto";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--kill-rank")
      a.kill_rank = std::stoi(v);
    else if (k == "--stall-rank")
      a.stall_rank = std::stoi(v);
    else if (k == "--leave-rank")
      a.leave_rank = std::stoi(v);
    else if (k == "--stop-rank")
      a.stop_rank = std::stoi(v);
    else if (k == "--vocab")
      a.vocab = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--at-step")
      a.at_step = std::stoi(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--timeout-ms")
      a.timeout_ms = std::stoi(v);
    else if (k == "--backend")
      a.backend = v;
    else if (k == "--check-listeners")
      a.check_listeners = v == "1";
    else
      throw std::invalid_argument("unknown option " + k);
  }
  return a;
}

// Inodes of the sockets this process holds open.
std::set<std::string> socket_inodes() {
  std::set<std::string> inodes;
  DIR* fds = opendir("/proc/self/fd");
  while (dirent* e = fds ? readdir(fds) : nullptr) {
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    const std::string t(target, n > 0 ? static_cast<size_t>(n) : 0);
    if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
  }
  if (fds) closedir(fds);
  return inodes;
}

// Prints this process's listening TCP sockets ("listening on 0100007F:9C41") and returns how many
// listen beyond loopback (127.0.0.0/8 or ::1). /proc/net/tcp{,6} write addresses in hex, host
// byte order per 32-bit word: 127.x.y.z reads "....7F".
int wide_listeners(int rank) {
  const std::set<std::string> mine = socket_inodes();
  int wide = 0;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode;
      if (state != "0A" || !mine.count(inode)) continue;  // 0A: LISTEN
      const std::string addr = local.substr(0, local.find(':'));
      const bool loopback = (addr.size() == 8 && addr.substr(6) == "7F") ||
                            addr == "00000000000000000000000001000000";
      std::printf("rank %d: listening on %s (%s)\n", rank, local.c_str(),
                  loopback ? "loopback" : "NOT loopback");
      wide += !loopback;
    }
  }
  return wide;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    fsdp::CommOptions options;
    options.backend = a.backend;
    options.timeout = std::chrono::milliseconds(a.timeout_ms);
    fsdp::CommPtr world = fsdp::init_comm(options);
    at::set_num_threads(1);
    fsdp::GPT2Config config = fsdp::GPT2Config::tiny();
    config.vocab_size = a.vocab;
    fsdp::GPT2 model(config);
    auto sharded = fsdp::fully_shard(
        model.ptr(), world, fsdp::ShardingOptions().wrap(fsdp::WrapPolicy::by_type({"GPT2Block"})));
    fsdp::AdamW opt(fsdp::sharded_params(*sharded));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(world->rank());
    const int64_t T = fsdp::GPT2Config::tiny().n_positions;
    for (int step = 0; step < a.steps; ++step) {
      at::Tensor tokens = at::randint(a.vocab, {a.batch, T + 1}, gen, at::kLong);
      at::Tensor loss =
          fsdp::gpt2_loss(fsdp::forward(model, tokens.narrow(1, 0, T)), tokens.narrow(1, 1, T));
      if (step == a.at_step && world->rank() == a.kill_rank) raise(SIGKILL);
      if (step == a.at_step && world->rank() == a.stop_rank) {
        std::fprintf(stderr, "rank %d: stopping (SIGSTOP) before backward at step %d\n",
                     world->rank(), step);
        raise(SIGSTOP);
      }
      if (step == a.at_step && world->rank() == a.leave_rank) {
        std::fprintf(stderr, "rank %d: reading a sharded parameter at step %d\n", world->rank(),
                     step);
        // A block's parameter: FULL_SHARD frees it after the block's forward, so this throws.
        (void)model->named_parameters()["transformer.h.0.attn.c_attn.weight"].sum().item<float>();
      }
      if (step == a.at_step && world->rank() == a.stall_rank) {
        std::fprintf(stderr, "rank %d: skipping backward at step %d\n", world->rank(), step);
        sleep(120);
      }
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    std::printf("rank %d: done\n", world->rank());
    if (a.check_listeners && wide_listeners(world->rank()) > 0) return 3;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_child: %s\n", e.what());
    return 1;
  }
}
