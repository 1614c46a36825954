// kiln::linear (y = act(x W^T + bias)) against float64 references on fresh random inputs: every
// activation, with and without bias, f32 / bf16 / f16, ranks 1 to 3, a transposed x and a
// transposed weight; its gradients (dx, dW, db) against the reference's; the same values as the
// composed ops; nn::Linear through it; the error paths; and Backend::matmul_epilogue's contract.
#include <cmath>

#include "backend/backend.hpp"
#include "core/tensor_impl.hpp"
#include "dispatch/registry.hpp"
#include "kiln/linear.hpp"
#include "kiln/nn.hpp"
#include "test_support.hpp"

namespace {

using kiln::Activation;
using kiln::DType;
using kiln::Tensor;

class LinearTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(LinearTest);

constexpr Activation kActivations[] = {Activation::none, Activation::relu, Activation::gelu,
                                       Activation::gelu_tanh, Activation::silu};

double act_ref(Activation a, double z) {
  switch (a) {
    case Activation::none:
      return z;
    case Activation::relu:
      return z > 0 ? z : 0;
    case Activation::gelu:
      return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    case Activation::gelu_tanh:
      return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    case Activation::silu:
      return z / (1 + std::exp(-z));
  }
  return z;
}

double act_grad_ref(Activation a, double z) {
  switch (a) {
    case Activation::none:
      return 1;
    case Activation::relu:
      return z > 0 ? 1 : 0;
    case Activation::gelu:
      return 0.5 * (1 + std::erf(z / std::sqrt(2.0))) +
             z * std::exp(-z * z / 2) / std::sqrt(2 * M_PI);
    case Activation::gelu_tanh: {
      const double s = std::sqrt(2 / M_PI), t = std::tanh(s * (z + 0.044715 * z * z * z));
      return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * s * (1 + 3 * 0.044715 * z * z);
    }
    case Activation::silu: {
      const double sg = 1 / (1 + std::exp(-z));
      return sg * (1 + z * (1 - sg));
    }
  }
  return 1;
}

// Values as the op reads them: rounded to the dtype, read back.
std::vector<double> values(const Tensor<2>& t) { return kt::host_values(t.to(DType::f32)); }
std::vector<double> values(const Tensor<1>& t) { return kt::host_values(t.to(DType::f32)); }

struct Reference {
  std::vector<double> z, y;
  double magnitude =
      0;  // the largest sum of |x w| terms plus |b|: the error scale of a dot product
};

// z = x W^T + b over m rows (x [m, k], w [n, k]), y = act(z).
Reference reference(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>* b, std::int64_t m, std::int64_t k, std::int64_t n,
                    Activation act) {
  Reference r;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double z = b ? (*b)[static_cast<std::size_t>(j)] : 0, size = std::abs(z);
      for (std::int64_t l = 0; l < k; ++l) {
        z += x[i * k + l] * w[j * k + l];
        size += std::abs(x[i * k + l] * w[j * k + l]);
      }
      r.magnitude = std::max(r.magnitude, size);
      r.z.push_back(z);
      r.y.push_back(act_ref(act, z));
    }
  }
  return r;
}

// The tolerance on the tensor's scale: the inputs' rounding is in the reference, so this is the
// product's accumulation and the output's one rounding.
double tolerance(DType t) { return t == DType::bf16 ? 2e-2 : t == DType::f16 ? 4e-3 : 2e-5; }

TEST_P(LinearTest, MatchesDoubleReferenceForEveryActivationDTypeAndBias) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (auto [m, k, n] : {std::array<std::int64_t, 3>{1, 1, 1}, {7, 5, 9}, {33, 64, 24}}) {
      for (Activation act : kActivations) {
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(std::string(kiln::dtype_name(dt)) + " " + std::to_string(m) + "x" +
                       std::to_string(k) + "x" + std::to_string(n) + " " +
                       kiln::activation_name(act) + (with_bias ? " bias" : ""));
          const auto x =
              Tensor<2>::from_data(kt::uniform(m * k, -2, 2, rng()), {m, k}, dev()).to(dt);
          const auto w =
              Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev()).to(dt);
          const auto b = Tensor<1>::from_data(kt::uniform(n, -1, 1, rng()), {n}, dev()).to(dt);
          const auto bv = values(b);
          const Reference r =
              reference(values(x), values(w), with_bias ? &bv : nullptr, m, k, n, act);
          std::optional<Tensor<1>> bias;
          if (with_bias) bias = b;
          const Tensor<2> y = kiln::linear(x, w, bias, act);
          ASSERT_EQ(y.dtype(), dt);
          ASSERT_EQ(y.shape(), (kiln::Shape<2>{m, n}));
          // (the product, rounded to the dtype before the bias and the activation, is on the
          // scale of its terms, where y may be small)
          kt::expect_close_to_scale("y", values(y), r.y, tolerance(dt),
                                    tolerance(dt) * r.magnitude);
        }
      }
    }
  }
}

