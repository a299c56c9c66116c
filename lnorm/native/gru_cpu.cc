// One GRU time step's elementwise work for XLA:CPU, forward and backward,
// called through the XLA FFI from the scans in lnorm/recurrent/gru_scan.py.
// The matmuls with [W_h | U] stay in XLA; everything between them is one
// kernel here, where XLA:CPU runs it as several small fusions and row
// reductions, whose fixed costs are most of the LN-GRU's overhead over the
// plain one.
//
// The equations are those of _step and of _gru_scan_bwd's step in
// gru_scan.py (their XLA versions), with norm 0 = 'none', 1 = 'layer'. For
// 'layer' the recurrent blocks au, ar, ac come from centred kernels, so each
// LN is an RMSNorm: one over [au, ar] (the gates') and one over ac (the
// candidate's). What the forward saves is what the XLA scan saves, the three
// blocks of h @ w (and under a mask the carry each step started from), so
// that either backward can follow either forward. Parameters 'none' does not
// use arrive as any buffer of their size; so does the mask with masked = 0.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rows.h"
#include "vec.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using lnorm::fr;
using lnorm::ForRow;
using lnorm::ForRows;
using lnorm::Ld;
using lnorm::LoadN;
using lnorm::St;
using lnorm::SumOf;

// 1/sigma of the two norms of a row ('layer'): rz over [au, ar], rc over ac,
// as _rsqrt_mean_square2 and rsqrt_mean_square take them. The forward and
// the backward's recompute both use it, so they get the same gates.
inline void RowNorms(const float* au, const float* ar, const float* ac,
                     int64_t H, float eps, float& rz, float& rc) {
  const auto sq = [H](const float* p) {
    return SumOf(H, [&](int64_t j) {
      const fr v = LoadN(p, j, H);
      return v * v;
    }) / H;
  };
  rz = 1.0f / std::sqrt(0.5f * (sq(au) + sq(ar)) + eps);
  rc = 1.0f / std::sqrt(sq(ac) + eps);
}

struct Params {
  const float *g2, *gH, *bH;
};

// The gates and the candidate at j < H of a row: z, r, hh and the
// candidate's recurrent term ac' (after its LN for 'layer'), as _step makes
// them.
template <bool kFull>
inline void Gates(int norm, const float* au, const float* ar, const float* ac,
                  const float* xu, const float* xr, const float* xc, float rz,
                  float rc, const Params& p, int64_t j, int64_t H, fr& z,
                  fr& r, fr& hh, fr& acn) {
  fr aun = Ld<kFull>(au, j, H), arn = Ld<kFull>(ar, j, H);
  acn = Ld<kFull>(ac, j, H);
  if (norm == 1) {
    aun = aun * rz * Ld<kFull>(p.g2, j, H);
    arn = arn * rz * Ld<kFull>(p.g2 + H, j, H);
    acn = acn * rc * Ld<kFull>(p.gH, j, H) + Ld<kFull>(p.bH, j, H);
  }
  z = lnorm::Sigmoid(aun + Ld<kFull>(xu, j, H));
  r = lnorm::Sigmoid(arn + Ld<kFull>(xr, j, H));
  hh = lnorm::Tanh(Ld<kFull>(xc, j, H) + r * acn);
}

