// The differential fuzzer of fusion: random element-wise programs run fused and unfused (bit
// for bit equal, NaN equal to NaN) and against a float64 reference.
//
// A program is a random DAG of 1-40 nodes over 1-4 inputs. Every tensor is a Tensor<4>; an
// input of rank r < 4 is a rank-4 shape with leading 1s, which broadcasts exactly as the rank-r
// tensor would, and size-1 extents among the rest make inputs broadcast against each other.
// Nodes are unary ops, binary ops of two nodes (broadcasting), ops with a scalar (NaN, Inf, 0,
// negative among them), comparisons feeding `where`, casts through i32, views of earlier nodes
// (transpose, slice with a step, expand of a size-1 dim) and sometimes a keepdim sum. About half
// of the intermediates are dropped before anything is read, the rest are read and checked.
// KILN_FUZZ_SEED and KILN_FUZZ_PROGRAMS override the base seed and the count; a failure prints
// the seed and the program.
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "test_support.hpp"

namespace {

using kiln::Tensor;
using Shape4 = std::array<std::int64_t, 4>;

// A node's float64 reference: dense row-major values of its shape, rounded to float after each
// op as kiln computes, so that only the functions' last-bit differences separate the two.
struct Ref4 {
  Shape4 shape{};
  std::vector<double> v;
  double at(const Shape4& i) const {  // broadcast read
    std::int64_t k = 0;
    for (int d = 0; d < 4; ++d) k = k * shape[d] + (shape[d] == 1 ? 0 : i[d]);
    return v[k];
  }
};

std::int64_t count(const Shape4& s) { return s[0] * s[1] * s[2] * s[3]; }

template <class F>
Ref4 map_ref(const Shape4& s, F f) {
  Ref4 r{s, std::vector<double>(count(s))};
  Shape4 i{};
  for (std::int64_t k = 0; k < count(s); ++k) {
    std::int64_t rem = k;
    for (int d = 3; d >= 0; --d) i[d] = rem % s[d], rem /= s[d];
    r.v[k] = static_cast<float>(f(i));
  }
  return r;
}

Shape4 broadcast(const Shape4& a, const Shape4& b) {
  Shape4 o{};
  for (int d = 0; d < 4; ++d) o[d] = std::max(a[d], b[d]);
  return o;
}

double to_i32(double x) {  // kiln's f32 -> i32: truncate, saturate, NaN -> 0
  if (std::isnan(x)) return 0;
  return std::clamp(std::trunc(x), -2147483648.0, 2147483647.0);
}

struct Node {
  std::optional<Tensor<4>> t;
  Ref4 ref;
  std::string text;
  bool keep = false;
};

class Program {
 public:
  Program(std::uint64_t seed, kiln::Device dev) : rng_(seed), dev_(dev) {}

  void build() {
    const int inputs = pick(1, 4), ops = pick(1, 40);
    Shape4 base{pick(1, 3), pick(1, 4), pick(1, 5), pick(1, 6)};
    for (int i = 0; i < inputs; ++i) {
      Shape4 s = base;
      const int rank = pick(0, 4);
      for (int d = 0; d < 4 - rank; ++d) s[d] = 1;                     // a lower rank
      for (int d = 4 - rank; d < 4; ++d) s[d] = coin(0.2) ? 1 : s[d];  // a broadcast dim
      std::vector<float> v(count(s));
      std::uniform_real_distribution<float> u(-3, 3);
      for (auto& x : v) x = u(rng_);
      Node n;
      n.t = Tensor<4>::from_data(v, s, dev_);
      n.ref = {s, std::vector<double>(v.begin(), v.end())};
      n.text = "input " + kiln::format_dims({s.begin(), s.end()});
      nodes_.push_back(std::move(n));
    }
    for (int k = 0; k < ops; ++k) add_op();
    for (auto& n : nodes_) n.keep = coin(0.5);
    nodes_.back().keep = true;
    for (auto& n : nodes_)
      if (!n.keep) n.t.reset();  // dropped before anything runs
  }

  std::string listing() const {
    std::string s;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      s += "  %" + std::to_string(i) + " = " + nodes_[i].text +
           (nodes_[i].keep ? "" : " (dropped)") + "\n";
    return s;
  }

