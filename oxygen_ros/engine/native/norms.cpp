// RMSNorm as one pass per row: the sum of squares, then x * (1 / rms) * scale + shift,
// where ATen's rms_norm runs pow, mean, add, rsqrt and mul as separate kernels (~5 us a
// call at the engine's 10-30 rows, several hundred calls a frame). Each row is computed
// the same way whatever the batch, so results do not depend on what else is batched.
#include "norms.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "fast_math.h"

namespace {

using at::Tensor;

// scale, shift: nullptr, or d values for this row
OXYGEN_CLONES void normalize_row(const float* x, const float* scale, const float* shift, float* y, int64_t d,
                                 float eps) {
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < d; ++c) squares += x[c] * x[c];
  const float inv = 1.0f / std::sqrt(squares / static_cast<float>(d) + eps);
  if (scale != nullptr && shift != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) y[c] = x[c] * inv * scale[c] + shift[c];
  } else if (scale != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) y[c] = x[c] * inv * scale[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) y[c] = x[c] * inv;
  }
}

// a term as d values shared by every row (row stride 0) or one set per row
Tensor row_terms(const std::optional<Tensor>& term, const Tensor& x, int64_t d, int64_t* stride) {
  *stride = 0;
  if (!term.has_value()) return Tensor();
  TORCH_CHECK(term->scalar_type() == at::kFloat, "rms_norm: scale and shift must be float32");
  if (term->numel() == d) return term->reshape({d}).contiguous();
  *stride = d;
  return term->expand(x.sizes()).contiguous();
}

}  // namespace

namespace oxygen_native {

Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& scale, const std::optional<Tensor>& shift,
                double eps) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.device().is_cpu(), "rms_norm: float32 on CPU only");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "rms_norm: x needs a last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const Tensor xc = x.contiguous();
  int64_t scale_stride = 0, shift_stride = 0;
  const Tensor s = row_terms(scale, xc, d, &scale_stride), b = row_terms(shift, xc, d, &shift_stride);
  Tensor out = at::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  const float* sp = s.defined() ? s.data_ptr<float>() : nullptr;
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* yp = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 16384 / d);    // small calls stay on one thread
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      normalize_row(xp + r * d, sp ? sp + r * scale_stride : nullptr, bp ? bp + r * shift_stride : nullptr,
                    yp + r * d, d, static_cast<float>(eps));
  });
  return out;
}

}  // namespace oxygen_native

TORCH_LIBRARY_FRAGMENT(oxygen_native, m) {
  m.def("rms_norm(Tensor x, Tensor? scale, Tensor? shift, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("rms_norm", &oxygen_native::rms_norm);
}
