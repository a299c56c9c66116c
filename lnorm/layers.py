"""Dense and convolutional layers whose summed inputs are normalized (paper eq. 5)."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
from flax.linen.dtypes import promote_dtype
import jax
import jax.numpy as jnp

from lnorm import normalization as N
from lnorm import norms

NORMS = norms.supported("none", "layer", "batch", "weight", "rms")


def _row(v_F: jax.Array, ndim: int) -> jax.Array:
  return v_F.reshape((1,) * (ndim - 1) + v_F.shape)


class _Normalized(nn.Module):
  """The normalization of summed inputs ``a`` (batch first, features last),
  shared by the dense and convolutional layers. Layer and RMS norm use every
  unit of an example (for a convolution: all of H x W x C, as in section 6.7);
  batch norm uses every position of a feature (for a convolution: N x H x W).
  Gains and biases are per feature.

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
  kernel_init: Callable = nn.initializers.lecun_normal()
  dtype: jnp.dtype | None = None
  param_dtype: jnp.dtype = jnp.float32

  def kernel_shape(self, x: jax.Array) -> tuple[int, ...]:
    raise NotImplementedError

  def summed_inputs(self, x: jax.Array, w: jax.Array) -> jax.Array:
    raise NotImplementedError

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool = True) -> jax.Array:
    norms.check(self.norm, NORMS)
    F, pd = self.features, self.param_dtype
    w = self.param("kernel", self.kernel_init, self.kernel_shape(x), pd)
    b_F = self.param("bias", nn.initializers.zeros, (F,), pd)
    if self.norm == "none":
      x, w, b_F = promote_dtype(x, w, b_F, dtype=self.dtype)
      a = self.summed_inputs(x, w)
      return a + _row(b_F, a.ndim)
    g_F = self.param("gain", nn.initializers.ones, (F,), pd)
    x, w, b_F, g_F = promote_dtype(x, w, b_F, g_F, dtype=self.dtype)
    if self.norm == "weight":
      # Each unit's incoming weights (all axes but the last) to unit norm.
      a = self.summed_inputs(x, N.weight_norm(w, g_F, axis=tuple(range(w.ndim - 1))))
      return a + _row(b_F, a.ndim)
    a = self.summed_inputs(x, w)
    if self.norm == "batch":
      return self._batch_norm(a, g_F, b_F, train)
    units = tuple(range(1, a.ndim))
    f = N.layer_norm if self.norm == "layer" else N.rms_norm
    if a.ndim == 2:
      return f(a, g_F, b_F, eps=self.eps)
    y = f(a, axis=units, eps=self.eps)
    return y * _row(g_F, a.ndim) + _row(b_F, a.ndim)

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
  inputs, pre-activation. ``norm``: ``none`` (``x W + b``), ``layer``, ``rms``,
  ``batch`` (running averages in ``batch_stats``; pass ``train``) or
  ``weight`` (``x (gain * W / ||W||) + b``). Gains start at 1, biases at 0."""

  def kernel_shape(self, x_BxD):
    return (x_BxD.shape[-1], self.features)

  def summed_inputs(self, x_BxD, w_DxH):
    return x_BxD @ w_DxH


class NormConv(_Normalized):
  """A 'SAME' convolution (NHWC) whose summed inputs are normalized as in
  ``NormDense``; layer norm over H x W x C of each example."""
  kernel_size: tuple[int, int] = (3, 3)

  def kernel_shape(self, x_BxHxWxC):
    return (*self.kernel_size, x_BxHxWxC.shape[-1], self.features)

  def summed_inputs(self, x_BxHxWxC, w_KxKxCxF):
    return jax.lax.conv_general_dilated(
        x_BxHxWxC, w_KxKxCxF, (1, 1), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))
