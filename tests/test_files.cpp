// The shared readers' bounds (src/util/json.h) and writers' rules (src/util/files.h): JSON nested
// past the limit is refused before nlohmann parses it, error excerpts stay short whatever the
// value, files are read only when regular and small enough; two writers of one output never share a
// temporary and the second to finish is told, a file the process keeps is never opened through a
// link, a killed writer's temporary is recognised, and SIGINT removes the temporaries in flight.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "checkpoint/file_io.h"
#include "fsdp/checkpoint/checkpoint.h"
#include "util/files.h"
#include "util/json.h"

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::path(::testing::TempDir()) / ("fsdp_files_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// 100,000 nested arrays overflowed the stack in an error message's dump() (issue 45): refused at
// the 65th level, before nlohmann builds anything; 64 levels parse, brackets in strings are text.
TEST(JsonBounds, NestingPastTheLimitIsRefusedBeforeParsing) {
  EXPECT_EQ(fsdp::json_bounds::too_deep_at(nested(64)), std::string::npos);
  EXPECT_EQ(fsdp::json_bounds::too_deep_at(nested(65)), 64u);
  EXPECT_EQ(fsdp::json_bounds::too_deep_at(nested(100000)), 64u);
  EXPECT_EQ(fsdp::json_bounds::too_deep_at("{\"a\": \"" + std::string(1000, '[') + "\\\"[\"}"),
            std::string::npos);
  EXPECT_NO_THROW(fsdp::json_bounds::parse(nested(64), "x.json"));
  try {
    fsdp::json_bounds::parse("{\"vocab_size\": " + nested(100000) + "}", "config.json");
    ADD_FAILURE() << "100,000 levels were parsed";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "config.json: JSON nested deeper than 64 levels (at byte 78)"))
        << e.what();
  }
  EXPECT_TRUE(fsdp::json_bounds::parse_or_discard(nested(100000)).is_discarded());
  EXPECT_TRUE(fsdp::json_bounds::parse_or_discard("{").is_discarded());
}

// An error message quotes at most about 80 bytes of a value, however large or deep it is.
TEST(JsonBounds, ExcerptsAreShortWhateverTheValue) {
  EXPECT_EQ(fsdp::json_bounds::excerpt(json(3)), "3");
  EXPECT_EQ(fsdp::json_bounds::excerpt(json::parse("[1, \"a\", {\"b\": null}]")),
            "[1,\"a\",{\"b\":null}]");
  const std::string big(10 << 20, 'x');
  EXPECT_LE(fsdp::json_bounds::excerpt(json(big)).size(), 90u);
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  const std::string w = fsdp::json_bounds::excerpt(wide);
  EXPECT_LE(w.size(), 90u);
  EXPECT_EQ(w.substr(0, 6), "[0,1,2");
  EXPECT_LE(fsdp::json_bounds::excerpt(json::parse(nested(60))).size(), 90u);
  // A cut inside a UTF-8 sequence is written, not thrown.
  EXPECT_NO_THROW(fsdp::json_bounds::excerpt(json(std::string(79, 'a') + "\xc3\xa9"), 80));
}

