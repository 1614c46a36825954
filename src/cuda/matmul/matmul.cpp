// Matrix products on CUDA through cuBLASLt: out[b] = a[b] @ c[b], batched, without copying views.
//
// kiln's tensors are row-major, cuBLASLt's matrices column-major. A row-major [m, n] C = A B is
// the column-major n x m matrix C^T = B^T A^T, so cuBLASLt's "A" is kiln's b and its "B" is
// kiln's a. A row-major [r, c] operand with unit column stride is, untouched, the column-major
// c x r matrix x^T that the product wants (op N, ld = row stride); a transposed view (unit row
// stride) is the column-major r x c matrix x itself, which cuBLASLt transposes (op T, ld =
// column stride). Only an operand with neither stride 1 is copied. A broadcast batch is a batch
// stride of 0 (STRIDED_BATCH_OFFSET defaults to 0 in cublasLt.h: every batch reads one matrix).
//
// Which algorithm: with autotune live (KILN_AUTOTUNE, src/tune/), the tuner's choice for the
// problem's tune key among the heuristic's top algorithms and kiln's own kernels
// (gemm_kernel.hpp; docs/autotune.md), restored from the store when an earlier process tuned it
// (a cuBLASLt algorithm is checked again with cublasLtMatmulAlgoCheck, without a heuristic
// query); without autotune, the heuristic's first choice. Either way the choice is cached with the
// descriptors per exact problem, so a repeated problem is one map lookup and one cublasLtMatmul
// call, or, when its operands are at addresses it has seen before (a loop), the replay of that
// call captured as a CUDA graph, which costs the host a fifth as much (graph_replays.hpp).
//
// An epilogue (Backend::matmul_epilogue) is cuBLASLt's: the bias, the ReLU or tanh GELU, the
// pre-activation written aside (GELU_AUX). It is part of the plan's key and of the tune key (the
// algorithms that run it differ); kiln's own kernels have none, so they are no candidates there.
// The bias and aux pointers are attributes of the descriptor, set per call under the plan's lock
// (and baked into its graphs, which are keyed by them too). A problem cuBLASLt has no algorithm for
// with its epilogue is declined (false) and remembered.
#include <fmt/format.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/runtime_config.hpp"
#include "cuda/check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_profile.hpp"
#include "cuda/matmul/cublaslt_state.hpp"
#include "cuda/matmul/gemm_kernel.hpp"
#include "cuda/matmul/graph_replays.hpp"
#include "cuda/matmul/matmul_algos.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_AUTOTUNE
#include "cuda/matmul/matmul_bench.hpp"
#include "tune/tune_key.hpp"
#include "tune/tuner.hpp"
#endif
#if KILN_WITH_AUTOTUNE && KILN_WITH_PERSISTENCE
#include "cuda/store_identity.hpp"
#include "tune/store_records.hpp"
#endif

