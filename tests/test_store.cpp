// The persistent store (src/store/): rows round-trip and survive the process, rows of another
// identity are never returned, and every fault of issue 5 is survived with one warning: several
// processes at once (real processes of tests/helpers/store_worker.cpp), a corrupt or truncated
// file, a directory that cannot be written, a full disk, a file of a newer schema or of another
// application. Values are fresh random bytes; the seed is printed on failure.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/config.hpp"
#include "store/location.hpp"
#include "store/sqlite.hpp"
#include "store/store.hpp"
#include "store_worker.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kiln::store::Identity;
using kiln::store::Store;
using kiln::store::Table;
using kiln::store::TuneResult;

Identity gpu() {
  Identity id;
  id.device = "NVIDIA H200";
  id.compute_capability = "9.0";
  id.driver = "13.0";
  id.cuda_runtime = "13.0";
  id.cublas = "13.1.0";
  id.nvrtc = "13.0";
  return id;
}

// The identity the worker processes write with (tests/helpers/store_worker.cpp).
Identity worker_identity() {
  Identity id = gpu();
  id.device = "Worker GPU";
  return id;
}

// Fresh directories for each test's store.
struct TempDir : kt::TempDir {
  TempDir() : kt::TempDir("kiln-store") {}
};

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  [" + s + "]\n";
  return out;
}

// The files of `dir` whose name starts with `prefix`.
std::vector<fs::path> files_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  return out;
}

class StoreTest : public ::testing::Test {
 protected:
  TempDir tmp_;
  std::vector<std::string> warnings_;
  std::uint64_t seed_ = std::random_device{}();
  std::mt19937_64 rng_{seed_};

  void SetUp() override { ::testing::Test::RecordProperty("seed", std::to_string(seed_)); }

  fs::path dir() const { return tmp_.path() / "cache"; }
  fs::path db() const { return dir() / kiln::store::kFileName; }
  kiln::store::Options options(const fs::path& d = {}) {
    return {.dir = d.empty() ? dir() : d,
            .warn = [this](const std::string& m) { warnings_.push_back(m); }};
  }
  std::string bytes(std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng_() & 0xff);
    return s;
  }
  std::vector<char> binary(std::size_t n) {
    std::string s = bytes(n);
    return {s.begin(), s.end()};
  }
  // `count` tune rows with values of `size` random bytes, keyed "key-<i>".
  std::vector<std::string> fill(Store& s, int count, std::size_t size) {
    std::vector<std::string> values;
    for (int i = 0; i < count; ++i) {
      values.push_back(bytes(size));
      s.put_tune(gpu(), "key-" + std::to_string(i), {values.back(), "cand", "8x8x8", 1e-5});
    }
    return values;
  }
  // Writes `bytes` over the file at `offset`.
  static void overwrite(const fs::path& file, std::size_t offset, const std::string& bytes) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f) << file;
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f) << file;
  }
};

// ---- processes ----

using kt::Child;
using kt::read_all;
using kt::spawn_worker;
using kt::wait_exit;

// Runs `n` writer processes on `dir` at once (they start together when their stdin closes);
// returns their exit codes.
std::vector<int> run_writers(const fs::path& dir, int first_id, int n, int own, int shared) {
  std::vector<Child> kids;
  for (int i = 0; i < n; ++i) {
    kids.push_back(spawn_worker({"write", dir.string(), std::to_string(first_id + i),
                                 std::to_string(own), std::to_string(shared)},
                                {}, true, false));
  }
  for (auto& k : kids) close(k.in);
  std::vector<int> codes;
  for (auto& k : kids) codes.push_back(wait_exit(k.pid));
  return codes;
}

// Runs the worker's "features" mode under `env`; returns its exit code and output.
std::pair<int, std::string> run_features(const std::vector<std::string>& env) {
  Child c = spawn_worker({"features"}, env, false, true);
  std::string out = read_all(c.out);
  return {wait_exit(c.pid), out};
}

// ---- where the store lives ----

