// The LSTM's scans for XLA:CPU, forward and backward, each one call for the
// whole sequence, called through the XLA FFI from lnorm/recurrent/lstm_scan.py.
// Each owns its time loop: the step's product with W_h (gemm.h, W_h packed
// once a call) and the elementwise work around it, on a team of threads
// (team.h) that splits the product's columns and the batch's rows, with a
// barrier between the phases. In XLA, the loop costs a dozen or more small
// kernels a step and a hand-off to the intra-op pool for each matmul, whose
// fixed costs dominate at the batch sizes of the paper's recurrent models.
//
// The equations and the layout of the row saved per step are those of
// _lstm_fwd and _lstm_scan_bwd in lstm_scan.py (their XLA versions), with
// norm 0 = 'none', 1 = 'layer', 2 = 'layer_c'. Parameters a norm does not
// use arrive as ones (gains) and zeros (biases); inputs it does not read
// (the mask with masked = 0; rx but for 'layer') arrive as any buffer. For
// 'layer' the forward computes rx, 1/sigma of each row of the input
// projection xw, and both multiply by center(W_h): W_h less its row means
// wm, which they subtract as they pack W_h (any buffer but for 'layer').
//
// The input projection xw = x @ k_x (T, B, 4H) comes one of two ways. With
// proj = 0 XLA forms it and the kernels read it: for 'layer' the forward
// writes a copy of xw as it reads it, which the backward turns into d xw in
// place (XLA would otherwise copy xw for the backward and reduce it for rx,
// two more passes over the largest array). With proj = 1 (x of few
// features, I <= kMaxProjI) the forward forms each row of xw from x and k_x
// as it needs it; for 'layer' the backward forms it again, and returns dx
// and the rows of dk_x's sums instead of d xw. ('none' and 'layer_c' read no
// xw in the backward, and their d xw is d(h @ w), which it writes anyway.)
// No (T, B, 4H) array of the input side then exists: the rows read and
// write none, and XLA neither forms xw nor reads d xw.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gemm.h"
#include "pages.h"
#include "phase_times.h"
#include "rows.h"
#include "team.h"
#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using lnorm::fr;
using lnorm::StoreN;
using lnorm::ForRow;
using lnorm::Map;
using lnorm::LoadN;
using lnorm::Ld;
using lnorm::St;
using lnorm::SumOf;

struct Params {
  const float *gx, *b4, *g4, *gH, *bH;
};

// The most features of x for which the kernels form xw themselves (proj = 1):
// I products a float of xw, against a float read from memory.
constexpr int64_t kMaxProjI = 8;

// 'layer''s pre-activation at off + j of a row (eq. 20), from ah = LN(W_h h)
// before its gain and the input projection's row xr with its 1/sigma rxb.
// The forward and the backward's recompute both use it: the same gates.
inline fr LayerZ(fr ah, const float* xr, float rxb, const Params& p,
                 int64_t off, int64_t j, int64_t H) {
  return ah * LoadN(p.g4 + off, j, H) +
         LoadN(xr + off, j, H) * rxb * LoadN(p.gx + off, j, H) +
         LoadN(p.b4 + off, j, H);
}

// The gates from their pre-activations, one pass per gate: act[k H + j] is
// sigmoid (f, i, o) or tanh (g) of z(k, j), gate k's pre-activation at j < H.
template <typename Z>
inline void Gates(float* act, int64_t H, const Z& z) {
  for (int64_t k = 0; k < 3; ++k) {
    Map(act + k * H, H, [&](int64_t j) { return lnorm::Sigmoid(z(k, j)); });
  }
  Map(act + 3 * H, H, [&](int64_t j) { return lnorm::Tanh(z(3, j)); });
}

// What a call's rows share: the shapes, the norm and the inputs read by row.
// I > 0: the kernels form xw from x (T, B, I) and kx (I, 4H) (proj = 1).
struct Seq {
  int64_t T, B, H, S;
  int32_t norm;
  bool masked;
  float eps;
  const float *m, *rx;
  Params p;
  float *rx_out, *xw_keep;  // the forward's, for 'layer' (xw_keep: I = 0)
  int64_t I;
  const float *x, *kx;
};

// fn(std::integral_constant<int64_t, I>{}): loops over x's I features
// unrolled, their accumulators in registers.
template <int64_t K = 0, typename Fn>
inline void WithI(int64_t I, const Fn& fn) {
  if constexpr (K <= kMaxProjI) {
    if (I == K) return fn(std::integral_constant<int64_t, K>{});
    WithI<K + 1>(I, fn);
  }
}

// Row b of step t of xw = x @ kx into out (4H), the forward's and the
// backward's alike (the same floats); returns the sum of its squares.
float ProjectRow(const Seq& s, int64_t t, int64_t b, float* out) {
  const int64_t n = 4 * s.H;
  const float* xv = s.x + (t * s.B + b) * s.I;
  fr ss{};
  WithI(s.I, [&](auto kI) {
    constexpr int64_t NI = decltype(kI)::value;
    if constexpr (NI > 0) {
      ForRow(n, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        fr v = xv[0] * Ld<F>(s.kx, j, n);
        for (int64_t i = 1; i < NI; ++i) v += xv[i] * Ld<F>(s.kx + i * n, j, n);
        St<F>(out, j, n, v);
        ss += v * v;
      });
    }
  });
  return lnorm::Sum(ss);
}

