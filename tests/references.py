"""Float64 references shared by the layer-norm tests."""

import jax.numpy as jnp
import numpy as np


def naive_layer_norm(x, g, b, axes=-1, eps=1e-5):
  """The textbook layer norm, (x - mean) / sqrt(var + eps) * g + b, two
  passes and no shift, over ``axes``; g and b are scalars, shaped like x's
  normalized axes, or already broadcastable. It is written in jnp so that
  its autodiff, on float64 inputs under ``jax.enable_x64``, is the gradient
  reference."""
  ax = tuple(a % x.ndim for a in np.atleast_1d(axes))
  bshape = tuple(n if i in ax else 1 for i, n in enumerate(x.shape))
  p = lambda v: v if jnp.ndim(v) in (0, x.ndim) else jnp.reshape(v, bshape)
  m = jnp.mean(x, ax, keepdims=True)
  v = jnp.mean((x - m) ** 2, ax, keepdims=True)
  return (x - m) / jnp.sqrt(v + eps) * p(g) + p(b)


def rel_err(y, ref):
  """max |y - ref| / max |ref|, in float64."""
  y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
  return np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)