// Time step t of the forward scan. It reads a = h @ w (B, 3H), step t of the
// whole inputs xu, xr, xc (T, B, H) and of the mask (T, B), and writes row t
// of y and of the saved blocks au, ar, ac (T, B, H each; under a mask also
// hp, the carry h), all aliased to their outputs, so that the scan has no
// per-step slices or updates to copy.
ffi::Error Forward(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> xu,
                   ffi::Buffer<ffi::F32> xr, ffi::Buffer<ffi::F32> xc,
                   ffi::Buffer<ffi::F32> h, ffi::Buffer<ffi::F32> m,
                   ffi::Buffer<ffi::S32> step, ffi::Buffer<ffi::F32> g2,
                   ffi::Buffer<ffi::F32> gH, ffi::Buffer<ffi::F32> bH,
                   ffi::Buffer<ffi::F32> y_in, ffi::Buffer<ffi::F32> au_in,
                   ffi::Buffer<ffi::F32> ar_in, ffi::Buffer<ffi::F32> ac_in,
                   ffi::RemainingArgs hp_in, int32_t norm, int32_t masked,
                   float eps, ffi::ResultBuffer<ffi::F32> h_out,
                   ffi::ResultBuffer<ffi::F32> y_out,
                   ffi::ResultBuffer<ffi::F32> au_out,
                   ffi::ResultBuffer<ffi::F32> ar_out,
                   ffi::ResultBuffer<ffi::F32> ac_out,
                   ffi::RemainingRets hp_out, ffi::ThreadPool pool) {
  const int64_t H = gH.element_count(), B = H > 0 ? h.element_count() / H : 0;
  if (B * H == 0) return ffi::Error::Success();  // an empty batch
  const int64_t T = y_out->element_count() / (B * H);
  const int64_t t = step.typed_data()[0];
  const int64_t nhp = masked ? 1 : 0;
  if (static_cast<int64_t>(a.element_count()) != B * 3 * H ||
      static_cast<int64_t>(xu.element_count()) != T * B * H ||
      static_cast<int64_t>(xr.element_count()) != T * B * H ||
      static_cast<int64_t>(xc.element_count()) != T * B * H ||
      static_cast<int64_t>(g2.element_count()) != 2 * H ||
      static_cast<int64_t>(hp_in.size()) != nhp ||
      static_cast<int64_t>(hp_out.size()) != nhp || t < 0 || t >= T ||
      y_in.typed_data() != y_out->typed_data() ||
      au_in.typed_data() != au_out->typed_data() ||
      ar_in.typed_data() != ar_out->typed_data() ||
      ac_in.typed_data() != ac_out->typed_data()) {
    return ffi::Error::InvalidArgument("lnorm gru step: bad shapes");
  }
  float* hp_all = nullptr;
  if (masked) {
    auto in = hp_in.get<ffi::Buffer<ffi::F32>>(0);
    auto out = hp_out.get<ffi::Buffer<ffi::F32>>(0);
    if (!in.has_value() || !out.has_value() ||
        in->typed_data() != (*out)->typed_data() ||
        static_cast<int64_t>((*out)->element_count()) != T * B * H) {
      return ffi::Error::InvalidArgument("lnorm gru step: bad carries");
    }
    hp_all = (*out)->typed_data();
  }
  const Params p{g2.typed_data(), gH.typed_data(), bH.typed_data()};
  const float* mt = masked ? m.typed_data() + t * B : nullptr;
  ForRows(pool, B, H, [&](int64_t b0, int64_t b1, int64_t) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t row = (t * B + b) * H;
      const float* ab = a.typed_data() + b * 3 * H;
      const float *au = ab, *ar = ab + H, *ac = ab + 2 * H;
      const float* hr = h.typed_data() + b * H;
      float rz = 1.0f, rc = 1.0f;
      if (norm == 1) RowNorms(au, ar, ac, H, eps, rz, rc);
      const bool keep = !masked || mt[b] != 0;
      float* yr = y_out->typed_data() + row;
      float* hn = h_out->typed_data() + b * H;
      ForRow(H, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        fr z, r, hh, acn;
        Gates<F>(norm, au, ar, ac, xu.typed_data() + row, xr.typed_data() + row,
                 xc.typed_data() + row, rz, rc, p, j, H, z, r, hh, acn);
        const fr hv = Ld<F>(hr, j, H);
        const fr hnew = (1.0f - z) * hv + z * hh;
        St<F>(yr, j, H, keep ? hnew : fr{});
        St<F>(hn, j, H, keep ? hnew : hv);
      });
      // The blocks of h @ w, for the backward to recompute the gates from.
      std::memcpy(au_out->typed_data() + row, au, H * sizeof(float));
      std::memcpy(ar_out->typed_data() + row, ar, H * sizeof(float));
      std::memcpy(ac_out->typed_data() + row, ac, H * sizeof(float));
      if (masked) std::memcpy(hp_all + row, hr, H * sizeof(float));
    }
  });
  return ffi::Error::Success();
}