// Row b of forward step t, from a = (h_{t-1} @ W_h)[b] and the carry rows
// cr, hr: writes c_t to cn (which may be cr), h_t to hn, y's row yr and the
// saved row. cnew (H), gates (4H, 'layer') and xrow (4H, I > 0) are scratch.
void ForwardRow(const Seq& s, const float* xw, float* saved, int64_t t,
                int64_t b, const float* ar, const float* cr, const float* hr,
                float* cn, float* hn, float* yr, float* cnew, float* gates,
                float* xrow) {
  const int64_t H = s.H, B = s.B;
  const int32_t norm = s.norm;
  const Params& p = s.p;
  float ssx = 0.0f;  // xr's sum of squares, when formed here
  const float* xr = xrow;
  if (s.I > 0) {
    ssx = ProjectRow(s, t, b, xrow);
  } else {
    xr = xw + (t * B + b) * 4 * H;
  }
  float* row = saved + (t * B + b) * s.S;
  // 'layer' saves ah and ra, from which the backward recomputes the gates;
  // the others save the gates.
  float* act = norm == 1 ? gates : row;
  float* cp = row + 4 * H + (norm == 1 ? 1 : 0);
  if (norm == 1) {
    // rx (the projection's kernel is centred, so its RMS is its sigma);
    // reading xw, the row's copy in the same pass.
    if (s.I == 0) {
      float* keep = s.xw_keep + (t * B + b) * 4 * H;
      fr ss{};
      ForRow(4 * H, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        const fr v = Ld<F>(xr, j, 4 * H);
        St<F>(keep, j, 4 * H, v);
        ss += v * v;
      });
      ssx = lnorm::Sum(ss);
    }
    const float rxb = 1.0f / std::sqrt(ssx / (4 * H) + s.eps);
    s.rx_out[t * B + b] = rxb;
    const float ms = SumOf(4 * H, [&](int64_t j) {
      const fr v = LoadN(ar, j, 4 * H);
      return v * v;
    }) / (4 * H);
    const float ra = 1.0f / std::sqrt(ms + s.eps);
    float* ahr = row;
    ahr[4 * H] = ra;
    // ah into the saved row, and the gates from it, in one pass a gate.
    Gates(act, H, [&](int64_t k, int64_t j) {
      const int64_t off = k * H;
      const fr ah = LoadN(ar + off, j, H) * ra;
      StoreN(ahr + off, j, H, ah);
      return LayerZ(ah, xr, rxb, p, off, j, H);
    });
  } else {
    Gates(act, H, [&](int64_t k, int64_t j) {
      const int64_t o = k * H;
      return LoadN(ar + o, j, H) + LoadN(xr + o, j, H) * LoadN(p.gx + o, j, H) +
             LoadN(p.b4 + o, j, H);
    });
  }
  const float *f = act, *i = act + H, *o = act + 2 * H, *g = act + 3 * H;
  Map(cnew, H, [&](int64_t j) {
    return LoadN(f, j, H) * LoadN(cr, j, H) + LoadN(i, j, H) * LoadN(g, j, H);
  });
  for (int64_t j = 0; j < H; ++j) cp[j] = cr[j];
  if (norm == 0) {
    Map(hn, H, [&](int64_t j) {
      return LoadN(o, j, H) * lnorm::Tanh(LoadN(cnew, j, H));
    });
  } else {
    const float mc = SumOf(H, [&](int64_t j) { return LoadN(cnew, j, H); }) / H;
    // Zero-padded tails would add (0 - mc)^2 per pad: mask them out.
    const float vc = SumOf(H, [&](int64_t j) {
      fr d = LoadN(cnew, j, H) - mc;
      if (j + lnorm::kRowLanes > H) {
        for (int64_t k = H - j; k < lnorm::kRowLanes; ++k) d[k] = 0;
      }
      return d * d;
    }) / H;
    const float rc = 1.0f / std::sqrt(vc + s.eps);
    cp[H] = mc;
    cp[H + 1] = rc;
    Map(hn, H, [&](int64_t j) {
      const fr ch = (LoadN(cnew, j, H) - mc) * rc;
      return LoadN(o, j, H) *
             lnorm::Tanh(ch * LoadN(p.gH, j, H) + LoadN(p.bH, j, H));
    });
  }
  const bool keep = !s.masked || s.m[t * B + b] != 0;
  if (s.masked) {
    float* hp = cp + H + (norm == 0 ? 0 : 2);
    for (int64_t j = 0; j < H; ++j) hp[j] = hr[j];
  }
  for (int64_t j = 0; j < H; ++j) {
    yr[j] = keep ? hn[j] : 0.0f;
    cn[j] = keep ? cnew[j] : cr[j];
    hn[j] = keep ? hn[j] : hr[j];
  }
}

