"""layer_norm as JAX primitives: forward, forward saving its statistics,
tangent map and backward.

``normalization.layer_norm`` binds ``forward_p``. Differentiation goes
through the others; the tangent map and the backward transpose into each
other, so forward mode, reverse mode and every higher order work:

* ``forward_p(x, gain, bias) -> y``, ``y = gain * x_hat + bias``;
* ``forward_saving_p(x, gain, bias) -> (y, saved)``: y, and each row's
  statistics (``saved``, shape ``x.shape`` without ``axes``, plus the last
  axis (shift, mean_d, rstd)), what forward_p's JVP binds;
* ``tangent_p(x, saved, gain; tx, tgain, tbias) -> ty``, linear in the
  tangents: ``ty = gain * d x_hat + tgain * x_hat + tbias`` with
  ``d x_hat = rstd * (tx - mean(tx) - x_hat * mean(x_hat * tx))``;
* ``backward_p(x, saved, gain; dy) -> (dx, dgain, dbias)``, linear in dy: the
  transpose of the tangent map. ``d x_hat`` is symmetric in tx, so
  ``dx = rstd * (g - mean(g) - x_hat * mean(x_hat * g))`` with
  ``g = gain * dy``, and ``dgain``, ``dbias`` are the column sums of
  ``dy * x_hat`` and ``dy``.

A training step saves x, gain and the row statistics for the backward pass;
the native backward reads the statistics, the XLA versions of the linear
maps make their own from x (so their derivatives are those of functions of
x, and a statistics triple from either lowering gives the same x_hat).

On CPU, for float32 inputs normalized over their trailing axes, the two
forwards and ``backward_p`` lower to the fused kernels of ``lnorm/native``
(one pass over memory each way). Where a jit partitions the computation over
several devices, they lower through ``custom_partitioning`` (``_split_rows``),
which gives the kernels a sharding rule: each device runs them on its own
rows. Everything else (other dtypes and
axes, other platforms, the tangent map, batching with a batched gain or
bias, and the derivatives of the two linear maps) lowers to the XLA versions
below, written with the shifted statistics described in
``normalization.py``. Both versions compute the same function to float
rounding; tests hold each to a float64 reference.

The machinery is not specific to layer norm: ``primitives(name, norm, ...)``
builds the primitives, with these rules, for any ``Norm`` (how x_hat comes
from x, whether it is centred, how many statistics a row it saves).
``fused_rms_norm`` is the other.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np

from lnorm import native
from lnorm.native import dispatch

Array = jax.Array
Axes = tuple[int, ...]

# The shift is the mean of a leading block of at least max(_SHIFT_MIN,
# n / _SHIFT_FRACTION) of the n elements of each group.
_SHIFT_MIN = 32
_SHIFT_FRACTION = 32


def _standardize_shift(xf: Array, axes: Axes) -> Array:
  """Mean of a leading block of each group (keepdims), a constant for autodiff.

  The block B takes a prefix of every axis in ``axes``, innermost first, so
  that |B| = m >= min(n, max(_SHIFT_MIN, ceil(n / _SHIFT_FRACTION))). By
  Cauchy-Schwarz, (mean_B - mean)^2 <= (n / m) var <= _SHIFT_FRACTION var
  whatever the data (an outlier first element, sorted rows, ...), which bounds
  the cancellation in ``_shifted_moments``. The block mean is taken
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


