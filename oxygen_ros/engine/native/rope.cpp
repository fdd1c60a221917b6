// A pass's queries and keys rotated (RoPE) and laid out where attention reads them, in one
// pass over the Q/K/V product: the queries as [B, H, T, d] (heads folded as
// grouped_attention folds them, with no further copy), the keys and values straight into
// the KV pool. The eager path ran cat, mul and addcmul for the rotation and three copies
// for the layouts. Each value is what ATen's mul then addcmul give: x*cos rounded, then
// swapped*sin added in one fused multiply-add (addcmul's CPU kernel fuses it), so the two
// paths agree bitwise; nothing else may be contracted.
#pragma GCC optimize("fp-contract=off")
#include "rope.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "fast_math.h"

namespace {

using at::Tensor;

// y = x * c + swap_halves(x) * s over one head of d values
OXYGEN_CLONES void rotate_head(const float* x, const float* c, const float* s, float* y, int64_t d) {
  const int64_t half = d / 2;
#pragma omp simd
  for (int64_t j = 0; j < half; ++j) {
    y[j] = std::fma(x[j + half], s[j], x[j] * c[j]);
  }
#pragma omp simd
  for (int64_t j = half; j < d; ++j) {
    y[j] = std::fma(x[j - half], s[j], x[j] * c[j]);
  }
}

void check_heads(const Tensor& t, const char* name, int64_t b, int64_t heads, int64_t len, int64_t d) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 4 && t.size(0) == b && t.size(1) == heads &&
                  t.size(2) == len && t.size(3) == d && t.stride(3) == 1,
              "rope_split: ", name, " must be float32 [", b, ", ", heads, ", ", len, ", ", d,
              "] with contiguous rows");
}

}  // namespace

namespace oxygen_native {

Tensor rope_split(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t heads, int64_t kv_heads,
                  const Tensor& k_out, const Tensor& v_out) {
  TORCH_CHECK(qkv.scalar_type() == at::kFloat && qkv.device().is_cpu() && qkv.dim() == 3 && qkv.stride(2) == 1,
              "rope_split: qkv must be float32 [B, T, (H + 2 Hkv) d] on CPU with contiguous rows");
  const int64_t b = qkv.size(0), t = qkv.size(1), all = heads + 2 * kv_heads;
  TORCH_CHECK(heads > 0 && kv_heads > 0 && qkv.size(2) % all == 0, "rope_split: ", qkv.size(2),
              " columns are not ", all, " heads");
  const int64_t d = qkv.size(2) / all;
  TORCH_CHECK(d % 2 == 0, "rope_split: head_dim must be even");
  for (const Tensor* table : {&cos, &sin})
    TORCH_CHECK(table->scalar_type() == at::kFloat && table->dim() == 4 && table->size(0) == b &&
                    table->size(1) == t && table->size(2) == 1 && table->size(3) == d && table->stride(3) == 1,
                "rope_split: cos and sin must be float32 [B, T, 1, head_dim]");
  check_heads(k_out, "k_out", b, kv_heads, t, d);
  check_heads(v_out, "v_out", b, kv_heads, t, d);
  Tensor q = at::empty({b, heads, t, d}, qkv.options());
  const float *src = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float *qp = q.data_ptr<float>(), *kp = k_out.data_ptr<float>(), *vp = v_out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 16384 / (all * d));    // small passes stay on one thread
  at::parallel_for(0, b * t, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / t, ti = row % t;
      const float* x = src + bi * qkv.stride(0) + ti * qkv.stride(1);
      const float* c = cp + bi * cos.stride(0) + ti * cos.stride(1);
      const float* s = sp + bi * sin.stride(0) + ti * sin.stride(1);
      for (int64_t h = 0; h < heads; ++h)
        rotate_head(x + h * d, c, s, qp + ((bi * heads + h) * t + ti) * d, d);
      for (int64_t h = 0; h < kv_heads; ++h) {
        const int64_t offset = bi * k_out.stride(0) + h * k_out.stride(1) + ti * k_out.stride(2);
        rotate_head(x + (heads + h) * d, c, s, kp + offset, d);
        std::copy_n(x + (heads + kv_heads + h) * d, d,
                    vp + bi * v_out.stride(0) + h * v_out.stride(1) + ti * v_out.stride(2));
      }
    }
  });
  return q;
}

}  // namespace oxygen_native

TORCH_LIBRARY_FRAGMENT(oxygen_native, m) {
  m.def("rope_split(Tensor qkv, Tensor cos, Tensor sin, int heads, int kv_heads, Tensor(a!) k_out, "
        "Tensor(b!) v_out) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("rope_split", &oxygen_native::rope_split);
}
