"""The scan behind ``GRU`` (``gru.py``): a custom VJP with a hand-written
backward, as ``lstm_scan`` is for the LSTM.

``gru_scan`` computes what scanning ``GRUCell`` over the steps computes, given
the input side of every step (made before the scan), reorganised for speed.
BENCHMARKS.md ("The GRU's scan") has the measurements behind each choice:

* The backward is a scan that does per step only what is sequential; the W_h
  gradient is one (T*B, H)^T @ (T*B, 3H) matmul after it (autodiff of the
  scan adds an (H, 3H) outer product into its carry every step), and the
  gain and bias gradients are summed in its carry.
* The update gate, the reset gate and the candidate each have arrays of
  their own: the input side (T, B, H) each, sliced once before the scan, and
  ``h @ w``, sliced before any transcendental and saved as three (T, B, H)
  arrays, from which (with the input side and the previous carry) the
  backward recomputes the gates. Inside a scan, XLA:CPU runs a fusion that
  reads column slices of a sigmoid 4-8x slower than two sigmoids of whole
  rows (``scripts.bench.gru_parts``).
* For 'layer' the caller passes ``w`` with each LN's columns centred
  (``center``): LN(h @ k) = RMSNorm(h @ center(k)) exactly, so each LN is one
  reduction a row, forward and backward.
* On CPU (float32, one device), each step's elementwise work, everything
  between the matmuls with w, is one native kernel
  (``lnorm/native/gru_cpu.cc``) instead of XLA's small fusions and row
  reductions, as ``lstm_scan``'s are; the kernels take the whole (T, ...)
  arrays and the step, and write their rows in place. They save what the
  XLA scan saves, so either backward follows either forward.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax.typing import Array
import numpy as np

from lnorm.native.dispatch import cpu_native
from lnorm.recurrent.lstm_scan import _native_ok, rsqrt_mean_square, sum_outer

# The norms this scan implements: ``GRU`` takes it for them and scans
# ``GRUCell`` for any other.
NORMS = ('none', 'layer')


def _rsqrt_mean_square2(a_BxH: Array, b_BxH: Array, eps: float) -> Array:
  """``rsqrt_mean_square`` of [a, b] over the last axis (one LN over both),
  without their concatenation."""
  acc = jnp.promote_types(a_BxH.dtype, jnp.float32)
  ms = 0.5 * (jnp.mean(jnp.square(a_BxH.astype(acc)), -1, keepdims=True)
              + jnp.mean(jnp.square(b_BxH.astype(acc)), -1, keepdims=True))
  return jax.lax.rsqrt(ms + eps).astype(a_BxH.dtype)


def _step(norm, eps, a3, xu_BxH, xr_BxH, xc_BxH, h_BxH, g_2H, g_H, b_H):
  """One step after ``a = h @ w``, given as its three (B, H) blocks: h_new and
  what the backward needs."""
  au_BxH, ar_BxH, ac_BxH = a3
  H = h_BxH.shape[-1]
  rz_Bx1 = rc_Bx1 = None
  if norm == 'layer':
    rz_Bx1, rc_Bx1 = _rsqrt_mean_square2(au_BxH, ar_BxH, eps), rsqrt_mean_square(ac_BxH, eps)
    au_BxH = au_BxH * rz_Bx1 * g_2H[None, :H]
    ar_BxH = ar_BxH * rz_Bx1 * g_2H[None, H:]
    ac_BxH = ac_BxH * rc_Bx1 * g_H[None] + b_H[None]
  z_BxH = jax.nn.sigmoid(au_BxH + xu_BxH)
  r_BxH = jax.nn.sigmoid(ar_BxH + xr_BxH)
  hh_BxH = jnp.tanh(xc_BxH + r_BxH * ac_BxH)
  h_new = (1.0 - z_BxH) * h_BxH + z_BxH * hh_BxH
  return h_new, (z_BxH, r_BxH, hh_BxH, ac_BxH, rz_Bx1, rc_Bx1)


_NORM_CODE = {'none': 0, 'layer': 1}


def _uninitialized(*shapes: tuple[int, ...]) -> list[Array]:
  """float32 buffers of these shapes, unwritten: for native scan outputs,
  every row of which the kernels write before anything reads it."""
  return jax.ffi.ffi_call(
      'lnorm_uninitialized',
      [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes],
      has_side_effect=True)()


def _native_inputs(B, H, arrays, m_TxBx1, g_2H, g_H, b_H):
  """The kernels' operands: the whole (T, ...) ``arrays`` and the mask (any
  buffer when absent), and the parameters (fills for 'none', which reads
  none). Behind the barrier, a constant array (a mask of ones; the
  cotangent of a loss like sum(y)) and the fills are loop-invariant data,
  not constants that XLA sinks into the loop and builds anew every step."""
  f32 = jnp.float32
  m_arg = jnp.ones((B,), f32) if m_TxBx1 is None else m_TxBx1[..., 0].astype(f32)
  if g_2H is None:
    g_2H, g_H, b_H = jnp.ones((2 * H,), f32), jnp.ones((H,), f32), jnp.zeros((H,), f32)
  *arrays, m_arg, g_2H, g_H, b_H = jax.lax.optimization_barrier(
      (*arrays, m_arg, g_2H, g_H, b_H))
  return arrays, m_arg, (g_2H, g_H, b_H)


def _forward(norm, eps, unroll, xu, xr, xc, w_Hx3H, g_2H, g_H, b_H, h0_BxH, m_TxBx1):
  H = h0_BxH.shape[-1]

  # The scans take every array as an argument: the custom JVP of cpu_native
  # differentiates (through xla_scan) with respect to arguments.
  def xla_scan(xu, xr, xc, w_Hx3H, g_2H, g_H, b_H, h0_BxH, m_TxBx1):
    def step(h_BxH, inp):
      xu_BxH, xr_BxH, xc_BxH, m_Bx1 = inp
      a_Bx3H = h_BxH @ w_Hx3H
      a3 = (a_Bx3H[:, :H], a_Bx3H[:, H:2 * H], a_Bx3H[:, 2 * H:])
      h_new, _ = _step(norm, eps, a3, xu_BxH, xr_BxH, xc_BxH, h_BxH, g_2H, g_H, b_H)
      if m_Bx1 is None:
        return h_new, (h_new, a3)
      return (jnp.where(m_Bx1, h_new, h_BxH),
              (jnp.where(m_Bx1, h_new, jnp.zeros_like(h_new)), a3, h_BxH))

    return jax.lax.scan(step, h0_BxH, (xu, xr, xc, m_TxBx1), unroll=unroll)

  def native_scan(xu, xr, xc, w_Hx3H, g_2H, g_H, b_H, h0_BxH, m_TxBx1):
    # Each step's kernel reads its row of the inputs and writes its rows of
    # the outputs (y, the three blocks of h @ w, the carry under a mask) in
    # place, as lstm_scan's do.
    T, B = xu.shape[:2]
    masked = m_TxBx1 is not None
    (xu, xr, xc), m_arg, params = _native_inputs(B, H, (xu, xr, xc), m_TxBx1, g_2H, g_H, b_H)
    sds = jax.ShapeDtypeStruct((T, B, H), jnp.float32)
    n_out = 4 + masked  # y, au, ar, ac (, hp)
    kernel = jax.ffi.ffi_call(
        'lnorm_gru_fwd', (jax.ShapeDtypeStruct((B, H), jnp.float32),) + (sds,) * n_out,
        input_output_aliases={10 + k: 1 + k for k in range(n_out)}, vmap_method='sequential')

    def body(t, carry):
      h_BxH, outs = carry
      h_BxH, *outs = kernel(h_BxH @ w_Hx3H, xu, xr, xc, h_BxH, m_arg, jnp.asarray(t, jnp.int32),
                            *params, *outs, norm=np.int32(_NORM_CODE[norm]),
                            masked=np.int32(masked), eps=np.float32(eps))
      return h_BxH, tuple(outs)

    h_BxH, (y, au, ar, ac, *hp) = jax.lax.fori_loop(
        0, T, body, (h0_BxH, tuple(_uninitialized(*[(T, B, H)] * n_out))), unroll=unroll)
    return h_BxH, (y, (au, ar, ac), *hp)

  scan = xla_scan
  if _native_ok(xu.dtype, w_Hx3H.dtype, h0_BxH.dtype):
    scan = cpu_native(xla_scan, native_scan)
  return scan(xu, xr, xc, w_Hx3H, g_2H, g_H, b_H, h0_BxH, m_TxBx1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def gru_scan(norm: str, eps: float, unroll: int, xu_TxBxH: Array, xr_TxBxH: Array,
             xc_TxBxH: Array, w_Hx3H: Array, g_2H: Array | None, g_H: Array | None,
             b_H: Array | None, h0_BxH: Array, m_TxBx1: Array | None) -> tuple[Array, Array]:
  """The GRU's recurrence over all T steps: returns (h_T, y_TxBxH).

  ``xu``, ``xr`` and ``xc`` are the update gate's, the reset gate's and the
  candidate's input sides with their biases (for 'layer', after their LNs);
  ``w`` is [W_h | U] (for 'layer' centred, see the module docstring),
  ``g_2H`` the gates' LN gain, ``g_H`` and ``b_H`` the candidate's (None for
  'none'). ``m`` (bool) freezes the carry where False; the output is 0 there."""
  h_BxH, outs = _forward(norm, eps, unroll, xu_TxBxH, xr_TxBxH, xc_TxBxH, w_Hx3H, g_2H, g_H,
                         b_H, h0_BxH, m_TxBx1)
  return h_BxH, outs[0]


def _gru_scan_fwd(norm, eps, unroll, xu_TxBxH, xr_TxBxH, xc_TxBxH, w_Hx3H, g_2H, g_H, b_H,
                  h0_BxH, m_TxBx1):
  h_BxH, outs = _forward(norm, eps, unroll, xu_TxBxH, xr_TxBxH, xc_TxBxH, w_Hx3H, g_2H, g_H,
                         b_H, h0_BxH, m_TxBx1)
  y_TxBxH, a3_TxBxH = outs[:2]
  # The carry each step started from: the previous output where no mask.
  hp_TxBxH = (outs[2] if m_TxBx1 is not None else
              jnp.concatenate([h0_BxH[None], y_TxBxH[:-1]], 0))
  res = (xu_TxBxH, xr_TxBxH, xc_TxBxH, w_Hx3H, g_2H, g_H, b_H, m_TxBx1, a3_TxBxH, hp_TxBxH)
  return (h_BxH, y_TxBxH), res


def _rms_bwd(dyg, xhat, r_Bx1, mean_dyg_xhat):
  """d x of ``x * r`` (r = 1/rms(x)) given dyg = d(x * r), xhat = x * r."""
  return r_Bx1 * (dyg - xhat * mean_dyg_xhat)


def _gru_scan_bwd(norm, eps, unroll, res, cts):
  xu_TxBxH, xr_TxBxH, xc_TxBxH, w_Hx3H, g_2H, g_H, b_H, m_TxBx1, a3_TxBxH, hp_TxBxH = res
  dhT_BxH, dy_TxBxH = cts
  B, H = hp_TxBxH.shape[1:]
  layer = norm == 'layer'
  # The row means and the gains' sums over all steps accumulate in at least
  # float32, as the norms' statistics do.
  acc = jnp.promote_types(hp_TxBxH.dtype, jnp.float32)
  zeros = lambda a: None if a is None else jnp.zeros(a.shape, acc)

  # Both scans return (dh_0, (dg_2H, dg_H, db_H), (dxu, dxr, dxc, d(h @ w)))
  # and take every array as an argument (see _forward).
  def xla_scan(dy_TxBxH, a3_TxBxH, xu_TxBxH, xr_TxBxH, xc_TxBxH, hp_TxBxH, m_TxBx1, dhT_BxH,
               w_Hx3H, g_2H, g_H, b_H):
    wt_3HxH = w_Hx3H.T
    sums0 = (zeros(g_2H), zeros(g_H), zeros(b_H))
    mean = lambda v: jnp.mean(v, -1, keepdims=True, dtype=acc).astype(v.dtype)
    colsum = lambda v: jnp.sum(v, 0, dtype=acc)

    def step(carry, inp):
      dh_BxH, (dg_2H, dg_H, db_H) = carry
      dy_BxH, a3, xu_BxH, xr_BxH, xc_BxH, hp_BxH, m_Bx1 = inp
      _, (z_BxH, r_BxH, hh_BxH, ac_BxH, rz_Bx1, rc_Bx1) = _step(
          norm, eps, a3, xu_BxH, xr_BxH, xc_BxH, hp_BxH, g_2H, g_H, b_H)
      if m_Bx1 is None:
        dhn_BxH, dkeep_BxH = dh_BxH + dy_BxH, 0.0
      else:
        dhn_BxH = jnp.where(m_Bx1, dh_BxH + dy_BxH, 0.0)
        dkeep_BxH = jnp.where(m_Bx1, 0.0, dh_BxH)
      du_BxH = dhn_BxH * (hh_BxH - hp_BxH) * z_BxH * (1.0 - z_BxH)  # d(au + xu)
      dc_BxH = dhn_BxH * z_BxH * (1.0 - hh_BxH * hh_BxH)            # d(xc + r * ac)
      dr_BxH = dc_BxH * ac_BxH * r_BxH * (1.0 - r_BxH)              # d(ar + xr)
      dac_BxH = dc_BxH * r_BxH
      if layer:
        au_hat = a3[0] * rz_Bx1
        ar_hat = a3[1] * rz_Bx1
        ac_hat = a3[2] * rc_Bx1
        dg_2H = dg_2H + jnp.concatenate([colsum(du_BxH * au_hat), colsum(dr_BxH * ar_hat)])
        dg_H = dg_H + colsum(dac_BxH * ac_hat)
        db_H = db_H + colsum(dac_BxH)
        dug, drg, dcg = du_BxH * g_2H[None, :H], dr_BxH * g_2H[None, H:], dac_BxH * g_H[None]
        mz = 0.5 * (mean(dug * au_hat) + mean(drg * ar_hat))
        da_Bx3H = jnp.concatenate([_rms_bwd(dug, au_hat, rz_Bx1, mz),
                                   _rms_bwd(drg, ar_hat, rz_Bx1, mz),
                                   _rms_bwd(dcg, ac_hat, rc_Bx1, mean(dcg * ac_hat))], -1)
      else:
        da_Bx3H = jnp.concatenate([du_BxH, dr_BxH, dac_BxH], -1)
      dhp_BxH = dhn_BxH * (1.0 - z_BxH) + dkeep_BxH + da_Bx3H @ wt_3HxH
      return (dhp_BxH, (dg_2H, dg_H, db_H)), (du_BxH, dr_BxH, dc_BxH, da_Bx3H)

    (dh0_BxH, sums), outs = jax.lax.scan(
        step, (dhT_BxH, sums0),
        (dy_TxBxH, a3_TxBxH, xu_TxBxH, xr_TxBxH, xc_TxBxH, hp_TxBxH, m_TxBx1),
        reverse=True, unroll=unroll)
    return dh0_BxH, sums, outs

  def native_scan(dy_TxBxH, a3_TxBxH, xu_TxBxH, xr_TxBxH, xc_TxBxH, hp_TxBxH, m_TxBx1, dhT_BxH,
                  w_Hx3H, g_2H, g_H, b_H):
    # As in _forward: whole arrays in, rows written in place. The buffers of
    # xu, xr and xc turn into those of their gradients, row by row. The
    # kernel takes d h_t as two terms, the matmul's and the rest, whose sum
    # would be one more XLA kernel a step.
    T = dy_TxBxH.shape[0]
    masked = m_TxBx1 is not None
    (dy_TxBxH, *a3_TxBxH, hp_TxBxH), m_arg, params = _native_inputs(
        B, H, (dy_TxBxH, *a3_TxBxH, hp_TxBxH), m_TxBx1, g_2H, g_H, b_H)
    # A row-major w^T, as lstm_scan's: XLA folds a plain transpose into the
    # matmul, whose transposed-operand kernel is slower for these shapes.
    wt_3HxH = jax.lax.optimization_barrier(w_Hx3H.T)
    # Pooled by the kernel into one row per chunk of the batch that a thread
    # takes; the rows are summed after the scan.
    sums0 = tuple(jnp.zeros((B, n), jnp.float32) for n in ((2 * H, H, H) if layer else ()))
    sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    n_rest = 4 + len(sums0)  # dxu, dxr, dxc, d(h @ w), sums
    kernel = jax.ffi.ffi_call(
        'lnorm_gru_bwd',
        (sds(B, H), sds(B, 3 * H)) + (sds(T, B, H),) * 3 + (sds(T, B, 3 * H),)
        + tuple(sds(*s.shape) for s in sums0),
        input_output_aliases={12 + k: 2 + k for k in range(n_rest)}, vmap_method='sequential')

    def body(i, carry):
      dpart_BxH, dmm_BxH, rest = carry
      t = jnp.asarray(T - 1 - i, jnp.int32)
      dpart_BxH, da_Bx3H, *rest = kernel(
          dy_TxBxH, *a3_TxBxH, hp_TxBxH, m_arg, t, dpart_BxH, dmm_BxH, *params, *rest,
          norm=np.int32(_NORM_CODE[norm]), masked=np.int32(masked), eps=np.float32(eps))
      return dpart_BxH, da_Bx3H @ wt_3HxH, tuple(rest)

    dpart_BxH, dmm_BxH, (dxu, dxr, dxc, da, *sums) = jax.lax.fori_loop(
        0, T, body, (dhT_BxH, jnp.zeros_like(dhT_BxH),
                     (xu_TxBxH, xr_TxBxH, xc_TxBxH, *_uninitialized((T, B, 3 * H)), *sums0)),
        unroll=unroll)
    sums = [jnp.sum(s, 0) for s in sums] if layer else [None] * 3
    return dpart_BxH + dmm_BxH, tuple(sums), (dxu, dxr, dxc, da)

  scan = xla_scan
  if _native_ok(hp_TxBxH.dtype, w_Hx3H.dtype, dy_TxBxH.dtype):
    scan = cpu_native(xla_scan, native_scan)
  dh0_BxH, (dg_2H, dg_H, db_H), (dxu, dxr, dxc, da_TxBx3H) = scan(
      dy_TxBxH, a3_TxBxH, xu_TxBxH, xr_TxBxH, xc_TxBxH, hp_TxBxH, m_TxBx1, dhT_BxH, w_Hx3H,
      g_2H, g_H, b_H)
  dw_Hx3H = sum_outer(hp_TxBxH, da_TxBx3H)
  dm = None if m_TxBx1 is None else np.zeros(m_TxBx1.shape, jax.dtypes.float0)
  like = lambda d, p: None if p is None else d.astype(p.dtype)
  return (dxu, dxr, dxc, dw_Hx3H.astype(w_Hx3H.dtype), like(dg_2H, g_2H), like(dg_H, g_H),
          like(db_H, b_H), dh0_BxH, dm)


gru_scan.defvjp(_gru_scan_fwd, _gru_scan_bwd)
