"""The scans behind ``LSTM`` (``lstm.py``): a custom VJP with a hand-written
backward, and the native CPU kernels of their time steps.

``LSTM`` computes what scanning ``LSTMCell`` (``cells.py``) computes,
reorganised for speed. BENCHMARKS.md ("Recurrent LSTM") has the measurements
behind each choice:

* W_x x for all steps is one matmul before the scan, xw. With 'layer', its
  1/sigma per row is one reduction (on CPU, done by the forward kernel as it
  reads each row), and the steps normalize their row: xw is the only
  (T, B, 4H) array of the input side. For x of at most
  ``XW_IN_KERNEL_MAX_I`` features the native kernels form each row of xw
  as they need it (the forward, and 'layer''s backward again), and no such
  array exists at all.
* LN(v @ k) = RMSNorm(v @ center(k)) exactly: the row mean of v @ k is v
  times the row means of k. The forward's LNs then need one reduction per
  row instead of two. The native kernels subtract W_h's row means as they
  pack it, where XLA would take a pass over W_h to centre it. The backward
  of LN(h @ W_h) keeps its mean term, so that the W_h gradient comes out
  with zero row means, the gradient of W_h itself: no projection (a pass
  over W_h) after it.
* The backward pass is a hand-written scan (``lstm_scan``) that does per
  step only what is sequential; the W_h gradient is one matmul after it,
  and the gain and bias gradients are summed in its carry.
* Each forward step saves one packed row: the gates, or for 'layer'
  LN(W_h h) before its gain, from which (with xw, kept for the x-side
  backward anyway) the backward recomputes the gates. Saving both costs
  more in page faults on the larger buffers than the recompute costs.
* On CPU (float32, one device), each scan is one native kernel for the
  whole sequence (``lnorm/native/lstm_cpu.cc``): the products with W_h
  (packed once a call, ``native/gemm.h``) and each step's elementwise work,
  which XLA runs as a dozen or more small kernels and a hand-off to its
  thread pool per matmul. From B * H = 1024 a team of threads (the caller and
  XLA's intra-op workers, ``native/team.h``) splits each product's columns
  and the batch's rows, with a barrier between the phases of a step. The
  backward kernel also forms the W_h gradient after its loop, on the same
  team.
"""

from __future__ import annotations

import functools
import jax
import jax.numpy as jnp
from flax.typing import Array
import numpy as np

from lnorm import native
from lnorm.native.dispatch import cpu_native, unless_split

# The norms these scans implement (and the native kernels, ``_NORM_CODE``):
# ``LSTM`` takes this path for them and scans ``LSTMCell`` for any other.
NORMS = ('none', 'layer', 'layer_c')


def _mean(x: Array) -> Array:
  """Mean over the last axis (keepdims), accumulated in at least float32."""
  acc = jnp.promote_types(x.dtype, jnp.float32)
  return jnp.mean(x, -1, keepdims=True, dtype=acc).astype(x.dtype)


def rsqrt_mean_square(x: Array, eps: float) -> Array:
  """1 / sqrt(mean(x^2) + eps) over the last axis (keepdims)."""
  acc = jnp.promote_types(x.dtype, jnp.float32)
  ms = jnp.mean(jnp.square(x.astype(acc)), -1, keepdims=True)
  return jax.lax.rsqrt(ms + eps).astype(x.dtype)


def center(k_IxF: Array) -> Array:
  """Subtracts each row's mean: LN(v @ k) = RMSNorm(v @ center(k))."""
  return k_IxF - jnp.mean(k_IxF, -1, keepdims=True)


def _less(w_Hx4H: Array, wm_H: Array | None) -> Array:
  """center(w) from w's row means wm (None: w as it is). The native kernels
  take w and wm and subtract as they pack w, where XLA's subtraction would
  be a pass over w of its own."""
  return w_Hx4H if wm_H is None else w_Hx4H - wm_H[:, None]


def _gates(z_Bx4H: Array) -> Array:
  """(f, i, o, g) pre-activations -> (sigma(f), sigma(i), sigma(o), tanh(g))."""
  H = z_Bx4H.shape[-1] // 4
  return jnp.concatenate([jax.nn.sigmoid(z_Bx4H[:, :3 * H]),
                          jnp.tanh(z_Bx4H[:, 3 * H:])], -1)