namespace kiln::cuda {
namespace {

// How many of the heuristic's algorithms the tuner times (it may return fewer).
constexpr int kTunedAlgorithms = 16;

// One operand in cuBLASLt's terms: the stored column-major rows x cols matrix and its op.
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  std::int64_t rows = 0, cols = 0, ld = 0;
  std::int64_t batch_stride = 0;  // elements; 0 for a broadcast (or single) batch
  const void* data = nullptr;
};

// Row-major x [B, r, c] as cuBLASLt can read it, or nothing when it cannot (neither matrix
// stride 1, an ld too small to be valid, a negative stride). A dim of extent 1 has a free
// stride, so [1, c] and [r, 1] slices of any stride are read in place.
std::optional<Operand> as_column_major(const TensorImpl& x, std::int64_t batch) {
  const std::int64_t r = x.shape[1], c = x.shape[2], sr = x.strides[1], sc = x.strides[2];
  const std::int64_t bs = batch == 1 || x.shape[0] == 1 ? 0 : x.strides[0];
  if (bs < 0) return std::nullopt;
  if (sc == 1 || c == 1) {  // column-major c x r, ld = row stride: x^T, op N
    const std::int64_t ld = r == 1 ? std::max<std::int64_t>(c, 1) : sr;
    if (ld >= std::max<std::int64_t>(c, 1)) return Operand{CUBLAS_OP_N, c, r, ld, bs, x.data()};
  }
  if (sr == 1 || r == 1) {  // column-major r x c, ld = column stride: x, op T
    const std::int64_t ld = c == 1 ? std::max<std::int64_t>(r, 1) : sc;
    if (ld >= std::max<std::int64_t>(r, 1)) return Operand{CUBLAS_OP_T, r, c, ld, bs, x.data()};
  }
  return std::nullopt;
}

// x as cuBLASLt reads it: in place when it can, else from a contiguous copy kept in `copy`
// until the call is queued (its memory is then freed in stream order, after the matmul). A
// broadcast batch is copied once and stays broadcast.
Operand readable(Context& ctx, const TensorImpl& x, std::int64_t batch, detail::Handle& copy) {
  if (auto o = as_column_major(x, batch)) return *o;
  auto v = std::make_shared<TensorImpl>(x);
  if (batch == 1 || x.strides[0] == 0) v->shape[0] = 1;
  copy = contiguous(ctx, v);
  if (auto o = as_column_major(*copy, batch)) return *o;
  throw DeviceError("matmul: contiguous() returned a layout cuBLASLt cannot read");
}

// The alignment in bytes that holds for every matrix of a batch (its pointer and the batch
// stride, in elements of `bytes` each), capped at 256, the most cuBLASLt asks about: the lowest
// set bit of them all.
std::uint32_t alignment(const void* p, std::int64_t batch_stride, std::size_t bytes) {
  const auto bits = reinterpret_cast<std::uintptr_t>(p) |
                    static_cast<std::uintptr_t>(batch_stride) * bytes | 256u;
  return static_cast<std::uint32_t>(bits & (~bits + 1));
}

// Everything that decides the descriptors and the heuristic's choice.
struct Key {
  int device;
  DType dtype;          // of the operands and the output: f32, bf16 or f16
  Precision precision;  // of an f32 product; highest for the half types (it has no say there)
  std::int64_t m, n, k, batch;
  int op_a, op_b;
  std::int64_t ld_a, ld_b, stride_a, stride_b;
  std::uint32_t align_a, align_b, align_out;
  int epilogue;  // cublasLtEpilogue_t
  std::uint32_t align_bias, align_aux;
  bool tuned;  // autotune was live when the plan was made
  auto operator<=>(const Key&) const = default;
};

struct Plan {
  MatmulDesc desc;
  Layout a, b, d;  // cuBLASLt's A (kiln's b), B (kiln's a), and C = D (out)
  cublasLtMatmulAlgo_t algo{};
  std::optional<GemmVariant> own;  // kiln's own kernel instead of algo, when the tuner chose it
  bool declined = false;           // cuBLASLt has no algorithm for the epilogue here
  mutable GraphReplays replays;    // of its cuBLASLt call, by operand addresses
  mutable std::mutex mu;           // over the epilogue's pointer attributes of desc
};

// The pointers an epilogue reads or writes besides the operands: the bias and the aux matrix
// (GELU's input, GELU_AUX writes).
struct EpiloguePointers {
  const void* bias = nullptr;
  void* aux = nullptr;
};

bool has_epilogue(const Key& key) { return key.epilogue != CUBLASLT_EPILOGUE_DEFAULT; }

// The epilogue's name in tune keys (tune_key.cpp lists them).
std::string epilogue_name(int epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return "";
    case CUBLASLT_EPILOGUE_BIAS:
      return "bias";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "relu_bias";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "gelu_bias";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "gelu_aux_bias";
    case CUBLASLT_EPILOGUE_RELU:
      return "relu";
    case CUBLASLT_EPILOGUE_GELU:
      return "gelu";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "gelu_aux";
    default:
      break;
  }
  throw InternalError(fmt::format("matmul: no name for cuBLASLt epilogue {}", epilogue));
}