// A file is read only when it is a regular file within the cap; the message names what it is.
TEST(JsonBounds, ReadFileRefusesFoldersDevicesFifosAndLargeFiles) {
  const fs::path d = fresh_dir("read");
  const auto error = [](const std::string& path, size_t cap) {
    try {
      fsdp::json_bounds::read_file(path, cap, "a config.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  write(d / "ok.json", "{}");
  EXPECT_EQ(fsdp::json_bounds::read_file((d / "ok.json").string(), 10, "x"), "{}");
  EXPECT_TRUE(contains(error(d.string(), 10), ": is a folder, not a config.json"));
  EXPECT_TRUE(contains(error("/dev/zero", 10), "/dev/zero: is not a regular file"));
  fs::create_symlink("/dev/zero", d / "zero.json");
  EXPECT_TRUE(contains(error((d / "zero.json").string(), 10), "is not a regular file"));
  ASSERT_EQ(::mkfifo((d / "fifo.json").c_str(), 0600), 0);
  EXPECT_TRUE(contains(error((d / "fifo.json").string(), 10), "is not a regular file"));
  write(d / "big.json", std::string(2 << 20, ' '));
  EXPECT_TRUE(contains(error((d / "big.json").string(), 1 << 20),
                       "2097152 bytes, more than a config.json may hold (1 MiB)"));
  EXPECT_TRUE(contains(error((d / "none.json").string(), 10), "cannot open a config.json"));
  fs::remove_all(d);
}

// Two writers of one output each get a temporary of their own, created exclusively.
TEST(Files, TwoWritersNeverShareATemporary) {
  const fs::path d = fresh_dir("temps");
  const std::string out = (d / "one.st").string();
  fsdp::files::TempGuard a, b;
  const int fa = fsdp::files::create_temp_file(out, &a);
  const int fb = fsdp::files::create_temp_file(out, &b);
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(fsdp::files::temp_owner(fs::path(a.path()).filename().string()), ::getpid());
  ::close(fa);
  ::close(fb);
  EXPECT_TRUE(fs::exists(a.path()));
  const std::string pa = a.path();
  a = fsdp::files::TempGuard();  // a guard that is dropped removes its temporary
  EXPECT_FALSE(fs::exists(pa));
  fs::remove_all(d);
}

// Every writer's loop (checkpoint files, token files, the corpus cache's text): all the bytes, or
// false with the error, never a silent short file.
TEST(Files, WriteAllWritesEverythingOrSaysWhy) {
  const fs::path d = fresh_dir("write_all");
  const std::string big(3 << 20, 'x');  // larger than one write() of a pipe or a page cache batch
  const int fd = ::open((d / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(fsdp::files::write_all(fd, big.data(), big.size()));
  ::close(fd);
  EXPECT_EQ(read(d / "out"), big);

  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);  // every write: ENOSPC
  if (full >= 0) {
    errno = 0;
    EXPECT_FALSE(fsdp::files::write_all(full, big.data(), big.size()));
    EXPECT_EQ(errno, ENOSPC);
    ::close(full);
  }
  const int readonly = ::open((d / "out").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(readonly, 0);
  errno = 0;
  EXPECT_FALSE(fsdp::files::write_all(readonly, "y", 1));
  EXPECT_EQ(errno, EBADF);
  ::close(readonly);
  fs::remove_all(d);
}

// The output that appeared while a writer wrote is left as its writer made it, and the second
// writer is told; an output that existed is replaced only while it is still the same file.
TEST(Files, RenameIntoPlaceNeverReplacesAnotherWritersOutput) {
  const fs::path d = fresh_dir("rename");
  const std::string out = (d / "one.st").string();
  const auto commit = [&](const std::string& text, const fsdp::files::OutputState& before) {
    fsdp::files::TempGuard g;
    const int fd = fsdp::files::create_temp_file(out, &g);
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
    fsdp::files::rename_into_place(g.path(), out, before);
    g.keep();
  };
  const fsdp::files::OutputState absent = fsdp::files::output_state(out);
  ASSERT_FALSE(absent.existed);
  commit("first", absent);  // the faster writer
  try {
    commit("second", absent);  // began when there was nothing
    ADD_FAILURE() << "the second writer replaced the first one's output";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "appeared while it was being written")) << e.what();
  }
  EXPECT_EQ(read(out), "first");
  const fsdp::files::OutputState first = fsdp::files::output_state(out);
  commit("third", first);  // replacing the file it found is what the user asked for
  EXPECT_EQ(read(out), "third");
  EXPECT_THROW(commit("fourth", first), std::runtime_error);  // "third" is another file now
  EXPECT_EQ(read(out), "third");
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(d)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, std::set<std::string>{"one.st"});  // the refused writers' temporaries are gone
  fs::remove_all(d);
}

// A file a run keeps in its folder (the checkpoint lock) is never opened through a link: the
// link's target keeps its content.
TEST(Files, AFileOfOurOwnIsNeverOpenedThroughALink) {
  const fs::path d = fresh_dir("link");
  write(d / "precious", "precious data");
  fs::create_symlink(d / "precious", d / ".fsdp-lock");
  try {
    fsdp::files::open_own_file((d / ".fsdp-lock").string());
    ADD_FAILURE() << "opened through the link";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "is a symbolic link")) << e.what();
  }
  EXPECT_EQ(read(d / "precious"), "precious data");
  const int fd = fsdp::files::open_own_file((d / "own").string());
  EXPECT_GE(fd, 0);
  ::close(fd);
  fs::remove_all(d);
}

