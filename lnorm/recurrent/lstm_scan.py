"""Recurrent cells with layer and batch normalization, and a masked scan.

Equation numbers are those of Ba, Kiros & Hinton 2016 (arXiv 1607.06450):
eq. 4 (layer-normalized RNN), eqs. 17-22 (LSTM and LN-LSTM), eqs. 23-28
(GRU and LN-GRU), eqs. 29-31 (the DRAW LSTM, LN on the cell only).
``BNLSTMCell`` follows Cooijmans et al. 2016, "Recurrent Batch Normalization".

Every cell follows ``flax.linen.RNNCellBase`` (``features``,
``initialize_carry``, ``__call__(carry, x) -> (carry, y)``,
``num_feature_axes``), so ``nn.RNN(cell)`` scans it. ``Recurrent`` scans a cell
over a padded batch with a (batch, time) mask.

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
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen import initializers
from flax.linen.dtypes import promote_dtype
from flax.typing import Array, Dtype, Initializer, PRNGKey
import numpy as np

from lnorm import native, norms
from lnorm.normalization import batch_norm, layer_norm

Carry = Any

default_kernel_init = initializers.lecun_normal()
default_recurrent_kernel_init = initializers.orthogonal()


def _stacked(init: Initializer, n: int) -> Initializer:
  """``n`` independent (in, H) draws side by side: one per gate, like flax."""

  def f(key: PRNGKey, shape: tuple[int, ...], dtype: Dtype = jnp.float32):
    keys = jax.random.split(key, n)
    block = shape[:-1] + (shape[-1] // n,)
    return jnp.concatenate([init(k, block, dtype) for k in keys], axis=-1)

  return f


def _lstm_bias_init(bias_init: Initializer, forget_bias: float) -> Initializer:
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


def _kernels(mod: nn.Module, x: Array, h: Array, n_gates: int,
             suffix: str = '') -> tuple[Array, Array]:
  """Returns ``(W_x x, W_h h)``, each (..., n_gates*H), in the compute dtype."""
  H = mod.features
  k_x = mod.param('kernel_x' + suffix, _stacked(mod.kernel_init, n_gates),
                  (x.shape[-1], n_gates * H), mod.param_dtype)
  k_h = mod.param('kernel_h' + suffix,
                  _stacked(mod.recurrent_kernel_init, n_gates),
                  (H, n_gates * H), mod.param_dtype)
  x, h, k_x, k_h = promote_dtype(x, h, k_x, k_h, dtype=mod.dtype)
  return x @ k_x, h @ k_h


def _lstm_update(z_Bx4H: Array, c_BxH: Array) -> tuple[Array, Array]:
  """Eqs. 18/21/30: returns the raw new cell c_t and sigma(o)."""
  f, i, o, g = jnp.split(z_Bx4H, 4, axis=-1)
  c_new = jax.nn.sigmoid(f) * c_BxH + jax.nn.sigmoid(i) * jnp.tanh(g)
  return c_new, jax.nn.sigmoid(o)


def _ln_c_output(mod: nn.Module, z_Bx4H: Array, c_BxH: Array
                 ) -> tuple[tuple[Array, Array], Array]:
  """Eqs. 21-22 / 30-31, with params ``gain_c`` (init 1) and ``bias_c`` (init 0)."""
  H = mod.features
  g_c = mod.param('gain_c', initializers.ones_init(), (H,), mod.param_dtype)
  b_c = mod.param('bias_c', initializers.zeros_init(), (H,), mod.param_dtype)
  c_BxH, o_BxH = _lstm_update(z_Bx4H, c_BxH)
  h_BxH = o_BxH * jnp.tanh(layer_norm(c_BxH, g_c, b_c, eps=mod.eps))
  return (c_BxH, h_BxH), h_BxH


class _CellMixin:
  """Shared carry bookkeeping (no fields: flax dataclass field order). The
  default carry is one zero state ``h``."""

  @property
  def num_feature_axes(self) -> int:
    return 1

  @nn.nowrap
  def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Carry:
    return _zeros_carry(input_shape[:-1], self.features, self.param_dtype)


class _LSTMCarryMixin(_CellMixin):
  """The carry ``(c, h)`` of the LSTM cells, zeros at the start."""

  @nn.nowrap
  def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]
                       ) -> tuple[Array, Array]:
    z = _zeros_carry(input_shape[:-1], self.features, self.param_dtype)
    return (z, z)


class LSTMCell(_LSTMCarryMixin, nn.RNNCellBase):
  """Plain LSTM, eqs. 17-19.

      (f, i, o, g) = W_h h_{t-1} + W_x x_t + b                 (17)
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)            (18)
      h_t = sigma(o) * tanh(c_t)                               (19)

  Carry ``(c, h)``, output ``h``. Params: ``kernel_x`` (I, 4H), ``kernel_h``
  (H, 4H), ``bias`` (4H,).
  """

  features: int
  forget_bias: float = 0.0
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: tuple[Array, Array], x: Array
               ) -> tuple[tuple[Array, Array], Array]:
    c_BxH, h_BxH = carry
    wx_Bx4H, wh_Bx4H = _kernels(self, x, h_BxH, 4)
    b_4H = self.param('bias', _lstm_bias_init(self.bias_init, self.forget_bias),
                      (4 * self.features,), self.param_dtype)
    z_Bx4H = wh_Bx4H + wx_Bx4H + _row(b_4H, wx_Bx4H.ndim)
    c_BxH, o_BxH = _lstm_update(z_Bx4H, c_BxH)
    h_BxH = o_BxH * jnp.tanh(c_BxH)
    return (c_BxH, h_BxH), h_BxH


class LNLSTMCell(_LSTMCarryMixin, nn.RNNCellBase):
  """Layer-normalized LSTM, eqs. 20-22.

      (f, i, o, g) = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2) + b   (20)
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)                       (21)
      h_t = sigma(o) * tanh(LN(c_t; a3, b3))                              (22)

  Each LN in eq. 20 is over all 4H pre-activations of its term. The carry is
  ``(c, h)`` with the *raw* c_t of eq. 21: LN(c_t) only feeds h_t. Params:
  ``kernel_x``, ``kernel_h``, ``gain_h`` and ``gain_x`` (4H,) = a1, a2 (init
  1), ``bias`` (4H,) = b1 + b2 + b (init 0, forget slice ``forget_bias``),
  ``gain_c`` / ``bias_c`` (H,) = a3, b3 (init 1, 0).
  """

  features: int
  eps: float = 1e-5
  forget_bias: float = 0.0
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: tuple[Array, Array], x: Array
               ) -> tuple[tuple[Array, Array], Array]:
    c_BxH, h_BxH = carry
    H = self.features
    wx_Bx4H, wh_Bx4H = _kernels(self, x, h_BxH, 4)
    ones = initializers.ones_init()
    g_h = self.param('gain_h', ones, (4 * H,), self.param_dtype)
    g_x = self.param('gain_x', ones, (4 * H,), self.param_dtype)
    # b1, b2 and b of eq. 20 are only ever summed: one bias is the same model
    # with fewer parameters.
    b_4H = self.param('bias', _lstm_bias_init(self.bias_init, self.forget_bias),
                      (4 * H,), self.param_dtype)
    z_Bx4H = (layer_norm(wh_Bx4H, g_h, eps=self.eps)
              + layer_norm(wx_Bx4H, g_x, eps=self.eps)
              + _row(b_4H, wx_Bx4H.ndim))
    return _ln_c_output(self, z_Bx4H, c_BxH)


class LayerNormCLSTMCell(_LSTMCarryMixin, nn.RNNCellBase):
  """The DRAW experiment's LSTM, eqs. 29-31: LN on the cell state only.

      (f, i, o, g) = W_h h_{t-1} + W_x x_t + b                 (29)
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)            (30)
      h_t = sigma(o) * tanh(LN(c_t; a, b))                     (31)

  Carry ``(c, h)`` with the raw c_t. Params as ``LSTMCell`` plus ``gain_c``
  (init 1) and ``bias_c`` (init 0), both (H,).
  """

  features: int
  eps: float = 1e-5
  forget_bias: float = 0.0
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: tuple[Array, Array], x: Array
               ) -> tuple[tuple[Array, Array], Array]:
    c_BxH, h_BxH = carry
    H = self.features
    wx_Bx4H, wh_Bx4H = _kernels(self, x, h_BxH, 4)
    b_4H = self.param('bias', _lstm_bias_init(self.bias_init, self.forget_bias),
                      (4 * H,), self.param_dtype)
    z_Bx4H = wh_Bx4H + wx_Bx4H + _row(b_4H, wx_Bx4H.ndim)
    return _ln_c_output(self, z_Bx4H, c_BxH)


class GRUCell(_CellMixin, nn.RNNCellBase):
  """The paper's GRU variant, eqs. 23-25 (reset applied after U).

      (z, r) = W_h h_{t-1} + W_x x_t + b                       (23)
      h^_t = tanh(W x_t + b_c + sigma(r) * (U h_{t-1}))        (24)
      h_t = (1 - sigma(z)) * h_{t-1} + sigma(z) * h^_t         (25)

  Beyond the paper: eqs. 23-24 have no biases; ``bias`` (2H,) and ``bias_c``
  (H,) start at 0, so at initialisation the cell is the paper's. Params:
  ``kernel_x`` / ``kernel_h`` (., 2H) = W_x / W_h, ``kernel_xc`` (I, H) = W,
  ``kernel_hc`` (H, H) = U. Carry and output ``h``.
  """

  features: int
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: Array, x: Array) -> tuple[Array, Array]:
    h_BxH = carry
    H = self.features
    wx_Bx2H, wh_Bx2H = _kernels(self, x, h_BxH, 2)
    Wx_BxH, Uh_BxH = _kernels(self, x, h_BxH, 1, suffix='c')
    b_2H = self.param('bias', self.bias_init, (2 * H,), self.param_dtype)
    b_c = self.param('bias_c', self.bias_init, (H,), self.param_dtype)
    z_BxH, r_BxH = jnp.split(
        jax.nn.sigmoid(wh_Bx2H + wx_Bx2H + _row(b_2H, wx_Bx2H.ndim)), 2, -1)
    hh_BxH = jnp.tanh(Wx_BxH + _row(b_c, Wx_BxH.ndim) + r_BxH * Uh_BxH)
    h_BxH = (1.0 - z_BxH) * h_BxH + z_BxH * hh_BxH
    return h_BxH, h_BxH


class LNGRUCell(_CellMixin, nn.RNNCellBase):
  """Layer-normalized GRU, eqs. 26-28.

      (z, r) = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2)               (26)
      h^_t = tanh(LN(W x_t; a3, b3) + sigma(r) * LN(U h_{t-1}; a4, b4))   (27)
      h_t = (1 - sigma(z)) * h_{t-1} + sigma(z) * h^_t                     (28)

  The LNs of eq. 26 are over all 2H gate pre-activations, those of eq. 27
  over H. Params: ``gain_h`` / ``gain_x`` (2H,) = a1 / a2, ``bias`` (2H,) =
  b1 + b2, ``gain_xc`` / ``bias_xc`` (H,) = a3 / b3, ``gain_hc`` /
  ``bias_hc`` (H,) = a4 / b4; gains start at 1, biases at 0. Kernels as
  ``GRUCell``.
  """

  features: int
  eps: float = 1e-5
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: Array, x: Array) -> tuple[Array, Array]:
    h_BxH = carry
    H = self.features
    ones = initializers.ones_init()
    p = self.param
    wx_Bx2H, wh_Bx2H = _kernels(self, x, h_BxH, 2)
    Wx_BxH, Uh_BxH = _kernels(self, x, h_BxH, 1, suffix='c')
    g_h = p('gain_h', ones, (2 * H,), self.param_dtype)
    g_x = p('gain_x', ones, (2 * H,), self.param_dtype)
    # b1 and b2 of eq. 26 are only ever summed: one bias suffices. b4 of
    # eq. 27 is scaled by sigma(r), so it is not redundant with b3.
    b_2H = p('bias', self.bias_init, (2 * H,), self.param_dtype)
    g_xc = p('gain_xc', ones, (H,), self.param_dtype)
    b_xc = p('bias_xc', self.bias_init, (H,), self.param_dtype)
    g_hc = p('gain_hc', ones, (H,), self.param_dtype)
    b_hc = p('bias_hc', self.bias_init, (H,), self.param_dtype)
    zr_Bx2H = (layer_norm(wh_Bx2H, g_h, eps=self.eps)
               + layer_norm(wx_Bx2H, g_x, eps=self.eps)
               + _row(b_2H, wx_Bx2H.ndim))
    z_BxH, r_BxH = jnp.split(jax.nn.sigmoid(zr_Bx2H), 2, -1)
    hh_BxH = jnp.tanh(layer_norm(Wx_BxH, g_xc, b_xc, eps=self.eps)
                      + r_BxH * layer_norm(Uh_BxH, g_hc, b_hc, eps=self.eps))
    h_BxH = (1.0 - z_BxH) * h_BxH + z_BxH * hh_BxH
    return h_BxH, h_BxH


class RNNCell(_CellMixin, nn.RNNCellBase):
  """Plain RNN: h_t = f(W_hh h_{t-1} + W_xh x_t + b). Carry and output ``h``."""

  features: int
  activation: Callable[[Array], Array] = jnp.tanh
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: Array, x: Array) -> tuple[Array, Array]:
    wx_BxH, wh_BxH = _kernels(self, x, carry, 1)
    b_H = self.param('bias', self.bias_init, (self.features,), self.param_dtype)
    h_BxH = self.activation(wh_BxH + wx_BxH + _row(b_H, wx_BxH.ndim))
    return h_BxH, h_BxH


class LNRNNCell(_CellMixin, nn.RNNCellBase):
  """Layer-normalized RNN, eq. 4: h_t = f(g / sigma_t * (a_t - mu_t) + b).

  a_t = W_hh h_{t-1} + W_xh x_t has no bias of its own: LN would subtract it.
  Params: ``kernel_x``, ``kernel_h``, ``gain`` (H,) init 1, ``bias`` (H,)
  init 0. Carry and output ``h``.
  """

  features: int
  eps: float = 1e-5
  activation: Callable[[Array], Array] = jnp.tanh
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, carry: Array, x: Array) -> tuple[Array, Array]:
    H = self.features
    wx_BxH, wh_BxH = _kernels(self, x, carry, 1)
    g_H = self.param('gain', initializers.ones_init(), (H,), self.param_dtype)
    b_H = self.param('bias', self.bias_init, (H,), self.param_dtype)
    h_BxH = self.activation(layer_norm(wh_BxH + wx_BxH, g_H, b_H, eps=self.eps))
    return h_BxH, h_BxH


class BNLSTMCell(_CellMixin, nn.RNNCellBase):
  """Recurrent batch-normalized LSTM (Cooijmans et al. 2016).

      (f, i, o, g) = BN(W_h h_{t-1}; g_h, 0) + BN(W_x x_t; g_x, 0) + b
      c_t = sigma(f) * c_{t-1} + sigma(i) * tanh(g)
      h_t = sigma(o) * tanh(BN(c_t; g_c, b_c))

  BN statistics are over all batch axes (all but the last), separately for
  each time step t < ``max_steps``; steps t >= ``max_steps`` use row
  ``max_steps - 1`` in evaluation and do not update the running averages.
  Hence the carry is ``(c, h, t)``: t is an int32 *scalar* shared by the
  batch (statistics are per step, not per example), so ``Recurrent`` advances
  it on every step even where the mask freezes (c, h). ``nn.RNN``'s
  ``seq_lengths`` with ``return_carry`` cannot slice a scalar t: use
  ``Recurrent`` for padded batches.

  Running averages live in ``batch_stats`` as ``mean_{h,x,c}`` and
  ``var_{h,x,c}`` of shape (max_steps, 4H or H), initialised to 0 and 1,
  updated as ``momentum * old + (1 - momentum) * batch`` at row t.
  ``Recurrent`` handles the collection by itself. With ``nn.RNN``, whose scan
  can neither create a carried collection nor carry an immutable one:

  * init: ``nn.RNN(cell, variable_broadcast=('params', 'batch_stats'))``;
  * train: ``nn.RNN(cell, variable_carry='batch_stats')`` and
    ``apply(..., mutable=['batch_stats'])``;
  * eval (``use_running_average=True``): ``variable_broadcast`` as for init.

  The modules differ only in how they scan, so the variables are shared.
  Gains start at 0.1 as Cooijmans et al. recommend; g_h and g_x have no BN
  bias because b subsumes it. ``unbiased`` is passed to ``batch_norm`` (it
  rescales the variance used to normalize as well as the one stored).
  """

  features: int
  max_steps: int
  use_running_average: bool = False
  momentum: float = 0.99
  eps: float = 1e-5
  unbiased: bool = False
  gain_init: float = 0.1
  forget_bias: float = 0.0
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

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
  def __call__(self, carry: tuple[Array, Array, Array], x: Array
               ) -> tuple[tuple[Array, Array, Array], Array]:
    c_BxH, h_BxH, t = carry
    H = self.features
    wx_Bx4H, wh_Bx4H = _kernels(self, x, h_BxH, 4)
    gain = initializers.constant(self.gain_init)
    g_h = self.param('gain_h', gain, (4 * H,), self.param_dtype)
    g_x = self.param('gain_x', gain, (4 * H,), self.param_dtype)
    b_4H = self.param('bias', _lstm_bias_init(self.bias_init, self.forget_bias),
                      (4 * H,), self.param_dtype)
    g_c = self.param('gain_c', gain, (H,), self.param_dtype)
    b_c = self.param('bias_c', initializers.zeros_init(), (H,),
                     self.param_dtype)
    z_Bx4H = (self._bn('h', wh_Bx4H, g_h, None, t)
              + self._bn('x', wx_Bx4H, g_x, None, t)
              + _row(b_4H, wx_Bx4H.ndim))
    c_BxH, o_BxH = _lstm_update(z_Bx4H, c_BxH)
    h_BxH = o_BxH * jnp.tanh(self._bn('c', c_BxH, g_c, b_c, t))
    return (c_BxH, h_BxH, t + 1), h_BxH

  @nn.nowrap
  def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]
                       ) -> tuple[Array, Array, Array]:
    z = _zeros_carry(input_shape[:-1], self.features, self.param_dtype)
    return (z, z, jnp.zeros((), jnp.int32))


def _freeze(batch_shape: tuple[int, ...], m_B: Array, new: Array, old: Array
            ) -> Array:
  """Keeps ``old`` where the mask is off; leaves without the batch axes advance.

  A leaf without leading batch axes (``BNLSTMCell``'s step counter) is shared
  by the batch and so cannot be frozen per example.
  """
  nb = len(batch_shape)
  if new.shape[:nb] != batch_shape:
    return new
  m = m_B.reshape(batch_shape + (1,) * (new.ndim - nb))
  return jnp.where(m, new, old)


class Recurrent(nn.Module):
  """Scans ``cell`` over time with an optional (*batch, time) boolean mask.

  ``__call__(x, mask=None) -> (final_carry, y)`` with x (*batch, time,
  *features) and y (*batch, time, *out). Where ``mask`` is False the cell
  still runs (fixed shapes under ``lax.scan``) but every carry leaf with the
  batch axes keeps its previous value and the output is 0, so the final carry
  of a sequence is its carry after its last unmasked step. Unlike
  ``nn.RNN(seq_lengths=...)``, which selects the carry at ``length - 1``
  after the fact and leaves padded outputs as computed, the mask may have
  holes, a length of 0 keeps the initial carry, and outputs are zeroed.

  The ``stats`` collection (``BNLSTMCell``'s running averages) is carried
  through the scan when it is mutable, so the cell updates it at every step
  under ``apply(..., mutable=['batch_stats'])``. At init and when it is
  immutable it is broadcast instead: a scan cannot create a carried variable,
  nor return an immutable one. ``BNLSTMCell``'s batch statistics include the
  padded examples of each step: batch norm itself is not masked.
  """

  cell: nn.RNNCellBase
  stats: str = 'batch_stats'
  unroll: int = 1

  def __call__(self, x: Array, mask: Array | None = None, *,
               initial_carry: Carry | None = None,
               init_key: PRNGKey | None = None) -> tuple[Carry, Any]:
    t_axis = x.ndim - self.cell.num_feature_axes - 1
    if t_axis < 0:
      raise ValueError(f'input of shape {x.shape} has no time axis')
    batch_shape = x.shape[:t_axis]
    if mask is not None:
      mask = jnp.asarray(mask, bool)
      if mask.shape != x.shape[:t_axis + 1]:
        raise ValueError(f'mask has shape {mask.shape}; expected '
                         f'{x.shape[:t_axis + 1]} (batch..., time)')
      mask = jnp.moveaxis(mask, -1, 0)
    if initial_carry is None:
      key = jax.random.key(0) if init_key is None else init_key
      initial_carry = self.cell.initialize_carry(
          key, batch_shape + x.shape[t_axis + 1:])

    def step(cell: nn.RNNCellBase, carry: Carry, inp: tuple[Array, Any]):
      x_t, m_B = inp
      new_carry, y = cell(carry, x_t)
      if m_B is None:
        return new_carry, y
      new_carry = jax.tree_util.tree_map(
          functools.partial(_freeze, batch_shape, m_B), new_carry, carry)
      zeros = jax.tree_util.tree_map(jnp.zeros_like, y)
      y = jax.tree_util.tree_map(
          functools.partial(_freeze, batch_shape, m_B), y, zeros)
      return new_carry, y

    carried = (not self.is_initializing()
               and self.is_mutable_collection(self.stats))
    scan = nn.scan(step,
                   variable_broadcast=['params'] + ([] if carried
                                                    else [self.stats]),
                   variable_carry=[self.stats] if carried else False,
                   split_rngs={'params': False}, in_axes=0, out_axes=0,
                   unroll=self.unroll)
    x_TxBxI = jnp.moveaxis(x, t_axis, 0)
    carry, y = scan(self.cell, initial_carry, (x_TxBxI, mask))
    y = jax.tree_util.tree_map(lambda v: jnp.moveaxis(v, 0, t_axis), y)
    return carry, y





# ------------------------------------------------------------ sequence LSTM
#
# ``LSTM`` computes what scanning ``LSTMCell``, ``LNLSTMCell`` or
# ``LayerNormCLSTMCell`` computes, reorganised for speed. BENCHMARKS.md
# ("Recurrent LSTM") has the measurements behind each choice:
#
# * W_x x for all steps is one matmul before the scan (``_proj``, whose
#   backward keeps d(W_x x) row-major). With 'layer', its 1/sigma per row is
#   one reduction before the scan, and the steps normalize their row: xw is
#   the only (T, B, 4H) array of the input side.
# * LN(v @ k) = RMSNorm(v @ _center(k)) exactly: the row mean of v @ k is v
#   times the row means of k. The LNs then need one reduction per row
#   instead of two, forward and backward.
# * The backward pass is a hand-written scan (``_lstm_scan``) that does per
#   step only what is sequential; the W_h gradient is one matmul after it,
#   and the gain and bias gradients are summed in its carry.
# * Each forward step saves one packed row: the gates, or for 'layer'
#   LN(W_h h) before its gain, from which (with xw, kept for the x-side
#   backward anyway) the backward recomputes the gates. Saving both cost
#   more in page faults on the larger buffers than the recompute costs.
# * On CPU (float32), each step's elementwise work, everything between the
#   matmuls with W_h, is one native kernel (``lnorm/native/lstm_cpu.cc``)
#   instead of the dozen small XLA kernels it compiles to, whose fixed costs
#   were most of the LN-LSTM's overhead over the plain one. The kernels take
#   the whole (T, ...) arrays and the step, and write their rows in place:
#   XLA's scan would copy every step's slices and updates, and zero-fill
#   its outputs first. From B * H = 1024 they split the batch's rows among
#   XLA's intra-op threads, which otherwise wait while a kernel runs.

_NORMS = norms.supported('none', 'layer', 'layer_c')


def _mean(x: Array) -> Array:
  """Mean over the last axis (keepdims), accumulated in at least float32."""
  acc = jnp.promote_types(x.dtype, jnp.float32)
  return jnp.mean(x, -1, keepdims=True, dtype=acc).astype(x.dtype)


def _rsqrt_mean_square(x: Array, eps: float) -> Array:
  """1 / sqrt(mean(x^2) + eps) over the last axis (keepdims)."""
  acc = jnp.promote_types(x.dtype, jnp.float32)
  ms = jnp.mean(jnp.square(x.astype(acc)), -1, keepdims=True)
  return jax.lax.rsqrt(ms + eps).astype(x.dtype)


def _center(k_IxF: Array) -> Array:
  """Subtracts each row's mean: LN(v @ k) = RMSNorm(v @ _center(k))."""
  return k_IxF - jnp.mean(k_IxF, -1, keepdims=True)


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


def _native_ok(dtype) -> bool:
  """Whether the scans may run their elementwise steps as native CPU kernels
  (float32, and the kernels built): chosen per platform when lowering."""
  return jnp.dtype(dtype) == jnp.float32 and native.load()


def _cpu_native(xla_fn: Callable, native_fn: Callable) -> Callable:
  """``xla_fn``, lowered on CPU as ``native_fn`` (the same function, one native
  kernel). Derivatives, which only higher orders take (the scans are inside a
  custom VJP), go through ``xla_fn``."""
  @jax.custom_jvp
  def f(*args):
    return jax.lax.platform_dependent(*args, cpu=native_fn, default=xla_fn)

  f.defjvp(lambda primals, tangents: jax.jvp(xla_fn, primals, tangents))
  return f


_NORM_CODE = {'none': 0, 'layer': 1, 'layer_c': 2}


def _native_fills(B: int, H: int) -> tuple[Array, Array, Array, Array]:
  """What the kernels take for an absent gain or bias, or an unread input:
  (ones_B, ones_4H, ones_H, zeros_H), made once for the scan. Behind the
  barrier they are loop-invariant data; as constants, XLA sinks them into
  the loop and fills them anew every step, one small kernel each."""
  f32 = jnp.float32
  return jax.lax.optimization_barrier(
      (jnp.ones((B,), f32), jnp.ones((4 * H,), f32), jnp.ones((H,), f32),
       jnp.zeros((H,), f32)))


def _col(a_TxB: Array | None) -> Array | None:
  return None if a_TxB is None else a_TxB[..., None]


def _native_inputs(B, H, arrays, m_TxB, rx_TxB, gx_4H, b_4H, g_4H, g_H, b_H):
  """The kernels' operands: the whole (T, ...) ``arrays``, the mask and rx
  (any buffer when absent), and every parameter (a fill when absent).

  Every step takes the whole arrays: behind the barrier, a constant one (a
  mask of ones; the cotangent of a loss like sum(y)) is data, not a fill
  that XLA sinks into the loop and builds anew every step."""
  ones_B, ones_4H, ones_H, zeros_H = _native_fills(B, H)
  pick = lambda p, fill: fill if p is None else p
  params = (pick(gx_4H, ones_4H), b_4H, pick(g_4H, ones_4H), pick(g_H, ones_H),
            pick(b_H, zeros_H))
  m_arg = ones_B if m_TxB is None else m_TxB.astype(jnp.float32)
  rx_arg = pick(rx_TxB, ones_B)
  *arrays, m_arg, rx_arg = jax.lax.optimization_barrier(
      (*arrays, m_arg, rx_arg))
  return arrays, m_arg, rx_arg, params


def _uninitialized(*shapes: tuple[int, ...]) -> list[Array]:
  """float32 buffers of these shapes, unwritten: for native scan outputs,
  every row of which the kernels write before anything reads it."""
  return jax.ffi.ffi_call(
      'lnorm_uninitialized',
      [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes],
      has_side_effect=True)()


def _lstm_fwd(norm, eps, unroll, use_native, xw_TxBx4H, rx_TxB, gx_4H, b_4H,
              w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB):
  """The scan. Returns ((y, c_T, h_T), saved rows (T, B, sum(sizes)))."""
  masked = m_TxB is not None
  B, H = h0_BxH.shape
  S = sum(_saved_sizes(norm, H, masked))

  def pointwise(a_Bx4H, xw_Bx4H, rx_Bx1, c_BxH, h_BxH, m_Bx1, gx_4H, b_4H,
                g_4H, g_H, b_H):
    """Everything in a step after ``a = h @ w``."""
    if norm == 'layer':
      ra_Bx1 = _rsqrt_mean_square(a_Bx4H, eps)
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
      rc_Bx1 = _rsqrt_mean_square(cc_BxH, eps)
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
  # _cpu_native differentiates (through xla_scan) with respect to arguments.
  def xla_scan(xw_TxBx4H, rx_TxB, gx_4H, b_4H, w_Hx4H, g_4H, g_H, b_H, c0_BxH,
               h0_BxH, m_TxB):
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
    return (y_TxBxH, c_BxH, h_BxH), saved

  def native_scan(xw_TxBx4H, rx_TxB, gx_4H, b_4H, w_Hx4H, g_4H, g_H, b_H,
                  c0_BxH, h0_BxH, m_TxB):
    # Each step's kernel reads its row of the inputs and writes its row of
    # the outputs in place: no per-step slices and updates for XLA to copy.
    T = xw_TxBx4H.shape[0]
    (xw_TxBx4H,), m_arg, rx_arg, params = _native_inputs(
        B, H, (xw_TxBx4H,), m_TxB, rx_TxB, gx_4H, b_4H, g_4H, g_H, b_H)
    sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    kernel = jax.ffi.ffi_call(
        'lnorm_lstm_fwd', (sds(B, H),) * 2 + (sds(T, B, H), sds(T, B, S)),
        input_output_aliases={12: 2, 13: 3}, vmap_method='sequential')

    def body(t, carry):
      c_BxH, h_BxH, y_TxBxH, saved = carry
      return tuple(kernel(
          h_BxH @ w_Hx4H, xw_TxBx4H, c_BxH, h_BxH, m_arg, rx_arg,
          jnp.asarray(t, jnp.int32), *params, y_TxBxH, saved,
          norm=np.int32(_NORM_CODE[norm]), masked=np.int32(masked),
          eps=np.float32(eps)))

    c_BxH, h_BxH, y_TxBxH, saved = jax.lax.fori_loop(
        0, T, body, (c0_BxH, h0_BxH, *_uninitialized((T, B, H), (T, B, S))),
        unroll=unroll)
    return (y_TxBxH, c_BxH, h_BxH), saved

  scan = xla_scan
  if use_native and _native_ok(xw_TxBx4H.dtype):
    scan = _cpu_native(xla_scan, native_scan)
  return scan(xw_TxBx4H, rx_TxB, gx_4H, b_4H, w_Hx4H, g_4H, g_H, b_H, c0_BxH,
              h0_BxH, m_TxB)


def _input_rx(norm: str, xw_TxBx4H: Array, eps: float) -> Array | None:
  """'layer': 1/sigma of each row of the input projection ``xw`` (centred
  kernel, so RMSNorm is LN): the scans form LN(x @ k) = xw * rx row by row."""
  if norm != 'layer':
    return None
  return _rsqrt_mean_square(xw_TxBx4H, eps)[..., 0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _lstm_scan(norm, eps, unroll, use_native, xw_TxBx4H, gx_4H, b_4H, w_Hx4H,
               g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB):
  """LSTM over time from the projected inputs; returns (y, c_T, h_T).

  Pre-activations: ``h @ w`` (layer-normalized without bias, gain ``g_4H``,
  for 'layer', where ``w`` is centred) + ``xw``'s own x-side term (for
  'layer' RMS-normalized, ``xw`` coming from a centred kernel, with gain
  ``gx``) + ``b``. 'layer' and 'layer_c' normalize c_t with ``g_H``,
  ``b_H``. ``m_TxB``: the mask, or None.
  """
  return _lstm_scan_fwd(norm, eps, unroll, use_native, xw_TxBx4H, gx_4H, b_4H,
                        w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB)[0]


def _lstm_scan_fwd(norm, eps, unroll, use_native, xw_TxBx4H, gx_4H, b_4H,
                   w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH, m_TxB):
  rx_TxB = _input_rx(norm, xw_TxBx4H, eps)
  out, saved = _lstm_fwd(norm, eps, unroll, use_native, xw_TxBx4H, rx_TxB,
                         gx_4H, b_4H, w_Hx4H, g_4H, g_H, b_H, c0_BxH, h0_BxH,
                         m_TxB)
  return out, (saved, out[0], xw_TxBx4H, rx_TxB, gx_4H, b_4H, w_Hx4H, g_4H,
               g_H, b_H, h0_BxH, m_TxB)


def _lstm_scan_bwd(norm, eps, unroll, use_native, res, cts):
  (saved, y_TxBxH, xw_TxBx4H, rx_TxB, gx_4H, b_4H, w_Hx4H, g_4H, g_H, b_H,
   h0_BxH, m_TxB) = res
  dy_TxBxH, dc_BxH, dh_BxH = cts
  B, H = h0_BxH.shape
  masked = m_TxB is not None
  sizes = _saved_sizes(norm, H, masked)
  # A row-major W_h^T: XLA folds a plain transpose into the matmul, whose
  # transposed-operand kernel was 1.3-1.7x slower for these shapes.
  wt_4HxH = jax.lax.optimization_barrier(w_Hx4H.T)
  # Sums over time of the bias and gain gradients, carried (per example in
  # XLA; pooled by the kernels into one row per chunk of the batch that a
  # thread takes), rows summed at the end: the same sums taken after the
  # scan over (T, B, 4H) arrays were slower.
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
      da_Bx4H = ra_Bx1 * (d_Bx4H - ah_Bx4H * _mean(ah_Bx4H * d_Bx4H))
      outs = (dxh_Bx4H,)  # xla_scan finishes d xw after the loop
    else:
      da_Bx4H = dz_Bx4H
      outs = ()
    sums = tuple(s + t for s, t in zip(sums, [dz_Bx4H] + terms))
    dc_prev = dc_new * f
    if masked:
      dc_prev = jnp.where(m_Bx1, dc_prev, dc_BxH)
    return dc_prev, da_Bx4H, outs, sums

  n_outs = 1 if norm == 'layer' else 0
  sums0 = tuple(jnp.zeros((B, n), dy_TxBxH.dtype) for n in sum_sizes)

  # Both scans return (dc_0, dh_0, sums, d xw, d(h @ w)); d xw is d(h @ w)
  # but for 'layer'. They take every array as an argument (see _lstm_fwd).
  def xla_scan(dy_TxBxH, saved, xw_TxBx4H, rx_TxB, m_TxB, dc_BxH, dh_BxH,
               gx_4H, b_4H, wt_4HxH, g_4H, g_H, b_H):
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
    return dc0, dh0, sums, dxw, outs[-1]

  def native_scan(dy_TxBxH, saved, xw_TxBx4H, rx_TxB, m_TxB, dc_BxH, dh_BxH,
                  gx_4H, b_4H, wt_4HxH, g_4H, g_H, b_H):
    # As in _lstm_fwd: whole arrays in, rows written in place.
    T = dy_TxBxH.shape[0]
    (dy_TxBxH, saved), m_arg, rx_arg, params = _native_inputs(
        B, H, (dy_TxBxH, saved), m_TxB, rx_TxB, gx_4H, b_4H, g_4H, g_H, b_H)
    sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    n_rest = n_outs + len(sum_sizes)
    kernel = jax.ffi.ffi_call(
        'lnorm_lstm_bwd', (sds(B, H), sds(B, 4 * H), sds(T, B, 4 * H))
        + (sds(T, B, 4 * H),) * n_outs + tuple(sds(B, n) for n in sum_sizes),
        input_output_aliases={12 + k: 2 + k for k in range(1 + n_rest)},
        vmap_method='sequential')

    def body(i, carry):
      dc_BxH, dh_BxH, da, rest = carry
      t = jnp.asarray(T - 1 - i, jnp.int32)
      dc_prev, da_Bx4H, da, *rest = kernel(
          dy_TxBxH, saved, m_arg, rx_arg, t, dc_BxH, dh_BxH, *params,
          da, *rest, norm=np.int32(_NORM_CODE[norm]),
          masked=np.int32(masked))
      dh_prev = da_Bx4H @ wt_4HxH
      if masked:
        m_Bx1 = jax.lax.dynamic_index_in_dim(m_TxB, t, keepdims=False)[:, None]
        dh_prev = jnp.where(m_Bx1, dh_prev, dh_BxH)
      return dc_prev, dh_prev, da, tuple(rest)

    # 'layer': xw's buffer turns into d xw's, row by row.
    xw_rest = (xw_TxBx4H,) if norm == 'layer' else ()
    dc0, dh0, da, rest = jax.lax.fori_loop(
        0, T, body, (dc_BxH, dh_BxH, *_uninitialized((T, B, 4 * H)),
                     xw_rest + sums0),
        unroll=unroll)
    return dc0, dh0, rest[n_outs:], (rest[0] if n_outs else da), da

  scan = xla_scan
  if use_native and _native_ok(dy_TxBxH.dtype):
    scan = _cpu_native(xla_scan, native_scan)
  dc0, dh0, sums, dxw, da = scan(dy_TxBxH, saved, xw_TxBx4H, rx_TxB, m_TxB,
                                 dc_BxH, dh_BxH, gx_4H, b_4H, wt_4HxH, g_4H,
                                 g_H, b_H)

  if masked:
    h_prev = saved[..., -H:]
  else:
    h_prev = jnp.concatenate([h0_BxH[None], y_TxBxH[:-1]], 0)
  dw_Hx4H = h_prev.reshape(-1, H).T @ da.reshape(-1, 4 * H)
  sums = [jnp.sum(s, 0) for s in sums]
  db_4H = sums.pop(0)
  dg_4H = dgx_4H = dg_H = db_H = None
  if norm == 'layer':
    dg_4H, dgx_4H = sums[:2]
    sums = sums[2:]
  if norm != 'none':
    dg_H, db_H = sums
  return (dxw, dgx_4H, db_4H, dw_Hx4H, dg_4H, dg_H, db_H, dc0, dh0, None)


_lstm_scan.defvjp(_lstm_scan_fwd, _lstm_scan_bwd)


@jax.custom_vjp
def _proj(x_TxBxI: Array, k_IxF: Array) -> Array:
  """``x @ k``. Its backward takes dk as one matmul of row-major operands;
  autodiff's version made XLA write d(x @ k), (T, B, F), transposed first."""
  return x_TxBxI @ k_IxF


def _proj_fwd(x_TxBxI, k_IxF):
  return x_TxBxI @ k_IxF, (x_TxBxI, k_IxF)


def _proj_bwd(res, d_TxBxF):
  x_TxBxI, k_IxF = res
  I, F = k_IxF.shape
  dk_IxF = x_TxBxI.reshape(-1, I).T @ d_TxBxF.reshape(-1, F)
  return d_TxBxF @ k_IxF.T, dk_IxF


_proj.defvjp(_proj_fwd, _proj_bwd)


class LSTM(nn.Module):
  """An LSTM layer over whole sequences: (*batch, T, in) -> (*batch, T, H).

  ``norm`` selects the cell it computes, with that cell's parameter names,
  shapes and initialisers: 'none' is ``LSTMCell`` (eqs. 17-19), 'layer' is
  ``LNLSTMCell`` (eqs. 20-22), 'layer_c' is ``LayerNormCLSTMCell`` (eqs.
  29-31, the DRAW variant). It equals ``Recurrent(cell)`` (without a mask,
  ``nn.RNN(cell)``) on the same parameters up to float32 rounding, and trains
  faster (BENCHMARKS.md). Stack modules for several layers.

  ``mask`` (*batch, T) works as in ``Recurrent``: where it is False the carry
  is frozen and the output is 0. ``initial_carry`` is ``(c, h)``, each
  (*batch, H), zeros by default. Returns ``y``, or ``((c_T, h_T), y)`` with
  ``return_carry``. ``dtype`` is the compute dtype (statistics accumulate in
  at least float32); ``unroll`` goes to both scans (1 was fastest here).
  On CPU, float32 scans run each time step's elementwise work (everything
  but the matmuls with W_h) as one native kernel (``lnorm/native``);
  ``native=False`` keeps them in XLA, as on other platforms.
  """

  features: int
  norm: str = 'none'
  eps: float = 1e-5
  forget_bias: float = 0.0
  return_carry: bool = False
  unroll: int = 1
  native: bool = True
  kernel_init: Initializer = default_kernel_init
  recurrent_kernel_init: Initializer = default_recurrent_kernel_init
  bias_init: Initializer = initializers.zeros_init()
  dtype: Dtype | None = None
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               initial_carry: tuple[Array, Array] | None = None):
    norms.check(self.norm, _NORMS)
    if x.ndim < 2:
      raise ValueError(f'input of shape {x.shape} has no time axis')
    H, p, pd = self.features, self.param, self.param_dtype
    batch_shape, (T, I) = x.shape[:-2], x.shape[-2:]
    ones, zeros = initializers.ones_init(), initializers.zeros_init()
    # Created in the cells' order.
    k_x = p('kernel_x', _stacked(self.kernel_init, 4), (I, 4 * H), pd)
    k_h = p('kernel_h', _stacked(self.recurrent_kernel_init, 4), (H, 4 * H),
            pd)
    g_h = g_x = g_c = b_c = None
    if self.norm == 'layer':
      g_h = p('gain_h', ones, (4 * H,), pd)
      g_x = p('gain_x', ones, (4 * H,), pd)
    b_4H = p('bias', _lstm_bias_init(self.bias_init, self.forget_bias),
             (4 * H,), pd)
    if self.norm != 'none':
      g_c = p('gain_c', ones, (H,), pd)
      b_c = p('bias_c', zeros, (H,), pd)

    x_TxBxI = jnp.moveaxis(x.reshape((-1, T, I)), 1, 0)
    B = x_TxBxI.shape[1]
    x_TxBxI, k_x, k_h, g_h, g_x, g_c, b_c, b_4H = promote_dtype(
        x_TxBxI, k_x, k_h, g_h, g_x, g_c, b_c, b_4H, dtype=self.dtype)
    # For 'layer', LN(x @ k_x) = RMSNorm(x @ _center(k_x)), which the scans
    # form row by row, so that xw is the only (T, B, 4H) array.
    if self.norm == 'layer':
      k_h = _center(k_h)
      xw_TxBx4H = _proj(x_TxBxI, _center(k_x))
    else:
      xw_TxBx4H = _proj(x_TxBxI, k_x)

    if mask is not None:
      mask = jnp.asarray(mask, bool)
      if mask.shape != x.shape[:-1]:
        raise ValueError(f'mask has shape {mask.shape}; expected '
                         f'{x.shape[:-1]} (batch..., time)')
      mask = mask.reshape((B, T)).T
    if initial_carry is None:
      c0 = h0 = jnp.zeros((B, H), xw_TxBx4H.dtype)
    else:
      c0, h0 = (jnp.asarray(a, xw_TxBx4H.dtype).reshape((B, H))
                for a in initial_carry)
    y, c, h = _lstm_scan(self.norm, float(self.eps), self.unroll,
                         bool(self.native), xw_TxBx4H, g_x, b_4H, k_h, g_h,
                         g_c, b_c, c0, h0, mask)
    y = jnp.moveaxis(y, 0, 1).reshape(batch_shape + (T, H))
    if not self.return_carry:
      return y
    return (c.reshape(batch_shape + (H,)), h.reshape(batch_shape + (H,))), y