TEST(StoreLocation, KilnCacheDirThenXdgThenHome) {
  using kiln::store::cache_directory;
  using kiln::store::Environment;
  EXPECT_EQ(cache_directory(Environment{"/k", "/x", "/h"}), fs::path("/k"));
  EXPECT_EQ(cache_directory(Environment{"rel/k", "/x", "/h"}), fs::path("rel/k"));
  EXPECT_EQ(cache_directory(Environment{"", "/x", "/h"}), fs::path("/x/kiln"));
  EXPECT_EQ(cache_directory(Environment{nullptr, "/x", "/h"}), fs::path("/x/kiln"));
  // The XDG rule: a relative XDG_CACHE_HOME is ignored.
  EXPECT_EQ(cache_directory(Environment{nullptr, "x", "/h"}), fs::path("/h/.cache/kiln"));
  EXPECT_EQ(cache_directory(Environment{nullptr, "", "/h"}), fs::path("/h/.cache/kiln"));
  EXPECT_EQ(cache_directory(Environment{nullptr, nullptr, "/h"}), fs::path("/h/.cache/kiln"));
  EXPECT_EQ(cache_directory(Environment{nullptr, nullptr, nullptr}), fs::path());
  EXPECT_EQ(cache_directory(Environment{nullptr, nullptr, ""}), fs::path());
}

