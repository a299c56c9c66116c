"""Normalization primitives as plain JAX functions: they jit, vmap and grad.

Numerics of the functions in this file:

* Statistics are computed in ``stat_dtype(x.dtype)``: float32 for float16,
  bfloat16 and float32 inputs, float64 for float64 inputs. The output has the
  input's dtype.
* Statistics are *shifted*: with K a value inside each group (made a constant
  for autodiff), d = x - K is exact when x is near K (Sterbenz's lemma), and
  the centred values are formed as ``d - mean(d)``, never as ``x - mean(x)``:
  a float32 mean of 1e4 carries a rounding error of ~5e-4, already 0.5% of a
  spread of 0.1. ``E[x^2] - E[x]^2`` on raw x is far worse (cancellation).

  - ``centered_moments`` (batch norm) is two-pass with K the first element:
    ``x_c = d - mean(d)``, ``var = mean(x_c^2)``.
  - ``layer_norm`` (``fused_layer_norm.py``) sums ``d`` and ``d^2`` in one
    pass for speed. Its XLA version takes K the mean of a leading block of at
    least n/32 elements, which bounds ``mean(d)^2 / var <= 32`` for any data,
    so ``var = mean(d^2) - mean(d)^2`` loses at most ~5 bits. Its fused CPU
    kernel (``lnorm/native``) takes K the row's first element, and repeats
    the pass with K + mean(d) whenever ``mean(d)^2 > 4 var``, so at most ~2
    bits are lost.

  The kernel's row sums move from float lanes into double every 16 terms, so
  its error does not grow with the row length; nor, as tested, does that of
  the XLA version, whose sums are XLA's reductions. On float32 rows of
  1e4 + N(0, 0.1) both stay within ~2e-7 relative error of float64 (tested
  to 2^20 elements a row); flax.linen.LayerNorm's default is off by O(10).
* ``eps`` is added to the variance: ``x_hat = x_c / sqrt(var + eps)``. A constant
  group has x_c = 0, so its output is the bias: finite for every eps > 0.
* ``rms_norm`` needs no shift: a sum of squares has no cancellation, so
  ``mean(x^2)`` in one pass (the kernel's sums again moving into double every
  16 terms) is accurate whatever the mean. ``scale_norm`` likewise (its L2
  norm is a square root of such a sum).
* ``group_norm`` is layer norm's primitive over each group (``fused_layer_norm``
  on x reshaped to (..., groups, C/groups), float32 in and out), so it has
  layer norm's shifted statistics and analytic derivatives; the per-channel
  gain and bias follow in the stat dtype and the output is rounded once.
* ``dyt`` and ``derf`` are point-wise (no statistics): computed in the stat
  dtype and rounded to x's dtype once, at the end, like the norms.
"""

from __future__ import annotations

import math
import operator
from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from lnorm import fused_layer_norm
from lnorm import fused_rms_norm

Axes = int | Sequence[int]
Array = jax.Array


def stat_dtype(dtype) -> jnp.dtype:
  """float32 for half precision and float32, float64 for float64."""
  return jnp.promote_types(dtype, jnp.float32)


def _index(a) -> int | None:
  """a as an int, or None when it is not an integer (bools are not axes)."""
  if isinstance(a, (bool, np.bool_)):
    return None
  try:
    return operator.index(a)
  except TypeError:
    return None


def _axes(axis: Axes, ndim: int) -> tuple[int, ...]:
  """``axis`` as sorted non-negative axes; a ValueError that says what is
  valid for anything else (a string, a float, an out-of-range or repeated
  axis, an empty sequence)."""
  single = _index(axis)
  if single is not None:
    axes = [single]
  elif isinstance(axis, (Sequence, np.ndarray)) and not isinstance(axis, str):
    axes = [_index(a) for a in axis]
  else:
    axes = [None]
  out = [a % ndim if a is not None and -ndim <= a < ndim else None
         for a in axes]
  if not out or None in out or len(set(out)) != len(out):
    raise ValueError(
        f"axis={axis!r} is not valid for an input of rank {ndim}: give an int "
        f"in [-{ndim}, {ndim}) or a non-empty sequence of distinct such ints")
  return tuple(sorted(out))


def _check_param(p: Array, shape: tuple[int, ...], axes: tuple[int, ...],
                 name: str) -> Array:
  """A parameter, checked to have the shape ``shape[axes]``."""
  want = tuple(shape[a] for a in axes)
  p = jnp.asarray(p)
  if p.shape != want:
    raise ValueError(f"{name} has shape {p.shape}; expected {want} "
                     f"(the sizes of axes {axes} of an input of shape {shape})")
  return p


