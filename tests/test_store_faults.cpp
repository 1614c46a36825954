// The store's failure paths of issue 15: a file that is not kiln's is never written (byte for
// byte the same after kiln looked at it, no -wal or -shm made); a file with kiln's id and schema
// whose tables are not kiln's is moved aside and rebuilt; a read-only store (another user's
// directory or file, a read-only mount) is read and its writes skipped, with one warning that
// names the real reason; every write says whether it reached the file; a warning is told once per
// process; rows of another build never match, and the build revision follows the sources.
// Read-only cases run in tests/helpers/store_worker.cpp, as uid 65534 when the tests run as root
// (mode bits do not stop root) or in a mount namespace of its own.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln_command.hpp"
#include "store/location.hpp"
#include "store/sqlite.hpp"
#include "store/store.hpp"
#include "store_worker.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kiln::store::Identity;
using kiln::store::Mode;
using kiln::store::Store;
using kiln::store::Table;
namespace sql = kiln::store::sql;

// The identity tests/helpers/store_worker.cpp reads and writes with.
Identity worker_identity() {
  Identity id{"Worker GPU", "9.0", "13.0", "13.0", "13.1.0", "13.0"};
  return id;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every file of `dir` and its bytes: what "left as it is" must leave.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = slurp(e.path());
  return out;
}

// 16 lowercase hex digits, as build_revision() gives.
bool is_revision(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string names(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, bytes] : files) out += " " + name;
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  [" + s + "]\n";
  return out;
}

class StoreFailures : public ::testing::Test {
 protected:
  kt::TempDir tmp_{"kiln-store-faults"};
  std::vector<std::string> warnings_;

  fs::path dir(const std::string& name = "cache") const { return tmp_.path() / name; }
  fs::path db(const std::string& name = "cache") const {
    return dir(name) / kiln::store::kFileName;
  }
  kiln::store::Options options(const std::string& name = "cache") {
    return {.dir = dir(name), .warn = [this](const std::string& m) { warnings_.push_back(m); }};
  }
  // A closed store of `n` worker rows "row-<i>".
  void make_store(const std::string& name, int n) {
    Store s(options(name));
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE(s.put_tune(worker_identity(), fmt::format("row-{}", i), {"v", "n", "s", 1}));
  }
  // A database that `sql` makes, closed, in a fresh directory `name`.
  void make_database(const std::string& name, const char* sql_text) {
    fs::create_directories(dir(name));
    sql::Database::open(db(name).string(), 5000).exec(sql_text);
  }
};

// ---- a file that is not kiln's is never written ----

TEST_F(StoreFailures, AFileThatIsNotKilnsIsByteIdenticalAfterKilnLookedAtIt) {
  const std::vector<std::pair<std::string, const char*>> cases = {
      {"another application's",
       "PRAGMA application_id = 42; CREATE TABLE theirs (x); INSERT INTO theirs VALUES (1);"},
      {"another application's in WAL mode",
       "PRAGMA journal_mode = WAL; PRAGMA application_id = 42; CREATE TABLE theirs (x);"},
      {"one without an application id holding tables",
       "CREATE TABLE theirs (x); INSERT INTO theirs VALUES (2);"},
      {"one without an application id but with a user_version", "PRAGMA user_version = 7;"},
      {"a newer kiln's",
       "PRAGMA journal_mode = WAL; PRAGMA application_id = 1802071150; PRAGMA user_version = 99; "
       "CREATE TABLE kiln_tune (x);"},
  };
  int n = 0;
  for (const auto& [what, sql_text] : cases) {
    SCOPED_TRACE(what);
    const std::string name = "case" + std::to_string(n++);
    make_database(name, sql_text);
    const auto before = snapshot(dir(name));
    ASSERT_EQ(names(before), " kiln.db");
    warnings_.clear();
    {
      Store s(options(name));
      EXPECT_EQ(s.mode(), Mode::memory);
      ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
      EXPECT_NE(warnings_[0].find("left as it is"), std::string::npos) << warnings_[0];
      EXPECT_NE(warnings_[0].find(db(name).string()), std::string::npos) << warnings_[0];
      // Memory-only still works, and says that it does not reach the file.
      const auto w = s.put_tune(worker_identity(), "k", {"v", "n", "s", 1});
      EXPECT_FALSE(w);
      EXPECT_NE(w.why.find("left as it is"), std::string::npos) << w.why;
      EXPECT_TRUE(s.get_tune(worker_identity(), "k"));
      EXPECT_FALSE(s.clear());
    }
    const auto after = snapshot(dir(name));
    EXPECT_EQ(names(after), names(before));
    EXPECT_TRUE(after == before) << "the file's bytes changed";
  }
}