TEST_F(StoreTest, CreatesItsDirectoryAndFile) {
  Store s(options());
  EXPECT_TRUE(s.persistent()) << s.why();
  EXPECT_EQ(s.directory(), dir());
  EXPECT_EQ(s.file(), db());
  EXPECT_TRUE(fs::exists(db()));
  EXPECT_TRUE(s.why().empty());
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

// ---- rows ----

TEST_F(StoreTest, TuneRowsRoundTripReplaceAndSurviveTheStore) {
  std::vector<std::string> values;
  {
    Store s(options());
    values = fill(s, 40, 1 + rng_() % 300);
    EXPECT_FALSE(s.get_tune(gpu(), "key-40").has_value());
    values[7] = bytes(64);
    s.put_tune(gpu(), "key-7", {values[7], "replaced", "1000x1024x1030 f32", 5.5e-5});
  }
  Store s(options());
  ASSERT_TRUE(s.persistent()) << s.why();
  for (int i = 0; i < 40; ++i) {
    auto got = s.get_tune(gpu(), "key-" + std::to_string(i));
    ASSERT_TRUE(got) << i;
    EXPECT_EQ(got->value, values[i]) << i;
  }
  auto seven = s.get_tune(gpu(), "key-7");
  ASSERT_TRUE(seven);
  EXPECT_EQ(seven->name, "replaced");
  EXPECT_EQ(seven->shape, "1000x1024x1030 f32");
  EXPECT_DOUBLE_EQ(seven->seconds, 5.5e-5);
  EXPECT_EQ(s.list(Table::tune).size(), 40u);
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreTest, KernelRowsRoundTripAndCompareTheWholeSource) {
  Store s(options());
  const std::string src_a = "extern \"C\" __global__ void a(float* x) { x[0] = 1; }";
  const std::string src_b = "extern \"C\" __global__ void b(float* x) { x[0] = 2; }";
  const auto bin_a = binary(1 + rng_() % 200000);
  const std::vector<char> empty;
  s.put_kernel(gpu(), {src_a, "sm_90", "--fmad=false -default-device"}, bin_a, "a.cu");
  s.put_kernel(gpu(), {src_b, "sm_90", "--fmad=false -default-device"}, empty, "b.cu");
  auto a = s.get_kernel(gpu(), {src_a, "sm_90", "--fmad=false -default-device"});
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, bin_a);
  auto b = s.get_kernel(gpu(), {src_b, "sm_90", "--fmad=false -default-device"});
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->empty());
  EXPECT_FALSE(s.get_kernel(gpu(), {src_a, "sm_80", "--fmad=false -default-device"}));
  EXPECT_FALSE(s.get_kernel(gpu(), {src_a, "sm_90", "--fmad=true -default-device"}));
  EXPECT_FALSE(s.get_kernel(gpu(), {src_a + " ", "sm_90", "--fmad=false -default-device"}));

  // A row whose hash matches but whose source differs (what a hash collision looks like) is a
  // miss, never another source's binary.
  {
    auto raw = kiln::store::sql::Database::open(db().string(), 5000);
    raw.exec("UPDATE kiln_kernels SET source = source || '// other'");
  }
  EXPECT_FALSE(s.get_kernel(gpu(), {src_a, "sm_90", "--fmad=false -default-device"}));
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreTest, RowsOfAnotherIdentityAreIgnored) {
  const std::string value = bytes(64);
  const std::vector<char> cubin = binary(4096);
  const std::string source = "__global__ void k() {}";
  {
    Store s(options());
    s.put_tune(gpu(), "matmul f32 1024", {value, "algo 3", "1024x1024x1024", 5e-5});
    s.put_kernel(gpu(), {source, "sm_90", "-O3"}, cubin, "k.cu");
  }
  // Another process, another device or version: one field differs at a time.
  Store s(options());
  std::vector<Identity> others;
  for (int field = 0; field < 7; ++field) {
    Identity id = gpu();
    std::string* f[] = {
        &id.device, &id.compute_capability, &id.driver, &id.cuda_runtime, &id.cublas,
        &id.nvrtc,  &id.kiln_version};
    *f[field] += ".1";
    others.push_back(id);
  }
  for (const Identity& id : others) {
    SCOPED_TRACE(id.describe());
    EXPECT_FALSE(s.get_tune(id, "matmul f32 1024"));
    EXPECT_FALSE(s.get_kernel(id, {source, "sm_90", "-O3"}));
    EXPECT_TRUE(s.list(Table::tune, id).empty());
    EXPECT_TRUE(s.list(Table::kernels, id).empty());
  }
  // Writing the same key under another kiln version leaves this version's row as it was.
  Identity newer = gpu();
  newer.kiln_version = "99.0.0";
  s.put_tune(newer, "matmul f32 1024", {"other", "algo 9", "1024x1024x1024", 1e-5});
  auto mine = s.get_tune(gpu(), "matmul f32 1024");
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->value, value);
  EXPECT_EQ(mine->name, "algo 3");
  EXPECT_EQ(s.get_tune(newer, "matmul f32 1024")->value, "other");
  auto kernel = s.get_kernel(gpu(), {source, "sm_90", "-O3"});
  ASSERT_TRUE(kernel);
  EXPECT_EQ(*kernel, cubin);

  const auto usage = s.usage();
  ASSERT_EQ(usage.size(), 2u);
  for (const auto& u : usage) {
    if (u.identity == gpu()) {
      EXPECT_EQ(u.tune_entries, 1);
      EXPECT_EQ(u.kernel_entries, 1);
      EXPECT_EQ(u.bytes, 64 + 4096);
    } else {
      EXPECT_EQ(u.identity, newer);
      EXPECT_EQ(u.tune_entries, 1);
      EXPECT_EQ(u.kernel_entries, 0);
      EXPECT_EQ(u.bytes, 5);
    }
  }
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreTest, ListUsageAndClear) {
  Store s(options());
  const auto before = std::time(nullptr);
  s.put_tune(gpu(), "b", {bytes(10), "cand b", "shape b", 2.0});
  s.put_tune(gpu(), "a", {bytes(20), "cand a", "shape a", 1.0});
  for (int i = 0; i < 20; ++i) {
    s.put_kernel(gpu(), {"src " + std::to_string(i), "sm_90", "-O3"}, binary(100000),
                 "kernel " + std::to_string(i));
  }
  const auto tune = s.list(Table::tune, gpu());
  ASSERT_EQ(tune.size(), 2u);
  EXPECT_EQ(tune[0].key, "a");  // ordered by key
  EXPECT_EQ(tune[0].name, "cand a");
  EXPECT_EQ(tune[0].shape, "shape a");
  EXPECT_DOUBLE_EQ(tune[0].seconds, 1.0);
  EXPECT_EQ(tune[0].bytes, 20);
  EXPECT_EQ(tune[0].table, Table::tune);
  EXPECT_EQ(tune[0].identity, gpu());
  EXPECT_GE(tune[0].created, before);
  EXPECT_LE(tune[0].created, std::time(nullptr));
  EXPECT_EQ(tune[1].key, "b");
  const auto kernels = s.list(Table::kernels);
  ASSERT_EQ(kernels.size(), 20u);
  EXPECT_EQ(kernels[0].bytes, 100000);
  EXPECT_NE(kernels[0].key.find(" sm_90 -O3"), std::string::npos) << kernels[0].key;
  EXPECT_EQ(kernels[0].name.rfind("kernel ", 0), 0u);
  ASSERT_EQ(s.usage().size(), 1u);
  EXPECT_EQ(s.usage()[0].bytes, 30 + 20 * 100000);

  s.clear(Table::tune);
  EXPECT_TRUE(s.list(Table::tune).empty());
  EXPECT_EQ(s.list(Table::kernels).size(), 20u);
  s.put_tune(gpu(), "c", {"x", "c", "c", 0});
  s.clear();
  EXPECT_TRUE(s.list(Table::tune).empty());
  EXPECT_TRUE(s.list(Table::kernels).empty());
  EXPECT_TRUE(s.usage().empty());
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreTest, ClearGivesTheSpaceBack) {
  {
    Store s(options());
    for (int i = 0; i < 30; ++i)
      s.put_kernel(gpu(), {"src " + std::to_string(i), "sm_90", ""}, binary(100000));
  }
  const auto full = fs::file_size(db());
  EXPECT_GT(full, 3000000u);
  {
    Store s(options());
    s.clear();
  }
  EXPECT_LT(fs::file_size(db()), full / 20);
}

