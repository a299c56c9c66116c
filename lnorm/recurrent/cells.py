"""The paper's recurrent cells: one class per recurrence, with a ``norm`` field.

Equation numbers are those of Ba, Kiros & Hinton 2016 (arXiv 1607.06450):
eq. 4 (layer-normalized RNN), eqs. 17-22 (LSTM and LN-LSTM), eqs. 23-28
(GRU and LN-GRU), eqs. 29-31 (the DRAW LSTM, LN on the cell only).
``LSTMCell(norm='batch')`` follows Cooijmans et al. 2016, "Recurrent Batch
Normalization". The norms are those of ``lnorm.norms``: a cell takes every
norm of the sites it has (``lstm_norms()``, ``gru_norms()``,
``rnn_norms()``), and applies it where the paper applies layer norm, with
that norm's parameters suffixed (``gain_h``, ``alpha_x``, ...):

=============  =====================  =================  =================
``norm``       ``LSTMCell``           ``GRUCell``        ``RNNCell``
=============  =====================  =================  =================
``none``       eqs. 17-19             eqs. 23-25         plain RNN
``layer``      eqs. 20-22             eqs. 26-28         eq. 4
``layer_c``    eqs. 29-31 (DRAW)      -                  -
``batch``      Cooijmans et al.       -                  -
=============  =====================  =================  =================

Every cell is a ``flax.linen.RNNCellBase`` (``features``,
``initialize_carry``, ``__call__(carry, x) -> (carry, y)``,
``num_feature_axes``), so ``nn.RNN(cell)`` scans it; ``Recurrent``
(``masked_scan.py``) scans it over a padded batch with a mask. For a stack of
LSTM layers over sequences known in advance, ``LSTM`` (``lstm.py``) computes
what scanning ``LSTMCell`` computes, faster.

Conventions shared by the cells:

* LSTM gate pre-activations are laid out ``(f, i, o, g)`` along the last axis,
  the order of eqs. 17 and 20; GRU gates ``(z, r)``, the order of eq. 23.
* Kernels are initialised as in ``flax.linen.LSTMCell``: each gate's block of
  the input kernel ``kernel_x`` (in, n*H) is ``lecun_normal`` and each gate's
  (H, H) block of ``kernel_h`` is orthogonal.
* Forget gate: its bias starts at ``forget_bias`` (default 0, as in flax's
  LSTMCell; the paper does not state one). ``forget_bias=1.0`` gives the
  Jozefowicz et al. 2015 initialisation; it is a learnable offset, not a
  constant added at every step.
* The supplement's prose after eqs. 22, 28 and 31 appears to name alpha and
  beta the other way round from eq. 15 (``LN(z; alpha, beta) = alpha * z_hat
  + beta``). Either reading starts the gain at 1 and the bias at 0, which is
  what the LN cells do.
* ``dtype`` and ``param_dtype`` as in Flax's layers: parameters are stored in
  ``param_dtype`` (float32); the matmuls and norms run in ``dtype`` (None:
  the promoted dtype of the inputs and parameters). The carry starts in
  ``param_dtype``, and each step returns the carry, and its output, in the
  carry's dtype, so that a scan's carry keeps its type.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen import initializers
from flax.linen.dtypes import promote_dtype
from flax.typing import Array, Dtype, Initializer, PRNGKey

from lnorm import norms
from lnorm.layers import norm_params
from lnorm.normalization import batch_norm

Carry = Any
GATES, CELL = norms.GATES, norms.CELL


def lstm_norms() -> tuple[str, ...]:
  """The norms ``LSTMCell`` takes: those of its gates or its cell state."""
  return norms.names(GATES, CELL)


def gru_norms() -> tuple[str, ...]:
  """The norms ``GRUCell`` (and ``RNNCell``) take: those of the gates that
  need no running statistics."""
  return norms.names(GATES, running_stats=False)


rnn_norms = gru_norms

default_kernel_init = initializers.lecun_normal()
default_recurrent_kernel_init = initializers.orthogonal()


def stacked(init: Initializer, n: int) -> Initializer:
  """``n`` independent (in, H) draws side by side: one per gate, like flax."""

  def f(key: PRNGKey, shape: tuple[int, ...], dtype: Dtype = jnp.float32):
    keys = jax.random.split(key, n)
    block = shape[:-1] + (shape[-1] // n,)
    return jnp.concatenate([init(k, block, dtype) for k in keys], axis=-1)

  return f


def lstm_bias_init(bias_init: Initializer, forget_bias: float) -> Initializer:
  def f(key: PRNGKey, shape: tuple[int, ...], dtype: Dtype = jnp.float32):
    b_4H = bias_init(key, shape, dtype)
    H = shape[-1] // 4
    return b_4H.at[:H].add(jnp.asarray(forget_bias, dtype))  # f comes first

  return f


def _row(v: Array, ndim: int) -> Array:
  """(F,) -> (1, ..., 1, F): rank promotion is set to 'raise' in the tests."""
  return v.reshape((1,) * (ndim - 1) + v.shape)


def _zeros_carry(batch_shape: tuple[int, ...], features: int, dtype: Dtype
                 ) -> Array:
  return jnp.zeros(batch_shape + (features,), dtype)


def _suffixed(mod: nn.Module, nm: norms.Norm, F: int, suffix: str,
              gain_init: float | None) -> dict[str, Array]:
  """``nm``'s parameters of one normalized term (F features), named
  ``<param><suffix>``, keyed so."""
  p = norm_params(mod, nm, F, F, suffix=suffix, gain_init=gain_init,
                  param_dtype=mod.param_dtype)
  return {k + suffix: v for k, v in p.items()}


def lstm_params(mod: nn.Module, I: int, gain_init: float | None) -> dict[str, Array]:
  """An LSTM's parameters (``mod``: an LSTMCell or LSTM), in ``param_dtype``:
  ``kernel_x`` (I, 4H), ``kernel_h`` (H, 4H); for a norm of the gates its
  parameters for W_h h then for W_x x (for 'layer' and 'batch' ``gain_h``
  and ``gain_x`` (4H,)); ``bias`` (4H,); for a norm of the cell state its
  parameters suffixed ``_c`` and ``bias_c`` (H,). Created in this order,
  which the cell and the sequence layer share: Flax draws each one's init
  from the order. ``gain_init`` (None: the norm's) is where gains start."""
  H, pd, nm = mod.features, mod.param_dtype, norms.get(mod.norm)
  p = {'kernel_x': mod.param('kernel_x', stacked(mod.kernel_init, 4), (I, 4 * H), pd),
       'kernel_h': mod.param('kernel_h', stacked(mod.recurrent_kernel_init, 4),
                             (H, 4 * H), pd)}
  if nm.normalizes(GATES):
    p.update(_suffixed(mod, nm, 4 * H, '_h', gain_init))
    p.update(_suffixed(mod, nm, 4 * H, '_x', gain_init))
  p['bias'] = mod.param('bias', lstm_bias_init(mod.bias_init, mod.forget_bias), (4 * H,), pd)
  if nm.normalizes(CELL):
    p.update(_suffixed(mod, nm, H, '_c', gain_init))
    p['bias_c'] = mod.param('bias_c', initializers.zeros_init(), (H,), pd)
  return p


def gru_params(mod: nn.Module, I: int) -> dict[str, Array]:
  """A GRU's parameters (``mod``: a GRUCell or GRU), in ``param_dtype`` and the
  order the cell and the sequence layer share: ``kernel_x`` (I, 2H),
  ``kernel_h`` (H, 2H), ``kernel_xc`` (I, H), ``kernel_hc`` (H, H); with a
  norm, its parameters for W_h h and W_x x (for 'layer' ``gain_h``,
  ``gain_x`` (2H,)), ``bias`` (2H,), and for W x and U h its parameters
  and a bias each (``gain_xc``, ``bias_xc``, ``gain_hc``, ``bias_hc`` (H,));
  for 'none' ``bias`` (2H,) and ``bias_c`` (H,)."""
  H, pd, b_init = mod.features, mod.param_dtype, mod.bias_init
  nm = norms.get(mod.norm)
  p = {'kernel_x': mod.param('kernel_x', stacked(mod.kernel_init, 2), (I, 2 * H), pd),
       'kernel_h': mod.param('kernel_h', stacked(mod.recurrent_kernel_init, 2),
                             (H, 2 * H), pd),
       'kernel_xc': mod.param('kernel_xc', stacked(mod.kernel_init, 1), (I, H), pd),
       'kernel_hc': mod.param('kernel_hc', stacked(mod.recurrent_kernel_init, 1), (H, H), pd)}
  if nm.normalizes(GATES):
    p.update(_suffixed(mod, nm, 2 * H, '_h', None))
    p.update(_suffixed(mod, nm, 2 * H, '_x', None))
    p['bias'] = mod.param('bias', b_init, (2 * H,), pd)
    for s in ('_xc', '_hc'):
      p.update(_suffixed(mod, nm, H, s, None))
      p['bias' + s] = mod.param('bias' + s, b_init, (H,), pd)
  else:
    p['bias'] = mod.param('bias', b_init, (2 * H,), pd)
    p['bias_c'] = mod.param('bias_c', b_init, (H,), pd)
  return p


def _term(nm: norms.Norm, v: dict[str, Array], suffix: str, a: Array, eps: float,
          bias: bool = False) -> Array:
  """``nm`` applied to one term ``a`` (..., F) with its parameters in ``v``
  (``gain<suffix>``, ...; ``bias<suffix>`` too if ``bias``)."""
  p = {q.name: v[q.name + suffix] for q in nm.params}
  if bias:
    p['bias'] = v['bias' + suffix]
  return nm(a, p, axes=(a.ndim - 1,), eps=eps, groups=0)


def _kernels(mod: nn.Module, x: Array, h: Array, k_x: Array, k_h: Array
             ) -> tuple[Array, Array]:
  """Returns ``(W_x x, W_h h)`` in the compute dtype."""
  x, h, k_x, k_h = promote_dtype(x, h, k_x, k_h, dtype=mod.dtype)
  return x @ k_x, h @ k_h


def _vector(mod: nn.Module, name: str, init: Initializer, size: int,
            dtype: Dtype) -> Array:
  """A (size,) gain or bias, stored in ``param_dtype``, used in ``dtype``."""
  return mod.param(name, init, (size,), mod.param_dtype).astype(dtype)


def _lstm_update(z_Bx4H: Array, c_BxH: Array) -> tuple[Array, Array]:
  """Eqs. 18/21/30: returns the raw new cell c_t and sigma(o)."""
  f, i, o, g = jnp.split(z_Bx4H, 4, axis=-1)
  c_new = jax.nn.sigmoid(f) * c_BxH + jax.nn.sigmoid(i) * jnp.tanh(g)
  return c_new, jax.nn.sigmoid(o)


def lstm_step(nm: norms.Norm, P: dict[str, Array], wx_Bx4H: Array, wh_Bx4H: Array,
              c_BxH: Array, h_BxH: Array, eps: float,
              bn: Callable | None = None) -> tuple[Array, Array]:
  """One LSTM step after its two matmuls (eqs. 17-22 with ``nm`` where LN
  is): returns the raw new cell c_t and h_t, in the carry's dtypes. ``P``:
  the parameters by name; ``bn(name, a, gain, bias)``: the host's batch norm
  for a norm with running statistics. The linen and NNX cells share it."""
  dt = wx_Bx4H.dtype
  v = {k: a.astype(dt) for k, a in P.items() if not k.startswith('kernel')}
  if not nm.normalizes(GATES):
    z_Bx4H = wh_Bx4H + wx_Bx4H
  elif nm.running_stats:
    z_Bx4H = bn('h', wh_Bx4H, v['gain_h'], None) + bn('x', wx_Bx4H, v['gain_x'], None)
  else:
    z_Bx4H = _term(nm, v, '_h', wh_Bx4H, eps) + _term(nm, v, '_x', wx_Bx4H, eps)
  z_Bx4H = z_Bx4H + _row(v['bias'], z_Bx4H.ndim)
  c_new, o_BxH = _lstm_update(z_Bx4H, c_BxH)
  if not nm.normalizes(CELL):
    cn_BxH = c_new
  elif nm.running_stats:
    cn_BxH = bn('c', c_new, v['gain_c'], v['bias_c'])
  else:
    cn_BxH = _term(nm, v, '_c', c_new, eps, bias=True)
  h_new = (o_BxH * jnp.tanh(cn_BxH)).astype(h_BxH.dtype)
  return c_new.astype(c_BxH.dtype), h_new


def gru_step(nm: norms.Norm, P: dict[str, Array], wx_Bx2H: Array, wh_Bx2H: Array,
             Wx_BxH: Array, Uh_BxH: Array, h_BxH: Array, eps: float) -> Array:
  """One GRU step after its four matmuls (eqs. 23-28 with ``nm`` where LN
  is): h_t in the carry's dtype. The linen and NNX cells share it."""
  dt = wx_Bx2H.dtype
  v = {k: a.astype(dt) for k, a in P.items() if not k.startswith('kernel')}
  if nm.normalizes(GATES):
    zr_Bx2H = _term(nm, v, '_h', wh_Bx2H, eps) + _term(nm, v, '_x', wx_Bx2H, eps)
    Wx_BxH = _term(nm, v, '_xc', Wx_BxH, eps, bias=True)
    Uh_BxH = _term(nm, v, '_hc', Uh_BxH, eps, bias=True)
  else:
    zr_Bx2H = wh_Bx2H + wx_Bx2H
    Wx_BxH = Wx_BxH + _row(v['bias_c'], Wx_BxH.ndim)
  zr_Bx2H = zr_Bx2H + _row(v['bias'], zr_Bx2H.ndim)
  z_BxH, r_BxH = jnp.split(jax.nn.sigmoid(zr_Bx2H), 2, -1)
  hh_BxH = jnp.tanh(Wx_BxH + r_BxH * Uh_BxH)
  return ((1.0 - z_BxH) * h_BxH + z_BxH * hh_BxH).astype(h_BxH.dtype)


class RecurrentModule(nn.Module, kw_only=True):
  """The fields every module of ``lnorm.recurrent`` has: its initialisers and
  dtypes (see the conventions above). Keyword-only: a base's fields come
  first in a dataclass, and keyword-only they leave each module's own fields
  (``features``, ``norm``, ...) in their positional order."""
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32


class _Cell(RecurrentModule, nn.RNNCellBase):
  """A cell's carry bookkeeping. The default carry is one zero state ``h``."""

  @property
  def num_feature_axes(self) -> int:
    return 1

  @nn.nowrap
  def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Carry:
    return _zeros_carry(input_shape[:-1], self.features, self.param_dtype)


class LSTMCell(_Cell):
  """The LSTM with ``norm`` any of ``lstm_norms()``: 'none', 'layer',
  'layer_c', 'batch', or any other norm of ``GATES`` and ``CELL``, applied
  where 'layer' applies LN (its parameters suffixed ``_h``, ``_x``, ``_c``).

  'none', eqs. 17-19::

      (f, i, o, g) = W_h h_{t-1} + W_x x_t + b                 (17)
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)            (18)
      h_t = sigma(o) * tanh(c_t)                               (19)

  'layer', the LN-LSTM of eqs. 20-22::

      (f, i, o, g) = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2) + b   (20)
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)                       (21)
      h_t = sigma(o) * tanh(LN(c_t; a3, b3))                              (22)

  Each LN in eq. 20 is over all 4H pre-activations of its term. b1, b2 and b
  are only ever summed: one bias is the same model with fewer parameters.

  'layer_c', the DRAW experiment's LSTM, eqs. 29-31: eq. 17's pre-activations
  with eq. 22's output, LN on the cell state only.

  'batch', the recurrent batch norm of Cooijmans et al. 2016::

      (f, i, o, g) = BN(W_h h_{t-1}; g_h, 0) + BN(W_x x_t; g_x, 0) + b
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)
      h_t = sigma(o) * tanh(BN(c_t; g_c, b_c))

  BN statistics are over all batch axes (all but the last), separately for
  each time step t < ``max_steps`` (required); steps t >= ``max_steps`` use
  row ``max_steps - 1`` in evaluation and do not update the running averages.
  Hence the carry is ``(c, h, t)``: t is an int32 *scalar* shared by the
  batch (statistics are per step, not per example), so ``Recurrent`` advances
  it on every step even where the mask freezes (c, h). ``nn.RNN``'s
  ``seq_lengths`` with ``return_carry`` cannot slice a scalar t: use
  ``Recurrent`` for padded batches. Running averages live in ``batch_stats``
  as ``mean_{h,x,c}`` and ``var_{h,x,c}`` of shape (max_steps, 4H or H),
  initialised to 0 and 1, updated as ``momentum * old + (1 - momentum) *
  batch`` at row t; ``use_running_average`` normalizes with them instead.
  ``Recurrent`` handles the collection by itself. With ``nn.RNN``, whose
  scan can neither create a carried collection nor carry an immutable one:

  * init: ``nn.RNN(cell, variable_broadcast=('params', 'batch_stats'))``;
  * train: ``nn.RNN(cell, variable_carry='batch_stats')`` and
    ``apply(..., mutable=['batch_stats'])``;
  * eval (``use_running_average=True``): ``variable_broadcast`` as for init.

  The scans differ only in how they scan, so the variables are shared.
  g_h and g_x have no BN bias because b subsumes it. ``unbiased`` is passed
  to ``batch_norm`` (it rescales the variance used to normalize as well as
  the one stored).

  Carry ``(c, h)`` (for 'batch' ``(c, h, t)``) with the *raw* c_t: LN(c_t)
  only feeds h_t. Output ``h``. Params: ``kernel_x`` (I, 4H), ``kernel_h``
  (H, 4H), ``bias`` (4H,) (init 0, forget slice ``forget_bias``); for
  'layer' and 'batch' ``gain_h`` and ``gain_x`` (4H,) = a1, a2; for every
  norm but 'none' ``gain_c`` / ``bias_c`` (H,) = a3, b3. Gains start at
  ``gain_init``: None is 1 for the layer norms and 0.1 for 'batch', as
  Cooijmans et al. recommend. ``max_steps``, ``use_running_average``,
  ``momentum`` and ``unbiased`` are read by 'batch' only.
  """

  features: int
  norm: str = 'none'
  eps: float = 1e-5
  forget_bias: float = 0.0
  gain_init: float | None = None
  max_steps: int | None = None
  use_running_average: bool = False
  momentum: float = 0.99
  unbiased: bool = False

  def __post_init__(self):
    nm = norms.accept(self.norm, GATES, CELL)
    if nm.running_stats and self.max_steps is None:
      raise ValueError(f"LSTMCell(norm={self.norm!r}) needs max_steps, the number "
                       "of time steps with statistics of their own")
    super().__post_init__()

  def _bn(self, name: str, a_BxF: Array, gain: Array, bias: Array | None,
          t: Array) -> Array:
    F = a_BxF.shape[-1]
    shape = (self.max_steps, F)
    mean_ra = self.variable('batch_stats', 'mean_' + name,
                            lambda: jnp.zeros(shape, jnp.float32))
    var_ra = self.variable('batch_stats', 'var_' + name,
                           lambda: jnp.ones(shape, jnp.float32))
    row = jnp.minimum(t, self.max_steps - 1)
    batch_axes = tuple(range(a_BxF.ndim - 1))
    if self.use_running_average:
      y, _ = batch_norm(a_BxF, gain, bias, mean=mean_ra.value[row],
                        var=var_ra.value[row], axis=batch_axes, eps=self.eps)
      return y
    y, (mean, var) = batch_norm(a_BxF, gain, bias, axis=batch_axes,
                                eps=self.eps, unbiased=self.unbiased)
    # As flax's BatchNorm: init must leave the running averages at 0 and 1.
    if not self.is_initializing():
      m = self.momentum
      seen = t < self.max_steps
      for ra, stat in ((mean_ra, mean), (var_ra, var)):
        old = ra.value[row]
        new = m * old + (1.0 - m) * stat.reshape(F).astype(old.dtype)
        ra.value = ra.value.at[row].set(jnp.where(seen, new, old))
    return y

  @nn.compact
  def __call__(self, carry: Carry, x: Array) -> tuple[Carry, Array]:
    nm = norms.get(self.norm)
    c_BxH, h_BxH, *t = carry  # t: the step, for running statistics only
    gain_init = self.gain_init if self.gain_init is not None else nm.cell_gain_init
    P = lstm_params(self, x.shape[-1], gain_init)
    wx_Bx4H, wh_Bx4H = _kernels(self, x, h_BxH, P['kernel_x'], P['kernel_h'])
    bn = (lambda name, a, g, b: self._bn(name, a, g, b, t[0])) if nm.running_stats else None
    c_new, h_new = lstm_step(nm, P, wx_Bx4H, wh_Bx4H, c_BxH, h_BxH, self.eps, bn)
    new_carry = (c_new, h_new) + tuple(s + 1 for s in t)
    return new_carry, h_new

  @nn.nowrap
  def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]
                       ) -> Carry:
    z = _zeros_carry(input_shape[:-1], self.features, self.param_dtype)
    if norms.get(self.norm).running_stats:
      return (z, z, jnp.zeros((), jnp.int32))
    return (z, z)


