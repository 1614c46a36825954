// Error types and messages, the device registry, backend names, features, and the run-time
// configuration (results stay right with SIMD and threads switched off).
#include <cmath>
#include <set>
#include <type_traits>

#include "test_support.hpp"
#if KILN_WITH_SIMD
#include "core/simd_targets.hpp"
#endif

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Ref;

static_assert(std::is_base_of_v<std::runtime_error, kiln::Error>);
static_assert(std::is_base_of_v<kiln::Error, kiln::ShapeError>);
static_assert(std::is_base_of_v<kiln::Error, kiln::DTypeError>);
static_assert(std::is_base_of_v<kiln::Error, kiln::IndexError>);
static_assert(std::is_base_of_v<kiln::Error, kiln::ValueError>);
static_assert(std::is_base_of_v<kiln::Error, kiln::DeviceError>);
static_assert(std::is_base_of_v<kiln::Error, kiln::OutOfMemoryError>);

class ErrorsTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(ErrorsTest);

// f() throws E, whose message contains every one of `parts`.
template <class E, class F>
void expect_message(F f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string what = e.what();
    for (const char* p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << what << " lacks " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST_P(ErrorsTest, MessagesNameTheOpAndTheValues) {
  auto a = Tensor<2>::zeros({2, 3}, DType::f32, dev());
  auto b = Tensor<1>::zeros({4}, DType::f32, dev());
  expect_message<kiln::ShapeError>([&] { (void)(a + b); }, {"add", "[2, 3]", "[4]"});
  expect_message<kiln::ShapeError>([&] { (void)(b * a); }, {"mul", "[4]", "[2, 3]"});
  expect_message<kiln::ShapeError>([&] { (void)(a < b); }, {"[2, 3]", "[4]"});
  expect_message<kiln::ShapeError>([&] { (void)kiln::maximum(a, b); },
                                   {"maximum", "[2, 3]", "[4]"});
  expect_message<kiln::ShapeError>([&] { (void)a.reshape(Shape<1>{5}); },
                                   {"reshape", "[2, 3]", "5"});
  expect_message<kiln::IndexError>([&] { (void)a.transpose(0, 2); }, {"transpose", "2"});
  expect_message<kiln::IndexError>([&] { (void)a.sum(-3); }, {"sum", "-3"});
  expect_message<kiln::ValueError>([&] { (void)a.slice(1, 0, 3, 0); }, {"slice", "0"});
  expect_message<kiln::ShapeError>([&] { (void)a.squeeze(1); }, {"squeeze", "3"});
  expect_message<kiln::ShapeError>(
      [&] {
        (void)Tensor<2>::from_data(std::vector<float>(5), {2, 3}, dev());
      },
      {"from_data", "5", "[2, 3]"});
  // Broadcasting in where, and a rank that does not fit the static rank.
  auto c = Tensor<1>::zeros({3}, DType::boolean, dev());
  EXPECT_THROW(kiln::where(c, a, b), kiln::ShapeError);
  EXPECT_THROW(Tensor<2>(Tensor<3>::zeros({1, 2, 3}, DType::f32, dev()).handle()),
               kiln::ShapeError);
}

TEST_P(ErrorsTest, DTypes) {
  // Float ops promote bool (and i32) to f32.
  auto t = Tensor<1>::from_data(std::vector<bool>{true, false}, {2}, dev());
  auto s = t.sin();
  EXPECT_EQ(s.dtype(), DType::f32);
  EXPECT_TRUE(kt::matches(s, Ref::of(std::vector<double>{std::sin(1.0), 0}, {2}), kt::kMath));
  EXPECT_EQ(t.exp().to_vector()[1], 1.0f);
  // where needs a bool condition.
  auto f = Tensor<1>::ones({2}, DType::f32, dev());
  auto i = Tensor<1>::ones({2}, DType::i32, dev());
  EXPECT_THROW(kiln::where(f, f, f), kiln::DTypeError);
  expect_message<kiln::DTypeError>([&] { (void)kiln::where(i, f, f); }, {"where", "i32"});
  EXPECT_NO_THROW(kiln::where(f > 0, f, i));
}

TEST_P(ErrorsTest, TensorsOnTwoDevices) {
  const auto devs = kt::test_devices();
  if (devs.size() < 2) GTEST_SKIP() << "only one device present";
  for (const auto& other : devs) {
    if (other == dev()) continue;
    auto a = Tensor<1>::ones({3}, DType::f32, dev()), b = Tensor<1>::ones({3}, DType::f32, other);
    EXPECT_THROW(a + b, kiln::DeviceError);
    EXPECT_THROW(kiln::matmul(a.unsqueeze(0), b.unsqueeze(1)), kiln::DeviceError);
    EXPECT_EQ(b.to(dev()).device(), dev());
    EXPECT_EQ((a + b.to(dev())).to_vector(), std::vector<float>(3, 2.0f));
  }
}

TEST_P(ErrorsTest, DeviceRegistry) {
  bool cpu = false, cuda_line = false, cuda_present = false;
  std::string cuda_reason;
  for (const auto& info : kiln::devices()) {
    SCOPED_TRACE(info.name);
    if (info.present) {
      EXPECT_FALSE(info.backend_name.empty());
    } else {
      EXPECT_FALSE(info.reason.empty()) << "an absent device says why";
    }
    // What the chain's backend reports of itself, named by its part of the backend name.
    auto fact = [&info](const std::string& name) {
      for (const auto& f : info.facts) {
        if (f.name == name) {
          EXPECT_NE(info.backend_name.find(f.part), std::string::npos) << f.part;
          EXPECT_FALSE(f.value.empty()) << name;
          return true;
        }
      }
      return false;
    };
    if (info.name == "cpu") {
      cpu = info.present;
      EXPECT_EQ(info.backend_name, Device::cpu().backend_name());
      EXPECT_TRUE(fact("simd target") && fact("threads") && fact("blas"));
    }
    if (info.name.rfind("cuda", 0) == 0) {
      cuda_line = true;
      cuda_present |= info.present;
      if (!info.present) cuda_reason = info.reason;
      if (info.present) {
        EXPECT_TRUE(fact("gpu") && fact("architecture") && fact("driver"));
      } else {
        EXPECT_TRUE(info.facts.empty());
      }
    }
  }
  EXPECT_TRUE(cpu) << "the CPU is always present";
  EXPECT_TRUE(cuda_line) << "devices() lists CUDA, present or not";
  // One device's line alone, as devices() lists it; an absent device is an error.
  for (const auto& info : kiln::devices()) {
    if (!info.present) {
      EXPECT_THROW(kiln::device_info(Device::cuda(0)), kiln::DeviceError);
      continue;
    }
    const Device d =
        info.name == "cpu" ? Device::cpu() : Device::cuda(std::stoi(info.name.substr(5)));
    const kiln::DeviceInfo one = kiln::device_info(d);
    EXPECT_EQ(one.name, info.name);
    EXPECT_EQ(one.backend_name, info.backend_name);
    EXPECT_EQ(one.facts.size(), info.facts.size());
  }
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cpu().kind(), Device::Kind::cpu);
  EXPECT_NO_THROW(dev().sync());
  if (cuda_present) {
    EXPECT_EQ(Device::cuda(0).str(), "cuda:0");
    EXPECT_EQ(Device::best(), Device::cuda(0));
    EXPECT_THROW(Device::cuda(1000), kiln::DeviceError);
  } else {
    expect_message<kiln::DeviceError>([] { (void)Device::cuda(0); }, {cuda_reason.c_str()});
    EXPECT_EQ(Device::best(), Device::cpu());
  }
  EXPECT_THROW(Device::cuda(-1), kiln::DeviceError);
}

TEST_P(ErrorsTest, BackendNameAndFeatures) {
  const auto name = Device::cpu().backend_name();
  const std::string top = KILN_WITH_AUTODIFF ? "dispatch<autodiff<" : "dispatch<";
  EXPECT_EQ(name.rfind(top + (KILN_WITH_FUSION ? "fusion<cpu<" : "cpu<"), 0), 0u) << name;
  EXPECT_TRUE(name.size() > 15 && name.substr(name.size() - 2) == ">>") << name;
  std::set<std::string> names;
  for (const auto& f : kiln::features()) {
    EXPECT_TRUE(names.insert(f.name).second) << "feature listed twice: " << f.name;
    EXPECT_TRUE(!f.live || f.compiled) << f.name << " is live but not compiled";
    EXPECT_FALSE(f.why.empty()) << f.name;
  }
  EXPECT_TRUE(names.count("simd"));
  EXPECT_TRUE(names.count("threads"));
  EXPECT_TRUE(names.count("fusion"));
  EXPECT_TRUE(names.count("autodiff"));
  EXPECT_FALSE(kiln::version().empty());
}

// Every test here restores the configuration it found.
class ConfigTest : public kt::DeviceTest {
 protected:
  kt::ConfigGuard guard_;
  static bool live(const char* feature) {
    for (const auto& f : kiln::features())
      if (f.name == feature) return f.live;
    return false;
  }
};
KILN_INSTANTIATE_DEVICES(ConfigTest);

TEST_P(ConfigTest, SwitchesShowInNameAndFeatures) {
  kiln::set_config({.simd = false, .threads = 0, .fusion = false});
  EXPECT_EQ(kiln::config().simd, false);
  EXPECT_EQ(kiln::config().threads, 0);
  EXPECT_EQ(kiln::config().fusion, false);
  // The chain over the backend, with autodiff outermost where it is compiled in.
  auto chain = [](const std::string& inner) {
    return KILN_WITH_AUTODIFF ? "dispatch<autodiff<" + inner + ">>" : "dispatch<" + inner + ">";
  };
  EXPECT_EQ(Device::cpu().backend_name(), chain("cpu<scalar>"));
  EXPECT_FALSE(live("simd"));
  EXPECT_FALSE(live("threads"));
  EXPECT_FALSE(live("fusion"));
  kiln::set_config({.simd = false, .threads = 0, .fusion = true});
  EXPECT_EQ(Device::cpu().backend_name(),
            chain(KILN_WITH_FUSION ? "fusion<cpu<scalar>>" : "cpu<scalar>"));
  kiln::set_config({.simd = true, .threads = -1});
  EXPECT_EQ(live("simd"), bool(KILN_WITH_SIMD));
  EXPECT_EQ(live("threads"), bool(KILN_WITH_THREADS));
  EXPECT_EQ(live("fusion"), bool(KILN_WITH_FUSION));
  if (KILN_WITH_SIMD) {
    EXPECT_EQ(Device::cpu().backend_name().find("scalar"), std::string::npos);
  }
}

TEST_P(ConfigTest, BadValuesAreRejected) {
  kiln::set_config({.simd = true, .threads = 3});
  EXPECT_THROW(kiln::set_config({.simd = false, .threads = -2}), kiln::ValueError);
  EXPECT_EQ(kiln::config().threads, 3) << "a rejected config leaves the old one in force";
  EXPECT_EQ(kiln::config().simd, true);
}

// Config::simd_target (KILN_SIMD=avx2) caps dispatch at each target this CPU supports: the name
// shows it, features() says why, results stay right; a target it lacks is refused by name.
TEST_P(ConfigTest, SimdTargetCapsDispatch) {
#if KILN_WITH_SIMD
  auto v = kt::wide_floats(3000, rng());
  const auto n = static_cast<std::int64_t>(v.size());
  Ref r = Ref::of(v, {n});
  const std::vector<std::string> targets = kiln::detail::simd_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    SCOPED_TRACE(target);
    kiln::Config c;
    c.simd_target = target;
    kiln::set_config(c);
    EXPECT_NE(Device::cpu().backend_name().find("cpu<" + target + ">"), std::string::npos)
        << Device::cpu().backend_name();
    for (const auto& f : kiln::features()) {
      if (f.name == "simd") {
        EXPECT_EQ(f.why, "on, capped at " + target + " by kiln::set_config");
      }
    }
    auto x = Tensor<1>::from_data(v, {n}, dev());
    EXPECT_TRUE(kt::matches(x.sin(), r.map([](double a) { return std::sin(a); }), kt::kMath));
    EXPECT_TRUE(kt::matches(x.exp(), r.map([](double a) { return std::exp(a); }), kt::kMath));
  }
  kiln::Config bad;
  bad.simd_target = "avx9";
  expect_message<kiln::ValueError>([&] { kiln::set_config(bad); }, {"avx9", targets[0].c_str()});
  EXPECT_EQ(kiln::config().simd_target, targets.back()) << "a rejected target changes nothing";
  kiln::set_config({});
  EXPECT_NE(Device::cpu().backend_name().find("cpu<" + targets[0] + ">"), std::string::npos);
#else
  kiln::Config c;
  c.simd_target = "avx2";
  EXPECT_THROW(kiln::set_config(c), kiln::ValueError);
#endif
}

