// Fused layer norm and RMS norm for XLA:CPU, called through the XLA FFI.
//
// x is a stack of rows of n = gain.size() features, float32. Layer norm, per
// row:
//   shift  = a value near the row mean (below)
//   d      = x - shift                       (exact when x is near shift)
//   mean_d = mean(d), var = mean(d^2) - mean_d^2,  rstd = 1 / sqrt(var + eps)
//   x_hat  = ((x - shift) - mean_d) * rstd,  y = x_hat * gain + bias
// x - mean is never formed with a rounded mean, so rows far from zero
// (1e4 + N(0, 0.1)) keep float32 accuracy. The shift starts as the row's
// first element, so the statistics take one pass over the row. The
// subtraction mean(d^2) - mean_d^2 cancels as much as mean_d^2 / var; when
// that exceeds kMaxShiftRatio (an outlier first element: ~5% of normal
// rows), the pass is repeated with shift + mean_d, a value within rounding
// of the mean (three passes at most; the last one's statistics are taken
// with its own shift).
//
// RMS norm, per row: rrms = 1 / sqrt(mean(x^2) + eps), x_hat = x * rrms,
// y = x_hat * gain + bias. A sum of squares does not cancel: one pass, no
// shift.
//
// The backward passes take the statistics that the forward saved (the
// _saving / _saved pair: a training step's), or make them again from x (the
// same code, so the same numbers), and, with g = dy * gain, a = mean(g),
// b = mean(g * x_hat), r = rstd or rrms:
//   dx    = r * (g - a - x_hat * b)        (layer norm)
//   dx    = r * (g - x_hat * b)            (RMS norm: x_hat is not centred)
//   dgain = sum over rows of dy * x_hat,  dbias = sum over rows of dy.
// Both norms run the same row loops (Forward, Backward), templated on how a
// row's x_hat comes from x (LayerNormRow, RmsNormRow).
//
// Loops run over blocks of up to kBlockRows short rows (one row where rows
// are long), 8 floats per step (vec.h): each pass takes every row of the
// block before the next pass, so the rows' statistics overlap. A block is
// read from memory once; the other passes over it hit the cache. Row sums
// run in float lanes that move into double lanes every kLaneTerms terms, so
// their accuracy does not depend on the row length; the order is fixed: the
// build has no -ffast-math, which would be free to turn (x - shift) - mean_d
// into x - (shift + mean_d).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Rows are split into chunks of about kChunkElements elements, which the
// intra-op thread pool runs. The split depends on the shape alone, and the
// backward pass adds its per-chunk column sums in chunk order, so results do
// not depend on the number of threads or on their timing. A chunk must
// outweigh handing it to a pool thread: 512 KiB of floats keeps 128x1000 (the
// paper's MLP) on the calling thread, where splitting it three ways was 1.4x
// slower forward+backward (BENCHMARKS.md, "layer_norm primitive").
constexpr int64_t kChunkElements = 1 << 17;
constexpr int64_t kMaxChunks = 64;

int64_t NumChunks(int64_t rows, int64_t n) {
  const int64_t c = rows * n / kChunkElements;
  return std::max<int64_t>(1, std::min({c, rows, kMaxChunks}));
}