def _layer_z(ah_Bx4H: Array, xw_Bx4H: Array, rx_Bx1: Array, gx_4H: Array,
             g_4H: Array, b_4H: Array) -> Array:
  """'layer''s gate pre-activations (eq. 20) from LN(W_h h) before its gain
  and the input projection's row with its 1/sigma. The forward and the
  backward's recompute both use it, so they get the same gates."""
  return (ah_Bx4H * g_4H[None] + xw_Bx4H * rx_Bx1 * gx_4H[None]
          + b_4H[None])


def _split(x: Array, sizes: list[int]) -> list[Array]:
  out, k = [], 0
  for n in sizes:
    out.append(x[..., k:k + n])
    k += n
  return out


def _saved_sizes(norm: str, H: int, masked: bool) -> list[int]:
  """Widths of the row saved per step, in the order ``_lstm_fwd`` packs it:
  the gates, or for 'layer' LN(W_h h) before its gain and its 1/sigma, from
  which the backward recomputes the gates."""
  sizes = [4 * H, 1] if norm == 'layer' else [4 * H]  # (ah, ra) or act
  sizes.append(H)  # c_{t-1}
  if norm != 'none':
    sizes += [1, 1]  # mean and 1/sigma of c_t
  if masked:
    sizes.append(H)  # h_{t-1}: the carry, which is not y_{t-1} under a mask
  return sizes


def _native_ok(*dtypes) -> bool:
  """Whether the scans (this one's and gru_scan's) may run their elementwise
  steps as native CPU kernels (every dtype float32, and the kernels built):
  chosen per platform when lowering."""
  return all(jnp.dtype(d) == jnp.float32 for d in dtypes) and native.load()


_NORM_CODE = {'none': 0, 'layer': 1, 'layer_c': 2}

# Up to this many features of x the scans take x and k_x, not xw = x @ k_x:
# the native kernels form each row of xw from them in the forward and again
# in the backward (I multiply-adds a float of xw, where reading xw from
# memory costs more), and return dx and dk_x rather than d xw. XLA's scans
# form xw again in the backward. lstm_cpu.cc's kMaxProjI.
XW_IN_KERNEL_MAX_I = 8

# Up to this many T * B rows the backward kernel forms the W_h gradient
# itself, where XLA's matmul after the kernel at times took twice its time
# alone. At T = 100 the kernel's was 0.85-1.11x XLA's at B = 16 and 32 (6 of
# 8 readings at or under 1.0) and even at B = 64, where XLA's keeps h_{t-1}
# out of the kernel's live buffers (scripts/bench/lstm_dw_limit.py;
# BENCHMARKS.md, "The parts script's shapes, and 16-float rows").
DW_IN_KERNEL_MAX_ROWS = 4096


def _col(a_TxB: Array | None) -> Array | None:
  return None if a_TxB is None else a_TxB[..., None]


def _or_ones(a: Array | None) -> Array:
  """a, or a placeholder where a kernel takes an array it will not read."""
  return jnp.ones((1,), jnp.float32) if a is None else a


def _native_inputs(H, m_TxB, rx_TxB, gx_4H, b_4H, g_4H, g_H, b_H):
  """The kernels' operands besides the arrays: the mask and rx (any buffer
  when absent), and every parameter (ones or zeros when absent)."""
  ones = lambda n: jnp.ones((n,), jnp.float32)
  pick = lambda p, fill: fill if p is None else p
  params = (pick(gx_4H, ones(4 * H)), b_4H, pick(g_4H, ones(4 * H)),
            pick(g_H, ones(H)), pick(b_H, jnp.zeros((H,), jnp.float32)))
  m_arg = ones(1) if m_TxB is None else m_TxB.astype(jnp.float32)
  return m_arg, _or_ones(rx_TxB), params


def _xw_in_kernel(x_TxBxI: Array) -> bool:
  return x_TxBxI.shape[-1] <= XW_IN_KERNEL_MAX_I


