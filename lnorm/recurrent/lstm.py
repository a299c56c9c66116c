"""``LSTM``: an LSTM layer over whole sequences, the fast path for stacks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen.dtypes import promote_dtype
from flax.typing import Array

from lnorm import norms
from lnorm.recurrent import lstm_scan as ls
from lnorm.recurrent.cells import LSTMCell, RecurrentModule, lstm_params
from lnorm.recurrent.lstm_scan import center, lstm_scan
from lnorm.recurrent.masked_scan import Recurrent


class LSTM(RecurrentModule):
  """An LSTM layer over whole sequences: (*batch, T, in) -> (*batch, T, H).

  ``norm`` selects the cell it computes, ``LSTMCell(features, norm=norm)``,
  with that cell's parameter names, shapes and initialisers: 'none' (eqs.
  17-19), 'layer' (the LN-LSTM, eqs. 20-22) and 'layer_c' (eqs. 29-31, the
  DRAW variant) take the fast path below; any other norm the cell takes
  without running statistics scans the cell (``Recurrent(LSTMCell)``) on
  the same parameters (BENCHMARKS.md: its step time against the fast
  path's), batch norm too (``max_steps`` and the other batch-norm fields
  as ``LSTMCell``'s; its running averages in ``batch_stats``). The fast path
  equals ``Recurrent(cell)`` (without a mask, ``nn.RNN(cell)``) on the same
  parameters up to float32 rounding, and
  trains faster (BENCHMARKS.md): W_x x is one matmul over all steps (on
  CPU, for x of at most 8 features, formed row by row in the native kernels
  instead), the backward is hand-written, and on CPU each step's elementwise
  work is one native kernel.

  Use it whenever the layer's whole input sequence is known before it runs:
  an encoder or classifier over sequences, a language model trained with
  teacher forcing, each layer of a stack. Scan the cell instead
  (``nn.RNN(LSTMCell(...))``, ``Recurrent`` or one ``cell(carry, x_t)`` per
  step) when each step's input depends on the previous step's output: when
  sampling from the model, or when the output steers what is read next (an
  attention window fed back, as in DRAW). The parameters are the same, so a
  model trained with ``LSTM`` can be sampled with ``LSTMCell``:
  ``LSTMCell(H, norm=norm).apply({'params': lstm_params}, carry, x_t)``.

  Stack one module per layer; a skip connection feeds a layer's input
  forward around it::

      class Encoder(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x, mask=None):
          h1 = LSTM(self.features, norm='layer')(x, mask)
          h2 = h1 + LSTM(self.features, norm='layer')(h1, mask)  # residual
          return h2

  Graves-style skips concatenate instead: the second layer reads
  ``jnp.concatenate([x, h1], -1)``, and the output layer all of h1, h2.

  ``mask`` (*batch, T) works as in ``Recurrent``: where it is False the carry
  is frozen and the output is 0. ``initial_carry`` is ``(c, h)``, each
  (*batch, H), zeros by default. Returns ``y``, or ``((c_T, h_T), y)`` with
  ``return_carry``. ``dtype`` is the compute dtype and that of the outputs
  (None: promoted from the input and parameters; statistics accumulate in
  at least float32), ``param_dtype`` that of the parameters. ``unroll`` goes
  to both scans. On CPU, float32 scans run each time step's elementwise work
  (everything but the matmuls with W_h) as one native kernel
  (``lnorm/native``); ``native=False`` keeps them in XLA, as on other
  platforms.
  """

  features: int
  norm: str = 'none'
  eps: float = 1e-5
  gain_init: float | None = None  # where every gain starts (None: 1, batch norm's 0.1)
  # Batch norm only (the cell's scan, statistics per step): as LSTMCell's.
  max_steps: int | None = None
  use_running_average: bool = False
  momentum: float = 0.99
  unbiased: bool = False
  forget_bias: float = 0.0
  return_carry: bool = False
  unroll: int = 1
  native: bool = True

  def __post_init__(self):
    nm = norms.accept(self.norm, norms.GATES, norms.CELL)
    if nm.running_stats and self.max_steps is None:
      raise ValueError(f"LSTM(norm={self.norm!r}) needs max_steps, the number "
                       "of time steps with statistics of their own")
    super().__post_init__()

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               initial_carry: tuple[Array, Array] | None = None):
    if x.ndim < 2:
      raise ValueError(f'input of shape {x.shape} has no time axis')
    H = self.features
    batch_shape, (T, I) = x.shape[:-2], x.shape[-2:]
    nm = norms.get(self.norm)
    P = lstm_params(self, I, self.gain_init if self.gain_init is not None
                    else nm.cell_gain_init)
    if norms.get(self.norm).name not in ls.NORMS:  # no fast path: the cell's scan
      return self._scan_cell(P, x, mask, initial_carry)
    k_x, k_h, g_h, g_x, b_4H, g_c, b_c = (
        P.get(k) for k in ('kernel_x', 'kernel_h', 'gain_h', 'gain_x', 'bias', 'gain_c',
                           'bias_c'))

    x_TxBxI = jnp.moveaxis(x.reshape((-1, T, I)), 1, 0)
    B = x_TxBxI.shape[1]
    x_TxBxI, k_x, k_h, g_h, g_x, g_c, b_c, b_4H = promote_dtype(
        x_TxBxI, k_x, k_h, g_h, g_x, g_c, b_c, b_4H, dtype=self.dtype)
    # For 'layer', LN(x @ k_x) = RMSNorm(x @ center(k_x)), which the scans
    # form row by row. (lstm_scan centres k_h itself.)
    if self.norm == 'layer':  # the fast path's dispatch
      k_x = center(k_x)

    if mask is not None:
      mask = jnp.asarray(mask, bool)
      if mask.shape != x.shape[:-1]:
        raise ValueError(f'mask has shape {mask.shape}; expected '
                         f'{x.shape[:-1]} (batch..., time)')
      mask = mask.reshape((B, T)).T
    if initial_carry is None:
      c0 = h0 = jnp.zeros((B, H), k_h.dtype)
    else:
      c0, h0 = (jnp.asarray(a, k_h.dtype).reshape((B, H))
                for a in initial_carry)
    y, c, h = lstm_scan(self.norm, float(self.eps), self.unroll,
                        bool(self.native), x_TxBxI, k_x, g_x, b_4H, k_h, g_h,
                        g_c, b_c, c0, h0, mask)
    y = y.reshape(batch_shape + (T, H))
    if not self.return_carry:
      return y
    return (c.reshape(batch_shape + (H,)), h.reshape(batch_shape + (H,))), y

  def _scan_cell(self, P, x, mask, initial_carry):
    """``Recurrent(LSTMCell)`` on this layer's parameters ``P``: for the norms
    without a fast path. A norm's running statistics live in this layer's
    ``batch_stats``, as the cell names them."""
    cell = LSTMCell(self.features, norm=self.norm, eps=self.eps, forget_bias=self.forget_bias,
                    max_steps=self.max_steps, use_running_average=self.use_running_average,
                    momentum=self.momentum, unbiased=self.unbiased, dtype=self.dtype,
                    param_dtype=self.param_dtype)
    carry = initial_carry
    if carry is None:
      carry = cell.initialize_carry(jax.random.key(0), x.shape[:-2] + x.shape[-1:])
    elif norms.get(self.norm).running_stats:
      carry = (*carry, jnp.zeros((), jnp.int32))  # the step, shared by the batch
    rec = Recurrent(cell, unroll=self.unroll)
    if not norms.get(self.norm).running_stats:
      carry, y = rec.apply({'params': {'cell': P}}, x, mask, initial_carry=tuple(carry))
    else:
      # The cell's statistics (constant inits) become this layer's variables.
      shapes = jax.eval_shape(lambda: rec.init(jax.random.key(0), x, mask))['batch_stats']
      stats = {k: self.variable('batch_stats', k, jnp.zeros if k.startswith('mean')
                                else jnp.ones, v.shape, v.dtype)
               for k, v in shapes['cell'].items()}
      variables = {'params': {'cell': P},
                   'batch_stats': {'cell': {k: v.value for k, v in stats.items()}}}
      if self.is_mutable_collection('batch_stats') or self.is_initializing():
        (carry, y), new = rec.apply(variables, x, mask, initial_carry=tuple(carry),
                                    mutable=['batch_stats'])
        if not self.is_initializing():  # init leaves the averages at 0 and 1
          for k, v in new['batch_stats']['cell'].items():
            stats[k].value = v
      else:  # evaluation (use_running_average); training needs them mutable, as the cell's
        carry, y = rec.apply(variables, x, mask, initial_carry=tuple(carry))
      carry = carry[:2]
    if self.dtype is not None:
      carry, y = tuple(a.astype(self.dtype) for a in carry), y.astype(self.dtype)
    return (tuple(carry), y) if self.return_carry else y
