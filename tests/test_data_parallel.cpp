// kiln::nn::DataParallel on every device, in a process group of one (no RANK / WORLD_SIZE set):
// training matches the module trained alone (bit for bit on the CPU: the average over one rank is
// the identity), the bucket layout (reverse order, the first bucket's cap and the others', one
// dtype per bucket), no_sync accumulation, hooks that follow the tensors optimizer steps make, the
// error for a parameter that got no gradient, and the construction errors. Several ranks need
// several GPUs (NCCL); these tests hold what one rank can show.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"
#include "test_support.hpp"

#if KILN_WITH_AUTODIFF

namespace {

using kiln::DType;
using kiln::Tensor;
namespace dist = kiln::dist;
namespace nn = kiln::nn;
namespace optim = kiln::optim;

// Caps in MiB from KiB, for buckets of a small model.
constexpr double kib(double k) { return k / 1024; }

// A process group of one on the test's device for each test, ended after it. A device whose group
// cannot be made (CUDA without libnccl.so.2) skips with the reason.
class DataParallelTest : public kt::DeviceTest {
 protected:
  void SetUp() override {
    kt::DeviceTest::SetUp();
    ASSERT_FALSE(dist::is_initialized()) << "a process group outlived an earlier test";
    try {
      dist::init_process_group(dev());
    } catch (const kiln::DistError& e) {
      GTEST_SKIP() << "no process group on " << dev().str() << ": " << e.what();
    }
    ASSERT_EQ(dist::world_size(), 1);
  }
  void TearDown() override {
    if (dist::is_initialized()) dist::destroy_process_group();
    kt::DeviceTest::TearDown();
  }
  template <std::size_t D>
  Tensor<D> data(const kiln::Shape<D>& shape) {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return Tensor<D>::from_data(kt::uniform(n, -1, 1, rng()), shape, dev());
  }
};
KILN_INSTANTIATE_DEVICES(DataParallelTest);

// Parameters in order: fc1.weight (1 KiB), fc1.bias, norm.weight, norm.bias (128 B each),
// fc2.weight (512 B), fc2.bias (16 B).
struct Mlp : nn::Module {
  nn::Linear fc1{8, 32}, fc2{32, 4};
  nn::LayerNorm norm{32};
  Mlp() {
    register_module("fc1", fc1);
    register_module("norm", norm);
    register_module("fc2", fc2);
  }
  Tensor<2> forward(const Tensor<2>& x) const { return fc2(norm(fc1(x)).gelu()); }
};
// With these caps, reversed: fc2.bias, fc2.weight, norm.bias reach 656 B >= 600 B (the first
// bucket's cap); norm.weight, fc1.bias, fc1.weight reach 1280 B >= 1 KiB.
const nn::DataParallelOptions kTwoBuckets{.bucket_cap_mib = kib(1), .first_bucket_mib = kib(0.6)};
const std::vector<std::vector<std::string>> kTwoBucketNames{
    {"fc2.bias", "fc2.weight", "norm.bias"}, {"norm.weight", "fc1.bias", "fc1.weight"}};

std::vector<float> values(const nn::AnyParameter& p) {
  return Tensor<1>(kiln::detail::reshape(p.handle(), {-1})).to_vector();
}
std::vector<float> grad_values(const nn::AnyParameter& p) {
  auto g = kiln::detail::grad(p.handle());
  if (!g) return {};
  return Tensor<1>(kiln::detail::reshape(g, {-1})).to_vector();
}
bool grads_share_buffer(const nn::AnyParameter& a, const nn::AnyParameter& b) {
  const auto ga = kiln::detail::grad(a.handle()), gb = kiln::detail::grad(b.handle());
  return ga && gb && ga->buffer == gb->buffer;
}
// Every parameter's values (or gradients) equal, name by name: bit for bit on the CPU; on CUDA
// within 1e-5 (the two models' products may run different cuBLASLt algorithms: a first call of a
// shape runs the default while the tuner times the others; run_once() makes that unlikely).
void expect_same(const nn::Module& a, const nn::Module& b, bool grads, const std::string& when) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto va = grads ? grad_values(pa[i].second) : values(pa[i].second);
    const auto vb = grads ? grad_values(pb[i].second) : values(pb[i].second);
    const std::string what = (grads ? "the gradient of " : "") + pa[i].first + " " + when;
    EXPECT_FALSE(va.empty()) << what;
    if (pa[i].second.device() == kiln::Device::cpu()) {
      EXPECT_EQ(va, vb) << what;
      continue;
    }
    ASSERT_EQ(va.size(), vb.size()) << what;
    for (std::size_t k = 0; k < va.size(); ++k)
      ASSERT_NEAR(va[k], vb[k], 1e-5 * (1 + std::fabs(va[k]))) << what << " at " << k;
  }
}
// One forward and backward of a model of Mlp's shapes, batch n, thrown away: every product's
// shape is tuned before the models compared run it.
void run_once(kiln::Device device, std::int64_t n) {
  Mlp m;
  m.to(device);
  kiln::mse_loss(m.forward(Tensor<2>::zeros({n, 8}, DType::f32, device)),
                 Tensor<2>::zeros({n, 4}, DType::f32, device))
      .backward();
}