// Scratch rows of one thread's backward rows; with I > 0 ('layer'), xrow
// holds a row of xw and dxw the d xw of the thread's rows of a step.
struct BwdScratch {
  BwdScratch(int64_t H, bool layer, bool proj, int64_t rows)
      : cnew(H), tc(H), ch(H), dcn(H), dcnew(H), dhc(H),
        dz(layer ? 4 * H : 0), gates(layer ? 4 * H : 0),
        xrow(proj ? 4 * H : 0), dxw(proj ? rows * 4 * H : 0) {}
  std::vector<float> cnew, tc, ch, dcn, dcnew, dhc, dz, gates, xrow, dxw;
};

// dk_x's sums, skx (I rows of 4H), plus the rows [b0, b1) of step t: x[t,
// b, i] d xw[b], d xw's rows in dxw (4H apart). Once a step for the
// thread's rows, not once a row: one pass over skx where there were b1 - b0.
void AddDkx(const Seq& s, int64_t t, int64_t b0, int64_t b1, const float* dxw,
            float* skx) {
  const int64_t n = 4 * s.H;
  WithI(s.I, [&](auto kI) {
    constexpr int64_t NI = decltype(kI)::value;
    if constexpr (NI > 0) {
      const float* xt = s.x + t * s.B * NI;
      ForRow(n, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        fr acc[NI];
        for (int64_t i = 0; i < NI; ++i) acc[i] = Ld<F>(skx + i * n, j, n);
        for (int64_t b = b0; b < b1; ++b) {
          const fr v = Ld<F>(dxw + (b - b0) * n, j, n);
          for (int64_t i = 0; i < NI; ++i) acc[i] += xt[b * NI + i] * v;
        }
        for (int64_t i = 0; i < NI; ++i) St<F>(skx + i * n, j, n, acc[i]);
      });
    }
  });
}

