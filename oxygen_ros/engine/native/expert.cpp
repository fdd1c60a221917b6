// The action expert's whole sampling (every denoise step, every layer) as one native
// call: the same ATen / oneDNN kernels as the eager path (ActionExpert.sample), in the
// same order, minus the Python between them.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "activations.h"
#include "layer_ops.h"
#include "norms.h"
#include "rope.h"

namespace {

using at::Tensor;
using oxygen_native::packed;

// ada_rms_normalize: rmsnorm(x) * (1 + scale) + shift in float32, rounded to x's dtype.
Tensor ada_norm(const Tensor& x, const Tensor& one_plus_scale, const Tensor& shift, double eps) {
  return oxygen_native::rms_norm(x.to(at::kFloat), one_plus_scale, shift, eps).to(x.scalar_type());
}

// The rotated queries [B, H, T, d] (contiguous); the keys and values written to k_dest,
// v_dest. rope_split in float32 (the eager Attention's choice), else ATen's ops.
Tensor rotate_and_store(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t h, int64_t hkv,
                        Tensor& k_dest, Tensor& v_dest) {
  if (qkv.scalar_type() == at::kFloat) return oxygen_native::rope_split(qkv, cos, sin, h, hkv, k_dest, v_dest);
  const int64_t d = k_dest.size(-1);
  auto qk = oxygen_native::apply_rope(qkv.narrow(-1, 0, (h + hkv) * d).unflatten(-1, {h + hkv, d}), cos, sin);
  k_dest.copy_(qk.narrow(2, h, hkv).transpose(1, 2));
  v_dest.copy_(qkv.narrow(-1, (h + hkv) * d, hkv * d).unflatten(-1, {hkv, d}).transpose(1, 2));
  return qk.narrow(2, 0, h).transpose(1, 2).contiguous();
}

constexpr int64_t kGlobals = 7;      // in_w, in_b, out_w, out_b, final_mods, cos, sin
constexpr int64_t kPerLayer = 6;     // norms, gates, qkv, o, gate_up, down matrices
constexpr int64_t kBlocked = 4;      // qkv, o, gate_up, down blocked copies

Tensor expert_sample(const Tensor& noise, at::TensorList params, at::TensorList blocked,
                     at::TensorList k_layers, at::TensorList v_layers, int64_t slot,
                     int64_t prefix_len, int64_t heads, int64_t kv_heads, int64_t head_dim,
                     double eps, double dt) {
  const int64_t depth = k_layers.size();
  TORCH_CHECK(params.size() == static_cast<size_t>(kGlobals + kPerLayer * depth), "params: wrong count");
  TORCH_CHECK(blocked.size() == static_cast<size_t>(kBlocked * depth), "blocked: wrong count");
  TORCH_CHECK(v_layers.size() == k_layers.size(), "k/v layers differ in count");
  const auto& in_w = params[0];
  const auto& in_b = params[1];
  const auto& out_w = params[2];
  const auto& out_b = params[3];
  const auto& final_mods = params[4];
  const auto& cos = params[5];
  const auto& sin = params[6];
  const int64_t steps = final_mods.size(0);
  const int64_t b = noise.size(0), t = noise.size(1);
  const int64_t h = heads, hkv = kv_heads, d = head_dim, g = h / hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const auto slots = at::indexing::Slice(slot, slot + 1);
  std::vector<Tensor> keys(depth), values(depth), k_dest(depth), v_dest(depth);
  for (int64_t i = 0; i < depth; ++i) {
    k_dest[i] = k_layers[i].index({slots, at::indexing::Slice(), at::indexing::Slice(prefix_len, prefix_len + t)});
    v_dest[i] = v_layers[i].index({slots, at::indexing::Slice(), at::indexing::Slice(prefix_len, prefix_len + t)});
    keys[i] = k_layers[i].index({slots, at::indexing::Slice(), at::indexing::Slice(0, prefix_len + t)});
    values[i] = v_layers[i].index({slots, at::indexing::Slice(), at::indexing::Slice(0, prefix_len + t)});
  }
  Tensor x = noise;
  for (int64_t k = 0; k < steps; ++k) {
    Tensor hid = at::linear(x, in_w, in_b);
    for (int64_t i = 0; i < depth; ++i) {
      const Tensor* p = params.data() + kGlobals + kPerLayer * i;
      const Tensor* bl = blocked.data() + kBlocked * i;
      auto norms = p[0][k], gates = p[1][k];
      // attention
      auto y = ada_norm(hid, norms[0], norms[1], eps);
      auto qkv = packed(y, p[2], bl[0]);
      auto qg = rotate_and_store(qkv, cos, sin, h, hkv, k_dest[i], v_dest[i]).view({b, hkv, g * t, d});
      auto att = at::scaled_dot_product_attention(qg, keys[i], values[i], std::nullopt, 0.0, false, scale)
                     .reshape({b, h, t, d});
      auto o = packed(att.transpose(1, 2).reshape({b, t, -1}), p[3], bl[1]);
      hid = at::addcmul(hid, o, gates[0]);
      // MLP
      y = ada_norm(hid, norms[2], norms[3], eps);
      auto gu = packed(y, p[4], bl[2]);
      // GatedMLP's choice: the native kernel in float32, else ATen's
      auto half = gu.size(-1) / 2;
      auto act = gu.scalar_type() == at::kFloat
                     ? oxygen_native::gated_activation(gu, "gelu_tanh")
                     : at::gelu(gu.narrow(-1, 0, half), "tanh") * gu.narrow(-1, half, gu.size(-1) - half);
      hid = at::addcmul(hid, packed(act, p[5], bl[3]), gates[1]);
    }
    auto fm = final_mods[k];
    x = x + at::linear(ada_norm(hid, fm[0], fm[1], eps), out_w, out_b) * dt;
  }
  return x;
}

}  // namespace

TORCH_LIBRARY(oxygen_native, m) {
  m.def("expert_sample(Tensor noise, Tensor[] params, Tensor[] blocked, Tensor[] k_layers, "
        "Tensor[] v_layers, int slot, int prefix_len, int heads, int kv_heads, int head_dim, "
        "float eps, float dt) -> Tensor");
}

TORCH_LIBRARY_IMPL(oxygen_native, CompositeExplicitAutograd, m) {
  m.impl("expert_sample", &expert_sample);
}