  // The kept nodes' values, read back.
  std::vector<std::vector<float>> results() const {
    std::vector<std::vector<float>> out;
    for (const auto& n : nodes_)
      if (n.keep) out.push_back(n.t->to_vector());
    return out;
  }
  std::vector<const Ref4*> refs() const {
    std::vector<const Ref4*> out;
    for (const auto& n : nodes_)
      if (n.keep) out.push_back(&n.ref);
    return out;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  const Node& any() { return nodes_[pick(0, static_cast<int>(nodes_.size()) - 1)]; }
  float scalar() {
    constexpr float kSpecial[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, -1.5f, 2.5f, 0.5f, 1e-3f};
    return kSpecial[pick(0, 8)];
  }
  void push(Tensor<4> t, Ref4 r, std::string text) {
    nodes_.push_back({std::move(t), std::move(r), std::move(text)});
  }

  void add_op() {
    const Node& a = any();
    const Shape4& s = a.ref.shape;
    switch (pick(0, 9)) {
      case 0: {
        static const char* names[] = {"neg", "abs",  "sin",  "cos",     "exp",
                                      "log", "sqrt", "tanh", "sigmoid", "relu"};
        const int u = pick(0, 9);
        Tensor<4> t = *a.t;
        double (*f)(double) = nullptr;
        switch (u) {
          case 0:
            t = t.neg();
            f = [](double x) { return -x; };
            break;
          case 1:
            t = t.abs();
            f = [](double x) { return std::fabs(x); };
            break;
          case 2:
            t = t.sin();
            f = [](double x) { return std::sin(x); };
            break;
          case 3:
            t = t.cos();
            f = [](double x) { return std::cos(x); };
            break;
          case 4:
            t = t.exp();
            f = [](double x) { return std::exp(x); };
            break;
          case 5:
            t = t.log();
            f = [](double x) { return std::log(x); };
            break;
          case 6:
            t = t.sqrt();
            f = [](double x) { return std::sqrt(x); };
            break;
          case 7:
            t = t.tanh();
            f = [](double x) { return std::tanh(x); };
            break;
          case 8:
            t = t.sigmoid();
            f = [](double x) { return 1 / (1 + std::exp(-x)); };
            break;
          default:
            t = t.relu();
            f = [](double x) { return x <= 0 ? 0.0 : x; };
            break;
        }
        push(t, map_ref(s, [&](const Shape4& i) { return f(a.ref.at(i)); }), names[u] + operand(a));
        return;
      }
      case 1:
      case 2: {  // binary over two nodes, broadcasting where the shapes allow
        const Node& b = any();
        bool ok = true;
        for (int d = 0; d < 4; ++d)
          ok = ok && (s[d] == b.ref.shape[d] || s[d] == 1 || b.ref.shape[d] == 1);
        if (!ok) return add_op();
        const Shape4 o = broadcast(s, b.ref.shape);
        const int op = pick(0, 5);
        static const char* names[] = {"add", "sub", "mul", "div", "minimum", "maximum"};
        Tensor<4> t = op == 0   ? *a.t + *b.t
                      : op == 1 ? *a.t - *b.t
                      : op == 2 ? *a.t * *b.t
                      : op == 3 ? *a.t / *b.t
                      : op == 4 ? kiln::minimum(*a.t, *b.t)
                                : kiln::maximum(*a.t, *b.t);
        auto f = [op](double x, double y) {
          if (op >= 4 && (std::isnan(x) || std::isnan(y))) return NAN + 0.0;
          return op == 0   ? x + y
                 : op == 1 ? x - y
                 : op == 2 ? x * y
                 : op == 3 ? x / y
                 : op == 4 ? std::min(x, y)
                           : std::max(x, y);
        };
        push(t, map_ref(o, [&](const Shape4& i) { return f(a.ref.at(i), b.ref.at(i)); }),
             std::string(names[op]) + operand(a) + operand(b));
        return;
      }
      case 3:
      case 4: {  // with a scalar, on either side
        const float c = scalar();
        const bool first = coin(0.5);
        const int op = pick(0, 2);
        Tensor<4> t = op == 0   ? (first ? c + *a.t : *a.t + c)
                      : op == 1 ? (first ? c * *a.t : *a.t * c)
                                : (first ? c - *a.t : *a.t - c);
        auto f = [&](double x) {
          return op == 0 ? x + c : op == 1 ? x * c : first ? c - x : x - c;
        };
        push(t, map_ref(s, [&](const Shape4& i) { return f(a.ref.at(i)); }),
             std::string(op == 0   ? "add"
                         : op == 1 ? "mul"
                                   : "sub") +
                 (first ? " scalar" : "") + operand(a) + " " + std::to_string(c));
        return;
      }
      case 5: {  // where(a > b, a, b) with b another node of a's shape, or a scalar
        const Node& b = any();
        if (b.ref.shape != s) return add_op();
        Tensor<4> t = kiln::where(*a.t > *b.t, *a.t, *b.t - 1.0f);
        push(t,
             map_ref(s,
                     [&](const Shape4& i) {
                       const double x = a.ref.at(i), y = b.ref.at(i);
                       return x > y ? x : static_cast<double>(static_cast<float>(y - 1.0));
                     }),
             "where gt" + operand(a) + operand(b));
        return;
      }
      case 6: {  // cast through i32
        Tensor<4> t = a.t->to(kiln::DType::i32).to(kiln::DType::f32);
        push(t, map_ref(s, [&](const Shape4& i) { return to_i32(a.ref.at(i)); }),
             "cast i32 f32" + operand(a));
        return;
      }
      case 7: {  // a transposed view
        Tensor<4> t = a.t->transpose(2, 3);
        const Shape4 o{s[0], s[1], s[3], s[2]};
        push(t,
             map_ref(o,
                     [&](const Shape4& i) {
                       return a.ref.at({i[0], i[1], i[3], i[2]});
                     }),
             "transpose" + operand(a));
        return;
      }
      case 8: {  // a strided slice, or an expand of a size-1 dim
        if (s[3] >= 2) {
          Tensor<4> t = a.t->slice(3, 0, s[3], 2);
          const Shape4 o{s[0], s[1], s[2], (s[3] + 1) / 2};
          push(t,
               map_ref(o,
                       [&](const Shape4& i) {
                         return a.ref.at({i[0], i[1], i[2], 2 * i[3]});
                       }),
               "slice step 2" + operand(a));
        } else {
          const Shape4 o{s[0], s[1], s[2], 3};
          Tensor<4> t = a.t->expand<4>(o);
          push(t, map_ref(o, [&](const Shape4& i) { return a.ref.at(i); }), "expand" + operand(a));
        }
        return;
      }
      default: {  // a reduction in the middle: sum over a dim, kept
        const int d = pick(0, 3);
        Tensor<4> t = a.t->sum(d, kiln::keepdim);
        Shape4 o = s;
        o[d] = 1;
        push(t,
             map_ref(o,
                     [&](const Shape4& i) {
                       double acc = 0;
                       Shape4 j = i;
                       for (j[d] = 0; j[d] < s[d]; ++j[d]) acc += a.ref.at(j);
                       return acc;
                     }),
             "sum keepdim " + std::to_string(d) + operand(a));
        return;
      }
    }
  }
  std::string operand(const Node& n) const { return " %" + std::to_string(&n - nodes_.data()); }

  std::mt19937_64 rng_;
  kiln::Device dev_;
  std::vector<Node> nodes_;
};

bool same(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

std::uint64_t env_or(const char* var, std::uint64_t fallback) {
  const char* v = std::getenv(var);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

class FusionFuzz : public kt::DeviceTest {
 protected:
  kt::ConfigGuard guard_;
};
KILN_INSTANTIATE_DEVICES(FusionFuzz);

TEST_P(FusionFuzz, FusedEqualsUnfusedAndTheReference) {
  const std::uint64_t base = env_or("KILN_FUZZ_SEED", 20261203);
  // On CUDA nearly every random group is a new structure, so a new NVRTC compile (tens of ms):
  // the GPU machine runs fewer programs unless told otherwise.
  const bool cpu = dev().kind() == kiln::Device::Kind::cpu;
  const std::uint64_t programs = env_or("KILN_FUZZ_PROGRAMS", cpu ? 2000 : 150);
  kiln::Config fused = kiln::config(), eager = fused;
  fused.fusion = true;
  eager.fusion = false;
  long long checked = 0, off_reference = 0;
  for (std::uint64_t p = 0; p < programs; ++p) {
    const std::uint64_t seed = base + p;
    kiln::set_config(fused);
    Program a(seed, dev());
    a.build();
    const auto got = a.results();
    kiln::set_config(eager);
    Program b(seed, dev());
    b.build();
    const auto want = b.results();
    const auto refs = a.refs();
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].size(), want[k].size());
      for (std::size_t i = 0; i < got[k].size(); ++i) {
        ASSERT_TRUE(same(got[k][i], want[k][i]))
            << "KILN_FUZZ_SEED=" << seed << " KILN_FUZZ_PROGRAMS=1: kept result " << k
            << ", element " << i << ": fused " << got[k][i] << ", unfused " << want[k][i]
            << "\nprogram:\n"
            << a.listing();
        const double r = refs[k]->v[i];
        if (!std::isfinite(r) || std::fabs(r) > 1e6) continue;
        ++checked;
        off_reference += !(std::fabs(got[k][i] - r) <= 1e-3 * (1 + std::fabs(r)));
      }
    }
  }
  // Comparisons near a tie and functions' last bits can flip a few elements against the
  // reference; a wrong wiring or op flips many.
  EXPECT_LE(off_reference, checked / 200)
      << off_reference << " of " << checked << " elements off the float64 reference";
  EXPECT_GT(checked, static_cast<long long>(programs) * 5);
}

}  // namespace