// ---- kiln's id and schema, tables that are not kiln's ----

TEST_F(StoreFailures, KilnsIdWithOtherTablesIsMovedAsideAndRebuilt) {
  const std::vector<std::pair<std::string, const char*>> damage = {
      {"a column missing", "ALTER TABLE kiln_tune DROP COLUMN shape"},
      {"a table missing", "DROP TABLE kiln_kernels"},
      {"a column of another type",
       "ALTER TABLE kiln_kernels DROP COLUMN label; ALTER TABLE kiln_kernels ADD COLUMN label "
       "INTEGER NOT NULL DEFAULT 0"},
      {"a column kiln does not make", "ALTER TABLE kiln_tune ADD COLUMN extra TEXT"},
  };
  int n = 0;
  for (const auto& [what, sql_text] : damage) {
    SCOPED_TRACE(what);
    const std::string name = "case" + std::to_string(n++);
    make_store(name, 5);
    sql::Database::open(db(name).string(), 5000).exec(sql_text);
    warnings_.clear();
    Store s(options(name));
    EXPECT_EQ(s.mode(), Mode::persistent) << s.why();
    ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
    EXPECT_NE(warnings_[0].find("has kiln's application_id and schema"), std::string::npos)
        << warnings_[0];
    EXPECT_NE(warnings_[0].find("but not kiln's tables"), std::string::npos) << warnings_[0];
    EXPECT_EQ(s.warnings(), warnings_);
    std::vector<fs::path> aside;
    for (const auto& e : fs::directory_iterator(dir(name)))
      if (e.path().filename().string().rfind("kiln.db.corrupt-", 0) == 0) aside.push_back(e.path());
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_NE(warnings_[0].find(aside[0].string()), std::string::npos) << warnings_[0];
    // A new file: the old rows are gone, new ones stay, and the next opening is quiet.
    EXPECT_FALSE(s.get_tune(worker_identity(), "row-0"));
    EXPECT_TRUE(s.put_tune(worker_identity(), "after", {"v", "n", "s", 1}));
    Store again(options(name));
    EXPECT_TRUE(again.get_tune(worker_identity(), "after"));
    EXPECT_TRUE(again.warnings().empty()) << joined(again.warnings());
    EXPECT_EQ(warnings_.size(), 1u) << joined(warnings_);
  }
}

TEST_F(StoreFailures, ASchemaOneStoreIsRebuiltWithoutAWarning) {
  // Schema 1 exactly as the kiln before the build column wrote it.
  make_database("cache", R"sql(
    CREATE TABLE kiln_tune (device TEXT NOT NULL, cc TEXT NOT NULL, driver TEXT NOT NULL,
      cuda TEXT NOT NULL, cublas TEXT NOT NULL, nvrtc TEXT NOT NULL, kiln TEXT NOT NULL,
      key TEXT NOT NULL, value BLOB NOT NULL, name TEXT NOT NULL, shape TEXT NOT NULL,
      seconds REAL NOT NULL, created INTEGER NOT NULL,
      PRIMARY KEY (device, cc, driver, cuda, cublas, nvrtc, kiln, key));
    INSERT INTO kiln_tune VALUES ('Worker GPU', '9.0', '13.0', '13.0', '13.1.0', '13.0', '0.1.0',
      'row-0', 'v', 'n', 's', 1, 0);
    PRAGMA application_id = 1802071150; PRAGMA user_version = 1;)sql");
  Store s(options());
  EXPECT_EQ(s.mode(), Mode::persistent) << s.why();
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
  EXPECT_FALSE(s.get_tune(worker_identity(), "row-0"));
  EXPECT_TRUE(s.put_tune(worker_identity(), "row-0", {"v", "n", "s", 1}));
  EXPECT_EQ(sql::Database::open(db().string(), 5000).query_int("PRAGMA user_version"),
            kiln::store::kSchemaVersion);
}

// ---- what a write says ----

