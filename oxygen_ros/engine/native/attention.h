// The decode step's attention (attention.cpp), for the native decode pass (decode.cpp)
// and the oxygen_native::attention op the eager one calls.
#pragma once
#include <ATen/ATen.h>

namespace oxygen_native {

// q [B, Hkv, Q, d]; k, v [B, Hkv, L, d] (rows of d contiguous); row b's queries see keys
// [0, visible[b]). Returns [B, Hkv, Q, d] in float32.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& visible,
                     double scale);

}  // namespace oxygen_native
