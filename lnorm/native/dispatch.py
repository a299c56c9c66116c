"""When a native CPU kernel may run: chosen at lowering, per computation.

A custom call has no sharding rule, so under ``jit`` with arrays split over
several devices XLA's SPMD partitioner gathers its operands whole onto every
device and runs it (and much around it) replicated: right, but no longer
data parallel. The kernels are therefore used only where each call sees one
device's data: a computation for one device, or the manual (per-device)
axes of ``shard_map``. Elsewhere the XLA version runs, which XLA partitions,
unless the kernel's lowering supplies its own sharding rule, as layer and
RMS norm's do (``fused_layer_norm._split_rows``: ``custom_partitioning``
lowers each device's part with every mesh axis manual).

* ``partitioned(ctx)``: for a lowering rule, whether the computation being
  lowered is split by the partitioner over more than one device.
* ``cpu_native(xla_fn, native_fn)``: a function that lowers as ``native_fn``
  on CPU where that holds, and as ``xla_fn`` otherwise; derivatives go
  through ``xla_fn``.
* ``unless_split(one_device_fn, split_fn)``: the same choice on every
  platform, for code whose fastest one-device form (a reshape that merges a
  batch axis, say) would make the partitioner gather a split batch.
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


def _hoisted(fn: Callable[..., Any], args: tuple) -> tuple[Any, list]:
  """``fn`` traced at ``args``: (a closed jaxpr taking fn's closed-over values
  first, those values)."""
  closed = jax.make_jaxpr(fn)(*args)
  j = closed.jaxpr
  jaxpr = jex.Jaxpr((), [*j.constvars, *j.invars], j.outvars, j.eqns, j.effects,
                    j.debug_info)
  return jex.ClosedJaxpr(jaxpr, ()), list(closed.consts)


# Binds (one-device consts, split consts, args) and lowers only the branch it
# takes, so that the other never reaches XLA (the SPMD partitioner rejects the
# native kernels' side-effecting buffers, even in a dead branch). ``cpu_only``:
# the one-device branch is for CPU alone (native kernels).
_choice_p = Primitive("lnorm_one_device_or_split")
_choice_p.multiple_results = True
_choice_p.def_effectful_abstract_eval(
    lambda *_, single, split, n_single, cpu_only: (split.out_avals,
                                                   single.effects | split.effects))
_choice_p.def_impl(lambda *args, **params: jax.jit(
    lambda *a: _choice_p.bind(*a, **params))(*args))


def _lowering(on_cpu: bool):
  def lower(ctx, *args, single, split, n_single, cpu_only):
    n_split = len(split.jaxpr.invars) - (len(single.jaxpr.invars) - n_single)
    rest = args[n_single + n_split:]
    if (on_cpu or not cpu_only) and not partitioned(ctx):
      jaxpr, a = single, (*args[:n_single], *rest)
    else:
      jaxpr, a = split, (*args[n_single:n_single + n_split], *rest)
    sub = ctx.replace(avals_in=[v.aval for v in jaxpr.jaxpr.invars])
    return mlir.lower_fun(jex.jaxpr_as_fun(jaxpr), multiple_results=True)(sub, *a)
  return lower


mlir.register_lowering(_choice_p, _lowering(on_cpu=False))
mlir.register_lowering(_choice_p, _lowering(on_cpu=True), platform="cpu")


def _batched(args, dims, *, single, split, n_single, cpu_only):
  n_split = len(split.jaxpr.invars) - (len(single.jaxpr.invars) - n_single)
  cut = lambda xs: (xs[:n_single], xs[n_single:n_single + n_split],
                    xs[n_single + n_split:])
  (a1, a2, rest), (d1, d2, d_rest) = cut(args), cut(dims)
  single_b = jax.vmap(jex.jaxpr_as_fun(single), in_axes=(*d1, *d_rest))
  split_b = jax.vmap(jex.jaxpr_as_fun(split), in_axes=(*d2, *d_rest))
  outs = _bind(lambda *a: single_b(*a1, *a), lambda *a: split_b(*a2, *a), rest,
               cpu_only)
  return outs, [0] * len(outs)


batching.primitive_batchers[_choice_p] = _batched


def _bind(single_fn, split_fn, flat_args, cpu_only: bool) -> list:
  single, single_consts = _hoisted(single_fn, tuple(flat_args))
  split, split_consts = _hoisted(split_fn, tuple(flat_args))
  return _choice_p.bind(*single_consts, *split_consts, *flat_args, single=single,
                        split=split, n_single=len(single_consts), cpu_only=cpu_only)


def _choice(single_fn, split_fn, cpu_only: bool) -> Callable[..., Any]:
  @jax.custom_jvp
  def f(*args):
    flat, in_tree = jax.tree.flatten(args)
    out_tree = jax.tree.structure(jax.eval_shape(split_fn, *args))

    def flat_fn(fn):
      return lambda *a: jax.tree.leaves(fn(*jax.tree.unflatten(in_tree, a)))

    return jax.tree.unflatten(
        out_tree, _bind(flat_fn(single_fn), flat_fn(split_fn), flat, cpu_only))

  f.defjvp(lambda primals, tangents: jax.jvp(split_fn, primals, tangents))
  return f


def cpu_native(xla_fn: Callable[..., Any], native_fn: Callable[..., Any]
               ) -> Callable[..., Any]:
  """``f(*args)``: ``xla_fn(*args)``, lowered on CPU as ``native_fn`` (the same
  function through native kernels) unless the computation is partitioned
  over several devices. Arguments and results may be pytrees (None leaves
  included); derivatives, of any order, are ``xla_fn``'s."""
  return _choice(native_fn, xla_fn, cpu_only=True)


def unless_split(one_device_fn: Callable[..., Any], split_fn: Callable[..., Any]
                 ) -> Callable[..., Any]:
  """``f(*args)``: lowered as ``one_device_fn`` for one device (any platform)
  and as ``split_fn``, the same function written so that the partitioner can
  split it, where the computation is partitioned over several devices.
  Derivatives are ``split_fn``'s."""
  return _choice(one_device_fn, split_fn, cpu_only=False)
