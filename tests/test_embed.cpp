// Files embedded at build time (cmake/KilnEmbed.cmake): the string constant holds the file's
// bytes, every one of them, so that the CUDA C kept in src/ir/cuda_prelude.cuh and
// src/cuda/kernels/*.cuh reaches NVRTC as written.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "embed/data/embed_every_byte.bin.hpp"
#include "ir/cuda_codegen.hpp"
#if KILN_WITH_CUDA
#include "cuda/random_source.hpp"
#endif

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// tests/data/embed_every_byte.bin: the 256 byte values in order, then what could end or change a
// string literal or a line: CR LF, `)"`, a backslash before a newline, trigraphs, a lone CR, and
// a final NUL.
TEST(Embed, EveryByteAsInTheFile) {
  constexpr std::string_view e = kiln::embed::data_embed_every_byte_bin;
  static_assert(e.size() == 275);
  for (int b = 0; b < 256; ++b) ASSERT_EQ(static_cast<unsigned char>(e[b]), b) << b;
  EXPECT_EQ(e.substr(256), std::string_view("\r\n)\"kiln\\\n?\?=?\?/\r\xff\0", 19));
  EXPECT_EQ(e.data()[e.size()], '\0');
  EXPECT_EQ(e, read_file(KILN_SOURCE_DIR "/tests/data/embed_every_byte.bin"));
}

TEST(Embed, KernelTextsAreTheFiles) {
  EXPECT_EQ(kiln::ir::cuda_prelude(), read_file(KILN_SOURCE_DIR "/src/ir/cuda_math.cuh") +
                                          read_file(KILN_SOURCE_DIR "/src/ir/box_muller.cuh") +
                                          read_file(KILN_SOURCE_DIR "/src/ir/cuda_prelude.cuh") +
                                          read_file(KILN_SOURCE_DIR "/src/ir/cuda_half_math.cuh"));
#if KILN_WITH_CUDA
  EXPECT_EQ(kiln::cuda::random_source(),
            kiln::ir::cuda_prelude() + read_file(KILN_SOURCE_DIR "/src/cuda/kernels/random.cuh"));
#endif
}

}  // namespace