TEST_F(StoreTest, ANewerSchemaIsLeftAloneAndUsedFromMemory) {
  {
    Store s(options());
    fill(s, 3, 16);
  }
  kiln::store::sql::Database::open(db().string(), 5000).exec("PRAGMA user_version = 99");
  {
    Store s(options());
    EXPECT_FALSE(s.persistent());
    EXPECT_EQ(s.file(), fs::path());
    ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
    EXPECT_NE(warnings_[0].find("newer kiln (schema 99"), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[0].find(db().string()), std::string::npos) << warnings_[0];
    EXPECT_NE(s.why().find("newer"), std::string::npos) << s.why();
    // Memory-only still works for this process.
    EXPECT_FALSE(s.get_tune(gpu(), "key-0"));
    s.put_tune(gpu(), "mem", {"v", "n", "s", 1});
    EXPECT_EQ(s.get_tune(gpu(), "mem")->value, "v");
    EXPECT_EQ(warnings_.size(), 1u) << joined(warnings_);
  }
  auto raw = kiln::store::sql::Database::open(db().string(), 5000);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), 99);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM kiln_tune"), 3);
}

TEST_F(StoreTest, AnotherApplicationsDatabaseIsLeftAlone) {
  fs::create_directories(dir());
  kiln::store::sql::Database::open(db().string(), 5000)
      .exec("PRAGMA application_id = 42; CREATE TABLE theirs (x); INSERT INTO theirs VALUES (1);");
  {
    Store s(options());
    EXPECT_FALSE(s.persistent());
    ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
    EXPECT_NE(warnings_[0].find("is not a kiln store"), std::string::npos) << warnings_[0];
    s.put_tune(gpu(), "k", {"v", "n", "s", 1});
    EXPECT_TRUE(s.get_tune(gpu(), "k"));
  }
  auto raw = kiln::store::sql::Database::open(db().string(), 5000);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM theirs"), 1);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'kiln%'"), 0);
}

TEST_F(StoreTest, AnOlderSchemaIsRebuiltWithoutAWarning) {
  {
    Store s(options());
    fill(s, 3, 16);
  }
  // Schema 0: what a file of a kiln before this schema would say.
  kiln::store::sql::Database::open(db().string(), 5000).exec("PRAGMA user_version = 0");
  Store s(options());
  EXPECT_TRUE(s.persistent()) << s.why();
  EXPECT_FALSE(s.get_tune(gpu(), "key-0"));
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
  auto raw = kiln::store::sql::Database::open(db().string(), 5000);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), kiln::store::kSchemaVersion);
}

// ---- a corrupt or truncated file ----

class StoreFaults : public StoreTest {
 protected:
  // After the damage: the file was moved aside once, a new one works, one warning said so.
  void expect_rebuilt(Store& s) {
    EXPECT_TRUE(s.persistent()) << s.why();
    ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
    EXPECT_NE(warnings_[0].find("was corrupt"), std::string::npos) << warnings_[0];
    const auto aside = files_starting(dir(), "kiln.db.corrupt-");
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_NE(warnings_[0].find(aside[0].string()), std::string::npos) << warnings_[0];
    EXPECT_FALSE(s.get_tune(gpu(), "key-1"));
    const std::string v = bytes(100);
    s.put_tune(gpu(), "after", {v, "n", "s", 1});
    EXPECT_EQ(s.get_tune(gpu(), "after")->value, v);
    Store again(options());
    EXPECT_TRUE(again.persistent());
    ASSERT_TRUE(again.get_tune(gpu(), "after"));
    EXPECT_EQ(again.get_tune(gpu(), "after")->value, v);
    EXPECT_EQ(warnings_.size(), 1u) << joined(warnings_);
  }
  // A closed store of many pages (closing the last connection folds the WAL into the file).
  void make_file() {
    Store s(options());
    fill(s, 300, 1000);
  }
};

