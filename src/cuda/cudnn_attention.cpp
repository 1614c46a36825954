// cuDNN's fused attention: one SDPA graph per problem and pass, built by the cuDNN frontend (a
// header-only C++ library, PyPI's nvidia-cudnn-frontend) over the runtime-loaded libcudnn
// (cudnn_library.hpp). The frontend turns an SDPA node into cuDNN's operation graph; cuDNN's
// heuristics pick an engine (on Hopper, the same wgmma flash kernels PyTorch runs); the built plan
// is kept, so a later call of the problem is one execute on the device's stream, and written to the
// store (its kernels table), so the next process reads the plan instead of building it (0.8 s for
// GPT-2's two on the H100).
#include "cuda/cudnn_attention.hpp"

#include <atomic>

#if KILN_WITH_CUDNN
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/log.hpp"
#include "core/runtime_config.hpp"
#include "cuda/cudnn_library.hpp"
#include "cuda/device_memory.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_PERSISTENCE
#include "cuda/store_identity.hpp"
#include "store/store.hpp"
#endif
#endif

namespace kiln::cuda {
namespace {
std::atomic<long long> runs{0};
}  // namespace

long long cudnn_attention_runs() { return runs.load(std::memory_order_relaxed); }

#if !KILN_WITH_CUDNN

bool cudnn_attention(Context&, const TensorImpl&, const TensorImpl&, const TensorImpl&,
                     const detail::AttentionParams&, const TensorImpl&, const TensorImpl*) {
  return false;
}
bool cudnn_attention_backward(Context&, const TensorImpl&, const TensorImpl&, const TensorImpl&,
                              const TensorImpl&, const TensorImpl&, const TensorImpl&,
                              const detail::AttentionParams&, const TensorImpl&, const TensorImpl&,
                              const TensorImpl&) {
  return false;
}

#else

namespace {

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using Attr = std::shared_ptr<fe::graph::Tensor_attributes>;

// A problem as its graph is built for it: every operand's shape and strides, in call order, and
// what else the graph bakes in.
struct Key {
  int device = 0;
  DType dtype = DType::bf16;
  bool backward = false, causal = false, stats = false, deterministic = false;
  double scale = 1;
  std::vector<std::int64_t> layout;
  auto operator<=>(const Key&) const = default;
};

struct Plan {
  std::unique_ptr<Graph> graph;  // null: cuDNN declined the problem (kiln's kernels run it)
  std::int64_t workspace = 0;
};

// The operand's uid is its place in the call, so an execute maps uids to the call's pointers.
Attr tensor(Graph& g, std::int64_t uid, const TensorImpl& t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(fmt::format("t{}", uid))
                      .set_uid(uid)
                      .set_dim(t.shape)
                      .set_stride(t.strides));
}
void output(const Attr& a, std::int64_t uid, const TensorImpl& t) {
  a->set_output(true).set_uid(uid).set_dim(t.shape).set_stride(t.strides);
}
// kiln's lse, f32 [B, H, Tq] contiguous, is cuDNN's Stats: [B, H, Tq, 1], natural log.
std::vector<std::int64_t> stats_dims(const TensorImpl& q) {
  return {q.shape[0], q.shape[1], q.shape[2], 1};
}
std::vector<std::int64_t> stats_strides(const TensorImpl& q) {
  return {q.shape[1] * q.shape[2], q.shape[2], 1, 1};
}

std::unique_ptr<Graph> new_graph(DType t) {
  auto g = std::make_unique<Graph>();
  g->set_io_data_type(t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// Builds a graph's plan: empty when built, else what cuDNN said.
std::string build(Graph& g, cudnnHandle_t h, std::int64_t& workspace) {
  auto step = [](fe::error_t e, const char* what) {
    return e.is_good() ? std::string() : fmt::format("{}: {}", what, e.get_message());
  };
  std::string why = step(g.validate(), "validate");
  if (why.empty()) why = step(g.build_operation_graph(h), "build_operation_graph");
  if (why.empty()) why = step(g.create_execution_plans({fe::HeurMode_t::A}), "heuristics");
  if (why.empty()) why = step(g.check_support(h), "check_support");
  if (why.empty()) why = step(g.build_plans(h), "build_plans");
  if (why.empty()) why = step(g.get_workspace_size(workspace), "get_workspace_size");
  return why;
}

#if KILN_WITH_PERSISTENCE
// The store's row of a problem's plan: kept in the kernels table under a text that names the
// problem and the cuDNN and frontend versions (the identity adds the device's and the driver's),
// so that no other problem or library reads it.
store::Store* plan_store() { return detail::persistence_live() ? store::process_store() : nullptr; }

std::string plan_text(const Key& key) {
  std::string layout;
  for (const std::int64_t n : key.layout) layout += fmt::format(" {}", n);
  return fmt::format(
      "cuDNN {} frontend {} attention {} {} causal {} stats {} deterministic {} scale {:a} "
      "layout{}",
      cudnn_library()->version, CUDNN_FRONTEND_VERSION, key.backward ? "backward" : "forward",
      dtype_name(key.dtype), key.causal, key.stats, key.deterministic, key.scale, layout);
}

// The stored plan, when there is one and cuDNN takes it back.
std::unique_ptr<Graph> stored_plan(Context& ctx, const Key& key, cudnnHandle_t h,
                                   std::int64_t& workspace) {
  store::Store* s = plan_store();
  if (!s) return nullptr;
  const std::string text = plan_text(key);
  const auto bytes = s->get_kernel(store_identity(ctx), {text, ctx.arch(), ""});
  if (!bytes) return nullptr;
  auto g = std::make_unique<Graph>();
  ctx.make_current();
  const std::vector<std::uint8_t> data(bytes->begin(), bytes->end());
  if (g->deserialize(h, data).is_bad() || g->get_workspace_size(workspace).is_bad()) return nullptr;
  return g;
}

void store_plan(Context& ctx, const Key& key, const Graph& g) {
  store::Store* s = plan_store();
  std::vector<std::uint8_t> data;
  if (!s || g.serialize(data).is_bad()) return;  // (an engine whose plan cannot be kept)
  s->put_kernel(store_identity(ctx), {plan_text(key), ctx.arch(), ""},
                std::vector<char>(data.begin(), data.end()),
                key.backward ? "cuDNN attention backward plan" : "cuDNN attention plan");
}
#endif

// One cuDNN handle per device, made on first use, kept for the process (as the device's context).
cudnnHandle_t handle(Context& ctx) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  const std::lock_guard lock(mu);
  cudnnHandle_t& h = handles[ctx.device.index()];
  if (!h) {
    ctx.make_current();
    if (const auto s = fe::detail::create_handle(&h); s != CUDNN_STATUS_SUCCESS) {
      h = nullptr;
      throw DeviceError(
          fmt::format("cudnnCreate failed on {}: status {}", ctx.arch(), static_cast<int>(s)));
    }
  }
  return h;
}

// The plan of a problem, built on first use by `make` (which adds the graph's nodes); null when
// cuDNN declines it, said once under KILN_LOG=tune.
template <class Make>
const Plan& plan(Context& ctx, const Key& key, cudnnHandle_t h, Make make) {
  static std::mutex mu;
  // Never destroyed: cuDNN makes statics of its own while it builds a plan, after this map, so at
  // exit they would go first and a plan's destructor would call into what is gone.
  static auto& plans = *new std::map<Key, Plan>;
  const std::lock_guard lock(mu);
  auto [it, added] = plans.try_emplace(key);
  if (!added) return it->second;
  std::int64_t workspace = 0;
#if KILN_WITH_PERSISTENCE
  if (auto stored = stored_plan(ctx, key, h, workspace)) {
    it->second = Plan{std::move(stored), workspace};
    return it->second;
  }
#endif
  std::unique_ptr<Graph> g = new_graph(key.dtype);
  std::string why;
  try {  // (the frontend throws where it cannot even describe the problem)
    make(*g);
    ctx.make_current();
    why = build(*g, h, workspace);
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (why.empty()) {
#if KILN_WITH_PERSISTENCE
    store_plan(ctx, key, *g);
#endif
    it->second = Plan{std::move(g), workspace};
  } else if (detail::log_enabled("tune")) {
    fmt::print(stderr, "kiln tune: cuDNN declines attention {} ({}): {}; kiln's kernels run it\n",
               key.backward ? "backward" : "forward", dtype_name(key.dtype), why);
  }
  return it->second;
}

// A scale of 0 or below is kiln's kernels' too: cuDNN applies the scale after the causal mask, so
// masked scores became NaN (scale 0) or +inf (a negative scale) on the H100 (cuDNN 9.19,
// 2026-12-07).
bool wanted(const TensorImpl& q, const TensorImpl& k, const detail::AttentionParams& params) {
  return (q.dtype == DType::bf16 || q.dtype == DType::f16) && params.scale > 0 &&
         detail::cudnn_live() && q.numel() > 0 && k.numel() > 0 && cudnn_library() != nullptr;
}

void execute(Context& ctx, cudnnHandle_t h, const Plan& p, const std::vector<const void*>& ptrs) {
  std::unordered_map<std::int64_t, void*> pack;
  for (std::size_t i = 0; i < ptrs.size(); ++i)
    if (ptrs[i]) pack.emplace(static_cast<std::int64_t>(i), const_cast<void*>(ptrs[i]));
  // The workspace goes back to the pool in stream order when this call drops it.
  const auto workspace =
      p.workspace > 0 ? device_alloc(ctx, static_cast<std::size_t>(p.workspace)) : nullptr;
  ctx.make_current();
  if (const auto s = fe::detail::set_stream(h, ctx.stream); s != CUDNN_STATUS_SUCCESS)
    throw DeviceError(fmt::format("cudnnSetStream failed: status {}", static_cast<int>(s)));
  fe::error_t e = p.graph->execute(h, pack, workspace ? workspace->data() : nullptr);
  if (e.is_bad())
    throw DeviceError(fmt::format("cuDNN attention failed on {}: {}", ctx.arch(), e.get_message()));
  runs.fetch_add(1, std::memory_order_relaxed);
}

Key key_of(Context& ctx, const TensorImpl& q, const detail::AttentionParams& params,
           std::initializer_list<const TensorImpl*> operands) {
  Key key;
  key.device = ctx.device.index();
  key.dtype = q.dtype;
  key.causal = params.causal;
  key.scale = params.scale;
  for (const TensorImpl* t : operands) {
    key.layout.insert(key.layout.end(), t->shape.begin(), t->shape.end());
    key.layout.insert(key.layout.end(), t->strides.begin(), t->strides.end());
  }
  return key;
}

}  // namespace

bool cudnn_attention(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                     const detail::AttentionParams& params, const TensorImpl& o,
                     const TensorImpl* lse) {
  if (!wanted(q, k, params)) return false;
  Key key = key_of(ctx, q, params, {&q, &k, &v, &o});
  key.stats = lse != nullptr;
  const cudnnHandle_t h = handle(ctx);
  const Plan& p = plan(ctx, key, h, [&](Graph& g) {
    const auto attributes = fe::graph::SDPA_attributes()
                                .set_name("attention")
                                .set_generate_stats(lse != nullptr)
                                .set_causal_mask(params.causal)
                                .set_attn_scale(static_cast<float>(params.scale));
    auto [out, stats] = g.sdpa(tensor(g, 0, q), tensor(g, 1, k), tensor(g, 2, v), attributes);
    output(out, 3, o);
    if (lse)
      stats->set_output(true)
          .set_uid(4)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim(stats_dims(q))
          .set_stride(stats_strides(q));
  });
  if (!p.graph) return false;
  execute(ctx, h, p, {q.data(), k.data(), v.data(), o.data(), lse ? lse->data() : nullptr});
  return true;
}

bool cudnn_attention_backward(Context& ctx, const TensorImpl& q, const TensorImpl& k,
                              const TensorImpl& v, const TensorImpl& o, const TensorImpl& dout,
                              const TensorImpl& lse, const detail::AttentionParams& params,
                              const TensorImpl& dq, const TensorImpl& dk, const TensorImpl& dv) {
  if (!wanted(q, k, params)) return false;
  Key key = key_of(ctx, q, params, {&q, &k, &v, &o, &dout, &dq, &dk, &dv});
  key.backward = true;
  key.deterministic = kiln::deterministic();
  const cudnnHandle_t h = handle(ctx);
  const Plan& p = plan(ctx, key, h, [&](Graph& g) {
    const auto attributes = fe::graph::SDPA_backward_attributes()
                                .set_name("attention_backward")
                                .set_causal_mask(params.causal)
                                .set_attn_scale(static_cast<float>(params.scale))
                                .set_deterministic_algorithm(key.deterministic);
    const Attr stats = g.tensor(fe::graph::Tensor_attributes()
                                    .set_name("lse")
                                    .set_uid(5)
                                    .set_data_type(fe::DataType_t::FLOAT)
                                    .set_dim(stats_dims(q))
                                    .set_stride(stats_strides(q)));
    auto [gq, gk, gv] = g.sdpa_backward(tensor(g, 0, q), tensor(g, 1, k), tensor(g, 2, v),
                                        tensor(g, 3, o), tensor(g, 4, dout), stats, attributes);
    output(gq, 6, dq);
    output(gk, 7, dk);
    output(gv, 8, dv);
  });
  if (!p.graph) return false;
  execute(ctx, h, p,
          {q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(), dq.data(), dk.data(),
           dv.data()});
  return true;
}

#endif

}  // namespace kiln::cuda
