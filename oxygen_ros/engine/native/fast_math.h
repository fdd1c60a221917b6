// What the native kernels share for their elementwise loops: a function compiled once per
// vector width the CPU may have (OXYGEN_CLONES, picked at load time), and e^x for x <= 0.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OXYGEN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OXYGEN_CLONES
#endif

namespace oxygen_native {

// 2^n * p(r) with a degree-6 polynomial on r in [-ln2/2, ln2/2], about 2 ulp, 0 below
// -87; plain arithmetic, so the loops using it vectorise (libm's expf does not without
// -ffast-math).
inline float exp_nonpositive(float x) {
  const bool underflows = x < -87.0f;      // below the smallest normal float: 0
  x = underflows ? -87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   // round(x / ln 2)
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;             // x - n ln 2, two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return underflows ? 0.0f : p * two_n;
}

}  // namespace oxygen_native