TEST_F(StoreFaults, AGarbageHeaderIsMovedAsideAndRebuilt) {
  make_file();
  overwrite(db(), 0, bytes(100));
  Store s(options());
  expect_rebuilt(s);
}

TEST_F(StoreFaults, ATruncatedFileIsMovedAsideAndRebuilt) {
  make_file();
  const auto size = fs::file_size(db());
  ASSERT_GT(size, 100000u);
  fs::resize_file(db(), 3 * 4096 + 1234);
  Store s(options());
  expect_rebuilt(s);
}

TEST_F(StoreFaults, CorruptPagesFoundOnUseAreMovedAsideAndRebuilt) {
  make_file();
  // Page 1 (the header and the schema) stays intact, so the file opens; every other page is
  // garbage, which the first lookup meets.
  const auto size = fs::file_size(db());
  overwrite(db(), 4096, bytes(size - 4096));
  Store s(options());
  EXPECT_FALSE(s.get_tune(gpu(), "key-0"));
  expect_rebuilt(s);
}

// ---- a directory that cannot be written ----

TEST_F(StoreFaults, AnUnwritableDirectoryIsMemoryOnlyWithOneWarningNamingIt) {
  // Paths that even root cannot create: under a regular file, inside /proc, and /proc/self
  // itself (it exists, but no file can be made in it).
  const fs::path regular = tmp_.path() / "a-file";
  std::ofstream(regular) << "x";
  const std::vector<fs::path> dirs = {regular / "kiln", "/proc/kiln-store-test", "/proc/self"};
  for (const fs::path& d : dirs) {
    SCOPED_TRACE(d.string());
    warnings_.clear();
    Store s(options(d));
    EXPECT_FALSE(s.persistent());
    EXPECT_EQ(s.directory(), d);
    EXPECT_EQ(s.file(), fs::path());
    ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
    EXPECT_NE(warnings_[0].find(d.string()), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[0].find("in memory"), std::string::npos) << warnings_[0];
    EXPECT_NE(s.why().find(d.string()), std::string::npos) << s.why();
    const std::string v = bytes(50);
    s.put_tune(gpu(), "k", {v, "n", "s", 1});
    s.put_kernel(gpu(), {"src", "sm_90", ""}, binary(10));
    EXPECT_EQ(s.get_tune(gpu(), "k")->value, v);
    EXPECT_TRUE(s.get_kernel(gpu(), {"src", "sm_90", ""}));
    EXPECT_EQ(s.list(Table::tune).size(), 1u);
    EXPECT_EQ(warnings_.size(), 1u) << joined(warnings_);
  }
  EXPECT_FALSE(fs::exists("/proc/kiln-store-test"));
}

