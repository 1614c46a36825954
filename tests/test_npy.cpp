// kiln::save_npy / kiln::load_npy: the bytes numpy.save writes (tests/data/npy_*.npy, made by
// tests/data/make_npy.py), NumPy's 64-bit defaults and Fortran order read, round trips of random
// tensors, and errors (bf16, wrong rank, out-of-range i64, malformed files, every truncation).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <kiln/kiln.hpp>

#include "temp_dir.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

std::string data_file(const std::string& name) {
  return std::string(KILN_SOURCE_DIR "/tests/data/npy_") + name + ".npy";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

class NpyTest : public kt::DeviceTest {};

TEST_P(NpyTest, WritesWhatNumpyWrites) {
  kt::TempDir dir("kiln-npy");
  auto same = [&](const std::string& name, auto tensor) {
    const auto path = dir.path() / (name + ".npy");
    kiln::save_npy(path, tensor);
    EXPECT_EQ(read_file(path), read_file(data_file(name))) << name;
  };
  same("f32_2x3",
       Tensor<2>::from_data(std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}, {2, 3}, dev()));
  same("i32_3", Tensor<1>::from_data(std::vector<std::int32_t>{3, -1, 2147483647}, {3}, dev()));
  same("f16_2",
       Tensor<1>::from_data(
           std::vector<kiln::float16>{kiln::float16(0.5f), kiln::float16(-65504.f)}, {2}, dev()));
  same("bool_2x2",
       Tensor<2>::from_data(std::vector<bool>{true, false, false, true}, {2, 2}, dev()));
  same("f32_scalar", Tensor<0>::from_data(std::vector<float>{3.5f}, {}, dev()));
  same("f32_1x0", Tensor<2>::zeros({1, 0}, DType::f32, dev()));
}

TEST_P(NpyTest, ReadsWhatNumpyWrites) {
  EXPECT_EQ(kiln::load_npy<2>(data_file("f32_2x3"), dev()).to_vector(),
            (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}));
  EXPECT_EQ(kiln::load_npy<1>(data_file("i32_3"), dev()).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{3, -1, 2147483647}));
  const auto h = kiln::load_npy<1>(data_file("f16_2"), dev());
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.to_vector(), (std::vector<float>{0.5, -65504}));
  EXPECT_EQ(kiln::load_npy<2>(data_file("bool_2x2"), dev()).to_vector<bool>(),
            (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(kiln::load_npy<0>(data_file("f32_scalar"), dev()).item(), 3.5f);
  EXPECT_EQ(kiln::load_npy<2>(data_file("f32_1x0"), dev()).shape(), (kiln::Shape<2>{1, 0}));
  // NumPy's defaults, narrowed: f64 rounds to f32, i64 must fit i32.
  const auto f = kiln::load_npy<1>(data_file("f64_3"), dev());
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_vector(), (std::vector<float>{0.1f, -2.0f, 1e30f}));
  EXPECT_EQ(kiln::load_npy<1>(data_file("i64_2"), dev()).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{7, -8}));
  // Fortran order: the same [2, 3] values as the C-ordered array.
  EXPECT_EQ(kiln::load_npy<2>(data_file("fortran_2x3"), dev()).to_vector(),
            (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST_P(NpyTest, RoundTripsRandomTensors) {
  kt::TempDir dir("kiln-npy");
  std::uniform_int_distribution<std::int64_t> extent(0, 30);
  for (DType t : {DType::f32, DType::f16}) {
    const auto x = Tensor<3>::random({extent(rng()), 3, extent(rng())},
                                     kiln::Distribution::normal(0, 5), dev(), seed(), t);
    const auto path = dir.path() / "x.npy";
    kiln::save_npy(path, x.transpose(0, 2));  // a view: its values in row-major order
    const auto y = kiln::load_npy<3>(path, dev());
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(y.to_vector(), x.transpose(0, 2).contiguous().to_vector());
  }
}

TEST_P(NpyTest, Errors) {
  kt::TempDir dir("kiln-npy");
  EXPECT_THROW(kiln::save_npy(dir.path() / "b.npy", Tensor<1>::ones({2}, DType::bf16, dev())),
               kiln::DTypeError);
  EXPECT_THROW(kiln::load_npy<1>(data_file("f32_2x3"), dev()), kiln::ShapeError);
  EXPECT_THROW(kiln::load_npy<1>(dir.path() / "missing.npy", dev()), kiln::ValueError);
  // An i64 outside i32's range.
  std::string big = read_file(data_file("i64_2"));
  const std::int64_t v = std::int64_t{1} << 40;
  std::memcpy(big.data() + big.size() - 8, &v, 8);
  write_file(dir.path() / "big.npy", big);
  EXPECT_THROW(kiln::load_npy<1>(dir.path() / "big.npy", dev()), kiln::ValueError);
}

KILN_INSTANTIATE_DEVICES(NpyTest);

// Every truncation of a valid file, and headers that lie: each a kiln error, never a crash.
TEST(NpyMalformed, TruncationsAndBadHeaders) {
  kt::TempDir dir("kiln-npy");
  const auto path = dir.path() / "m.npy";
  const std::string good = read_file(data_file("f32_2x3"));
  for (std::size_t n = 0; n < good.size(); ++n) {
    write_file(path, good.substr(0, n));
    EXPECT_THROW(kiln::load_npy<2>(path), kiln::Error) << "cut to " << n << " bytes";
  }
  auto with_header = [&](const std::string& dict, std::size_t data_bytes) {
    std::string h = dict;
    h.append(63 - (10 + h.size()) % 64, ' ');
    h += '\n';
    std::string f = std::string("\x93NUMPY\x01\x00", 8);
    f += static_cast<char>(h.size() & 0xff);
    f += static_cast<char>(h.size() >> 8);
    write_file(path, f + h + std::string(data_bytes, '\0'));
  };
  const char* bad[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",        // 8 bytes short
      "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",          // big-endian
      "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }",          //
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",        //
      "{'descr': '<f4', 'fortran_order': False, }",                         // no shape
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }",  //
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
      "{'descr': '<f4",
  };
  for (const char* h : bad) {
    with_header(h, 16);
    EXPECT_THROW(kiln::load_npy<1>(path), kiln::Error) << h;
  }
  with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 16);
  EXPECT_EQ(kiln::load_npy<1>(path).to_vector(), std::vector<float>(4, 0.0f));
}

}  // namespace