// kiln's own kernels as tune candidates (f32 products only): "own:fp32", "own:tf32x3".
constexpr GemmVariant kOwnVariants[] = {GemmVariant::fp32, GemmVariant::tf32x3};
std::string own_value(GemmVariant v) { return std::string("own:") + gemm_variant_name(v); }
std::optional<GemmVariant> own_from_value(const std::string& value) {
  for (GemmVariant v : kOwnVariants)
    if (value == own_value(v)) return v;
  return std::nullopt;
}

// The plans, under one mutex. Never destroyed (as the cuBLASLt state, cublaslt_state.hpp), and a
// plan is never erased, so pointers to one stay valid.
struct Cache {
  std::mutex mu;
  std::map<Key, std::unique_ptr<Plan>> plans;
};
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::f32:
      return CUDA_R_32F;
    case DType::i32:
    case DType::boolean:
      break;
  }
  throw InternalError(std::string("matmul: no cuBLASLt type for ") + dtype_name(t));
}

// How cuBLASLt computes: an f32 product as the precision says (strict fp32; TF32 or bf16 tensor
// cores, as PyTorch's "high" and "medium"); a half-type product in fp32 (products of halves are
// exact in fp32, and they accumulate there), with fp32 alpha and beta either way.
cublasComputeType_t compute_type(const Key& key) {
  if (key.dtype != DType::f32) return CUBLAS_COMPUTE_32F;
  switch (key.precision) {
    case Precision::high:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::medium:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Precision::highest:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

void make_layout(Layout& l, const Operand& o, std::int64_t batch, DType dtype) {
  KILN_CUDA_CHECK(cublasLtMatrixLayoutCreate(&l.h, cuda_type(dtype), o.rows, o.cols, o.ld));
  const auto count = static_cast<std::int32_t>(batch);
  KILN_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                   sizeof(count)));
  KILN_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                   &o.batch_stride, sizeof(o.batch_stride)));
}

// Points desc's epilogue at this call's bias and aux (no-op without an epilogue).
void set_epilogue_pointers(const Plan& p, const Key& key, const EpiloguePointers& e) {
  if (!has_epilogue(key)) return;
  KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                 &e.bias, sizeof(e.bias)));
  KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      p.desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
}

// The descriptors of a problem.
void make_descriptors(Plan& p, const Key& key, const Operand& a, const Operand& b, const Operand& d,
                      const EpiloguePointers& e = {}) {
  KILN_CUDA_CHECK(cublasLtMatmulDescCreate(&p.desc.h, compute_type(key), CUDA_R_32F));
  KILN_CUDA_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &b.op, sizeof(b.op)));
  KILN_CUDA_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &a.op, sizeof(a.op)));
  make_layout(p.a, b, key.batch, key.dtype);
  make_layout(p.b, a, key.batch, key.dtype);
  make_layout(p.d, d, key.batch, key.dtype);
  if (!has_epilogue(key)) return;
  const auto epilogue = static_cast<cublasLtEpilogue_t>(key.epilogue);
  KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof(epilogue)));
  if (e.aux) {  // the pre-activation, laid out as D (contiguous [B, m, n])
    const std::int64_t ld = key.n, stride = key.batch == 1 ? 0 : key.m * key.n;
    KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p.desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &ld, sizeof(ld)));
    KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
        p.desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride, sizeof(stride)));
  }
  set_epilogue_pointers(p, key, e);
}