TEST_P(LinearTest, TakesAnyRankAndStridedOperands) {
  const std::int64_t k = 16, n = 8;
  const auto w = Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev());
  const auto b = Tensor<1>::from_data(kt::uniform(n, -1, 1, rng()), {n}, dev());
  const auto bv = values(b);
  // rank 3 [2, 3, k] -> [2, 3, n], the same rows as rank 2
  const auto x3 = Tensor<3>::from_data(kt::uniform(2 * 3 * k, -1, 1, rng()), {2, 3, k}, dev());
  const auto y3 = kiln::linear(x3, w, b, Activation::gelu_tanh);
  ASSERT_EQ(y3.shape(), (kiln::Shape<3>{2, 3, n}));
  const auto x2 = x3.reshape<2>({6, k});
  const Reference r = reference(values(x2), values(w), &bv, 6, k, n, Activation::gelu_tanh);
  kt::expect_close_to_scale("rank 3", kt::host_values(y3), r.y, 2e-5, 1e-6);
  // rank 1 [k] -> [n]
  const auto x1 = Tensor<1>::from_data(kt::uniform(k, -1, 1, rng()), {k}, dev());
  const auto y1 = kiln::linear(x1, w, b, Activation::relu);
  const Reference r1 = reference(kt::host_values(x1), values(w), &bv, 1, k, n, Activation::relu);
  kt::expect_close_to_scale("rank 1", kt::host_values(y1), r1.y, 2e-5, 1e-6);
  // a transposed x and a weight that is the transpose of a [k, n] tensor
  const auto xt =
      Tensor<2>::from_data(kt::uniform(k * 5, -1, 1, rng()), {k, 5}, dev()).transpose(0, 1);
  const auto wt =
      Tensor<2>::from_data(kt::uniform(k * n, -1, 1, rng()), {k, n}, dev()).transpose(0, 1);
  const auto ys = kiln::linear(xt, wt, b, Activation::none);
  const Reference rs =
      reference(values(xt.contiguous()), values(wt.contiguous()), &bv, 5, k, n, Activation::none);
  kt::expect_close_to_scale("strided", values(ys), rs.y, 2e-5, 1e-6);
}

TEST_P(LinearTest, GradientsMatchDoubleReference) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(std::string(kiln::dtype_name(dt)) + " " + kiln::activation_name(act));
      const std::int64_t m = 24, k = 16, n = 32;
      auto x = Tensor<2>::from_data(kt::uniform(m * k, -2, 2, rng()), {m, k}, dev()).to(dt);
      auto w = Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev()).to(dt);
      auto b = Tensor<1>::from_data(kt::uniform(n, -1, 1, rng()), {n}, dev()).to(dt);
      x.requires_grad(true);
      w.requires_grad(true);
      b.requires_grad(true);
      const auto gs = kt::uniform(m * n, -1, 1, rng());
      const auto g = Tensor<2>::from_data(gs, {m, n}, dev()).to(dt);
      const auto y = kiln::linear(x, w, b, act);
      (y * g).sum().backward();
      const auto xv = values(x), wv = values(w), bv = values(b), gv = values(g);
      const Reference r = reference(xv, wv, &bv, m, k, n, act);
      std::vector<double> dz(m * n), dx(m * k, 0), dw(n * k, 0), db(n, 0);
      // ReLU's mask as the op saw it (y > 0): a z within rounding of 0 may have either sign.
      const auto yv = values(y);
      for (std::int64_t i = 0; i < m * n; ++i) {
        dz[i] =
            gv[i] * (act == Activation::relu ? (yv[i] > 0 ? 1.0 : 0.0) : act_grad_ref(act, r.z[i]));
      }
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          const double d = dz[i * n + j];
          db[j] += d;
          for (std::int64_t l = 0; l < k; ++l) {
            dx[i * k + l] += d * wv[j * k + l];
            dw[j * k + l] += d * xv[i * k + l];
          }
        }
      const double tol = dt == DType::bf16 ? 3e-2 : 1e-4;
      ASSERT_TRUE(x.grad() && w.grad() && b.grad());
      EXPECT_EQ(b.grad()->dtype(), dt);
      kt::expect_close_to_scale("dx", values(*x.grad()), dx, tol, 1e-6);
      kt::expect_close_to_scale("dw", values(*w.grad()), dw, tol, 1e-6);
      kt::expect_close_to_scale("db", values(*b.grad()), db, tol, 1e-6);
    }
  }
}

