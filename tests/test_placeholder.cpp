// Default-constructed tensors: placeholders to assign later. Copying and assigning them works;
// every other use (queries, read-back, members, free functions, compound assignment) throws
// ValueError naming the op, never dereferences the empty handle.
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;

static_assert(std::is_nothrow_default_constructible_v<Tensor<2>>);

// f() must throw ValueError saying that a Tensor<rank> given to `op` was never assigned.
template <class F>
::testing::AssertionResult unassigned(F f, const std::string& op, std::size_t rank = 2) {
  const std::string want = op + ": a Tensor<" + std::to_string(rank) +
                           "> used before it was assigned (it was default-constructed or moved "
                           "from, and holds no tensor)";
  try {
    f();
  } catch (const kiln::ValueError& e) {
    if (e.what() == want) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "message \"" << e.what() << "\", want \"" << want << "\"";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another error: " << e.what();
  }
  return ::testing::AssertionFailure() << op << " did not throw";
}

Tensor<2> ones23() { return Tensor<2>::ones({2, 3}); }

TEST(Placeholder, AssignedLaterInEitherBranch) {
  for (bool flag : {true, false}) {
    Tensor<2> t;
    EXPECT_FALSE(t.defined());
    if (flag)
      t = ones23();
    else
      t = Tensor<2>::zeros({2, 3});
    ASSERT_TRUE(t.defined());
    EXPECT_EQ(t.sum().item(), flag ? 6.0f : 0.0f);
  }
  Tensor<2> a, b = a;  // copying a placeholder is fine, and gives a placeholder
  EXPECT_FALSE(b.defined());
  std::vector<Tensor<1>> slots(3);
  EXPECT_FALSE(slots[2].defined());
  slots[2] = Tensor<1>::ones({4});
  EXPECT_EQ(slots[2].numel(), 4);
  Tensor<2> moved = ones23(), to = std::move(moved);
  EXPECT_TRUE(to.defined());
  EXPECT_TRUE(
      unassigned([&] { (void)moved.numel(); }, "numel"));  // NOLINT(bugprone-use-after-move)
}

TEST(Placeholder, QueriesAndReadBackThrow) {
  const Tensor<2> t;
  EXPECT_TRUE(unassigned([&] { (void)t.shape(); }, "shape"));
  EXPECT_TRUE(unassigned([&] { (void)t.size(0); }, "size"));
  EXPECT_TRUE(unassigned([&] { (void)t.numel(); }, "numel"));
  EXPECT_TRUE(unassigned([&] { (void)t.dtype(); }, "dtype"));
  EXPECT_TRUE(unassigned([&] { (void)t.device(); }, "device"));
  EXPECT_TRUE(unassigned([&] { (void)t.is_contiguous(); }, "is_contiguous"));
  EXPECT_TRUE(unassigned([&] { (void)t.handle(); }, "handle"));
  EXPECT_TRUE(unassigned([&] { (void)t.to_vector<float>(); }, "to_vector"));
  EXPECT_TRUE(unassigned([&] { (void)t.to_vector<bool>(); }, "to_vector"));
  EXPECT_TRUE(unassigned([&] { (void)Tensor<0>().item(); }, "item", 0));
}

TEST(Placeholder, ElementwiseMembersThrow) {
  const Tensor<2> t;
  EXPECT_TRUE(unassigned([&] { (void)t.clone(); }, "clone"));
  EXPECT_TRUE(unassigned([&] { (void)t.to(kiln::Device::cpu()); }, "to"));
  EXPECT_TRUE(unassigned([&] { (void)t.to(DType::i32); }, "to"));
  EXPECT_TRUE(unassigned([&] { (void)t.contiguous(); }, "contiguous"));
  EXPECT_TRUE(unassigned([&] { (void)-t; }, "neg"));
  EXPECT_TRUE(unassigned([&] { (void)t.sin(); }, "sin"));
  EXPECT_TRUE(unassigned([&] { (void)t.gelu(); }, "gelu"));
  EXPECT_TRUE(unassigned([&] { (void)t.pow(2.0); }, "pow"));
  EXPECT_TRUE(unassigned([&] { (void)t.clamp(0, 1); }, "clamp"));
}

TEST(Placeholder, ReductionsThrow) {
  const Tensor<2> t;
  EXPECT_TRUE(unassigned([&] { (void)t.sum(); }, "sum"));
  EXPECT_TRUE(unassigned([&] { (void)t.mean(1); }, "mean"));
  EXPECT_TRUE(unassigned([&] { (void)t.argmax(0, kiln::keepdim); }, "argmax"));
  EXPECT_TRUE(unassigned([&] { (void)t.softmax(1); }, "softmax"));
  EXPECT_TRUE(unassigned([&] { (void)t.log_softmax(1); }, "log_softmax"));
}

TEST(Placeholder, ShapeOpsThrow) {
  const Tensor<2> t;
  EXPECT_TRUE(unassigned([&] { (void)t.reshape({6}); }, "reshape"));
  EXPECT_TRUE(unassigned([&] { (void)t.transpose(0, 1); }, "transpose"));
  EXPECT_TRUE(unassigned([&] { (void)t.permute({1, 0}); }, "permute"));
  EXPECT_TRUE(unassigned([&] { (void)t.slice(0, 0, 1); }, "slice"));
  EXPECT_TRUE(unassigned([&] { (void)t.unsqueeze(0); }, "unsqueeze"));
  EXPECT_TRUE(unassigned([&] { (void)t.squeeze(0); }, "squeeze"));
  EXPECT_TRUE(unassigned([&] { (void)t.expand({2, 2, 3}); }, "expand"));
}

TEST(Placeholder, FreeFunctionsThrowForEitherOperand) {
  const Tensor<2> t, x = ones23();
  const Tensor<2> cond = x > 0.0f;
  EXPECT_TRUE(unassigned([&] { (void)(t + x); }, "add"));
  EXPECT_TRUE(unassigned([&] { (void)(x - t); }, "sub"));
  EXPECT_TRUE(unassigned([&] { (void)(t * 2.0f); }, "mul"));
  EXPECT_TRUE(unassigned([&] { (void)(1 / t); }, "div"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::maximum(x, t); }, "maximum"));
  EXPECT_TRUE(unassigned([&] { (void)(t == x); }, "eq"));
  EXPECT_TRUE(unassigned([&] { (void)(x >= t); }, "ge"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::where(t, x, x); }, "where"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::where(cond, x, t); }, "where"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::where(cond, t, 0.0f); }, "where"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::where(t, 1, 0); }, "where"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::matmul(x.transpose(0, 1), t); }, "matmul"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::cat({x, t}, 0); }, "cat"));
  EXPECT_TRUE(unassigned([&] { (void)kiln::cat(std::vector<Tensor<2>>{t}, 1); }, "cat"));
}

TEST(Placeholder, CompoundAssignmentThrowsForEitherSide) {
  Tensor<2> t;
  Tensor<2> x = ones23();
  EXPECT_TRUE(unassigned([&] { t += x; }, "+="));
  EXPECT_TRUE(unassigned([&] { t -= 1.0f; }, "-="));
  EXPECT_TRUE(unassigned([&] { x *= t; }, "*="));
  EXPECT_TRUE(unassigned([&] { x /= Tensor<1>(); }, "/=", 1));
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(x.sum().item(), 6.0f) << "x was left as it was";
}

TEST(Placeholder, PrintsAsUndefined) {
  EXPECT_EQ(kiln::format(Tensor<3>()), "tensor(undefined, Tensor<3>)");
}

}  // namespace
