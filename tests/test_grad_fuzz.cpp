// Differential fuzzer of autodiff (src/autodiff/). Random programs over rank-3 f32 leaves
// (extents 1-4 from one frame, or 1, so that most nodes broadcast together) built from smooth
// unary ops, binary ops with broadcasting, scalar ops, views (transpose, permute, slice with a
// step, expand, reshape), reductions with keepdim (sum, mean, max, min), batched matmul with a
// new leaf, softmax and log_softmax along any dim, layer_norm, cat, where and cumsum. The loss sums
// one to three nodes, each weighted by a fixed random tensor, so that gradients from several uses
// of a node accumulate. New leaves can appear mid-program.
//
// Each program runs with fusion on and off; both runs' leaf gradients must match central finite
// differences of a float64 evaluation of the same program (here, h = 1e-6) to 1e-3 of the leaf's
// largest gradient (or of 0.05, whichever is larger: a gradient that cancels to about 0, as
// layer_norm's do, keeps the f32 rounding of its terms) plus 1e-4 of the element's. Inputs stay
// away from kinks (abs, relu, max/min ties, minimum/maximum of near-equal values) and from poles,
// by at least 1e-2, so the differences are exact to the bound.
//
// KILN_FUZZ_SEED=N sets the base seed (program i uses N + i); KILN_GRAD_FUZZ_PROGRAMS=M the count
// (default 500 on the CPU, where 30,000 take 6 s; 100 on CUDA, where each program compiles its
// fused kernels with NVRTC: bench/h200_call.sh runs 2000 there).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_support.hpp"

