// The `kiln` command as a user runs it: the built binary (KILN_CLI), each run on a fresh store
// directory (KILN_CACHE_DIR), its exit status, stdout and stderr. Rows are written through the
// store API; the GPU half of `kiln tune --matmul` runs where a CUDA device is present.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/blas_info.hpp"
#include "kiln/kiln.hpp"
#if KILN_WITH_SIMD
#include "core/simd_targets.hpp"
#endif
#include "kiln_command.hpp"
#include "temp_dir.hpp"
#if KILN_WITH_PERSISTENCE
#include "store/store.hpp"
#endif

namespace {

namespace fs = std::filesystem;

// Fresh directories for each test's store.
struct TempDir : kt::TempDir {
  TempDir() : kt::TempDir("kiln-cli") {}
};

using kt::has;
using kt::occurrences;
using kt::Outcome;

bool live(const char* feature) {
  for (const kiln::FeatureState& f : kiln::features())
    if (f.name == feature) return f.live;
  return false;
}

bool cuda_present() {
  for (const kiln::DeviceInfo& d : kiln::devices())
    if (d.present && d.name.rfind("cuda:", 0) == 0) return true;
  return false;
}

class CliTest : public ::testing::Test {
 protected:
  TempDir tmp_;
  fs::path store_dir() const { return tmp_.path() / "store"; }
#if KILN_WITH_PERSISTENCE
  kiln::store::Options store_options() const {
    kiln::store::Options o;
    o.dir = store_dir();
    return o;
  }
#endif

  // Runs the kiln binary with `args`, the store at store_dir() and kiln's switches unset
  // (`env` adds "NAME=VALUE" entries, KILN_CACHE_DIR among them); stdout and stderr go to files, so
  // nothing can block.
  Outcome kiln(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> envs;
    bool own_dir = false;
    for (const auto& e : env) own_dir |= e.rfind("KILN_CACHE_DIR=", 0) == 0;
    if (!own_dir) envs.push_back("KILN_CACHE_DIR=" + store_dir().string());
    envs.insert(envs.end(), env.begin(), env.end());
    return kt::run_kiln(tmp_.path(), args, envs);
  }
};

// The line of `text` that contains `what`, or "".
std::string line_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (has(line, what)) return line;
  return "";
}

#if KILN_WITH_PERSISTENCE
using kiln::store::Identity;
using kiln::store::Store;
using kiln::store::Table;

Identity test_identity(const std::string& device, const std::string& kiln_version) {
  Identity id{device, "9.0", "13.0", "13.0", "13.1.0", "13.0", kiln_version};
  return id;
}

