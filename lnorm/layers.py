"""Feed-forward Flax modules whose summed inputs are normalized (paper eq. 5)."""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from lnorm import normalization as N

NORMS = ("none", "layer", "batch", "weight", "rms")


def check_norm(norm: str, valid: Sequence[str] = NORMS) -> None:
  if norm not in valid:
    raise ValueError(f"norm={norm!r} is not one of {', '.join(valid)}")


class NormDense(nn.Module):
  """``h = gain * norm(x W) + bias``: the normalized summed inputs, pre-activation.

  ``norm``: ``none`` (``x W + b``), ``layer``, ``rms``, ``batch`` (running
  averages in the ``batch_stats`` collection; pass ``train``) or ``weight``
  (``x (gain * W / ||W||) + b``, each unit's incoming weights normalized).
  Gains start at 1 and biases at 0.
  """
  features: int
  norm: str = "none"
  eps: float = 1e-5
  momentum: float = 0.99          # batch norm: running-average decay
  unbiased: bool = False          # batch norm: N/(N-1) variance in training
  axis_name: str | None = None    # batch norm: statistics across devices
  kernel_init: Callable = nn.initializers.lecun_normal()

  @nn.compact
  def __call__(self, x_BxD: jax.Array, *, train: bool = True) -> jax.Array:
    check_norm(self.norm)
    H = self.features
    w_DxH = self.param("kernel", self.kernel_init, (x_BxD.shape[-1], H))
    b_H = self.param("bias", nn.initializers.zeros, (H,))
    if self.norm == "none":
      return x_BxD @ w_DxH + b_H.reshape(1, H)
    g_H = self.param("gain", nn.initializers.ones, (H,))
    if self.norm == "weight":
      return x_BxD @ N.weight_norm(w_DxH, g_H, axis=0) + b_H.reshape(1, H)
    a_BxH = x_BxD @ w_DxH
    if self.norm == "layer":
      return N.layer_norm(a_BxH, g_H, b_H, eps=self.eps)
    if self.norm == "rms":
      return N.rms_norm(a_BxH, g_H, b_H, eps=self.eps)
    return self._batch_norm(a_BxH, g_H, b_H, train)

  def _batch_norm(self, a_BxH, g_H, b_H, train: bool) -> jax.Array:
    H = self.features
    mean = self.variable("batch_stats", "mean", jnp.zeros, (H,), jnp.float32)
    var = self.variable("batch_stats", "var", jnp.ones, (H,), jnp.float32)
    batch_axes = tuple(range(a_BxH.ndim - 1))
    if not train:
      y, _ = N.batch_norm(a_BxH, g_H, b_H, mean=mean.value, var=var.value,
                          axis=batch_axes, eps=self.eps)
      return y
    y, (m, v) = N.batch_norm(a_BxH, g_H, b_H, axis=batch_axes, eps=self.eps,
                             unbiased=self.unbiased, axis_name=self.axis_name)
    if not self.is_initializing():
      d = self.momentum
      mean.value = d * mean.value + (1 - d) * jax.lax.stop_gradient(m.reshape(H))
      var.value = d * var.value + (1 - d) * jax.lax.stop_gradient(v.reshape(H))
    return y


class MLP(nn.Module):
  """ReLU MLP of ``NormDense`` layers; logits out.

  ``norm_output``: whether the output layer is normalized too. The paper
  (section 6.6) layer-normalizes only the hidden layers but batch-normalizes
  all of them.
  """
  features: Sequence[int]         # hidden sizes then the number of outputs
  norm: str = "none"
  norm_output: bool = False
  eps: float = 1e-5
  momentum: float = 0.99
  unbiased: bool = False

  @nn.compact
  def __call__(self, x_BxD: jax.Array, *, train: bool = True) -> jax.Array:
    h = x_BxD
    last = len(self.features) - 1
    for i, f in enumerate(self.features):
      norm = self.norm if (i < last or self.norm_output) else "none"
      h = NormDense(f, norm=norm, eps=self.eps, momentum=self.momentum,
                    unbiased=self.unbiased, name=f"dense{i}")(h, train=train)
      if i < last:
        h = nn.relu(h)
    return h
