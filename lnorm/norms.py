"""The one registry of normalizations: every layer, cell, model, config, script
and figure takes its norms from here.

A norm is one ``Norm``: its config name, its labels, the places it can
normalize (``sites``), its parameters and their initialisation, and the pure
function that applies it (``lnorm/normalization.py``). A model derives the
norms it accepts from the sites it has (``names(site, ...)``); hosts build
any norm's parameters from its definition (``lnorm.layers.norm_params``) and
call it (``Norm.__call__``), so no host compares names.

Sites (what a norm is given):

- ``FEATURES``: the summed inputs of a dense or conv layer (batch first,
  features last), normalized per example over all of its units (for a conv,
  H x W x C, as in section 6.7); the layer adds its own bias.
- ``GATES``: a recurrent cell's summed inputs (W_h h, W_x x: (batch, n H)),
  over the last axis; the cell adds its own biases.
- ``CELL``: an LSTM's cell state c_t (eqs. 22 and 31), with a bias of its own.
- ``SUBLAYER``: a Transformer sublayer's input or output (batch, time,
  features), per position over the features; the norm's own bias if
  ``bias``.

The norms (``names()``):

- ``none``: no normalization.
- ``layer``: layer norm (Ba et al. 2016, eqs. 3-5). In a recurrent cell, of
  W_x x and W_h h separately and of the cell state: the LN-LSTM of eqs.
  20-22, the LN-GRU of eqs. 26-28, the LN-RNN of eq. 4.
- ``layer_c``: an LSTM with layer norm on the cell state c_t only (eqs.
  29-31), the variant the paper uses for DRAW.
- ``batch``: batch norm (Ioffe & Szegedy 2015); in an LSTM cell, the
  recurrent batch norm of Cooijmans et al. (2016), statistics per time step.
- ``weight``: weight norm (Salimans & Kingma 2016).
- ``rms``: RMS norm (Zhang & Sennrich 2019), layer norm without centring.
- ``group``: group norm (Wu & He 2018), statistics per example within groups
  of channels; ``groups`` an option (0: the largest divisor of the features
  of at most 32, the paper's G).
- ``dyt``: Dynamic Tanh (Zhu, Chen, He, LeCun & Liu, CVPR 2025),
  ``gain * tanh(alpha x) + bias``, no statistics.
- ``derf``: Dynamic erf (Chen et al. 2025, arXiv 2512.10938),
  ``gain * erf(alpha x + shift) + bias``.
- ``scale``: ScaleNorm (Nguyen & Salazar 2019), ``g x / ||x||``.

A user's norm: build a ``Norm`` in your own module and ``register`` it, or
name it in a config as ``package.module:Name`` (``get`` imports the module
and registers the ``Norm`` it names).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable, Iterable, Mapping

import jax
import jax.numpy as jnp

from lnorm import normalization as N

Array = jax.Array

FEATURES, GATES, CELL, SUBLAYER = "features", "gates", "cell", "sublayer"
SITES = (FEATURES, GATES, CELL, SUBLAYER)


@dataclasses.dataclass(frozen=True)
class Param:
  """One learnable parameter of a norm: ``shape`` "features" (F,) or
  "scalar" (); ``init`` a value, or a function of the number of elements
  normalized together (ScaleNorm's sqrt(d))."""
  name: str
  shape: str = "features"
  init: float | Callable[[int], float] = 1.0

  def value(self, size: int) -> float:
    return float(self.init(size)) if callable(self.init) else float(self.init)


@dataclasses.dataclass(frozen=True)
class Norm:
  """One normalization. ``fn(x, p, *, axes, eps, **options)`` applies it to
  ``x`` over ``axes`` (a trailing block of axes, features last, normalized
  together; the leading axes are independent), with ``p`` its parameters by
  name (each per feature of the last axis, or a scalar) and, where the host
  has one, ``p["bias"]``, added last.

  ``params`` are created in their order (which sets the random init), each
  name with the host's suffix (``gain_h`` in an LSTM). ``bias``: whether the
  norm has a bias of its own where it stands alone (``SUBLAYER``); dense
  layers and cells pass theirs. ``options``: the host fields it reads
  (``groups``), passed to ``fn`` and to ``check``, which returns why a layer
  of F features cannot take the norm (None if it can).

  Norms that are more than a function of the summed inputs declare what they
  need and are implemented by the one host that can: ``running_stats``
  (batch norm's running averages: ``layers._Normalized`` and
  ``LSTMCell``), ``kernel`` (weight norm: ``kernel(w, gain, axes)``, the
  layer's kernel before its matmul). ``cell_gain_init``: where a recurrent
  cell's gains start when the cell is not told (Cooijmans et al.: 0.1).
  ``native``: the fast paths with kernels of their own for this norm (a
  hint for the reader; the dispatch is in the fast path)."""
  name: str
  label: str                      # alone, in figures: "Layer norm"
  prefix: str                     # before a network's name: "LN-" (LN-LSTM)
  sites: frozenset[str]
  params: tuple[Param, ...] = ()
  bias: bool = True
  fn: Callable[..., Array] | None = None
  options: tuple[str, ...] = ()
  check: Callable[..., str | None] | None = None
  running_stats: bool = False
  kernel: Callable[..., Array] | None = None
  cell_gain_init: float | None = None
  native: tuple[str, ...] = ()
  cite: str = ""

  def __post_init__(self):
    bad = set(self.sites) - set(SITES)
    if bad or not self.sites:
      raise ValueError(f"Norm {self.name!r}: sites {sorted(bad) or '()'} are not "
                       f"sites; choose from: {', '.join(SITES)}")
    object.__setattr__(self, "sites", frozenset(self.sites))

  @property
  def identity(self) -> bool:
    """True for ``none``: nothing to normalize, no parameters."""
    return self.fn is None and self.kernel is None and not self.running_stats

  def normalizes(self, site: str) -> bool:
    return site in self.sites and not self.identity

  def __call__(self, x: Array, p: Mapping[str, Array], *, axes: tuple[int, ...],
               eps: float, **options: Any) -> Array:
    if self.fn is None:
      raise ValueError(f"norm={self.name!r} is implemented by its host, not as a function")
    return self.fn(x, p, axes=axes, eps=eps, **{k: options[k] for k in self.options})

  def unfit(self, features: int, **options: Any) -> str | None:
    """Why a layer of ``features`` features cannot take this norm, or None."""
    if self.check is None:
      return None
    return self.check(features, **{k: options[k] for k in self.options if k in options})


_REGISTRY: dict[str, Norm] = {}


def register(norm: Norm) -> Norm:
  """Adds ``norm``; registering the same definition again is a no-op, another
  definition under a taken name a ``ValueError``."""
  if not isinstance(norm, Norm):
    raise ValueError(f"{norm!r} is not an lnorm.norms.Norm")
  old = _REGISTRY.get(norm.name)
  if old is not None and old != norm:
    raise ValueError(f"a different norm named {norm.name!r} is already registered")
  _REGISTRY[norm.name] = norm
  return norm


def _import(spec: str) -> Norm:
  """``package.module:Name``: imports the module and registers its ``Name``."""
  mod_name, _, attr = spec.partition(":")
  try:
    mod = importlib.import_module(mod_name)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"norm={spec!r}: module {mod_name!r} does not import "
                     f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
  obj = getattr(mod, attr, None)
  if not isinstance(obj, Norm):
    what = "has no attribute" if obj is None else "is not an lnorm.norms.Norm:"
    raise ValueError(f"norm={spec!r}: {mod_name} {what} {attr!r}"
                     + ("" if obj is None else f" ({type(obj).__name__})"))
  return register(obj)


def get(name: object) -> Norm:
  """The ``Norm`` of a config value: a registered name, a ``Norm`` itself, or
  ``package.module:Name`` (imported and registered). One-line ValueError
  naming the registered norms otherwise."""
  if isinstance(name, Norm):
    return register(name)
  if isinstance(name, str) and name in _REGISTRY:
    return _REGISTRY[name]
  if isinstance(name, str) and ":" in name:
    return _import(name)
  raise ValueError(message(name, names()))


def names(*sites: str, running_stats: bool = True, kernel: bool = True) -> tuple[str, ...]:
  """The registered norms that any of ``sites`` accepts (no sites: all), in
  registration order; ``running_stats`` / ``kernel`` False leaves out the
  norms a host cannot implement (batch norm, weight norm)."""
  bad = [s for s in sites if s not in SITES]
  if bad:
    raise ValueError(f"{bad} are not sites; choose from: {', '.join(SITES)}")
  return tuple(n.name for n in _REGISTRY.values()
               if (not sites or n.sites & set(sites))
               and (running_stats or not n.running_stats)
               and (kernel or n.kernel is None))


def message(norm: object, valid: Iterable[str]) -> str:
  """The one-line error for a norm that ``valid`` does not hold."""
  return f"norm={norm!r} is not valid; choose one of: {', '.join(valid)}"


def _lookup(norm: object) -> Norm | None:
  """The registered ``Norm`` of ``norm`` (importing a ``module:Name``), or None."""
  if isinstance(norm, Norm) or (isinstance(norm, str) and ":" in norm):
    return get(norm)
  return _REGISTRY.get(norm) if isinstance(norm, str) else None


def check(norm: object, valid: Iterable[str]) -> Norm:
  """The ``Norm`` of ``norm`` if its name is in ``valid``; else a one-line
  ``ValueError`` naming them (a ``module:Name`` that does not import, or is
  not a Norm, gets its own line)."""
  nm = _lookup(norm)
  valid = tuple(valid)
  if nm is None or nm.name not in valid:
    raise ValueError(message(norm, valid))
  return nm


def accept(norm: object, *sites: str, running_stats: bool = True,
           kernel: bool = True) -> Norm:
  """``check`` against ``names(*sites, ...)``, read after a ``module:Name``
  is registered: what a host of those sites calls."""
  nm = _lookup(norm)
  valid = names(*sites, running_stats=running_stats, kernel=kernel)
  if nm is None or nm.name not in valid:
    raise ValueError(message(norm, valid))
  return nm


def check_fit(norm: object, features: Iterable[int], **options: Any) -> None:
  """One-line ``ValueError`` unless every layer of ``features`` can take ``norm``."""
  nm = get(norm)
  for f in features:
    why = nm.unfit(int(f), **options)
    if why is not None:
      raise ValueError(f"norm={nm.name!r}: {why}")


def label(norm: object, network: str | None = None) -> str:
  """``label("layer")`` is "Layer norm"; ``label("layer", "LSTM")`` is
  "LN-LSTM"; a name that is not registered is a one-line ValueError."""
  nm = get(norm)
  return nm.label if network is None else nm.prefix + network


# -- the definitions -----------------------------------------------------------

def _row(v: Array, ndim: int) -> Array:
  return v.reshape((1,) * (ndim - v.ndim) + v.shape)


def affine(y: Array, p: Mapping[str, Array]) -> Array:
  """``gain * y + bias`` with whichever of ``p["gain"]``, ``p["bias"]`` are
  there, each per feature of the last axis (or a scalar): the end of most
  norms' ``fn``."""
  if "gain" in p:
    y = y * _row(jnp.asarray(p["gain"]), y.ndim)
  if "bias" in p:
    y = y + _row(jnp.asarray(p["bias"]), y.ndim)
  return y


def _statistics(f):
  """layer and rms: over the last axis the fused kernel applies gain and bias;
  over several axes (a conv's H x W x C), normalize, then the affine."""

  def apply(x, p, *, axes, eps):
    g, b = p.get("gain"), p.get("bias")
    if tuple(axes) == (x.ndim - 1,):
      return f(x, g, b, eps=eps)
    y = f(x, axis=axes, eps=eps)
    y = y if g is None else y * _row(g, y.ndim)
    return y if b is None else y + _row(b, y.ndim)

  return apply


def _per_group(x: Array, axes: tuple[int, ...]) -> tuple[Array, tuple[int, ...]]:
  """x as (groups, *normalized axes): one leading batch axis."""
  return x.reshape((-1,) + x.shape[axes[0]:]), x.shape


def auto_groups(c: int, groups: int) -> int:
  """``groups``, or for 0 the largest divisor of c of at most 32 (Wu & He's G)."""
  return groups or max(g for g in range(1, min(c, 32) + 1) if c % g == 0)


def _group(x, p, *, axes, eps, groups):
  xg, shape = _per_group(x, axes)
  y = N.group_norm(xg, p.get("gain"), p.get("bias"),
                   groups=auto_groups(x.shape[-1], groups), eps=eps)
  return y.reshape(shape)


def _group_check(features: int, groups: int = 0) -> str | None:
  if not isinstance(groups, int) or groups < 0:
    return f"groups={groups!r} must be 0 (auto) or a positive integer"
  if groups and features % groups:
    return f"groups={groups} does not divide a layer's {features} features"
  return None


def _scale(x, p, *, axes, eps):
  xg, shape = _per_group(x, axes)
  y = N.scale_norm(xg.reshape(xg.shape[0], -1), p["g"], eps=eps).reshape(shape)
  b = p.get("bias")
  return y if b is None else y + _row(b.astype(y.dtype), y.ndim)


def _weight_kernel(w, gain, axes):
  return N.weight_norm(w, gain, axis=axes)


# The names of the 2016 norms (and RMS), for the scripts that choose the
# paper's runs by them.
NONE, LAYER, LAYER_C, BATCH, WEIGHT, RMS = "none", "layer", "layer_c", "batch", "weight", "rms"

register(Norm(NONE, "Baseline", "", frozenset(SITES), bias=False, cite="no normalization"))
register(Norm(
    LAYER, "Layer norm", "LN-", frozenset(SITES), (Param("gain"),),
    fn=_statistics(N.layer_norm), native=("layer_norm", "LSTM", "GRU"),
    cite="Ba, Kiros & Hinton 2016"))
register(Norm(
    LAYER_C, "LN on c_t", "LN(c)-", frozenset({CELL}), (Param("gain"),),
    fn=_statistics(N.layer_norm), native=("LSTM",),
    cite="Ba, Kiros & Hinton 2016, eqs. 29-31 (DRAW)"))
register(Norm(
    BATCH, "Batch norm", "BN-", frozenset({FEATURES, GATES, CELL}), (Param("gain"),),
    running_stats=True, cell_gain_init=0.1,
    cite="Ioffe & Szegedy 2015; recurrent: Cooijmans et al. 2016"))
register(Norm(
    WEIGHT, "Weight norm", "WN-", frozenset({FEATURES}), (Param("gain"),),
    kernel=_weight_kernel, cite="Salimans & Kingma 2016"))
register(Norm(
    RMS, "RMS norm", "RMS-", frozenset(SITES), (Param("gain"),), bias=False,
    fn=_statistics(N.rms_norm), native=("rms_norm",), cite="Zhang & Sennrich 2019"))


def _pointwise(f, *scalars: str):
  """DyT, Derf: ``f(x, *scalars, gain, bias)`` element by element."""

  def apply(x, p, *, axes, eps):
    return f(x, *(p[s] for s in scalars), p.get("gain"), p.get("bias"))

  return apply


register(Norm(
    "group", "Group norm", "GN-", frozenset({FEATURES, SUBLAYER}), (Param("gain"),),
    fn=_group, options=("groups",), check=_group_check, cite="Wu & He 2018"))
register(Norm(
    "dyt", "DyT", "DyT-", frozenset(SITES),
    (Param("alpha", "scalar", N.DYT_ALPHA0), Param("gain")), fn=_pointwise(N.dyt, "alpha"),
    cite="Zhu, Chen, He, LeCun & Liu, CVPR 2025"))
register(Norm(
    "derf", "Derf", "Derf-", frozenset(SITES),
    (Param("alpha", "scalar", N.DERF_ALPHA0), Param("shift", "scalar", N.DERF_SHIFT0),
     Param("gain")), fn=_pointwise(N.derf, "alpha", "shift"),
    cite="Chen, Lu, Zhu, Sun & Liu, arXiv 2512.10938"))
register(Norm(
    "scale", "ScaleNorm", "SN-", frozenset(SITES), (Param("g", "scalar", N.scale_norm_g0),),
    bias=False, fn=_scale, cite="Nguyen & Salazar 2019"))
