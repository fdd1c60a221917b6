// Single-query (decode) attention over each row's own visible keys, for the batched
// decode step on CPU. A batched matmul spends most of its time on per-matrix overhead at
// these shapes (3 queries x 64 dims per KV head); this streams each row's K and V once,
// at about the memory bandwidth, on every intra-op thread.
//
// Every (row, KV head) is computed by the same code in the same order whatever the batch
// holds, so a request decoded among others gets bitwise what it gets alone (the engine's
// exactness between OxyGen and isolated runs rests on that).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OXYGEN_X86 1
#endif

namespace {

using at::Tensor;

// e^x for x <= 0 (softmax after subtracting the row's max): 2^n * p(r) with a degree-6
// polynomial on r in [-ln2/2, ln2/2], about 2 ulp; plain arithmetic, so its loop vectorises.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   // round(x / ln 2)
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;             // x - n ln 2, two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

// scores [g, n] <- softmax over each row (inlined into each path, vectorised for its target)
inline __attribute__((always_inline)) void softmax_rows(float* scores, int64_t n, int64_t g) {
  for (int64_t i = 0; i < g; ++i) {
    float* s = scores + i * n;
    float m = s[0];
    for (int64_t j = 1; j < n; ++j) m = s[j] > m ? s[j] : m;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      s[j] = exp_nonpositive(s[j] - m);
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
constexpr int64_t kMaxGroup = 8;

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

// d a multiple of 16, g <= kMaxGroup. Keys four at a time (a short last group repeats its
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
    __m512 acc[kMaxGroup][C];
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

bool use_avx512(int64_t g, int64_t d) {
#ifdef OXYGEN_X86
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && d % 16 == 0 && g <= kMaxGroup;
#else
  (void)g, (void)d;
  return false;
#endif
}

// q [B, Hkv, G, d]: the G query heads sharing each KV head; k, v [B, Hkv, L, d], any
// strides over B and Hkv, rows of d contiguous (views into the KV pool); visible [B]:
// row b attends over keys [0, visible[b]). Returns [B, Hkv, G, d].
Tensor decode_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& visible, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "decode_attention: q, k, v must be 4-d");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "decode_attention: float32 only");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "decode_attention: CPU only");
  const int64_t b = q.size(0), hkv = q.size(1), g = q.size(2), d = q.size(3), len = k.size(2);
  TORCH_CHECK(k.size(0) == b && v.size(0) == b && k.size(1) == hkv && v.size(1) == hkv && v.size(2) == len &&
                  k.size(3) == d && v.size(3) == d,
              "decode_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " do not match");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1 && k.stride(2) == d && v.stride(2) == d,
              "decode_attention: each row's keys and values must be contiguous [L, d]");
  TORCH_CHECK(visible.dim() == 1 && visible.size(0) == b, "decode_attention: visible must be [B]");
  const auto counts = visible.to(at::kLong).contiguous();
  const int64_t* n = counts.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r)
    TORCH_CHECK(n[r] >= 1 && n[r] <= len, "decode_attention: row ", r, " sees ", n[r], " keys of ", len);
  const auto qc = q.contiguous();
  auto out = at::empty({b, hkv, g, d}, q.options());
  const float* qp = qc.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const bool fast = use_avx512(g, d);
  const auto s = static_cast<float>(scale);
  at::parallel_for(0, b * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(g * len);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t r = u / hkv, h = u % hkv;
      const float* ku = kp + r * k.stride(0) + h * k.stride(1);
      const float* vu = vp + r * v.stride(0) + h * v.stride(1);
#ifdef OXYGEN_X86
      if (fast) {
        attend_avx512(qp + u * g * d, ku, vu, n[r], g, d, s, scores.data(), op + u * g * d);
        continue;
      }
#endif
      attend_generic(qp + u * g * d, ku, vu, n[r], g, d, s, scores.data(), op + u * g * d);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(oxygen_native, m) {
  m.def("decode_attention(Tensor q, Tensor k, Tensor v, Tensor visible, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("decode_attention", &decode_attention);
}