// Five AdamW steps through DataParallel give the weights (and, each step, the gradients) of the
// same steps without it (exactly on the CPU); every step all-reduces both buckets, from hooks put
// on the tensors each step made.
TEST_P(DataParallelTest, TrainsLikeTheModuleAlone) {
  nn::manual_seed(seed());
  Mlp alone;
  nn::manual_seed(seed());
  Mlp wrapped;
  alone.to(dev());
  wrapped.to(dev());
  nn::DataParallel ddp(wrapped, kTwoBuckets);
  static_assert(std::is_same_v<decltype(ddp), nn::DataParallel<Mlp>>);
  EXPECT_EQ(&ddp.module(), &wrapped);
  ASSERT_EQ(ddp.bucket_names(), kTwoBucketNames);
  expect_same(alone, wrapped, false, "after the broadcast");
  optim::AdamW opt_alone(alone.parameters(), {.lr = 0.01});
  optim::AdamW opt_wrapped(wrapped.parameters(), {.lr = 0.01});
  run_once(dev(), 16);
  const int steps = 5;
  for (int step = 1; step <= steps; ++step) {
    const auto x = data<2>({16, 8}), y = data<2>({16, 4});
    kiln::mse_loss(alone.forward(x), y).backward();
    kiln::mse_loss(ddp(x), y).backward();
    const std::string when = "at step " + std::to_string(step);
    expect_same(alone, wrapped, true, when);
    const auto stats = ddp.stats();
    EXPECT_EQ(stats.buckets_reduced, 2 * step) << when;
    EXPECT_EQ(stats.backwards_reduced, step) << when;
    EXPECT_EQ(stats.hooks_registered, 6 * step) << when;  // 6 at construction, 6 per new step
    // The gradients are the bucket's: slices of one all-reduced tensor.
    EXPECT_TRUE(grads_share_buffer(wrapped.fc2.bias, wrapped.norm.bias)) << when;
    EXPECT_TRUE(grads_share_buffer(wrapped.norm.weight, wrapped.fc1.weight)) << when;
    EXPECT_FALSE(grads_share_buffer(wrapped.fc2.bias, wrapped.fc1.weight)) << when;
    opt_alone.step();
    opt_wrapped.step();
    opt_alone.zero_grad();
    opt_wrapped.zero_grad();
  }
  expect_same(alone, wrapped, false, "after the steps");
  ddp.check_in_sync();
}