TEST_F(CliTest, TuneListOnAnEmptyStore) {
  const Outcome r = kiln({"tune", "--list"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(r.out, "store: " + (store_dir() / "kiln.db").string() + " (persistent)")) << r;
  EXPECT_TRUE(has(r.out, "no entries")) << r;
}

TEST_F(CliTest, TuneListShowsRowsByIdentityAndMarksStaleOnes) {
  const Identity current = test_identity("Test GPU", kiln::version());
  const Identity old = test_identity("Test GPU", "0.0.0-old");
  const std::string source = "extern \"C\" __global__ void test_kernel(float* x) { x[0] = 1; }";
  {
    Store st(store_options());
    st.put_tune(current, "matmul f32 highest NN b1 m1024 n1024 k1024",
                {"v1", "test algo 7", "f32 [1, 1000, 1024] x [1, 1024, 1024] NN highest", 54.6e-6});
    st.put_kernel(current, {source, "sm_90", "-O3"}, std::vector<char>(1000, 'x'), "test_kernel");
    st.put_tune(old, "matmul f32 high TN b2 m64 n64 k64",
                {"v2", "old algo 3", "f32 [2, 64, 64] x [2, 64, 64] TN high", 2.5e-3});
  }
  const Outcome r = kiln({"tune", "--list"});
  ASSERT_EQ(r.status, 0) << r;
  const std::string stale = line_with(r.out, old.describe());
  EXPECT_TRUE(has(stale, ": stale: another device, version or build")) << r;
  const std::string cur = line_with(r.out, current.describe() + ":");
  ASSERT_FALSE(cur.empty()) << r;
  // Without a CUDA device kiln cannot tell whether "Test GPU" is this machine's device; with
  // one, it is not (a test identity), so the row is another device's.
  EXPECT_TRUE(has(cur, cuda_present() ? "stale: another device, version or build"
                                      : "not compared: no CUDA device present"))
      << r;
  for (const char* cell :
       {"matmul f32 highest NN b1 m1024 n1024 k1024", "test algo 7",
        "f32 [1, 1000, 1024] x [1, 1024, 1024] NN highest", "54.60us",
        "matmul f32 high TN b2 m64 n64 k64", "old algo 3", "2.50ms", "test_kernel", "1000 B",
        " sm_90 -O3", "tune rows (1):", "kernels (1):"}) {
    EXPECT_TRUE(has(r.out, cell)) << cell << "\n" << r;
  }
  // The rows sit under their identity: the old one's after its own header.
  EXPECT_GT(r.out.find("old algo 3"), r.out.find(old.describe())) << r;

  const Outcome k = kiln({"tune", "--list", "--table", "kernels"});
  ASSERT_EQ(k.status, 0) << k;
  EXPECT_TRUE(has(k.out, "test_kernel")) << k;
  EXPECT_FALSE(has(k.out, "test algo 7")) << k;
  EXPECT_FALSE(has(k.out, old.describe())) << k;  // it has no kernel rows
}

TEST_F(CliTest, TuneClearRemovesOneTableThenEverything) {
  const Identity id = test_identity("Test GPU", kiln::version());
  const Identity old = test_identity("Other GPU", "0.0.0-old");
  {
    Store st(store_options());
    st.put_tune(id, "key a", {"v", "algo a", "shape a", 1e-3});
    st.put_tune(old, "key b", {"v", "algo b", "shape b", 1e-3});
    st.put_kernel(id, {"source", "sm_90", ""}, std::vector<char>(2048, 'y'), "k");
  }
  const Outcome k = kiln({"tune", "--clear", "--table", "kernels"});
  ASSERT_EQ(k.status, 0) << k;
  EXPECT_TRUE(has(k.out, "removed 1 kernels (2.0 KiB) from " + (store_dir() / "kiln.db").string()))
      << k;
  {
    Store st(store_options());
    EXPECT_EQ(st.list(Table::kernels).size(), 0u);
    EXPECT_EQ(st.list(Table::tune).size(), 2u);
  }
  const Outcome all = kiln({"tune", "--clear"});
  ASSERT_EQ(all.status, 0) << all;
  EXPECT_TRUE(has(all.out, "removed 2 tune rows")) << all;
  EXPECT_TRUE(has(all.out, "and 0 kernels")) << all;
  {
    Store st(store_options());
    EXPECT_EQ(st.list(Table::tune).size(), 0u);
  }
  const Outcome l = kiln({"tune", "--list"});
  ASSERT_EQ(l.status, 0) << l;
  EXPECT_TRUE(has(l.out, "no entries")) << l;
}

TEST_F(CliTest, TuneListWorksWithPersistenceSwitchedOffAndSaysSo) {
  {
    Store st(store_options());
    st.put_tune(test_identity("Test GPU", kiln::version()), "key a", {"v", "algo a", "s", 1e-3});
  }
  const Outcome r = kiln({"tune", "--list"}, {"KILN_PERSISTENCE=0"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(r.out, "algo a")) << r;
  EXPECT_TRUE(has(r.out,
                  "persistence is off for kiln processes now (KILN_PERSISTENCE=0 in the "
                  "environment)"))
      << r;
}

TEST_F(CliTest, TuneClearFailsOnAStoreThatCannotBeUsed) {
  std::ofstream(tmp_.path() / "file") << "not a directory";
  const Outcome r =
      kiln({"tune", "--clear"}, {"KILN_CACHE_DIR=" + (tmp_.path() / "file" / "sub").string()});
  EXPECT_EQ(r.status, 2) << r;
  EXPECT_TRUE(has(r.err, "kiln: tune --clear: the store at")) << r;
  EXPECT_TRUE(has(r.err, "nothing removed")) << r;
}
#else
TEST_F(CliTest, TuneSaysPersistenceIsCompiledOut) {
  for (const char* action : {"--list", "--clear"}) {
    const Outcome r = kiln({"tune", action});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(has(r.err, std::string("kiln: tune ") + action +
                               ": persistence is compiled out (built with "
                               "-DKILN_PERSISTENCE=OFF)"))
        << r;
  }
}
#endif

TEST_F(CliTest, TuneRejectsBadArgumentsWithAMessage) {
  struct Case {
    std::vector<std::string> args;
    int status;  // 0: any non-zero (CLI11's codes)
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"tune", "--matmul", "1024x1024"}, 2, "'1024x1024' is not MxNxK"},
      {{"tune", "--matmul", "0x4x4"}, 2, "'0x4x4' has an extent below 1"},
      {{"tune", "--matmul", "4x4x4,,8x8x8"}, 2, "'' is not MxNxK"},
      {{"tune", "--matmul", "4x4x4x"}, 2, "'4x4x4x' is not MxNxK"},
      {{"tune", "--matmul", "4x-4x4"}, 2, "'4x-4x4' has an extent below 1"},
      {{"tune", "--matmul", "4x 4x4"}, 2, "'4x 4x4' is not MxNxK"},
      {{"tune", "--matmul", "99999999999999999999x1x1"}, 2, "has an extent out of range"},
      {{"tune"}, 2, "give exactly one of --matmul MxNxK[,...], --list, --clear (0 given)"},
      {{"tune", "--table", "tune"}, 2, "give exactly one of"},
      {{"tune", "--list", "--clear"}, 0, "--list excludes --clear"},
      {{"tune", "--matmul", "4x4x4", "--list"}, 0, "excludes"},
      {{"tune", "--list", "--table", "cubins"}, 0, "cubins not in"},
      {{"tune", "--matmul", "4x4x4", "--layout", "NX"}, 0, "NX not in"},
      {{"tune", "--matmul", "4x4x4", "--precision", "low"}, 0, "low not in"},
      {{"tune", "--matmul", "4x4x4", "--batch", "0"}, 0, "--batch"},
      {{"tune", "--precision", "high"}, 0, "requires --matmul"},
      {{"tune", "--exhaustive"}, 0, "requires --matmul"},
      {{"tune", "--list", "--exhaustive"}, 0, "requires --matmul"},
      {{"tune", "--matmul", "4x4x4", "--exhaustive=maybe"}, 0, "--exhaustive"},
      {{"tune", "--matmul", "4x4x4", "--dtype", "f64"}, 0, "f64 not in"},
      {{"tune", "--dtype", "bf16"}, 0, "requires --matmul"},
      {{"tune", "--bias"}, 0, "requires --matmul"},
      {{"tune", "--matmul", "4x4x4", "--dtype", "bf16", "--precision", "high"},
       2,
       "tune --precision high: a bf16 product has no float32 precision (it is for --dtype f32)"},
      {{"tune", "--matmul", "4x4x4", "--bias", "--batch", "2"},
       2,
       "tune --bias: a linear layer's product is one matrix (--batch 1), not 2"},
      {{"bench", "--processes", "0"}, 0, "--processes"},
  };
  for (const Case& c : cases) {
    const Outcome r = kiln(c.args);
    if (c.status == 0) {
      EXPECT_NE(r.status, 0) << r;
    } else {
      EXPECT_EQ(r.status, c.status) << r;
    }
    EXPECT_TRUE(has(r.err, c.message)) << "expected: " << c.message << "\n" << r;
  }
  if (live("autotune") && live("persistence")) {
    const Outcome r = kiln({"tune", "--matmul", "4x4x4", "--device", "cpu"});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(has(r.err, "tune --device 'cpu': expected cuda or cuda:N")) << r;
  }
}