// Row b of backward step t, from the carries' cotangents dcr and dhr (dc_t,
// dh_t): writes dc_{t-1} to dco (which may be dcr), d(h @ w) to da, adds to
// this thread's rows of the sums. For 'layer' with I = 0 it turns the row
// xr of xw, once read, into d xw's; with I > 0 ('layer' only) it forms xw's
// row itself, writes d xw's to xr (a scratch row) and dx's row to dxr.
void BackwardRow(const Seq& s, const float* dy, const float* saved, int64_t t,
                 int64_t b, const float* dcr, const float* dhr, float* dco,
                 float* da, float* xr, float* dxr, float* const* srow,
                 int64_t nsums, BwdScratch& w) {
  const int64_t H = s.H, B = s.B;
  const int32_t norm = s.norm;
  const Params& p = s.p;
  float* const xd = xr;  // where 'layer''s d xw goes
  if (s.I > 0) {
    ProjectRow(s, t, b, w.xrow.data());
    xr = w.xrow.data();
  }
  const float* row = saved + (t * B + b) * s.S;
  const float rxb = norm == 1 ? s.rx[t * B + b] : 1.0f;
  const float* ah = row;  // 'layer' only
  const float ra = norm == 1 ? ah[4 * H] : 0.0f;
  const float* cp = row + 4 * H + (norm == 1 ? 1 : 0);
  const float* act = row;
  if (norm == 1) {
    Gates(w.gates.data(), H, [&](int64_t k, int64_t j) {
      return LayerZ(LoadN(ah + k * H, j, H), xr, rxb, p, k * H, j, H);
    });
    act = w.gates.data();
  }
  const float *f = act, *i = act + H, *o = act + 2 * H, *g = act + 3 * H;
  float *cnew = w.cnew.data(), *tc = w.tc.data(), *ch = w.ch.data(),
        *dcn = w.dcn.data(), *dcnew = w.dcnew.data(), *dhc = w.dhc.data();
  Map(cnew, H, [&](int64_t j) {
    return LoadN(f, j, H) * LoadN(cp, j, H) + LoadN(i, j, H) * LoadN(g, j, H);
  });
  const bool keep = !s.masked || s.m[t * B + b] != 0;
  const float* dyr = dy + (b * s.T + t) * H;  // dy is (B, T, H)
  for (int64_t j = 0; j < H; ++j) dhc[j] = keep ? dhr[j] + dyr[j] : 0.0f;
  const float dc_keep = keep ? 1.0f : 0.0f;
  float* s_db4 = srow[0];
  if (norm == 0) {
    Map(tc, H, [&](int64_t j) { return lnorm::Tanh(LoadN(cnew, j, H)); });
    Map(dcnew, H, [&](int64_t j) {
      const fr tv = LoadN(tc, j, H);
      return LoadN(dcr, j, H) * dc_keep +
             LoadN(dhc, j, H) * LoadN(o, j, H) * (1.0f - tv * tv);
    });
  } else {
    // Two passes: the normalized c, its tanh, d(LN(c)) and the means of
    // d = dcn * gH and ch * d; then dc and the gain and bias sums.
    // Zero-padded tails of dhc make dcn, hence the padded terms, 0.
    const float mc = cp[H], rc = cp[H + 1];
    fr m1v{}, m2v{};
    ForRow(H, [&](int64_t j, auto full) {
      constexpr bool F = decltype(full)::value;
      const fr chv = (Ld<F>(cnew, j, H) - mc) * rc;
      const fr tv = lnorm::Tanh(chv * Ld<F>(p.gH, j, H) + Ld<F>(p.bH, j, H));
      const fr dcnv = Ld<F>(dhc, j, H) * Ld<F>(o, j, H) * (1.0f - tv * tv);
      const fr d = dcnv * Ld<F>(p.gH, j, H);
      St<F>(ch, j, H, chv);
      St<F>(tc, j, H, tv);
      St<F>(dcn, j, H, dcnv);
      m1v += d;
      m2v += chv * d;
    });
    const float m1 = lnorm::Sum(m1v) / H, m2 = lnorm::Sum(m2v) / H;
    const int64_t c_sums = nsums - (s.I > 0 ? 1 : 0);  // past gH's and bH's
    float* s_gH = srow[c_sums - 2];
    float* s_bH = srow[c_sums - 1];
    ForRow(H, [&](int64_t j, auto full) {
      constexpr bool F = decltype(full)::value;
      const fr dcnv = Ld<F>(dcn, j, H), chv = Ld<F>(ch, j, H);
      const fr d = dcnv * Ld<F>(p.gH, j, H);
      St<F>(dcnew, j, H, Ld<F>(dcr, j, H) * dc_keep + rc * ((d - m1) - chv * m2));
      St<F>(s_gH, j, H, Ld<F>(s_gH, j, H) + dcnv * chv);
      St<F>(s_bH, j, H, Ld<F>(s_bH, j, H) + dcnv);
    });
  }
  // d(pre-activations) dz, and the bias sum. Without 'layer' dz is the
  // output d(h @ w); with it, dz goes to a scratch row for the next pass.
  float* dz = norm == 1 ? w.dz.data() : da;
  ForRow(H, [&](int64_t j, auto full) {
    constexpr bool F = decltype(full)::value;
    const fr fv = Ld<F>(f, j, H), iv = Ld<F>(i, j, H), ov = Ld<F>(o, j, H),
             gv = Ld<F>(g, j, H), dcv = Ld<F>(dcnew, j, H);
    const fr dzk[4] = {
        dcv * Ld<F>(cp, j, H) * fv * (1.0f - fv),
        dcv * gv * iv * (1.0f - iv),
        Ld<F>(dhc, j, H) * Ld<F>(tc, j, H) * ov * (1.0f - ov),
        dcv * iv * (1.0f - gv * gv)};
    for (int64_t k = 0; k < 4; ++k) {
      St<F>(dz + k * H, j, H, dzk[k]);
      St<F>(s_db4 + k * H, j, H, Ld<F>(s_db4 + k * H, j, H) + dzk[k]);
    }
  });
  if (norm == 1) {
    // The gain sums, and the sums of ah dz g4 and of xw dz gx that the two
    // norms' backward needs (padded tails add 0: dz is 0 there). d xh = dz gx
    // and dz g4 are formed again in the next pass rather than stored.
    float* s_g4 = srow[1];
    float* s_gx = srow[2];
    fr md8{}, mad8{}, mx8{};
    ForRow(4 * H, [&](int64_t j, auto full) {
      constexpr bool F = decltype(full)::value;
      const int64_t n = 4 * H;
      const fr dzv = Ld<F>(dz, j, n), ahv = Ld<F>(ah, j, n),
               xwv = Ld<F>(xr, j, n);
      const fr d = dzv * Ld<F>(p.g4, j, n), dxhv = dzv * Ld<F>(p.gx, j, n);
      St<F>(s_g4, j, n, Ld<F>(s_g4, j, n) + dzv * ahv);
      St<F>(s_gx, j, n, Ld<F>(s_gx, j, n) + dzv * (xwv * rxb));
      md8 += d;
      mad8 += ahv * d;
      mx8 += dxhv * xwv;
    });
    // The two layer norms' backward: da from d = dz g4 and ah, with the
    // mean(d) term, so that dW = h^T da has zero row means as it is (no
    // projection after the kernel); d xw, over xw's row, from d xh = dz gx
    // and xh = xw rx, where mean(xh d xh) xh = mx xw.
    const float md = lnorm::Sum(md8) / (4 * H);
    const float mad = lnorm::Sum(mad8) / (4 * H);
    const float mx = rxb * rxb * lnorm::Sum(mx8) / (4 * H);
    // d xw to xd; with I > 0, d xw . kx[i] into dx_i at once (the caller
    // adds x_i d xw into dkx's sums once a step, AddDkx).
    WithI(s.I, [&](auto kI) {
      constexpr int64_t NI = decltype(kI)::value;
      const int64_t n = 4 * H;
      fr dxa[NI > 0 ? NI : 1] = {};
      ForRow(n, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        const fr dzv = Ld<F>(dz, j, n);
        St<F>(da, j, n,
              ra * ((dzv * Ld<F>(p.g4, j, n) - md) - Ld<F>(ah, j, n) * mad));
        const fr dxw = rxb * (dzv * Ld<F>(p.gx, j, n) - Ld<F>(xr, j, n) * mx);
        St<F>(xd, j, n, dxw);
        for (int64_t i = 0; i < NI; ++i) {
          dxa[i] += dxw * Ld<F>(s.kx + i * n, j, n);
        }
      });
      for (int64_t i = 0; i < NI; ++i) dxr[i] = lnorm::Sum(dxa[i]);
    });
  }
  for (int64_t j = 0; j < H; ++j) dco[j] = keep ? dcnew[j] * f[j] : dcr[j];
}

