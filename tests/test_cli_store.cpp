// The `kiln` command on a store in trouble (issue 15): a command that promised to write fails
// when the write did not reach the file (a real full disk: a small tmpfs, mounted by
// tests/helpers/store_worker.cpp in a mount namespace of its own, skipped where none can be);
// another application's database is not touched by any command, each of which warns once;
// `kiln doctor` reports the tables it rebuilt; `kiln tune --list` shows the build and escapes
// what the store holds; `kiln bench --compare` never touches the user's store.
#if KILN_WITH_PERSISTENCE
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln_command.hpp"
#include "store/location.hpp"
#include "store/sqlite.hpp"
#include "store/store.hpp"
#include "store_worker.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kiln::store::Identity;
using kiln::store::Store;
using kt::has;
using kt::occurrences;
using kt::Outcome;

bool cuda_present() {
  for (const kiln::DeviceInfo& d : kiln::devices())
    if (d.present && d.name.rfind("cuda:", 0) == 0) return true;
  return false;
}

// Every file of `dir` and its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = kt::slurp(e.path());
  return out;
}

class CliStore : public ::testing::Test {
 protected:
  kt::TempDir tmp_{"kiln-cli-store"};
  fs::path store_dir() const { return tmp_.path() / "store"; }
  fs::path db() const { return store_dir() / kiln::store::kFileName; }
  Outcome kiln(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> envs{"KILN_CACHE_DIR=" + store_dir().string()};
    envs.insert(envs.end(), env.begin(), env.end());
    return kt::run_kiln(tmp_.path(), args, envs);
  }
  // A closed store holding one tune row of `id` (closing it removes its -wal and -shm).
  void one_row(const Identity& id, const std::string& key, const kiln::store::TuneResult& r) {
    kiln::store::Options o;
    o.dir = store_dir();
    Store st(o);
    ASSERT_TRUE(st.put_tune(id, key, r));
  }
};

Identity test_identity() {
  Identity id{"Test GPU", "9.0", "13.0", "13.0", "13.1.0", "13.0"};
  return id;
}

// ---- a full disk ----

// The worker's full-disk run of `kiln args` on 40 rows; hold: the store stays open in the worker,
// so that kiln opens it and fails only when it writes. Its output, kiln's within it.
struct FullDisk {
  int code = 0;
  std::string out;
};

FullDisk full_disk(const fs::path& dir, bool hold, const std::vector<std::string>& args) {
  fs::create_directories(dir);
  std::vector<std::string> worker{"full-disk", dir.string(), hold ? "1" : "0",
                                  kt::sibling_program(KILN_CLI)};
  worker.insert(worker.end(), args.begin(), args.end());
  auto [code, out] = kt::run_worker(worker);
  return {code, out};
}

// The failure of a command that promised to write: exit 2, the file and the reason named, every
// row still in the file.
void expect_refused(const FullDisk& r, const fs::path& file, const std::string& what) {
  EXPECT_TRUE(has(r.out, "kiln exit: 2\n")) << r.out;
  EXPECT_TRUE(has(r.out, "kiln: " + what)) << r.out;
  EXPECT_TRUE(has(r.out, file.string())) << r.out;
  EXPECT_TRUE(has(r.out, "full") || has(r.out, "No space left on device")) << r.out;
  EXPECT_TRUE(has(r.out, "rows after: 40\n")) << r.out;
  EXPECT_FALSE(has(r.out, "removed 40")) << r.out;
}

TEST_F(CliStore, TuneClearOnAFullDiskFailsAndEveryRowStays) {
  for (const bool hold : {true, false}) {
    SCOPED_TRACE(hold ? "kiln opens the store, its delete fails" : "kiln cannot open it to write");
    const fs::path dir = tmp_.path() / (hold ? "held" : "closed");
    const FullDisk r = full_disk(dir, hold, {"tune", "--clear"});
    if (r.code == 5) GTEST_SKIP() << "no tmpfs can be mounted here (needs root): " << r.out;
    ASSERT_EQ(r.code, 0) << r.out;
    expect_refused(r, dir / "kiln.db", "tune --clear: nothing removed");
    EXPECT_EQ(occurrences(r.out, "kiln[store]: warning:"), 1u) << r.out;
  }
}

TEST_F(CliStore, TuneListOnAFullDiskShowsTheRowsReadOnly) {
  const fs::path dir = tmp_.path() / "full";
  const FullDisk r = full_disk(dir, false, {"tune", "--list"});
  if (r.code == 5) GTEST_SKIP() << "no tmpfs can be mounted here (needs root): " << r.out;
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "kiln exit: 0\n")) << r.out;
  EXPECT_TRUE(has(r.out, "store: " + (dir / "kiln.db").string() + " (read-only: ")) << r.out;
  EXPECT_TRUE(has(r.out, "tune rows (40):")) << r.out;
  EXPECT_EQ(occurrences(r.out, "kiln[store]: warning:"), 1u) << r.out;
}

// Without a CUDA device `kiln tune --matmul` tunes nothing and says so before it reaches the
// store; with one, a choice that does not reach the file fails the command.
TEST_F(CliStore, TuneMatmulOnAFullDiskFails) {
  for (const bool hold : {true, false}) {
    SCOPED_TRACE(hold ? "kiln opens the store, its write fails" : "kiln cannot open it to write");
    const fs::path dir = tmp_.path() / (hold ? "held" : "closed");
    const FullDisk r = full_disk(dir, hold, {"tune", "--matmul", "256x256x256"});
    if (r.code == 5) GTEST_SKIP() << "no tmpfs can be mounted here (needs root): " << r.out;
    ASSERT_EQ(r.code, 0) << r.out;
    if (cuda_present()) {
      expect_refused(r, dir, "tune --matmul: ");
      EXPECT_FALSE(has(r.out, "tuned now")) << r.out;
    } else {
      EXPECT_TRUE(has(r.out, "kiln exit: 2\n")) << r.out;
      EXPECT_TRUE(has(r.out, "kiln: tune --matmul on cuda:0: no CUDA device: ")) << r.out;
      EXPECT_TRUE(has(r.out, "rows after: 40\n")) << r.out;
    }
  }
}

