// A separate process for tests/test_store.cpp: several of these write one store at once, and
// one reports the run-time switch as a fresh process sees it.
//
//   kiln_store_worker write DIR ID OWN SHARED
//       Waits for end of input on stdin (so that all workers start together), then writes OWN
//       tune rows of its own ("w<ID>-<i>") and one kernel row per 4, writes the SHARED keys
//       every worker writes ("shared-<i>"), and reads its rows back as it goes and at the end.
//       Exit 0: every row read back, no warning; 3: the same, with warnings that all say the
//       store was corrupt and rebuilt; 1: a row missing or wrong; 4: any other warning.
//   kiln_store_worker full-tmpfs DIR
//       In a mount namespace of its own (gone with the process), mounts a 256 KiB tmpfs at DIR
//       and writes 4 KiB rows until the disk is full, reading each back. Exit 0: one warning
//       and every row read back, then a second store finds the rows that reached the disk;
//       5: no tmpfs could be mounted (not root, or no CAP_SYS_ADMIN); 1: anything else.
//   kiln_store_worker features
//       Prints "name compiled live why" per feature and "store: none" or "store: <file>" for
//       process_store(); exit 2 with the message if kiln refuses the environment.
//   kiln_store_worker read-only DIR HOW
//       Opens the store at DIR after HOW: "nobody" drops this process to uid and gid 65534 when
//       it runs as root (whom mode bits do not stop); "ro-mount" bind-mounts DIR read-only in a
//       mount namespace of its own. Prints "mode: <mode>", "hits: <n>" (of the rows "row-0" to
//       "row-99" found), "write: durable" or "write: not durable: <why>", and each warning as
//       "warning: <text>". Exit 0; 5 when HOW could not be arranged.
//   kiln_store_worker full-disk DIR HOLD KILN ARGS...
//       In a mount namespace of its own, mounts a 1 MiB tmpfs at DIR, writes 40 rows "row-<i>"
//       there, holds a reader on the store (HOLD 1: its -wal and -shm stay, so that kiln opens
//       it and fails only on writing) or not (HOLD 0: kiln cannot even open it for writing),
//       fills the disk, and runs the kiln command KILN with ARGS and KILN_CACHE_DIR=DIR (its
//       output is this one's). Prints "kiln exit: <status>", then, the disk freed,
//       "rows after: <n>". Exit 0; 5 when no tmpfs could be mounted; 1 when a step failed.
//   kiln_store_worker tune DIR KEYS
//       (Built with autotune.) Tunes the keys "tune-<i>", i < KEYS, one after the other with the
//       exhaustive policy into the store at DIR, with four candidates whose runs sleep 2 ms
//       (candidate 2 reports itself fastest: its value is "v<i>-2"), printing "tuned tune-<i>"
//       after each; a test kills it in the middle of one. Exit 0.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/config.hpp"
#include "kiln/error.hpp"
#include "store/location.hpp"
#include "store/sqlite.hpp"
#include "store/store.hpp"
#if KILN_WITH_AUTOTUNE
#include <chrono>
#include <thread>

#include "tune/store_records.hpp"
#include "tune/tuner.hpp"
#endif

extern char** environ;

