"""Normalization primitives as plain JAX functions: they jit, vmap and grad.

Numerics shared by every function in this file:

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
  - ``layer_norm`` is one-pass for speed, with K the mean of a leading block
    of at least n/32 elements, which bounds ``mean(d)^2 / var <= 32`` for any
    data, so ``var = mean(d^2) - mean(d)^2`` loses at most ~5 bits.

  On float32 rows of 1e4 + N(0, 0.1) both stay within ~2e-7 relative error
  of float64; flax.linen.LayerNorm's default is off by O(10).
* ``eps`` is added to the variance: ``x_hat = x_c / sqrt(var + eps)``. A constant
  group has x_c = 0, so its output is the bias: finite for every eps > 0.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax

Axes = int | Sequence[int]
Array = jax.Array


def stat_dtype(dtype) -> jnp.dtype:
  """float32 for half precision and float32, float64 for float64."""
  return jnp.promote_types(dtype, jnp.float32)


def _axes(axis: Axes, ndim: int) -> tuple[int, ...]:
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  if not axes:
    raise ValueError("axis must name at least one axis")
  out = []
  for a in axes:
    if not -ndim <= a < ndim:
      raise ValueError(f"axis {a} is out of range for an array of rank {ndim}")
    out.append(a % ndim)
  if len(set(out)) != len(out):
    raise ValueError(f"axis {axis} repeats an axis")
  return tuple(sorted(out))


def _broadcast_param(p: Array, shape: tuple[int, ...], axes: tuple[int, ...],
                     dtype, name: str) -> Array:
  """Reshapes a parameter of shape ``shape[axes]`` to broadcast against ``shape``."""
  want = tuple(shape[a] for a in axes)
  p = jnp.asarray(p)
  if p.shape != want:
    raise ValueError(f"{name} has shape {p.shape}; expected {want} "
                     f"(the sizes of axes {axes} of an input of shape {shape})")
  bshape = tuple(shape[i] if i in axes else 1 for i in range(len(shape)))
  return p.reshape(bshape).astype(dtype)


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


# layer_norm's standardization, tuned with scripts/bench_norm.py (see
# BENCHMARKS.md): a one-pass shifted mean and variance (instead of
# centered_moments' two passes), and a JVP whose linear part recomputes x_hat
# from x behind an optimization barrier.

# The shift is the mean of a leading block of at least max(_SHIFT_MIN,
# n / _SHIFT_FRACTION) of the n elements of each group.
_SHIFT_MIN = 32
_SHIFT_FRACTION = 32


def _standardize_shift(xf: Array, axes: tuple[int, ...]) -> Array:
  """Mean of a leading block of each group (keepdims), a constant for autodiff.

  The block B takes a prefix of every axis in ``axes``, innermost first, so
  that |B| = m >= min(n, max(_SHIFT_MIN, ceil(n / _SHIFT_FRACTION))). By
  Cauchy-Schwarz, (mean_B - mean)^2 <= (n / m) var <= _SHIFT_FRACTION var
  whatever the data (an outlier first element, sorted rows, ...), which bounds
  the cancellation in ``_standardize_moments``. The block mean is taken
  relative to the block's first element, so a constant group gets that
  constant exactly.
  """
  n = math.prod(xf.shape[a] for a in axes)
  want = min(n, max(_SHIFT_MIN, -(-n // _SHIFT_FRACTION)))
  block, first, have = [slice(None)] * xf.ndim, [slice(None)] * xf.ndim, 1
  for a in reversed(axes):
    take = min(xf.shape[a], -(-want // have))
    block[a], first[a] = slice(0, take), slice(0, 1)
    have *= take
  blk = xf[tuple(block)]
  x0 = blk[tuple(first)]
  return lax.stop_gradient(x0 + jnp.mean(blk - x0, axes, keepdims=True))


def _shifted_moments(xf: Array, axes: tuple[int, ...], eps: float
                     ) -> tuple[Array, Array, Array]:
  """One-pass shifted statistics of ``xf`` over ``axes`` (keepdims, stat dtype).

  Returns ``(shift, mean_d, rstd)``: with d = x - shift, ``mean_d = mean(d)``
  and ``rstd = 1 / sqrt(var + eps)``, ``var = mean(d^2) - mean_d^2``. Both
  sums read x once, in one pass. The subtraction cancels only as much as
  mean_d^2 / var <= _SHIFT_FRACTION (see ``_standardize_shift``), so the
  relative error of var stays a small multiple of float32 rounding, even far
  from zero (1e4 + N(0, 0.1): d = x - shift is exact by Sterbenz's lemma).
  """
  shift = _standardize_shift(xf, axes)
  d = xf - shift
  mean_d = jnp.mean(d, axes, keepdims=True)
  mean_d2 = jnp.mean(jnp.square(d), axes, keepdims=True)
  var = jnp.maximum(mean_d2 - jnp.square(mean_d), 0)
  return shift, mean_d, lax.rsqrt(var + eps)


def _moments_cpu(xf: Array, axes: tuple[int, ...], eps: float
                 ) -> tuple[Array, Array, Array]:
  """``_shifted_moments``, with a fast path for well-conditioned inputs.

  XLA:CPU runs row reductions as library kernels that need a materialised
  input, so ``x - shift`` costs a full extra pass there. Unshifted sums read x
  itself. They are used when every group has mean(x^2) <= (_SHIFT_FRACTION +
  1) var: the same bound on cancellation that the shift guarantees (mean(d^2)
  = var + mean_d^2), so the error bound is the same. The test is robust:
  with cancellation error ~ rounding * mean(x^2), a computed var can pass it
  only if the true ratio is within rounding of the bound. Any other input
  (far from zero, constant rows) takes the shifted path.
  """
  mean = jnp.mean(xf, axes, keepdims=True)
  mean_x2 = jnp.mean(jnp.square(xf), axes, keepdims=True)
  var = jnp.maximum(mean_x2 - jnp.square(mean), 0)
  ok = jnp.all(mean_x2 <= (_SHIFT_FRACTION + 1) * var)
  return lax.cond(ok, lambda: (jnp.zeros_like(mean), mean, lax.rsqrt(var + eps)),
                  lambda: _shifted_moments(xf, axes, eps))


def _standardize_moments(x: Array, axes: tuple[int, ...], eps: float
                         ) -> tuple[Array, Array, Array]:
  """``(shift, mean_d, rstd)`` of x over ``axes``, in the stat dtype.

  x_hat = ((x - shift) - mean_d) * rstd. ``_shifted_moments`` on GPU and TPU,
  where the shift fuses into the reduction; ``_moments_cpu`` on CPU. (Under
  vmap the CPU test becomes a select and both paths run.)
  """
  xf = x.astype(stat_dtype(x.dtype))
  return lax.platform_dependent(
      xf, cpu=functools.partial(_moments_cpu, axes=axes, eps=eps),
      default=functools.partial(_shifted_moments, axes=axes, eps=eps))


def _standardize_apply(x: Array, shift: Array, mean_d: Array, rstd: Array
                       ) -> Array:
  """x_hat = ((x - shift) - mean_d) * rstd: x - mean never rounds the mean."""
  return ((x.astype(rstd.dtype) - shift) - mean_d) * rstd


def _standardize_fwd(x: Array, axes: tuple[int, ...], eps: float
                     ) -> tuple[Array, tuple[Array, Array, Array]]:
  """x_hat, and the statistics ``(shift, mean_d, rstd)`` it was made with."""
  stats = _standardize_moments(x, axes, eps)
  return _standardize_apply(x, *stats), stats


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _standardize(x: Array, axes: tuple[int, ...], eps: float) -> Array:
  return _standardize_fwd(x, axes, eps)[0]


@_standardize.defjvp
def _standardize_jvp(axes, eps, primals, tangents):
  # d x_hat = rstd * (dx - mean(dx) - x_hat * mean(x_hat * dx)), exact for any
  # eps. The operator is symmetric, so its transpose (the VJP JAX derives from
  # it) is the same three-term formula: two reductions instead of the chain of
  # the forward pass. Forward mode and higher orders keep working.
  #
  # The tangent's x_hat is recomputed from x and the per-group statistics
  # behind an optimization barrier. Without it XLA merges it with the primal
  # x_hat and, on CPU, writes x_hat (and the centred values, and rstd
  # broadcast to full size) to memory for the backward kernels to read back;
  # with it those kernels recompute x_hat from x and three per-group scalars.
  # 4096x1024 float32 forward+backward on CPU: 2-2.6x faster (BENCHMARKS.md).
  (x,), (t,) = primals, tangents
  x_hat, stats = _standardize_fwd(x, axes, eps)
  xb, (shift, mean_d, rstd) = lax.optimization_barrier((x, stats))
  xh = _standardize_apply(xb, shift, mean_d, rstd)
  t = t.astype(xh.dtype)
  a = rstd * jnp.mean(t, axes, keepdims=True)
  b = rstd * jnp.mean(xh * t, axes, keepdims=True)
  return x_hat, rstd * t - a - xh * b


def _affine(y: Array, gain: Array | None, bias: Array | None,
            axes: tuple[int, ...]) -> Array:
  if gain is not None:
    y = y * _broadcast_param(gain, y.shape, axes, y.dtype, "gain")
  if bias is not None:
    y = y + _broadcast_param(bias, y.shape, axes, y.dtype, "bias")
  return y


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
  axes = _axes(axis, jnp.ndim(x))
  x = jnp.asarray(x)
  y = _affine(_standardize(x, axes, float(eps)), gain, bias, axes)
  return y.astype(x.dtype)


def rms_norm(x: Array, gain: Array | None = None, bias: Array | None = None,
             *, axis: Axes = -1, eps: float = 1e-5) -> Array:
  r"""RMS normalization (Zhang & Sennrich 2019): layer norm without re-centring.

      rms = sqrt(1/H sum_i a_i^2 + eps)        y = gain * a / rms + bias

  Beyond the paper. A sum of squares has no cancellation, so one pass is
  accurate even when the mean dwarfs the spread.
  """
  x = jnp.asarray(x)
  axes = _axes(axis, x.ndim)
  xf = x.astype(stat_dtype(x.dtype))
  ms = jnp.mean(jnp.square(xf), axes, keepdims=True)
  y = _affine(xf * lax.rsqrt(ms + eps), gain, bias, axes)
  return y.astype(x.dtype)


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