def _broadcast_param(p: Array, shape: tuple[int, ...], axes: tuple[int, ...],
                     dtype, name: str) -> Array:
  """Reshapes a parameter of shape ``shape[axes]`` to broadcast against ``shape``."""
  p = _check_param(p, shape, axes, name)
  return fused_layer_norm.broadcast_param(p, shape, axes).astype(dtype)


def _first(x: Array, axes: tuple[int, ...]) -> Array:
  """Element 0 along ``axes``, keeping dims: the shift K."""
  idx = tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))
  return lax.stop_gradient(x[idx])


def _pmean(x: Array, axis_name: str | None) -> Array:
  return x if axis_name is None else lax.pmean(x, axis_name)


def centered_moments(x: Array, axis: Axes, *, axis_name: str | None = None
                     ) -> tuple[Array, Array, Array]:
  """Shifted two-pass statistics over ``axis`` (keepdims), in ``stat_dtype``.

  Returns ``(x_c, mean, var)`` with ``x_c = x - mean`` computed without
  rounding ``mean`` first, and the biased variance ``var = mean(x_c**2)``.
  With ``axis_name`` the statistics are averaged over that mapped axis
  (equal-sized shards), so ``mean`` and ``var`` are those of the whole batch.
  """
  axes = _axes(axis, x.ndim)
  xf = x.astype(stat_dtype(x.dtype))
  shift = _pmean(_first(xf, axes), axis_name)
  d = xf - shift
  mean_d = _pmean(jnp.mean(d, axes, keepdims=True), axis_name)
  x_c = d - mean_d
  var = _pmean(jnp.mean(jnp.square(x_c), axes, keepdims=True), axis_name)
  return x_c, shift + mean_d, var


def _affine(y: Array, gain: Array | None, bias: Array | None,
            axes: tuple[int, ...]) -> Array:
  if gain is not None:
    y = y * _broadcast_param(gain, y.shape, axes, y.dtype, "gain")
  if bias is not None:
    y = y + _broadcast_param(bias, y.shape, axes, y.dtype, "bias")
  return y


def _norm_args(x, gain, bias, axis: Axes):
  """(x, axes, gain, bias) for the fused norms: x an array, axes sorted,
  gain and bias checked and cast to the stat dtype (ones and zeros if None)."""
  x = jnp.asarray(x)
  axes = _axes(axis, x.ndim)
  fshape = tuple(x.shape[a] for a in axes)
  dt = stat_dtype(x.dtype)
  gain = (jnp.ones(fshape, dt) if gain is None
          else _check_param(gain, x.shape, axes, "gain").astype(dt))
  bias = (jnp.zeros(fshape, dt) if bias is None
          else _check_param(bias, x.shape, axes, "bias").astype(dt))
  return x, axes, gain, bias


def layer_norm(x: Array, gain: Array | None = None, bias: Array | None = None,
               *, axis: Axes = -1, eps: float = 1e-5) -> Array:
  r"""Layer normalization (Ba et al. 2016, eqs. 3-4 and 15-16).

  Over the H features of each example (the axes in ``axis``)::

      mu = 1/H sum_i a_i            sigma = sqrt(1/H sum_i (a_i - mu)^2 + eps)
      y  = gain * (a - mu) / sigma + bias

  ``gain`` and ``bias`` have the shape of the normalized axes. The JVP (and
  so the VJP) is analytic: ``d x_hat = (dx - mean(dx) - x_hat mean(x_hat dx))
  / sigma``.
  """
  x, axes, gain, bias = _norm_args(x, gain, bias, axis)
  return fused_layer_norm.normalize(x, gain, bias, axes=axes, eps=eps)


def rms_norm(x: Array, gain: Array | None = None, bias: Array | None = None,
             *, axis: Axes = -1, eps: float = 1e-5) -> Array:
  r"""RMS normalization (Zhang & Sennrich 2019): layer norm without re-centring.

      rms = sqrt(1/H sum_i a_i^2 + eps)        y = gain * a / rms + bias

  Beyond the paper. A sum of squares has no cancellation, so one pass is
  accurate even when the mean dwarfs the spread. ``gain`` and ``bias`` have
  the shape of the normalized axes; the derivatives are analytic
  (``fused_rms_norm.py``): ``d x_hat = (dx - x_hat mean(x_hat dx)) / rms``.
  """
  x, axes, gain, bias = _norm_args(x, gain, bias, axis)
  return fused_rms_norm.normalize(x, gain, bias, axes=axes, eps=eps)