// Runs fn(chunk) for every chunk in [0, chunks). The caller takes chunks too,
// so it never waits on a task the pool has not started; tasks that start late
// find no chunk left and touch only the shared counters. The caller and at
// most pool.num_threads() - 1 helpers run, one a core: a helper more than the
// cores only waits for one (2048x256 fwd+bwd 1.10-1.16x slower with two
// helpers on 2 cores than with one: BENCHMARKS_LOG.md, sixth sitting).
template <typename F>
void ForEachChunk(ffi::ThreadPool& pool, int64_t chunks, const F& fn) {
  if (chunks == 1 || pool.num_threads() <= 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  struct Counters {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto counters = std::make_shared<Counters>();
  const F* f = &fn;
  auto run = [counters, chunks, f]() {
    for (int64_t c; (c = counters->next.fetch_add(1)) < chunks;) {
      (*f)(c);
      counters->done.fetch_add(1, std::memory_order_release);
    }
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads() - 1, chunks - 1);
  for (int64_t t = 0; t < helpers; ++t) pool.Schedule(decltype(run)(run));
  run();
  while (counters->done.load(std::memory_order_acquire) < chunks) {
    std::this_thread::yield();
  }
}

using lnorm::f8;
using lnorm::Load;
using lnorm::Store;
using lnorm::Sum;

constexpr double kMaxShiftRatio = 4;

// Row sums: each float lane takes at most kLaneTerms terms, then moves into
// double lanes, so a sum's error is that of a 16-term float sum (relative to
// its terms) plus double rounding, whatever the row length. (Float lanes
// alone lose accuracy in proportion to n / lanes: 7.6e-4 at 9.4M elements.)
constexpr int64_t kLaneTerms = 16;

typedef double d4 __attribute__((vector_size(32)));

// Adds the 8 lanes of v to lo (lanes 0-3) and hi (4-7), in double.
inline void AddWide(f8 v, d4& lo, d4& hi) {
  lo += __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), d4);
  hi += __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), d4);
}

inline double SumWide(d4 lo, d4 hi) {
  const d4 v = lo + hi;
  return (v[0] + v[2]) + (v[1] + v[3]);
}

// A row's statistics end in a chain of dependent steps (the lanes' sums, a
// division, a square root) that one row alone leaves the core waiting on:
// rows go in blocks, each step taken for every row of the block before the
// next step, so the chains of different rows overlap. Every row's floats are
// those of one row at a time.
// Blocks stay small enough for the backward's copy of g (block x n floats)
// to sit in the L1 cache; rows of more than 512 elements go one at a time.
constexpr int64_t kBlockRows = 8;
constexpr int64_t kBlockElements = 1024;

int64_t BlockRows(int64_t n) {
  return std::max<int64_t>(1, std::min(kBlockRows, kBlockElements / n));
}

struct RowStats {
  float shift, mean_d, rstd;
};

// Row sums of d = x - shift and d^2 in double: 32 float lanes (four
// independent chains) per sum, 32 elements a step. Inlined, so that a
// block's rows overlap.
__attribute__((always_inline)) inline void ShiftedSums(const float* x, int64_t n, float shift,
                                                       double& sd, double& sd2) {
  constexpr int64_t kBlock = 32 * kLaneTerms;
  d4 s_lo{}, s_hi{}, q_lo{}, q_hi{};
  int64_t i = 0;
  while (i + 8 <= n) {
    const int64_t stop = std::min(n, i + kBlock);
    f8 s0{}, s1{}, s2{}, s3{}, q0{}, q1{}, q2{}, q3{};
    for (; i + 32 <= stop; i += 32) {
      const f8 d0 = Load(x + i) - shift, d1 = Load(x + i + 8) - shift;
      const f8 d2 = Load(x + i + 16) - shift, d3 = Load(x + i + 24) - shift;
      s0 += d0;
      s1 += d1;
      s2 += d2;
      s3 += d3;
      q0 += d0 * d0;
      q1 += d1 * d1;
      q2 += d2 * d2;
      q3 += d3 * d3;
    }
    for (; i + 8 <= stop; i += 8) {
      const f8 d0 = Load(x + i) - shift;
      s0 += d0;
      q0 += d0 * d0;
    }
    AddWide((s0 + s1) + (s2 + s3), s_lo, s_hi);
    AddWide((q0 + q1) + (q2 + q3), q_lo, q_hi);
  }
  sd = SumWide(s_lo, s_hi);
  sd2 = SumWide(q_lo, q_hi);
  for (; i < n; ++i) {
    const float d = x[i] - shift;
    sd += d;
    sd2 += static_cast<double>(d) * d;
  }
}

// A row's statistics from its shifted sums. Returns false where the shift
// was too far from the mean (mean_d^2 > kMaxShiftRatio var) and a value
// closer to it exists, which is then st.shift; a last pass is taken as it is.
inline bool FinishStats(double sd, double sd2, int64_t n, float eps, bool last,
                        RowStats& st) {
  const double md = sd / n;
  // Not std::fmax: without -ffast-math it is a call into libm.
  double var = sd2 / n - md * md;
  if (!(var > 0)) var = 0;
  if (!last && md * md > kMaxShiftRatio * var) {
    const float next = static_cast<float>(st.shift + md);
    if (next != st.shift) {
      st.shift = next;
      return false;
    }
  }
  st.mean_d = static_cast<float>(md);
  st.rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
  return true;
}

