// kiln sum of squares over many tensors: the device side of Backend::sum_of_squares (the global
// norm of a model's gradients, for clipping), in two kernels however many tensors there are.
//
// CUDA C compiled by NVRTC at run time after the prelude and kernels/rows.cuh (whose load and
// block_all it uses); src/cuda/sum_of_squares.cpp writes the extern "C" entry points.
//
// The tensors are cut into chunks of `chunk` elements, numbered across the tensors in order; a
// launch's table names up to kMaxParts tensors (address, elements, dtype, number of its first
// chunk) and block b sums the squares of chunk base + b into partial[base + b]. The finishing
// kernel adds the partials in a fixed order, so the result is the same on every run.
namespace kss {

constexpr int kMaxParts = 64;
// The table, as int64 values: chunk, base, count, then per tensor address, elements, dtype (0
// f32, 1 bf16, 2 f16) and first chunk.
struct Table {
  long long v[3 + 4 * kMaxParts];
};

// Squares of x[begin, end) summed by the block's threads (16-byte loads where x is aligned: begin
// is a multiple of every V as chunks are). Four loads in flight a thread.
template <class T>
__device__ float squares(const T* x, long long begin, long long end) {
  constexpr int V = 16 / sizeof(T);
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  long long i = begin;
  if (reinterpret_cast<unsigned long long>(x) % 16 == 0) {
    const long long stop = begin + (end - begin) / V * V;
    const long long step = (long long)blockDim.x * V;
    for (long long j = begin + threadIdx.x * (long long)V; j < stop; j += 4 * step) {
      float v[4][V];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (j + q * step < stop) kr::load<V>(x + j + q * step, v[q]);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (j + q * step < stop)
#pragma unroll
          for (int e = 0; e < V; ++e) s[q] += v[q][e] * v[q][e];
    }
    i = stop;
  }
  for (long long j = i + threadIdx.x; j < end; j += blockDim.x) {
    const float v = kr::f32(kiln::ldg(x + j));
    s[0] += v * v;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

__device__ void sum_of_squares(const Table& t, float* partial) {
  __shared__ float sh[32];
  const long long chunk = t.v[0], base = t.v[1];
  const int count = (int)t.v[2];
  const long long b = blockIdx.x;
  int p = 0;
  while (p + 1 < count && t.v[3 + 4 * (p + 1) + 3] <= b) ++p;
  const long long* part = &t.v[3 + 4 * p];
  const void* x = reinterpret_cast<const void*>(part[0]);
  const long long begin = (b - part[3]) * chunk;
  const long long end = begin + chunk < part[1] ? begin + chunk : part[1];
  float s = 0.0f;
  switch (part[2]) {
    case 0:
      s = squares(static_cast<const float*>(x), begin, end);
      break;
    case 1:
      s = squares(static_cast<const kiln::bf16*>(x), begin, end);
      break;
    default:
      s = squares(static_cast<const kiln::f16*>(x), begin, end);
      break;
  }
  s = kr::block_all<kr::Sum>(s, sh);
  if (threadIdx.x == 0) partial[base + b] = s;
}

// out[0] = the sum of partial[0, count): thread t adds t, t + blockDim.x, ..., then the block adds
// the threads' sums (one block).
__device__ void sum_of_squares_finish(const float* partial, long long count, float* out) {
  __shared__ float sh[32];
  float s = 0.0f;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = kr::block_all<kr::Sum>(s, sh);
  if (threadIdx.x == 0) out[0] = s;
}

}  // namespace kss
