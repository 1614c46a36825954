// kiln::save / kiln::load (safetensors): round trips of every dtype on every device, the bytes
// Python's `safetensors` writes for the same tensors (tests/data/python.safetensors, made by
// tests/data/make_safetensors.py), and malformed files: every truncation, headers that lie about
// their length, offsets, sizes or nesting, and random byte flips, each a clear kiln error.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <kiln/kiln.hpp>
#include <random>

#include "temp_dir.hpp"
#include "test_support.hpp"

namespace {

using kiln::Checkpoint;
using kiln::DType;
using kiln::Tensor;

std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// The tensors of tests/data/make_safetensors.py, on `d`.
Checkpoint python_fixture(kiln::Device d) {
  Checkpoint c;
  c.add("w", Tensor<2>::from_data(std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}, {2, 3}, d));
  c.add("b", Tensor<1>::from_data(std::vector<float>{0.25, -3, 7.5}, {3}, d));
  c.add("ids", Tensor<1>::from_data(std::vector<std::int32_t>{3, -1, 0, 2147483647}, {4}, d));
  c.add("h", Tensor<2>::from_data(
                 std::vector<kiln::bfloat16>{kiln::bfloat16(1.5f), kiln::bfloat16(-2.0f),
                                             kiln::bfloat16(0.25f), kiln::bfloat16(3.0f)},
                 {2, 2}, d));
  c.add("g",
        Tensor<1>::from_data(std::vector<kiln::float16>{kiln::float16(0.5f), kiln::float16(-1.0f),
                                                        kiln::float16(65504.0f)},
                             {3}, d));
  c.add("m", Tensor<2>::from_data(std::vector<bool>{true, false, false, true}, {2, 2}, d));
  c.add("s", Tensor<0>::from_data(std::vector<float>{3.5}, {}, d));
  c.add("e", Tensor<2>::zeros({0, 3}, DType::f32, d));
  c.metadata()["quote\"and\\slash"] = "line\nbreak \xc3\xa9 \x01";
  return c;
}

class CheckpointTest : public kt::DeviceTest {};

TEST_P(CheckpointTest, WritesWhatPythonWrites) {
  const auto want = read_file(KILN_SOURCE_DIR "/tests/data/python.safetensors");
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(kiln::to_safetensors(python_fixture(dev())), want);
}

TEST_P(CheckpointTest, ReadsWhatPythonWrites) {
  const auto bytes = read_file(KILN_SOURCE_DIR "/tests/data/python.safetensors");
  const Checkpoint c = kiln::from_safetensors(bytes.data(), bytes.size(), dev());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"b", "e", "g", "h", "ids", "m", "s", "w"}));
  EXPECT_EQ(c.get<2>("w").to_vector(), (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}));
  EXPECT_EQ(c.get<1>("ids").to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{3, -1, 0, 2147483647}));
  EXPECT_EQ(c.dtype("h"), DType::bf16);
  EXPECT_EQ(c.get<2>("h").to_vector(), (std::vector<float>{1.5, -2, 0.25, 3}));
  EXPECT_EQ(c.get<1>("g").to_vector(), (std::vector<float>{0.5, -1, 65504}));
  EXPECT_EQ(c.get<2>("m").to_vector<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(c.get<0>("s").item(), 3.5f);
  EXPECT_EQ(c.shape("e"), (kiln::Dims{0, 3}));
  EXPECT_EQ(c.get<2>("h").device(), dev());
  EXPECT_EQ(c.metadata().at("quote\"and\\slash"), "line\nbreak \xc3\xa9 \x01");
}

TEST_P(CheckpointTest, RoundTripsRandomTensorsThroughAFile) {
  kt::TempDir dir("kiln-checkpoint");
  Checkpoint c;
  std::uniform_int_distribution<std::int64_t> extent(0, 9);
  std::vector<std::vector<float>> values;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const auto x = Tensor<3>::random({extent(rng()), extent(rng()), 3},
                                     kiln::Distribution::normal(0, 10), dev(), seed(), t);
    c.add(std::string("x_") + kiln::dtype_name(t), x);
    values.push_back(x.to_vector());
  }
  // A view (transposed) is stored as its values in row-major order.
  const auto base = Tensor<2>::random({4, 5}, kiln::Distribution::uniform(-1, 1), dev(), seed());
  c.add("t", base.transpose(0, 1));
  c.metadata()["format"] = "pt";
  c.metadata()["step"] = "12";
  const auto path = dir.path() / "c.safetensors";
  kiln::save(path, c);
  const Checkpoint r = kiln::load(path, dev());
  int i = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const std::string name = std::string("x_") + kiln::dtype_name(t);
    EXPECT_EQ(r.dtype(name), t);
    EXPECT_EQ(r.get<3>(name).to_vector(), values[i++]) << name;
  }
  EXPECT_EQ(r.get<2>("t").to_vector(), base.transpose(0, 1).contiguous().to_vector());
  EXPECT_EQ(r.metadata(), c.metadata());
  // Saving what was loaded gives the same bytes.
  EXPECT_EQ(kiln::to_safetensors(r), read_file(path));
}