// The heuristic's algorithms for a plan's descriptors, best first (at most `count`; at least
// one, else DeviceError, except for an epilogue, which may find none: the call is declined).
std::vector<cublasLtMatmulAlgo_t> heuristic(const Plan& p, cublasLtHandle_t handle, const Key& key,
                                            const Operand& a, const Operand& b, int count) {
  Preference pref;
  KILN_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
  KILN_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
  // Without these the heuristic assumes 256-byte alignment and may choose a kernel that cannot
  // run on a view that starts mid-row (or a batch stride that is not a multiple of 64).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out}};
  for (const auto& [attr, bytes] : aligns) {
    KILN_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &bytes, sizeof(bytes)));
  }

  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, p.desc.h, p.a.h, p.b.h, p.d.h, p.d.h, pref.h, count, results.data(), &found);
  // An epilogue cuBLASLt does not run for these types (GELU_AUX of a strict f32 product, ...)
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && has_epilogue(key)) return {};
  check(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  if (algos.empty() && !has_epilogue(key)) {
    auto side = [](const Operand& o) {
      return fmt::format("op {}, ld {}, batch stride {}", o.op == CUBLAS_OP_T ? 'T' : 'N', o.ld,
                         o.batch_stride);
    };
    throw DeviceError(fmt::format(
        "matmul: cuBLASLt has no algorithm for {} [{}, {}, {}] x [{}, {}, {}] (a: {}; b: {}; "
        "alignment {}/{}/{} bytes; precision {})",
        dtype_name(key.dtype), key.batch, key.m, key.k, key.batch, key.k, key.n, side(a), side(b),
        key.align_a, key.align_b, key.align_out, precision_name(key.precision)));
  }
  return algos;
}

// The name KILN_LOG=profile gives the product (cuda/kernel_profile.hpp).
std::string profile_name(const Key& key) {
  return fmt::format("cublasLt matmul {} {}x{}x{}{}{}{}", dtype_name(key.dtype), key.m, key.n,
                     key.k, key.batch > 1 ? fmt::format(" batch {}", key.batch) : std::string(),
                     has_epilogue(key) ? " " : "", epilogue_name(key.epilogue));
}

// Queues the product with one algorithm.
void run_algo(const LtState& dev, const Plan& plan, const cublasLtMatmulAlgo_t& algo,
              const Operand& a, const Operand& b, void* out, cudaStream_t stream) {
  const float one = 1.0f, zero = 0.0f;
  KILN_CUDA_CHECK(cublasLtMatmul(dev.handle, plan.desc.h, &one, b.data, plan.a.h, a.data, plan.b.h,
                                 &zero, out, plan.d.h, out, plan.d.h, &algo, dev.workspace->data(),
                                 kWorkspaceBytes, stream));
}

// Whether cuBLASLt runs `algo` on this plan's problem within kiln's workspace.
bool algo_applies(const LtState& dev, const Plan& plan, const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t r{};
  return cublasLtMatmulAlgoCheck(dev.handle, plan.desc.h, plan.a.h, plan.b.h, plan.d.h, plan.d.h,
                                 &algo, &r) == CUBLAS_STATUS_SUCCESS &&
         r.workspaceSize <= kWorkspaceBytes;
}

#if KILN_WITH_AUTOTUNE
// What the tuner times for a plan: each of the heuristic's algorithms, then kiln's own kernels.
// The candidates refer to their arguments, which must outlive them.
std::vector<tune::Candidate> candidates(Context& ctx, const LtState& dev, const Plan& plan,
                                        const std::vector<cublasLtMatmulAlgo_t>& algos,
                                        const TensorImpl& a_in, const TensorImpl& b_in,
                                        const Operand& a, const Operand& b, const TensorImpl& out,
                                        bool epilogue) {
  std::vector<tune::Candidate> list;
  for (const cublasLtMatmulAlgo_t& algo : algos) {
    list.push_back({algo_name(algo),
                    algo_value(algo),
                    [&, algo] { run_algo(dev, plan, algo, a, b, out.data(), ctx.stream); },
                    {}});
  }
  for (GemmVariant v : kOwnVariants) {
    if (a_in.dtype != DType::f32 || epilogue) break;  // (they have none)
    list.push_back({fmt::format("kiln gemm {}", gemm_variant_name(v)), own_value(v),
                    [&, v] {
                      if (!own_gemm(ctx, v, a_in, b_in, out))
                        throw DeviceError(
                            fmt::format("kiln gemm {} does not run this problem on {}",
                                        gemm_variant_name(v), ctx.device.str()));
                    },
                    [&, v](bool wait) { return own_gemm_ready(ctx, v, a_in, b_in, out, wait); }});
  }
  return list;
}

