"""Graves' synthesis network (lnorm/handwriting.py) against float64 numpy."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lnorm import handwriting as hw
from tests.run_records import steps_lower_the_loss

SMALL = dict(hidden=8, num_window=3, num_mixtures=4, num_chars=7)
# Tiny programs run a few times: XLA's optimizations cost more than they save.
FAST = {"xla_backend_optimization_level": 0}


def jit(f, **kw):
  return jax.jit(f, compiler_options=FAST, **kw)


def np_mixture_nll(out, targets, M):
  """Graves (18)-(26) written out in float64."""
  out, targets = np.asarray(out, np.float64), np.asarray(targets, np.float64)
  e_hat, pi_hat = out[..., 0], out[..., 1:1 + M]
  mu1, mu2, s1, s2, r = (out[..., 1 + k * M:1 + (k + 1) * M] for k in range(1, 6))
  pi = np.exp(pi_hat - pi_hat.max(-1, keepdims=True))
  pi /= pi.sum(-1, keepdims=True)
  s1, s2, rho = np.exp(s1), np.exp(s2), np.tanh(r)
  x1, x2, eos = targets[..., :1], targets[..., 1:2], targets[..., 2]
  z = ((x1 - mu1) / s1) ** 2 + ((x2 - mu2) / s2) ** 2 - 2 * rho * (x1 - mu1) * (x2 - mu2) / (s1 * s2)
  n = np.exp(-z / (2 * (1 - rho ** 2))) / (2 * np.pi * s1 * s2 * np.sqrt(1 - rho ** 2))
  e = 1 / (1 + np.exp(-e_hat))
  return -np.log((pi * n).sum(-1)) - np.log(np.where(eos > 0.5, e, 1 - e))


def random_out(key, shape, M, scale=1.0):
  return scale * jax.random.normal(key, shape + (hw.num_outputs(M),))


def test_nll_matches_numpy():
  M = 5
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  out = random_out(k1, (4, 6), M)
  xy = jax.random.normal(k2, (4, 6, 2)) * 1.5
  eos = jax.random.bernoulli(k3, 0.3, (4, 6, 1)).astype(jnp.float32)
  targets = jnp.concatenate([xy, eos], -1)
  np.testing.assert_allclose(hw.nll(out, targets, M), np_mixture_nll(out, targets, M),
                             rtol=1e-5, atol=1e-5)


def test_one_component_density_integrates_to_one():
  # M = 1: pi = 1; sum over eos and integrate (dx, dy) over a wide grid.
  out = jnp.asarray([0.3, 0.0, 0.4, -0.2, np.log(0.6), np.log(0.3), 0.9], jnp.float32)
  g = np.linspace(-5, 5, 801)
  X, Y = np.meshgrid(g, g, indexing="ij")
  total = 0.0
  for eos in (0.0, 1.0):
    t = jnp.asarray(np.stack([X, Y, np.full_like(X, eos)], -1), jnp.float32)
    total += np.exp(-np.asarray(hw.nll(jnp.broadcast_to(out, t.shape[:2] + out.shape), t, 1),
                               np.float64)).sum() * (g[1] - g[0]) ** 2
  assert abs(total - 1.0) < 1e-3


def test_nll_finite_at_extreme_rho():
  out = jnp.zeros((1, hw.num_outputs(1))).at[0, -1].set(30.0)  # tanh(30) rounds to 1
  assert np.isfinite(np.asarray(hw.nll(out, jnp.asarray([[0.1, 0.1, 0.0]]), 1))).all()


def np_window(h, kappa, onehot, W, b):
  p = h.astype(np.float64) @ W + b
  K = kappa.shape[-1]
  a, be, k = np.exp(p[:, :K]), np.exp(p[:, K:2 * K]), kappa + np.exp(p[:, 2 * K:])
  u = np.arange(1, onehot.shape[1] + 1)
  phi = (a[:, :, None] * np.exp(-be[:, :, None] * (k[:, :, None] - u) ** 2)).sum(1)
  return k, np.einsum("bu,buc->bc", phi, onehot), phi


@pytest.mark.slow
def test_window_matches_numpy():
  B, H, K, U, C = 3, 5, 4, 6, 7
  k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
  h = jax.random.normal(k1, (B, H))
  kappa = jnp.abs(jax.random.normal(k2, (B, K))) * 2
  onehot = jax.nn.one_hot(jax.random.randint(k3, (B, U), 0, C), C)
  onehot = onehot.at[0, 4:].set(0.0)  # a shorter text
  win = hw.Window(K)
  params = win.init(jax.random.key(2), h, kappa, onehot)
  d = params["params"]["dense"]
  np.testing.assert_array_equal(np.asarray(d["bias"][2 * K:]), -3.0)
  got = win.apply(params, h, kappa, onehot)
  want = np_window(np.asarray(h), np.asarray(kappa, np.float64), np.asarray(onehot),
                   np.asarray(d["kernel"], np.float64), np.asarray(d["bias"], np.float64))
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def make_batch(key, B=3, T=9, U=5, C=7):
  k1, k2, k3 = jax.random.split(key, 3)
  targets = jnp.concatenate([jax.random.normal(k1, (B, T, 2)),
                             jax.random.bernoulli(k2, 0.2, (B, T, 1)).astype(jnp.float32)], -1)
  inputs = jnp.concatenate([jnp.zeros((B, 1, 3)), targets[:, :-1]], 1)
  chars = jax.random.randint(k3, (B, U), 1, C)
  lengths, clen = np.array([T, 5, 2])[:B], np.array([U, 3, 1])[:B]
  mask = jnp.asarray(np.arange(T)[None] < lengths[:, None])
  char_mask = jnp.asarray(np.arange(U)[None] < clen[:, None])
  return inputs, targets, chars, char_mask, mask


def line_nll_fn(model, params, inputs, targets, chars, char_mask, mask):
  out = model.apply(params, inputs, chars, char_mask, mask)["out"]
  per_point = hw.nll(out, targets, model.num_mixtures)
  return jnp.sum(per_point if mask is None else per_point * mask, -1)


line_nll = jit(line_nll_fn, static_argnums=0)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["layer"])  # recurrent's tests cover the LSTM's masks for each norm
def test_masked_lines_equal_lines_alone(norm):
  model = hw.Synthesis(norm=norm, **SMALL)
  inputs, targets, chars, char_mask, mask = make_batch(jax.random.key(3))
  params = jit(model.init)(jax.random.key(4), inputs, chars, char_mask, mask)
  got = line_nll(model, params, inputs, targets, chars, char_mask, mask)
  # Garbage in the padding (inputs, targets, characters) changes nothing.
  noise = jax.random.normal(jax.random.key(5), inputs.shape) * 50
  pad = ~mask[..., None]
  cpad = ~char_mask
  got2 = line_nll(model, params, jnp.where(pad, noise, inputs), jnp.where(pad, noise, targets),
                  jnp.where(cpad, 6, chars), char_mask, mask)
  np.testing.assert_allclose(got2, got, rtol=1e-5)
  for b in range(inputs.shape[0]):
    T, U = int(mask[b].sum()), int(char_mask[b].sum())
    alone = line_nll(model, params, inputs[b:b + 1, :T], targets[b:b + 1, :T],
                     chars[b:b + 1, :U], None, None)
    np.testing.assert_allclose(got[b], alone[0], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ("none", "layer", "layer_c"))
def test_step_equals_sequence(norm):
  """SynthesisStep, fed the same inputs point by point, is the same network."""
  model = hw.Synthesis(norm=norm, **SMALL)
  step = hw.SynthesisStep(norm=norm, **SMALL)
  inputs, _, chars, char_mask, _ = make_batch(jax.random.key(6), T=6)
  params = jit(model.init)(jax.random.key(7), inputs, chars, char_mask)
  full = jit(model.apply)(params, inputs, chars, char_mask)
  carry = step.zero_carry(inputs.shape[0])
  onehot = jax.nn.one_hot(chars, SMALL["num_chars"]) * char_mask[..., None]
  apply = jit(step.apply)
  for t in range(inputs.shape[1]):
    carry, out, phi = apply(params, carry, inputs[:, t], onehot)
    np.testing.assert_allclose(out, full["out"][:, t], rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(phi, full["phi"][:, t], rtol=2e-4, atol=1e-6)


def test_paper_size_weights():
  model = hw.Synthesis()  # H = 400, K = 10, M = 20, 57 characters
  x, c = jnp.zeros((1, 2, 3)), jnp.zeros((1, 3), jnp.int32)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), x, c))
  # 4H (in + H + 1) per LSTM, in = 3 + 57 (+ 400); window 400*30+30; head 1200*121+121.
  want = 1600 * 461 + 12030 + 2 * 1600 * 861 + 1200 * 121 + 121
  assert hw.count_params(shapes) == want == 3_650_151


def test_bad_norm():
  with pytest.raises(ValueError, match="norm='batch' is not valid; choose one of: none, layer"):
    hw.Synthesis(norm="batch", **SMALL).init(jax.random.key(0), jnp.zeros((1, 2, 3)),
                                              jnp.zeros((1, 2), jnp.int32))


def test_clip_gradient():
  g = jax.grad(lambda x: jnp.sum(hw.clip_gradient(x, jnp.float32(2.0)) * jnp.asarray([5.0, -1.0, -9.0])))(
      jnp.ones(3))
  np.testing.assert_array_equal(g, [2.0, -1.0, -2.0])


@pytest.mark.slow
@pytest.mark.parametrize("norm", ("none", "layer", "layer_c"))
def test_a_few_adam_steps_stay_finite_and_learn(norm):
  model = hw.Synthesis(norm=norm, **SMALL)
  inputs, targets, chars, char_mask, mask = make_batch(jax.random.key(8))
  params = jit(model.init)(jax.random.key(9), inputs, chars, char_mask, mask)
  loss = lambda p: jnp.sum(line_nll_fn(model, p, inputs, targets, chars, char_mask, mask)) / mask.sum()
  steps_lower_the_loss(loss, params, optax.adam(1e-2), 4)


@pytest.mark.slow
def test_sample_shapes_and_bias():
  model = hw.Synthesis(**SMALL)
  step = hw.SynthesisStep(**SMALL)
  chars = jnp.asarray([[1, 2, 3, 0], [4, 5, 0, 0]], jnp.int32)
  cmask = chars > 0
  params = model.init(jax.random.key(10), jnp.zeros((2, 3, 3)), chars, cmask)
  r = hw.sample(step, params, jax.random.key(11), chars, cmask, 12, 0.0)
  assert r["rows"].shape == (2, 12, 3) and r["phi"].shape == (2, 12, 5) and r["end"].shape == (2,)
  assert set(np.unique(np.asarray(r["rows"][..., 2]))) <= {0.0, 1.0}
  assert np.all((0 <= np.asarray(r["end"])) & (np.asarray(r["end"]) <= 12))
  # A large bias shrinks sigma (exp(-b)) and sharpens pi: the draws land on
  # the mean of the most probable component.
  M = 3
  out = np.zeros(hw.num_outputs(M), np.float32)
  out[1:1 + M] = [0.0, 3.0, 1.5]  # pi^: component 1 is the likeliest
  out[1 + M:1 + 3 * M] = [5.0, -2.0, 7.0, 1.0, 3.0, -4.0]  # mu1, mu2
  rows = jax.vmap(lambda k: hw.sample_point(k, jnp.asarray(out)[None], M, 10.0))(
      jax.random.split(jax.random.key(12), 64))
  np.testing.assert_allclose(rows[:, 0, :2], np.broadcast_to([-2.0, 3.0], (64, 2)), atol=1e-3)
  rows0 = jax.vmap(lambda k: hw.sample_point(k, jnp.asarray(out)[None], M, 0.0))(
      jax.random.split(jax.random.key(12), 64))
  assert np.abs(np.asarray(rows0[:, 0, :2]) - np.asarray([-2.0, 3.0])).max() > 1.0
  p = hw.mixture(jnp.arange(hw.num_outputs(3), dtype=jnp.float32) / 10, 3, bias=2.0)
  np.testing.assert_allclose(p["log_sigma1"], np.arange(10, 13) / 10 - 2.0, rtol=1e-6)
  np.testing.assert_allclose(np.exp(p["log_pi"]), jax.nn.softmax(np.arange(1, 4) / 10 * 3.0),
                             rtol=1e-5)