// The same work with each switch of SIMD and threads: the results stay right.
TEST_P(ConfigTest, ResultsStayCorrect) {
  auto v = kt::wide_floats(3000, rng());
  const auto n = static_cast<std::int64_t>(v.size());
  Ref r = Ref::of(v, {n});
  auto big = kt::uniform(1 << 20, 0, 1, rng());
  double big_sum = 0;
  for (float x : big) big_sum += x;
  auto mv = kt::uniform(96 * 80, -1, 1, rng());
  for (kiln::Config c : {kiln::Config{true, -1}, kiln::Config{false, 0}, kiln::Config{true, 0},
                         kiln::Config{false, 2}}) {
    SCOPED_TRACE(testing::Message() << "simd " << c.simd << ", threads " << c.threads);
    kiln::set_config(c);
    auto x = Tensor<1>::from_data(v, {n}, dev());
    EXPECT_TRUE(kt::matches(x.sin(), r.map([](double a) { return std::sin(a); }), kt::kMath));
    EXPECT_TRUE(kt::matches(x.exp(), r.map([](double a) { return std::exp(a); }), kt::kMath));
    EXPECT_TRUE(kt::matches(x.log(), r.map([](double a) { return std::log(a); }), kt::kMath));
    EXPECT_TRUE(kt::matches(x.tanh(), r.map([](double a) { return std::tanh(a); }), kt::kMath));
    EXPECT_TRUE(
        kt::matches(x.abs().sqrt(), r.map([](double a) { return std::sqrt(std::fabs(a)); })));
    EXPECT_TRUE(
        kt::matches(x * 0.5f + 0.25f, r.map([](double a) { return float(a) * 0.5f + 0.25f; })));
    EXPECT_TRUE(kt::matches(x > 0, r.map([](double a) { return a > 0; })));
    auto b = Tensor<1>::from_data(big, {1 << 20}, dev());
    EXPECT_LT(std::fabs(b.sum().item() - big_sum) / big_sum, 1e-5);
    auto m = Tensor<2>::from_data(mv, {96, 80}, dev());
    auto g = kiln::matmul(m, m.transpose(0, 1)).to_vector();
    for (std::int64_t i = 0; i < 96; i += 19) {  // the diagonal is a sum of squares
      double want = 0;
      for (std::int64_t k = 0; k < 80; ++k) want += double(mv[i * 80 + k]) * mv[i * 80 + k];
      EXPECT_NEAR(g[static_cast<std::size_t>(i * 96 + i)], want, 1e-4 * want);
    }
  }
}

}  // namespace

// Built without autodiff, asking for a gradient is an error that names the option.
TEST(AutodiffAbsent, RequiresGradNamesTheOption) {
  if (KILN_WITH_AUTODIFF) GTEST_SKIP() << "kiln was built with autodiff";
  auto x = kiln::Tensor<1>::ones({2});
  try {
    x.requires_grad(true);
    FAIL() << "requires_grad(true) did not throw";
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_AUTODIFF"), std::string::npos) << e.what();
  }
}

// Built without autodiff, set_grad (there is no gradient to set) names the option too.
TEST(AutodiffAbsent, SetGradNamesTheOption) {
  if (KILN_WITH_AUTODIFF) GTEST_SKIP() << "kiln was built with autodiff";
  auto x = kiln::Tensor<1>::ones({2});
  try {
    x.set_grad(kiln::Tensor<1>::zeros({2}));
    FAIL() << "set_grad did not throw";
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("set_grad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KILN_AUTODIFF"), std::string::npos) << e.what();
  }
}
