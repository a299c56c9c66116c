"""What every experiment's ``create_train_state`` and evaluation repeat, once:
one model instance per setting, parameters initialised in one jitted call,
the seed's named keys, the optimizer, and a split cut into padded chunks."""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


# One instance per setting: jit keys on a train state's static fields (its
# apply_fn, a bound method compared by its module's identity, and its tx), so
# runs with equal settings share their compiled steps.
@functools.lru_cache(maxsize=None)
def model(cls: type[nn.Module], **fields) -> nn.Module:
  """The one instance of ``cls(**fields)``."""
  return cls(**fields)


@functools.lru_cache(maxsize=None)
def adam(learning_rate: float, grad_clip_norm: float = 0.0) -> optax.GradientTransformation:
  """optax's Adam (b1 0.9, b2 0.999, eps 1e-8), after clipping the global
  gradient norm at ``grad_clip_norm`` if it is not 0."""
  tx = optax.adam(learning_rate)
  if grad_clip_norm:
    tx = optax.chain(optax.clip_by_global_norm(grad_clip_norm), tx)
  return tx


def _init(module: nn.Module, rng: jax.Array, *inputs: jax.Array) -> Any:
  return module.init(rng, *inputs)


# For functions run once a process: XLA's backend optimisations off halve
# their compile time, and their run time is negligible either way.
RUN_ONCE = {"xla_backend_optimization_level": 0}

# Jitted: unjitted, init would run a model's scans op by op.
_init_jit = jax.jit(_init, static_argnums=0)
_init_jit_once = jax.jit(_init, static_argnums=0, compiler_options=RUN_ONCE)


def init_variables(module: nn.Module, rng: jax.Array, *inputs: jax.Array,
                   fast_compile: bool = False) -> Any:
  """``module.init(rng, *inputs)`` as one jitted call; ``inputs`` give the
  shapes (the variables do not depend on their values)."""
  return (_init_jit_once if fast_compile else _init_jit)(module, rng, *inputs)


def named_keys(seed: int, *names: str) -> dict[str, jax.Array]:
  """Independent streams of one seed, by name: ``split(key(seed), len(names))``."""
  return dict(zip(names, jax.random.split(jax.random.key(seed), len(names))))


def padded_chunks(tree: Any, n: int, chunk: int) -> tuple[Any, jax.Array]:
  """Each ``[n, ...]`` array of ``tree`` as ``[C, chunk, ...]``, the last chunk
  padded with zeros, and the weights ``[C, chunk]`` (0 on the padding): a
  whole split in one traced step size, the last partial chunk too."""
  padded = -(-n // chunk) * chunk

  def cut(a):
    a = jnp.pad(a, ((0, padded - n),) + ((0, 0),) * (a.ndim - 1))
    return a.reshape((-1, chunk) + a.shape[1:])

  w = (jnp.arange(padded) < n).astype(jnp.float32).reshape(-1, chunk)
  return jax.tree.map(cut, tree), w
