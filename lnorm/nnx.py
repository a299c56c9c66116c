"""The registry's norms, the normalized dense layer and the LSTM and GRU cells
as ``flax.nnx`` modules: Flax's current API beside the linen modules of
``lnorm.layers`` and ``lnorm.recurrent``. Same parameter names, shapes and
initialisers; the math is the linen modules' own (the norms' functions of
``lnorm.norms``, ``cells.lstm_step`` and ``cells.gru_step``), so on the same
parameters they compute the same outputs and gradients (tested).

    import jax, jax.numpy as jnp
    from flax import nnx
    from lnorm import nnx as lnnx

    dense = lnnx.NormDense(16, 32, norm="dyt", rngs=nnx.Rngs(0))
    h = dense(jnp.ones((4, 16)))                              # (4, 32)
    cell = lnnx.LSTMCell(16, 32, norm="layer", rngs=nnx.Rngs(1))
    carry, y = cell(cell.initialize_carry((4,)), jnp.ones((4, 16)))

``params(module)`` gives a module's parameters as the linen module's
``{'params': ...}`` tree holds them (names and order), and
``load(module, tree)`` sets them from one. Norms with running statistics
(batch norm) are the linen modules' only.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax.linen import initializers

from lnorm import norms
from lnorm.recurrent import cells

Array = jax.Array


class _Params(nnx.Module):
  """Parameters kept by name, in creation order (that of the linen module)."""

  def _add(self, name: str, value: Array) -> None:
    if not hasattr(self, "_order"):
      self._order = []
    self._order.append(name)
    setattr(self, name, nnx.Param(value))

  def _norm(self, nm: norms.Norm, features: int, size: int, key, suffix: str = "",
            gain_init: float | None = None) -> None:
    """``nm``'s parameters, as ``layers.norm_params`` creates them in linen."""
    for q in nm.params:
      v = gain_init if (q.name == "gain" and gain_init is not None) else q.value(size)
      shape = (features,) if q.shape == "features" else ()
      self._add(q.name + suffix, initializers.constant(v)(key, shape, jnp.float32))

  def _dict(self) -> dict[str, Array]:
    return {k: getattr(self, k).value for k in self._order}


def params(module: _Params) -> dict[str, Array]:
  """The parameters by name, as the linen module's ``{'params': ...}`` holds them."""
  return module._dict()  # pylint: disable=protected-access


def load(module: _Params, tree: dict[str, Array]) -> None:
  """Sets ``module``'s parameters from a linen module's parameter dict."""
  if list(tree) != module._order:  # pylint: disable=protected-access
    raise ValueError(f"parameters {list(tree)} are not this module's "
                     f"{module._order}")  # pylint: disable=protected-access
  for k, v in tree.items():
    getattr(module, k).value = jnp.asarray(v)


def _no_running_stats(norm: object, *sites: str) -> norms.Norm:
  return norms.accept(norm, *sites, running_stats=False)


class Normalize(_Params):
  """``lnorm.layers.Normalize`` in NNX: any registered norm over the last
  ``axes`` axes of inputs with ``features`` features last."""

  def __init__(self, features: int, norm: Any = "layer", *, eps: float = 1e-5,
               axes: int = 1, size: int | None = None, groups: int = 0,
               rngs: nnx.Rngs | None = None):
    nm = norms.get(norm)
    if not nm.identity and nm.fn is None:
      raise ValueError(f"norm={nm.name!r} needs a host that implements it; Normalize takes: "
                       + ", ".join(norms.names(running_stats=False, kernel=False)))
    self.norm, self.eps, self.axes, self.groups = nm.name, eps, axes, groups
    self._order = []
    key = jax.random.key(0)  # every norm parameter has a constant init
    self._norm(nm, features, size or features, key)
    if nm.bias and not nm.identity:
      self._add("bias", jnp.zeros((features,), jnp.float32))

  def __call__(self, x: Array) -> Array:
    nm = norms.get(self.norm)
    if nm.identity:
      return x
    axes = tuple(range(x.ndim - self.axes, x.ndim))
    return nm(x, self._dict(), axes=axes, eps=self.eps, groups=self.groups)