// The statistics of m rows (at most kBlockRows) at stride n: every row's
// sums first, then their ends, so the rows' chains of dependent steps (the
// lanes' sums, a division, a square root) overlap; the few rows whose first
// element was too far from their mean take the sums again, with the shift
// closer (at most three passes in all).
__attribute__((always_inline)) inline void BlockStats(const float* x, int64_t m, int64_t n,
                                                      float eps, RowStats* st) {
  double sd[kBlockRows], sd2[kBlockRows];
  for (int64_t j = 0; j < m; ++j) {
    st[j].shift = x[j * n];
    ShiftedSums(x + j * n, n, st[j].shift, sd[j], sd2[j]);
  }
  for (int64_t j = 0; j < m; ++j) {
    for (int pass = 1; !FinishStats(sd[j], sd2[j], n, eps, pass == 3, st[j]); ++pass) {
      ShiftedSums(x + j * n, n, st[j].shift, sd[j], sd2[j]);
    }
  }
}

// 1 / sqrt(mean(x^2) + eps), with the sums of Stats.
__attribute__((always_inline)) inline float RmsScale(const float* x, int64_t n, float eps) {
  constexpr int64_t kBlock = 32 * kLaneTerms;
  d4 q_lo{}, q_hi{};
  int64_t i = 0;
  while (i + 8 <= n) {
    const int64_t stop = std::min(n, i + kBlock);
    f8 q0{}, q1{}, q2{}, q3{};
    for (; i + 32 <= stop; i += 32) {
      const f8 x0 = Load(x + i), x1 = Load(x + i + 8);
      const f8 x2 = Load(x + i + 16), x3 = Load(x + i + 24);
      q0 += x0 * x0;
      q1 += x1 * x1;
      q2 += x2 * x2;
      q3 += x3 * x3;
    }
    for (; i + 8 <= stop; i += 8) {
      const f8 x0 = Load(x + i);
      q0 += x0 * x0;
    }
    AddWide((q0 + q1) + (q2 + q3), q_lo, q_hi);
  }
  double s = SumWide(q_lo, q_hi);
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(s / n + eps));
}

// A row's x_hat: its statistics made a block of rows at a time (Block),
// then applied to each element; scale is d x_hat / d x at fixed statistics.
// The loops copy a row out of the block, so that its statistics can stay in
// registers across their stores through float pointers. kCentred: x_hat
// subtracts the mean, so the backward subtracts mean(g).
struct LayerNormRow {
  static constexpr bool kCentred = true;
  RowStats st;
  // The rows of a block (m rows at stride n, m <= kBlockRows).
  static void Block(const float* x, int64_t m, int64_t n, float eps, LayerNormRow* rows) {
    RowStats st[kBlockRows];
    BlockStats(x, m, n, eps, st);
    for (int64_t j = 0; j < m; ++j) rows[j].st = st[j];
  }
  // The statistics as the forward saves them for the backward.
  static constexpr int64_t kSaved = 3;
  void Save(float* out) const { out[0] = st.shift, out[1] = st.mean_d, out[2] = st.rstd; }
  void Restore(const float* in) { st = {in[0], in[1], in[2]}; }
  float scale() const { return st.rstd; }
  f8 XHat(f8 x) const { return ((x - st.shift) - st.mean_d) * st.rstd; }
  float XHat(float x) const { return ((x - st.shift) - st.mean_d) * st.rstd; }
};

struct RmsNormRow {
  static constexpr bool kCentred = false;
  float rrms;
  static void Block(const float* x, int64_t m, int64_t n, float eps, RmsNormRow* rows) {
    for (int64_t j = 0; j < m; ++j) rows[j].rrms = RmsScale(x + j * n, n, eps);
  }
  static constexpr int64_t kSaved = 1;
  void Save(float* out) const { out[0] = rrms; }
  void Restore(const float* in) { rrms = in[0]; }
  float scale() const { return rrms; }
  f8 XHat(f8 x) const { return x * rrms; }
  float XHat(float x) const { return x * rrms; }
};