// The tune request of a problem, without candidates or bench; with the store's records when
// persistence is live (kept in `records`).
tune::Request tune_request(Context& ctx, const Key& key, const Operand& a, const Operand& b,
                           std::optional<tune::StoreRecords>& records) {
  const tune::MatmulProblem problem{dtype_name(key.dtype),
                                    precision_name(key.precision),
                                    a.op == CUBLAS_OP_T ? 'T' : 'N',
                                    b.op == CUBLAS_OP_T ? 'T' : 'N',
                                    key.batch,
                                    key.m,
                                    key.n,
                                    key.k,
                                    epilogue_name(key.epilogue)};
  tune::Request r;
  r.lane = ctx.device.str();
  r.key = tune::matmul_key(problem);
  r.shape = tune::matmul_shape(problem);
#if KILN_WITH_PERSISTENCE
  if (store::Store* s = store::process_store()) records.emplace(*s, store_identity(ctx));
  if (records) r.records = &*records;
#else
  (void)records;
#endif
  return r;
}

// A choice already known (in memory or in the store) that runs this exact problem, made into
// the plan without asking the heuristic (whose first query in a process is slow); false when
// there is none.
bool apply_known(Context& ctx, const LtState& dev, Plan& plan, const Key& key, const Operand& a,
                 const Operand& b) {
  std::optional<tune::StoreRecords> records;
  const auto c = tune::process_tuner().known(tune_request(ctx, key, a, b, records));
  if (!c) return false;
  const auto algo = algo_from_value(c->value);
  if (!algo || !algo_applies(dev, plan, *algo)) return false;
  plan.algo = *algo;
  return true;
}

// The values the records hold for the (at most three) nearest buckets next to `key`.
std::vector<std::string> neighbours_choices(tune::Records& records, const std::string& key) {
  std::vector<std::string> values;
  for (const std::string& k : tune::neighbouring_matmul_keys(key, records.keys())) {
    if (values.size() == 3) break;
    if (auto row = records.load(k)) values.push_back(row->value);
  }
  return values;
}

// Ranks what neighbouring buckets chose right after the default, nearest first: what won next
// door is likely to win here, and a first call's bound may end the tuning before the heuristic's
// later candidates. A neighbour's cuBLASLt algorithm that the heuristic did not propose joins
// when it runs this problem.
void rank_by_neighbours(const LtState& dev, const Plan& plan, tune::Records* records,
                        const std::string& key, std::vector<cublasLtMatmulAlgo_t>& algos,
                        std::vector<std::string>& preferred) {
  if (!records) return;
  preferred = neighbours_choices(*records, key);
  for (const std::string& value : preferred) {
    const auto algo = algo_from_value(value);
    if (!algo) continue;
    const bool proposed = std::any_of(algos.begin(), algos.end(),
                                      [&](const auto& a) { return algo_value(a) == value; });
    if (!proposed && algo_applies(dev, plan, *algo)) algos.push_back(*algo);
  }
}

void put_preferred_first(std::vector<tune::Candidate>& list,
                         const std::vector<std::string>& preferred) {
  auto next = list.begin() + 1;  // the default stays first
  for (const std::string& value : preferred) {
    auto it = std::find_if(next, list.end(), [&](const auto& c) { return c.value == value; });
    if (it == list.end()) continue;
    std::rotate(next, it, it + 1);
    ++next;
  }
}

