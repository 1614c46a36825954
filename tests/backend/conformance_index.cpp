// Backend::index on every chain, called directly: the contract's errors (src/backend/
// index_contract.cpp) come from the backend itself, not only the front end; an index op reads a
// pending result of a fusion group (the decorator runs the group first) and its output can feed
// element-wise work; and a bad index raises IndexError by the next read (CUDA: from the device's
// error word).
#include "chains.hpp"
#include "kiln/error.hpp"

namespace {

using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::IndexOp;

class BackendIndex : public kc::ChainTest {
 protected:
  Handle tensor(const Dims& shape, DType t, const void* data) {
    Handle h = be().empty(shape, t);
    be().upload(data, kiln::detail::Out(*h));
    return h;
  }
};
KILN_INSTANTIATE_CHAINS(BackendIndex);

TEST_P(BackendIndex, ContractErrors) {
  const float xv[6] = {1, 2, 3, 4, 5, 6};
  const std::int32_t iv[2] = {1, 0};
  const Handle x = tensor({2, 3}, DType::f32, xv), idx = tensor({2}, DType::i32, iv);
  const Handle fidx = tensor({2}, DType::f32, xv);
  const Handle out = be().empty({2, 3}, DType::f32);
  EXPECT_THROW(be().index(IndexOp::index_select, *x, 0, *fidx, nullptr, kiln::detail::Out(*out)),
               kiln::DTypeError);
  EXPECT_THROW(be().index(IndexOp::index_select, *x, 2, *idx, nullptr, kiln::detail::Out(*out)),
               kiln::IndexError);
  const Handle wrong = be().empty({3, 3}, DType::f32);
  EXPECT_THROW(be().index(IndexOp::index_select, *x, 0, *idx, nullptr, kiln::detail::Out(*wrong)),
               kiln::ShapeError);
  EXPECT_THROW(be().index(IndexOp::index_add, *x, 0, *idx, nullptr, kiln::detail::Out(*out)),
               kiln::DTypeError);
  // A transposed x is not contiguous: the front end copies it first.
  kiln::detail::TensorImpl t = *x;
  t.shape = {3, 2};
  t.strides = {1, 3};
  const Handle out2 = be().empty({2, 2}, DType::f32);
  EXPECT_THROW(be().index(IndexOp::index_select, t, 0, *idx, nullptr, kiln::detail::Out(*out2)),
               kiln::ValueError);
}

TEST_P(BackendIndex, SelectsAddsAndReportsABadIndex) {
  const float xv[6] = {1, 2, 3, 4, 5, 6};
  const std::int32_t iv[3] = {1, 1, 0};
  const Handle x = tensor({2, 3}, DType::f32, xv), idx = tensor({3}, DType::i32, iv);
  const Handle sel = be().empty({3, 3}, DType::f32);
  be().index(IndexOp::index_select, *x, 0, *idx, nullptr, kiln::detail::Out(*sel));
  float got[9];
  be().download(*sel, got);
  const float want[9] = {4, 5, 6, 4, 5, 6, 1, 2, 3};
  for (int j = 0; j < 9; ++j) EXPECT_EQ(got[j], want[j]) << j;
  // index_add of sel's rows back into x: row 1 gets two rows of itself, row 0 one of itself.
  const Handle sum = be().empty({2, 3}, DType::f32);
  be().index(IndexOp::index_add, *x, 0, *idx, sel.get(), kiln::detail::Out(*sum));
  float s[6];
  be().download(*sum, s);
  const float want_sum[6] = {2, 4, 6, 12, 15, 18};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(s[j], want_sum[j]) << j;
  // A bad index: IndexError at the call (CPU) or at the next download (CUDA).
  const std::int32_t bad[1] = {2};
  const Handle bidx = tensor({1}, DType::i32, bad);
  const Handle one = be().empty({1, 3}, DType::f32);
  EXPECT_THROW(
      {
        be().index(IndexOp::index_select, *x, 0, *bidx, nullptr, kiln::detail::Out(*one));
        float r[3];
        be().download(*one, r);
      },
      kiln::IndexError);
  // The device works on after it.
  be().index(IndexOp::index_select, *x, 0, *idx, nullptr, kiln::detail::Out(*sel));
  be().download(*sel, got);
  EXPECT_EQ(got[0], 4.f);
}

}  // namespace