TEST_P(CheckpointTest, Errors) {
  Checkpoint c;
  c.add("x", Tensor<1>::ones({3}, DType::f32, dev()));
  EXPECT_THROW(c.get<2>("x"), kiln::ShapeError);
  EXPECT_THROW(c.get<1>("y"), kiln::IndexError);
  EXPECT_THROW(c.add("__metadata__", Tensor<1>::ones({3}, DType::f32, dev())), kiln::ValueError);
  EXPECT_THROW(kiln::load("/nonexistent/kiln.safetensors"), kiln::ValueError);
  EXPECT_THROW(kiln::save("/nonexistent/dir/kiln.safetensors", c), kiln::ValueError);
  Checkpoint bad;
  bad.add("not utf-8 \xff", Tensor<1>::ones({1}, DType::f32, dev()));
  EXPECT_THROW(kiln::to_safetensors(bad), kiln::ValueError);
}

KILN_INSTANTIATE_DEVICES(CheckpointTest);

// ---- malformed files (the CPU: the reader checks everything before any device sees a byte) ----

std::vector<std::byte> file_of(const std::string& header, std::size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

// The message of the kiln error loading `bytes` throws, or "" when it loads.
std::string load_error(const std::vector<std::byte>& bytes) {
  try {
    (void)kiln::from_safetensors(bytes.data(), bytes.size());
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointMalformed, EveryTruncationIsAnError) {
  const auto bytes = read_file(KILN_SOURCE_DIR "/tests/data/python.safetensors");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_NE(load_error(cut), "") << "a file cut to " << n << " bytes loaded";
  }
  EXPECT_EQ(load_error(bytes), "");
}

TEST(CheckpointMalformed, HeadersThatLie) {
  const std::string t = R"("x":{"dtype":"F32","shape":[2],"data_offsets":)";
  struct Case {
    std::string header;
    std::size_t data;
    const char* expect;  // a piece of the message
  };
  const Case cases[] = {
      {"{" + t + "[0,8]}}", 8, ""},
      {"{" + t + "[0,8]}}", 12, "the tensors cover 8"},     // data after the last tensor
      {"{" + t + "[0,8]}}", 4, "past the 4 bytes"},         // data missing
      {"{" + t + "[4,12]}}", 12, "starts at data byte 4"},  // a gap first
      {"{" + t + "[8,0]}}", 8, "backwards"},                //
      {"{" + t + "[0,4]}}", 4, "needs 8"},                  // size vs shape
      {"{" + t + "[0,8]}," + t.substr(0, 1) + "y" + t.substr(2) + "[4,12]}}", 12,
       "starts at data byte 4"},                    // overlap
      {"{" + t + "[0,-8]}}", 8, "non-negative"},    //
      {"{" + t + "[0]}}", 8, "data_offsets pair"},  //
      {R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8, "F64"},
      {R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 4, "unknown field"},
      {R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
       "more elements than a tensor can"},
      {R"({"x":{"dtype":"F32","shape":[4294967296,1073741823],"data_offsets":[0,4]}})", 4, "needs"},
      {R"({"x":{"dtype":"F32","shape":[[[1]]],"data_offsets":[0,4]}})", 4, "deeper"},
      {R"({"__metadata__":{"k":1}})", 0, "not a string"},
      {R"([1,2])", 0, "not a JSON object"},
      {R"({"x":)", 0, "not JSON"},
      {std::string(64, '['), 0, "deeper"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string msg = load_error(file_of(c.header, c.data));
    if (*c.expect == 0) {
      EXPECT_EQ(msg, "");
    } else {
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    }
  }
  // A header length larger than the file, and larger than any header may be.
  auto huge = file_of("{}", 0);
  huge[7] = std::byte{0x7f};
  EXPECT_NE(load_error(huge).find("header length"), std::string::npos);
  auto longer = file_of("{}", 0);
  longer[0] = std::byte{40};
  EXPECT_NE(load_error(longer).find("in a file of"), std::string::npos);
}

// Random byte flips of a valid file: each either loads or is a kiln error (never a crash, and
// under the asan preset never a read out of bounds).
TEST(CheckpointMalformed, RandomByteFlipsNeverCrash) {
  const auto bytes = read_file(KILN_SOURCE_DIR "/tests/data/python.safetensors");
  std::mt19937_64 g(kt::fresh_seed());
  std::uniform_int_distribution<std::size_t> at(0, bytes.size() - 1);
  int loaded = 0;
  for (int round = 0; round < 3000; ++round) {
    auto m = bytes;
    const int flips = 1 + static_cast<int>(g() % 4);
    for (int f = 0; f < flips; ++f) m[at(g)] = static_cast<std::byte>(g() & 0xff);
    loaded += load_error(m).empty();
  }
  EXPECT_LT(loaded, 3000);  // most flips of the header are errors; data flips still load
}

}  // namespace