TEST_F(StoreFaults, WarningsGoToStderrOnceByDefault) {
  const fs::path regular = tmp_.path() / "a-file";
  std::ofstream(regular) << "x";
  ::testing::internal::CaptureStderr();
  {
    kiln::store::Options o;
    o.dir = regular / "kiln";  // and no warn: the default sink
    Store s(o);
    s.put_tune(gpu(), "k", {"v", "n", "s", 1});
    s.put_tune(gpu(), "k2", {"v", "n", "s", 1});
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("kiln[store]: warning: cannot create the store directory " +
                     (regular / "kiln").string()),
            0u)
      << err;
  EXPECT_EQ(err.find("kiln[store]: warning:", 1), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// ---- a full disk ----

TEST_F(StoreFaults, AFullDiskDropsTheWriteWarnsOnceAndGoesOn) {
  // max_bytes caps the file as a full disk would: SQLite answers SQLITE_FULL.
  std::vector<std::string> values;
  {
    auto o = options();
    o.max_bytes = 64 * 1024;
    Store s(o);
    ASSERT_TRUE(s.persistent());
    for (int i = 0; i < 100; ++i) {
      values.push_back(bytes(2000));
      s.put_tune(gpu(), "key-" + std::to_string(i), {values.back(), "n", "s", 1});
      auto got = s.get_tune(gpu(), "key-" + std::to_string(i));
      ASSERT_TRUE(got) << i;
      EXPECT_EQ(got->value, values.back()) << i;
    }
    EXPECT_FALSE(s.persistent());
    ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
    EXPECT_NE(warnings_[0].find("full"), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[0].find(db().string()), std::string::npos) << warnings_[0];
    // What was on disk before came along: every row is still found in memory.
    for (int i = 0; i < 100; ++i)
      EXPECT_EQ(s.get_tune(gpu(), "key-" + std::to_string(i))->value, values[i]) << i;
  }
  // On disk: the rows written before the disk filled, whole, and none after.
  Store s(options());
  ASSERT_TRUE(s.persistent());
  int on_disk = 0;
  while (on_disk < 100 && s.get_tune(gpu(), "key-" + std::to_string(on_disk))) {
    EXPECT_EQ(s.get_tune(gpu(), "key-" + std::to_string(on_disk))->value, values[on_disk]);
    ++on_disk;
  }
  EXPECT_GT(on_disk, 5);
  EXPECT_LT(on_disk, 100);
  EXPECT_EQ(s.list(Table::tune).size(), static_cast<std::size_t>(on_disk));
  EXPECT_EQ(warnings_.size(), 1u) << joined(warnings_);
}

TEST_F(StoreFaults, AFullTmpfsDropsTheWriteWarnsOnceAndGoesOn) {
  // A real full disk: a tiny tmpfs, mounted by the worker in a mount namespace of its own.
  fs::create_directories(dir());
  Child c = spawn_worker({"full-tmpfs", dir().string()}, {}, false, true);
  const std::string out = read_all(c.out);
  const int code = wait_exit(c.pid);
  if (code == 5) GTEST_SKIP() << "no tmpfs can be mounted here (needs root)";
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("rows on disk: "), std::string::npos) << out;
}

// ---- several threads and processes ----

TEST_F(StoreTest, ThreadsShareOneStore) {
  Store s(options());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const std::string key = std::to_string(t) + "-" + std::to_string(i);
        s.put_tune(gpu(), key, {key, "n", "s", 1});
        auto got = s.get_tune(gpu(), key);
        bad += !got || got->value != key;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(s.list(Table::tune).size(), 400u);
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreTest, ABusyDatabaseIsWaitedFor) {
  Store s(options());
  auto raw = kiln::store::sql::Database::open(db().string(), 5000);
  raw.exec("BEGIN IMMEDIATE");  // another writer holds the lock for 300 ms
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    raw.exec("COMMIT");
  });
  const auto t0 = std::chrono::steady_clock::now();
  s.put_tune(gpu(), "k", {"v", "n", "s", 1});
  const auto waited = std::chrono::steady_clock::now() - t0;
  release.join();
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_EQ(s.get_tune(gpu(), "k")->value, "v");
  EXPECT_TRUE(s.persistent());
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreTest, ALockHeldTooLongDropsTheWriteWithOneWarning) {
  auto o = options();
  o.busy_wait = std::chrono::milliseconds(100);
  Store s(o);
  auto raw = kiln::store::sql::Database::open(db().string(), 5000);
  raw.exec("BEGIN IMMEDIATE");
  s.put_tune(gpu(), "k1", {"v", "n", "s", 1});
  s.put_tune(gpu(), "k2", {"v", "n", "s", 1});
  raw.exec("COMMIT");
  EXPECT_FALSE(s.get_tune(gpu(), "k1"));
  ASSERT_EQ(warnings_.size(), 1u) << joined(warnings_);
  EXPECT_NE(warnings_[0].find("dropped"), std::string::npos) << warnings_[0];
  // Once the lock is gone, writes reach the file again.
  EXPECT_TRUE(s.persistent());
  s.put_tune(gpu(), "k3", {"v", "n", "s", 1});
  EXPECT_TRUE(Store(options()).get_tune(gpu(), "k3"));
}

