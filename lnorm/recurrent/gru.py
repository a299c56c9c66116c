"""``GRU``: a GRU layer over whole sequences, the fast path for stacks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen.dtypes import promote_dtype
from flax.typing import Array

from lnorm import norms
from lnorm.normalization import layer_norm
from lnorm.recurrent import gru_scan as gs
from lnorm.recurrent.cells import GRUCell, RecurrentModule, gru_params
from lnorm.recurrent.gru_scan import gru_scan
from lnorm.recurrent.lstm_scan import center, proj
from lnorm.recurrent.masked_scan import Recurrent


class GRU(RecurrentModule):
  """A GRU layer over whole sequences: (*batch, T, in) -> (*batch, T, H).

  It computes what scanning ``GRUCell(features, norm=norm)`` computes, with
  that cell's parameter names, shapes and initialisers, for any norm the
  cell takes. For 'none' (eqs. 23-25) and 'layer' (the LN-GRU, eqs. 26-28)
  it is the fast path below; any other norm scans the cell
  (``Recurrent(GRUCell)``) on the same parameters. The input side, W_x x and W x with
  their layer norms, is one matmul and one pass over all steps before the
  scan, and each step makes one matmul with [W_h | U]; the scan is
  ``gru_scan``, whose backward is hand-written (the W_h gradient one matmul
  after it); on CPU, float32 scans run each time step's elementwise work as
  one native kernel (``lnorm/native``), as ``LSTM``'s do.

  Use it, as ``LSTM``, whenever the layer's whole input sequence is known
  before it runs; scan ``GRUCell`` when each step's input depends on the
  previous step's output (sampling). The parameters are the same, so a model
  trained with ``GRU`` can be run step by step with ``GRUCell``.

  ``mask`` (*batch, T) works as in ``Recurrent``: where it is False the carry
  is frozen and the output is 0. ``initial_carry`` is ``h`` (*batch, H),
  zeros by default. ``context`` (*batch, D), if given, is appended to every
  step's input, as scanning the cell over [x_t; context] would see it (the
  conditional decoders of skip-thoughts): the kernels' input side then has
  I + D rows, and the context's share is one matmul for all steps. Returns
  ``y``, or ``(h_T, y)`` with ``return_carry``.
  ``dtype`` is the compute dtype and that of the outputs (None: promoted from
  the input and parameters), ``param_dtype`` that of the parameters.
  """

  features: int
  norm: str = 'none'
  eps: float = 1e-5
  return_carry: bool = False
  unroll: int = 1

  def __post_init__(self):
    norms.accept(self.norm, norms.GATES, running_stats=False)
    super().__post_init__()

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               initial_carry: Array | None = None,
               context: Array | None = None):
    if x.ndim < 2:
      raise ValueError(f'input of shape {x.shape} has no time axis')
    H, eps = self.features, self.eps
    batch_shape, (T, X) = x.shape[:-2], x.shape[-2:]
    if context is not None and context.shape[:-1] != batch_shape:
      raise ValueError(f'context has shape {context.shape}; expected '
                       f'{batch_shape} (batch...) and a feature axis')
    I = X + (0 if context is None else context.shape[-1])
    P = gru_params(self, I)
    nm = norms.get(self.norm)
    if nm.name not in gs.NORMS:  # no fast path: the cell's scan
      return self._scan_cell(P, x, mask, initial_carry, context)
    layer = nm.name == 'layer'
    k_x, k_h, k_xc, k_hc, b_2H, b_c, g_h, g_x, g_xc, b_xc, g_hc, b_hc = (
        P.get(k) for k in ('kernel_x', 'kernel_h', 'kernel_xc', 'kernel_hc', 'bias', 'bias_c',
                           'gain_h', 'gain_x', 'gain_xc', 'bias_xc', 'gain_hc', 'bias_hc'))

    x_TxBxX = jnp.moveaxis(x.reshape((-1, T, X)), 1, 0)
    B = x_TxBxX.shape[1]
    c_BxD = None if context is None else context.reshape((B, I - X))
    (x_TxBxX, c_BxD, k_x, k_h, k_xc, k_hc, b_2H, g_h, g_x, g_xc, b_xc, g_hc,
     b_hc) = promote_dtype(x_TxBxX, c_BxD, k_x, k_h, k_xc, k_hc, b_2H, g_h,
                           g_x, g_xc, b_xc, g_hc, b_hc, dtype=self.dtype)
    dt = x_TxBxX.dtype
    # The input side of every step, before the scan: [W_x x | W x].
    k_Ix3H = jnp.concatenate([k_x, k_xc], -1)
    xw_TxBx3H = proj(x_TxBxX, k_Ix3H[:X])
    if c_BxD is not None:
      xw_TxBx3H = xw_TxBx3H + (c_BxD @ k_Ix3H[X:])[None]
    xz_TxBx2H, xc_TxBxH = xw_TxBx3H[..., :2 * H], xw_TxBx3H[..., 2 * H:]
    if layer:
      xz_TxBx2H = layer_norm(xz_TxBx2H, g_x, eps=eps)
      xc_TxBxH = layer_norm(xc_TxBxH, g_xc, b_xc, eps=eps)
    else:
      xc_TxBxH = xc_TxBxH + b_c.astype(dt)[None, None]
    xz_TxBx2H = xz_TxBx2H + b_2H[None, None]
    # For 'layer', LN(h @ k) = RMSNorm(h @ center(k)): one reduction a row in the scan.
    w_Hx3H = jnp.concatenate([center(k_h), center(k_hc)] if layer else [k_h, k_hc], -1)

    if mask is not None:
      mask = jnp.asarray(mask, bool)
      if mask.shape != x.shape[:-1]:
        raise ValueError(f'mask has shape {mask.shape}; expected '
                         f'{x.shape[:-1]} (batch..., time)')
      mask = mask.reshape((B, T)).T[..., None]
    if initial_carry is None:
      h0_BxH = jnp.zeros((B, H), dt)
    else:
      h0_BxH = jnp.asarray(initial_carry, dt).reshape((B, H))

    h_BxH, y_TxBxH = gru_scan(self.norm, eps, self.unroll, xz_TxBx2H[..., :H],
                              xz_TxBx2H[..., H:], xc_TxBxH, w_Hx3H,
                              g_h if layer else None, g_hc if layer else None,
                              b_hc if layer else None, h0_BxH, mask)
    y = jnp.moveaxis(y_TxBxH, 0, 1).reshape(batch_shape + (T, H))
    if not self.return_carry:
      return y
    return h_BxH.reshape(batch_shape + (H,)), y

  def _scan_cell(self, P, x, mask, initial_carry, context):
    """``Recurrent(GRUCell)`` on this layer's parameters ``P``: for the norms
    without a fast path. ``context`` is appended to every step's input."""
    if context is not None:
      c = jnp.broadcast_to(context[..., None, :], x.shape[:-1] + context.shape[-1:])
      x = jnp.concatenate([x, c.astype(x.dtype)], -1)
    cell = GRUCell(self.features, norm=self.norm, eps=self.eps, dtype=self.dtype,
                   param_dtype=self.param_dtype)
    h0 = initial_carry
    if h0 is None:
      h0 = cell.initialize_carry(jax.random.key(0), x.shape[:-2] + x.shape[-1:])
    h, y = Recurrent(cell, unroll=self.unroll).apply(
        {'params': {'cell': P}}, x, mask, initial_carry=h0)
    if self.dtype is not None:
      h, y = h.astype(self.dtype), y.astype(self.dtype)
    return (h, y) if self.return_carry else y