def _shifted_moments(xf: Array, axes: Axes, eps: float
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


def _moments_cpu(xf: Array, axes: Axes, eps: float
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
  return lax.cond(ok,
                  lambda: (jnp.zeros_like(mean), mean, lax.rsqrt(var + eps)),
                  lambda: _shifted_moments(xf, axes, eps))


def _moments(x: Array, axes: Axes, eps: float) -> tuple[Array, Array, Array]:
  """``(shift, mean_d, rstd)`` of x over ``axes``, in the stat dtype.

  x_hat = ((x - shift) - mean_d) * rstd. ``_shifted_moments`` on GPU and TPU,
  where the shift fuses into the reduction; ``_moments_cpu`` on CPU. (Under
  vmap the CPU test becomes a select and both paths run.)
  """
  xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  return lax.platform_dependent(
      xf, cpu=functools.partial(_moments_cpu, axes=axes, eps=eps),
      default=functools.partial(_shifted_moments, axes=axes, eps=eps))


def _x_hat(x: Array, stats: tuple[Array, Array, Array]) -> tuple[Array, Array]:
  """(x_hat, rstd) from ``_moments``: x - mean never rounds the mean."""
  shift, mean_d, rstd = stats
  return ((x.astype(rstd.dtype) - shift) - mean_d) * rstd, rstd


def broadcast_param(p: Array, shape: tuple[int, ...], axes: Axes) -> Array:
  """A parameter of shape ``shape[axes]``, reshaped to broadcast against x."""
  return p.reshape(tuple(shape[i] if i in axes else 1
                         for i in range(len(shape))))


def _mean(v: Array, axes: Axes) -> Array:
  return jnp.mean(v, axes, keepdims=True)


class Norm(NamedTuple):
  """How a norm gets x_hat from x; the XLA versions below serve any norm.

  ``stats(x, axes, eps)``: per-group statistics (keepdims, stat dtype);
  ``x_hat(x, stats) -> (x_hat, r)`` with r = d x_hat / d x at fixed
  statistics (1 / std, 1 / rms); ``centred``: whether x_hat subtracts the
  mean, which puts ``- mean(t)`` into the tangent map of x_hat (without it,
  ``d x_hat = r * (t - x_hat * mean(x_hat * t))``).
  """
  stats: Callable[[Array, Axes, float], Any]
  x_hat: Callable[[Array, Any], tuple[Array, Array]]
  centred: bool
  saved: int  # statistics a row that the forward saves for the backward


LAYER = Norm(_moments, _x_hat, centred=True, saved=3)  # shift, mean_d, rstd


def _d_x_hat(x_hat, r, t, axes, centred):
  """The tangent map of x_hat at x, applied to t: a symmetric linear map of
  t, so also its transpose (the backward applies it to g = gain * dy)."""
  c = t - _mean(t, axes) if centred else t
  return r * (c - x_hat * _mean(x_hat * t, axes))


def _forward_xla(x, gain, bias, *, axes, eps, norm):
  x_hat, _ = norm.x_hat(x, norm.stats(x, axes, eps))
  p = lambda v: broadcast_param(v, x.shape, axes)
  return (x_hat * p(gain) + p(bias)).astype(x.dtype)


def _saved_xla(x, axes, eps, norm):
  """The statistics the native forward saves, as XLA makes them: the leaves
  of ``norm.stats`` (each a number a row), stacked on a last axis, in the
  order the native kernels read them (layer norm: shift, mean_d, rstd)."""
  leaves = jax.tree.leaves(norm.stats(x, axes, eps))
  assert len(leaves) == norm.saved, (len(leaves), norm.saved)
  return jnp.stack([jnp.squeeze(v, axes) for v in leaves], -1)


def _forward_saving_xla(x, gain, bias, *, axes, eps, norm):
  return (_forward_xla(x, gain, bias, axes=axes, eps=eps, norm=norm),
          _saved_xla(x, axes, eps, norm))


# The XLA versions of the linear maps take the saved statistics and make
# their own from x: so they differentiate as functions of x alone, whatever
# made the statistics (a native forward, or an XLA one beside a native
# backward), and any consistent (shift, mean_d, rstd) gives the same x_hat.


def _tangent_xla(x, saved, gain, tx, tgain, tbias, *, axes, eps, norm):
  x_hat, r = norm.x_hat(x, norm.stats(x, axes, eps))
  dx_hat = _d_x_hat(x_hat, r, tx.astype(x_hat.dtype), axes, norm.centred)
  p = lambda v: broadcast_param(v, x.shape, axes)
  return (p(gain) * dx_hat + p(tgain) * x_hat + p(tbias)).astype(x.dtype)


def _backward_xla(x, saved, gain, dy, *, axes, eps, norm):
  # The statistics are those of the forward pass (XLA merges the two). The
  # barrier keeps XLA from merging x_hat too: merged, XLA:CPU writes x_hat
  # (and rstd broadcast to full size) to memory for the backward kernels to
  # read back; apart, they recompute it from x and three per-row scalars.
  # 4096x1024 float32 forward+backward on CPU: 2-2.6x faster (BENCHMARKS_LOG.md,
  # layer_norm, note 2).
  x, stats = lax.optimization_barrier((x, norm.stats(x, axes, eps)))
  x_hat, r = norm.x_hat(x, stats)
  dy = dy.astype(x_hat.dtype)
  rows = tuple(i for i in range(x.ndim) if i not in axes)
  g = dy * broadcast_param(gain, x.shape, axes)
  dx = _d_x_hat(x_hat, r, g, axes, norm.centred)
  dgain = jnp.sum(dy * x_hat, rows).astype(gain.dtype)
  dbias = jnp.sum(dy, rows).astype(gain.dtype)
  return dx.astype(x.dtype), dgain, dbias


def _native_ok(avals, axes: Axes) -> bool:
  """Whether the fused CPU kernels (of every ``Norm``) take these inputs: all
  float32 (a float64 gain beside a float32 x, as with x64 on, takes the XLA
  version, which computes in the promoted dtype), normalized over trailing
  axes."""
  x_aval = avals[0]
  trailing = axes == tuple(range(x_aval.ndim - len(axes), x_aval.ndim))
  return (all(a.dtype == np.float32 for a in avals) and trailing and x_aval.size > 0
          and native.load())


# Every primitive has the parameters axes (sorted), eps and native (whether
# the CPU lowering may use the fused kernels; the XLA versions ignore it).


def _xla(xla_fn, params):
  return functools.partial(xla_fn, axes=params["axes"], eps=params["eps"])


def _devices_at_lowering(p: Primitive) -> bool:
  """Asks JAX to lower computations holding ``p`` with their devices known,
  as ``custom_partitioning`` needs (its own primitive is so registered); a
  JAX without that registry keeps the XLA versions in split computations."""
  try:
    from jax._src import dispatch as jax_dispatch  # pylint: disable=g-import-not-at-top
    jax_dispatch.prim_requires_devices_during_lowering.add(p)
  except (ImportError, AttributeError):
    return False
  return True


def _split_rows(p: Primitive, roles_in: str, roles_out: str) -> Callable[..., Any] | None:
  """A lowering of ``p``'s native kernels in a computation a jit partitions
  over devices, or None where JAX cannot give it one.

  A custom call has no sharding rule, so the SPMD partitioner would gather its
  operands whole onto every device. ``custom_partitioning`` gives it one: the
  rows (x's leading axes) split as x's are, the normalized axes, gain and bias
  whole. Each device's part is lowered with every mesh axis manual, where
  ``dispatch.partitioned`` is False, so there ``p`` takes its kernels on the
  device's rows; the parameters' gradients (role ``p`` among the results) are
  summed over the mesh axes that split the rows. Roles, one per operand or
  result: ``x`` rows and normalized axes (x, y, dy, dx), ``p`` normalized
  axes (gain, bias and their gradients), ``s`` rows and a last axis (the
  saved statistics).
  """
  if not _devices_at_lowering(p):
    return None

  @functools.partial(custom_partitioning, static_argnums=(0, 1))
  def call(axes, eps, *args):
    return p.bind(*args, axes=axes, eps=eps, native=True)

  def partition(axes, eps, mesh, arg_shapes, result_shape):
    x = arg_shapes[0]
    n_rows = x.ndim - len(axes)
    spec = tuple(x.sharding.spec) if isinstance(x.sharding, NamedSharding) else ()
    rows = (spec + (None,) * n_rows)[:n_rows]
    split_by = tuple(a for s in rows if s is not None
                     for a in ((s,) if isinstance(s, str) else s))

    def sharding(role, ndim):
      dims = (*rows, *(None,) * (ndim - n_rows)) if role in "xs" else ()
      return NamedSharding(mesh, PartitionSpec(*dims))

    results = result_shape if p.multiple_results else (result_shape,)
    out = [sharding(r, a.ndim) for r, a in zip(roles_out, results)]

    def per_device(*args):
      ys = p.bind(*args, axes=axes, eps=eps, native=True)
      if not p.multiple_results:
        return ys
      return tuple(lax.psum(y, split_by) if r == "p" and split_by else y
                   for r, y in zip(roles_out, ys))

    return (mesh, per_device, out if p.multiple_results else out[0],
            tuple(sharding(r, a.ndim) for r, a in zip(roles_in, arg_shapes)))

  def rule(axes, eps, mesh, operand_types, result_types):
    n_rows = len(operand_types[0].shape) - len(axes)
    rows = [f"r{i}" for i in range(n_rows)]
    feats = [f"d{i}" for i in range(len(axes))]
    spell = {"x": rows + feats, "p": feats, "s": rows + ["s"]}
    side = lambda roles: ", ".join(" ".join(spell[r]) for r in roles)
    return f"{side(roles_in)} -> {side(roles_out)}", {"need_replication_factors": tuple(feats)}

  call.def_partition(partition=partition, sharding_rule=rule)
  return mlir.lower_fun(lambda *args, axes, eps: call(axes, eps, *args),
                        multiple_results=p.multiple_results)


def _splittable(ctx: mlir.LoweringRuleContext, axes: Axes) -> bool:
  """A jit's own partitioning (no ``shard_map`` axes: those see one device's
  data already) of an x with rows to split."""
  return (getattr(ctx.module_context.axis_context, "manual_axes", None) is None
          and ctx.avals_in[0].ndim > len(axes))


def _primitive(name: str, xla_fn, native_target: str | None,
               multiple_results: bool, roles: tuple[str, str] | None = None) -> Primitive:
  p = Primitive(name)
  p.multiple_results = multiple_results
  xla_lowering = mlir.lower_fun(
      lambda *args, **params: _xla(xla_fn, params)(*args),
      multiple_results=multiple_results)
  mlir.register_lowering(p, xla_lowering)
  if native_target is not None:
    native_lowering = jax.ffi.ffi_lowering(native_target)
    split_lowering = _split_rows(p, *roles)

    def cpu_lowering(ctx, *args, axes, eps, native):
      if native and _native_ok(ctx.avals_in, axes):
        if not dispatch.partitioned(ctx):
          return native_lowering(ctx, *args, eps=np.float32(eps))
        if split_lowering is not None and _splittable(ctx, axes):
          return split_lowering(ctx, *args, axes=axes, eps=eps)
      return xla_lowering(ctx, *args, axes=axes, eps=eps, native=native)

    mlir.register_lowering(p, cpu_lowering, platform="cpu")

  @functools.cache
  def jitted(**params):
    return jax.jit(functools.partial(p.bind, **params))

  p.def_impl(lambda *args, **params: jitted(**params)(*args))

  def vmapped(args, dims, **params):
    # The XLA version under vmap: always right, and fused where XLA can.
    out = jax.vmap(_xla(xla_fn, params), in_axes=dims)(*args)
    return out, (0,) * len(out) if multiple_results else 0

  batching.primitive_batchers[p] = vmapped

  def jvp_of_xla(primals, tangents, **params):
    # Only higher-order derivatives differentiate the linear maps themselves:
    # through their XLA versions.
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jax.jvp(_xla(xla_fn, params), tuple(primals), tuple(tangents))

  ad.primitive_jvps[p] = jvp_of_xla
  return p


def _aval(x):
  return jax.core.ShapedArray(x.shape, x.dtype)


class Primitives(NamedTuple):
  forward: Primitive
  forward_saving: Primitive
  tangent: Primitive
  backward: Primitive


def primitives(name: str, norm: Norm, native_fwd: str, native_bwd: str
               ) -> Primitives:
  """The primitives of ``norm`` (see the module docstring), named ``name``,
  ``name_saving``, ``name_tangent`` and ``name_backward``. On CPU the forward
  lowers to the custom-call target ``native_fwd``; under differentiation the
  forward that also saves each row's statistics and the backward that reads
  them lower to ``native_fwd + "_saving"`` and ``native_bwd + "_saved"``
  (kernels of the signatures of ``lnorm_layer_norm_fwd_saving`` and
  ``lnorm_layer_norm_bwd_saved``)."""
  xla = lambda fn: functools.partial(fn, norm=norm)
  forward_xla = xla(_forward_xla)
  forward_saving_xla = xla(_forward_saving_xla)
  forward_p = _primitive(name, forward_xla, native_fwd, multiple_results=False,
                         roles=("xpp", "x"))
  forward_saving_p = _primitive(f"{name}_saving", forward_saving_xla,
                                f"{native_fwd}_saving", multiple_results=True,
                                roles=("xpp", "xs"))
  tangent_p = _primitive(f"{name}_tangent", xla(_tangent_xla), None,
                         multiple_results=False)
  backward_p = _primitive(f"{name}_backward", xla(_backward_xla),
                          f"{native_bwd}_saved", multiple_results=True,
                          roles=("xspx", "xpp"))

  def saved_aval(x, axes):
    rows = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return jax.core.ShapedArray(rows + (norm.saved,),
                                jnp.promote_types(x.dtype, jnp.float32))

  forward_p.def_abstract_eval(lambda x, gain, bias, **_: _aval(x))
  forward_saving_p.def_abstract_eval(
      lambda x, gain, bias, *, axes, **_: (_aval(x), saved_aval(x, axes)))
  tangent_p.def_abstract_eval(
      lambda x, saved, gain, tx, tgain, tbias, **_: _aval(x))
  backward_p.def_abstract_eval(
      lambda x, saved, gain, dy, **_: (_aval(x), _aval(gain), _aval(gain)))

  def forward_jvp(primals, tangents, **params):
    x, gain, bias = primals
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    y, saved = forward_saving_p.bind(x, gain, bias, **params)
    return y, tangent_p.bind(x, saved, gain, *tangents, **params)

  def forward_saving_jvp(primals, tangents, **params):
    # The saved statistics feed only the linear maps, whose derivatives come
    # from x (their XLA versions make their own statistics): no tangent.
    x, gain, bias = primals
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    y, saved = forward_saving_p.bind(x, gain, bias, **params)
    ty = tangent_p.bind(x, saved, gain, *tangents, **params)
    return (y, saved), (ty, jnp.zeros_like(saved))

  def batched(p, xla_fn):
    def rule(args, dims, **params):
      x, gain, bias = args
      dx, dgain, dbias = dims
      out_dims = (0, 0) if p.multiple_results else 0
      if dgain is None and dbias is None:  # unbatched
        # A batch of x alone is more rows: the primitive itself, fused
        # kernel included.
        axes = tuple(a + 1 for a in params["axes"])
        return p.bind(jnp.moveaxis(x, dx, 0), gain, bias,
                      **{**params, "axes": axes}), out_dims
      return jax.vmap(_xla(xla_fn, params), in_axes=dims)(*args), out_dims
    return rule

  def tangent_transpose(dy, x, saved, gain, tx, tgain, tbias, **params):
    assert not any(map(ad.is_undefined_primal, (x, saved, gain)))
    if type(dy) is ad.Zero:
      return [None] * 6
    cts = backward_p.bind(x, saved, gain, dy, **params)
    return [None, None, None] + [ct if ad.is_undefined_primal(t) else None
                                 for ct, t in zip(cts, (tx, tgain, tbias))]

  def backward_transpose(cts, x, saved, gain, dy, **params):
    assert not any(map(ad.is_undefined_primal, (x, saved, gain)))
    if all(type(ct) is ad.Zero for ct in cts):
      return [None] * 4
    avals = (_aval(x), _aval(gain), _aval(gain))
    cts = [jnp.zeros(a.shape, a.dtype) if type(ct) is ad.Zero else ct
           for ct, a in zip(cts, avals)]
    return [None, None, None, tangent_p.bind(x, saved, gain, *cts, **params)]

  ad.primitive_jvps[forward_p] = forward_jvp
  ad.primitive_jvps[forward_saving_p] = forward_saving_jvp
  batching.primitive_batchers[forward_p] = batched(forward_p, forward_xla)
  batching.primitive_batchers[forward_saving_p] = batched(forward_saving_p,
                                                          forward_saving_xla)
  ad.primitive_transposes[tangent_p] = tangent_transpose
  ad.primitive_transposes[backward_p] = backward_transpose
  return Primitives(forward_p, forward_saving_p, tangent_p, backward_p)


def bind(prims: Primitives, x: Array, gain: Array, bias: Array, *, axes: Axes,
         eps: float, native: bool) -> Array:
  """``prims.forward`` applied, with its parameters in canonical form."""
  return prims.forward.bind(x, gain, bias, axes=tuple(axes), eps=float(eps),
                            native=bool(native))


LAYER_PRIMITIVES = primitives("lnorm_layer_norm", LAYER, "lnorm_layer_norm_fwd",
                              "lnorm_layer_norm_bwd")
forward_p, forward_saving_p, tangent_p, backward_p = LAYER_PRIMITIVES


def normalize(x: Array, gain: Array, bias: Array, *, axes: Axes, eps: float,
              native: bool = True) -> Array:
  """The primitive behind ``lnorm.normalization.layer_norm`` (which checks and
  casts the arguments): ``gain * x_hat + bias`` over ``axes`` (sorted); gain and bias have the
  shape ``x.shape[axes]`` and the stat dtype. Output in x's dtype.
  ``native=False`` keeps to the XLA version on CPU too (benchmarks)."""
  return bind(LAYER_PRIMITIVES, x, gain, bias, axes=axes, eps=eps, native=native)