def _lstm_fwd(norm, eps, unroll, use_native, x_TxBxI, kx_Ix4H, gx_4H, b_4H,
              w_Hx4H, wm_H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB):
  """The scan. Returns ((y (B, T, H), c_T, h_T), saved rows (T, B, S), rx,
  xw for the backward): for 'layer' rx is 1/sigma of xw's rows, and the
  native kernel returns a copy of xw (which the backward overwrites) made
  while it reads it, where XLA would copy it in a pass of its own. With xw
  formed in the kernels (``_xw_in_kernel``), xw is None: 'layer''s
  backward forms it again."""
  masked = m_TxB is not None
  B, H = h0_BxH.shape
  S = sum(_saved_sizes(norm, H, masked))
  in_kernel = _xw_in_kernel(x_TxBxI)

  def pointwise(a_Bx4H, xw_Bx4H, rx_Bx1, c_BxH, h_BxH, m_Bx1, gx_4H, b_4H,
                g_4H, g_H, b_H):
    """Everything in a step after ``a = h @ w``."""
    if norm == 'layer':
      ra_Bx1 = rsqrt_mean_square(a_Bx4H, eps)
      ah_Bx4H = a_Bx4H * ra_Bx1
      z_Bx4H = _layer_z(ah_Bx4H, xw_Bx4H, rx_Bx1, gx_4H, g_4H, b_4H)
    else:  # no x-side norm nor gains
      z_Bx4H = a_Bx4H + xw_Bx4H + b_4H[None]
    act_Bx4H = _gates(z_Bx4H)
    f, i, o, g = _split(act_Bx4H, [H] * 4)
    c_new = f * c_BxH + i * g
    saved = [ah_Bx4H, ra_Bx1] if norm == 'layer' else [act_Bx4H]
    saved.append(c_BxH)
    if norm == 'none':
      tc_BxH = jnp.tanh(c_new)
    else:
      mc_Bx1 = _mean(c_new)
      cc_BxH = c_new - mc_Bx1
      rc_Bx1 = rsqrt_mean_square(cc_BxH, eps)
      tc_BxH = jnp.tanh(cc_BxH * rc_Bx1 * g_H[None] + b_H[None])
      saved += [mc_Bx1, rc_Bx1]
    h_new = o * tc_BxH
    if masked:
      saved.append(h_BxH)
    saved = jnp.concatenate(saved, -1)
    if not masked:
      return c_new, h_new, h_new, saved
    y_BxH = jnp.where(m_Bx1, h_new, jnp.zeros_like(h_new))
    c_new = jnp.where(m_Bx1, c_new, c_BxH)
    h_new = jnp.where(m_Bx1, h_new, h_BxH)
    return c_new, h_new, y_BxH, saved

  # The scans take every array as an argument: the custom JVP of
  # cpu_native differentiates (through xla_scan) with respect to arguments.
  def xla_scan(x_TxBxI, kx_Ix4H, gx_4H, b_4H, w_Hx4H, wm_H, g_4H, g_H, b_H,
               c0_BxH, h0_BxH, m_TxB):
    w_Hx4H = _less(w_Hx4H, wm_H)
    xw_TxBx4H = x_TxBxI @ kx_Ix4H
    rx_TxB = _input_rx(norm, xw_TxBx4H, eps)

    def step(carry, inp):
      c_BxH, h_BxH = carry
      xw_Bx4H, rx_Bx1, m_Bx1 = inp
      c_new, h_new, y_BxH, saved = pointwise(
          h_BxH @ w_Hx4H, xw_Bx4H, rx_Bx1, c_BxH, h_BxH, m_Bx1, gx_4H, b_4H,
          g_4H, g_H, b_H)
      return (c_new, h_new), (y_BxH, saved)

    (c_BxH, h_BxH), (y_TxBxH, saved) = jax.lax.scan(
        step, (c0_BxH, h0_BxH), (xw_TxBx4H, _col(rx_TxB), _col(m_TxB)),
        unroll=unroll)
    return ((jnp.moveaxis(y_TxBxH, 0, 1), c_BxH, h_BxH), saved, rx_TxB,
            None if in_kernel else xw_TxBx4H)

  def native_scan(x_TxBxI, kx_Ix4H, gx_4H, b_4H, w_Hx4H, wm_H, g_4H, g_H, b_H,
                  c0_BxH, h0_BxH, m_TxB):
    # One kernel for the whole loop, the products with W_h included.
    T = x_TxBxI.shape[0]
    if in_kernel:
      xs = (x_TxBxI, kx_Ix4H)
    else:
      xs = (x_TxBxI @ kx_Ix4H, jnp.zeros((0,), jnp.float32))
    m_arg, _, params = _native_inputs(H, m_TxB, None, gx_4H, b_4H, g_4H, g_H,
                                      b_H)
    sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    layer = norm == 'layer'
    c_BxH, h_BxH, y_BxTxH, saved, *rest = jax.ffi.ffi_call(
        'lnorm_lstm_fwd', (sds(B, H),) * 2 + (sds(B, T, H), sds(T, B, S))
        + ((sds(T, B),) if layer else ())
        + ((sds(T, B, 4 * H),) if layer and not in_kernel else ()),
        vmap_method='sequential')(
            *xs, w_Hx4H, _or_ones(wm_H), c0_BxH, h0_BxH, m_arg, *params,
            norm=np.int32(_NORM_CODE[norm]), masked=np.int32(masked),
            proj=np.int32(in_kernel), eps=np.float32(eps))
    rx_TxB = rest[0] if layer else None
    xw_keep = None if in_kernel else rest[1] if layer else xs[0]
    return (y_BxTxH, c_BxH, h_BxH), saved, rx_TxB, xw_keep

  scan = xla_scan
  if use_native and _native_ok(x_TxBxI.dtype):
    scan = cpu_native(xla_scan, native_scan)
  return scan(x_TxBxI, kx_Ix4H, gx_4H, b_4H, w_Hx4H, wm_H, g_4H, g_H, b_H,
              c0_BxH, h0_BxH, m_TxB)