// Scratch that outlives one call: the packed W_h (a few MiB, whose fresh
// pages would cost more to fault in than the packing) and the carries.
float* Scratch(int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

// LNORM_NATIVE_PHASES=1 builds these in (phase_times.h).
lnorm::PhaseTimes fwd_times("lstm fwd", {"pack", "gemm", "wait after gemm",
                                         "rows", "wait after rows"});
lnorm::PhaseTimes bwd_times("lstm bwd", {"pack", "rows", "wait after rows",
                                         "gemm", "wait after gemm", "dW"});

// Rows of the T B that the W_h gradient's product takes at a time, its sums
// added into dW block by block: a block's two panels of packed d(h @ w) (KB
// by 2 kLanes floats) stay in L2 while the tiles of their columns read them.
constexpr int64_t kKBlock = 1024;

// Threads for a call: a step's work must outweigh the barriers between its
// phases.
int64_t TeamSize(ffi::ThreadPool& pool, int64_t B, int64_t H) {
  return B * H < lnorm::kMinParallelWork ? 1 : pool.num_threads();
}

// The forward scan over all T steps. Each step: a = h_{t-1} @ W_h, its
// columns split among the team; then the rows' elementwise work, the rows
// split. It reads xw (T, B, 4H; with proj = 1, x (T, B, I) and kx (I, 4H),
// otherwise kx is any buffer) and the mask (T, B; any buffer when unused),
// and writes y (B, T, H), the saved rows (T, B, S), the final carry and for
// 'layer' rx (T, B) and, with proj = 0, xw's copy.
ffi::Error Forward(ffi::Buffer<ffi::F32> xw, ffi::Buffer<ffi::F32> kx,
                   ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> wm,
                   ffi::Buffer<ffi::F32> c0, ffi::Buffer<ffi::F32> h0,
                   ffi::Buffer<ffi::F32> m, ffi::Buffer<ffi::F32> gx, ffi::Buffer<ffi::F32> b4,
                   ffi::Buffer<ffi::F32> g4, ffi::Buffer<ffi::F32> gH,
                   ffi::Buffer<ffi::F32> bH, int32_t norm, int32_t masked,
                   int32_t proj, float eps, ffi::ResultBuffer<ffi::F32> c_out,
                   ffi::ResultBuffer<ffi::F32> h_out,
                   ffi::ResultBuffer<ffi::F32> y_out,
                   ffi::ResultBuffer<ffi::F32> saved, ffi::RemainingRets rest,
                   ffi::ThreadPool pool) {
  const int64_t H = gH.element_count(), B = H > 0 ? c0.element_count() / H : 0;
  if (B * H == 0) return ffi::Error::Success();  // an empty batch
  const int64_t T = y_out->element_count() / (B * H);
  const int64_t I = proj ? kx.element_count() / (4 * H) : 0;
  if (static_cast<int64_t>(w.element_count()) != H * 4 * H ||
      (norm == 1 && static_cast<int64_t>(wm.element_count()) != H) ||
      (proj && (I < 1 || I > kMaxProjI ||
                static_cast<int64_t>(kx.element_count()) != I * 4 * H)) ||
      static_cast<int64_t>(xw.element_count()) != T * B * (proj ? I : 4 * H)) {
    return ffi::Error::InvalidArgument("lnorm lstm: bad shapes");
  }
  float *rx_out = nullptr, *xw_keep = nullptr;
  const int64_t nrest = norm == 1 ? (proj ? 1 : 2) : 0;  // rx, xw's copy
  if (static_cast<int64_t>(rest.size()) != nrest) {
    return ffi::Error::InvalidArgument("lnorm lstm: bad outputs");
  }
  if (norm == 1) {
    auto r = rest.get<ffi::Buffer<ffi::F32>>(0);
    if (!r.has_value() ||
        static_cast<int64_t>((*r)->element_count()) != T * B) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad rx");
    }
    rx_out = (*r)->typed_data();
  }
  if (nrest == 2) {
    auto k = rest.get<ffi::Buffer<ffi::F32>>(1);
    if (!k.has_value() ||
        static_cast<int64_t>((*k)->element_count()) != T * B * 4 * H) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad xw copy");
    }
    xw_keep = (*k)->typed_data();
    lnorm::AdviseHugePages(xw_keep, (*k)->size_bytes());
  }
  lnorm::AdviseHugePages(saved->typed_data(), saved->size_bytes());
  lnorm::AdviseHugePages(y_out->typed_data(), y_out->size_bytes());
  std::memcpy(c_out->typed_data(), c0.typed_data(), B * H * sizeof(float));
  std::memcpy(h_out->typed_data(), h0.typed_data(), B * H * sizeof(float));
  if (T == 0) return ffi::Error::Success();
  const Seq s{T, B, H, static_cast<int64_t>(saved->element_count()) / (T * B),
              norm, masked != 0, eps, m.typed_data(), nullptr,
              Params{gx.typed_data(), b4.typed_data(), g4.typed_data(),
                     gH.typed_data(), bH.typed_data()},
              rx_out, xw_keep, I, xw.typed_data(), kx.typed_data()};
  const int64_t N = 4 * H;
  float* packed = Scratch(lnorm::PackedSize(H, N) + B * N + B * H);
  float* a = packed + lnorm::PackedSize(H, N);
  // h_t goes to h_out at odd t and to hbuf at even: the gemm of step t + 1
  // reads h_t while its rows write h_{t+1}, so they alternate.
  float* hbuf = a + B * N;
  float* c = c_out->typed_data();
  lnorm::CallClock clock(fwd_times);
  lnorm::RunTeam(pool, TeamSize(pool, B, H), [&](lnorm::Team& team) {
    lnorm::Laps laps(fwd_times, team.id());
    const int64_t b0 = team.Begin(B), b1 = team.End(B);
    // Packing splits W's rows; the products split (panel, row) pairs.
    lnorm::Pack(w.typed_data(), H, N, N, packed, team.Begin(H), team.End(H),
                norm == 1 ? wm.typed_data() : nullptr);
    std::vector<float> cnew(H), gates(norm == 1 ? 4 * H : 0),
        xrow(I > 0 ? 4 * H : 0);
    team.Sync();
    laps.Lap(0);
    for (int64_t t = 0; t < T; ++t) {
      const float* hp = t % 2 == 0 ? h_out->typed_data() : hbuf;
      float* hn = t % 2 == 0 ? hbuf : h_out->typed_data();
      lnorm::GemmShare(hp, B, H, H, packed, N, a, N, team.id(), team.size());
      laps.Lap(1);
      team.Sync();
      laps.Lap(2);
      for (int64_t b = b0; b < b1; ++b) {
        ForwardRow(s, xw.typed_data(), saved->typed_data(), t, b, a + b * N,
                   c + b * H, hp + b * H, c + b * H, hn + b * H,
                   y_out->typed_data() + (b * T + t) * H, cnew.data(),
                   gates.data(), xrow.data());
      }
      laps.Lap(3);
      team.Sync();
      laps.Lap(4);
    }
  });
  if (T % 2 == 1) {
    std::memcpy(h_out->typed_data(), hbuf, B * H * sizeof(float));
  }
  return ffi::Error::Success();
}