// Reverse order of parameters(), the first bucket's cap then the others', the parameter that
// crosses a cap kept in its bucket, one bucket per dtype, empty parameters left out, and buckets in
// the order of their first parameter. Each bucket's all-reduce sets its parameters' gradients.
TEST_P(DataParallelTest, BucketLayoutAndMixedDtypes) {
  struct Mixed : nn::Module {
    // name, elements, dtype; bytes: 4K, 2K, 2K, 4K, 1K, 0, 8K, 8K.
    nn::Parameter<1> p0, p1, p2, p3, p4, empty, p5, p6;
    explicit Mixed(kiln::Device d) {
      const std::vector<std::tuple<const char*, nn::Parameter<1>*, std::int64_t, DType>> all{
          {"p0", &p0, 1024, DType::f32},  {"p1", &p1, 512, DType::f32},
          {"p2", &p2, 1024, DType::bf16}, {"p3", &p3, 1024, DType::f32},
          {"p4", &p4, 256, DType::f32},   {"empty", &empty, 0, DType::f32},
          {"p5", &p5, 4096, DType::bf16}, {"p6", &p6, 2048, DType::f32}};
      for (const auto& [name, p, n, t] : all) {
        *p = nn::Parameter<1>(Tensor<1>::full({n}, 1, t, d));
        register_parameter(name, *p);
      }
    }
    // d loss / d p_k = k + 1 (exact in bf16).
    Tensor<0> loss() const {
      Tensor<0> sum = (p0.tensor().to(DType::f32) * 1.0f).sum();
      const nn::Parameter<1>* ps[] = {&p1, &p2, &p3, &p4, &p5, &p6};
      for (int k = 0; k < 6; ++k) sum = sum + (ps[k]->tensor().to(DType::f32) * float(k + 2)).sum();
      return sum;
    }
  } m(dev());
  nn::DataParallel<> ddp(m, {.bucket_cap_mib = kib(8), .first_bucket_mib = kib(4)});
  // Reversed: p6 (f32 8K >= 4K: the f32 first bucket closes), p5 (bf16 8K >= 4K: the bf16 first
  // bucket closes), p4 + p3 + p1 + p0 (f32: 11K >= 8K closes at p0), p2 (bf16, left open).
  EXPECT_EQ(ddp.bucket_names(), (std::vector<std::vector<std::string>>{
                                    {"p6"}, {"p5"}, {"p4", "p3", "p1", "p0"}, {"p2"}}));
  ddp.prepare_forward();
  m.loss().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 4);
  const nn::Parameter<1>* ps[] = {&m.p0, &m.p1, &m.p2, &m.p3, &m.p4, &m.p5, &m.p6};
  for (int k = 0; k < 7; ++k) {
    ASSERT_TRUE(ps[k]->grad().has_value()) << "p" << k;
    EXPECT_EQ(ps[k]->grad()->dtype(), ps[k]->dtype()) << "p" << k;
    const auto g = ps[k]->grad()->to_vector();
    EXPECT_EQ(g, std::vector<float>(g.size(), float(k + 1))) << "p" << k;
  }
  EXPECT_FALSE(m.empty.grad().has_value());
  EXPECT_TRUE(grads_share_buffer(m.p4, m.p0));

  // The defaults (25 MiB, 1 MiB first): one bucket per dtype, f32 first (p6 comes first).
  nn::DataParallel<> defaults(m);
  EXPECT_EQ(defaults.bucket_names(),
            (std::vector<std::vector<std::string>>{{"p6", "p4", "p3", "p1", "p0"}, {"p5", "p2"}}));
  EXPECT_THROW((void)nn::DataParallel<>(m, {.bucket_cap_mib = 0}), kiln::ValueError);
  EXPECT_THROW((void)nn::DataParallel<>(m, {.first_bucket_mib = -1}), kiln::ValueError);
}