TEST_F(StoreFailures, EveryWriteSaysWhetherItReachedTheFile) {
  auto o = options();
  o.max_bytes = 64 * 1024;  // a full disk, as SQLite sees one
  Store s(o);
  auto w = s.put_kernel(worker_identity(), {"src", "sm_90", ""}, std::vector<char>(100, 'k'));
  EXPECT_TRUE(w);
  EXPECT_TRUE(w.durable);
  EXPECT_EQ(w.why, "");
  int durable = 0;
  for (int i = 0; i < 100 && w; ++i) {
    w = s.put_tune(worker_identity(), fmt::format("row-{}", i),
                   {std::string(2000, 'x'), "n", "s", 1});
    durable += w.durable;
  }
  ASSERT_FALSE(w) << "64 KiB never filled";
  EXPECT_GT(durable, 5);
  EXPECT_NE(w.why.find(db().string()), std::string::npos) << w.why;
  EXPECT_NE(w.why.find("full"), std::string::npos) << w.why;
  // From now on every write is kept in memory only, and says so.
  EXPECT_EQ(s.mode(), Mode::memory);
  EXPECT_FALSE(s.put_tune(worker_identity(), "later", {"v", "n", "s", 1}));
  EXPECT_TRUE(s.get_tune(worker_identity(), "later"));
  EXPECT_FALSE(s.clear(Table::tune));
  EXPECT_EQ(s.file(), fs::path());
  // The file keeps every row that was durable.
  Store again(options());
  EXPECT_EQ(again.list(Table::tune).size(), static_cast<std::size_t>(durable));
  EXPECT_TRUE(again.clear());
  EXPECT_EQ(again.list(Table::tune).size(), 0u);
}

// ---- one warning per process ----