def _input_rx(norm: str, xw_TxBx4H: Array, eps: float) -> Array | None:
  """'layer': 1/sigma of each row of the input projection ``xw`` (centred
  kernel, so RMSNorm is LN): the scans form LN(x @ k) = xw * rx row by row."""
  if norm != 'layer':
    return None
  return rsqrt_mean_square(xw_TxBx4H, eps)[..., 0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def lstm_scan(norm, eps, unroll, use_native, x_TxBxI, kx_Ix4H, gx_4H, b_4H,
              w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB):
  """LSTM over time from the inputs x (T, B, I); returns (y, c_T, h_T), y
  batch first (B, T, H) as ``LSTM`` returns it: the native forward writes it
  so, and the backward reads dy so, where XLA would transpose each.

  Pre-activations: ``h @ w`` (layer-normalized without bias, gain ``g_4H``,
  for 'layer', as ``h @ center(w)``) + ``xw = x @ kx``'s own x-side term
  (for 'layer' RMS-normalized, ``kx`` centred by the caller, with gain
  ``gx``) + ``b``. 'layer' and 'layer_c' normalize c_t with ``g_H``,
  ``b_H``. ``m_TxB``: the mask, or None.
  """
  return _lstm_scan_fwd(norm, eps, unroll, use_native, x_TxBxI, kx_Ix4H,
                        gx_4H, b_4H, w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH,
                        m_TxB)[0]


def _lstm_scan_fwd(norm, eps, unroll, use_native, x_TxBxI, kx_Ix4H, gx_4H,
                   b_4H, w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB):
  # 'layer' multiplies by center(w), formed from w's row means wm.
  wm_H = jnp.mean(w_Hx4H, -1) if norm == 'layer' else None
  out, saved, rx_TxB, xw_TxBx4H = _lstm_fwd(
      norm, eps, unroll, use_native, x_TxBxI, kx_Ix4H, gx_4H, b_4H, w_Hx4H,
      wm_H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB)
  return out, (saved, out[0], x_TxBxI, kx_Ix4H, xw_TxBx4H, rx_TxB, gx_4H, b_4H,
               w_Hx4H, wm_H, g_4H, g_H, b_H, h0_BxH, m_TxB)


def _lstm_scan_bwd(norm, eps, unroll, use_native, res, cts):
  (saved, y_BxTxH, x_TxBxI, kx_Ix4H, xw_TxBx4H, rx_TxB, gx_4H, b_4H, w_Hx4H,
   wm_H, g_4H, g_H, b_H, h0_BxH, m_TxB) = res
  dy_BxTxH, dc_BxH, dh_BxH = cts
  B, H = h0_BxH.shape
  masked = m_TxB is not None
  sizes = _saved_sizes(norm, H, masked)
  # Sums over time of the bias and gain gradients, carried (per example in
  # XLA; pooled by the kernels into one row per chunk of the batch that a
  # thread takes), rows summed at the end: the same sums taken after the
  # scan over (T, B, 4H) arrays are slower.
  sum_sizes = ([4 * H] + ([4 * H] * 2 if norm == 'layer' else [])
               + ([H] * 2 if norm != 'none' else []))

  def pointwise(dy_BxH, row, xw_Bx4H, rx_Bx1, m_Bx1, dc_BxH, dh_BxH, sums,
                gx_4H, b_4H, g_4H, g_H, b_H):
    """Everything in a step but ``dh_{t-1} = d(h @ w) @ w^T``: returns
    (dc_{t-1}, d(h @ w), outs, sums)."""
    parts = _split(row, sizes)
    if norm == 'layer':
      ah_Bx4H, ra_Bx1 = parts.pop(0), parts.pop(0)
      act_Bx4H = _gates(_layer_z(ah_Bx4H, xw_Bx4H, rx_Bx1, gx_4H, g_4H, b_4H))
    else:
      act_Bx4H = parts.pop(0)
    c_prev = parts.pop(0)
    f, i, o, g = _split(act_Bx4H, [H] * 4)
    c_new = f * c_prev + i * g
    dh_cell, dc_cell = dh_BxH + dy_BxH, dc_BxH
    if masked:
      dh_cell = jnp.where(m_Bx1, dh_cell, jnp.zeros_like(dh_cell))
      dc_cell = jnp.where(m_Bx1, dc_cell, jnp.zeros_like(dc_cell))
    terms = []
    if norm == 'none':
      tc_BxH = jnp.tanh(c_new)
      dc_new = dc_cell + dh_cell * o * (1 - tc_BxH * tc_BxH)
    else:
      mc_Bx1, rc_Bx1 = parts[:2]
      ch_BxH = (c_new - mc_Bx1) * rc_Bx1
      tc_BxH = jnp.tanh(ch_BxH * g_H[None] + b_H[None])
      dcn_BxH = dh_cell * o * (1 - tc_BxH * tc_BxH)
      d_BxH = dcn_BxH * g_H[None]
      # Both means in one reduction.
      m_Bx2x1 = _mean(jnp.stack([d_BxH, ch_BxH * d_BxH], 1))
      dc_new = dc_cell + rc_Bx1 * (d_BxH - m_Bx2x1[:, 0]
                                   - ch_BxH * m_Bx2x1[:, 1])
      terms = [dcn_BxH * ch_BxH, dcn_BxH]
    dz_Bx4H = jnp.concatenate([
        dc_new * c_prev * f * (1 - f), dc_new * g * i * (1 - i),
        dh_cell * tc_BxH * o * (1 - o), dc_new * i * (1 - g * g)], -1)
    if norm == 'layer':
      dxh_Bx4H = dz_Bx4H * gx_4H[None]
      xh_Bx4H = xw_Bx4H * rx_Bx1
      terms = [dz_Bx4H * ah_Bx4H, dz_Bx4H * xh_Bx4H] + terms
      d_Bx4H = dz_Bx4H * g_4H[None]
      # With the mean(d) term: dW = h^T da needs no projection (see top).
      m_Bx2x1 = _mean(jnp.stack([d_Bx4H, ah_Bx4H * d_Bx4H], 1))
      da_Bx4H = ra_Bx1 * (d_Bx4H - m_Bx2x1[:, 0] - ah_Bx4H * m_Bx2x1[:, 1])
      outs = (dxh_Bx4H,)  # xla_scan finishes d xw after the loop
    else:
      da_Bx4H = dz_Bx4H
      outs = ()
    sums = tuple(s + t for s, t in zip(sums, [dz_Bx4H] + terms))
    dc_prev = dc_new * f
    if masked:
      dc_prev = jnp.where(m_Bx1, dc_prev, dc_BxH)
    return dc_prev, da_Bx4H, outs, sums

  sums0 = tuple(jnp.zeros((B, n), dy_BxTxH.dtype) for n in sum_sizes)
  # xw was formed in the forward kernel: 'layer''s backward kernel forms
  # it again (the others read no xw in the backward).
  in_kernel = xw_TxBx4H is None and norm == 'layer'

  def input_grads(x_TxBxI, kx_Ix4H, dxw_TxBx4H):
    """(dx, dk_x) from d xw, which is d(h @ w) but for 'layer'."""
    return dxw_TxBx4H @ kx_Ix4H.T, sum_outer(x_TxBxI, dxw_TxBx4H)

  # Both scans return (dc_0, dh_0, sums, dx, dk_x, dW). They take every
  # array as an argument (see _lstm_fwd).
  def xla_scan(dy_BxTxH, saved, x_TxBxI, kx_Ix4H, xw_TxBx4H, rx_TxB, m_TxB,
               dc_BxH, dh_BxH, gx_4H, b_4H, w_Hx4H, wm_H, g_4H, g_H, b_H,
               h_prev):
    dy_TxBxH = jnp.moveaxis(dy_BxTxH, 0, 1)
    if xw_TxBx4H is None and norm == 'layer':
      xw_TxBx4H = x_TxBxI @ kx_Ix4H
    # A row-major W_h^T: XLA folds a plain transpose into the matmul, whose
    # transposed-operand kernel is slower for these shapes.
    wt_4HxH = jax.lax.optimization_barrier(_less(w_Hx4H, wm_H).T)

    def step(carry, inp):
      dc_BxH, dh_BxH, sums = carry
      dy_BxH, row, xw_Bx4H, rx_Bx1, m_Bx1 = inp
      dc_prev, da_Bx4H, outs, sums = pointwise(
          dy_BxH, row, xw_Bx4H, rx_Bx1, m_Bx1, dc_BxH, dh_BxH, sums, gx_4H,
          b_4H, g_4H, g_H, b_H)
      dh_prev = da_Bx4H @ wt_4HxH
      if masked:
        dh_prev = jnp.where(m_Bx1, dh_prev, dh_BxH)
      return (dc_prev, dh_prev, sums), outs + (da_Bx4H,)

    # 'none' and 'layer_c' read no inputs in the backward steps.
    xs_TxBx4H = xw_TxBx4H if norm == 'layer' else None
    (dc0, dh0, sums), outs = jax.lax.scan(
        step, (dc_BxH, dh_BxH, sums0),
        (dy_TxBxH, saved, xs_TxBx4H, _col(rx_TxB), _col(m_TxB)),
        reverse=True, unroll=unroll)
    dxw = outs[0]
    if norm == 'layer':
      # The x-side norm's backward as one pass over (T, B, 4H): in the loop
      # it would be one more small reduction kernel per step.
      rx_TxBx1 = rx_TxB[..., None]
      xh, dxh = xw_TxBx4H * rx_TxBx1, dxw
      dxw = rx_TxBx1 * (dxh - xh * _mean(xh * dxh))
    return (dc0, dh0, sums, *input_grads(x_TxBxI, kx_Ix4H, dxw),
            sum_outer(h_prev, outs[-1]))

  def native_scan(dy_BxTxH, saved, x_TxBxI, kx_Ix4H, xw_TxBx4H, rx_TxB, m_TxB,
                  dc_BxH, dh_BxH, gx_4H, b_4H, w_Hx4H, wm_H, g_4H, g_H, b_H,
                  h_prev):
    # As in _lstm_fwd: one kernel for the whole loop, and dW after it.
    # 'layer' with xw: xw's buffer turns into d xw's, row by row. Without
    # it, the kernel forms xw's rows again and returns dx and the rows of
    # dk_x's sums. Otherwise d xw is d(h @ w).
    T, _, I = x_TxBxI.shape
    m_arg, rx_arg, params = _native_inputs(H, m_TxB, rx_TxB, gx_4H, b_4H,
                                           g_4H, g_H, b_H)
    sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    if in_kernel:
      xs, outs = (x_TxBxI, kx_Ix4H), (sds(T, B, I),)
      sums = sum_sizes + [I * 4 * H]
    else:
      xs = (xw_TxBx4H,) if norm == 'layer' else ()
      outs = tuple(sds(T, B, 4 * H) for _ in xs)
      sums = sum_sizes
    fuse_dw = T * B <= DW_IN_KERNEL_MAX_ROWS
    # d(h @ w) as XLA reads it: for d xw but with 'layer', and for dW when
    # not in the kernel. dW's operand: d(h @ w) packed in panels of at most
    # 16 floats, written by the kernel as it forms each row.
    read_da = norm != 'layer' or not fuse_dw
    dc0, dh0, da, dw, _, *rest = jax.ffi.ffi_call(
        'lnorm_lstm_bwd', (sds(B, H), sds(B, H),
                           sds(T, B, 4 * H) if read_da else sds(0),
                           sds(H, 4 * H) if fuse_dw else sds(0),
                           sds(T * B, -(-4 * H // 16) * 16) if fuse_dw
                           else sds(0))
        + outs + tuple(sds(B, n) for n in sums),
        # xw (operand 14) becomes d xw (result 5), row by row.
        input_output_aliases={14: 5} if xs and not in_kernel else {},
        vmap_method='sequential')(
            dy_BxTxH, saved, m_arg, rx_arg, dc_BxH, dh_BxH, *params, w_Hx4H,
            _or_ones(wm_H),
            # Unread without dW: a placeholder keeps h_prev out of the
            # kernel's live buffers.
            h_prev if fuse_dw else jnp.zeros((0,), jnp.float32), *xs,
            norm=np.int32(_NORM_CODE[norm]),
            masked=np.int32(masked), proj=np.int32(in_kernel))
    if not fuse_dw:
      dw = sum_outer(h_prev, da)
    sums, rest = rest[len(outs):], rest[:len(outs)]
    if in_kernel:
      dkx = jnp.sum(sums[-1], 0).reshape(I, 4 * H)
      return dc0, dh0, sums[:-1], rest[0], dkx, dw
    return (dc0, dh0, sums,
            *input_grads(x_TxBxI, kx_Ix4H, rest[0] if outs else da), dw)

  if masked:
    h_prev = saved[..., -H:]
  else:
    h_prev = jnp.concatenate([h0_BxH[None], jnp.moveaxis(y_BxTxH, 0, 1)[:-1]],
                             0)
  scan = xla_scan
  if use_native and _native_ok(dy_BxTxH.dtype):
    scan = cpu_native(xla_scan, native_scan)
  dc0, dh0, sums, dx, dkx, dw_Hx4H = scan(
      dy_BxTxH, saved, x_TxBxI, kx_Ix4H, xw_TxBx4H, rx_TxB, m_TxB, dc_BxH,
      dh_BxH, gx_4H, b_4H, w_Hx4H, wm_H, g_4H, g_H, b_H, h_prev)
  sums = [jnp.sum(s, 0) for s in sums]
  db_4H = sums.pop(0)
  dg_4H = dgx_4H = dg_H = db_H = None
  if norm == 'layer':
    dg_4H, dgx_4H = sums[:2]
    sums = sums[2:]
  if norm != 'none':
    dg_H, db_H = sums
  return (dx, dkx, dgx_4H, db_4H, dw_Hx4H, dg_4H, dg_H, db_H, dc0, dh0, None)


lstm_scan.defvjp(_lstm_scan_fwd, _lstm_scan_bwd)


@jax.custom_vjp
def proj(x_TxBxI: Array, k_IxF: Array) -> Array:
  """``x @ k``. Its backward takes dk as one matmul of row-major operands;
  under autodiff's version XLA writes d(x @ k), (T, B, F), transposed first."""
  return x_TxBxI @ k_IxF


def _proj_fwd(x_TxBxI, k_IxF):
  return x_TxBxI @ k_IxF, (x_TxBxI, k_IxF)


def _proj_bwd(res, d_TxBxF):
  x_TxBxI, k_IxF = res
  return d_TxBxF @ k_IxF.T, sum_outer(x_TxBxI, d_TxBxF)


def sum_outer(a_TxBxI: Array, b_TxBxF: Array) -> Array:
  """sum over t, b of a[t, b]^T b[t, b] (I, F): one matmul over the T * B
  rows. Merging T and B is free on one device; on a batch split over devices
  it would gather the batch first, so there T and B are contracted as they
  are (which XLA:CPU runs with a transposed copy of a)."""
  return _sum_outer_choice(a_TxBxI, b_TxBxF)


_sum_outer_choice = unless_split(
    lambda a, b: a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1]),
    lambda a, b: jax.lax.dot_general(a, b, (((0, 1), (0, 1)), ((), ()))))


proj.defvjp(_proj_fwd, _proj_bwd)
