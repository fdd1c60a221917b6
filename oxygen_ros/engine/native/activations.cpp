// act(gate) * up in one pass over the gate/up product's output, where ATen runs the
// activation and the product as two kernels over two strided halves (~25 us a call at the
// action expert's 10 rows, 300 calls a chunk). tanh and the logistic come from
// exp_nonpositive, so the loops vectorise; values within a few ulp of ATen's.
#include "activations.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "fast_math.h"

namespace {

using oxygen_native::exp_nonpositive;

// tanh's approximation of GELU: 0.5 x (1 + tanh(y)), y = sqrt(2/pi) (x + 0.044715 x^3),
// as x * sigmoid(2y) = x / (1 + e^-2y), written with e = e^-2|y| so nothing cancels:
// x / (1 + e) for y >= 0, x e / (1 + e) below
OXYGEN_CLONES void gelu_tanh_times(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    const float x = gate[c];
    const float y = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float e = exp_nonpositive(y < 0.f ? 2.f * y : -2.f * y);
    out[c] = x * (y < 0.f ? e : 1.f) / (1.f + e) * up[c];
  }
}

// x * sigmoid(x), the same way: x / (1 + e^-x) for x >= 0, x e^x / (1 + e^x) below
OXYGEN_CLONES void silu_times(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    const float x = gate[c];
    const float e = exp_nonpositive(x < 0.f ? x : -x);
    out[c] = x * (x < 0.f ? e : 1.f) / (1.f + e) * up[c];
  }
}

}  // namespace

namespace oxygen_native {

at::Tensor gated_activation(const at::Tensor& gate_up, const std::string& act) {
  TORCH_CHECK(gate_up.scalar_type() == at::kFloat && gate_up.device().is_cpu(),
              "gated_activation: float32 on CPU only");
  TORCH_CHECK(act == "gelu_tanh" || act == "silu", "gated_activation: unknown activation ", act);
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0, "gated_activation: the last dim must be 2F");
  const at::Tensor x = gate_up.contiguous();
  const int64_t f = x.size(-1) / 2, rows = x.numel() / std::max<int64_t>(1, 2 * f);
  auto shape = x.sizes().vec();
  shape.back() = f;
  at::Tensor out = at::empty(shape, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const auto kernel = act == "silu" ? silu_times : gelu_tanh_times;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, f));   // small calls stay on one thread
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) kernel(xp + r * 2 * f, xp + r * 2 * f + f, op + r * f, f);
  });
  return out;
}

}  // namespace oxygen_native

TORCH_LIBRARY_FRAGMENT(oxygen_native, m) {
  m.def("gated_activation(Tensor gate_up, str act) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("gated_activation", [](const at::Tensor& gate_up, c10::string_view act) {
    return oxygen_native::gated_activation(gate_up, std::string(act));
  });
}