TEST_P(LinearTest, RankThreeGradientsSumOverEveryRow) {
  const std::int64_t k = 8, n = 8;
  auto x = Tensor<3>::from_data(kt::uniform(2 * 5 * k, -1, 1, rng()), {2, 5, k}, dev());
  auto w = Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev());
  auto b = Tensor<1>::from_data(kt::uniform(n, -1, 1, rng()), {n}, dev());
  w.requires_grad(true);
  b.requires_grad(true);
  kiln::linear(x, w, b).sum().backward();
  // d/db of sum(x W^T + b) is the row count; d/dW[j, l] is the column sum of x.
  kt::expect_close_to_scale("db", kt::host_values(*b.grad()), std::vector<double>(n, 10.0), 1e-6,
                            0);
  const auto xv = kt::host_values(x);
  std::vector<double> dw(n * k, 0);
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t r = 0; r < 10; ++r)
      for (std::int64_t l = 0; l < k; ++l) dw[j * k + l] += xv[r * k + l];
  kt::expect_close_to_scale("dw", kt::host_values(*w.grad()), dw, 1e-5, 1e-6);
}

TEST_P(LinearTest, SameValuesAsTheComposedOps) {
  const std::int64_t m = 40, k = 24, n = 16;  // (n a multiple of 8: cuBLASLt's aux takes it)
  const auto x = Tensor<2>::from_data(kt::uniform(m * k, -2, 2, rng()), {m, k}, dev());
  const auto w = Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev());
  const auto b = Tensor<1>::from_data(kt::uniform(n, -1, 1, rng()), {n}, dev());
  const auto z = kiln::matmul(x, w.transpose(0, 1)) + b;
  const std::pair<Activation, Tensor<2>> cases[] = {
      {Activation::none, z},
      {Activation::relu, z.relu()},
      {Activation::gelu, z.gelu()},
      {Activation::gelu_tanh,
       z * 0.5 * ((z + z * z * z * 0.044715) * 0.7978845608028654).tanh() + z * 0.5},
      {Activation::silu, z.silu()}};
  for (const auto& [act, composed] : cases) {
    SCOPED_TRACE(kiln::activation_name(act));
    kt::expect_close_to_scale("linear vs composed", kt::host_values(kiln::linear(x, w, b, act)),
                              kt::host_values(composed), 2e-6, 1e-6);
  }
}

// A small weight from many rows: its gradient comes from products over row ranges, summed.
TEST_P(LinearTest, SmallWeightFromManyRows) {
  const std::int64_t rows = 8192, k = 8, n = 8;
  auto x = Tensor<3>::from_data(kt::uniform(rows * k, -1, 1, rng()), {2, rows / 2, k}, dev());
  auto w = Tensor<2>::from_data(kt::uniform(n * k, -1, 1, rng()), {n, k}, dev());
  const auto gs = kt::uniform(rows * n, -1, 1, rng());
  const auto g = Tensor<3>::from_data(gs, {2, rows / 2, n}, dev());
  w.requires_grad(true);
  (kiln::linear(x, w) * g).sum().backward();
  const auto xv = kt::host_values(x);
  std::vector<double> dw(n * k, 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t l = 0; l < k; ++l) dw[j * k + l] += gs[r * n + j] * xv[r * k + l];
  kt::expect_close_to_scale("dw", kt::host_values(*w.grad()), dw, 1e-5, 1e-6);
}

TEST_P(LinearTest, ModuleLinearGoesThroughIt) {
  kiln::nn::Linear lin(12, 6);
  lin.to(dev());
  const auto x = Tensor<2>::from_data(kt::uniform(4 * 12, -1, 1, rng()), {4, 12}, dev());
  const auto y = lin(x);
  const auto composed = kiln::matmul(x, lin.weight.tensor().transpose(0, 1)) + lin.bias.tensor();
  kt::expect_close_to_scale("nn::Linear", kt::host_values(y), kt::host_values(composed), 1e-6,
                            1e-7);
}

