// C = A @ W for the recurrent kernels' per-step products, where A has few
// rows (the batch, 1 to a few hundred) and W (H x 4H, or 4H x H) is the same
// at every step: W is packed once per sequence into panels of kLanes columns,
// each K x kLanes contiguous, and each step's product takes a range of
// panels (and, to even out a split, a range of rows), so that a team of
// threads (team.h) splits the columns.
//
// Every C[r, n] is summed in the same order (Tile) whatever the blocking,
// the split or the thread count: the result does not depend on them.

#ifndef LNORM_NATIVE_GEMM_H_
#define LNORM_NATIVE_GEMM_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lnorm {

#if defined(__AVX512F__)
// 32 registers of 16 floats: 8 rows x 2 panels of accumulators.
typedef float fw __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16, kRows = 8;
#elif defined(__AVX__)
// 16 registers of 8 floats: 6 rows x 2 panels.
typedef float fw __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8, kRows = 6;
#else
typedef float fw __attribute__((vector_size(16)));
constexpr int64_t kLanes = 4, kRows = 6;
#endif

inline fw LoadW(const float* p) {
  fw v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Panels covering N columns.
inline int64_t Panels(int64_t N) { return (N + kLanes - 1) / kLanes; }

// Floats of a packed K x N matrix.
inline int64_t PackedSize(int64_t K, int64_t N) {
  return Panels(N) * kLanes * K;
}

// Packs one row of W (N floats) as row k of a packed K x N matrix:
// out[(p K + k) kLanes + c] = row[p kLanes + c] - off, zero past column N.
inline void PackRow(const float* row, int64_t N, float* out, int64_t K,
                    int64_t k, float off = 0.0f) {
  const int64_t P = Panels(N), full = N / kLanes;
  for (int64_t p = 0; p < full; ++p) {
    fw v = LoadW(row + p * kLanes);
    if (off != 0.0f) v -= off;
    std::memcpy(out + (p * K + k) * kLanes, &v, sizeof v);
  }
  if (full < P) {
    float* o = out + (full * K + k) * kLanes;
    const int64_t nc = N - full * kLanes;
    for (int64_t c = 0; c < nc; ++c) o[c] = row[full * kLanes + c] - off;
    for (int64_t c = nc; c < kLanes; ++c) o[c] = 0.0f;
  }
}

// Packs rows [k0, k1) of W (K x N, row-major, rows ldw apart) into every
// panel (PackRow). With off (K floats), W's row k less off[k]: center(W)
// from its row means at no extra pass. A team splits the rows: each member
// reads its rows of W in order (a split by panels would read down columns,
// a page apart at a time).
inline void Pack(const float* w, int64_t K, int64_t N, int64_t ldw,
                 float* out, int64_t k0, int64_t k1,
                 const float* off = nullptr) {
  for (int64_t k = k0; k < k1; ++k) {
    PackRow(w + k * ldw, N, out, K, k, off ? off[k] : 0.0f);
  }
}

// Packs panels [p0, p1) of W^T, K x N, from W (N x K, row-major, rows ldw
// apart): a panel is kLanes rows of W, which stay in cache while read across.
// With off (N floats), W's row n less off[n], as Pack's.
inline void PackTransposed(const float* w, int64_t K, int64_t N, int64_t ldw,
                           float* out, int64_t p0, int64_t p1,
                           const float* off = nullptr) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * kLanes, nc = std::min(kLanes, N - n0);
    float oc[kLanes] = {};
    for (int64_t c = 0; off && c < nc; ++c) oc[c] = off[n0 + c];
    float* o = out + p * K * kLanes;
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t c = 0; c < nc; ++c) {
        o[k * kLanes + c] = w[(n0 + c) * ldw + k] - oc[c];
      }
      for (int64_t c = nc; c < kLanes; ++c) o[k * kLanes + c] = 0.0f;
    }
  }
}

// Products are summed over k in chunks of kChunk, each in its own
// accumulator, and the chunks' sums added in turn: the rounding error grows
// with kChunk + K / kChunk rather than with K (K = 4H = 1600 in the LSTM's
// backward).
constexpr int64_t kChunk = 64;

// R rows of C (ldc apart) x V panels from A's rows (lda apart); ncols: the
// columns of C these panels hold (fewer than V kLanes at the right edge).
// kAdd: C += the product (its sum over k added to C's value last).
// kAT: A is given as A^T (K x M, rows lda apart), A[r, k] = a[k lda + r]
// (the W_h gradient's h_{t-1}, read as it lies); the same sums.
template <int64_t R, int64_t V, bool kAdd = false, bool kAT = false>
inline void Tile(const float* a, int64_t lda, const float* panel, int64_t K,
                 float* c, int64_t ldc, int64_t ncols) {
  // The chunks' sums live in memory (L1), not in registers, which the
  // accumulators fill: the barrier hides the pointer from the optimizer.
  alignas(64) float sum_buf[R * V * kLanes];
  float* sum = sum_buf;
  asm("" : "+r"(sum));
  for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
    const int64_t k1 = std::min(K, k0 + kChunk);
    fw acc[R][V] = {};
    for (int64_t k = k0; k < k1; ++k) {
      fw w[V];
      for (int64_t v = 0; v < V; ++v) w[v] = LoadW(panel + (v * K + k) * kLanes);
      for (int64_t r = 0; r < R; ++r) {
        const float ar = kAT ? a[k * lda + r] : a[r * lda + k];
        for (int64_t v = 0; v < V; ++v) acc[r][v] += ar * w[v];
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t v = 0; v < V; ++v) {
        float* t = sum + (r * V + v) * kLanes;
        if (k0 > 0) acc[r][v] += LoadW(t);
        std::memcpy(t, &acc[r][v], sizeof(fw));
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t v = 0; v < V; ++v) {
      const int64_t n = std::min(kLanes, ncols - v * kLanes);
      float* cr = c + r * ldc + v * kLanes;
      const float* sr = sum + (r * V + v) * kLanes;
      if constexpr (kAdd) {
        for (int64_t j = 0; j < n; ++j) cr[j] += sr[j];
      } else {
        std::memcpy(cr, sr, n * sizeof(float));
      }
    }
  }
}