// The tuner's choice for the plan's problem among `algos` (the heuristic's, best first) and
// kiln's own kernels, made into the plan; the output is written by the candidates while they
// are timed (the caller then runs the choice).
void choose_tuned(Context& ctx, const LtState& dev, Plan& plan, const Key& key,
                  const std::vector<cublasLtMatmulAlgo_t>& algos, const TensorImpl& a_in,
                  const TensorImpl& b_in, const Operand& a, const Operand& b, const TensorImpl& out,
                  tune::Clock::time_point started) {
  MatmulBench bench(ctx, a_in, b_in, out, key.precision);  // (its bounds know out's dtype)
  std::optional<tune::StoreRecords> records;
  tune::Request r = tune_request(ctx, key, a, b, records);
  r.bench = &bench;
  r.started = started;
  std::vector<cublasLtMatmulAlgo_t> all = algos;
  std::vector<std::string> preferred;
  rank_by_neighbours(dev, plan, r.records, r.key, all, preferred);
  r.candidates = candidates(ctx, dev, plan, all, a_in, b_in, a, b, out, has_epilogue(key));
  put_preferred_first(r.candidates, preferred);
  tune::Tuner& tuner = tune::process_tuner();
  const tune::Choice c = tuner.choose(r);
  plan.algo = algos.front();
  if (auto own = own_from_value(c.value)) {
    plan.own = own;  // (own_gemm declines at launch what it cannot run: then plan.algo runs)
    return;
  }
  if (auto algo = algo_from_value(c.value); algo && algo_applies(dev, plan, *algo)) {
    plan.algo = *algo;
    return;
  }
  // A choice made for another shape of the bucket (or by another process) that does not run
  // this one: the heuristic's first choice for this exact problem.
  if (detail::log_enabled("tune")) {
    detail::log_line("tune", fmt::format("{} ({}): the choice {} does not apply here; using the "
                                         "heuristic's first",
                                         r.key, r.shape, c.name));
  }
}
#endif

}  // namespace

