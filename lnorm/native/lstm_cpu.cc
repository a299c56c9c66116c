// One LSTM time step's elementwise work for XLA:CPU, forward and backward,
// called through the XLA FFI from the scans in lnorm/recurrent.py. The
// matmuls with W_h stay in XLA; everything between them is one kernel here,
// where XLA:CPU runs it as a dozen or more small kernels (one per fusion and
// per row reduction), whose fixed costs dominate at the batch sizes of the
// paper's recurrent models.
//
// The equations and the layout of the row saved per step are those of
// _lstm_fwd and _lstm_scan_bwd in lnorm/recurrent.py (their XLA versions),
// with norm 0 = 'none', 1 = 'layer', 2 = 'layer_c'. Parameters a norm does
// not use arrive as ones (gains) and zeros (biases); inputs it does not read
// (the mask with masked = 0; rx but for 'layer') arrive as any buffer.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rows.h"
#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using lnorm::f8;
using lnorm::Load;
using lnorm::Store;
using lnorm::StoreN;
using lnorm::For8;
using lnorm::Map;
using lnorm::LoadN;
using lnorm::Ld;
using lnorm::St;
using lnorm::SumOf;
using lnorm::ForRows;

struct Params {
  const float *gx, *b4, *g4, *gH, *bH;
};

