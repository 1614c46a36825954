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
#include <fmt/format.h>
#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/config.hpp"
#include "kiln/error.hpp"
#include "store/store.hpp"

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

int full_tmpfs(const std::string& dir) {
  if (unshare(CLONE_NEWNS) != 0 ||
      mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0) {
    std::fprintf(stderr, "full-tmpfs: cannot mount a tmpfs at %s: %s\n", dir.c_str(),
                 std::strerror(errno));
    return 5;
  }
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

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 5 && args[0] == "write")
    return write(args[1], std::atoi(args[2].c_str()), std::atoi(args[3].c_str()),
                 std::atoi(args[4].c_str()));
  if (args.size() == 2 && args[0] == "full-tmpfs") return full_tmpfs(args[1]);
  if (args.size() == 1 && args[0] == "features") return features();
  std::fprintf(stderr,
               "usage: kiln_store_worker write DIR ID OWN SHARED | full-tmpfs DIR | features\n");
  return 64;
}
