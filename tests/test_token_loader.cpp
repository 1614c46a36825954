// kiln::data::TokenLoader over a uint16 little-endian token file: y is x shifted by one, every
// window once per epoch, the same batches for the same seed, other orders for other seeds or
// epochs, and ValueErrors for missing, odd-sized and too short files.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "kiln/data/token_loader.hpp"
#include "temp_dir.hpp"

namespace {

using kiln::data::TokenLoader;

void write_tokens(const std::filesystem::path& path, int n, int extra_bytes = 0) {
  std::ofstream f(path, std::ios::binary);
  for (int i = 0; i < n; ++i) {
    const unsigned t = static_cast<unsigned>(1000 + i);  // > 255: both bytes matter
    f.put(static_cast<char>(t & 0xff)).put(static_cast<char>(t >> 8));
  }
  for (int i = 0; i < extra_bytes; ++i) f.put(0);
}

TEST(TokenLoader, PairsShiftByOneAndEachEpochVisitsEveryWindowOnce) {
  kt::TempDir dir;
  const auto path = dir.path() / "train.bin";
  write_tokens(path, 4 * 10 + 1);  // 10 windows of 4 (+1 for the last target)
  TokenLoader loader(path, 2, 4, 7);
  EXPECT_EQ(loader.tokens(), 41);
  EXPECT_EQ(loader.windows(), 10);
  std::multiset<int> starts;
  for (int b = 0; b < 5; ++b) {
    const auto batch = loader.next();
    ASSERT_EQ(batch.x.shape(), (kiln::Shape<2>{2, 4}));
    EXPECT_EQ(batch.x.dtype(), kiln::DType::i32);
    const auto x = batch.x.to_vector<std::int32_t>(), y = batch.y.to_vector<std::int32_t>();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ((x[r * 4] - 1000) % 4, 0);
      starts.insert(x[r * 4] - 1000);
      for (int t = 0; t < 4; ++t) {
        EXPECT_EQ(y[r * 4 + t], x[r * 4 + t] + 1);
        if (t) {
          EXPECT_EQ(x[r * 4 + t], x[r * 4 + t - 1] + 1);
        }
      }
    }
  }
  EXPECT_EQ(starts.size(), 10u);
  EXPECT_EQ(std::set<int>(starts.begin(), starts.end()).size(), 10u);
  EXPECT_EQ(loader.epoch(), 0);
  loader.next();
  EXPECT_EQ(loader.epoch(), 1);
}

TEST(TokenLoader, TheSeedDeterminesTheOrder) {
  kt::TempDir dir;
  const auto path = dir.path() / "train.bin";
  write_tokens(path, 64 * 8 + 1);
  auto firsts = [&](std::uint64_t seed) {
    TokenLoader loader(path, 4, 8, seed);
    std::vector<std::int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(loader.next().x.to_vector<std::int32_t>()[0]);
    return out;
  };
  const auto a = firsts(1);
  EXPECT_EQ(a, firsts(1));
  EXPECT_NE(a, firsts(2));
  // Epoch 1 (batches 16..31) is in another order than epoch 0.
  EXPECT_NE(std::vector<std::int32_t>(a.begin(), a.begin() + 16),
            std::vector<std::int32_t>(a.begin() + 16, a.begin() + 32));
}

TEST(TokenLoader, BadFilesAreValueErrors) {
  kt::TempDir dir;
  EXPECT_THROW(TokenLoader(dir.path() / "missing.bin", 1, 4, 0), kiln::ValueError);
  write_tokens(dir.path() / "odd.bin", 10, 1);
  EXPECT_THROW(TokenLoader(dir.path() / "odd.bin", 1, 4, 0), kiln::ValueError);
  write_tokens(dir.path() / "short.bin", 4);
  EXPECT_THROW(TokenLoader(dir.path() / "short.bin", 1, 4, 0), kiln::ValueError);
  EXPECT_THROW(TokenLoader(dir.path() / "short.bin", 0, 2, 0), kiln::ValueError);
}

}  // namespace
