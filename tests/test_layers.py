"""NormDense and MLP against the paper's equations, written out in numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm.layers import NormDense

NORMS = ("none", "layer", "batch", "weight", "rms")  # the references below
from lnorm.mlp import MLP

RNG = np.random.default_rng(1)


def _params(norm, x):
  layer = NormDense(5, norm=norm)
  v = layer.init(jax.random.key(0), x)
  p = {k: jnp.asarray(RNG.normal(1, 0.5, a.shape), jnp.float32) for k, a in v["params"].items()}
  return layer, {**v, "params": p}


def reference(norm, x, p):
  x = np.asarray(x, np.float64)
  w, b = np.asarray(p["kernel"], np.float64), np.asarray(p["bias"], np.float64)
  g = np.asarray(p.get("gain", np.ones_like(b)), np.float64)
  a = x @ w
  if norm == "none":
    return a + b
  if norm == "weight":
    return x @ (g * w / np.linalg.norm(w, axis=0)) + b
  if norm == "layer":
    mu, var = a.mean(1, keepdims=True), a.var(1, keepdims=True)
  elif norm == "rms":
    mu, var = 0, (a ** 2).mean(1, keepdims=True)
  else:
    mu, var = a.mean(0, keepdims=True), a.var(0, keepdims=True)
  return g * (a - mu) / np.sqrt(var + 1e-5) + b


@pytest.mark.parametrize("norm", NORMS)
def test_norm_dense_matches_equation_5(norm):
  x = jnp.asarray(RNG.normal(size=(8, 7)), jnp.float32)
  layer, v = _params(norm, x)
  y = layer.apply(v, x, train=True, mutable=["batch_stats"])[0]
  np.testing.assert_allclose(y, reference(norm, x, v["params"]), rtol=2e-4, atol=2e-4)


def test_init_gains_one_biases_zero():
  v = NormDense(4, norm="layer").init(jax.random.key(0), jnp.ones((2, 3)))["params"]
  np.testing.assert_array_equal(v["gain"], 1)
  np.testing.assert_array_equal(v["bias"], 0)


def test_batch_norm_running_averages_and_eval_mode():
  layer = NormDense(3, norm="batch", momentum=0.5)
  x = jnp.asarray(RNG.normal(2, 3, size=(16, 4)), jnp.float32)
  v = layer.init(jax.random.key(0), x)
  np.testing.assert_array_equal(v["batch_stats"]["mean"], 0)   # init did not update
  _, upd = layer.apply(v, x, train=True, mutable=["batch_stats"])
  a = np.asarray(x @ v["params"]["kernel"], np.float64)
  np.testing.assert_allclose(upd["batch_stats"]["mean"], 0.5 * a.mean(0), rtol=1e-5)
  np.testing.assert_allclose(upd["batch_stats"]["var"], 0.5 + 0.5 * a.var(0), rtol=1e-5)
  v2 = {**v, **upd}
  y = layer.apply(v2, x[:1], train=False)   # evaluation works for one example
  m, s = np.asarray(upd["batch_stats"]["mean"]), np.asarray(upd["batch_stats"]["var"])
  np.testing.assert_allclose(y, (a[:1] - m) / np.sqrt(s + 1e-5), rtol=1e-4, atol=1e-5)


def test_mlp_normalizes_output_only_when_asked():
  x = jnp.asarray(RNG.normal(size=(4, 6)), jnp.float32)
  ln = MLP(features=(8, 3), norm="layer").init(jax.random.key(0), x)["params"]
  assert "gain" in ln["dense0"] and "gain" not in ln["dense1"]
  bn = MLP(features=(8, 3), norm="batch", norm_output=True).init(jax.random.key(0), x)
  assert "mean" in bn["batch_stats"]["dense1"]


@pytest.mark.parametrize("norm", ["grop", "layer_c"])
def test_unknown_norm_is_rejected(norm):
  # layer_c is a norm of the vocabulary, but of LSTMs only.
  with pytest.raises(ValueError, match=f"norm='{norm}' is not valid; choose one of: "
                     "none, layer, batch, weight, rms"):
    NormDense(3, norm=norm).init(jax.random.key(0), jnp.ones((2, 2)))


@pytest.mark.parametrize("norm", NORMS)
def test_norm_conv_matches_equations(norm):
  import flax.linen as nn
  from lnorm.layers import NormConv
  x = jnp.asarray(RNG.normal(1, 2, size=(3, 6, 5, 2)), jnp.float32)
  layer = NormConv(4, kernel_size=(3, 3), norm=norm)
  v = layer.init(jax.random.key(0), x)
  p = {k: jnp.asarray(RNG.normal(1, 0.5, a.shape), jnp.float32) for k, a in v["params"].items()}
  y = layer.apply({**v, "params": p}, x, train=True, mutable=["batch_stats"])[0]
  w = p["kernel"]
  if norm == "weight":
    w = p["gain"].reshape(1, 1, 1, 4) * w / jnp.sqrt(jnp.sum(w ** 2, axis=(0, 1, 2), keepdims=True))
  conv = nn.Conv(4, (3, 3), padding="SAME", use_bias=False)   # an independent conv
  a = np.asarray(conv.apply({"params": {"kernel": w}}, x), np.float64)
  g, b = np.asarray(p.get("gain", np.ones(4))), np.asarray(p["bias"])
  if norm in ("none", "weight"):
    ref = a + b
  else:
    axes = (0, 1, 2) if norm == "batch" else (1, 2, 3)
    mu = 0 if norm == "rms" else a.mean(axes, keepdims=True)
    var = ((a - mu) ** 2).mean(axes, keepdims=True)
    ref = g * (a - mu) / np.sqrt(var + 1e-5) + b
  np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def _layer(kind, norm, **kw):
  from lnorm.layers import NormConv
  if kind == "dense":
    return NormDense(4, norm=norm, **kw), jnp.asarray(RNG.normal(1, 2, (3, 5)))
  return NormConv(4, norm=norm, **kw), jnp.asarray(RNG.normal(1, 2, (2, 5, 4, 3)))


@pytest.mark.parametrize("kind", ["dense", "conv"])
@pytest.mark.parametrize("norm", NORMS)
def test_float32_inputs_with_x64_on_give_float32_params_and_outputs(kind, norm):
  # Flax's default param_dtype is float32 whatever jax_enable_x64 says; the
  # kernel initializer's own default (jnp.float_) would be float64.
  with jax.enable_x64(True):
    layer, x = _layer(kind, norm)
    x = x.astype(jnp.float32)
    v = layer.init(jax.random.key(0), x)
    assert {a.dtype for a in jax.tree.leaves(v)} == {jnp.dtype(jnp.float32)}
    y, upd = layer.apply(v, x, mutable=["batch_stats"])
    assert y.dtype == jnp.float32
    assert {a.dtype for a in jax.tree.leaves(upd)} <= {jnp.dtype(jnp.float32)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dense", "conv"])
@pytest.mark.parametrize("norm", NORMS)
def test_dtype_and_param_dtype_as_in_flax(kind, norm):
  layer, x = _layer(kind, norm, dtype=jnp.bfloat16)
  x = x.astype(jnp.float32)
  v = layer.init(jax.random.key(0), x)
  assert {a.dtype for a in jax.tree.leaves(v["params"])} == {jnp.dtype(jnp.float32)}
  y = layer.apply(v, x, mutable=["batch_stats"])[0]
  assert y.dtype == jnp.bfloat16
  # The same layer in float32 computes the same function, to bfloat16 rounding.
  ref = _layer(kind, norm)[0].apply(v, x, mutable=["batch_stats"])[0]
  assert ref.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(y, np.float32), ref, rtol=0.05, atol=0.05)
  # param_dtype sets the parameters; with dtype None the computation runs in
  # the promoted dtype of inputs and parameters.
  layer16, _ = _layer(kind, norm, param_dtype=jnp.bfloat16)
  v16 = layer16.init(jax.random.key(0), x.astype(jnp.bfloat16))
  assert {a.dtype for a in jax.tree.leaves(v16["params"])} == {jnp.dtype(jnp.bfloat16)}
  assert layer16.apply(v16, x.astype(jnp.bfloat16),
                       mutable=["batch_stats"])[0].dtype == jnp.bfloat16
  assert layer16.apply(v16, x, mutable=["batch_stats"])[0].dtype == jnp.float32
