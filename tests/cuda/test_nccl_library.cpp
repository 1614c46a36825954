// NCCL loaded at run time (src/cuda/nccl_library.hpp): a path that does not load is a DistError
// that says what was tried and how to point kiln at NCCL, and is not remembered, so the next try
// with a good path loads it. Needs no GPU: this machine's CUDA toolkit ships libnccl.so.2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "cuda/nccl_library.hpp"
#include "kiln/error.hpp"

namespace {

TEST(NcclLibrary, ABadPathSaysWhatWasTriedThenTheDefaultLoads) {
  const char* old = std::getenv("KILN_NCCL_LIBRARY");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("KILN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  try {
    kiln::cuda::nccl();
    // Loaded by an earlier test of this process: nothing to learn about a bad path here.
  } catch (const kiln::DistError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/libnccl.so.2"), std::string::npos) << what;
    EXPECT_NE(what.find("KILN_NCCL_LIBRARY"), std::string::npos) << what;
  }
  if (saved)
    ::setenv("KILN_NCCL_LIBRARY", saved->c_str(), 1);
  else
    ::unsetenv("KILN_NCCL_LIBRARY");
  try {
    const kiln::cuda::NcclLibrary& n = kiln::cuda::nccl();
    EXPECT_EQ(n.version.rfind("2.", 0), 0u) << n.version;
    EXPECT_NE(n.AllReduce, nullptr);
  } catch (const kiln::DistError& e) {
    GTEST_SKIP() << "no libnccl.so.2 where the loader looks: " << e.what();
  }
}

}  // namespace
