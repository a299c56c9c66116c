"""lnorm.nnx against the linen modules: the same parameter names and order,
and on the same parameters the same outputs and gradients, for every
registered norm each module takes (a user's norm too)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lnorm import layers, nnx as lnnx, norms, recurrent as R
from tests.user_norm import MyNorm

norms.register(MyNorm)


def _perturbed(tree, seed=3):
  return {k: v + 0.3 * jax.random.normal(jax.random.fold_in(jax.random.key(seed), i), v.shape)
          for i, (k, v) in enumerate(tree.items())}


def _same(linen, module, p, call_linen, call_nnx):
  """Loads ``p`` (linen's parameters) into ``module``; compares outputs and
  the gradients of sum(sin(out)) exactly (the same functions on the same
  values)."""
  assert list(lnnx.params(module)) == list(p)
  lnnx.load(module, p)
  loss = lambda out: sum(jnp.sum(jnp.sin(l)) for l in jax.tree.leaves(out))
  want, g_want = jax.value_and_grad(lambda q: loss(call_linen(q)))(p)
  got, g_got = nnx.value_and_grad(lambda m: loss(call_nnx(m)))(module)
  np.testing.assert_array_equal(got, want)
  g_got = {k: getattr(g_got, k).value for k in p}
  for k in p:
    np.testing.assert_array_equal(g_got[k], g_want[k])


@pytest.mark.parametrize("norm", [n for n in norms.names(norms.FEATURES, running_stats=False)])
def test_norm_dense(norm):
  x = jax.random.normal(jax.random.key(0), (4, 6)) + 1.0
  linen = layers.NormDense(8, norm=norm)
  p = _perturbed(dict(linen.init(jax.random.key(1), x)["params"]))
  module = lnnx.NormDense(6, 8, norm=norm, rngs=nnx.Rngs(0))
  _same(linen, module, p, lambda q: linen.apply({"params": q}, x), lambda m: m(x))


@pytest.mark.parametrize("norm", norms.names(norms.GATES, norms.CELL, running_stats=False))
def test_lstm_cell(norm):
  x = jax.random.normal(jax.random.key(0), (3, 4))
  carry = tuple(jax.random.normal(jax.random.key(k), (3, 5)) for k in (1, 2))
  linen = R.LSTMCell(5, norm=norm)
  p = _perturbed(dict(linen.init(jax.random.key(3), carry, x)["params"]))
  module = lnnx.LSTMCell(4, 5, norm=norm, rngs=nnx.Rngs(0))
  _same(linen, module, p, lambda q: linen.apply({"params": q}, carry, x),
        lambda m: m(carry, x))


@pytest.mark.parametrize("norm", norms.names(norms.GATES, running_stats=False))
def test_gru_cell(norm):
  x = jax.random.normal(jax.random.key(0), (3, 4))
  h = jax.random.normal(jax.random.key(1), (3, 5))
  linen = R.GRUCell(5, norm=norm)
  p = _perturbed(dict(linen.init(jax.random.key(3), h, x)["params"]))
  module = lnnx.GRUCell(4, 5, norm=norm, rngs=nnx.Rngs(0))
  _same(linen, module, p, lambda q: linen.apply({"params": q}, h, x), lambda m: m(h, x))


@pytest.mark.parametrize("norm", [n for n in norms.names(norms.SUBLAYER, running_stats=False,
                                                         kernel=False) if n != "none"])
def test_normalize(norm):
  x = jax.random.normal(jax.random.key(0), (2, 3, 8)) + 2.0
  linen = layers.Normalize(norm)
  p = _perturbed(dict(linen.init(jax.random.key(1), x)["params"]))
  module = lnnx.Normalize(8, norm)
  _same(linen, module, p, lambda q: linen.apply({"params": q}, x), lambda m: m(x))


def test_batch_norm_is_one_line():
  with pytest.raises(ValueError, match="norm='batch' is not valid; choose one of: none, layer"):
    lnnx.NormDense(3, 4, norm="batch", rngs=nnx.Rngs(0))