// A tied parameter is one slot: broadcast and bucketed once, its two uses' gradients summed.
TEST_P(DataParallelTest, TiedParametersAreOneSlot) {
  struct Tied : nn::Module {
    nn::Linear a{4, 4, false}, b{4, 4, false};
    Tied() {
      b.weight.tie(a.weight);
      register_module("a", a);
      register_module("b", b);
    }
    Tensor<2> forward(const Tensor<2>& x) const { return b(a(x).relu()); }
  } alone, wrapped;
  wrapped.a.weight.set(alone.a.weight.tensor().detach());
  alone.to(dev());
  wrapped.to(dev());
  nn::DataParallel ddp(wrapped);
  EXPECT_EQ(ddp.bucket_names(), (std::vector<std::vector<std::string>>{{"a.weight"}}));
  const auto x = data<2>({5, 4});
  alone.forward(x).sum().backward();
  ddp(x).sum().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 1);
  expect_same(alone, wrapped, true, "");
}

// Under no_sync the gradients accumulate locally and nothing is reduced; the next backward
// outside it reduces the sum of both. The same two backward passes alone give the same gradients
// and, after a step, the same weights.
TEST_P(DataParallelTest, NoSyncAccumulatesThenTheNextBackwardReduces) {
  nn::manual_seed(seed());
  Mlp alone;
  nn::manual_seed(seed());
  Mlp wrapped;
  alone.to(dev());
  wrapped.to(dev());
  nn::DataParallel ddp(wrapped, kTwoBuckets);
  optim::AdamW opt_alone(alone.parameters()), opt_wrapped(wrapped.parameters());
  run_once(dev(), 8);
  for (int step = 1; step <= 3; ++step) {
    const auto x1 = data<2>({8, 8}), y1 = data<2>({8, 4});
    const auto x2 = data<2>({8, 8}), y2 = data<2>({8, 4});
    kiln::mse_loss(alone.forward(x1), y1).backward();
    const auto before = ddp.stats();
    {
      auto outer = ddp.no_sync();
      {
        auto inner = ddp.no_sync();  // nests
      }
      kiln::mse_loss(ddp(x1), y1).backward();
    }
    EXPECT_EQ(ddp.stats().buckets_reduced, before.buckets_reduced) << "reduced under no_sync";
    expect_same(alone, wrapped, true, "after the no_sync backward");
    kiln::mse_loss(alone.forward(x2), y2).backward();
    kiln::mse_loss(ddp(x2), y2).backward();
    EXPECT_EQ(ddp.stats().buckets_reduced, before.buckets_reduced + 2);
    EXPECT_TRUE(grads_share_buffer(wrapped.fc2.bias, wrapped.norm.bias));
    expect_same(alone, wrapped, true, "after the synced backward");
    opt_alone.step();
    opt_wrapped.step();
    opt_alone.zero_grad();
    opt_wrapped.zero_grad();
  }
  expect_same(alone, wrapped, false, "after the steps");
}

// Hooks hang on tensors: after an optimizer step the call operator (or prepare_forward) puts new
// ones on the new tensors; a hook left on an old tensor that is still held does nothing; a
// forward that bypasses the wrapper after a step is not reduced (the documented limit).
TEST_P(DataParallelTest, HooksFollowTheTensorsOptimizerStepsMake) {
  Mlp m;
  m.to(dev());
  nn::DataParallel ddp(m, kTwoBuckets);
  optim::SGD opt(m.parameters(), {.lr = 0.1});
  const auto x = data<2>({4, 8});
  ddp(x).sum().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 2);
  const Tensor<2> old = m.fc1.weight.tensor();
  opt.step();
  opt.zero_grad();
  EXPECT_FALSE(m.fc1.weight.tensor().handle() == old.handle());

  // The old tensor's hook fires (it is final in this backward) but is stale: nothing counts, so
  // the next forward finds no incomplete bucket.
  (old * 2.0f).sum().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 2);
  EXPECT_EQ(ddp.stats().hooks_registered, 6);

  // Bypassing the wrapper after a step: no hooks on the new tensors, nothing reduced.
  m.forward(x).sum().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 2);
  m.zero_grad();

  // prepare_forward() (what ddp(x) does first) puts them there.
  ddp.prepare_forward();
  EXPECT_EQ(ddp.stats().hooks_registered, 12);
  m.forward(x).sum().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 4);
  // Nothing changed since: no new hooks, and a second backward through a new forward is reduced
  // again (its gradients added to the reduced ones).
  ddp(x).sum().backward();
  EXPECT_EQ(ddp.stats().hooks_registered, 12);
  EXPECT_EQ(ddp.stats().buckets_reduced, 6);
  EXPECT_EQ(ddp.stats().backwards_reduced, 3);
}

