// src/cuda/kernel_args.hpp: each argument's pointer addresses that argument's bytes, in the
// order added, 8-byte aligned, after any number of later additions (no GPU needed).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/kernel_args.hpp"

namespace {

using kiln::DType;
using kiln::cuda::KernelArgs;

template <class T>
T read(void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

TEST(KernelArgsTest, EachPointerAddressesItsValue) {
  int a = 0, b = 0;
  KernelArgs args;
  EXPECT_EQ(args.pointer(&a), 0u);
  EXPECT_EQ(args.value(7u), 1u);
  EXPECT_EQ(args.value(1ull << 40), 2u);
  args.value(2.5f);
  args.value(-0.25);
  const std::vector<long long> geometry = {1, -2, 3, 1ll << 50};
  args.int64_struct(geometry);
  const std::size_t slot = args.pointer(nullptr);
  // Many more: the storage grows and moves, the pointers are taken after.
  for (int i = 0; i < 100; ++i) args.value(i);
  args.set_pointer(slot, &b);
  ASSERT_EQ(args.size(), 107u);
  void** p = args.pointers();
  for (std::size_t i = 0; i < args.size(); ++i)
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p[i]) % 8, 0u) << "argument " << i;
  EXPECT_EQ(read<int*>(p[0]), &a);
  EXPECT_EQ(read<unsigned>(p[1]), 7u);
  EXPECT_EQ(read<unsigned long long>(p[2]), 1ull << 40);
  EXPECT_EQ(read<float>(p[3]), 2.5f);
  EXPECT_EQ(read<double>(p[4]), -0.25);
  long long g[4];
  std::memcpy(g, p[5], sizeof g);
  EXPECT_EQ(std::vector<long long>(g, g + 4), geometry);
  EXPECT_EQ(read<int*>(p[6]), &b);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(read<int>(p[7 + i]), i);
}

TEST(KernelArgsTest, ScalarsAsTheGeneratedKernelsDeclareThem) {
  KernelArgs args;
  const DType types[] = {DType::f32, DType::i32, DType::boolean, DType::boolean, DType::bf16};
  const double values[] = {0.1, -3.0, 2.0, 0.0, 0.1};
  args.scalars(types, values);
  void** p = args.pointers();
  ASSERT_EQ(args.size(), 5u);
  EXPECT_EQ(read<float>(p[4]), 0.1f);  // a half type's scalar is a float, not rounded to it
  EXPECT_EQ(read<float>(p[0]), 0.1f);  // rounded to float, as the kernel's float parameter
  EXPECT_EQ(read<int>(p[1]), -3);
  EXPECT_EQ(read<int>(p[2]), 1);  // a bool is 0 or 1
  EXPECT_EQ(read<int>(p[3]), 0);
}

TEST(KernelArgsTest, ClearStartsAgain) {
  KernelArgs args;
  args.value(1);
  args.value(2);
  args.clear();
  EXPECT_EQ(args.size(), 0u);
  args.value(3);
  ASSERT_EQ(args.size(), 1u);
  EXPECT_EQ(read<int>(args.pointers()[0]), 3);
}

}  // namespace
