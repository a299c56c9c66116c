"""When a native CPU kernel may run: chosen at lowering, per computation.

A custom call has no sharding rule, so under ``jit`` with arrays split over
several devices XLA's SPMD partitioner gathers its operands whole onto every
device and runs it (and much around it) replicated: right, but no longer
data parallel. The kernels are therefore used only where each call sees one
device's data: a computation for one device, or the manual (per-device)
axes of ``shard_map``. Elsewhere the XLA version runs, which XLA partitions.

* ``partitioned(ctx)``: for a lowering rule, whether the computation being
  lowered is split by the partitioner over more than one device.
* ``cpu_native(xla_fn, native_fn)``: a function that lowers as ``native_fn``
  on CPU where that holds, and as ``xla_fn`` otherwise; derivatives go
  through ``xla_fn``.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.extend.core as jex
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir


def partitioned(ctx: mlir.LoweringRuleContext) -> bool:
  """Whether the computation lowered under ``ctx`` is split over > 1 device
  by the SPMD partitioner (axes that ``shard_map`` made manual do not count)."""
  axis_context = ctx.module_context.axis_context
  manual = getattr(axis_context, "manual_axes", None)
  if manual is not None:  # Inside shard_map: only its automatic axes split.
    mesh = axis_context.mesh
    return any(mesh.shape[a] > 1 for a in mesh.axis_names if a not in manual)
  return getattr(axis_context, "num_devices", 1) > 1


def _hoisted(fn: Callable[..., Any], args: tuple) -> tuple[Any, list, Any]:
  """``fn`` traced at ``args``: (a closed jaxpr taking fn's closed-over values
  first, those values, the output pytree's shape)."""
  closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
  j = closed.jaxpr
  jaxpr = jex.Jaxpr((), [*j.constvars, *j.invars], j.outvars, j.eqns, j.effects,
                    j.debug_info)
  return jex.ClosedJaxpr(jaxpr, ()), list(closed.consts), out_shape


# Binds (native consts, xla consts, args); lowers only the branch it takes, so
# that the other never reaches XLA (the SPMD partitioner rejects the native
# kernels' side-effecting buffers, even in a dead branch).
_choice_p = Primitive("lnorm_cpu_native_or_xla")
_choice_p.multiple_results = True
_choice_p.def_effectful_abstract_eval(
    lambda *_, native, xla, n_native: (xla.out_avals, native.effects | xla.effects))
_choice_p.def_impl(lambda *args, **params: jax.jit(
    lambda *a: _choice_p.bind(*a, **params))(*args))


def _lowering(take_native: Callable[[Any], bool]):
  def lower(ctx, *args, native, xla, n_native):
    n_xla = len(xla.jaxpr.invars) - (len(native.jaxpr.invars) - n_native)
    native_consts, xla_consts = args[:n_native], args[n_native:n_native + n_xla]
    rest = args[n_native + n_xla:]
    if take_native(ctx):
      fn, a = jex.jaxpr_as_fun(native), (*native_consts, *rest)
    else:
      fn, a = jex.jaxpr_as_fun(xla), (*xla_consts, *rest)
    sub = ctx.replace(avals_in=[v.aval for v in
                                (native if take_native(ctx) else xla).jaxpr.invars])
    return mlir.lower_fun(fn, multiple_results=True)(sub, *a)
  return lower


mlir.register_lowering(_choice_p, _lowering(lambda ctx: False))
mlir.register_lowering(_choice_p, _lowering(lambda ctx: not partitioned(ctx)),
                       platform="cpu")


def _batched(args, dims, *, native, xla, n_native):
  n_xla = len(xla.jaxpr.invars) - (len(native.jaxpr.invars) - n_native)
  d_n, d_x = dims[:n_native], dims[n_native:n_native + n_xla]
  d_rest = dims[n_native + n_xla:]
  a_n, a_x = args[:n_native], args[n_native:n_native + n_xla]
  a_rest = args[n_native + n_xla:]
  native_b = jax.vmap(jex.jaxpr_as_fun(native), in_axes=(*d_n, *d_rest))
  xla_b = jax.vmap(jex.jaxpr_as_fun(xla), in_axes=(*d_x, *d_rest))
  outs = _bind(lambda *a: native_b(*a_n, *a), lambda *a: xla_b(*a_x, *a), a_rest)
  return outs, [0] * len(outs)


batching.primitive_batchers[_choice_p] = _batched


def _bind(native_fn, xla_fn, flat_args) -> list:
  native, native_consts, _ = _hoisted(native_fn, tuple(flat_args))
  xla, xla_consts, _ = _hoisted(xla_fn, tuple(flat_args))
  return _choice_p.bind(*native_consts, *xla_consts, *flat_args, native=native,
                        xla=xla, n_native=len(native_consts))


def cpu_native(xla_fn: Callable[..., Any], native_fn: Callable[..., Any]
               ) -> Callable[..., Any]:
  """``f(*args)``: ``xla_fn(*args)``, lowered on CPU as ``native_fn`` (the same
  function through native kernels) unless the computation is partitioned
  over several devices. Arguments and results may be pytrees (None leaves
  included); derivatives, of any order, are ``xla_fn``'s."""

  @jax.custom_jvp
  def f(*args):
    flat, in_tree = jax.tree.flatten(args)
    out_tree = jax.tree.structure(jax.eval_shape(xla_fn, *args))

    def flat_fn(fn):
      return lambda *a: jax.tree.leaves(fn(*jax.tree.unflatten(in_tree, a)))

    return jax.tree.unflatten(out_tree, _bind(flat_fn(native_fn), flat_fn(xla_fn), flat))

  f.defjvp(lambda primals, tangents: jax.jvp(xla_fn, primals, tangents))
  return f