ffi::Error CheckShapes(const ffi::Buffer<ffi::F32>& x, int64_t n) {
  if (n <= 0 || x.element_count() % n != 0) {
    return ffi::Error::InvalidArgument(
        "lnorm norm kernel: x is not a stack of rows of gain.size()");
  }
  return ffi::Error::Success();
}

// saved: null, or Row::kSaved floats a row, the statistics the backward reads.
template <typename Row>
ffi::Error RunForward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                      ffi::Buffer<ffi::F32> gain, ffi::Buffer<ffi::F32> bias,
                      float eps, ffi::ResultBuffer<ffi::F32> y, float* saved) {
  const int64_t n = gain.element_count();
  if (auto e = CheckShapes(x, n); e.failure()) return e;
  const int64_t rows = x.element_count() / n;
  const float* xp = x.typed_data();
  const float* g = gain.typed_data();
  const float* b = bias.typed_data();
  float* yp = y->typed_data();
  const int64_t chunks = NumChunks(rows, n);
  const int64_t per = (rows + chunks - 1) / chunks;
  ForEachChunk(pool, chunks, [&](int64_t c) {
    const int64_t r0 = c * per, r1 = std::min(rows, (c + 1) * per);
    const int64_t block_rows = BlockRows(n);
    Row block[kBlockRows];
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
      const int64_t m = std::min(block_rows, r1 - rb);
      Row::Block(xp + rb * n, m, n, eps, block);
      if (saved != nullptr) {
        for (int64_t j = 0; j < m; ++j) block[j].Save(saved + (rb + j) * Row::kSaved);
      }
      for (int64_t j = 0; j < m; ++j) {
        const Row row = block[j];
        const float* xr = xp + (rb + j) * n;
        float* yr = yp + (rb + j) * n;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
          Store(yr + i, row.XHat(Load(xr + i)) * Load(g + i) + Load(b + i));
        }
        for (; i < n; ++i) yr[i] = row.XHat(xr[i]) * g[i] + b[i];
      }
    }
  });
  return ffi::Error::Success();
}

// Column sums gather in float for up to kFlushRows rows, then move into
// double accumulators, so their error does not grow with the batch.
constexpr int64_t kFlushRows = 64;