TEST_P(LinearTest, EmptyAndZeroInnerDim) {
  const auto w0 = Tensor<2>::zeros({3, 0}, DType::f32, dev());
  const auto b = Tensor<1>::from_data(std::vector<float>{1, -2, 3}, {3}, dev());
  const auto x0 = Tensor<2>::zeros({2, 0}, DType::f32, dev());
  // k = 0: the product is zero, so y = act(bias) on every row.
  EXPECT_EQ(kiln::linear(x0, w0, b, Activation::relu).to_vector<float>(),
            (std::vector<float>{1, 0, 3, 1, 0, 3}));
  const auto w = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  EXPECT_EQ(kiln::linear(Tensor<2>::zeros({0, 4}, DType::f32, dev()), w, b).shape(),
            (kiln::Shape<2>{0, 3}));
}

TEST_P(LinearTest, BadInputsGiveClearErrors) {
  const auto x = Tensor<2>::zeros({2, 4}, DType::f32, dev());
  const auto w = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  EXPECT_THROW(kiln::linear(x, Tensor<2>::zeros({3, 5}, DType::f32, dev())), kiln::ShapeError);
  EXPECT_THROW(kiln::linear(x, w, Tensor<1>::zeros({4}, DType::f32, dev())), kiln::ShapeError);
  EXPECT_THROW(kiln::linear(x, w.to(DType::bf16)), kiln::DTypeError);
  EXPECT_THROW(kiln::linear(x, w, Tensor<1>::zeros({3}, DType::f32, dev()).to(DType::f16)),
               kiln::DTypeError);
  EXPECT_THROW(kiln::linear(x.to(DType::i32), w.to(DType::i32)), kiln::DTypeError);
  if (dev().kind() == kiln::Device::Kind::cuda) {
    EXPECT_THROW(kiln::linear(x, w.to(kiln::Device::cpu())), kiln::DeviceError);
  }
}

// The backend's contract, called directly: what the epilogue may be given, and its bias and
// activation against the product where the backend runs them.
TEST_P(LinearTest, BackendEpilogueContract) {
  using kiln::detail::EpilogueActivation;
  using kiln::detail::MatmulEpilogue;
  using kiln::detail::Out;
  auto& be = kiln::detail::backend(dev());
  const std::int64_t m = 16, k = 32, n = 8;
  const auto a = Tensor<3>::from_data(kt::uniform(m * k, -1, 1, rng()), {1, m, k}, dev());
  const auto c = Tensor<3>::from_data(kt::uniform(k * n, -1, 1, rng()), {1, k, n}, dev());
  const auto out = Tensor<3>::full({1, m, n}, NAN, DType::f32, dev());
  const auto z = Tensor<3>::full({1, m, n}, NAN, DType::f32, dev());
  const auto bias = Tensor<1>::from_data(kt::uniform(n, -1, 1, rng()), {n}, dev());
  const auto& ai = *a.handle("t");
  const auto& ci = *c.handle("t");
  const auto b4 = Tensor<1>::zeros({4}, DType::f32, dev());
  MatmulEpilogue short_bias;
  short_bias.bias = b4.handle("t").get();
  EXPECT_THROW(be.matmul_epilogue(ai, ci, short_bias, Out(*out.handle("t"))), kiln::ShapeError);
  const auto b16 = bias.to(DType::f16);
  MatmulEpilogue half_bias;
  half_bias.bias = b16.handle("t").get();
  EXPECT_THROW(be.matmul_epilogue(ai, ci, half_bias, Out(*out.handle("t"))), kiln::DTypeError);
  MatmulEpilogue aux_alone;
  aux_alone.pre_activation.emplace(*z.handle("t"));
  EXPECT_THROW(be.matmul_epilogue(ai, ci, aux_alone, Out(*out.handle("t"))), kiln::ValueError);
  const auto small = Tensor<3>::zeros({1, m, 4}, DType::f32, dev());
  MatmulEpilogue aux_shape;
  aux_shape.activation = EpilogueActivation::gelu_tanh;
  aux_shape.pre_activation.emplace(*small.handle("t"));
  EXPECT_THROW(be.matmul_epilogue(ai, ci, aux_shape, Out(*out.handle("t"))), kiln::ShapeError);

  MatmulEpilogue relu;
  relu.bias = bias.handle("t").get();
  relu.activation = EpilogueActivation::relu;
  if (!be.matmul_epilogue(ai, ci, relu, Out(*out.handle("t")))) {
    SUCCEED() << be.name() << " composes this epilogue";
    return;
  }
  const auto want = (kiln::matmul(a, c) + bias).relu();
  kt::expect_close_to_scale("relu(a c + bias)", kt::host_values(out), kt::host_values(want), 1e-6,
                            1e-6);
}

}  // namespace
