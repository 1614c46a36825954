// src/dispatch/diagnostics.hpp, the API the `kiln` command reads kiln's insides through: its
// answers agree with the parts it stands for, and a feature compiled out is answered at run time.
// (The command's output on top of it is tests/test_cli*.cpp's.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/blas_info.hpp"
#include "dispatch/diagnostics.hpp"
#include "kiln/kiln.hpp"
#include "temp_dir.hpp"
#if KILN_WITH_SIMD
#include "core/simd_targets.hpp"
#endif
#if KILN_WITH_PERSISTENCE
#include "store/store.hpp"
#endif

namespace {

namespace diag = kiln::diagnostics;

TEST(Diagnostics, BuildFactsFollowTheBuild) {
  EXPECT_EQ(diag::quiet_build(), KILN_QUIET_FEATURES != 0);
  EXPECT_EQ(diag::cuda_report().built, KILN_WITH_CUDA != 0);
  if (!KILN_WITH_CUDA) {
    EXPECT_TRUE(diag::cuda_report().runtime.empty());
  }
}

TEST(Diagnostics, CpuReportIsTheCpuBackendsFacts) {
  const diag::CpuReport r = diag::cpu_report();
#if KILN_WITH_SIMD
  EXPECT_EQ(r.simd_targets, kiln::detail::simd_targets());
#else
  EXPECT_TRUE(r.simd_targets.empty());
#endif
  EXPECT_EQ(r.blas, kiln::cpu::blas_library());
  EXPECT_EQ(r.blas_core, kiln::cpu::blas_core());
  EXPECT_GE(r.threads, 1);
  EXPECT_GE(r.blas_threads, 1);
}

TEST(Diagnostics, StoreModeNames) {
  EXPECT_STREQ(diag::store_mode_name(diag::StoreMode::closed), "");
  EXPECT_STREQ(diag::store_mode_name(diag::StoreMode::persistent), "persistent");
  EXPECT_STREQ(diag::store_mode_name(diag::StoreMode::read_only), "read-only");
  EXPECT_STREQ(diag::store_mode_name(diag::StoreMode::memory), "memory-only");
}

TEST(Diagnostics, StoreReportAtADirectoryCountsItsRows) {
  const kt::TempDir tmp("kiln-diagnostics");
#if KILN_WITH_PERSISTENCE
  {
    kiln::store::Options o;
    o.dir = tmp.path();
    kiln::store::Store st(o);
    const kiln::store::Identity id{"Test GPU", "9.0", "13.0", "13.0", "13.1.0", "13.0"};
    ASSERT_TRUE(st.put_tune(id, "k1", {"v", "cand", "1x2x3", 0.5}));
    ASSERT_TRUE(st.put_tune(id, "k2", {"vv", "cand", "1x2x3", 0.5}));
    ASSERT_TRUE(st.put_kernel(id, {"source", "sm_90", ""}, std::vector<char>(100, 'x'), "k"));
  }
  const diag::StoreReport r = diag::store_report_at(tmp.path().string());
  EXPECT_TRUE(r.location.built);
  EXPECT_EQ(r.location.mode, diag::StoreMode::persistent);
  EXPECT_EQ(r.location.file, (tmp.path() / "kiln.db").string());
  EXPECT_EQ(r.location.build, kiln::store::build_revision());
  ASSERT_EQ(r.usage.size(), 1u);
  EXPECT_EQ(r.usage[0].tune_rows, 2);
  EXPECT_EQ(r.usage[0].kernels, 1);
  EXPECT_EQ(r.usage[0].bytes, 1 + 2 + 100);
  EXPECT_NE(r.usage[0].identity.find("Test GPU"), std::string::npos);
  EXPECT_TRUE(r.usage[0].status.empty());  // not asked for
#else
  const diag::StoreReport r = diag::store_report_at(tmp.path().string());
  EXPECT_FALSE(r.location.built);
  EXPECT_EQ(r.location.mode, diag::StoreMode::closed);
  EXPECT_EQ(r.location.why, "built with -DKILN_PERSISTENCE=OFF");
  EXPECT_THROW(diag::list_store(diag::StoreTables::both), kiln::Error);
  EXPECT_THROW(diag::clear_store(diag::StoreTables::both), kiln::Error);
#endif
}

TEST(Diagnostics, MatmulTuningRefusesToTuneWhatCannotReachTheStore) {
  // Persistence switched off (so that the test's process opens no user's store): the session
  // refuses to start, saying so, or, in a build without CUDA autotune, saying that.
  const kiln::Config saved = kiln::config();
  kiln::Config c = saved;
  c.persistence = false;
  kiln::set_config(c);
  EXPECT_THROW(diag::MatmulTuning(0, false), kiln::Error);
  kiln::set_config(saved);
}

}  // namespace
