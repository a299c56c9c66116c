// Float vectors (GCC/Clang vector extensions) and the elementwise functions
// lnorm's kernels need. f8 is 8 floats (one AVX register where the host has
// AVX, two SSE or NEON registers elsewhere); fr, the recurrent kernels' row
// vector (rows.h), is 16 where the host has AVX-512 and f8 elsewhere. The
// functions below take either: a function of each lane alone gives the same
// floats at either width; Sum's order of additions depends on it.
//
// The build has no -ffast-math: the kernels' accuracy rests on the order of
// their float operations, which fast-math would be free to change.

#ifndef LNORM_NATIVE_VEC_H_
#define LNORM_NATIVE_VEC_H_

#include <cstdint>
#include <cstring>

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lnorm {

template <int N>
struct Lanes {
  typedef float f __attribute__((vector_size(4 * N)));
  typedef uint32_t u __attribute__((vector_size(4 * N)));
};

typedef Lanes<8>::f f8;

#if defined(__AVX512F__)
constexpr int64_t kRowLanes = 16;
#else
constexpr int64_t kRowLanes = 8;
#endif
typedef Lanes<kRowLanes>::f fr;

template <typename V>
constexpr int kLanesOf = sizeof(V) / sizeof(float);

template <typename V = f8>
inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V>
inline void Store(float* p, V v) { std::memcpy(p, &v, sizeof v); }

template <typename V = f8>
inline V Splat(float x) { return V{} + x; }

inline float Sum(f8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// 16 lanes: the halves added lane by lane, then as f8.
inline float Sum(Lanes<16>::f v) {
  return Sum(f8(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)) +
             f8(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)));
}

template <typename V, typename M>
inline V Select(M mask, V a, V b) { return mask ? a : b; }

// a < b ? a : b and a > b ? a : b, lane by lane: b where either is NaN, as
// minps and maxps compute them. Spelled as intrinsics: for Exp's clamps GCC
// emits the plain select as a compare and a blend.
template <typename V>
inline V Min(V a, V b) {
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64) return _mm512_min_ps(a, b);
#endif
#if defined(__AVX__)
  if constexpr (sizeof(V) == 32) return _mm256_min_ps(a, b);
#endif
  return Select(a < b, a, b);
}

template <typename V>
inline V Max(V a, V b) {
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64) return _mm512_max_ps(a, b);
#endif
#if defined(__AVX__)
  if constexpr (sizeof(V) == 32) return _mm256_max_ps(a, b);
#endif
  return Select(a > b, a, b);
}

// exp(x), Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, a degree-6
// polynomial for e^r, and 2^n built in the exponent bits. Inputs are clamped
// to [-87.3, 88], where 2^n stays a normal float (NaN stays NaN). n is
// rounded to nearest by adding and subtracting 1.5 * 2^23, which also leaves
// n in the low bits of the sum: (bits + 127) << 23 is 2^n.
template <typename V>
inline V Exp(V x) {
  x = Min(Splat<V>(88.0f), x);
  x = Max(Splat<V>(-87.3f), x);
  const V k = x * 1.44269504088896341f + 12582912.0f;
  const V n = k - 12582912.0f;
  const V r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  typename Lanes<kLanesOf<V>>::u bits;  // unsigned: the shift wraps
  std::memcpy(&bits, &k, sizeof bits);
  bits = (bits + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

template <typename V>
inline V Sigmoid(V x) { return 1.0f / (1.0f + Exp(-x)); }

// tanh(x): Cephes' odd polynomial for |x| < 0.625, where 1 - 2 / (e^2x + 1)
// would cancel; that formula elsewhere. Within a few ulp of tanhf.
template <typename V>
inline V Tanh(V x) {
  const V z = x * x;
  V p = -5.70498872745e-3f * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const V small = p * z * x + x;
  const V large = 1.0f - 2.0f / (Exp(2.0f * x) + 1.0f);
  const V ax = Select(x < 0.0f, -x, x);
  return Select(ax < 0.625f, small, large);
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_VEC_H_