class NormDense(_Params):
  """``lnorm.layers.NormDense`` in NNX: ``gain * norm(x W) + bias`` (eq. 5)
  with any norm of ``norms.FEATURES`` but batch norm."""

  def __init__(self, in_features: int, features: int, norm: Any = "none", *,
               eps: float = 1e-5, norm_groups: int = 0, rngs: nnx.Rngs):
    nm = _no_running_stats(norm, norms.FEATURES)
    self.norm, self.eps, self.norm_groups = nm.name, eps, norm_groups
    self._order = []
    self._add("kernel", initializers.lecun_normal()(rngs.params(), (in_features, features)))
    self._add("bias", jnp.zeros((features,), jnp.float32))
    if not nm.identity:
      self._norm(nm, features, features, rngs.params())

  def __call__(self, x_BxD: Array) -> Array:
    nm = norms.get(self.norm)
    p = self._dict()
    w, b = p.pop("kernel"), p.pop("bias")
    if nm.identity:
      return x_BxD @ w + b[None]
    if nm.kernel is not None:
      return x_BxD @ nm.kernel(w, p.get("gain"), (0,)) + b[None]
    return nm(x_BxD @ w, {**p, "bias": b}, axes=(1,), eps=self.eps, groups=self.norm_groups)


class LSTMCell(_Params):
  """``lnorm.recurrent.LSTMCell`` in NNX (any of its norms but batch norm's):
  ``(carry (c, h), x) -> (carry, h)``."""

  def __init__(self, in_features: int, features: int, norm: Any = "none", *,
               eps: float = 1e-5, forget_bias: float = 0.0, gain_init: float | None = None,
               rngs: nnx.Rngs):
    nm = _no_running_stats(norm, cells.GATES, cells.CELL)
    self.norm, self.eps, self.features = nm.name, eps, features
    self._order = []
    H = features
    self._add("kernel_x", cells.stacked(cells.default_kernel_init, 4)(
        rngs.params(), (in_features, 4 * H)))
    self._add("kernel_h", cells.stacked(cells.default_recurrent_kernel_init, 4)(
        rngs.params(), (H, 4 * H)))
    if nm.normalizes(cells.GATES):
      for s in ("_h", "_x"):
        self._norm(nm, 4 * H, 4 * H, rngs.params(), s, gain_init)
    self._add("bias", cells.lstm_bias_init(initializers.zeros_init(), forget_bias)(
        rngs.params(), (4 * H,)))
    if nm.normalizes(cells.CELL):
      self._norm(nm, H, H, rngs.params(), "_c", gain_init)
      self._add("bias_c", jnp.zeros((H,), jnp.float32))

  def initialize_carry(self, batch_shape: tuple[int, ...]) -> tuple[Array, Array]:
    z = jnp.zeros(tuple(batch_shape) + (self.features,), jnp.float32)
    return (z, z)

  def __call__(self, carry, x: Array):
    c_BxH, h_BxH = carry
    P = self._dict()
    c, h = cells.lstm_step(norms.get(self.norm), P, x @ P["kernel_x"], h_BxH @ P["kernel_h"],
                           c_BxH, h_BxH, self.eps)
    return (c, h), h


class GRUCell(_Params):
  """``lnorm.recurrent.GRUCell`` in NNX: ``(h, x) -> (h, h)``."""

  def __init__(self, in_features: int, features: int, norm: Any = "none", *,
               eps: float = 1e-5, rngs: nnx.Rngs):
    nm = _no_running_stats(norm, cells.GATES)
    self.norm, self.eps, self.features = nm.name, eps, features
    self._order = []
    H, I, zeros = features, in_features, initializers.zeros_init()
    k, r = cells.default_kernel_init, cells.default_recurrent_kernel_init
    self._add("kernel_x", cells.stacked(k, 2)(rngs.params(), (I, 2 * H)))
    self._add("kernel_h", cells.stacked(r, 2)(rngs.params(), (H, 2 * H)))
    self._add("kernel_xc", cells.stacked(k, 1)(rngs.params(), (I, H)))
    self._add("kernel_hc", cells.stacked(r, 1)(rngs.params(), (H, H)))
    if nm.normalizes(cells.GATES):
      for s in ("_h", "_x"):
        self._norm(nm, 2 * H, 2 * H, rngs.params(), s)
      self._add("bias", zeros(rngs.params(), (2 * H,)))
      for s in ("_xc", "_hc"):
        self._norm(nm, H, H, rngs.params(), s)
        self._add("bias" + s, zeros(rngs.params(), (H,)))
    else:
      self._add("bias", zeros(rngs.params(), (2 * H,)))
      self._add("bias_c", zeros(rngs.params(), (H,)))

  def initialize_carry(self, batch_shape: tuple[int, ...]) -> Array:
    return jnp.zeros(tuple(batch_shape) + (self.features,), jnp.float32)

  def __call__(self, h_BxH: Array, x: Array):
    P = self._dict()
    h = cells.gru_step(norms.get(self.norm), P, x @ P["kernel_x"], h_BxH @ P["kernel_h"],
                       x @ P["kernel_xc"], h_BxH @ P["kernel_hc"], h_BxH, self.eps)
    return h, h
