"""Dense and convolutional layers whose summed inputs are normalized (paper eq. 5)."""

from __future__ import annotations

import math
from typing import Any, Callable

import flax.linen as nn
from flax.linen.dtypes import promote_dtype
import jax
import jax.numpy as jnp

from lnorm import normalization as N
from lnorm import norms


def accepted() -> tuple[str, ...]:
  """The norms a dense or conv layer takes: those of ``norms.FEATURES``."""
  return norms.names(norms.FEATURES)


def accept(norm: object) -> norms.Norm:
  """The ``Norm`` of ``norm`` if a dense or conv layer takes it; else one
  ValueError line naming those it takes."""
  return norms.accept(norm, norms.FEATURES)


def _row(v_F: jax.Array, ndim: int) -> jax.Array:
  return v_F.reshape((1,) * (ndim - 1) + v_F.shape)


def norm_params(mod: nn.Module, nm: norms.Norm, features: int, size: int, *,
                suffix: str = "", gain_init: float | None = None,
                param_dtype=jnp.float32) -> dict[str, jax.Array]:
  """``nm``'s parameters, created in ``mod``'s scope in the norm's order, each
  named ``<name><suffix>``: (features,) or scalars, constant inits (``size``:
  the elements normalized together, for inits that depend on it;
  ``gain_init`` overrides where every ``gain`` starts)."""
  p = {}
  for q in nm.params:
    v = gain_init if (q.name == "gain" and gain_init is not None) else q.value(size)
    shape = (features,) if q.shape == "features" else ()
    p[q.name] = mod.param(q.name + suffix, nn.initializers.constant(v), shape, param_dtype)
  return p


class Normalize(nn.Module):
  """Any registered norm over the last ``axes`` axes of x (features last),
  its parameters built from its definition: ``Normalize("layer")(x)``. The
  norm's own bias (``Norm.bias``) is created after its other parameters,
  named ``bias``. Statistics in at least float32, output in x's dtype.
  Norms implemented by their hosts (batch, weight) are refused."""
  norm: Any = "layer"
  eps: float = 1e-5
  axes: int = 1                   # trailing axes normalized together
  groups: int = 0                 # group norm: 0 = the largest divisor of F up to 32
  gain_init: float | None = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    nm = norms.get(self.norm)
    if nm.identity:
      return x
    if nm.fn is None:
      raise ValueError(f"norm={nm.name!r} needs a host that implements it (a dense or "
                       "conv layer, an LSTM cell); Normalize takes: "
                       + ", ".join(norms.names(running_stats=False, kernel=False)))
    F = x.shape[-1]
    axes = tuple(range(x.ndim - self.axes, x.ndim))
    p = norm_params(self, nm, F, math.prod(x.shape[a] for a in axes),
                    gain_init=self.gain_init, param_dtype=self.param_dtype)
    if nm.bias:
      p["bias"] = self.param("bias", nn.initializers.zeros, (F,), self.param_dtype)
    return nm(x, p, axes=axes, eps=self.eps, groups=self.groups)