// The backward scan over all T steps, last first. Each step: the rows'
// elementwise work, the rows split among the team, which writes row t of
// d(h @ w) (T, B, 4H); then dh_{t-1} = d(h @ w)_t @ W_h^T, its columns split.
// With a dW output of H x 4H (not 0) the same team then forms the W_h
// gradient, dW = sum over t, b of h_{t-1}^T d(h @ w)_t from hprev (T, B, H;
// otherwise any buffer):
// at small T B, as one XLA matmul after the kernel it took twice its time
// alone (BENCHMARKS.md). Its right operand, d(h @ w) packed (dpk, at least
// T B Panels(4H) kLanes floats; 0 without dW), is written row by row as the
// rows are formed, while each row is still in cache, not in a pass over
// d(h @ w) after the loop. With dW, d(h @ w) itself (da_all) may be 0
// floats when the caller does not read it: a step's rows then live in
// scratch, read by the step's product alone.
// For 'layer' with proj = 0 the one remaining argument holds xw, aliased to
// d xw, the first remaining output, and each row, once read, becomes d xw's.
// With proj = 1 the remaining arguments are x (T, B, I) and kx (I, 4H), and
// the first remaining output is dx (T, B, I). The sums (B, n each) come out
// after those as one row per chunk of the batch that a thread takes (zeros
// elsewhere), which the scan sums: the bias's (4H); for 'layer' g4's and
// gx's (4H each); unless 'none', gH's and bH's (H each); with proj = 1,
// kx's (I 4H).
ffi::Error Backward(ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> saved,
                    ffi::Buffer<ffi::F32> m, ffi::Buffer<ffi::F32> rx,
                    ffi::Buffer<ffi::F32> dc, ffi::Buffer<ffi::F32> dh,
                    ffi::Buffer<ffi::F32> gx, ffi::Buffer<ffi::F32> b4,
                    ffi::Buffer<ffi::F32> g4, ffi::Buffer<ffi::F32> gH,
                    ffi::Buffer<ffi::F32> bH, ffi::Buffer<ffi::F32> w,
                    ffi::Buffer<ffi::F32> wm, ffi::Buffer<ffi::F32> hprev,
                    ffi::RemainingArgs rest_in,
                    int32_t norm, int32_t masked, int32_t proj,
                    ffi::ResultBuffer<ffi::F32> dc_out,
                    ffi::ResultBuffer<ffi::F32> dh_out,
                    ffi::ResultBuffer<ffi::F32> da_all,
                    ffi::ResultBuffer<ffi::F32> dw_out,
                    ffi::ResultBuffer<ffi::F32> dpk,
                    ffi::RemainingRets rest, ffi::ThreadPool pool) {
  const int64_t H = gH.element_count(), B = H > 0 ? dc.element_count() / H : 0;
  if (B * H == 0) {  // an empty batch: dW (if asked for) is 0
    std::memset(dw_out->typed_data(), 0, dw_out->size_bytes());
    return ffi::Error::Success();
  }
  const int64_t T = dy.element_count() / (B * H);
  const bool with_dw = dw_out->element_count() != 0;
  const int64_t PN = lnorm::PackedSize(1, 4 * H);  // floats a packed row
  std::vector<int64_t> widths = {4 * H};
  if (norm == 1) widths.insert(widths.end(), {4 * H, 4 * H});
  if (norm != 0) widths.insert(widths.end(), {H, H});
  const float *x = nullptr, *kx = nullptr;
  int64_t I = 0;
  if (proj) {
    auto xa = rest_in.get<ffi::Buffer<ffi::F32>>(0);
    auto ka = rest_in.get<ffi::Buffer<ffi::F32>>(1);
    if (norm != 1 || rest_in.size() != 2 || !xa.has_value() ||
        !ka.has_value()) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad x or kx");
    }
    I = ka->element_count() / (4 * H);
    if (I < 1 || I > kMaxProjI ||
        static_cast<int64_t>(ka->element_count()) != I * 4 * H ||
        static_cast<int64_t>(xa->element_count()) != T * B * I) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad x or kx");
    }
    x = xa->typed_data();
    kx = ka->typed_data();
    widths.push_back(I * 4 * H);
  }
  const int64_t nsums = widths.size();
  const int64_t nouts = norm == 1 ? 1 : 0;  // d xw or dx
  const int64_t nrest = nouts + nsums;
  if (static_cast<int64_t>(rest.size()) != nrest ||
      static_cast<int64_t>(rest_in.size()) != (proj ? 2 : norm == 1 ? 1 : 0) ||
      static_cast<int64_t>(w.element_count()) != H * 4 * H ||
      (norm == 1 && static_cast<int64_t>(wm.element_count()) != H) ||
      (with_dw &&
       (static_cast<int64_t>(dw_out->element_count()) != H * 4 * H ||
        static_cast<int64_t>(hprev.element_count()) != T * B * H ||
        static_cast<int64_t>(dpk->element_count()) < T * B * PN)) ||
      (static_cast<int64_t>(da_all->element_count()) != T * B * 4 * H &&
       !(with_dw && da_all->element_count() == 0))) {
    return ffi::Error::InvalidArgument("lnorm lstm: bad shapes");
  }
  std::vector<float*> sout(nsums);
  for (int64_t k = 0; k < nsums; ++k) {
    auto out = rest.get<ffi::Buffer<ffi::F32>>(nouts + k);
    if (!out.has_value() ||
        static_cast<int64_t>((*out)->element_count()) != B * widths[k]) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad sums");
    }
    sout[k] = (*out)->typed_data();
    std::memset(sout[k], 0, (*out)->element_count() * sizeof(float));
  }
  float *dxw = nullptr, *dx = nullptr;
  if (proj) {
    auto r = rest.get<ffi::Buffer<ffi::F32>>(0);
    if (!r.has_value() ||
        static_cast<int64_t>((*r)->element_count()) != T * B * I) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad dx");
    }
    dx = (*r)->typed_data();
  } else if (norm == 1) {
    auto r_in = rest_in.get<ffi::Buffer<ffi::F32>>(0);
    auto r = rest.get<ffi::Buffer<ffi::F32>>(0);
    if (!r_in.has_value() || !r.has_value() ||
        r_in->typed_data() != (*r)->typed_data() ||
        static_cast<int64_t>((*r)->element_count()) != T * B * 4 * H) {
      return ffi::Error::InvalidArgument("lnorm lstm: bad d xw");
    }
    dxw = (*r)->typed_data();
  }
  lnorm::AdviseHugePages(da_all->typed_data(), da_all->size_bytes());
  lnorm::AdviseHugePages(dpk->typed_data(), dpk->size_bytes());
  if (dxw != nullptr) lnorm::AdviseHugePages(dxw, T * B * 4 * H * sizeof(float));
  std::memcpy(dc_out->typed_data(), dc.typed_data(), B * H * sizeof(float));
  std::memcpy(dh_out->typed_data(), dh.typed_data(), B * H * sizeof(float));
  if (T == 0) {
    if (with_dw) std::memset(dw_out->typed_data(), 0, H * 4 * H * sizeof(float));
    return ffi::Error::Success();
  }
  const Seq s{T, B, H, static_cast<int64_t>(saved.element_count()) / (T * B),
              norm, masked != 0, 0.0f, m.typed_data(), rx.typed_data(),
              Params{gx.typed_data(), b4.typed_data(), g4.typed_data(),
                     gH.typed_data(), bH.typed_data()},
              nullptr, nullptr, I, x, kx};
  const int64_t N = 4 * H, P = lnorm::Panels(H);
  const int64_t KB = std::min(kKBlock, T * B);
  const bool da_rows = da_all->element_count() != 0;
  float* packed = Scratch(lnorm::PackedSize(N, H) + B * H +
                          (da_rows ? 0 : B * N));
  float* dhbuf = packed + lnorm::PackedSize(N, H);
  float* dastep = dhbuf + B * H;  // a step's d(h @ w) when da_all is 0
  float* dcc = dc_out->typed_data();
  lnorm::CallClock clock(bwd_times);
  lnorm::RunTeam(pool, TeamSize(pool, B, H), [&](lnorm::Team& team) {
    lnorm::Laps laps(bwd_times, team.id());
    const int64_t p0 = team.Begin(P), p1 = team.End(P);
    const int64_t b0 = team.Begin(B), b1 = team.End(B);
    lnorm::PackTransposed(w.typed_data(), N, H, N, packed, p0, p1,
                          norm == 1 ? wm.typed_data() : nullptr);
    // This chunk's row of each sum (row b0: distinct among the threads
    // that have rows).
    std::vector<float*> srow(nsums);
    for (int64_t k = 0; k < nsums; ++k) srow[k] = sout[k] + b0 * widths[k];
    BwdScratch scratch(H, norm == 1, I > 0, b1 - b0);
    team.Sync();
    laps.Lap(0);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t t = T - 1 - i;
      const float* dhc = i % 2 == 0 ? dh_out->typed_data() : dhbuf;
      float* dhn = i % 2 == 0 ? dhbuf : dh_out->typed_data();
      float* da = da_rows ? da_all->typed_data() + t * B * N : dastep;
      for (int64_t b = b0; b < b1; ++b) {
        BackwardRow(s, dy.typed_data(), saved.typed_data(), t, b, dcc + b * H,
                    dhc + b * H, dcc + b * H, da + b * N,
                    I > 0 ? scratch.dxw.data() + (b - b0) * N
                    : dxw ? dxw + (t * B + b) * N
                          : nullptr,
                    dx ? dx + (t * B + b) * I : nullptr, srow.data(), nsums,
                    scratch);
        if (with_dw) {  // into dW's operand: row k of its block of KB
          const int64_t k = t * B + b, k0 = k / KB * KB;
          lnorm::PackRow(da + b * N, N, dpk->typed_data() + k0 * PN,
                         std::min(KB, T * B - k0), k - k0);
        }
      }
      // Only with rows: a member without any shares row b0 of the sums
      // with the member that has row b0.
      if (I > 0 && b1 > b0) {
        AddDkx(s, t, b0, b1, scratch.dxw.data(), srow[nsums - 1]);
      }
      laps.Lap(1);
      team.Sync();
      laps.Lap(2);
      lnorm::GemmShare(da, B, N, N, packed, H, dhn, H, team.id(), team.size());
      // No step past an example's end: dh passes through (over the same
      // share of dh that this thread's product wrote).
      if (s.masked) {
        lnorm::ForShare(P, B, team.id(), team.size(),
                        [&](int64_t q0, int64_t q1, int64_t r0, int64_t r1) {
          const int64_t n0 = std::min(q0 * lnorm::kLanes, H),
                        n1 = std::min(q1 * lnorm::kLanes, H);
          for (int64_t b = r0; b < r1; ++b) {
            if (s.m[t * B + b] == 0) {
              std::memcpy(dhn + b * H + n0, dhc + b * H + n0,
                          (n1 - n0) * sizeof(float));
            }
          }
        });
      }
      laps.Lap(3);
      team.Sync();
      laps.Lap(4);
    }
    // dW by blocks of KB rows of the T B (each block of d(h @ w) packed
    // by the rows above, all of them before the loop's last barrier), added
    // into dW block by block, the members taking shares of its (panel, row)
    // pairs (the same share every block: no barrier between blocks), with
    // h_{t-1} read as it lies (as h^T's transpose). The
    // order of the sums is fixed: k in chunks (gemm.h) within a block, then
    // block by block.
    const float* hp = hprev.typed_data();
    float* dw = dw_out->typed_data();
    for (int64_t k0 = 0; with_dw && k0 < T * B; k0 += KB) {
      const int64_t kc = std::min(KB, T * B - k0);
      const float* dblock = dpk->typed_data() + k0 * PN;
      if (k0 == 0) {
        lnorm::GemmShare<false, true>(hp, H, kc, H, dblock, N, dw, N,
                                      team.id(), team.size());
      } else {
        lnorm::GemmShare<true, true>(hp + k0 * H, H, kc, H, dblock, N, dw, N,
                                     team.id(), team.size());
      }
    }
    laps.Lap(5);
  });
  if (T % 2 == 1) {
    std::memcpy(dh_out->typed_data(), dhbuf, B * H * sizeof(float));
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLstmFwd, Forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xw or x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // kx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // w's row means
                                  .Arg<ffi::Buffer<ffi::F32>>()  // c_0
                                  .Arg<ffi::Buffer<ffi::F32>>()  // h_0
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bH
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Attr<int32_t>("proj")
                                  .Attr<float>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // c_T
                                  .Ret<ffi::Buffer<ffi::F32>>()   // h_T
                                  .Ret<ffi::Buffer<ffi::F32>>()   // y (B, T, H)
                                  .Ret<ffi::Buffer<ffi::F32>>()   // saved
                                  .RemainingRets()  // (rx, xw's copy)
                                  .Ctx<ffi::ThreadPool>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLstmBwd, Backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dy (B, T, H)
                                  .Arg<ffi::Buffer<ffi::F32>>()  // saved
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // rx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dc_T
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dh_T
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // w's row means
                                  .Arg<ffi::Buffer<ffi::F32>>()  // h_{t-1}
                                  .RemainingArgs()  // (xw,) or (x, kx)
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Attr<int32_t>("proj")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dc_0
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dh_0
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d(h @ w)
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dW
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dW's operand
                                  .RemainingRets()  // (d xw or dx,) sums
                                  .Ctx<ffi::ThreadPool>());
