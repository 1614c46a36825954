// kiln multi-tensor AdamW: the device side of Backend::adamw, one launch for up to kMaxParts
// parameters.
//
// CUDA C compiled by NVRTC at run time after the prelude; src/cuda/adamw.cpp writes the entry
// point. The parameters are cut into chunks of `chunk` elements, numbered across them in order;
// block b updates chunk b, reading p, g, m, v (m, v absent: zero) and writing p', m', v' as
// Backend::adamw states (the same operations, in the same order, as the per-parameter
// expressions of src/optim/adamw.cpp). 16-byte loads where every pointer of the parameter allows.
namespace kadam {

constexpr int kMaxParts = 16;
// chunk, count, then per parameter the addresses p, g, m, v, p', m', v', its elements and the
// number of its first chunk.
struct Table {
  long long v[2 + 9 * kMaxParts];
};
struct Scalars {
  float factor, decay, beta1, beta2, step, inv_sqrt_bias2,
      eps;  // decay = 1 - lr wd, step = lr / bias1
};

// (g * factor * clip rounds after each product, as the per-parameter path's two multiplies; no
// clip multiplies by 1, exactly.)
__device__ __forceinline__ void update(const Scalars& s, float clip, float& p, float g, float& m,
                                       float& v) {
  g = g * s.factor * clip;
  m = m * s.beta1 + g * (1.0f - s.beta1);
  v = v * s.beta2 + g * g * (1.0f - s.beta2);
  p = p * s.decay - m / (sqrtf(v) * s.inv_sqrt_bias2 + s.eps) * s.step;
}

__device__ void adamw(const Table& t, const float* clip, const Scalars& s) {
  const long long chunk = t.v[0], b = blockIdx.x;
  const int count = (int)t.v[1];
  int q = 0;
  while (q + 1 < count && t.v[2 + 9 * (q + 1) + 8] <= b) ++q;
  const long long* e = &t.v[2 + 9 * q];
  const float* p = reinterpret_cast<const float*>(e[0]);
  const float* g = reinterpret_cast<const float*>(e[1]);
  const float* m = reinterpret_cast<const float*>(e[2]);
  const float* v = reinterpret_cast<const float*>(e[3]);
  float* np = reinterpret_cast<float*>(e[4]);
  float* nm = reinterpret_cast<float*>(e[5]);
  float* nv = reinterpret_cast<float*>(e[6]);
  const long long begin = (b - e[8]) * chunk;
  const long long end = begin + chunk < e[7] ? begin + chunk : e[7];
  const float gs = clip ? clip[0] : 1.0f;
  unsigned long long bits = 0;
  for (int i = 0; i < 7; ++i) bits |= (unsigned long long)e[i];
  long long i = begin;
  if (bits % 16 == 0) {  // every pointer 16-byte aligned (absent m, v are 0)
    const long long stop = begin + (end - begin) / 4 * 4;
    for (long long j = begin + 4LL * threadIdx.x; j < stop; j += 4LL * blockDim.x) {
      float4 pv = *reinterpret_cast<const float4*>(p + j);
      const float4 gv = *reinterpret_cast<const float4*>(g + j);
      float4 mv = m ? *reinterpret_cast<const float4*>(m + j) : make_float4(0.f, 0.f, 0.f, 0.f);
      float4 vv = v ? *reinterpret_cast<const float4*>(v + j) : make_float4(0.f, 0.f, 0.f, 0.f);
      update(s, gs, pv.x, gv.x, mv.x, vv.x);
      update(s, gs, pv.y, gv.y, mv.y, vv.y);
      update(s, gs, pv.z, gv.z, mv.z, vv.z);
      update(s, gs, pv.w, gv.w, mv.w, vv.w);
      *reinterpret_cast<float4*>(np + j) = pv;
      *reinterpret_cast<float4*>(nm + j) = mv;
      *reinterpret_cast<float4*>(nv + j) = vv;
    }
    i = stop;
  }
  for (long long j = i + threadIdx.x; j < end; j += blockDim.x) {
    float pj = p[j], mj = m ? m[j] : 0.0f, vj = v ? v[j] : 0.0f;
    update(s, gs, pj, g[j], mj, vj);
    np[j] = pj;
    nm[j] = mj;
    nv[j] = vj;
  }
}

}  // namespace kadam
