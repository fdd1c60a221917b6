// Attention of a few queries over each row's own visible keys, on CPU: the batched decode
// step (one token per row, the query heads sharing each KV head). At these shapes (1-8
// queries x 64-256 dims per KV head) a batched matmul spends most of its time on
// per-matrix overhead; this streams each row's K and V once, at about the memory
// bandwidth, on every intra-op thread. (With tens of queries per KV head, as in the
// action expert's chunk, ATen's flash kernel is as fast or faster.)
//
// Every query is computed by the same code in the same order whatever else the call
// holds (other rows, other queries), so a request decoded among others gets bitwise what
// it gets alone (the engine's exactness between OxyGen and isolated runs rests on that).
#include "attention.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fast_math.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OXYGEN_X86 1
#endif

namespace {

using at::Tensor;

// queries per work item: on AVX-512 their 4 x 16-column accumulators (24) stay in registers
constexpr int64_t kBlock = 6;

// scores [g, n] <- softmax over each row (inlined into each path, vectorised for its target)
inline __attribute__((always_inline)) void softmax_rows(float* scores, int64_t n, int64_t g) {
  for (int64_t i = 0; i < g; ++i) {
    float* s = scores + i * n;
    float m = s[0];
    for (int64_t j = 1; j < n; ++j) m = s[j] > m ? s[j] : m;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      s[j] = oxygen_native::exp_nonpositive(s[j] - m);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  }
}

// Portable path: any head size and group.
void attend_generic(const float* q, const float* k, const float* v, int64_t n, int64_t g, int64_t d,
                    float scale, float* scores, float* out) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < g; ++i) {
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int64_t c = 0; c < d; ++c) acc += q[i * d + c] * k[j * d + c];
      scores[i * n + j] = acc * scale;
    }
  softmax_rows(scores, n, g);
  std::fill(out, out + g * d, 0.f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < g; ++i) {
      const float p = scores[i * n + j];
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) out[i * d + c] += p * v[j * d + c];
    }
}

#ifdef OXYGEN_X86
// the lane sums of a0..a3, as one 4-float vector
__attribute__((target("avx512f"))) inline __m128 sum_lanes4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 x01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 x23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  const __m512d x01d = _mm512_castps_pd(x01), x23d = _mm512_castps_pd(x23);
  const __m512 y = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x01d, x23d)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(x01d, x23d)));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(y),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(y), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// d a multiple of 16, g <= kBlock. Keys four at a time (a short last group repeats its
// last key and drops the copies, so every key's sum has the same order); then the
// values, 64 columns at a time, with the g x 4 accumulators in registers.
__attribute__((target("avx512f"))) void attend_avx512(const float* q, const float* k, const float* v, int64_t n,
                                                     int64_t g, int64_t d, float scale, float* scores, float* out) {
  const int64_t chunks = d / 16;
  for (int64_t j = 0; j < n; j += 4) {
    const int64_t m = n - j < 4 ? n - j : 4;
    const float* k0 = k + j * d;
    const float* k1 = k + (j + (m > 1 ? 1 : 0)) * d;
    const float* k2 = k + (j + (m > 2 ? 2 : m - 1)) * d;
    const float* k3 = k + (j + (m > 3 ? 3 : m - 1)) * d;
    for (int64_t i = 0; i < g; ++i) {
      const float* qi = q + i * d;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t c = 0; c < 16 * chunks; c += 16) {
        const __m512 qv = _mm512_loadu_ps(qi + c);
        a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + c), a0);
        a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k1 + c), a1);
        a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k2 + c), a2);
        a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k3 + c), a3);
      }
      float four[4];
      _mm_storeu_ps(four, _mm_mul_ps(sum_lanes4(a0, a1, a2, a3), _mm_set1_ps(scale)));
      std::memcpy(scores + i * n + j, four, m * sizeof(float));
    }
  }
  softmax_rows(scores, n, g);
  constexpr int64_t C = 4;
  for (int64_t c0 = 0; c0 < chunks; c0 += C) {
    const int64_t cs = chunks - c0 < C ? chunks - c0 : C;
    __m512 acc[kBlock][C];
    for (int64_t i = 0; i < g; ++i)
      for (int64_t c = 0; c < C; ++c) acc[i][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const float* vj = v + j * d + 16 * c0;
      for (int64_t c = 0; c < cs; ++c) {
        const __m512 vv = _mm512_loadu_ps(vj + 16 * c);
        for (int64_t i = 0; i < g; ++i) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(scores[i * n + j]), vv, acc[i][c]);
      }
    }
    for (int64_t i = 0; i < g; ++i)
      for (int64_t c = 0; c < cs; ++c) _mm512_storeu_ps(out + i * d + 16 * (c0 + c), acc[i][c]);
  }
}
#endif

bool use_avx512(int64_t d) {
#ifdef OXYGEN_X86
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && d % 16 == 0;
#else
  (void)d;
  return false;
#endif
}

}  // namespace

namespace oxygen_native {

// q [B, Hkv, Q, d]: the Q queries (query heads x tokens) sharing each KV head; k, v
// [B, Hkv, L, d], any strides over B and Hkv, rows of d contiguous (views into the KV
// pool); visible [B]: row b's queries attend over keys [0, visible[b]). -> [B, Hkv, Q, d].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& visible, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be 4-d");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "attention: float32 only");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "attention: CPU only");
  const int64_t b = q.size(0), hkv = q.size(1), nq = q.size(2), d = q.size(3), len = k.size(2);
  TORCH_CHECK(k.size(0) == b && v.size(0) == b && k.size(1) == hkv && v.size(1) == hkv && v.size(2) == len &&
                  k.size(3) == d && v.size(3) == d,
              "attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " do not match");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1 && k.stride(2) == d && v.stride(2) == d,
              "attention: each row's keys and values must be contiguous [L, d]");
  TORCH_CHECK(visible.dim() == 1 && visible.size(0) == b, "attention: visible must be [B]");
  const auto counts = visible.to(at::kLong).contiguous();
  const int64_t* n = counts.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r)
    TORCH_CHECK(n[r] >= 1 && n[r] <= len, "attention: row ", r, " sees ", n[r], " keys of ", len);
  const auto qc = q.contiguous();
  auto out = at::empty({b, hkv, nq, d}, q.options());
  const float* qp = qc.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const bool fast = use_avx512(d);
  const auto s = static_cast<float>(scale);
  const int64_t blocks = (nq + kBlock - 1) / kBlock;
  // work items: (row, KV head, block of queries)
  at::parallel_for(0, b * hkv * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(kBlock * len);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t u = item / blocks, first = (item % blocks) * kBlock, r = u / hkv, h = u % hkv;
      const int64_t count = std::min(kBlock, nq - first);
      const float* ku = kp + r * k.stride(0) + h * k.stride(1);
      const float* vu = vp + r * v.stride(0) + h * v.stride(1);
      const float* qi = qp + (u * nq + first) * d;
      float* oi = op + (u * nq + first) * d;
#ifdef OXYGEN_X86
      if (fast) {
        attend_avx512(qi, ku, vu, n[r], count, d, s, scores.data(), oi);
        continue;
      }
#endif
      attend_generic(qi, ku, vu, n[r], count, d, s, scores.data(), oi);
    }
  });
  return out;
}

}  // namespace oxygen_native

TORCH_LIBRARY_FRAGMENT(oxygen_native, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor visible, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("attention", &oxygen_native::attention);
}