TEST_F(StoreFailures, TwoStoresOfOneDirectoryWarnOnceOnStderr) {
  make_database("cache", "PRAGMA application_id = 42; CREATE TABLE theirs (x);");
  ::testing::internal::CaptureStderr();
  kiln::store::Options o;
  o.dir = dir();  // and no warn: the default sink
  {
    Store first(o);
    Store second(o);
    // Each still knows what it met (kiln doctor asks).
    EXPECT_EQ(first.warnings().size(), 1u);
    EXPECT_EQ(second.warnings(), first.warnings());
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(kt::occurrences(err, "kiln[store]: warning:"), 1u) << err;
  EXPECT_NE(err.find(db().string() + " is not a kiln store"), std::string::npos) << err;
}

// ---- read-only stores ----

// Runs the worker's read-only mode on `d`: its lines "key: value" by key (warnings in order).
struct ReadOnlyRun {
  int code = 0;
  std::string out;
  std::string line(const std::string& key) const {
    const auto at = out.find(key + ": ");
    if (at == std::string::npos) return "";
    return out.substr(at + key.size() + 2, out.find('\n', at) - at - key.size() - 2);
  }
};

ReadOnlyRun read_only_run(const fs::path& d, const std::string& how) {
  auto [code, out] = kt::run_worker({"read-only", d.string(), how});
  return {code, out};
}

class ReadOnlyStore : public StoreFailures {
 protected:
  ReadOnlyRun r_;

  void SetUp() override {
    // uid 65534 must reach the directories: mkdtemp made the test's own 0700.
    fs::permissions(tmp_.path(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
  }
  void TearDown() override {
    // Writable again, so that the directory can be removed by a user who is not root.
    for (const auto& e : fs::recursive_directory_iterator(tmp_.path()))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
  }
  // The worker's read-only run on `name` after `how` (the test is skipped where `how` cannot be
  // arranged): in `mode`, finding `hits` rows, with one warning, which names `reason`. The
  // caller returns when IsSkipped() or HasFatalFailure().
  void run(const std::string& name, const std::string& how, const std::string& mode,
           const std::string& hits, const std::string& reason) {
    r_ = read_only_run(dir(name), how);
    if (r_.code == 5) GTEST_SKIP() << "cannot arrange '" << how << "' here: " << r_.out;
    ASSERT_EQ(r_.code, 0) << r_.out;
    EXPECT_EQ(r_.line("mode"), mode) << r_.out;
    EXPECT_EQ(r_.line("hits"), hits) << r_.out;
    EXPECT_EQ(kt::occurrences(r_.out, "warning: "), 1u) << r_.out;
    EXPECT_NE(r_.line("warning").find(reason), std::string::npos) << r_.out;
  }
  bool done() const { return IsSkipped() || HasFatalFailure(); }
};

constexpr auto kReadOnlyDir = fs::perms::owner_read | fs::perms::owner_exec |
                              fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec;  // 0555
constexpr auto kReadOnlyFile =
    fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read;  // 0444

TEST_F(ReadOnlyStore, ADirectoryOfMode555HoldingRowsIsReadWithOneWarning) {
  make_store("ro-dir", 10);
  const auto before = snapshot(dir("ro-dir"));
  fs::permissions(dir("ro-dir"), kReadOnlyDir);
  run("ro-dir", "nobody", "read-only", "10", "Permission denied");
  if (done()) return;
  EXPECT_NE(r_.line("write").find("not durable: " + db("ro-dir").string() + " cannot be written"),
            std::string::npos)
      << r_.out;
  EXPECT_TRUE(snapshot(dir("ro-dir")) == before) << names(snapshot(dir("ro-dir")));
}

TEST_F(ReadOnlyStore, AFileOfMode444IsReadAndNothingIsWrittenBesideIt) {
  make_store("ro-file", 10);
  const auto before = snapshot(dir("ro-file"));
  fs::permissions(db("ro-file"), kReadOnlyFile);
  fs::permissions(dir("ro-file"), fs::perms::all);  // the directory is anybody's to write
  run("ro-file", "nobody", "read-only", "10", db("ro-file").string() + ": Permission denied");
  if (done()) return;
  // Read through an immutable open: no -wal or -shm, although the directory would take them.
  EXPECT_EQ(names(snapshot(dir("ro-file"))), names(before));
}

TEST_F(ReadOnlyStore, AnEmptyDirectoryOfMode555IsReportedAsPermissionDenied) {
  fs::create_directories(dir("empty"));
  fs::permissions(dir("empty"), kReadOnlyDir);
  run("empty", "nobody", "memory-only", "0", dir("empty").string() + ": Permission denied");
  if (done()) return;
  EXPECT_EQ(r_.line("warning").find("No such file or directory"), std::string::npos) << r_.out;
  EXPECT_TRUE(fs::is_empty(dir("empty")));
}

TEST_F(ReadOnlyStore, AReadOnlyMountIsReadAndSaysSo) {
  make_store("mounted", 10);
  run("mounted", "ro-mount", "read-only", "10", "Read-only file system");
}

// ---- the build revision ----

TEST_F(StoreFailures, RowsOfAnotherBuildNeverMatch) {
  const std::string rev = kiln::store::build_revision();
  EXPECT_TRUE(is_revision(rev)) << rev;
  Identity other = worker_identity();
  other.build = "0123456789abcdef";
  ASSERT_NE(other.build, rev);
  Store s(options());
  EXPECT_EQ(worker_identity().build, rev);
  ASSERT_TRUE(s.put_tune(other, "k", {"theirs", "n", "s", 1}));
  ASSERT_TRUE(s.put_kernel(other, {"src", "sm_90", ""}, std::vector<char>(10, 'o')));
  EXPECT_FALSE(s.get_tune(worker_identity(), "k"));
  EXPECT_FALSE(s.get_kernel(worker_identity(), {"src", "sm_90", ""}));
  ASSERT_TRUE(s.put_tune(worker_identity(), "k", {"ours", "n", "s", 1}));
  EXPECT_EQ(s.get_tune(worker_identity(), "k")->value, "ours");
  EXPECT_EQ(s.get_tune(other, "k")->value, "theirs");
  EXPECT_EQ(s.usage().size(), 2u);
  EXPECT_NE(worker_identity().describe().find(", build " + rev), std::string::npos);
}

// The script that makes the revision (cmake/KilnSourceHash.cmake), run on a tree of its own.
class BuildRevision : public ::testing::Test {
 protected:
  kt::TempDir tmp_{"kiln-revision"};
  std::string revision() {
    const fs::path out = tmp_.path() / "revision.cpp";
    const std::string cmd =
        fmt::format("'{}' -DROOT='{}' -DOUT='{}' -P '{}'", KILN_CMAKE_COMMAND,
                    (tmp_.path() / "tree").string(), out.string(), KILN_SOURCE_HASH_SCRIPT);
    if (std::system(cmd.c_str()) != 0) return "failed: " + cmd;
    // The generated line: std::string build_revision() { return "<16 hex digits>"; }
    const std::string text = slurp(out);
    const std::string before = "return \"";
    const std::size_t at = text.find(before);
    return at == std::string::npos ? text : text.substr(at + before.size(), 16);
  }
  void write(const std::string& path, const std::string& text) {
    fs::create_directories((tmp_.path() / "tree" / path).parent_path());
    std::ofstream(tmp_.path() / "tree" / path) << text;
  }
};

TEST_F(BuildRevision, ChangesWithEveryKernelSourceAndOnlyThen) {
  if (!fs::exists(KILN_SOURCE_HASH_SCRIPT) || !fs::exists(KILN_CMAKE_COMMAND))
    GTEST_SKIP() << "no source tree or CMake here (a bundle on another machine)";
  write("src/cuda/kernel.cpp", "__global__ void k() {}");
  write("include/kiln/kiln.hpp", "// header");
  write("docs/store.md", "not a source");
  const std::string first = revision();
  ASSERT_TRUE(is_revision(first)) << first;
  EXPECT_EQ(revision(), first);
  write("docs/store.md", "still not a source");
  EXPECT_EQ(revision(), first);
  write("src/cuda/kernel.cpp", "__global__ void k() { /* changed */ }");
  const std::string changed = revision();
  EXPECT_NE(changed, first);
  write("src/tune/candidates.hpp", "// a new candidate set");
  EXPECT_NE(revision(), changed);
}

}  // namespace