// 'layer''s pre-activation at off + j of a row (eq. 20), from ah = LN(W_h h)
// before its gain and the input projection's row xr with its 1/sigma rxb.
// The forward and the backward's recompute both use it: the same gates.
inline f8 LayerZ(f8 ah, const float* xr, float rxb, const Params& p,
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

// Time step t of the forward scan. It reads step t of the whole inputs xw
// (T, B, 4H), the mask and rx (T, B; any buffer when unused), and writes row
// t of y (T, B, H) and of the saved rows (T, B, S), both aliased to their
// outputs, so that the scan has no per-step slices or updates to copy.
ffi::Error Forward(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> xw,
                   ffi::Buffer<ffi::F32> c, ffi::Buffer<ffi::F32> h,
                   ffi::Buffer<ffi::F32> m, ffi::Buffer<ffi::F32> rx,
                   ffi::Buffer<ffi::S32> step, ffi::Buffer<ffi::F32> gx,
                   ffi::Buffer<ffi::F32> b4, ffi::Buffer<ffi::F32> g4,
                   ffi::Buffer<ffi::F32> gH, ffi::Buffer<ffi::F32> bH,
                   ffi::Buffer<ffi::F32> y_in, ffi::Buffer<ffi::F32> saved_in,
                   int32_t norm, int32_t masked, float eps,
                   ffi::ResultBuffer<ffi::F32> c_out,
                   ffi::ResultBuffer<ffi::F32> h_out,
                   ffi::ResultBuffer<ffi::F32> y_out,
                   ffi::ResultBuffer<ffi::F32> saved, ffi::ThreadPool pool) {
  const int64_t H = gH.element_count(), B = H > 0 ? c.element_count() / H : 0;
  if (B * H == 0) return ffi::Error::Success();  // an empty batch
  const int64_t T = y_out->element_count() / (B * H);
  const int64_t t = step.typed_data()[0];
  if (static_cast<int64_t>(a.element_count()) != B * 4 * H ||
      static_cast<int64_t>(xw.element_count()) != T * B * 4 * H || t < 0 ||
      t >= T || y_in.typed_data() != y_out->typed_data() ||
      saved_in.typed_data() != saved->typed_data()) {
    return ffi::Error::InvalidArgument("lnorm lstm step: bad shapes");
  }
  const int64_t S = saved->element_count() / (T * B);
  const Params p{gx.typed_data(), b4.typed_data(), g4.typed_data(),
                 gH.typed_data(), bH.typed_data()};
  const float* mt = masked ? m.typed_data() + t * B : nullptr;
  ForRows(pool, B, H, [&](int64_t b0, int64_t b1, int64_t) {
    std::vector<float> cnew(H), gates(norm == 1 ? 4 * H : 0);
    for (int64_t b = b0; b < b1; ++b) {
      const float* ar = a.typed_data() + b * 4 * H;
      const float* xr = xw.typed_data() + (t * B + b) * 4 * H;
      const float* cr = c.typed_data() + b * H;
      const float* hr = h.typed_data() + b * H;
      float* row = saved->typed_data() + (t * B + b) * S;
      // 'layer' saves ah and ra, from which the backward recomputes the gates;
      // the others save the gates.
      float* act = norm == 1 ? gates.data() : row;
      float* cp = row + 4 * H + (norm == 1 ? 1 : 0);
      if (norm == 1) {
        const float rxb = rx.typed_data()[t * B + b];
        const float ms = SumOf(4 * H, [&](int64_t j) {
          const f8 v = LoadN(ar, j, 4 * H);
          return v * v;
        }) / (4 * H);
        const float ra = 1.0f / std::sqrt(ms + eps);
        float* ahr = row;
        ahr[4 * H] = ra;
        // ah into the saved row, and the gates from it, in one pass a gate.
        Gates(act, H, [&](int64_t k, int64_t j) {
          const int64_t off = k * H;
          const f8 ah = LoadN(ar + off, j, H) * ra;
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
      Map(cnew.data(), H, [&](int64_t j) {
        return LoadN(f, j, H) * LoadN(cr, j, H) + LoadN(i, j, H) * LoadN(g, j, H);
      });
      for (int64_t j = 0; j < H; ++j) cp[j] = cr[j];
      float* hn = h_out->typed_data() + b * H;
      if (norm == 0) {
        Map(hn, H, [&](int64_t j) {
          return LoadN(o, j, H) * lnorm::Tanh(LoadN(cnew.data(), j, H));
        });
      } else {
        const float mc =
            SumOf(H, [&](int64_t j) { return LoadN(cnew.data(), j, H); }) / H;
        // Zero-padded tails would add (0 - mc)^2 per pad: mask them out.
        const float vc = SumOf(H, [&](int64_t j) {
          f8 d = LoadN(cnew.data(), j, H) - mc;
          if (j + 8 > H) {
            for (int64_t k = H - j; k < 8; ++k) d[k] = 0;
          }
          return d * d;
        }) / H;
        const float rc = 1.0f / std::sqrt(vc + eps);
        cp[H] = mc;
        cp[H + 1] = rc;
        Map(hn, H, [&](int64_t j) {
          const f8 ch = (LoadN(cnew.data(), j, H) - mc) * rc;
          return LoadN(o, j, H) *
                 lnorm::Tanh(ch * LoadN(p.gH, j, H) + LoadN(p.bH, j, H));
        });
      }
      float* cn = c_out->typed_data() + b * H;
      float* yr = y_out->typed_data() + (t * B + b) * H;
      const bool keep = !masked || mt[b] != 0;
      if (masked) {
        float* hp = cp + H + (norm == 0 ? 0 : 2);
        for (int64_t j = 0; j < H; ++j) hp[j] = hr[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        yr[j] = keep ? hn[j] : 0.0f;
        cn[j] = keep ? cnew[j] : cr[j];
        hn[j] = keep ? hn[j] : hr[j];
      }
    }
  });
  return ffi::Error::Success();
}

// Time step t of the backward scan, over the whole arrays as the forward:
// it reads step t of dy (T, B, H), the saved rows, the mask and rx, and
// writes row t of d(h @ w) (T, B, 4H), aliased to its output; d(h @ w) at t
// is also an output of its own, for the matmul of the step. For 'layer' the
// first of the remaining buffers holds xw, and the kernel overwrites its row
// t, once read, with d xw: one (T, B, 4H) array for both. The sums are
// aliased too.
ffi::Error Backward(ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> saved,
                    ffi::Buffer<ffi::F32> m, ffi::Buffer<ffi::F32> rx,
                    ffi::Buffer<ffi::S32> step,
                    ffi::Buffer<ffi::F32> dc, ffi::Buffer<ffi::F32> dh,
                    ffi::Buffer<ffi::F32> gx, ffi::Buffer<ffi::F32> b4,
                    ffi::Buffer<ffi::F32> g4, ffi::Buffer<ffi::F32> gH,
                    ffi::Buffer<ffi::F32> bH, ffi::Buffer<ffi::F32> da_in,
                    ffi::RemainingArgs rest_in, int32_t norm, int32_t masked,
                    ffi::ResultBuffer<ffi::F32> dc_out,
                    ffi::ResultBuffer<ffi::F32> da_t,
                    ffi::ResultBuffer<ffi::F32> da_all,
                    ffi::RemainingRets rest, ffi::ThreadPool pool) {
  const int64_t H = gH.element_count(), B = H > 0 ? dc.element_count() / H : 0;
  if (B * H == 0) return ffi::Error::Success();  // an empty batch
  const int64_t T = dy.element_count() / (B * H);
  const int64_t t = step.typed_data()[0];
  const int64_t nsums = norm == 0 ? 1 : norm == 1 ? 5 : 3;
  const int64_t nrest = nsums + (norm == 1 ? 1 : 0);  // (dxw,) + sums
  if (static_cast<int64_t>(rest_in.size()) != nrest ||
      static_cast<int64_t>(rest.size()) != nrest || t < 0 || t >= T ||
      static_cast<int64_t>(da_all->element_count()) != T * B * 4 * H ||
      da_in.typed_data() != da_all->typed_data()) {
    return ffi::Error::InvalidArgument("lnorm lstm step: bad shapes");
  }
  const int64_t S = saved.element_count() / (T * B);
  std::vector<float*> sout(nsums);
  for (int64_t k = 0; k < nsums; ++k) {
    auto in = rest_in.get<ffi::Buffer<ffi::F32>>(nrest - nsums + k);
    auto out = rest.get<ffi::Buffer<ffi::F32>>(nrest - nsums + k);
    if (!in.has_value() || !out.has_value()) {
      return ffi::Error::InvalidArgument("lnorm lstm step: sums not f32");
    }
    // Aliased, as the scan asks. Each chunk of rows (ForRows) pools its
    // sums into one row, which stays in cache from one example to the next;
    // the scan sums the rows after it.
    if (in->typed_data() != (*out)->typed_data()) {
      return ffi::Error::InvalidArgument("lnorm lstm step: sums not aliased");
    }
    sout[k] = (*out)->typed_data();
  }
  float* dxw_out = nullptr;
  if (norm == 1) {
    auto r_in = rest_in.get<ffi::Buffer<ffi::F32>>(0);
    auto r = rest.get<ffi::Buffer<ffi::F32>>(0);
    if (!r_in.has_value() || !r.has_value() ||
        r_in->typed_data() != (*r)->typed_data() ||
        static_cast<int64_t>((*r)->element_count()) != T * B * 4 * H) {
      return ffi::Error::InvalidArgument("lnorm lstm step: bad d xw");
    }
    dxw_out = (*r)->typed_data() + t * B * 4 * H;
  }
  const float* mt = masked ? m.typed_data() + t * B : nullptr;
  const Params p{gx.typed_data(), b4.typed_data(), g4.typed_data(),
                 gH.typed_data(), bH.typed_data()};
  ForRows(pool, B, H, [&](int64_t b0, int64_t b1, int64_t slot) {
    std::vector<float> cnew(H), tc(H), ch(H), dcn(H), dcnew(H), dhc(H),
        dzbuf(norm == 1 ? 4 * H : 0), dxhbuf(norm == 1 ? 4 * H : 0),
        gates(norm == 1 ? 4 * H : 0);
    // This chunk's row of each sum: 4H wide (the bias, and for 'layer' the
    // gains of eq. 20), then H (the c-side gain and bias).
    std::vector<float*> srow(nsums);
    for (int64_t k = 0; k < nsums; ++k) {
      srow[k] = sout[k] + slot * (k < nsums - (norm == 0 ? 0 : 2) ? 4 * H : H);
    }
    for (int64_t b = b0; b < b1; ++b) {
      const float* row = saved.typed_data() + (t * B + b) * S;
      // 'layer': the input projection's row, which becomes d xw's.
      float* xr = norm == 1 ? dxw_out + b * 4 * H : nullptr;
      const float rxb = norm == 1 ? rx.typed_data()[t * B + b] : 1.0f;
      const float* ah = row;  // 'layer' only
      const float ra = norm == 1 ? ah[4 * H] : 0.0f;
      const float* cp = row + 4 * H + (norm == 1 ? 1 : 0);
      const float* act = row;
      if (norm == 1) {
        Gates(gates.data(), H, [&](int64_t k, int64_t j) {
          return LayerZ(LoadN(ah + k * H, j, H), xr, rxb, p, k * H, j, H);
        });
        act = gates.data();
      }
      const float *f = act, *i = act + H, *o = act + 2 * H, *g = act + 3 * H;
      Map(cnew.data(), H, [&](int64_t j) {
        return LoadN(f, j, H) * LoadN(cp, j, H) + LoadN(i, j, H) * LoadN(g, j, H);
      });
      const bool keep = !masked || mt[b] != 0;
      const float* dyr = dy.typed_data() + (t * B + b) * H;
      const float* dcr = dc.typed_data() + b * H;
      const float* dhr = dh.typed_data() + b * H;
      for (int64_t j = 0; j < H; ++j) dhc[j] = keep ? dhr[j] + dyr[j] : 0.0f;
      const float dc_keep = keep ? 1.0f : 0.0f;
      float* s_db4 = srow[0];
      if (norm == 0) {
        Map(tc.data(), H,
            [&](int64_t j) { return lnorm::Tanh(LoadN(cnew.data(), j, H)); });
        Map(dcnew.data(), H, [&](int64_t j) {
          const f8 t = LoadN(tc.data(), j, H);
          return LoadN(dcr, j, H) * dc_keep +
                 LoadN(dhc.data(), j, H) * LoadN(o, j, H) * (1.0f - t * t);
        });
      } else {
        // Two passes: the normalized c, its tanh, d(LN(c)) and the means of
        // d = dcn * gH and ch * d; then dc and the gain and bias sums.
        // Zero-padded tails of dhc make dcn, hence the padded terms, 0.
        const float mc = cp[H], rc = cp[H + 1];
        f8 m1v{}, m2v{};
        For8(H, [&](int64_t j, auto full) {
          constexpr bool F = decltype(full)::value;
          const f8 chv = (Ld<F>(cnew.data(), j, H) - mc) * rc;
          const f8 tv = lnorm::Tanh(chv * Ld<F>(p.gH, j, H) + Ld<F>(p.bH, j, H));
          const f8 dcnv = Ld<F>(dhc.data(), j, H) * Ld<F>(o, j, H) * (1.0f - tv * tv);
          const f8 d = dcnv * Ld<F>(p.gH, j, H);
          St<F>(ch.data(), j, H, chv);
          St<F>(tc.data(), j, H, tv);
          St<F>(dcn.data(), j, H, dcnv);
          m1v += d;
          m2v += chv * d;
        });
        const float m1 = lnorm::Sum(m1v) / H, m2 = lnorm::Sum(m2v) / H;
        float* s_gH = srow[nsums - 2];
        float* s_bH = srow[nsums - 1];
        For8(H, [&](int64_t j, auto full) {
          constexpr bool F = decltype(full)::value;
          const f8 dcnv = Ld<F>(dcn.data(), j, H), chv = Ld<F>(ch.data(), j, H);
          const f8 d = dcnv * Ld<F>(p.gH, j, H);
          St<F>(dcnew.data(), j, H,
                Ld<F>(dcr, j, H) * dc_keep + rc * ((d - m1) - chv * m2));
          St<F>(s_gH, j, H, Ld<F>(s_gH, j, H) + dcnv * chv);
          St<F>(s_bH, j, H, Ld<F>(s_bH, j, H) + dcnv);
        });
      }
      // d(pre-activations) dz, and the bias sum. Without 'layer' dz is the
      // output d(h @ w); with it, dz goes to a scratch row for the next pass.
      float* da = da_all->typed_data() + (t * B + b) * 4 * H;
      float* dz = norm == 1 ? dzbuf.data() : da;
      For8(H, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        const f8 fv = Ld<F>(f, j, H), iv = Ld<F>(i, j, H), ov = Ld<F>(o, j, H),
                 gv = Ld<F>(g, j, H), dcv = Ld<F>(dcnew.data(), j, H);
        const f8 dzk[4] = {
            dcv * Ld<F>(cp, j, H) * fv * (1.0f - fv),
            dcv * gv * iv * (1.0f - iv),
            Ld<F>(dhc.data(), j, H) * Ld<F>(tc.data(), j, H) * ov * (1.0f - ov),
            dcv * iv * (1.0f - gv * gv)};
        for (int64_t k = 0; k < 4; ++k) {
          St<F>(dz + k * H, j, H, dzk[k]);
          St<F>(s_db4 + k * H, j, H, Ld<F>(s_db4 + k * H, j, H) + dzk[k]);
        }
      });
      float* dxh = dxhbuf.data();
      // 'layer': the gain sums, d xh = dz gx into d xw's row and dz g4 into
      // d(h @ w)'s, and the sums of ah dz g4 and of xw dz gx that the two
      // norms' backward needs (padded tails add 0: dz is 0 there).
      f8 mad8{}, mx8{};
      if (norm == 1) {
        float* s_g4 = srow[1];
        float* s_gx = srow[2];
        For8(4 * H, [&](int64_t j, auto full) {
          constexpr bool F = decltype(full)::value;
          const int64_t n = 4 * H;
          const f8 dzv = Ld<F>(dz, j, n), ahv = Ld<F>(ah, j, n),
                   xwv = Ld<F>(xr, j, n);
          const f8 d = dzv * Ld<F>(p.g4, j, n), dxhv = dzv * Ld<F>(p.gx, j, n);
          St<F>(s_g4, j, n, Ld<F>(s_g4, j, n) + dzv * ahv);
          St<F>(s_gx, j, n, Ld<F>(s_gx, j, n) + dzv * (xwv * rxb));
          St<F>(da, j, n, d);
          St<F>(dxh, j, n, dxhv);
          mad8 += ahv * d;
          mx8 += dxhv * xwv;
        });
      }
      if (norm == 1) {
        // The two layer norms' backward: da from dz g4 and ah; d xw from
        // d xh = dz gx and xh = xw rx, where mean(xh d xh) xh = mx xw.
        const float mad = lnorm::Sum(mad8) / (4 * H);
        const float mx = rxb * rxb * lnorm::Sum(mx8) / (4 * H);
        For8(4 * H, [&](int64_t j, auto full) {
          constexpr bool F = decltype(full)::value;
          St<F>(da, j, 4 * H, ra * (Ld<F>(da, j, 4 * H) - Ld<F>(ah, j, 4 * H) * mad));
          St<F>(xr, j, 4 * H, rxb * (Ld<F>(dxh, j, 4 * H) - Ld<F>(xr, j, 4 * H) * mx));
        });
      }
      float* dco = dc_out->typed_data() + b * H;
      for (int64_t j = 0; j < H; ++j) dco[j] = keep ? dcnew[j] * f[j] : dcr[j];
      // The step's own copy of its rows, for the matmul, while they are hot.
      std::memcpy(da_t->typed_data() + b * 4 * H, da, 4 * H * sizeof(float));
    }
  });
  return ffi::Error::Success();
}

// Buffers for the scans' outputs, left as allocated: every row is written
// before it is read, so XLA's zero fill of a scan output would be wasted.
ffi::Error Uninitialized(ffi::RemainingRets) { return ffi::Error::Success(); }

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLstmFwd, Forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // a = h @ w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xw
                                  .Arg<ffi::Buffer<ffi::F32>>()  // c
                                  .Arg<ffi::Buffer<ffi::F32>>()  // h
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // rx
                                  .Arg<ffi::Buffer<ffi::S32>>()  // t
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // y
                                  .Arg<ffi::Buffer<ffi::F32>>()  // saved
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Attr<float>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // c_t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // h_t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // y
                                  .Ret<ffi::Buffer<ffi::F32>>()   // saved
                                  .Ctx<ffi::ThreadPool>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLstmBwd, Backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // saved
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // rx
                                  .Arg<ffi::Buffer<ffi::S32>>()  // t
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dc
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dh
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // d(h @ w)
                                  .RemainingArgs()                // (xw,) sums
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dc_{t-1}
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d(h @ w) at t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d(h @ w)
                                  .RemainingRets()                // (dxw,) sums
                                  .Ctx<ffi::ThreadPool>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormUninitialized, Uninitialized,
                              ffi::Ffi::Bind().RemainingRets());
