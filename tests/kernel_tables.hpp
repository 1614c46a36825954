// The CPU kernel tables under test, as a gtest parameter: the scalar table, and the SIMD table
// once per Highway target compiled in and supported here (Highway's test hook restricts dispatch
// to that target), so that AVX2, SSE4, SSSE3 and EMU128 all run on an AVX2 machine.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"

#if KILN_WITH_SIMD
#include <hwy/targets.h>
#endif

namespace kt {

using kiln::cpu::KernelTable;

struct TableParam {
  std::string name;  // the test-name suffix
  const KernelTable* table;
  std::int64_t hwy_target;  // 0: no restriction
};
// (gtest would otherwise print the struct's raw bytes, padding included, in every test's name.)
inline void PrintTo(const TableParam& p, std::ostream* os) { *os << p.name; }

inline std::vector<TableParam> all_tables() {
  std::vector<TableParam> v{{"scalar", &kiln::cpu::scalar_kernels(), 0}};
#if KILN_WITH_SIMD
  for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    std::string name = hwy::TargetName(target);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    v.push_back({"simd_" + name, &kiln::cpu::simd_kernels(), target});
  }
#endif
  return v;
}

inline std::string table_name(const ::testing::TestParamInfo<TableParam>& info) {
  return info.param.name;
}

// Fixture base: restricts SIMD dispatch to the parameter's target for the test's duration.
class TableTest : public ::testing::TestWithParam<TableParam> {
 protected:
  void SetUp() override {
#if KILN_WITH_SIMD
    if (GetParam().hwy_target != 0) hwy::SetSupportedTargetsForTest(GetParam().hwy_target);
#endif
  }
  void TearDown() override {
#if KILN_WITH_SIMD
    if (GetParam().hwy_target != 0) hwy::SetSupportedTargetsForTest(0);
#endif
  }
  const KernelTable& table() const { return *GetParam().table; }
  // The target that runs, for messages.
  const char* target() const { return GetParam().name.c_str(); }
};

}  // namespace kt