TEST_F(CliTest, TuneMatmulSaysWhyItCannotTune) {
  const bool compiled = KILN_WITH_AUTOTUNE && KILN_WITH_PERSISTENCE;
  {
    const Outcome r = kiln({"tune", "--matmul", "64x64x64"}, {"KILN_AUTOTUNE=0"});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(
        has(r.err, KILN_WITH_AUTOTUNE
                       ? "tune --matmul: autotune is off (KILN_AUTOTUNE=0 in the environment)"
                       : "tune --matmul: autotune is off (built with -DKILN_AUTOTUNE=OFF)"))
        << r;
  }
  if (compiled) {
    const Outcome r = kiln({"tune", "--matmul", "64x64x64"}, {"KILN_PERSISTENCE=0"});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(has(r.err,
                    "tune --matmul: persistence is off (KILN_PERSISTENCE=0 in the "
                    "environment): the choices would not outlive kiln tune"))
        << r;
  }
  if (compiled && !cuda_present()) {
    // --exhaustive is accepted with --matmul: what stops it is the missing device.
    const Outcome e = kiln({"tune", "--matmul", "64x64x64", "--exhaustive"});
    EXPECT_EQ(e.status, 2) << e;
    EXPECT_TRUE(has(e.err, "kiln: tune --matmul on cuda:0: no CUDA device: ")) << e;
    const Outcome r = kiln({"tune", "--matmul", "64x64x64"});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(has(r.err, "kiln: tune --matmul on cuda:0: no CUDA device: ")) << r;
    const Outcome r1 = kiln({"tune", "--matmul", "64x64x64", "--device", "cuda:1"});
    EXPECT_EQ(r1.status, 2) << r1;
    EXPECT_TRUE(has(r1.err, "kiln: tune --matmul on cuda:1: no CUDA device: ")) << r1;
  }
}

