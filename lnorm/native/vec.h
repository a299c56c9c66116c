// 8-wide float vectors (GCC/Clang vector extensions: one AVX register where
// the host has AVX, two SSE or NEON registers elsewhere) and the elementwise
// functions lnorm's kernels need.
//
// The build has no -ffast-math: the kernels' accuracy rests on the order of
// their float operations, which fast-math would be free to change.

#ifndef LNORM_NATIVE_VEC_H_
#define LNORM_NATIVE_VEC_H_

#include <cstdint>
#include <cstring>

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace lnorm {

typedef float f8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef uint32_t u8 __attribute__((vector_size(32)));

inline f8 Load(const float* p) {
  f8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void Store(float* p, f8 v) { std::memcpy(p, &v, sizeof v); }

inline f8 Splat(float x) { return f8{} + x; }

inline float Sum(f8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

inline f8 Select(i8 mask, f8 a, f8 b) { return mask ? a : b; }

// a < b ? a : b and a > b ? a : b, lane by lane: b where either is NaN.
inline f8 Min(f8 a, f8 b) {
#ifdef __AVX__
  return _mm256_min_ps(a, b);
#else
  return Select(a < b, a, b);
#endif
}

inline f8 Max(f8 a, f8 b) {
#ifdef __AVX__
  return _mm256_max_ps(a, b);
#else
  return Select(a > b, a, b);
#endif
}

// exp(x), Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, a degree-6
// polynomial for e^r, and 2^n built in the exponent bits. Inputs are clamped
// to [-87.3, 88], where 2^n stays a normal float (NaN stays NaN). n is
// rounded to nearest by adding and subtracting 1.5 * 2^23, which also leaves
// n in the low bits of the sum: (bits + 127) << 23 is 2^n.
inline f8 Exp(f8 x) {
  x = Min(Splat(88.0f), x);
  x = Max(Splat(-87.3f), x);
  const f8 k = x * 1.44269504088896341f + 12582912.0f;
  const f8 n = k - 12582912.0f;
  const f8 r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  f8 p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  u8 bits;  // unsigned: the shift wraps
  std::memcpy(&bits, &k, sizeof bits);
  bits = (bits + 127) << 23;
  f8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline f8 Sigmoid(f8 x) { return 1.0f / (1.0f + Exp(-x)); }

// tanh(x): Cephes' odd polynomial for |x| < 0.625, where 1 - 2 / (e^2x + 1)
// would cancel; that formula elsewhere. Within a few ulp of tanhf.
inline f8 Tanh(f8 x) {
  const f8 z = x * x;
  f8 p = -5.70498872745e-3f * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const f8 small = p * z * x + x;
  const f8 large = 1.0f - 2.0f / (Exp(2.0f * x) + 1.0f);
  const f8 ax = Select(x < 0.0f, -x, x);
  return Select(ax < 0.625f, small, large);
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_VEC_H_