class _Normalized(nn.Module):
  """The normalization of summed inputs ``a`` (batch first, features last),
  shared by the dense and convolutional layers: any norm of
  ``norms.FEATURES`` (``accepted()``). The per-example norms use every unit
  of an example (for a convolution: all of H x W x C, as in section 6.7;
  group norm each group of channels over H x W); batch norm uses every
  position of a feature (for a convolution: N x H x W), implemented here.
  Gains and biases are per feature; the layer's bias is the norm's.

  ``dtype`` and ``param_dtype`` as in Flax's layers: parameters are created
  in ``param_dtype``; the computation runs in ``dtype`` (None: the inputs'
  and parameters' promoted dtype), statistics in at least float32, and
  batch norm's running averages stay float32."""
  features: int
  norm: str = "none"
  eps: float = 1e-5
  momentum: float = 0.99          # batch norm: running-average decay
  unbiased: bool = False          # batch norm: N/(N-1) variance in training
  axis_name: str | None = None    # batch norm: statistics across devices
  # batch norm: statistics of each of this many equal parts of the batch apart
  # (per-device batch norm under a batch-sharded jit); running averages: their mean
  groups: int = 1
  norm_groups: int = 0            # group norm: groups of channels; 0 = the largest divisor of F up to 32
  kernel_init: Callable = nn.initializers.lecun_normal()
  dtype: jnp.dtype | None = None
  param_dtype: jnp.dtype = jnp.float32

  def kernel_shape(self, x: jax.Array) -> tuple[int, ...]:
    raise NotImplementedError

  def summed_inputs(self, x: jax.Array, w: jax.Array) -> jax.Array:
    raise NotImplementedError

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool = True) -> jax.Array:
    nm = accept(self.norm)
    F, pd = self.features, self.param_dtype
    w = self.param("kernel", self.kernel_init, self.kernel_shape(x), pd)
    b_F = self.param("bias", nn.initializers.zeros, (F,), pd)
    if nm.identity:
      x, w, b_F = promote_dtype(x, w, b_F, dtype=self.dtype)
      a = self.summed_inputs(x, w)
      return a + _row(b_F, a.ndim)
    # The norm's parameters after the layer's: this order sets the random init.
    size = math.prod(x.shape[1:-1]) * F  # an example's units ('SAME' convolutions)
    p = norm_params(self, nm, F, size, param_dtype=pd)
    names = list(p)
    x, w, b_F, *vals = promote_dtype(x, w, b_F, *p.values(), dtype=self.dtype)
    p = dict(zip(names, vals))
    if nm.kernel is not None:
      # Each unit's incoming weights (all axes but the last), e.g. to unit norm.
      a = self.summed_inputs(x, nm.kernel(w, p.get("gain"), tuple(range(w.ndim - 1))))
      return a + _row(b_F, a.ndim)
    a = self.summed_inputs(x, w)
    if nm.running_stats:
      return self._batch_norm(a, p["gain"], b_F, train)
    return nm(a, {**p, "bias": b_F}, axes=tuple(range(1, a.ndim)), eps=self.eps,
              groups=self.norm_groups)

  def _batch_norm(self, a, g_F, b_F, train: bool) -> jax.Array:
    F = self.features
    mean = self.variable("batch_stats", "mean", jnp.zeros, (F,), jnp.float32)
    var = self.variable("batch_stats", "var", jnp.ones, (F,), jnp.float32)
    batch_axes = tuple(range(a.ndim - 1))
    if not train:
      y, _ = N.batch_norm(a, g_F, b_F, mean=mean.value, var=var.value,
                          axis=batch_axes, eps=self.eps)
      return y
    if self.groups > 1:
      G, B = self.groups, a.shape[0]
      if B % G:
        raise ValueError(f"batch norm: batch {B} does not split into {G} groups")
      a_GxBg = a.reshape(G, B // G, *a.shape[1:])
      y, (m, v) = N.batch_norm(a_GxBg, axis=tuple(range(1, a_GxBg.ndim - 1)),
                               eps=self.eps, unbiased=self.unbiased)
      y = y.reshape(a.shape) * _row(g_F, a.ndim) + _row(b_F, a.ndim)
      m, v = jnp.mean(m, 0), jnp.mean(v, 0)
    else:
      y, (m, v) = N.batch_norm(a, g_F, b_F, axis=batch_axes, eps=self.eps,
                               unbiased=self.unbiased, axis_name=self.axis_name)
    if not self.is_initializing():
      d = self.momentum
      m, v = (jax.lax.stop_gradient(s.reshape(F)).astype(jnp.float32)
              for s in (m, v))
      mean.value = d * mean.value + (1 - d) * m
      var.value = d * var.value + (1 - d) * v
    return y


class NormDense(_Normalized):
  """``h = gain * norm(x W) + bias`` (paper eq. 5): the normalized summed
  inputs, pre-activation. ``norm``: any of ``accepted()``: ``none`` (``x W +
  b``), ``layer``, ``rms``, ``batch`` (running averages in ``batch_stats``;
  pass ``train``), ``weight`` (``x (gain * W / ||W||) + b``), ``group``,
  ``dyt``, ``derf``, ``scale``, or a registered norm of your own. Gains start
  at 1, biases at 0; other parameters as their norm says."""

  def kernel_shape(self, x_BxD):
    return (x_BxD.shape[-1], self.features)

  def summed_inputs(self, x_BxD, w_DxH):
    return x_BxD @ w_DxH


class NormConv(_Normalized):
  """A 'SAME' convolution (NHWC) whose summed inputs are normalized as in
  ``NormDense``; layer norm over H x W x C of each example, group norm
  over H x W and each group of channels."""
  kernel_size: tuple[int, int] = (3, 3)

  def kernel_shape(self, x_BxHxWxC):
    return (*self.kernel_size, x_BxHxWxC.shape[-1], self.features)

  def summed_inputs(self, x_BxHxWxC, w_KxKxCxF):
    return jax.lax.conv_general_dilated(
        x_BxHxWxC, w_KxKxCxF, (1, 1), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))