#if KILN_WITH_AUTOTUNE && KILN_WITH_PERSISTENCE
// On a GPU: the first problem is tuned and stored, the second (same bucket) and a second run
// find it in the store, and --list shows it as the device's own.
TEST_F(CliTest, TuneMatmulFillsTheStoreOnTheGpu) {
  if (!cuda_present()) GTEST_SKIP() << "no CUDA device";
  const std::string key = "matmul f32 high NT b1 m256 n256 k256";
  const Outcome r = kiln(
      {"tune", "--matmul", "256x256x256,200x250x256", "--precision", "high", "--layout", "NT"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(line_with(r.out, key + ": "), ": tuned now (the call took ")) << r;
  EXPECT_TRUE(has(r.out, "(timed on f32 [1, 256, 256] x [1, 256, 256] NT high)")) << r;
  EXPECT_EQ(occurrences(r.out, key + ": already in the store: "), 1u) << r;

  const Outcome again = kiln({"tune", "--matmul", "256x256x256"});  // highest: another key
  ASSERT_EQ(again.status, 0) << again;
  EXPECT_TRUE(has(again.out, "matmul f32 highest NN b1 m256 n256 k256: tuned now")) << again;
  const Outcome third =
      kiln({"tune", "--matmul", "256x256x256", "--precision", "high", "--layout", "NT"});
  ASSERT_EQ(third.status, 0) << third;
  EXPECT_TRUE(has(third.out, key + ": already in the store: ")) << third;
  // --exhaustive tunes a stored key again (once per command: the second problem finds it).
  const Outcome exhaustive = kiln({"tune", "--matmul", "256x256x256,250x256x256", "--precision",
                                   "high", "--layout", "NT", "--exhaustive"});
  ASSERT_EQ(exhaustive.status, 0) << exhaustive;
  EXPECT_TRUE(has(exhaustive.out, key + ": tuned now (the call took ")) << exhaustive;
  EXPECT_EQ(occurrences(exhaustive.out, key + ": already in the store: "), 1u) << exhaustive;

  const Outcome l = kiln({"tune", "--list", "--table", "tune"});
  ASSERT_EQ(l.status, 0) << l;
  EXPECT_TRUE(has(l.out, ": current (cuda:0)")) << l;
  EXPECT_TRUE(has(l.out, key)) << l;
  EXPECT_TRUE(has(l.out, "tune rows (2):")) << l;

  // A bf16 linear layer's product (a transposed weight, the bias epilogue): the key a program's
  // nn::Linear looks up, so that a bf16 model can be tuned ahead of time.
  const Outcome half =
      kiln({"tune", "--matmul", "256x384x128", "--dtype", "bf16", "--layout", "NT", "--bias"});
  ASSERT_EQ(half.status, 0) << half;
  EXPECT_TRUE(has(half.out, "matmul bf16 highest NT b1 m256 n512 k128 bias: tuned now")) << half;
}
#endif

// ---- kiln doctor ----

constexpr bool kEveryFeatureCompiled = KILN_WITH_FUSION && KILN_WITH_AUTOTUNE &&
                                       KILN_WITH_PERSISTENCE && KILN_WITH_THREADS &&
                                       KILN_WITH_SIMD && (KILN_WITH_CUDNN || !KILN_WITH_CUDA);
constexpr bool kNoFeatureCompiled = !KILN_WITH_FUSION && !KILN_WITH_AUTOTUNE &&
                                    !KILN_WITH_PERSISTENCE && !KILN_WITH_THREADS && !KILN_WITH_SIMD;

TEST_F(CliTest, DoctorReportsDevicesFeaturesStoreCpuAndCuda) {
  const Outcome r = kiln({"doctor"});
  EXPECT_TRUE(r.status == 0 || r.status == 1) << r;
  for (const kiln::DeviceInfo& d : kiln::devices())
    EXPECT_TRUE(has(r.out, d.present ? d.backend_name : d.reason)) << d.name << "\n" << r;
  for (const kiln::FeatureState& f : kiln::features())
    EXPECT_TRUE(has(line_with(r.out, "  " + f.name + " "), f.why)) << f.name << "\n" << r;
  EXPECT_TRUE(has(r.out, "blas          ")) << r;
  EXPECT_TRUE(has(r.out, "blas threads  ")) << r;
  EXPECT_TRUE(has(r.out, "simd target   ")) << r;
  EXPECT_TRUE(has(r.out, "hardware threads (oneTBB)")) << r;
  EXPECT_TRUE(has(r.out, KILN_WITH_CUDA ? "cublasLt  " : "cuda:\n  not built")) << r;
  if (KILN_WITH_PERSISTENCE) {
    EXPECT_TRUE(has(r.out, (store_dir() / "kiln.db").string() + " (writable")) << r;
  } else {
    EXPECT_TRUE(has(r.out, "not built (-DKILN_PERSISTENCE=OFF)")) << r;
  }
}

// cuDNN's line in the cuda section: the library kiln would load, why it cannot (a path that does
// not exist; a finding only where a GPU would have used it), or that the switch has it off.
TEST_F(CliTest, DoctorSaysWhetherCudnnLoadsAndWhy) {
  if (!KILN_WITH_CUDA) GTEST_SKIP() << "built without CUDA";
  const Outcome absent = kiln({"doctor"}, {"KILN_CUDNN_LIBRARY=/no/such/libcudnn.so.9"});
  const Outcome off = kiln({"doctor"}, {"KILN_CUDNN=0"});
  if (!KILN_WITH_CUDNN) {
    EXPECT_TRUE(has(line_with(absent.out, "attention, loaded at run time"),
                    "off: built with -DKILN_CUDNN=OFF"))
        << absent;
    return;
  }
  EXPECT_TRUE(has(line_with(absent.out, "attention, loaded at run time"),
                  "absent: cannot load cuDNN (/no/such/libcudnn.so.9)"))
      << absent;
  EXPECT_EQ(has(absent.out, "[lost] cuDNN is absent"), cuda_present()) << absent;
  EXPECT_TRUE(has(line_with(off.out, "attention, loaded at run time"), "off: switched off")) << off;
  EXPECT_TRUE(has(off.out, "[off on purpose] cudnn is switched off (KILN_CUDNN=0")) << off;
}

// The acceptance test of issue 6: --strict passes on the release build, fails on the minimal one
// (every performance feature compiled out), whose plain doctor still exits 0 because the minimal
// preset acknowledges what it left out (KILN_QUIET_FEATURES).
TEST_F(CliTest, DoctorStrictPassesWithEveryFeatureAndFailsWithout) {
  const Outcome strict = kiln({"doctor", "--strict"});
  const Outcome plain = kiln({"doctor"});
  if (kEveryFeatureCompiled) {
    EXPECT_EQ(strict.status, 0) << strict;
    EXPECT_TRUE(has(strict.out, "none: every performance feature is live")) << strict;
    EXPECT_TRUE(has(strict.out, "\nhealthy\n")) << strict;
  }
  if (kNoFeatureCompiled) {
    EXPECT_EQ(strict.status, 1) << strict;
    EXPECT_EQ(plain.status, KILN_QUIET_FEATURES ? 0 : 1) << plain;
    const std::pair<const char*, const char*> options[] = {{"fusion", "KILN_FUSION"},
                                                           {"autotune", "KILN_AUTOTUNE"},
                                                           {"persistence", "KILN_PERSISTENCE"},
                                                           {"threads", "KILN_THREADS"},
                                                           {"simd", "KILN_SIMD"}};
    for (const auto& [f, option] : options) {
      EXPECT_TRUE(has(plain.out, fmt::format("{} is compiled out ({}=OFF)", f, option))) << plain;
      EXPECT_TRUE(has(plain.out, fmt::format("rebuild kiln with -D{}=ON", option))) << plain;
    }
    EXPECT_TRUE(has(plain.out, "about 3x slower on chain8")) << plain;
  }
}

TEST_F(CliTest, DoctorCountsARunTimeSwitchOnlyUnderStrict) {
  if (!KILN_WITH_FUSION) GTEST_SKIP() << "fusion is compiled out";
  const Outcome plain = kiln({"doctor"}, {"KILN_FUSION=0"});
  const Outcome strict = kiln({"doctor", "--strict"}, {"KILN_FUSION=0"});
  EXPECT_TRUE(
      has(plain.out, "[off on purpose] fusion is switched off (KILN_FUSION=0 in the environment)"))
      << plain;
  EXPECT_TRUE(has(plain.out, "fix: unset KILN_FUSION")) << plain;
  EXPECT_EQ(strict.status, 1) << strict;
  if (kEveryFeatureCompiled) {
    EXPECT_EQ(plain.status, 0) << plain;
  }
}

TEST_F(CliTest, DoctorFindsAStoreThatCannotBeWritten) {
  if (!KILN_WITH_PERSISTENCE) GTEST_SKIP() << "persistence is compiled out";
  std::ofstream(tmp_.path() / "file") << "not a directory";
  const std::string dir = (tmp_.path() / "file" / "sub").string();
  const Outcome r = kiln({"doctor"}, {"KILN_CACHE_DIR=" + dir});
  EXPECT_EQ(r.status, 1) << r;
  EXPECT_TRUE(has(r.out, "[lost] the store at " + dir + " is not writable")) << r;
  EXPECT_TRUE(has(r.out, "every process tunes its matmuls and compiles its kernels again")) << r;
}

TEST_F(CliTest, DoctorShowsASimdCap) {
#if KILN_WITH_SIMD
  const std::vector<std::string>& targets = kiln::detail::simd_targets();
  if (targets.size() < 2) GTEST_SKIP() << "this CPU has one SIMD target";
  const std::string& lower = targets[1];
  const Outcome r = kiln({"doctor"}, {"KILN_SIMD=" + lower});
  EXPECT_TRUE(has(r.out, "cpu<" + lower + ">")) << r;
  EXPECT_TRUE(has(r.out, fmt::format("Highway target {} on a CPU that has {}", lower, targets[0])))
      << r;
#else
  GTEST_SKIP() << "SIMD is compiled out";
#endif
}

// kiln loads its CBLAS after naming OpenBLAS's kernel set from the CPU's features (so a CPU model
// newer than the OpenBLAS build still gets wide kernels); the user's OPENBLAS_CORETYPE wins, and
// neither this process nor the programs kiln starts inherit kiln's choice.
TEST_F(CliTest, DoctorShowsWhoChoseTheBlasKernels) {
  if (kiln::cpu::blas_core().empty()) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  const bool user_set = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  EXPECT_EQ(kiln::cpu::blas_core_origin().rfind("chosen by kiln", 0) == 0, !user_set)
      << kiln::cpu::blas_core_origin();
  if (user_set) GTEST_SKIP() << "OPENBLAS_CORETYPE is set for the tests";
  const Outcome own = kiln({"doctor"}, {});
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(has(own.out, "(chosen by kiln from the CPU's features, as OPENBLAS_CORETYPE="))
        << own;
    EXPECT_FALSE(has(own.out, "OpenBLAS runs its")) << own;
  }
#endif
  const Outcome user = kiln({"doctor"}, {"OPENBLAS_CORETYPE=Haswell"});
  EXPECT_TRUE(has(user.out, "blas core     Haswell (OPENBLAS_CORETYPE=Haswell in the environment)"))
      << user;
}