namespace {

// One call's problem: cuBLASLt's view of the operands (copies where a view is unreadable) and
// the key of its plan.
struct Problem {
  detail::Handle a_copy, b_copy;
  Operand a, b, d;
  Key key;
};

// Nothing to multiply (false) when out is empty or k is 0 (then out is zeroed: a sum of no
// products is 0; the caller declines an epilogue's call before).
bool prepare(Context& ctx, const TensorImpl& a_in, const TensorImpl& b_in, const TensorImpl& out,
             int epilogue, const EpiloguePointers& e, Problem& p) {
  const std::int64_t batch = out.shape[0], m = out.shape[1], n = out.shape[2];
  const std::int64_t k = a_in.shape[2];
  if (out.numel() == 0) return false;
  ctx.make_current();
  if (k == 0) {  // cuBLASLt rejects k = 0
    KILN_CUDA_CHECK(
        cudaMemsetAsync(out.data(), 0, out.numel() * dtype_size(out.dtype), ctx.stream));
    return false;
  }
  if (batch > INT32_MAX) {
    throw DeviceError(fmt::format("matmul: batch {} exceeds cuBLASLt's int32 count", batch));
  }
  p.a = readable(ctx, a_in, batch, p.a_copy);
  p.b = readable(ctx, b_in, batch, p.b_copy);
  p.d = Operand{CUBLAS_OP_N, n, m, n, batch == 1 ? 0 : m * n, out.data()};
  const std::size_t bytes = dtype_size(out.dtype);
  p.key = Key{ctx.index,
              out.dtype,
              out.dtype == DType::f32 ? float32_matmul_precision() : Precision::highest,
              m,
              n,
              k,
              batch,
              p.a.op,
              p.b.op,
              p.a.ld,
              p.b.ld,
              p.a.batch_stride,
              p.b.batch_stride,
              alignment(p.a.data, p.a.batch_stride, bytes),
              alignment(p.b.data, p.b.batch_stride, bytes),
              alignment(p.d.data, p.d.batch_stride, bytes),
              epilogue,
              e.bias ? alignment(e.bias, 0, bytes) : 0,
              e.aux ? alignment(e.aux, p.d.batch_stride, bytes) : 0,
              detail::autotune_live()};
  return true;
}

// The product with cuBLASLt's `epilogue` reading and writing e's pointers; false where cuBLASLt
// has no algorithm for that epilogue on this problem.
bool run_product(Context& ctx, const TensorImpl& a_in, const TensorImpl& b_in,
                 const TensorImpl& out, int epilogue, const EpiloguePointers& e) {
#if KILN_WITH_AUTOTUNE
  const auto started = tune::Clock::now();  // a first call's bound counts its set-up too
#endif
  Problem p;
  if (!prepare(ctx, a_in, b_in, out, epilogue, e, p)) return true;
  const LtState& s = lt_state(ctx);  // (may wait for its set-up in the background)
  Cache& c = cache();
  const Plan* plan = nullptr;
  {
    std::lock_guard lock(c.mu);
    auto it = c.plans.find(p.key);
    if (it == c.plans.end()) {
      auto made = std::make_unique<Plan>();
      make_descriptors(*made, p.key, p.a, p.b, p.d, e);
      bool done = false;
#if KILN_WITH_AUTOTUNE
      done = p.key.tuned && apply_known(ctx, s, *made, p.key, p.a, p.b);
#endif
      if (!done) {
        const std::vector<cublasLtMatmulAlgo_t> algos =
            heuristic(*made, s.handle, p.key, p.a, p.b, p.key.tuned ? kTunedAlgorithms : 1);
        made->declined = algos.empty();
        if (!made->declined) made->algo = algos.front();
#if KILN_WITH_AUTOTUNE
        if (p.key.tuned && !made->declined)
          choose_tuned(ctx, s, *made, p.key, algos, a_in, b_in, p.a, p.b, out, started);
#endif
      }
      it = c.plans.emplace(p.key, std::move(made)).first;
    }
    plan = it->second.get();
  }
  if (plan->declined) return false;

  // Plans are read-only once made (their replays lock themselves), so the launch needs no lock,
  // but for the epilogue's pointers on the shared descriptor.
  if (plan->own && own_gemm(ctx, *plan->own, a_in, b_in, out)) return true;
  const KernelTimer timer = profiling() ? KernelTimer(ctx.stream, profile_name(p.key))
                                        : KernelTimer();  // (KILN_LOG=profile only)
  std::unique_lock pointers(plan->mu, std::defer_lock);
  if (has_epilogue(p.key)) pointers.lock();
  plan->replays.run(ctx, {p.a.data, p.b.data, out.data(), e.bias, e.aux}, [&](cudaStream_t stream) {
    set_epilogue_pointers(*plan, p.key, e);
    run_algo(s, *plan, plan->algo, p.a, p.b, out.data(), stream);
  });
  return true;
}

// cuBLASLt's epilogue for e; nullopt where it has none (ReLU's aux is a bit mask, not the
// pre-activation's values).
std::optional<int> lt_epilogue(const detail::MatmulEpilogue& e) {
  using detail::EpilogueActivation;
  const bool bias = e.bias != nullptr, aux = e.pre_activation.has_value();
  switch (e.activation) {
    case EpilogueActivation::none:
      if (aux) return std::nullopt;
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case EpilogueActivation::relu:
      if (aux) return std::nullopt;
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case EpilogueActivation::gelu_tanh:
      if (aux) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return std::nullopt;
}

}  // namespace

void matmul(Context& ctx, const TensorImpl& a_in, const TensorImpl& b_in, const TensorImpl& out) {
  run_product(ctx, a_in, b_in, out, CUBLASLT_EPILOGUE_DEFAULT, {});
}

bool matmul_epilogue(Context& ctx, const TensorImpl& a_in, const TensorImpl& b_in,
                     const detail::MatmulEpilogue& e, const TensorImpl& out) {
  const std::optional<int> epilogue = lt_epilogue(e);
  if (!epilogue) return false;
  if (*epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    matmul(ctx, a_in, b_in, out);
    return true;
  }
  // Left to the composition: no product (the bias alone) and an aux whose
  // leading dimension cuBLASLt refuses (it must be a multiple of 8).
  if (out.numel() == 0 || a_in.shape[2] == 0) return false;
  if (e.pre_activation && out.shape[2] % 8 != 0) return false;
  EpiloguePointers pointers;
  if (e.bias) pointers.bias = e.bias->data();
  if (e.pre_activation) pointers.aux = (*e.pre_activation)->data();
  return run_product(ctx, a_in, b_in, out, *epilogue, pointers);
}

#if KILN_WITH_AUTOTUNE
void preload_matmul(Context& ctx, const LtState& lt, const tune::MatmulProblem& problem,
                    const std::string& value) {
  constexpr std::int64_t kMaxScratchBytes = std::int64_t{64} << 20;
  const auto algo = algo_from_value(value);
  if (!algo) return;                   // kiln's own kernel: loaded from the store when used
  if (problem.dtype != "f32") return;  // (its set-up is the one the f32 products share)
  if (!problem.epilogue.empty()) return;
  const std::int64_t batch = problem.batch, m = problem.m, n = problem.n, k = problem.k;
  const std::int64_t a_size = m * k, b_size = k * n, d_size = m * n;
  const std::int64_t bytes = batch * (a_size + b_size + d_size) * std::int64_t{sizeof(float)};
  if (bytes <= 0 || bytes > kMaxScratchBytes) return;
  // Contiguous operands in one zeroed scratch buffer, read as matmul() reads a row-major a
  // [batch, m, k] (or a transposed view of one, op 'T') and b [batch, k, n].
  ctx.make_current();
  const auto scratch = device_alloc(ctx, static_cast<std::size_t>(bytes));
  KILN_CUDA_CHECK(cudaMemsetAsync(scratch->data(), 0, static_cast<std::size_t>(bytes), ctx.stream));
  float* base = static_cast<float*>(scratch->data());
  auto batched = [batch](std::int64_t size) { return batch == 1 ? 0 : size; };
  const Operand a = problem.op_a == 'N' ? Operand{CUBLAS_OP_N, k, m, k, batched(a_size), base}
                                        : Operand{CUBLAS_OP_T, m, k, m, batched(a_size), base};
  float* b_data = base + batch * a_size;
  const Operand b = problem.op_b == 'N' ? Operand{CUBLAS_OP_N, n, k, n, batched(b_size), b_data}
                                        : Operand{CUBLAS_OP_T, k, n, k, batched(b_size), b_data};
  float* out = b_data + batch * b_size;
  const Operand d{CUBLAS_OP_N, n, m, n, batched(d_size), out};
  Key key{};
  key.dtype = DType::f32;
  key.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  key.precision = detail::precision_from_name(problem.precision).value_or(Precision::highest);
  key.batch = batch;
  Plan plan;
  make_descriptors(plan, key, a, b, d);
  if (algo_applies(lt, plan, *algo)) run_algo(lt, plan, *algo, a, b, out, ctx.stream);
}  // (the scratch is freed in stream order, after the product)

void for_each_matmul_candidate(Context& ctx, const TensorImpl& a_in, const TensorImpl& b_in,
                               const TensorImpl& out,
                               const std::function<void(const std::string&)>& after_run) {
  Problem p;
  if (!prepare(ctx, a_in, b_in, out, CUBLASLT_EPILOGUE_DEFAULT, {}, p)) return;
  const LtState& s = lt_state(ctx);
  std::lock_guard lock(cache().mu);
  Plan plan;
  make_descriptors(plan, p.key, p.a, p.b, p.d);
  const std::vector<cublasLtMatmulAlgo_t> algos =
      heuristic(plan, s.handle, p.key, p.a, p.b, kTunedAlgorithms);
  for (const tune::Candidate& cand :
       candidates(ctx, s, plan, algos, a_in, b_in, p.a, p.b, out, false)) {
    try {
      cand.run();
    } catch (const DeviceError& e) {
      if (cand.name.rfind("kiln gemm", 0) == 0) continue;  // declined this problem: not a candidate
      throw;
    }
    KILN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    after_run(cand.name);
  }
}
#endif

}  // namespace kiln::cuda
