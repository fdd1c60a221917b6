// RMSNorm in one pass over each row (norms.cpp), shared by the eager path (through the
// oxygen_native::rms_norm op) and the fused expert (expert.cpp), so both compute it alike.
#pragma once
#include <ATen/ATen.h>

#include <optional>

namespace oxygen_native {

// x / rms(x) * scale + shift over the last dim of a float32 x; scale and shift (each
// optional) hold one value per column ([D]) or per element (x's shape, after broadcast).
at::Tensor rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& scale,
                    const std::optional<at::Tensor>& shift, double eps);

}  // namespace oxygen_native