// KILN_BLAS names the CBLAS to load; one that cannot be loaded fails CPU matmul with a clear
// error, which doctor reports.
TEST_F(CliTest, DoctorReportsABlasThatCannotBeLoaded) {
  const Outcome r = kiln({"doctor"}, {"KILN_BLAS=/nonexistent/libcblas.so"});
  EXPECT_EQ(r.status, 1) << r;
  EXPECT_TRUE(has(r.out, "none: cannot load /nonexistent/libcblas.so")) << r;
  EXPECT_TRUE(has(r.out,
                  "[lost] matmul: CPU matmul needs a CBLAS, and /nonexistent/libcblas.so "
                  "cannot be loaded"))
      << r;
}

// OpenBLAS made to run its SSE3 kernels, as it does on a CPU model newer than it knows.
TEST_F(CliTest, DoctorFindsABlasRunningKernelsNarrowerThanTheCpu) {
  const Outcome r = kiln({"doctor"}, {"OPENBLAS_CORETYPE=Prescott"});
  if (!has(r.out, "blas core     Prescott")) GTEST_SKIP() << "the BLAS is not OpenBLAS\n" << r;
  const std::string best = line_with(r.out, "cpu supports");
  if (!has(best, "supports  avx")) GTEST_SKIP() << "this CPU has no AVX2: Prescott fits it";
  EXPECT_EQ(r.status, 1) << r;
  EXPECT_TRUE(has(r.out, "[lost] OpenBLAS runs its Prescott kernels (no AVX2) on a CPU that has"))
      << r;
  EXPECT_TRUE(has(r.out, "fix: set OPENBLAS_CORETYPE=")) << r;
  const Outcome fixed = kiln({"doctor"}, {"OPENBLAS_CORETYPE=Haswell"});
  EXPECT_FALSE(has(fixed.out, "OpenBLAS runs its")) << fixed;
}