def batch_norm(x: Array, gain: Array | None = None, bias: Array | None = None,
               *, mean: Array | None = None, var: Array | None = None,
               axis: Axes = 0, eps: float = 1e-5, unbiased: bool = False,
               axis_name: str | None = None) -> tuple[Array, tuple[Array, Array]]:
  r"""Batch normalization (Ioffe & Szegedy 2015; paper eq. 2).

  Statistics are taken over the *batch* axes in ``axis``; ``gain`` and
  ``bias`` have the shape of the remaining (feature) axes::

      mu = 1/N sum_n a_n      var = 1/N sum_n (a_n - mu)^2   (x N/(N-1) if unbiased)
      y  = gain * (a - mu) / sqrt(var + eps) + bias

  Training mode (``mean`` and ``var`` None) uses the statistics of this batch,
  across the devices of ``axis_name`` if given. Evaluation mode uses the given
  ``mean`` and ``var`` (running averages, keepdims shape or feature shape).

  Returns ``(y, (mean, var))``: the statistics used, for running averages.
  """
  x = jnp.asarray(x)
  axes = _axes(axis, x.ndim)
  feat = tuple(i for i in range(x.ndim) if i not in axes)
  dt = stat_dtype(x.dtype)
  if (mean is None) != (var is None):
    raise ValueError("batch_norm: give both mean and var (evaluation) or neither")
  if mean is None:
    n = math.prod(x.shape[a] for a in axes)
    if axis_name is not None:
      n *= lax.psum(1, axis_name)
    x_c, mean, var = centered_moments(x, axes, axis_name=axis_name)
    if unbiased:
      if isinstance(n, int) and n < 2:
        raise ValueError("batch_norm: unbiased variance needs at least 2 examples")
      var = var * (n / (n - 1))
  else:
    keep = tuple(x.shape[i] if i in feat else 1 for i in range(x.ndim))
    mean = jnp.asarray(mean, dt).reshape(keep)
    var = jnp.asarray(var, dt).reshape(keep)
    x_c = x.astype(dt) - mean
  y = _affine(x_c * lax.rsqrt(var + eps), gain, bias, feat)
  return y.astype(x.dtype), (mean, var)


def weight_norm(w: Array, gain: Array | None = None, *, axis: Axes = 0,
                eps: float = 1e-12) -> Array:
  r"""Weight normalization (Salimans & Kingma 2016; paper eq. 6).

  Each weight vector (the axes in ``axis``: the inputs of a (in, out) kernel)
  is scaled to unit norm, then by its gain::

      w' = gain * w / sqrt(sum_i w_i^2 + eps)

  ``gain`` has the shape of the remaining axes.
  """
  w = jnp.asarray(w)
  axes = _axes(axis, w.ndim)
  wf = w.astype(stat_dtype(w.dtype))
  v = wf * lax.rsqrt(jnp.sum(jnp.square(wf), axes, keepdims=True) + eps)
  feat = tuple(i for i in range(w.ndim) if i not in axes)
  if gain is not None:
    v = v * _broadcast_param(gain, w.shape, feat, v.dtype, "gain")
  return v.astype(w.dtype)


def _scalar(p, name: str, dtype) -> Array:
  """A learnable scalar (shape () or (1,)) as a 0-d array of ``dtype``."""
  p = jnp.asarray(p)
  if p.size != 1 or p.ndim > 1:
    raise ValueError(f"{name} must be a scalar (shape () or (1,)), not shape {p.shape}")
  return p.reshape(()).astype(dtype)


def _last_axis_affine(y: Array, gain: Array | None, bias: Array | None) -> Array:
  """``gain * y + bias`` with gain and bias per feature of the last axis."""
  return _affine(y, gain, bias, (y.ndim - 1,))


