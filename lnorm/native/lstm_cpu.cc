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
// not use arrive as ones (gains) and zeros (biases); an unmasked scan passes
// a mask of ones with masked = 0.

#include <cmath>
#include <cstdint>
#include <vector>

#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using lnorm::f8;
using lnorm::Load;
using lnorm::Store;

// out[j] = fn(j) for the 8-wide vector starting at j, for j < n; the tail
// goes through a padded temporary.
template <typename Fn>
inline void Map(float* out, int64_t n, const Fn& fn) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) Store(out + j, fn(j));
  if (j < n) {
    float tmp[8];
    Store(tmp, fn(j));
    for (int64_t k = 0; j + k < n; ++k) out[j + k] = tmp[k];
  }
}

// Loads 8 floats at p + j, reading past n only into the temporary.
inline f8 LoadN(const float* p, int64_t j, int64_t n) {
  if (j + 8 <= n) return Load(p + j);
  float tmp[8] = {};
  for (int64_t k = 0; j + k < n; ++k) tmp[k] = p[j + k];
  return Load(tmp);
}

// sum_j fn(j) over 8-wide vectors (tails zero-padded by LoadN).
template <typename Fn>
inline float SumOf(int64_t n, const Fn& fn) {
  f8 s{};
  for (int64_t j = 0; j < n; j += 8) s += fn(j);
  return lnorm::Sum(s);
}

struct Params {
  const float *gx, *b4, *g4, *gH, *bH;
};

// The gates from their pre-activations: sigmoid for f, i, o; tanh for g.
inline void Gates(float* act, const float* z, int64_t H) {
  Map(act, 3 * H, [&](int64_t j) { return lnorm::Sigmoid(LoadN(z, j, 3 * H)); });
  Map(act + 3 * H, H,
      [&](int64_t j) { return lnorm::Tanh(LoadN(z + 3 * H, j, H)); });
}