// A's row r (A^T's column, with kAT).
template <bool kAT>
inline const float* RowOf(const float* a, int64_t lda, int64_t r) {
  return kAT ? a + r : a + r * lda;
}

// Rows [0, M) of C x V panels from p: a block of rows at a time, so that
// the panels (V K kLanes floats) stay in cache for all of them.
template <int64_t V, bool kAdd = false, bool kAT = false>
inline void TileColumn(const float* a, int64_t M, int64_t K, int64_t lda,
                       const float* panel, float* c, int64_t ldc,
                       int64_t ncols) {
  int64_t m = 0;
  for (; m + kRows <= M; m += kRows) {
    Tile<kRows, V, kAdd, kAT>(RowOf<kAT>(a, lda, m), lda, panel, K,
                              c + m * ldc, ldc, ncols);
  }
  const float* am = RowOf<kAT>(a, lda, m);
  float* cm = c + m * ldc;
  switch (M - m) {
    case 0: break;
    case 1: Tile<1, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
    case 2: Tile<2, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
    case 3: Tile<3, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
    case 4: Tile<4, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
    case 5: Tile<5, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
    case 6: Tile<6, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
    default: Tile<7, V, kAdd, kAT>(am, lda, panel, K, cm, ldc, ncols); break;
  }
}

// C[:, panels p0..p1) = A (M x K, rows lda apart; with kAT given as A^T)
// @ packed W (K x N), or with kAdd C += it; C's rows ldc apart. Two panels
// at a time: 2 kRows accumulators.
template <bool kAdd = false, bool kAT = false>
inline void GemmPanels(const float* a, int64_t M, int64_t K, int64_t lda,
                       const float* packed, int64_t N, float* c, int64_t ldc,
                       int64_t p0, int64_t p1) {
  int64_t p = p0;
  for (; p + 2 <= p1; p += 2) {
    TileColumn<2, kAdd, kAT>(a, M, K, lda, packed + p * K * kLanes, c + p * kLanes, ldc,
                  std::min(2 * kLanes, N - p * kLanes));
  }
  if (p < p1) {
    TileColumn<1, kAdd, kAT>(a, M, K, lda, packed + p * K * kLanes, c + p * kLanes, ldc,
                  std::min(kLanes, N - p * kLanes));
  }
}

// Share u of n of the product's work, counted in (panel, row) pairs, panel
// by panel: with fewer panels than a multiple of n, a panel split between
// two shares gives each some of its rows (the backward's H = 400 has 25
// panels of 16). fn(p0, p1, r0, r1) for each block of panels [p0, p1) and
// rows [r0, r1) of the share, at most three.
template <typename Fn>
inline void ForShare(int64_t P, int64_t M, int64_t u, int64_t n, const Fn& fn) {
  const int64_t w0 = u * P * M / n, w1 = (u + 1) * P * M / n;
  if (w0 >= w1) return;
  const int64_t pa = w0 / M, ra = w0 % M, pb = w1 / M, rb = w1 % M;
  if (pa == pb) {
    fn(pa, pa + 1, ra, rb);
    return;
  }
  int64_t p = pa;
  if (ra > 0) fn(p, p + 1, ra, M), ++p;
  if (p < pb) fn(p, pb, int64_t{0}, M);
  if (rb > 0) fn(pb, pb + 1, int64_t{0}, rb);
}

// Share u of n of C = A @ W (C += it with kAdd; A given as A^T with kAT),
// W packed: ForShare's blocks, each the product of its rows of A and its
// panels.
template <bool kAdd = false, bool kAT = false>
inline void GemmShare(const float* a, int64_t M, int64_t K, int64_t lda,
                      const float* packed, int64_t N, float* c, int64_t ldc,
                      int64_t u, int64_t n) {
  ForShare(Panels(N), M, u, n,
           [&](int64_t q0, int64_t q1, int64_t r0, int64_t r1) {
    GemmPanels<kAdd, kAT>(RowOf<kAT>(a, lda, r0), r1 - r0, K, lda, packed, N,
                          c + r0 * ldc, ldc, q0, q1);
  });
}

}  // namespace lnorm

#endif  // LNORM_NATIVE_GEMM_H_
