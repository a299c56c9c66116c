"""The optimizer of the experiments: Adam, after global-norm gradient clipping."""

from __future__ import annotations

import functools

import optax


# One instance per setting: jit keys on the train state's static fields (its
# tx), so runs with equal settings share their compiled steps.
@functools.lru_cache(maxsize=None)
def adam(learning_rate: float, grad_clip_norm: float = 0.0) -> optax.GradientTransformation:
  """optax's Adam (b1 0.9, b2 0.999, eps 1e-8), after clipping the global
  gradient norm at ``grad_clip_norm`` if it is not 0."""
  tx = optax.adam(learning_rate)
  if grad_clip_norm:
    tx = optax.chain(optax.clip_by_global_norm(grad_clip_norm), tx)
  return tx