class GRUCell(_Cell):
  """The paper's GRU (reset applied after U), ``norm`` any of ``gru_norms()``:
  'none', 'layer', or any other norm of ``GATES`` applied where 'layer'
  applies LN (its parameters suffixed ``_h``, ``_x``, ``_xc``, ``_hc``).

  'none', eqs. 23-25::

      (z, r) = W_h h_{t-1} + W_x x_t + b                       (23)
      h^_t = tanh(W x_t + b_c + sigma(r) * (U h_{t-1}))        (24)
      h_t = (1 - sigma(z)) * h_{t-1} + sigma(z) * h^_t         (25)

  Beyond the paper: eqs. 23-24 have no biases; ``bias`` (2H,) and ``bias_c``
  (H,) start at 0, so at initialisation the cell is the paper's.

  'layer', eqs. 26-28::

      (z, r) = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2)               (26)
      h^_t = tanh(LN(W x_t; a3, b3) + sigma(r) * LN(U h_{t-1}; a4, b4))   (27)
      h_t = (1 - sigma(z)) * h_{t-1} + sigma(z) * h^_t                     (28)

  The LNs of eq. 26 are over all 2H gate pre-activations, those of eq. 27
  over H. b1 and b2 are only ever summed: one ``bias`` suffices. b4 is
  scaled by sigma(r), so it is not redundant with b3.

  Params: ``kernel_x`` / ``kernel_h`` (., 2H) = W_x / W_h, ``kernel_xc``
  (I, H) = W, ``kernel_hc`` (H, H) = U, ``bias`` (2H,); for 'none'
  ``bias_c`` (H,); for 'layer' ``gain_h`` / ``gain_x`` (2H,) = a1 / a2,
  ``gain_xc`` / ``bias_xc`` (H,) = a3 / b3, ``gain_hc`` / ``bias_hc`` (H,)
  = a4 / b4. Gains start at 1, biases at 0. Carry and output ``h``.
  """

  features: int
  norm: str = 'none'
  eps: float = 1e-5

  def __post_init__(self):
    norms.accept(self.norm, GATES, running_stats=False)
    super().__post_init__()

  @nn.compact
  def __call__(self, carry: Array, x: Array) -> tuple[Array, Array]:
    h_BxH = carry
    P = gru_params(self, x.shape[-1])
    wx_Bx2H, wh_Bx2H = _kernels(self, x, h_BxH, P['kernel_x'], P['kernel_h'])
    Wx_BxH, Uh_BxH = _kernels(self, x, h_BxH, P['kernel_xc'], P['kernel_hc'])
    h_new = gru_step(norms.get(self.norm), P, wx_Bx2H, wh_Bx2H, Wx_BxH, Uh_BxH, h_BxH,
                     self.eps)
    return h_new, h_new


