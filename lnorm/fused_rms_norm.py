"""rms_norm as JAX primitives: forward, forward saving its statistics,
tangent map and backward.

The same construction as ``fused_layer_norm`` (whose ``primitives`` builds
both), for x_hat = x * rrms, rrms = 1 / sqrt(mean(x^2) + eps):

* ``forward_p(x, gain, bias) -> y``, ``y = gain * x_hat + bias``;
* ``forward_saving_p(x, gain, bias) -> (y, saved)``: y and each row's rrms
  (``saved``, a last axis of 1), what forward_p's JVP binds;
* ``tangent_p(x, saved, gain; tx, tgain, tbias) -> ty``, linear in the
  tangents: ``ty = gain * d x_hat + tgain * x_hat + tbias`` with
  ``d x_hat = rrms * (tx - x_hat * mean(x_hat * tx))``;
* ``backward_p(x, saved, gain; dy) -> (dx, dgain, dbias)``, its transpose:
  ``dx = rrms * (g - x_hat * mean(x_hat * g))`` with ``g = gain * dy``, and
  ``dgain``, ``dbias`` the column sums of ``dy * x_hat`` and ``dy``.

Differentiation of any order goes through the tangent map and the backward,
which transpose into each other; the native backward reads the saved rrms,
their XLA versions make it again from x. On CPU, for float32 inputs (gain and
bias too) normalized over their trailing axes, the forwards and the backward
lower to the fused kernels of ``lnorm/native/layer_norm_cpu.cc`` (one pass
over memory each way) unless the computation is partitioned over several
devices; everything else lowers to the XLA versions. A sum of squares does
not cancel, so neither needs a shift: both sum x^2 once, in float32 for
float32 and half-precision inputs.
"""

from __future__ import annotations

import jax
from jax import lax
import jax.numpy as jnp

from lnorm import fused_layer_norm as _fln

Array = jax.Array
Axes = tuple[int, ...]


def _rrms(x: Array, axes: Axes, eps: float) -> Array:
  """1 / sqrt(mean(x^2) + eps) over ``axes`` (keepdims), in the stat dtype."""
  xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  return lax.rsqrt(jnp.mean(jnp.square(xf), axes, keepdims=True) + eps)


def _x_hat(x: Array, rrms: Array) -> tuple[Array, Array]:
  return x.astype(rrms.dtype) * rrms, rrms


RMS = _fln.Norm(_rrms, _x_hat, centred=False, saved=1)  # rrms
RMS_PRIMITIVES = _fln.primitives("lnorm_rms_norm", RMS, "lnorm_rms_norm_fwd",
                                 "lnorm_rms_norm_bwd")
forward_p, forward_saving_p, tangent_p, backward_p = RMS_PRIMITIVES


def normalize(x: Array, gain: Array, bias: Array, *, axes: Axes, eps: float,
              native: bool = True) -> Array:
  """The primitive behind ``lnorm.normalization.rms_norm`` (which checks and
  casts the arguments): ``gain * x * rrms + bias`` over ``axes`` (sorted);
  gain and bias have the shape ``x.shape[axes]`` and the stat dtype. Output
  in x's dtype. ``native=False`` keeps to the XLA version on CPU too
  (benchmarks, tests)."""
  return _fln.bind(RMS_PRIMITIVES, x, gain, bias, axes=axes, eps=eps,
                   native=native)
