// A pass's RoPE and Q/K/V layouts in one pass (rope.cpp), shared by the eager path
// (through the oxygen_native::rope_split op) and the fused expert (expert.cpp).
#pragma once
#include <ATen/ATen.h>

namespace oxygen_native {

// qkv [B, T, (H + 2 Hkv) d] (each row contiguous); cos, sin [B, T, 1, d]. Writes the
// rotated keys to k_out and the values to v_out (each [B, Hkv, T, d], any strides but the
// last, e.g. the pool's slots); returns the rotated queries [B, H, T, d], contiguous.
at::Tensor rope_split(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t heads,
                      int64_t kv_heads, const at::Tensor& k_out, const at::Tensor& v_out);

}  // namespace oxygen_native
