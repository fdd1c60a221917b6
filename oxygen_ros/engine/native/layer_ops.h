// The pieces of a transformer layer the native passes share (expert.cpp, decode.cpp), each
// the same ATen / oneDNN calls as the eager path's (layers/blocks.py), so the native and
// eager passes compute alike.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace oxygen_native {

using at::Tensor;

inline const auto& linear_pointwise() {
  static auto op = c10::Dispatcher::singleton()
      .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
      .typed<Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, c10::string_view,
                    c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  return op;
}

// Packed.matmul without bias or activation: the oneDNN-blocked copy when there is one
// (an mkldnn tensor), else x @ matrix.
inline Tensor packed(const Tensor& x, const Tensor& matrix, const Tensor& blocked) {
  if (blocked.defined() && blocked.is_mkldnn()) {
    auto out = linear_pointwise().call(x.reshape({-1, x.size(-1)}), blocked, std::nullopt, "none",
                                       c10::List<std::optional<at::Scalar>>(), c10::string_view(""));
    auto shape = x.sizes().vec();
    shape.back() = -1;
    return out.reshape(shape);
  }
  return at::matmul(x, matrix);
}

inline Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  auto half = x.size(-1) / 2;
  auto swapped = at::cat({x.narrow(-1, half, x.size(-1) - half), x.narrow(-1, 0, half)}, -1);
  return at::addcmul(x * cos, swapped, sin);
}

}  // namespace oxygen_native