// ---- another application's database ----

TEST_F(CliStore, NoCommandTouchesAnotherApplicationsDatabaseAndEachWarnsOnce) {
  fs::create_directories(store_dir());
  kiln::store::sql::Database::open(db().string(), 5000)
      .exec("PRAGMA application_id = 42; CREATE TABLE theirs (x); INSERT INTO theirs VALUES (1);");
  const auto before = snapshot(store_dir());
  const std::vector<std::pair<std::vector<std::string>, int>> commands = {
      {{"tune", "--list"}, 0}, {{"tune", "--clear"}, 2}, {{"doctor"}, 1}};
  for (const auto& [args, status] : commands) {
    const Outcome r = kiln(args);
    EXPECT_EQ(r.status, status) << r;
    EXPECT_EQ(occurrences(r.err, "kiln[store]: warning:"), 1u) << r;
    EXPECT_TRUE(
        has(r.err, db().string() + " is not a kiln store (application_id 0x2a), left as it is"))
        << r;
    EXPECT_TRUE(snapshot(store_dir()) == before) << r;
  }
}

// ---- kiln doctor ----

TEST_F(CliStore, DoctorReportsTablesItRebuilt) {
  one_row(test_identity(), "k", {"v", "n", "s", 1});
  kiln::store::sql::Database::open(db().string(), 5000)
      .exec("ALTER TABLE kiln_tune DROP COLUMN shape");
  const Outcome r = kiln({"doctor"});
  EXPECT_EQ(r.status, 1) << r;
  EXPECT_TRUE(has(r.out, "  found: " + db().string() + " has kiln's application_id and schema"))
      << r;
  EXPECT_TRUE(has(r.out, "- [lost] the store: ")) << r;
  EXPECT_FALSE(has(r.out, "\nhealthy")) << r;
  EXPECT_TRUE(has(r.out, fmt::format("  this build: kiln {}, build {}\n", kiln::version(),
                                     kiln::store::build_revision())))
      << r;
  // Rebuilt: the next doctor finds nothing more.
  const Outcome again = kiln({"doctor", "--json"});
  EXPECT_TRUE(has(again.out, "\"found\": []")) << again;
  EXPECT_TRUE(has(again.out, "\"build\": \"" + kiln::store::build_revision() + "\"")) << again;
}

// ---- kiln tune --list ----

TEST_F(CliStore, TuneListShowsTheBuildAndEscapesWhatTheStoreHolds) {
  Identity id = test_identity();
  id.device = "GPU\x1b]0;title\x07";
  // An OSC title, a screen clear, a newline, C1's CSI, a backslash, a byte that is not UTF-8.
  one_row(id, "key\x1b[2J\nline",
          {"v",
           "name\xc2\x9b"
           "1m\\\xff",
           "shape\ttab\r", 1e-3});
  const Outcome r = kiln({"tune", "--list"});
  ASSERT_EQ(r.status, 0) << r;
  for (const char* shown : {"GPU\\x1b]0;title\\x07 (cc 9.0)", "key\\x1b[2J\\nline",
                            "name\\xc2\\x9b1m\\\\\\xff", "shape\\ttab\\r"}) {
    EXPECT_TRUE(has(r.out, shown)) << shown << "\n" << r;
  }
  for (const char raw : {'\x1b', '\x07', '\r', '\t', '\xff'})
    EXPECT_FALSE(has(r.out, std::string(1, raw))) << static_cast<int>(raw) << "\n" << r;
  EXPECT_FALSE(has(r.out, "\xc2\x9b")) << r;
  EXPECT_TRUE(has(r.out, ", build " + kiln::store::build_revision() + ": ")) << r;
  EXPECT_TRUE(has(
      r.out, "this build: kiln " + kiln::version() + ", build " + kiln::store::build_revision()))
      << r;
}

TEST_F(CliStore, TuneListCallsRowsOfAnotherBuildStale) {
  Identity other = test_identity();
  other.build = "0123456789abcdef";
  one_row(other, "k", {"v", "n", "s", 1});
  const Outcome r = kiln({"tune", "--list"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(r.out, ", build 0123456789abcdef: stale: another device, version or build")) << r;
}

// ---- kiln bench --compare ----

// With a CUDA device, opening it (kiln::devices()) starts a preload that opened the user's
// store, making its -wal and -shm. Here the user's store exists with a row (the preload only
// opens a file that exists), and KILN_LOG=store traces every store kiln opens: the comparison's
// own is seen on any machine, so that the user's would be seen where the bug lives.
TEST_F(CliStore, BenchCompareNeverTouchesTheUsersStore) {
  one_row(test_identity(), "k", {"v", "n", "s", 1});
  const auto before = snapshot(store_dir());
  ASSERT_EQ(before.size(), 1u);
  const Outcome r = kiln({"bench", "--compare", "--device", "cpu", "--rounds", "1", "--runs", "1",
                          "--configs", "default"},
                         {"KILN_LOG=store"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(r.err, "kiln[store]: opened ")) << r;
  EXPECT_TRUE(has(r.err, "kiln-compare-")) << r;
  EXPECT_FALSE(has(r.err, store_dir().string())) << r;
  EXPECT_TRUE(snapshot(store_dir()) == before) << r;
}

}  // namespace
#endif