// A parameter that forward does not use gets no gradient, so its bucket never completes: the
// next forward is a DistError that names it, as PyTorch's "Expected to have finished reduction
// in the prior iteration"; the state then starts afresh.
TEST_P(DataParallelTest, AParameterWithoutGradientIsAnErrorAtTheNextForward) {
  struct Partly : nn::Module {
    nn::Linear unused{4, 4}, used{4, 4};
    Partly() {
      register_module("unused", unused);
      register_module("used", used);
    }
    Tensor<2> forward(const Tensor<2>& x) const { return used(x); }
  } m;
  m.to(dev());
  // 64 B weights, 16 B biases; caps of 32 B: a bias and a weight per bucket.
  nn::DataParallel ddp(m, {.bucket_cap_mib = kib(1.0 / 32), .first_bucket_mib = kib(1.0 / 32)});
  ASSERT_EQ(ddp.bucket_names(),
            (std::vector<std::vector<std::string>>{{"used.bias", "used.weight"},
                                                   {"unused.bias", "unused.weight"}}));
  const auto x = data<2>({3, 4});
  ddp(x).sum().backward();
  EXPECT_EQ(ddp.stats().buckets_reduced, 1);  // the first bucket, used's
  EXPECT_EQ(ddp.stats().backwards_reduced, 0);
  try {
    ddp(x);
    FAIL() << "no error for a parameter that got no gradient";
  } catch (const kiln::DistError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("prior iteration"), std::string::npos) << what;
    EXPECT_NE(what.find("parameter 'unused.bias'"), std::string::npos) << what;
    EXPECT_NE(what.find("'unused.weight'"), std::string::npos) << what;
    EXPECT_NE(what.find("bucket 1 of 2"), std::string::npos) << what;
    EXPECT_EQ(what.find("'used."), std::string::npos) << what;
  }
  // Reset: the next forward passes.
  ddp(x);
}

// A parameter whose dtype changed after wrapping (Module::to) is refused: the buckets were laid
// out for the old one.
TEST_P(DataParallelTest, ParametersChangedUnderneathAreRefused) {
  Mlp m;
  m.to(dev());
  nn::DataParallel ddp(m);
  m.to(DType::bf16);
  try {
    ddp(data<2>({2, 8}).to(DType::bf16));
    FAIL() << "no error for a parameter cast after wrapping";
  } catch (const kiln::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.weight' changed from f32"), std::string::npos)
        << e.what();
  }
}

// Parameters on another device than the group's are refused, naming the parameter.
TEST_P(DataParallelTest, ParametersOnAnotherDeviceAreRefused) {
  bool other = false;
  for (const auto& d : kt::test_devices()) other |= d != dev();
  if (!other) GTEST_SKIP() << "one device present";
  Mlp m;
  for (const auto& d : kt::test_devices())
    if (d != dev()) m.to(d);
  try {
    nn::DataParallel ddp(m);
    FAIL() << "no error for parameters off the group's device";
  } catch (const kiln::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.weight'"), std::string::npos) << e.what();
  }
}

TEST(DataParallel, NeedsAProcessGroup) {
  ASSERT_FALSE(dist::is_initialized());
  Mlp m;
  try {
    nn::DataParallel ddp(m);
    FAIL() << "no error without a process group";
  } catch (const kiln::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("init_process_group"), std::string::npos) << e.what();
  }
}

}  // namespace

#endif  // KILN_WITH_AUTODIFF
