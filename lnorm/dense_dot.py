"""A ``dot_general`` for ``flax.linen.Dense`` whose kernel gradient XLA:CPU runs fast.

Reverse mode makes a Dense layer's kernel gradient ``x^T @ dy`` as a dot that
contracts both operands over their first (row) axis. XLA:CPU hands a dot of
that form to Eigen instead of YNNPACK, and when x is the wider operand (the
MLP's second layer: x (B T, 4D), dy (B T, D)) it first copies x transposed
in the dot's own way; at the byte Transformer's wide shape that one product
took 8.4 against 5.9 ms (B T = 1024 rows, one core). Here the tangent of
``x @ W`` with respect to W is written through x^T, made once and kept made
by an optimization barrier (XLA would otherwise fold the transpose back into
the dot), so that its transpose, the kernel gradient, is ``x^T @ dy`` in
the row-major form YNNPACK takes. Values are the same products summed in
another order; every order of derivative, forward and reverse, is exact
JAX (a ``custom_jvp``, no ``custom_vjp``). Only on CPU, and only when x is
at least as wide as dy (a narrow x is not copied by XLA, and transposing it
ourselves costs more than it saves); elsewhere the plain dot.

``scripts/bench/transformer_parts.py`` times the parts it speeds up.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax

Array = jax.Array


def _tangent_via_transpose(x_MxK: Array, dw_KxN: Array) -> Array:
  xt_KxM = lax.optimization_barrier(x_MxK.T)
  return lax.dot_general(xt_KxM, dw_KxN, (((0,), (0,)), ((), ())))


def _tangent_plain(x_MxK: Array, dw_KxN: Array) -> Array:
  return x_MxK @ dw_KxN


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _dense(x: Array, w_KxN: Array, precision: Any) -> Array:
  return lax.dot_general(x, w_KxN, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)


@_dense.defjvp
def _dense_jvp(precision, primals, tangents):
  x, w_KxN = primals
  dx, dw_KxN = tangents
  y = _dense(x, w_KxN, precision)
  dy = lax.dot_general(dx, w_KxN, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
  K, N = w_KxN.shape
  x_MxK = x.reshape(-1, K)
  if K >= N:
    tw = lax.platform_dependent(x_MxK, dw_KxN, cpu=_tangent_via_transpose,
                                default=_tangent_plain)
  else:
    tw = _tangent_plain(x_MxK, dw_KxN)
  return y, dy + tw.reshape(y.shape).astype(dy.dtype)


def dot_general(lhs: Array, rhs: Array, dimension_numbers, precision=None,
                preferred_element_type=None, **kwargs) -> Array:
  """``lax.dot_general``; Dense's form (lhs's last axis against a 2-D rhs's
  first, no batch axes, no output type) goes through ``_dense``."""
  (lc, rc), (lb, rb) = dimension_numbers
  if (tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,) and not lb and not rb
      and rhs.ndim == 2 and preferred_element_type is None and not kwargs
      and lhs.dtype == rhs.dtype):
    return _dense(lhs, rhs, precision)
  return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                         preferred_element_type=preferred_element_type, **kwargs)