// saved: null (the statistics are made again from x), or the forward's.
template <typename Row>
ffi::Error RunBackward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                       ffi::Buffer<ffi::F32> gain, ffi::Buffer<ffi::F32> dy,
                       float eps, ffi::ResultBuffer<ffi::F32> dx,
                       ffi::ResultBuffer<ffi::F32> dgain,
                       ffi::ResultBuffer<ffi::F32> dbias, const float* saved) {
  const int64_t n = gain.element_count();
  if (auto e = CheckShapes(x, n); e.failure()) return e;
  const int64_t rows = x.element_count() / n;
  const float* xp = x.typed_data();
  const float* g = gain.typed_data();
  const float* dyp = dy.typed_data();
  float* dxp = dx->typed_data();
  const int64_t chunks = NumChunks(rows, n);
  const int64_t per = (rows + chunks - 1) / chunks;
  // Each chunk's column sums, in double: [chunk][dgain | dbias][n].
  std::vector<double> acc(chunks * 2 * n, 0.0);
  ForEachChunk(pool, chunks, [&](int64_t c) {
    double* acc_g = acc.data() + c * 2 * n;
    double* acc_b = acc_g + n;
    // Float column sums of recent rows; g = dy * gain of the block's rows,
    // kept so that dx uses the very floats a was formed from (formed again,
    // the compiler could fuse dy * gain - a into one rounding).
    const int64_t block_rows = BlockRows(n);
    std::vector<float> buf((2 + block_rows) * n, 0.0f);
    float* col_g = buf.data();
    float* col_b = col_g + n;
    float* gd = col_b + n;
    const int64_t r0 = c * per, r1 = std::min(rows, (c + 1) * per);
    Row block[kBlockRows];
    float a[kBlockRows], bb[kBlockRows];
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
      const int64_t m = std::min(block_rows, r1 - rb);
      if (saved == nullptr) {
        Row::Block(xp + rb * n, m, n, eps, block);
      } else {
        for (int64_t j = 0; j < m; ++j) block[j].Restore(saved + (rb + j) * Row::kSaved);
      }
      // a = mean(g) (layer norm only) and b = mean(g * x_hat): 8 float lanes
      // each, moved into double every kLaneTerms steps.
      for (int64_t j = 0; j < m; ++j) {
        const Row row = block[j];
        const int64_t r = rb + j;
        const float* xr = xp + r * n;
        const float* dyr = dyp + r * n;
        float* gdr = gd + j * n;
        d4 sa_lo{}, sa_hi{}, sb_lo{}, sb_hi{};
        int64_t i = 0;
        while (i + 8 <= n) {
          const int64_t stop = std::min(n, i + 8 * kLaneTerms);
          f8 sa{}, sb{};
          for (; i + 8 <= stop; i += 8) {
            const f8 dyv = Load(dyr + i);
            const f8 h = row.XHat(Load(xr + i));
            const f8 gv = dyv * Load(g + i);
            Store(gdr + i, gv);
            if constexpr (Row::kCentred) sa += gv;
            sb += gv * h;
            Store(col_g + i, Load(col_g + i) + dyv * h);
            Store(col_b + i, Load(col_b + i) + dyv);
          }
          if constexpr (Row::kCentred) AddWide(sa, sa_lo, sa_hi);
          AddWide(sb, sb_lo, sb_hi);
        }
        double sa_d = SumWide(sa_lo, sa_hi), sb_d = SumWide(sb_lo, sb_hi);
        for (; i < n; ++i) {
          const float h = row.XHat(xr[i]);
          const float gv = dyr[i] * g[i];
          gdr[i] = gv;
          if constexpr (Row::kCentred) sa_d += gv;
          sb_d += static_cast<double>(gv) * h;
          col_g[i] += dyr[i] * h;
          col_b[i] += dyr[i];
        }
        // Without centring a = 0, and (g - 0) - x_hat * b is g - x_hat * b.
        a[j] = Row::kCentred ? static_cast<float>(sa_d / n) : 0.0f;
        bb[j] = static_cast<float>(sb_d / n);
        if ((r - r0) % kFlushRows == kFlushRows - 1 || r == r1 - 1) {
          for (int64_t k = 0; k < n; ++k) {
            acc_g[k] += col_g[k];
            acc_b[k] += col_b[k];
            col_g[k] = col_b[k] = 0;
          }
        }
      }
      // dx = r * (g - a - x_hat * b), x_hat formed again as above.
      for (int64_t j = 0; j < m; ++j) {
        const Row row = block[j];
        const float* xr = xp + (rb + j) * n;
        const float* gdr = gd + j * n;
        float* dxr = dxp + (rb + j) * n;
        const float aj = a[j], bj = bb[j], rs = row.scale();
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
          Store(dxr + i,
                rs * ((Load(gdr + i) - aj) - row.XHat(Load(xr + i)) * bj));
        }
        for (; i < n; ++i) dxr[i] = rs * ((gdr[i] - aj) - row.XHat(xr[i]) * bj);
      }
    }
  });
  float* dg = dgain->typed_data();
  float* db = dbias->typed_data();
  for (int64_t i = 0; i < n; ++i) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += acc[c * 2 * n + i];
      sb += acc[c * 2 * n + n + i];
    }
    dg[i] = static_cast<float>(sg);
    db[i] = static_cast<float>(sb);
  }
  return ffi::Error::Success();
}

// Both norms' kernels take the same arguments: forward (x, gain, bias; eps)
// -> y, backward (x, gain, dy; eps) -> (dx, dgain, dbias).
auto Arguments() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::F32>>()  // x
      .Arg<ffi::Buffer<ffi::F32>>()  // gain
      .Arg<ffi::Buffer<ffi::F32>>()  // bias (forward), dy (backward)
      .Attr<float>("eps");
}

auto ForwardBinding() { return Arguments().Ret<ffi::Buffer<ffi::F32>>(); }