// Time step t of the backward scan, over the whole arrays as the forward:
// it reads step t of dy, of the saved blocks au, ar, ac, of the carries hp
// (T, B, H each) and of the mask, and d h_t as two terms, dpart (what the
// previous kernel left) and dmm (the matmul of d(h @ w) at t + 1 with w^T),
// whose sum XLA would otherwise take in a kernel of its own. It writes row
// t of d(h @ w) (T, B, 3H), aliased to its output, and the same row as an
// output of its own for the step's matmul; the buffers of dxu, dxr and dxc
// hold xu, xr and xc, whose row t the kernel reads and then overwrites with
// their gradients: one (T, B, H) array each for both. It returns the next
// dpart: d h_{t-1} less its matmul term. The gain and bias sums ('layer')
// are aliased too; each chunk of rows (ForRows) pools them into a row of its
// own, and the scan sums the rows after it.
ffi::Error Backward(ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> au_all,
                    ffi::Buffer<ffi::F32> ar_all, ffi::Buffer<ffi::F32> ac_all,
                    ffi::Buffer<ffi::F32> hp_all, ffi::Buffer<ffi::F32> m,
                    ffi::Buffer<ffi::S32> step, ffi::Buffer<ffi::F32> dpart,
                    ffi::Buffer<ffi::F32> dmm, ffi::Buffer<ffi::F32> g2,
                    ffi::Buffer<ffi::F32> gH, ffi::Buffer<ffi::F32> bH,
                    ffi::Buffer<ffi::F32> dxu_in, ffi::Buffer<ffi::F32> dxr_in,
                    ffi::Buffer<ffi::F32> dxc_in, ffi::Buffer<ffi::F32> da_in,
                    ffi::RemainingArgs sums_in, int32_t norm, int32_t masked,
                    float eps, ffi::ResultBuffer<ffi::F32> dpart_out,
                    ffi::ResultBuffer<ffi::F32> da_t,
                    ffi::ResultBuffer<ffi::F32> dxu,
                    ffi::ResultBuffer<ffi::F32> dxr,
                    ffi::ResultBuffer<ffi::F32> dxc,
                    ffi::ResultBuffer<ffi::F32> da_all,
                    ffi::RemainingRets sums, ffi::ThreadPool pool) {
  const int64_t H = gH.element_count(),
                B = H > 0 ? dpart.element_count() / H : 0;
  if (B * H == 0) return ffi::Error::Success();  // an empty batch
  const int64_t T = dy.element_count() / (B * H);
  const int64_t t = step.typed_data()[0];
  const int64_t nsums = norm == 1 ? 3 : 0;  // d g_2H, d g_H, d b_H
  const auto size = [](auto& buf) {
    return static_cast<int64_t>(buf.element_count());
  };
  if (size(au_all) != T * B * H || size(ar_all) != T * B * H ||
      size(ac_all) != T * B * H || size(hp_all) != T * B * H ||
      size(dmm) != B * H || size(g2) != 2 * H ||
      static_cast<int64_t>(sums_in.size()) != nsums ||
      static_cast<int64_t>(sums.size()) != nsums || t < 0 || t >= T ||
      static_cast<int64_t>(da_all->element_count()) != T * B * 3 * H ||
      static_cast<int64_t>(dxu->element_count()) != T * B * H ||
      static_cast<int64_t>(dxr->element_count()) != T * B * H ||
      static_cast<int64_t>(dxc->element_count()) != T * B * H ||
      da_in.typed_data() != da_all->typed_data() ||
      dxu_in.typed_data() != dxu->typed_data() ||
      dxr_in.typed_data() != dxr->typed_data() ||
      dxc_in.typed_data() != dxc->typed_data()) {
    return ffi::Error::InvalidArgument("lnorm gru step: bad shapes");
  }
  float* sout[3] = {};
  for (int64_t k = 0; k < nsums; ++k) {
    auto in = sums_in.get<ffi::Buffer<ffi::F32>>(k);
    auto out = sums.get<ffi::Buffer<ffi::F32>>(k);
    if (!in.has_value() || !out.has_value() ||
        in->typed_data() != (*out)->typed_data() ||
        static_cast<int64_t>((*out)->element_count()) != B * (k ? H : 2 * H)) {
      return ffi::Error::InvalidArgument("lnorm gru step: bad sums");
    }
    sout[k] = (*out)->typed_data();
  }
  const Params p{g2.typed_data(), gH.typed_data(), bH.typed_data()};
  const float* mt = masked ? m.typed_data() + t * B : nullptr;
  ForRows(pool, B, H, [&](int64_t b0, int64_t b1, int64_t slot) {
    // This chunk's rows of the sums: d g_2H, then d g_H and d b_H.
    float* s_g2 = norm == 1 ? sout[0] + slot * 2 * H : nullptr;
    float* s_gH = norm == 1 ? sout[1] + slot * H : nullptr;
    float* s_bH = norm == 1 ? sout[2] + slot * H : nullptr;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t row = (t * B + b) * H;
      const float *au = au_all.typed_data() + row,
                  *ar = ar_all.typed_data() + row,
                  *ac = ac_all.typed_data() + row,
                  *hp = hp_all.typed_data() + row,
                  *dyr = dy.typed_data() + row,
                  *dpr = dpart.typed_data() + b * H,
                  *dmr = dmm.typed_data() + b * H;
      // xu, xr, xc at t, read before they turn into their gradients.
      float *xu = dxu->typed_data() + row, *xr = dxr->typed_data() + row,
            *xc = dxc->typed_data() + row;
      float* da = da_all->typed_data() + (t * B + b) * 3 * H;
      float* dpo = dpart_out->typed_data() + b * H;
      float rz = 1.0f, rc = 1.0f;
      if (norm == 1) RowNorms(au, ar, ac, H, eps, rz, rc);
      const bool keep = !masked || mt[b] != 0;
      // One pass for the gates' and the candidate's gradients; for 'layer'
      // it leaves their gained versions (dug, drg, dcg) in da's row for the
      // norms' backward, with the row sums that needs. Padded tails add 0:
      // dh is 0 there, and so is every gradient.
      fr mu8{}, mr8{}, mc8{};
      ForRow(H, [&](int64_t j, auto full) {
        constexpr bool F = decltype(full)::value;
        fr z, r, hh, acn;
        Gates<F>(norm, au, ar, ac, xu, xr, xc, rz, rc, p, j, H, z, r, hh, acn);
        const fr dh = Ld<F>(dpr, j, H) + Ld<F>(dmr, j, H);
        const fr dhn = keep ? dh + Ld<F>(dyr, j, H) : fr{};
        const fr dkeep = keep ? fr{} : dh;
        // d(au' + xu), d(xc + r ac'), d(ar' + xr):
        const fr du = dhn * (hh - Ld<F>(hp, j, H)) * z * (1.0f - z);
        const fr dc = dhn * z * (1.0f - hh * hh);
        const fr dr = dc * acn * r * (1.0f - r);
        const fr dac = dc * r;
        St<F>(xu, j, H, du);
        St<F>(xr, j, H, dr);
        St<F>(xc, j, H, dc);
        St<F>(dpo, j, H, dhn * (1.0f - z) + dkeep);
        if (norm == 1) {
          const fr auh = Ld<F>(au, j, H) * rz, arh = Ld<F>(ar, j, H) * rz,
                   ach = Ld<F>(ac, j, H) * rc;
          St<F>(s_g2, j, H, Ld<F>(s_g2, j, H) + du * auh);
          St<F>(s_g2 + H, j, H, Ld<F>(s_g2 + H, j, H) + dr * arh);
          St<F>(s_gH, j, H, Ld<F>(s_gH, j, H) + dac * ach);
          St<F>(s_bH, j, H, Ld<F>(s_bH, j, H) + dac);
          const fr dug = du * Ld<F>(p.g2, j, H),
                   drg = dr * Ld<F>(p.g2 + H, j, H),
                   dcg = dac * Ld<F>(p.gH, j, H);
          mu8 += dug * auh;
          mr8 += drg * arh;
          mc8 += dcg * ach;
          St<F>(da, j, H, dug);
          St<F>(da + H, j, H, drg);
          St<F>(da + 2 * H, j, H, dcg);
        } else {
          St<F>(da, j, H, du);
          St<F>(da + H, j, H, dr);
          St<F>(da + 2 * H, j, H, dac);
        }
      });
      if (norm == 1) {
        // The two RMSNorms' backward: r (d - x_hat mean(d x_hat)), the
        // gates' mean over both of their blocks.
        const float mz = 0.5f * (lnorm::Sum(mu8) / H + lnorm::Sum(mr8) / H);
        const float mc = lnorm::Sum(mc8) / H;
        ForRow(H, [&](int64_t j, auto full) {
          constexpr bool F = decltype(full)::value;
          St<F>(da, j, H, rz * (Ld<F>(da, j, H) - Ld<F>(au, j, H) * rz * mz));
          St<F>(da + H, j, H,
                rz * (Ld<F>(da + H, j, H) - Ld<F>(ar, j, H) * rz * mz));
          St<F>(da + 2 * H, j, H,
                rc * (Ld<F>(da + 2 * H, j, H) - Ld<F>(ac, j, H) * rc * mc));
        });
      }
      // The step's own copy of its row, for the matmul, while it is hot.
      std::memcpy(da_t->typed_data() + b * 3 * H, da, 3 * H * sizeof(float));
    }
  });
  return ffi::Error::Success();
}

