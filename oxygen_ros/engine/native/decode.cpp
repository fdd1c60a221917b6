// The batched decode step's decoder layers (one token per row, every layer) as one native
// call: the same ATen / oneDNN / native kernels as the eager path (Decoder.forward with a
// decode CacheView), in the same order, minus the Python between them, so its hidden
// states and the K/V it writes are bitwise the eager ones. Llama- and Gemma-style layers
// without q/k norms, up to 32 rows (more run in padded tiles eagerly: layers/blocks.py).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <string>
#include <vector>

#include "activations.h"
#include "attention.h"
#include "layer_ops.h"
#include "norms.h"

namespace {

using at::Tensor;
using at::indexing::Slice;

constexpr int64_t kPerLayer = 6;   // input norm weight, post-attention norm weight, qkv, o, gate_up, down matrices
constexpr int64_t kBlocked = 4;    // qkv, o, gate_up, down blocked copies

// x [B, 1, W]: each row's newest token's embedding, written at positions[b] of pool slot b
// and attending over that slot's keys [0, positions[b]] within [0, read_len).
Tensor decode_layers(const Tensor& x_in, at::TensorList params, at::TensorList blocked, at::TensorList k_layers,
                     at::TensorList v_layers, const Tensor& positions, int64_t read_len, const Tensor& cos,
                     const Tensor& sin, int64_t heads, int64_t kv_heads, int64_t head_dim, double eps,
                     c10::string_view activation) {
  const int64_t depth = k_layers.size();
  TORCH_CHECK(params.size() == static_cast<size_t>(kPerLayer * depth), "params: wrong count");
  TORCH_CHECK(blocked.size() == static_cast<size_t>(kBlocked * depth), "blocked: wrong count");
  TORCH_CHECK(v_layers.size() == k_layers.size(), "k/v layers differ in count");
  TORCH_CHECK(x_in.dim() == 3 && x_in.size(1) == 1, "decode_layers: x must be [B, 1, W]");
  const int64_t b = x_in.size(0), h = heads, hkv = kv_heads, d = head_dim, g = h / hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const std::string act(activation);
  const Tensor rows = at::arange(b, positions.options());
  const Tensor visible = (positions + 1).clamp_max(read_len);
  Tensor x = x_in;
  for (int64_t i = 0; i < depth; ++i) {
    const Tensor* p = params.data() + kPerLayer * i;
    const Tensor* bl = blocked.data() + kBlocked * i;
    // attention
    auto y = oxygen_native::rms_norm(x, p[0], std::nullopt, eps);
    auto qkv = oxygen_native::packed(y, p[2], bl[0]);
    auto qk = qkv.narrow(-1, 0, (h + hkv) * d).unflatten(-1, {h + hkv, d});
    auto v = qkv.narrow(-1, (h + hkv) * d, hkv * d).unflatten(-1, {hkv, d}).transpose(1, 2);
    qk = oxygen_native::apply_rope(qk, cos, sin);
    auto q = qk.narrow(2, 0, h).transpose(1, 2);
    auto k = qk.narrow(2, h, hkv).transpose(1, 2);
    Tensor kl = k_layers[i], vl = v_layers[i];
    kl.index_put_({rows, Slice(), positions}, k.select(2, 0));
    vl.index_put_({rows, Slice(), positions}, v.select(2, 0));
    auto keys = kl.index({Slice(0, b), Slice(), Slice(0, read_len)});
    auto values = vl.index({Slice(0, b), Slice(), Slice(0, read_len)});
    auto att = oxygen_native::attention(q.reshape({b, hkv, g, d}), keys, values, visible, scale).reshape({b, h, 1, d});
    auto hid = x + oxygen_native::packed(att.transpose(1, 2).reshape({b, 1, -1}), p[3], bl[1]);
    // MLP
    y = oxygen_native::rms_norm(hid, p[1], std::nullopt, eps);
    auto gu = oxygen_native::packed(y, p[4], bl[2]);
    x = hid + oxygen_native::packed(oxygen_native::gated_activation(gu, act), p[5], bl[3]);
  }
  return x;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(oxygen_native, m) {
  m.def("decode_layers(Tensor x, Tensor[] params, Tensor[] blocked, Tensor[] k_layers, Tensor[] v_layers, "
        "Tensor positions, int read_len, Tensor cos, Tensor sin, int heads, int kv_heads, int head_dim, "
        "float eps, str activation) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("decode_layers", &decode_layers);
}