auto BackwardBinding() {
  return Arguments()
      .Ret<ffi::Buffer<ffi::F32>>()   // dx
      .Ret<ffi::Buffer<ffi::F32>>()   // dgain
      .Ret<ffi::Buffer<ffi::F32>>();  // dbias
}

}  // namespace

// The pair that makes the statistics each: forward (x, gain, bias; eps) -> y,
// backward (x, gain, dy; eps) -> (dx, dgain, dbias).
template <typename Row>
ffi::Error Forward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                   ffi::Buffer<ffi::F32> gain, ffi::Buffer<ffi::F32> bias,
                   float eps, ffi::ResultBuffer<ffi::F32> y) {
  return RunForward<Row>(pool, x, gain, bias, eps, y, nullptr);
}

template <typename Row>
ffi::Error Backward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                    ffi::Buffer<ffi::F32> gain, ffi::Buffer<ffi::F32> dy,
                    float eps, ffi::ResultBuffer<ffi::F32> dx,
                    ffi::ResultBuffer<ffi::F32> dgain,
                    ffi::ResultBuffer<ffi::F32> dbias) {
  return RunBackward<Row>(pool, x, gain, dy, eps, dx, dgain, dbias, nullptr);
}

// The pair that passes the statistics: forward (x, gain, bias; eps) -> (y,
// saved), backward (x, saved, gain, dy; eps) -> (dx, dgain, dbias); saved is
// [rows, Row::kSaved].
template <typename Row>
ffi::Error ForwardSaving(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                         ffi::Buffer<ffi::F32> gain, ffi::Buffer<ffi::F32> bias,
                         float eps, ffi::ResultBuffer<ffi::F32> y,
                         ffi::ResultBuffer<ffi::F32> saved) {
  const int64_t n = gain.element_count();
  if (n > 0 && saved->element_count() != x.element_count() / n * Row::kSaved) {
    return ffi::Error::InvalidArgument("lnorm norm kernel: saved is not rows x kSaved");
  }
  return RunForward<Row>(pool, x, gain, bias, eps, y, saved->typed_data());
}

template <typename Row>
ffi::Error BackwardSaved(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                         ffi::Buffer<ffi::F32> saved, ffi::Buffer<ffi::F32> gain,
                         ffi::Buffer<ffi::F32> dy, float eps,
                         ffi::ResultBuffer<ffi::F32> dx,
                         ffi::ResultBuffer<ffi::F32> dgain,
                         ffi::ResultBuffer<ffi::F32> dbias) {
  const int64_t n = gain.element_count();
  if (n > 0 && saved.element_count() != x.element_count() / n * Row::kSaved) {
    return ffi::Error::InvalidArgument("lnorm norm kernel: saved is not rows x kSaved");
  }
  return RunBackward<Row>(pool, x, gain, dy, eps, dx, dgain, dbias, saved.typed_data());
}

auto ForwardSavingBinding() {
  return Arguments().Ret<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>();
}

auto BackwardSavedBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::F32>>()  // x
      .Arg<ffi::Buffer<ffi::F32>>()  // saved
      .Arg<ffi::Buffer<ffi::F32>>()  // gain
      .Arg<ffi::Buffer<ffi::F32>>()  // dy
      .Attr<float>("eps")
      .Ret<ffi::Buffer<ffi::F32>>()   // dx
      .Ret<ffi::Buffer<ffi::F32>>()   // dgain
      .Ret<ffi::Buffer<ffi::F32>>();  // dbias
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLayerNormFwd, Forward<LayerNormRow>,
                              ForwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLayerNormBwd, Backward<LayerNormRow>,
                              BackwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormRmsNormFwd, Forward<RmsNormRow>,
                              ForwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormRmsNormBwd, Backward<RmsNormRow>,
                              BackwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLayerNormFwdSaving, ForwardSaving<LayerNormRow>,
                              ForwardSavingBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLayerNormBwdSaved, BackwardSaved<LayerNormRow>,
                              BackwardSavedBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormRmsNormFwdSaving, ForwardSaving<RmsNormRow>,
                              ForwardSavingBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormRmsNormBwdSaved, BackwardSaved<RmsNormRow>,
                              BackwardSavedBinding());