TEST_F(CliTest, DoctorJsonIsOneObject) {
  const Outcome r = kiln({"doctor", "--json"});
  ASSERT_FALSE(r.out.empty()) << r;
  EXPECT_EQ(r.out.front(), '{') << r;
  EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n") << r;
  for (const char* key : {"\"devices\": [", "\"features\": [", "\"cpu\": {", "\"cuda\": {",
                          "\"store\": {", "\"findings\": [", "\"healthy\": ", "\"exit_status\": "})
    EXPECT_EQ(occurrences(r.out, key), 1u) << key << "\n" << r;
  EXPECT_TRUE(kt::is_one_json_value(r.out)) << r;
}

// Every run-time switch refuses a value it does not know, listing the valid ones.
TEST_F(CliTest, UnknownSwitchValuesAreErrorsThatListTheValidOnes) {
  for (const char* var :
       {"KILN_FUSION", "KILN_AUTOTUNE", "KILN_PERSISTENCE", "KILN_SIMD", "KILN_CUDNN"}) {
    const Outcome r = kiln({"doctor"}, {std::string(var) + "=maybe"});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(has(r.err, std::string(var) + "=maybe: expected one of 0, 1, off, on")) << r;
  }
  const Outcome t = kiln({"doctor"}, {"KILN_THREADS=many"});
  EXPECT_EQ(t.status, 2) << t;
  EXPECT_TRUE(has(t.err, "KILN_THREADS=many: expected 0 (one thread) or a thread count")) << t;
#if KILN_WITH_SIMD
  const Outcome s = kiln({"doctor"}, {"KILN_SIMD=avx9"});
  EXPECT_EQ(s.status, 2) << s;
  EXPECT_TRUE(has(s.err, kiln::detail::simd_targets().front())) << s;
#endif
}