TEST_F(StoreTest, ProcessesWritingSameAndDifferentKeysLoseNoRow) {
  constexpr int kWorkers = 8, kOwn = 120, kShared = 16;
  // First on a directory that does not exist yet (every process races to create the file and
  // its tables), then on the file they left.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto codes = run_writers(dir(), round * kWorkers, kWorkers, kOwn, kShared);
    for (int i = 0; i < kWorkers; ++i) EXPECT_EQ(codes[i], 0) << "worker " << i;
  }
  Store s(options());
  const Identity id = worker_identity();
  const auto tune = s.list(Table::tune, id);
  EXPECT_EQ(tune.size(), static_cast<std::size_t>(2 * kWorkers * kOwn + kShared));
  for (int w = 0; w < 2 * kWorkers; ++w) {
    for (int i = 0; i < kOwn; ++i) {
      auto got = s.get_tune(id, fmt::format("w{}-{}", w, i));
      ASSERT_TRUE(got) << w << " " << i;
      // As the worker writes it: binary, with a NUL and a high byte.
      EXPECT_EQ(got->value, fmt::format("v{}", w) + std::string("\0\xff", 2) + std::to_string(i));
    }
  }
  std::set<std::string> writers;
  for (int i = 0; i < kShared; ++i) {
    auto got = s.get_tune(id, "shared-" + std::to_string(i));
    ASSERT_TRUE(got) << i;
    writers.insert(got->value);
  }
  for (const auto& v : writers) EXPECT_EQ(v.rfind("from ", 0), 0u) << v;
  EXPECT_EQ(s.list(Table::kernels, id).size(), static_cast<std::size_t>(2 * kWorkers * kOwn / 4));
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

TEST_F(StoreFaults, ProcessesMeetingOneCorruptFileMoveItAsideOnce) {
  constexpr int kWorkers = 6, kOwn = 20;
  make_file();
  overwrite(db(), 0, bytes(100));
  const auto codes = run_writers(dir(), 0, kWorkers, kOwn, 0);
  int movers = 0;
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_TRUE(codes[i] == 0 || codes[i] == 3) << "worker " << i << " exit " << codes[i];
    movers += codes[i] == 3;
  }
  EXPECT_EQ(movers, 1);
  EXPECT_EQ(files_starting(dir(), "kiln.db.corrupt-").size(), 1u);
  Store s(options());
  EXPECT_EQ(s.list(Table::tune, worker_identity()).size(),
            static_cast<std::size_t>(kWorkers * kOwn));
  EXPECT_TRUE(warnings_.empty()) << joined(warnings_);
}

// ---- the build option and the run-time switch ----

bool feature_line(const std::string& out, const std::string& line) {
  return ("\n" + out).find("\n" + line + "\n") != std::string::npos;
}

TEST(StoreSwitch, SetConfigTurnsTheProcessStoreOff) {
  const kiln::Config saved = kiln::config();
  kiln::Config c = saved;
  c.persistence = false;
  kiln::set_config(c);
  EXPECT_EQ(kiln::store::process_store(), nullptr);
  bool seen = false;
  for (const auto& f : kiln::features()) {
    if (f.name != "persistence") continue;
    seen = true;
    EXPECT_TRUE(f.compiled);
    EXPECT_FALSE(f.live);
    EXPECT_EQ(f.why, "switched off by kiln::set_config");
  }
  EXPECT_TRUE(seen);
  kiln::set_config(saved);
}

TEST(StoreSwitch, TheEnvironmentChoosesTheSwitchAndTheDirectory) {
  TempDir tmp;
  const std::string cache = (tmp.path() / "c").string();
  {
    auto [code, out] = run_features({"KILN_PERSISTENCE=0", "KILN_CACHE_DIR=" + cache});
    EXPECT_EQ(code, 0) << out;
    EXPECT_TRUE(feature_line(out, "persistence 1 0 KILN_PERSISTENCE=0 in the environment")) << out;
    EXPECT_TRUE(feature_line(out, "store: none")) << out;
    EXPECT_FALSE(fs::exists(cache));
  }
  {
    auto [code, out] = run_features({"KILN_PERSISTENCE=on", "KILN_CACHE_DIR=" + cache});
    EXPECT_EQ(code, 0) << out;
    EXPECT_TRUE(feature_line(out, "persistence 1 1 on")) << out;
    EXPECT_TRUE(feature_line(out, "store: " + cache + "/kiln.db")) << out;
  }
  {
    auto [code, out] = run_features(
        {"KILN_PERSISTENCE", "KILN_CACHE_DIR", "XDG_CACHE_HOME=" + tmp.path().string()});
    EXPECT_EQ(code, 0) << out;
    EXPECT_TRUE(feature_line(out, "store: " + (tmp.path() / "kiln" / "kiln.db").string())) << out;
  }
  {
    auto [code, out] = run_features({"KILN_PERSISTENCE=maybe", "KILN_CACHE_DIR=" + cache});
    EXPECT_EQ(code, 2) << out;
    EXPECT_NE(out.find("KILN_PERSISTENCE=maybe: expected one of 0, 1, off, on"), std::string::npos)
        << out;
  }
}

}  // namespace
