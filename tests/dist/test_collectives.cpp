// kiln::dist's process group and collectives on every device, in a group of one (no RANK or
// WORLD_SIZE set): every collective of every dtype it takes gives the rank's own tensor (the
// reference of a group of one), from contiguous and strided inputs, into new memory; and the
// errors: no group, a second group, a tensor on another device, a dtype or shape a collective
// refuses, a bad root, a bad timeout, and CPU tensors in a group of two. Several ranks need
// several GPUs (NCCL): tests/helpers/dist_worker.cpp's job runs them where a machine has them.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "kiln/kiln.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
namespace dist = kiln::dist;

template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one saying " << parts.front();
  } catch (const E& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << e.what() << "' does not say '" << p << "'";
  }
}

// A group of one on the test's device for each test, ended after it. CUDA without NCCL
// (libnccl.so.2 not found) skips with the reason.
class Collectives : public kt::DeviceTest {
 protected:
  void SetUp() override {
    kt::DeviceTest::SetUp();
    ASSERT_FALSE(dist::is_initialized()) << "a process group outlived an earlier test";
    try {
      dist::init_process_group(dev());
    } catch (const kiln::DistError& e) {
      GTEST_SKIP() << "no process group on " << dev().str() << ": " << e.what();
    }
  }
  void TearDown() override {
    if (dist::is_initialized()) dist::destroy_process_group();
    kt::DeviceTest::TearDown();
  }
};
KILN_INSTANTIATE_DEVICES(Collectives);

TEST_P(Collectives, AGroupOfOneKnowsItsPlace) {
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_EQ(dist::world_size(), 1);
  EXPECT_TRUE(dist::group_device() == dev());
  dist::barrier();  // needs no store in a group of one
}

// Every collective of every dtype it takes, from a contiguous input and from a transposed one:
// the result is the input's values, in new memory, needing no gradient.
TEST_P(Collectives, EachCollectiveOfOneRankIsTheRanksOwnTensor) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    SCOPED_TRACE(kiln::dtype_name(dt));
    const auto host = kt::uniform(6 * 5, -100, 100, rng());
    const auto base = Tensor<2>::from_data(host, {6, 5}, dev()).to(dt);
    for (const Tensor<2>& x : {base, base.transpose(0, 1)}) {
      const auto want = x.to(DType::f32).to_vector<float>();
      // (push_back one at a time: g++ 12 warns, wrongly, of a braced list grown afterwards)
      std::vector<Tensor<2>> results;
      results.push_back(dist::all_reduce(x));
      results.push_back(dist::broadcast(x, 0));
      results.push_back(dist::all_gather(x));
      results.push_back(dist::reduce_scatter(x));
      results.push_back(dist::all_reduce(x, dist::ReduceOp::max));
      if (dt != DType::i32) {
        results.push_back(dist::all_reduce(x, dist::ReduceOp::avg));
        results.push_back(dist::reduce_scatter(x, dist::ReduceOp::avg));
      }
      for (const Tensor<2>& r : results) {
        EXPECT_EQ(r.dtype(), dt);
        EXPECT_EQ(r.shape(), x.shape());
        EXPECT_FALSE(r.requires_grad());
        EXPECT_EQ(r.to(DType::f32).to_vector<float>(), want);
      }
    }
  }
}

TEST_P(Collectives, ResultsAreNewMemoryAndNeedNoGradient) {
  auto x = Tensor<1>::from_data(kt::uniform(64, -1, 1, rng()), {64}, dev());
  x.requires_grad(true);
  const auto y = dist::all_reduce(x * 2.0f);  // a fused producer is run first
  EXPECT_FALSE(y.requires_grad());
  const auto two_x = (x * 2.0f).detach().to_vector<float>();
  EXPECT_EQ(y.to_vector<float>(), two_x);
  // Scalars and empty tensors are exchanged too.
  const auto s = Tensor<0>::from_data(std::vector<float>{3.5f}, {}, dev());
  EXPECT_EQ(dist::all_reduce(s).item<float>(), 3.5f);
  EXPECT_EQ(dist::all_gather(Tensor<1>::zeros({0}, DType::f32, dev())).size(0), 0);
}

TEST_P(Collectives, RefusedInputsSayWhy) {
  const auto x = Tensor<2>::from_data(kt::uniform(12, -1, 1, rng()), {3, 4}, dev());
  expect_error<kiln::DTypeError>([&] { dist::all_reduce(x > 0.0f); }, {"all_reduce", "bool"});
  expect_error<kiln::DTypeError>([&] { dist::all_reduce(x.to(DType::i32), dist::ReduceOp::avg); },
                                 {"all_reduce", "avg of i32"});
  expect_error<kiln::ValueError>([&] { dist::broadcast(x, 1); },
                                 {"broadcast", "root 1", "group of 1"});
  expect_error<kiln::ValueError>([&] { dist::broadcast(x, -1); }, {"root -1"});
  const auto s = Tensor<0>::from_data(std::vector<float>{1}, {}, dev());
  expect_error<kiln::ShapeError>(
      [&] {
        dist::detail::collective(dist::detail::Collective::all_gather, s.handle(),
                                 dist::ReduceOp::sum, 0);
      },
      {"all_gather", "rank 0"});
  const auto other = dev() == kiln::Device::cpu() ? std::optional<kiln::Device>()
                                                  : std::optional(kiln::Device::cpu());
  if (other)
    expect_error<kiln::DeviceError>([&] { dist::all_reduce(x.to(*other)); },
                                    {"all_reduce", "on cpu", "process group on cuda:0"});
  expect_error<kiln::DistError>([&] { dist::init_process_group(dev()); },
                                {"init_process_group", "already"});
}

TEST(CollectivesWithoutGroup, EveryCallNamesWhatToCallFirst) {
  ASSERT_FALSE(dist::is_initialized());
  const auto x = Tensor<1>::zeros({4}, DType::f32, kiln::Device::cpu());
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { dist::all_reduce(x); }, [&] { dist::broadcast(x); }, [&] { dist::all_gather(x); },
           [&] { dist::reduce_scatter(x); }, [] { dist::barrier(); }, [] { dist::rank(); },
           [] { dist::world_size(); }, [] { dist::destroy_process_group(); }})
    expect_error<kiln::DistError>(f, {"no process group", "init_process_group"});
  expect_error<kiln::ValueError>(
      [] { dist::init_process_group(kiln::Device::cpu(), {.timeout_seconds = 0}); },
      {"timeout_seconds"});
  expect_error<kiln::ValueError>(
      [] { dist::init_process_group(kiln::Device::cpu(), {.timeout_seconds = -1}); },
      {"timeout_seconds"});
  EXPECT_FALSE(dist::is_initialized());
}

// Sets variables for the scope and restores them (nothing else in the test process reads them).
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A port nothing listens on now (the kernel's pick of a free one).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Rank 0 of two on the CPU hosts the store, then learns that CPU tensors have no transport: an
// error at init, never a group that would fail at its first collective.
TEST(CollectivesWithoutGroup, CpuTensorsInAGroupOfTwoAreRefusedAtInit) {
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(free_port())}});
  expect_error<kiln::DistError>(
      [] { dist::init_process_group(kiln::Device::cpu(), {.timeout_seconds = 5}); },
      {"rank 0 of 2", "group of one only", "NCCL"});
  EXPECT_FALSE(dist::is_initialized());
}

}  // namespace