def group_norm(x: Array, gain: Array | None = None, bias: Array | None = None,
               *, groups: int, eps: float) -> Array:
  r"""Group normalization (Wu & He 2018, eqs. 1-2 with S_i of eq. 7).

  x is batch-first with the C channels last: (B, C), (B, H, W, C), any
  (B, ..., C). The channels split into ``groups`` groups of C / groups
  contiguous channels; each example's group is normalized over all its
  non-batch elements (the spatial axes and the group's channels)::

      mu = mean over S_i of x     sigma = sqrt(mean over S_i of (x - mu)^2 + eps)
      y  = gain_c * (x - mu) / sigma + bias_c

  ``gain`` and ``bias`` are per channel, shape (C,). ``groups=1`` is layer
  norm over all non-batch axes; ``groups=C`` is instance norm. The statistics
  are layer norm's (shifted, so accurate when the mean dwarfs the spread;
  analytic derivatives), in float32 for half-precision inputs.
  """
  x = jnp.asarray(x)
  if x.ndim < 2:
    raise ValueError(f"group_norm: x must be batch-first with channels last, rank >= 2; "
                     f"got shape {x.shape}")
  C = x.shape[-1]
  G = _index(groups)
  if G is None or G < 1 or C % G:
    raise ValueError(f"group_norm: groups={groups!r} must be a positive integer that "
                     f"divides the {C} channels (the last axis of x)")
  dt = stat_dtype(x.dtype)
  # (B, ..., G, C/G), normalized over every axis but the batch and the group.
  xg = x.astype(dt).reshape(*x.shape[:-1], G, C // G)
  axes = tuple(range(1, x.ndim - 1)) + (x.ndim,)
  fshape = tuple(xg.shape[a] for a in axes)
  x_hat = fused_layer_norm.normalize(xg, jnp.ones(fshape, dt), jnp.zeros(fshape, dt),
                                     axes=axes, eps=eps)
  return _last_axis_affine(x_hat.reshape(x.shape), gain, bias).astype(x.dtype)


# DyT's alpha at initialisation: Zhu, Chen, He, LeCun & Liu, "Transformers
# without Normalization" (CVPR 2025): alpha0 = 0.5 by default (for LLMs they
# tune it by width and place; not done here).
DYT_ALPHA0 = 0.5


def dyt(x: Array, alpha: Array, gain: Array | None = None,
        bias: Array | None = None) -> Array:
  r"""Dynamic Tanh (Zhu et al. 2025): a point-wise stand-in for a norm.

      y = gain * tanh(alpha * x) + bias

  ``alpha`` a learnable scalar (initialised to ``DYT_ALPHA0``), ``gain`` and
  ``bias`` per feature of the last axis (ones and zeros at initialisation).
  No statistics: each element on its own. Computed in the stat dtype, output
  in x's dtype.
  """
  x = jnp.asarray(x)
  dt = stat_dtype(x.dtype)
  y = jnp.tanh(_scalar(alpha, "alpha", dt) * x.astype(dt))
  return _last_axis_affine(y, gain, bias).astype(x.dtype)


# Derf's parameters at initialisation: Chen, Lu, Zhu, Sun & Liu, "Stronger
# Normalization-Free Transformers" (arXiv 2512.10938): alpha0 = 0.5 and
# s0 = 0 (the authors' Dynamic_erf module, alpha_init_value=0.5,
# shift_init_value=0.0); gain ones and bias zeros, as DyT's.
DERF_ALPHA0 = 0.5
DERF_SHIFT0 = 0.0


def derf(x: Array, alpha: Array, shift: Array, gain: Array | None = None,
         bias: Array | None = None) -> Array:
  r"""Dynamic erf (Chen et al. 2025, eq. 10): a point-wise stand-in for a norm.

      y = gain * erf(alpha * x + shift) + bias,   erf(z) = 2/sqrt(pi) int_0^z e^{-t^2} dt

  ``alpha`` and ``shift`` learnable scalars (initialised to ``DERF_ALPHA0``
  and ``DERF_SHIFT0``), ``gain`` and ``bias`` per feature of the last axis.
  Computed in the stat dtype, output in x's dtype.
  """
  x = jnp.asarray(x)
  dt = stat_dtype(x.dtype)
  z = _scalar(alpha, "alpha", dt) * x.astype(dt) + _scalar(shift, "shift", dt)
  return _last_axis_affine(lax.erf(z), gain, bias).astype(x.dtype)


def scale_norm_g0(d: int) -> float:
  """ScaleNorm's g at initialisation, sqrt(d) for d features (Nguyen &
  Salazar 2019): the norm of a vector of unit-RMS entries."""
  return math.sqrt(d)


def scale_norm(x: Array, g: Array, *, eps: float) -> Array:
  r"""ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears").

  Over the d features of the last axis, one learnable scalar g (initialised
  to ``scale_norm_g0(d)``)::

      y = g * x / max(||x||_2, eps)

  The sum of squares is taken in the stat dtype (no cancellation); output in
  x's dtype. Scaling x by any c > 0 leaves y unchanged while ||x|| > eps.
  """
  x = jnp.asarray(x)
  dt = stat_dtype(x.dtype)
  xf = x.astype(dt)
  # 1 / max(||x||, eps) as rsqrt(max(||x||^2, eps^2)): the same value, and
  # a zero row's gradient stays finite (sqrt's derivative at 0 is infinite).
  inv = lax.rsqrt(jnp.maximum(jnp.sum(jnp.square(xf), -1, keepdims=True), eps * eps))
  y = xf * (_scalar(g, "g", dt) * inv)
  return y.astype(x.dtype)