// The checkpoint layer's atomic writes (`latest`, metadata) refuse a link where their file goes:
// replacing it would do no harm, but a link there was not made by the run.
TEST(Files, CheckpointWritesRefuseALinkInTheirPlace) {
  const fs::path d = fresh_dir("latest");
  write(d / "elsewhere", "a user's file");
  fs::create_symlink(d / "elsewhere", d / "latest");
  try {
    fsdp::ckpt::write_file_atomically((d / "latest").string(), "step_00000001\n");
    ADD_FAILURE() << "wrote through the link";
  } catch (const fsdp::CheckpointError& e) {
    EXPECT_TRUE(contains(e.what(), "is a symbolic link")) << e.what();
  }
  EXPECT_EQ(read(d / "elsewhere"), "a user's file");
  EXPECT_TRUE(fs::is_symlink(d / "latest"));
  fsdp::ckpt::write_file_atomically((d / "own").string(), "x");
  EXPECT_EQ(read(d / "own"), "x");
  fs::remove_all(d);
}

// A temporary whose writer is gone (killed with -9) is recognised by its name; a live writer's,
// ours, and names that only look alike are not.
TEST(Files, AKilledWritersTemporaryIsRecognised) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string dead = "c.st.tmp-" + std::to_string(child) + "-0badf00d";
  EXPECT_EQ(fsdp::files::temp_owner(dead), child);
  EXPECT_EQ(fsdp::files::stale_temp_owner(dead), child);
  EXPECT_EQ(fsdp::files::stale_temp_owner("c.st.tmp-" + std::to_string(::getpid()) + "-1"), 0);
  EXPECT_EQ(fsdp::files::stale_temp_owner("c.st.tmp-1-1"), 0);  // init lives
  EXPECT_EQ(fsdp::files::temp_owner("export.tmp-12"), 12);      // the older names
  EXPECT_EQ(fsdp::files::temp_owner("a.tmp-x"), 0);
  EXPECT_EQ(fsdp::files::temp_owner("a.tmp-12x"), 0);
  EXPECT_EQ(fsdp::files::temp_owner("notes.txt"), 0);
}

// The next writer of an output removes the temporaries of that output whose writers are gone, and
// leaves a live writer's and other outputs' alone.
TEST(Files, TheNextWriterRemovesAKilledWritersTemporaries) {
  const fs::path d = fresh_dir("stale");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string dead = std::to_string(child);
  write(d / ("out.st.tmp-" + dead + "-0000abcd"), "half a file");
  fs::create_directory(d / ("out.st.tmp-" + dead + "-0000beef"));
  write(d / ("out.st.tmp-" + dead + "-0000beef") / "model.safetensors", "x");
  write(d / ("out.st.tmp-" + std::to_string(::getpid()) + "-00000001"), "a live writer's");
  write(d / ("other.st.tmp-" + dead + "-00000002"), "another output's");
  EXPECT_EQ(fsdp::files::remove_stale_temps_of((d / "out.st").string()), 2);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(d)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"out.st.tmp-" + std::to_string(::getpid()) + "-00000001",
                                         "other.st.tmp-" + dead + "-00000002"}));
  fs::remove_all(d);
}

// SIGINT removes every registered temporary, file or folder, then ends the process as SIGINT does.
TEST(Files, SigintRemovesTheTemporariesInFlight) {
  const fs::path d = fresh_dir("signal");
  const std::string out = (d / "out.st").string();
  const pid_t child = ::fork();
  if (child == 0) {
    fsdp::files::install_signal_cleanup();
    fsdp::files::TempGuard file, folder;
    ::close(fsdp::files::create_temp_file(out, &file));
    const std::string dir = fsdp::files::create_temp_folder((d / "export").string(), &folder);
    std::ofstream(dir + "/config.json") << "{}";
    std::ofstream(dir + "/model.safetensors") << "x";
    ::raise(SIGINT);
    ::_exit(3);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_TRUE(fs::is_empty(d)) << "left: " << fs::directory_iterator(d)->path();
  fs::remove_all(d);
}

}  // namespace