ffi::Error Forward(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> xh,
                   ffi::Buffer<ffi::F32> c, ffi::Buffer<ffi::F32> h,
                   ffi::Buffer<ffi::F32> m, ffi::Buffer<ffi::F32> gx,
                   ffi::Buffer<ffi::F32> b4, ffi::Buffer<ffi::F32> g4,
                   ffi::Buffer<ffi::F32> gH, ffi::Buffer<ffi::F32> bH,
                   int32_t norm, int32_t masked, float eps,
                   ffi::ResultBuffer<ffi::F32> c_out,
                   ffi::ResultBuffer<ffi::F32> h_out,
                   ffi::ResultBuffer<ffi::F32> y_out,
                   ffi::ResultBuffer<ffi::F32> saved) {
  const int64_t B = m.element_count(), H = gH.element_count();
  if (static_cast<int64_t>(a.element_count()) != B * 4 * H ||
      static_cast<int64_t>(c.element_count()) != B * H) {
    return ffi::Error::InvalidArgument("lnorm lstm step: bad shapes");
  }
  const int64_t S = saved->element_count() / B;
  const Params p{gx.typed_data(), b4.typed_data(), g4.typed_data(),
                 gH.typed_data(), bH.typed_data()};
  std::vector<float> zbuf(4 * H), actbuf(4 * H), cnew(H);
  for (int64_t b = 0; b < B; ++b) {
    const float* ar = a.typed_data() + b * 4 * H;
    const float* xr = xh.typed_data() + b * 4 * H;
    const float* cr = c.typed_data() + b * H;
    const float* hr = h.typed_data() + b * H;
    float* row = saved->typed_data() + b * S;
    float* z = zbuf.data();
    float* act = norm == 1 ? actbuf.data() : row;  // 'none', 'layer_c' save act
    float* cp = row + 4 * H + (norm == 1 ? 1 : 0);
    if (norm == 1) {
      const float ms = SumOf(4 * H, [&](int64_t j) {
        const f8 v = LoadN(ar, j, 4 * H);
        return v * v;
      }) / (4 * H);
      const float ra = 1.0f / std::sqrt(ms + eps);
      Map(row, 4 * H, [&](int64_t j) { return LoadN(ar, j, 4 * H) * ra; });
      row[4 * H] = ra;
      Map(z, 4 * H, [&](int64_t j) {
        return LoadN(row, j, 4 * H) * LoadN(p.g4, j, 4 * H) +
               LoadN(xr, j, 4 * H) * LoadN(p.gx, j, 4 * H) + LoadN(p.b4, j, 4 * H);
      });
    } else {
      Map(z, 4 * H, [&](int64_t j) {
        return LoadN(ar, j, 4 * H) + LoadN(xr, j, 4 * H) * LoadN(p.gx, j, 4 * H) +
               LoadN(p.b4, j, 4 * H);
      });
    }
    Gates(act, z, H);
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
      const float mc = SumOf(H, [&](int64_t j) { return LoadN(cnew.data(), j, H); }) / H;
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
    float* yr = y_out->typed_data() + b * H;
    const bool keep = !masked || m.typed_data()[b] != 0;
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
  return ffi::Error::Success();
}

ffi::Error Backward(ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> saved,
                    ffi::Buffer<ffi::F32> xh, ffi::Buffer<ffi::F32> m,
                    ffi::Buffer<ffi::F32> dc, ffi::Buffer<ffi::F32> dh,
                    ffi::Buffer<ffi::F32> gx, ffi::Buffer<ffi::F32> b4,
                    ffi::Buffer<ffi::F32> g4, ffi::Buffer<ffi::F32> gH,
                    ffi::Buffer<ffi::F32> bH, ffi::RemainingArgs sums_in,
                    int32_t norm, int32_t masked,
                    ffi::ResultBuffer<ffi::F32> dc_out,
                    ffi::ResultBuffer<ffi::F32> da_out,
                    ffi::RemainingRets rest) {
  const int64_t B = m.element_count(), H = gH.element_count();
  const int64_t S = saved.element_count() / B;
  const int64_t nsums = norm == 0 ? 1 : norm == 1 ? 5 : 3;
  const int64_t nrest = nsums + (norm == 1 ? 1 : 0);  // (dxh,) + sums
  if (static_cast<int64_t>(sums_in.size()) != nsums ||
      static_cast<int64_t>(rest.size()) != nrest) {
    return ffi::Error::InvalidArgument("lnorm lstm step: bad sums");
  }
  std::vector<const float*> sin(nsums);
  std::vector<float*> sout(nsums);
  for (int64_t k = 0; k < nsums; ++k) {
    auto in = sums_in.get<ffi::Buffer<ffi::F32>>(k);
    auto out = rest.get<ffi::Buffer<ffi::F32>>(nrest - nsums + k);
    if (!in.has_value() || !out.has_value()) {
      return ffi::Error::InvalidArgument("lnorm lstm step: sums not f32");
    }
    sin[k] = in->typed_data();
    sout[k] = (*out)->typed_data();
  }
  float* dxh_out = nullptr;
  if (norm == 1) {
    auto r = rest.get<ffi::Buffer<ffi::F32>>(0);
    if (!r.has_value()) return ffi::Error::InvalidArgument("lnorm lstm: dxh");
    dxh_out = (*r)->typed_data();
  }
  const Params p{gx.typed_data(), b4.typed_data(), g4.typed_data(),
                 gH.typed_data(), bH.typed_data()};
  std::vector<float> zbuf(4 * H), actbuf(4 * H), cnew(H), tc(H), dz(4 * H),
      ch(H), dcn(H), dcnew(H), dhc(H);
  for (int64_t b = 0; b < B; ++b) {
    const float* row = saved.typed_data() + b * S;
    const float* xr = xh.typed_data() + b * 4 * H;
    const float* act = row;
    const float* ah = row;
    float ra = 0;
    if (norm == 1) {
      ra = row[4 * H];
      Map(zbuf.data(), 4 * H, [&](int64_t j) {
        return LoadN(ah, j, 4 * H) * LoadN(p.g4, j, 4 * H) +
               LoadN(xr, j, 4 * H) * LoadN(p.gx, j, 4 * H) + LoadN(p.b4, j, 4 * H);
      });
      Gates(actbuf.data(), zbuf.data(), H);
      act = actbuf.data();
    }
    const float* cp = row + 4 * H + (norm == 1 ? 1 : 0);
    const float *f = act, *i = act + H, *o = act + 2 * H, *g = act + 3 * H;
    Map(cnew.data(), H, [&](int64_t j) {
      return LoadN(f, j, H) * LoadN(cp, j, H) + LoadN(i, j, H) * LoadN(g, j, H);
    });
    const bool keep = !masked || m.typed_data()[b] != 0;
    const float* dyr = dy.typed_data() + b * H;
    const float* dcr = dc.typed_data() + b * H;
    const float* dhr = dh.typed_data() + b * H;
    for (int64_t j = 0; j < H; ++j) dhc[j] = keep ? dhr[j] + dyr[j] : 0.0f;
    const float dc_keep = keep ? 1.0f : 0.0f;
    float* s_db4 = sout[0] + b * 4 * H;
    if (norm == 0) {
      Map(tc.data(), H, [&](int64_t j) { return lnorm::Tanh(LoadN(cnew.data(), j, H)); });
      Map(dcnew.data(), H, [&](int64_t j) {
        const f8 t = LoadN(tc.data(), j, H);
        return LoadN(dcr, j, H) * dc_keep +
               LoadN(dhc.data(), j, H) * LoadN(o, j, H) * (1.0f - t * t);
      });
    } else {
      const float mc = cp[H], rc = cp[H + 1];
      Map(ch.data(), H, [&](int64_t j) { return (LoadN(cnew.data(), j, H) - mc) * rc; });
      Map(tc.data(), H, [&](int64_t j) {
        return lnorm::Tanh(LoadN(ch.data(), j, H) * LoadN(p.gH, j, H) + LoadN(p.bH, j, H));
      });
      Map(dcn.data(), H, [&](int64_t j) {
        const f8 t = LoadN(tc.data(), j, H);
        return LoadN(dhc.data(), j, H) * LoadN(o, j, H) * (1.0f - t * t);
      });
      // d = dcn * gH; zero-padded tails of dcn make the padded terms 0.
      const float m1 = SumOf(H, [&](int64_t j) {
        return LoadN(dcn.data(), j, H) * LoadN(p.gH, j, H);
      }) / H;
      const float m2 = SumOf(H, [&](int64_t j) {
        return LoadN(ch.data(), j, H) * LoadN(dcn.data(), j, H) * LoadN(p.gH, j, H);
      }) / H;
      Map(dcnew.data(), H, [&](int64_t j) {
        const f8 d = LoadN(dcn.data(), j, H) * LoadN(p.gH, j, H);
        return LoadN(dcr, j, H) * dc_keep +
               rc * ((d - m1) - LoadN(ch.data(), j, H) * m2);
      });
      float* s_gH = sout[nsums - 2] + b * H;
      float* s_bH = sout[nsums - 1] + b * H;
      const float* i_gH = sin[nsums - 2] + b * H;
      const float* i_bH = sin[nsums - 1] + b * H;
      Map(s_gH, H, [&](int64_t j) {
        return LoadN(i_gH, j, H) + LoadN(dcn.data(), j, H) * LoadN(ch.data(), j, H);
      });
      Map(s_bH, H, [&](int64_t j) { return LoadN(i_bH, j, H) + LoadN(dcn.data(), j, H); });
    }
    // d(pre-activations); without 'layer' that is d(h @ w), the output.
    float* da = da_out->typed_data() + b * 4 * H;
    float* dzp = norm == 1 ? dz.data() : da;
    Map(dzp, H, [&](int64_t j) {
      const f8 fv = LoadN(f, j, H);
      return LoadN(dcnew.data(), j, H) * LoadN(cp, j, H) * fv * (1.0f - fv);
    });
    Map(dzp + H, H, [&](int64_t j) {
      const f8 iv = LoadN(i, j, H);
      return LoadN(dcnew.data(), j, H) * LoadN(g, j, H) * iv * (1.0f - iv);
    });
    Map(dzp + 2 * H, H, [&](int64_t j) {
      const f8 ov = LoadN(o, j, H);
      return LoadN(dhc.data(), j, H) * LoadN(tc.data(), j, H) * ov * (1.0f - ov);
    });
    Map(dzp + 3 * H, H, [&](int64_t j) {
      const f8 gv = LoadN(g, j, H);
      return LoadN(dcnew.data(), j, H) * LoadN(i, j, H) * (1.0f - gv * gv);
    });
    const float* i_db4 = sin[0] + b * 4 * H;
    Map(s_db4, 4 * H, [&](int64_t j) { return LoadN(i_db4, j, 4 * H) + LoadN(dzp, j, 4 * H); });
    if (norm == 1) {
      const float* i_g4 = sin[1] + b * 4 * H;
      const float* i_gx = sin[2] + b * 4 * H;
      float* s_g4 = sout[1] + b * 4 * H;
      float* s_gx = sout[2] + b * 4 * H;
      Map(s_g4, 4 * H, [&](int64_t j) {
        return LoadN(i_g4, j, 4 * H) + LoadN(dzp, j, 4 * H) * LoadN(ah, j, 4 * H);
      });
      Map(s_gx, 4 * H, [&](int64_t j) {
        return LoadN(i_gx, j, 4 * H) + LoadN(dzp, j, 4 * H) * LoadN(xr, j, 4 * H);
      });
      const float mad = SumOf(4 * H, [&](int64_t j) {
        return LoadN(ah, j, 4 * H) * LoadN(dzp, j, 4 * H) * LoadN(p.g4, j, 4 * H);
      }) / (4 * H);
      Map(da, 4 * H, [&](int64_t j) {
        const f8 d = LoadN(dzp, j, 4 * H) * LoadN(p.g4, j, 4 * H);
        return ra * (d - LoadN(ah, j, 4 * H) * mad);
      });
      float* dx = dxh_out + b * 4 * H;
      Map(dx, 4 * H, [&](int64_t j) {
        return LoadN(dzp, j, 4 * H) * LoadN(p.gx, j, 4 * H);
      });
    }
    float* dco = dc_out->typed_data() + b * H;
    for (int64_t j = 0; j < H; ++j) dco[j] = keep ? dcnew[j] * f[j] : dcr[j];
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLstmFwd, Forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // a = h @ w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xh
                                  .Arg<ffi::Buffer<ffi::F32>>()  // c
                                  .Arg<ffi::Buffer<ffi::F32>>()  // h
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bH
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Attr<float>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // c_t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // h_t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // y_t
                                  .Ret<ffi::Buffer<ffi::F32>>());  // saved row

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormLstmBwd, Backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // saved row
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xh
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dc
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dh
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gx
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g4
                                  .Arg<ffi::Buffer<ffi::F32>>()  // gH
                                  .Arg<ffi::Buffer<ffi::F32>>()  // bH
                                  .RemainingArgs()                // sums
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dc_{t-1}
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d(h @ w)
                                  .RemainingRets());              // (dxh,) sums