TEST_F(CliTest, BenchRunsTwoProcessesAndSummarisesTheirFirstCalls) {
  const Outcome r = kiln({"bench", "--device", "cpu", "--runs", "2"});
  ASSERT_EQ(r.status, 0) << r;
  const std::string p1 = line_with(r.out, "process 1 of 2 (store: ");
  const std::string p2 = line_with(r.out, "process 2 of 2 (store: ");
  if (live("persistence")) {
    EXPECT_EQ(
        p1, "process 1 of 2 (store: " + (store_dir() / "kiln.db").string() + ", 0 entries before)")
        << r;
    EXPECT_TRUE(has(p2, "entries before)")) << r;
  } else {
    EXPECT_TRUE(has(p1, "(store: off, built with -DKILN_PERSISTENCE=OFF)")) << r;
    EXPECT_TRUE(has(r.out, "every process compiled and tuned again")) << r;
  }
  EXPECT_LT(r.out.find(p1), r.out.find(p2)) << r;
  EXPECT_EQ(occurrences(r.out, "name = "), 2u) << r;
  EXPECT_EQ(occurrences(r.out, "chain8 2048x2048 f32: first "), 2u) << r;
  EXPECT_EQ(occurrences(r.out, "matmul 1024x1024 f32: first "), 2u) << r;
  EXPECT_TRUE(has(r.out, "first call, process 1 to 2:")) << r;
  for (const char* w : {"  cpu chain8 2048x2048 f32: ", "  cpu matmul 1024x1024 f32: "}) {
    EXPECT_TRUE(has(line_with(r.out, w), " -> ")) << w << "\n" << r;
  }
}

