"""A norm defined outside lnorm, as a user would: mean-only normalization
(centring without scaling; Salimans & Kingma 2016's mean-only batch norm,
here per example). Used by tests/test_norms_registry.py through
``--config.norm=tests.user_norm:MyNorm``."""

import jax.numpy as jnp

from lnorm import norms


def mean_only(x, p, *, axes, eps):
  """gain * (x - mean(x)) + bias over ``axes``; eps unused (nothing divides)."""
  return norms.affine(x - jnp.mean(x, axis=axes, keepdims=True), p)


MyNorm = norms.Norm("my_norm", "My norm", "MY-", frozenset(norms.SITES),
                    (norms.Param("gain"),), fn=mean_only)

NotANorm = 3  # for the test of a config value that names something else