class RNNCell(_Cell):
  """The vanilla RNN, ``norm`` any of ``rnn_norms()`` ('none', 'layer', or
  another norm of ``GATES`` where 'layer' applies LN). Carry and output ``h``.

  'none': h_t = f(W_hh h_{t-1} + W_xh x_t + b); params ``kernel_x``,
  ``kernel_h``, ``bias`` (H,) init 0.

  'layer', eq. 4: h_t = f(g / sigma_t * (a_t - mu_t) + b), where a_t =
  W_hh h_{t-1} + W_xh x_t has no bias of its own: LN would subtract it.
  Params ``kernel_x``, ``kernel_h``, ``gain`` (H,) init 1, ``bias`` (H,)
  init 0.
  """

  features: int
  norm: str = 'none'
  eps: float = 1e-5
  activation: Callable[[Array], Array] = jnp.tanh

  def __post_init__(self):
    norms.accept(self.norm, GATES, running_stats=False)
    super().__post_init__()

  @nn.compact
  def __call__(self, carry: Array, x: Array) -> tuple[Array, Array]:
    H = self.features
    k_x = self.param('kernel_x', stacked(self.kernel_init, 1), (x.shape[-1], H),
                     self.param_dtype)
    k_h = self.param('kernel_h', stacked(self.recurrent_kernel_init, 1), (H, H),
                     self.param_dtype)
    wx_BxH, wh_BxH = _kernels(self, x, carry, k_x, k_h)
    dt = wx_BxH.dtype
    nm = norms.get(self.norm)
    if nm.normalizes(GATES):
      p = {k: a.astype(dt) for k, a in
           norm_params(self, nm, H, H, param_dtype=self.param_dtype).items()}
      p['bias'] = _vector(self, 'bias', self.bias_init, H, dt)
      a_BxH = _term(nm, p, '', wh_BxH + wx_BxH, self.eps, bias=True)
    else:
      b_H = _vector(self, 'bias', self.bias_init, H, dt)
      a_BxH = wh_BxH + wx_BxH + _row(b_H, wx_BxH.ndim)
    h_new = self.activation(a_BxH).astype(carry.dtype)
    return h_new, h_new