namespace {

using kiln::Tensor;
using Shape3 = std::array<std::int64_t, 3>;

// A float64 tensor of rank 3, row-major.
struct Ref {
  Shape3 s{1, 1, 1};
  std::vector<double> v;
  std::int64_t numel() const { return s[0] * s[1] * s[2]; }
  double at(std::int64_t i, std::int64_t j, std::int64_t k) const {
    return v[(i * s[1] + j) * s[2] + k];
  }
  // Reads with broadcasting: a size-1 dim repeats.
  double bat(std::int64_t i, std::int64_t j, std::int64_t k) const {
    return at(s[0] == 1 ? 0 : i, s[1] == 1 ? 0 : j, s[2] == 1 ? 0 : k);
  }
};

Ref make(const Shape3& s,
         const std::function<double(std::int64_t, std::int64_t, std::int64_t)>& f) {
  Ref r{s, {}};
  r.v.reserve(static_cast<std::size_t>(r.numel()));
  for (std::int64_t i = 0; i < s[0]; ++i)
    for (std::int64_t j = 0; j < s[1]; ++j)
      for (std::int64_t k = 0; k < s[2]; ++k) r.v.push_back(f(i, j, k));
  return r;
}

bool broadcastable(const Shape3& a, const Shape3& b) {
  for (int d = 0; d < 3; ++d)
    if (a[d] != b[d] && a[d] != 1 && b[d] != 1) return false;
  return true;
}
Shape3 broadcast(const Shape3& a, const Shape3& b) {
  return {std::max(a[0], b[0]), std::max(a[1], b[1]), std::max(a[2], b[2])};
}

// The smooth unary ops: name, the kiln op, the float64 value. Those with a domain guard or a
// kink are applied to x^2 + 1/2 (sqrt, log, rsqrt) or only away from 0 (abs, relu).
struct Unary {
  const char* name;
  std::function<Tensor<3>(const Tensor<3>&)> op;
  std::function<double(double)> ref;
  bool kink = false;  // needs |x| >= 1e-2
  double max_abs = 1e30;
};
const std::vector<Unary>& unaries() {
  static const std::vector<Unary> u = {
      {"sin", [](const Tensor<3>& x) { return x.sin(); }, [](double x) { return std::sin(x); }},
      {"cos", [](const Tensor<3>& x) { return x.cos(); }, [](double x) { return std::cos(x); }},
      {"tanh", [](const Tensor<3>& x) { return x.tanh(); }, [](double x) { return std::tanh(x); }},
      {"exp", [](const Tensor<3>& x) { return x.exp(); }, [](double x) { return std::exp(x); },
       false, 3},
      {"sigmoid", [](const Tensor<3>& x) { return x.sigmoid(); },
       [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"gelu", [](const Tensor<3>& x) { return x.gelu(); },
       [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }},
      {"silu", [](const Tensor<3>& x) { return x.silu(); },
       [](double x) { return x / (1 + std::exp(-x)); }},
      {"erf", [](const Tensor<3>& x) { return x.erf(); }, [](double x) { return std::erf(x); }},
      {"neg", [](const Tensor<3>& x) { return -x; }, [](double x) { return -x; }},
      {"sqrt(x^2+.5)", [](const Tensor<3>& x) { return (x * x + 0.5f).sqrt(); },
       [](double x) { return std::sqrt(x * x + 0.5); }},
      {"log(x^2+.5)", [](const Tensor<3>& x) { return (x * x + 0.5f).log(); },
       [](double x) { return std::log(x * x + 0.5); }},
      {"rsqrt(x^2+.5)", [](const Tensor<3>& x) { return (x * x + 0.5f).rsqrt(); },
       [](double x) { return 1 / std::sqrt(x * x + 0.5); }},
      {"pow3", [](const Tensor<3>& x) { return x.pow(3.0); }, [](double x) { return x * x * x; },
       false, 4},
      {"abs", [](const Tensor<3>& x) { return x.abs(); }, [](double x) { return std::fabs(x); },
       true},
      {"relu", [](const Tensor<3>& x) { return x.relu(); },
       [](double x) { return x <= 0 ? 0.0 : x; }, true},
  };
  return u;
}

enum class Kind {
  unary,
  add,
  sub,
  mul,
  div,
  minimum,
  maximum,
  scale,
  transpose,
  permute,
  slice,
  expand,
  reshape,
  reduce,
  matmul,
  softmax,
  log_softmax,
  layer_norm,
  cat,
  where,
  cumsum
};
enum class Red { sum, mean, max, min };

struct Step {
  Kind kind;
  int a = -1, b = -1;  // node operands
  int u = 0;           // unary index
  int d0 = 0, d1 = 0;  // dims
  std::array<int, 3> perm{0, 1, 2};
  std::int64_t start = 0, stop = 0, stride = 1;
  Shape3 shape{};
  double c = 0;
  Red red = Red::sum;
  int leaf = -1;  // matmul's new leaf
  int mask = -1;  // where's condition (a constant)
  std::string text() const;
};

const char* kind_name(Kind k) {
  static const char* names[] = {
      "unary",  "add",       "sub",         "mul",        "div",    "minimum", "maximum",
      "scale",  "transpose", "permute",     "slice",      "expand", "reshape", "reduce",
      "matmul", "softmax",   "log_softmax", "layer_norm", "cat",    "where",   "cumsum"};
  return names[static_cast<int>(k)];
}

std::string Step::text() const {
  std::ostringstream o;
  o << (kind == Kind::unary ? unaries()[static_cast<std::size_t>(u)].name : kind_name(kind)) << "(n"
    << a;
  if (b >= 0) o << ", n" << b;
  if (leaf >= 0) o << ", leaf " << leaf;
  o << ") d" << d0 << "," << d1 << " red " << static_cast<int>(red) << " slice " << start << ":"
    << stop << ":" << stride << " shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << " c "
    << c;
  return o.str();
}

struct Program {
  // Nodes are numbered in the order they are made: a leaf is the node first_nodes names, every
  // other node the next step's result.
  std::vector<Ref> leaves;       // initial values (requires_grad)
  std::vector<int> first_nodes;  // the node each leaf is
  std::vector<Ref> constants;    // masks (0/1) for where
  std::vector<Step> steps;
  std::vector<int> loss_nodes;
  std::vector<Ref> loss_weights;  // of each loss node's shape
  std::string text() const {
    std::ostringstream o;
    for (std::size_t i = 0; i < steps.size(); ++i) o << "  " << steps[i].text() << "\n";
    o << "  loss over nodes";
    for (int n : loss_nodes) o << " " << n;
    return o.str();
  }
};

// ---- the float64 evaluation ----

Ref ref_reduce(const Ref& x, int dim, Red red) {
  Shape3 s = x.s;
  s[dim] = 1;
  return make(s, [&](std::int64_t i, std::int64_t j, std::int64_t k) {
    double acc = red == Red::max ? -INFINITY : red == Red::min ? INFINITY : 0;
    for (std::int64_t t = 0; t < x.s[dim]; ++t) {
      const double v = dim == 0 ? x.at(t, j, k) : dim == 1 ? x.at(i, t, k) : x.at(i, j, t);
      acc = red == Red::max ? std::max(acc, v) : red == Red::min ? std::min(acc, v) : acc + v;
    }
    return red == Red::mean ? acc / static_cast<double>(x.s[dim]) : acc;
  });
}

// Along dim: softmax, log_softmax or layer_norm (the last dim only) of each line.
Ref ref_lines(const Ref& x, int dim, Kind kind) {
  Ref out = x;
  Shape3 outer = x.s;
  outer[dim] = 1;
  for (std::int64_t i = 0; i < outer[0]; ++i)
    for (std::int64_t j = 0; j < outer[1]; ++j)
      for (std::int64_t k = 0; k < outer[2]; ++k) {
        auto idx = [&](std::int64_t t) {
          std::array<std::int64_t, 3> p{i, j, k};
          p[static_cast<std::size_t>(dim)] = t;
          return static_cast<std::size_t>((p[0] * x.s[1] + p[1]) * x.s[2] + p[2]);
        };
        const std::int64_t n = x.s[dim];
        if (kind == Kind::layer_norm) {
          double mean = 0, var = 0;
          for (std::int64_t t = 0; t < n; ++t) mean += x.v[idx(t)];
          mean /= static_cast<double>(n);
          for (std::int64_t t = 0; t < n; ++t) var += (x.v[idx(t)] - mean) * (x.v[idx(t)] - mean);
          var /= static_cast<double>(n);
          for (std::int64_t t = 0; t < n; ++t)
            out.v[idx(t)] = (x.v[idx(t)] - mean) / std::sqrt(var + 1e-5);
          continue;
        }
        double mx = -INFINITY, sum = 0;
        for (std::int64_t t = 0; t < n; ++t) mx = std::max(mx, x.v[idx(t)]);
        for (std::int64_t t = 0; t < n; ++t) sum += std::exp(x.v[idx(t)] - mx);
        for (std::int64_t t = 0; t < n; ++t) {
          const double z = x.v[idx(t)] - mx;
          out.v[idx(t)] = kind == Kind::softmax ? std::exp(z) / sum : z - std::log(sum);
        }
      }
  return out;
}

Ref ref_step(const Step& st, const std::vector<Ref>& nodes, const Program& p,
             const std::vector<Ref>& leaves) {
  const Ref& a = nodes[static_cast<std::size_t>(st.a)];
  auto binary = [&](auto f) {
    const Ref& b = nodes[static_cast<std::size_t>(st.b)];
    return make(broadcast(a.s, b.s), [&](std::int64_t i, std::int64_t j, std::int64_t k) {
      return f(a.bat(i, j, k), b.bat(i, j, k));
    });
  };
  switch (st.kind) {
    case Kind::unary: {
      Ref r = a;
      for (double& v : r.v) v = unaries()[static_cast<std::size_t>(st.u)].ref(v);
      return r;
    }
    case Kind::add:
      return binary([](double x, double y) { return x + y; });
    case Kind::sub:
      return binary([](double x, double y) { return x - y; });
    case Kind::mul:
      return binary([](double x, double y) { return x * y; });
    case Kind::div:
      return binary([](double x, double y) { return x / y; });
    case Kind::minimum:
      return binary([](double x, double y) { return std::min(x, y); });
    case Kind::maximum:
      return binary([](double x, double y) { return std::max(x, y); });
    case Kind::scale: {
      Ref r = a;
      for (double& v : r.v) v = v * st.c + 0.25;
      return r;
    }
    case Kind::transpose:
    case Kind::permute: {
      std::array<int, 3> perm = st.perm;
      if (st.kind == Kind::transpose) {
        perm = {0, 1, 2};
        std::swap(perm[static_cast<std::size_t>(st.d0)], perm[static_cast<std::size_t>(st.d1)]);
      }
      const Shape3 s{a.s[perm[0]], a.s[perm[1]], a.s[perm[2]]};
      return make(s, [&](std::int64_t i, std::int64_t j, std::int64_t k) {
        std::array<std::int64_t, 3> src{};
        src[static_cast<std::size_t>(perm[0])] = i;
        src[static_cast<std::size_t>(perm[1])] = j;
        src[static_cast<std::size_t>(perm[2])] = k;
        return a.at(src[0], src[1], src[2]);
      });
    }
    case Kind::slice: {
      Shape3 s = a.s;
      s[st.d0] = (st.stop - st.start + st.stride - 1) / st.stride;
      return make(s, [&](std::int64_t i, std::int64_t j, std::int64_t k) {
        std::array<std::int64_t, 3> q{i, j, k};
        q[static_cast<std::size_t>(st.d0)] =
            st.start + q[static_cast<std::size_t>(st.d0)] * st.stride;
        return a.at(q[0], q[1], q[2]);
      });
    }
    case Kind::expand:
      return make(st.shape,
                  [&](std::int64_t i, std::int64_t j, std::int64_t k) { return a.bat(i, j, k); });
    case Kind::reshape:
      return Ref{st.shape, a.v};
    case Kind::reduce:
      return ref_reduce(a, st.d0, st.red);
    case Kind::matmul: {
      const Ref& w = leaves[static_cast<std::size_t>(st.leaf)];
      return make({a.s[0], a.s[1], w.s[2]}, [&](std::int64_t i, std::int64_t j, std::int64_t k) {
        double acc = 0;
        for (std::int64_t t = 0; t < a.s[2]; ++t) acc += a.at(i, j, t) * w.at(i, t, k);
        return acc;
      });
    }
    case Kind::softmax:
    case Kind::log_softmax:
    case Kind::layer_norm:
      return ref_lines(a, st.d0, st.kind);
    case Kind::cat: {
      const Ref& b = nodes[static_cast<std::size_t>(st.b)];
      Shape3 s = a.s;
      s[st.d0] += b.s[st.d0];
      return make(s, [&](std::int64_t i, std::int64_t j, std::int64_t k) {
        std::array<std::int64_t, 3> q{i, j, k};
        std::int64_t& t = q[static_cast<std::size_t>(st.d0)];
        if (t < a.s[st.d0]) return a.at(q[0], q[1], q[2]);
        t -= a.s[st.d0];
        return b.at(q[0], q[1], q[2]);
      });
    }
    case Kind::cumsum: {
      Ref r = a;
      for (std::int64_t i = 0; i < a.s[0]; ++i)
        for (std::int64_t j = 0; j < a.s[1]; ++j)
          for (std::int64_t k = 0; k < a.s[2]; ++k) {
            std::array<std::int64_t, 3> q{i, j, k};
            if (q[static_cast<std::size_t>(st.d0)] == 0) continue;
            --q[static_cast<std::size_t>(st.d0)];
            r.v[static_cast<std::size_t>((i * a.s[1] + j) * a.s[2] + k)] +=
                r.v[static_cast<std::size_t>((q[0] * a.s[1] + q[1]) * a.s[2] + q[2])];
          }
      return r;
    }
    case Kind::where: {
      const Ref& b = nodes[static_cast<std::size_t>(st.b)];
      const Ref& m = p.constants[static_cast<std::size_t>(st.mask)];
      return make(broadcast(m.s, broadcast(a.s, b.s)),
                  [&](std::int64_t i, std::int64_t j, std::int64_t k) {
                    return m.bat(i, j, k) != 0 ? a.bat(i, j, k) : b.bat(i, j, k);
                  });
    }
  }
  return a;
}

// Every node of p, in order: leaves where p.first_nodes puts them, the others run(step, nodes).
template <class T, class Run>
std::vector<T> replay(const Program& p, const std::vector<T>& leaves, Run run) {
  std::vector<T> nodes;
  std::size_t next_leaf = 0, step = 0;
  const std::size_t total = p.first_nodes.size() + p.steps.size();
  while (nodes.size() < total) {
    if (next_leaf < p.first_nodes.size() &&
        p.first_nodes[next_leaf] == static_cast<int>(nodes.size())) {
      nodes.push_back(leaves[next_leaf++]);
      continue;
    }
    nodes.push_back(run(p.steps[step++], nodes));
  }
  return nodes;
}

// Every node's float64 value.
std::vector<Ref> ref_nodes(const Program& p, const std::vector<Ref>& leaves) {
  return replay(p, leaves, [&](const Step& st, const std::vector<Ref>& nodes) {
    return ref_step(st, nodes, p, leaves);
  });
}

double ref_loss(const Program& p, const std::vector<Ref>& leaves) {
  const auto nodes = ref_nodes(p, leaves);
  double loss = 0;
  for (std::size_t i = 0; i < p.loss_nodes.size(); ++i) {
    const Ref& n = nodes[static_cast<std::size_t>(p.loss_nodes[i])];
    for (std::size_t e = 0; e < n.v.size(); ++e) loss += n.v[e] * p.loss_weights[i].v[e];
  }
  return loss;
}

// ---- the generator ----

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : g_(seed) {}

  Program program() {
    Program p;
    for (auto& e : frame_) e = pick(1, 4);
    const int first = pick(1, 2);
    for (int i = 0; i < first; ++i) add_leaf(p, frame_shape());
    const int steps = pick(2, 10);
    for (int tries = 0; static_cast<int>(p.steps.size()) < steps && tries < 200; ++tries) {
      if (auto st = step(p)) {
        p.steps.push_back(*st);
        nodes_.push_back(ref_step(*st, nodes_, p, p.leaves));
      }
    }
    const int outs = std::min<int>(pick(1, 3), static_cast<int>(nodes_.size()));
    p.loss_nodes.push_back(static_cast<int>(nodes_.size()) - 1);
    while (static_cast<int>(p.loss_nodes.size()) < outs)
      p.loss_nodes.push_back(pick(0, static_cast<int>(nodes_.size()) - 1));
    for (int n : p.loss_nodes)
      p.loss_weights.push_back(random_ref(nodes_[static_cast<std::size_t>(n)].s, -1, 1));
    return p;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(g_);
  }
  Shape3 frame_shape() {
    Shape3 s;
    for (int d = 0; d < 3; ++d) s[d] = pick(0, 3) == 0 ? 1 : frame_[d];
    return s;
  }
  // Values are rounded to float: the kiln leaves hold exactly these.
  Ref random_ref(const Shape3& s, double lo, double hi) {
    return make(s, [&](std::int64_t, std::int64_t, std::int64_t) {
      return static_cast<double>(static_cast<float>(uniform(lo, hi)));
    });
  }
  int add_leaf(Program& p, const Shape3& s) {
    p.leaves.push_back(random_ref(s, -1, 1));
    p.first_nodes.push_back(static_cast<int>(nodes_.size()));
    nodes_.push_back(p.leaves.back());
    return static_cast<int>(p.leaves.size()) - 1;
  }
  int any_node() { return pick(0, static_cast<int>(nodes_.size()) - 1); }
  const Ref& node(int i) const { return nodes_[static_cast<std::size_t>(i)]; }
  static double min_abs(const Ref& r) {
    double m = INFINITY;
    for (double v : r.v) m = std::min(m, std::fabs(v));
    return m;
  }
  static double max_abs(const Ref& r) {
    double m = 0;
    for (double v : r.v) m = std::max(m, std::fabs(v));
    return m;
  }
  // Every line along dim has its largest (or smallest) element ahead of the next by 1e-2.
  static bool clear_extremes(const Ref& x, int dim, bool largest) {
    Ref y = x;
    if (!largest)
      for (double& v : y.v) v = -v;
    const Ref top = ref_reduce(y, dim, Red::max);
    for (std::int64_t i = 0; i < x.s[0]; ++i)
      for (std::int64_t j = 0; j < x.s[1]; ++j)
        for (std::int64_t k = 0; k < x.s[2]; ++k) {
          const double v = y.at(i, j, k);
          const double t = top.at(dim == 0 ? 0 : i, dim == 1 ? 0 : j, dim == 2 ? 0 : k);
          if (v != t && t - v < 1e-2) return false;
          if (v == t) {  // a tie of the maximum with another element
            int count = 0;
            for (std::int64_t u = 0; u < x.s[dim]; ++u) {
              const double w = dim == 0 ? y.at(u, j, k) : dim == 1 ? y.at(i, u, k) : y.at(i, j, u);
              count += w == t;
            }
            if (count > 1) return false;
          }
        }
    return true;
  }

  std::optional<Step> step(Program& p) {
    Step st;
    st.a = any_node();
    const Ref& a = node(st.a);
    st.kind = static_cast<Kind>(pick(0, static_cast<int>(Kind::cumsum)));
    switch (st.kind) {
      case Kind::unary: {
        st.u = pick(0, static_cast<int>(unaries().size()) - 1);
        const Unary& u = unaries()[static_cast<std::size_t>(st.u)];
        if (max_abs(a) > u.max_abs || (u.kink && min_abs(a) < 1e-2)) return std::nullopt;
        return st;
      }
      case Kind::add:
      case Kind::sub:
      case Kind::mul:
      case Kind::div:
      case Kind::minimum:
      case Kind::maximum: {
        st.b = any_node();
        const Ref& b = node(st.b);
        if (!broadcastable(a.s, b.s)) return std::nullopt;
        if (st.kind == Kind::div && min_abs(b) < 0.3) return std::nullopt;
        if (st.kind == Kind::minimum || st.kind == Kind::maximum) {
          const Shape3 s = broadcast(a.s, b.s);
          for (std::int64_t i = 0; i < s[0]; ++i)
            for (std::int64_t j = 0; j < s[1]; ++j)
              for (std::int64_t k = 0; k < s[2]; ++k)
                if (std::fabs(a.bat(i, j, k) - b.bat(i, j, k)) < 1e-2) return std::nullopt;
        }
        return st;
      }
      case Kind::scale:
        st.c = uniform(-2, 2);
        return st;
      case Kind::transpose:
        st.d0 = pick(0, 2);
        st.d1 = pick(0, 2);
        return st;
      case Kind::permute:
        std::shuffle(st.perm.begin(), st.perm.end(), g_);
        return st;
      case Kind::slice: {
        st.d0 = pick(0, 2);
        const std::int64_t n = a.s[st.d0];
        st.start = pick(0, static_cast<int>(n) - 1);
        st.stop = pick(static_cast<int>(st.start) + 1, static_cast<int>(n));
        st.stride = pick(1, 2);
        return st;
      }
      case Kind::expand:
        for (int d = 0; d < 3; ++d) st.shape[d] = a.s[d] == 1 ? frame_[d] : a.s[d];
        return st;
      case Kind::reshape: {
        // Merge two neighbouring dims and split off a 1, or move extents around a 1.
        const Shape3 s = a.s;
        const int choice = pick(0, 2);
        st.shape = choice == 0   ? Shape3{1, s[0] * s[1], s[2]}
                   : choice == 1 ? Shape3{s[0], 1, s[1] * s[2]}
                                 : Shape3{s[0] * s[1] * s[2], 1, 1};
        return st;
      }
      case Kind::reduce:
        st.d0 = pick(0, 2);
        st.red = static_cast<Red>(pick(0, 3));
        if ((st.red == Red::max || st.red == Red::min) &&
            !clear_extremes(a, st.d0, st.red == Red::max))
          return std::nullopt;
        return st;
      case Kind::matmul:
        st.leaf = add_leaf(p, {a.s[0], a.s[2], pick(1, 4)});
        // The leaf became a node before this step's node: node numbering counts it.
        return st;
      case Kind::softmax:
      case Kind::log_softmax:
      case Kind::cumsum:
        st.d0 = pick(0, 2);
        return st;
      case Kind::layer_norm: {
        st.d0 = 2;
        if (a.s[2] < 2) return std::nullopt;
        // Every line's variance at least 1e-2: rstd's derivative stays tame.
        const Ref mean = ref_reduce(a, 2, Red::mean);
        for (std::int64_t i = 0; i < a.s[0]; ++i)
          for (std::int64_t j = 0; j < a.s[1]; ++j) {
            double var = 0;
            for (std::int64_t k = 0; k < a.s[2]; ++k)
              var += std::pow(a.at(i, j, k) - mean.at(i, j, 0), 2);
            if (var / static_cast<double>(a.s[2]) < 1e-2) return std::nullopt;
          }
        return st;
      }
      case Kind::cat: {
        st.d0 = pick(0, 2);
        st.b = any_node();
        const Ref& b = node(st.b);
        for (int d = 0; d < 3; ++d)
          if (d != st.d0 && a.s[d] != b.s[d]) return std::nullopt;
        return st;
      }
      case Kind::where: {
        st.b = any_node();
        const Ref& b = node(st.b);
        if (!broadcastable(a.s, b.s)) return std::nullopt;
        const Shape3 s = frame_shape();
        if (!broadcastable(s, broadcast(a.s, b.s))) return std::nullopt;
        p.constants.push_back(make(s, [&](std::int64_t, std::int64_t, std::int64_t) {
          return static_cast<double>(pick(0, 1));
        }));
        st.mask = static_cast<int>(p.constants.size()) - 1;
        return st;
      }
    }
    return std::nullopt;
  }

  std::mt19937_64 g_;
  Shape3 frame_{};
  std::vector<Ref> nodes_;
};

// ---- the kiln run ----

Tensor<3> upload(const Ref& r, const kiln::Device& dev) {
  std::vector<float> f(r.v.begin(), r.v.end());
  return Tensor<3>::from_data(f, {r.s[0], r.s[1], r.s[2]}, dev);
}

Tensor<3> kiln_step(const Step& st, const std::vector<Tensor<3>>& nodes,
                    const std::vector<Tensor<3>>& leaves, const std::vector<Tensor<3>>& masks) {
  const Tensor<3>& a = nodes[static_cast<std::size_t>(st.a)];
  auto b = [&] { return nodes[static_cast<std::size_t>(st.b)]; };
  switch (st.kind) {
    case Kind::unary:
      return unaries()[static_cast<std::size_t>(st.u)].op(a);
    case Kind::add:
      return a + b();
    case Kind::sub:
      return a - b();
    case Kind::mul:
      return a * b();
    case Kind::div:
      return a / b();
    case Kind::minimum:
      return kiln::minimum(a, b());
    case Kind::maximum:
      return kiln::maximum(a, b());
    case Kind::scale:
      return a * static_cast<float>(st.c) + 0.25f;
    case Kind::transpose:
      return a.transpose(st.d0, st.d1);
    case Kind::permute:
      return a.permute(st.perm);
    case Kind::slice:
      return a.slice(st.d0, st.start, st.stop, st.stride);
    case Kind::expand:
      return a.expand({st.shape[0], st.shape[1], st.shape[2]});
    case Kind::reshape:
      return a.reshape({st.shape[0], st.shape[1], st.shape[2]});
    case Kind::reduce:
      switch (st.red) {
        case Red::sum:
          return a.sum(st.d0, kiln::keepdim);
        case Red::mean:
          return a.mean(st.d0, kiln::keepdim);
        case Red::max:
          return a.max(st.d0, kiln::keepdim);
        case Red::min:
          return a.min(st.d0, kiln::keepdim);
      }
      break;
    case Kind::matmul:
      return kiln::matmul(a, leaves[static_cast<std::size_t>(st.leaf)]);
    case Kind::softmax:
      return a.softmax(st.d0);
    case Kind::log_softmax:
      return a.log_softmax(st.d0);
    case Kind::layer_norm:
      return kiln::layer_norm(a);
    case Kind::cat:
      return kiln::cat({a, b()}, st.d0);
    case Kind::where:
      return kiln::where(masks[static_cast<std::size_t>(st.mask)], a, b());
    case Kind::cumsum:
      return a.cumsum(st.d0);
  }
  return a;
}

// Each leaf's gradient as kiln computes it.
std::vector<std::vector<float>> kiln_gradients(const Program& p, const kiln::Device& dev) {
  std::vector<Tensor<3>> leaves, masks;
  for (const Ref& r : p.leaves) leaves.push_back(upload(r, dev).requires_grad(true));
  for (const Ref& r : p.constants) masks.push_back(upload(r, dev) != 0.0f);
  std::vector<Tensor<3>> nodes =
      replay(p, leaves, [&](const Step& st, const std::vector<Tensor<3>>& made) {
        return kiln_step(st, made, leaves, masks);
      });
  std::optional<Tensor<0>> loss;
  for (std::size_t i = 0; i < p.loss_nodes.size(); ++i) {
    auto term =
        (nodes[static_cast<std::size_t>(p.loss_nodes[i])] * upload(p.loss_weights[i], dev)).sum();
    loss = loss ? *loss + term : term;
  }
  nodes.clear();  // the graph is owned by the loss alone from here
  loss->backward();
  std::vector<std::vector<float>> grads;
  for (const Tensor<3>& l : leaves) {
    const auto g = l.grad();
    grads.push_back(g ? g->to_vector()
                      : std::vector<float>(static_cast<std::size_t>(l.numel()), 0));
  }
  return grads;
}

// Central differences of the float64 loss, leaf by leaf.
std::vector<std::vector<double>> reference_gradients(const Program& p) {
  constexpr double h = 1e-6;
  std::vector<std::vector<double>> grads;
  std::vector<Ref> leaves = p.leaves;
  for (std::size_t l = 0; l < leaves.size(); ++l) {
    std::vector<double> g(leaves[l].v.size());
    for (std::size_t e = 0; e < g.size(); ++e) {
      const double x = leaves[l].v[e];
      leaves[l].v[e] = x + h;
      const double up = ref_loss(p, leaves);
      leaves[l].v[e] = x - h;
      const double down = ref_loss(p, leaves);
      leaves[l].v[e] = x;
      g[e] = (up - down) / (2 * h);
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

class GradFuzz : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(GradFuzz);

TEST_P(GradFuzz, FusedAndUnfusedGradientsMatchFiniteDifferences) {
  const bool cuda = dev().kind() == kiln::Device::Kind::cuda;
  const std::uint64_t count = env_or("KILN_GRAD_FUZZ_PROGRAMS", cuda ? 100 : 500);
  const std::uint64_t base = env_or("KILN_FUZZ_SEED", seed());
  kt::ConfigGuard guard;
  int checked = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t s = base + i;
    const Program p = Generator(s).program();
    const auto want = reference_gradients(p);
    for (const bool fused : {true, false}) {
      kiln::Config c = kiln::config();
      c.fusion = fused;
      kiln::set_config(c);
      const auto got = kiln_gradients(p, dev());
      for (std::size_t l = 0; l < want.size(); ++l) {
        double scale =
            5e-2;  // a floor: a gradient that cancels to ~0 keeps the f32 noise of its terms
        for (double w : want[l]) scale = std::max(scale, std::fabs(w));
        for (std::size_t e = 0; e < want[l].size(); ++e) {
          ASSERT_NEAR(got[l][e], want[l][e], 1e-3 * scale + 1e-4 * std::fabs(want[l][e]))
              << "program seed " << s << " (KILN_FUZZ_SEED=" << s
              << " KILN_GRAD_FUZZ_PROGRAMS=1 reruns it), " << (fused ? "fused" : "unfused")
              << ", leaf " << l << " element " << e << "\n"
              << p.text();
        }
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(count));
}

}  // namespace