// Buffers for the scans' outputs, left as allocated: every row is written
// before it is read, so XLA's zero fill of a scan output would be wasted.
ffi::Error Uninitialized(ffi::RemainingRets) { return ffi::Error::Success(); }

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormGruFwd, Forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // a = h @ w
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xu
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xr
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xc
                                  .Arg<ffi::Buffer<ffi::F32>>()  // h
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::S32>>()  // t
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g_2H
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g_H
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b_H
                                  .Arg<ffi::Buffer<ffi::F32>>()  // y
                                  .Arg<ffi::Buffer<ffi::F32>>()  // au
                                  .Arg<ffi::Buffer<ffi::F32>>()  // ar
                                  .Arg<ffi::Buffer<ffi::F32>>()  // ac
                                  .RemainingArgs()                // (hp,)
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Attr<float>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // h_t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // y
                                  .Ret<ffi::Buffer<ffi::F32>>()   // au
                                  .Ret<ffi::Buffer<ffi::F32>>()   // ar
                                  .Ret<ffi::Buffer<ffi::F32>>()   // ac
                                  .RemainingRets()                // (hp,)
                                  .Ctx<ffi::ThreadPool>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormGruBwd, Backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // au
                                  .Arg<ffi::Buffer<ffi::F32>>()  // ar
                                  .Arg<ffi::Buffer<ffi::F32>>()  // ac
                                  .Arg<ffi::Buffer<ffi::F32>>()  // hp
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mask
                                  .Arg<ffi::Buffer<ffi::S32>>()  // t
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dpart
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dmm
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g_2H
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g_H
                                  .Arg<ffi::Buffer<ffi::F32>>()  // b_H
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xu -> dxu
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xr -> dxr
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xc -> dxc
                                  .Arg<ffi::Buffer<ffi::F32>>()  // d(h @ w)
                                  .RemainingArgs()                // sums
                                  .Attr<int32_t>("norm")
                                  .Attr<int32_t>("masked")
                                  .Attr<float>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dpart
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d(h @ w) at t
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dxu
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dxr
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dxc
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d(h @ w)
                                  .RemainingRets()                // sums
                                  .Ctx<ffi::ThreadPool>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(LnormUninitialized, Uninitialized,
                              ffi::Ffi::Bind().RemainingRets());