namespace {

using kiln::store::Identity;

Identity worker_identity() {
  Identity id;
  id.device = "Worker GPU";
  id.compute_capability = "9.0";
  id.driver = "13.0";
  id.cuda_runtime = "13.0";
  id.cublas = "13.1.0";
  id.nvrtc = "13.0";
  return id;
}

std::string own_value(int worker, int i) {
  // Binary on purpose: a NUL and high bytes must come back unchanged.
  std::string v = "v";
  v += std::to_string(worker);
  v += '\0';
  v += '\xff';
  v += std::to_string(i);
  return v;
}

int write(const std::string& dir, int worker, int own, int shared) {
  for (int c; (c = std::getchar()) != EOF;) {
  }
  std::vector<std::string> warnings;
  kiln::store::Store store(
      {.dir = dir, .warn = [&](const std::string& m) { warnings.push_back(m); }});
  const Identity id = worker_identity();
  int bad = 0;
  auto check = [&](int i) {
    const std::string key = fmt::format("w{}-{}", worker, i);
    auto got = store.get_tune(id, key);
    if (!got || got->value != own_value(worker, i) || got->name != fmt::format("cand {}", i)) {
      std::fprintf(stderr, "worker %d: row %s %s\n", worker, key.c_str(),
                   got ? "has a wrong value" : "is missing");
      ++bad;
    }
  };
  for (int i = 0; i < own; ++i) {
    const std::string key = fmt::format("w{}-{}", worker, i);
    store.put_tune(id, key, {own_value(worker, i), fmt::format("cand {}", i), "1x2x3", 1e-6 * i});
    if (i % 4 == 0) {
      const std::string source = fmt::format("__global__ void k{}() {{}}", key);
      std::vector<char> bin(1000 + i, static_cast<char>(worker));
      store.put_kernel(id, {source, "sm_90", "-O3"}, bin, key);
      auto got = store.get_kernel(id, {source, "sm_90", "-O3"});
      if (!got || *got != bin) {
        std::fprintf(stderr, "worker %d: kernel of %s missing or wrong\n", worker, key.c_str());
        ++bad;
      }
    }
    if (shared > 0) {
      const int s = i % shared;
      store.put_tune(id, fmt::format("shared-{}", s),
                     {fmt::format("from {}", worker), "shared", "4x5x6", 1.0});
    }
    check(i / 2);
  }
  for (int i = 0; i < own; ++i) check(i);
  int other = 0;
  for (const auto& w : warnings) {
    std::fprintf(stderr, "worker %d warning: %s\n", worker, w.c_str());
    if (w.find("was corrupt") == std::string::npos) ++other;
  }
  if (bad) return 1;
  if (other) return 4;
  return warnings.empty() ? 0 : 3;
}

// A mount namespace of this process's own (gone with it), so that its mounts touch nothing
// else; false (errno set) without CAP_SYS_ADMIN.
bool private_mounts() {
  return unshare(CLONE_NEWNS) == 0 &&
         mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

bool mount_tmpfs(const std::string& dir, const char* size) {
  if (private_mounts() && mount("tmpfs", dir.c_str(), "tmpfs", 0, size) == 0) return true;
  std::fprintf(stderr, "cannot mount a tmpfs at %s: %s\n", dir.c_str(), std::strerror(errno));
  return false;
}

int full_tmpfs(const std::string& dir) {
  if (!mount_tmpfs(dir, "size=256k")) return 5;
  std::vector<std::string> warnings;
  const Identity id = worker_identity();
  const std::string value(4096, 'x');
  int written = 0;
  {
    kiln::store::Store store(
        {.dir = dir, .warn = [&](const std::string& m) { warnings.push_back(m); }});
    if (!store.persistent()) {
      std::fprintf(stderr, "full-tmpfs: store not on disk: %s\n", store.why().c_str());
      return 1;
    }
    for (; written < 200; ++written) {
      const std::string key = fmt::format("row-{}", written);
      store.put_tune(id, key, {value, "n", "s", 1});
      auto got = store.get_tune(id, key);
      if (!got || got->value != value) {
        std::fprintf(stderr, "full-tmpfs: row %d not read back\n", written);
        return 1;
      }
    }
    for (const auto& w : warnings) std::fprintf(stderr, "full-tmpfs warning: %s\n", w.c_str());
    if (store.persistent() || warnings.size() != 1 ||
        warnings[0].find("full") == std::string::npos) {
      std::fprintf(stderr, "full-tmpfs: persistent %d, %zu warnings\n", store.persistent(),
                   warnings.size());
      return 1;
    }
  }
  // The disk is still full: a new store opens the file and finds the rows that reached it.
  std::vector<std::string> later;
  kiln::store::Store again({.dir = dir, .warn = [&](const std::string& m) { later.push_back(m); }});
  int on_disk = 0;
  while (on_disk < written && again.get_tune(id, fmt::format("row-{}", on_disk))) ++on_disk;
  std::printf("rows on disk: %d of %d\n", on_disk, written);
  for (const auto& w : later) std::fprintf(stderr, "full-tmpfs, second store: %s\n", w.c_str());
  return on_disk > 0 && on_disk < written ? 0 : 1;
}

// The store at `dir` as this process finds it after `how` ("nobody" or "ro-mount").
int read_only(const std::string& dir, const std::string& how) {
  if (how == "nobody" && geteuid() == 0 &&
      (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
    std::fprintf(stderr, "read-only: cannot become uid 65534: %s\n", std::strerror(errno));
    return 5;
  }
  if (how == "ro-mount" &&
      (!private_mounts() || mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
       mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)) {
    std::fprintf(stderr, "read-only: cannot mount %s read-only: %s\n", dir.c_str(),
                 std::strerror(errno));
    return 5;
  }
  std::vector<std::string> warnings;
  kiln::store::Store store(
      {.dir = dir, .warn = [&](const std::string& m) { warnings.push_back(m); }});
  const Identity id = worker_identity();
  int hits = 0;
  for (int i = 0; i < 100; ++i) hits += store.get_tune(id, fmt::format("row-{}", i)).has_value();
  std::printf("mode: %s\nhits: %d\n", kiln::store::mode_name(store.mode()), hits);
  const auto w = store.put_tune(id, "new", {"v", "n", "s", 1});
  std::printf(w ? "write: durable\n" : "write: not durable: %s\n", w.why.c_str());
  for (const auto& m : warnings) std::printf("warning: %s\n", m.c_str());
  return 0;
}

// Runs `args` (the kiln command first) with the store at `dir`, kiln's other switches unset (as
// tests/kiln_command.hpp does); its exit status, or -1.
int run_kiln(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s(*e);
    if (s.rfind("KILN_", 0) != 0 || s.rfind("KILN_TEST_", 0) == 0) env.push_back(s);
  }
  env.push_back("KILN_CACHE_DIR=" + dir);
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Writes zeros to `path` until the file system is full.
bool fill(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  static const char zeros[4096] = {};
  while (::write(fd, zeros, sizeof zeros) > 0) {
  }
  const bool full = errno == ENOSPC;
  ::close(fd);
  return full;
}

int full_disk(const std::string& dir, bool hold, const std::vector<std::string>& kiln) {
  if (!mount_tmpfs(dir, "size=1m")) return 5;
  const Identity id = worker_identity();
  const std::string value(1000, 'r');
  {
    kiln::store::Store store({.dir = dir, .warn = [](const std::string&) {}});
    for (int i = 0; i < 40; ++i) {
      if (!store.put_tune(id, fmt::format("row-{}", i), {value, "n", "s", 1})) {
        std::fprintf(stderr, "full-disk: row %d not written\n", i);
        return 1;
      }
    }
  }
  namespace sql = kiln::store::sql;
  const std::string file = dir + "/" + kiln::store::kFileName;
  sql::Database reader;
  if (hold) {
    reader = sql::Database::open(file, 5000);
    reader.exec("BEGIN");
    reader.query_int("SELECT count(*) FROM kiln_tune");
  }
  if (!fill(dir + "/filler")) {
    std::fprintf(stderr, "full-disk: cannot fill %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  std::printf("kiln exit: %d\n", run_kiln(kiln, dir));
  if (hold) {
    reader.exec("COMMIT");
    reader.close();
  }
  std::remove((dir + "/filler").c_str());
  kiln::store::Store after({.dir = dir, .warn = [](const std::string&) {}});
  std::printf("rows after: %zu\n", after.list(kiln::store::Table::tune, id).size());
  return 0;
}

int features() {
  try {
    for (const auto& f : kiln::features())
      std::printf("%s %d %d %s\n", f.name.c_str(), f.compiled, f.live, f.why.c_str());
    kiln::store::Store* s = kiln::store::process_store();
    std::printf("store: %s\n", s ? s->file().c_str() : "none");
    return 0;
  } catch (const kiln::Error& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
}

#if KILN_WITH_AUTOTUNE
// Candidates whose runs sleep; candidate 2 reports itself fastest.
class SleepingBench final : public kiln::tune::Bench {
 public:
  double time(const kiln::tune::Candidate& c) override {
    c.run();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return c.value.back() == '2' ? 1e-3 : 2e-3;
  }
  void keep_reference() override {}
  bool agrees(std::string&) override { return true; }
};

int tune(const std::string& dir, int keys) {
  kiln::store::Store store(
      {.dir = dir, .warn = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); }});
  kiln::tune::StoreRecords records(store, worker_identity());
  kiln::tune::Tuner tuner(kiln::tune::Policy::exhaustive());
  SleepingBench bench;
  for (int i = 0; i < keys; ++i) {
    kiln::tune::Request r;
    r.lane = "worker:0";
    r.key = fmt::format("tune-{}", i);
    r.shape = "a shape";
    for (int j = 0; j < 4; ++j)
      r.candidates.push_back({fmt::format("c{}", j), fmt::format("v{}-{}", i, j), [] {}, {}});
    r.bench = &bench;
    r.records = &records;
    tuner.choose(r);
    std::printf("tuned %s\n", r.key.c_str());
    std::fflush(stdout);
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 5 && args[0] == "write")
    return write(args[1], std::atoi(args[2].c_str()), std::atoi(args[3].c_str()),
                 std::atoi(args[4].c_str()));
  if (args.size() == 2 && args[0] == "full-tmpfs") return full_tmpfs(args[1]);
  if (args.size() == 1 && args[0] == "features") return features();
  if (args.size() == 3 && args[0] == "read-only") return read_only(args[1], args[2]);
  if (args.size() >= 4 && args[0] == "full-disk")
    return full_disk(args[1], args[2] == "1", {args.begin() + 3, args.end()});
#if KILN_WITH_AUTOTUNE
  if (args.size() == 3 && args[0] == "tune") return tune(args[1], std::atoi(args[2].c_str()));
#endif
  std::fprintf(stderr,
               "usage: kiln_store_worker write DIR ID OWN SHARED | full-tmpfs DIR | features | "
               "read-only DIR nobody|ro-mount | full-disk DIR 0|1 KILN ARGS... | tune DIR KEYS\n");
  return 64;
} catch (const std::exception& e) {  // a raw SQLite call of a mode failed
  std::fprintf(stderr, "kiln_store_worker: %s\n", e.what());
  return 1;
}
