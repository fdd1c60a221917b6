// The gated MLP's activation in one pass (activations.cpp), shared by the eager path
// (through the oxygen_native::gated_activation op) and the fused expert.
#pragma once
#include <ATen/ATen.h>

#include <string>

namespace oxygen_native {

// gate_up [..., 2F] float32 (gate then up, side by side) -> act(gate) * up [..., F];
// act: "gelu_tanh" or "silu".
at::Tensor gated_activation(const at::Tensor& gate_up, const std::string& act);

}  // namespace oxygen_native