TEST_F(CliTest, BenchJsonIsOneObjectHoldingEachProcesssObject) {
  const Outcome r = kiln({"bench", "--device", "cpu", "--runs", "1", "--json"});
  ASSERT_EQ(r.status, 0) << r;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.front(), '{') << r;
  EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n") << r;
  EXPECT_EQ(occurrences(r.out, "\n"), 1u) << r;
  EXPECT_EQ(occurrences(r.out, "\"report\": {\"kiln_version\""), 2u) << r;
  EXPECT_TRUE(has(r.out, "{\"process\": 1, \"store_entries_before\": ")) << r;
  EXPECT_TRUE(has(r.out, "{\"process\": 2, \"store_entries_before\": ")) << r;
  EXPECT_TRUE(kt::is_one_json_value(r.out)) << r;
}

TEST_F(CliTest, BenchInOneProcessPrintsNoHeaders) {
  const Outcome r = kiln({"bench", "--device", "cpu", "--runs", "1", "--processes", "1"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_FALSE(has(r.out, "process 1 of")) << r;
  EXPECT_FALSE(has(r.out, "first call, process")) << r;
  EXPECT_EQ(occurrences(r.out, "name = "), 1u) << r;
}

// --train: the MLP step on the CPU, timed as the seed's workloads, with its peak memory; the
// GPT-2 rows are CUDA's only.
TEST_F(CliTest, BenchTrainTimesTheMlpStep) {
  const Outcome r =
      kiln({"bench", "--train", "--device", "cpu", "--runs", "2", "--processes", "1"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(r.out, "mlp step 128x784 f32: first ")) << r;
  EXPECT_TRUE(has(r.out, "(peak memory ")) << r;
  EXPECT_FALSE(has(r.out, "chain8")) << r;
  EXPECT_FALSE(has(r.out, "gpt2 step")) << r;
  const Outcome json =
      kiln({"bench", "--train", "--device", "cpu", "--runs", "2", "--processes", "1", "--json"});
  ASSERT_EQ(json.status, 0) << json;
  EXPECT_TRUE(has(json.out, "\"name\": \"mlp step\"")) << json;
  EXPECT_TRUE(has(json.out, "\"peak_bytes\": ")) << json;
  const Outcome bad = kiln({"bench", "--train", "--one-process", "--new-shape"});
  EXPECT_NE(bad.status, 0) << bad;
  EXPECT_TRUE(has(bad.err, "excludes")) << bad;
}

TEST_F(CliTest, BenchPassesOnAFailingProcesssStatus) {
  if (cuda_present()) GTEST_SKIP() << "needs a machine without a CUDA device";
  const Outcome r = kiln({"bench", "--device", "cuda", "--runs", "1"});
  EXPECT_EQ(r.status, 2) << r;
  EXPECT_TRUE(has(r.err, "kiln: bench --device cuda: cuda is absent: ")) << r;
  EXPECT_TRUE(has(r.err, "kiln: bench: process 1 of 2 exited with status 2")) << r;
  EXPECT_FALSE(has(r.out, "process 2 of 2")) << r;
}

}  // namespace
