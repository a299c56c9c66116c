"""group_norm, dyt, derf and scale_norm against float64 NumPy references
written from their papers' equations, their gradients against autodiff of
naive float64 versions, half-precision inputs against the float64 norm of
the rounded input, and the invariances each norm promises.

Tolerances come from the dtypes and sizes: a float32 result carries a few
roundings of eps32 plus the error of its sums (~sqrt(n) roundings for n
terms), and layer norm's shifted statistics lose at most 5 bits when the
mean dwarfs the spread (lnorm/normalization.py); a half-precision output is
the float32 result rounded once, half an ulp of the output dtype.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import normalization as N
from tests.references import rel_err

RNG = np.random.default_rng(0)
EPS = 1e-5


def tol32(n: int, bits_lost: int = 0) -> float:
  """Relative error allowed for a float32 norm over groups of n elements."""
  return float(np.finfo(np.float32).eps) * 2 ** bits_lost * 4 * (1 + math.sqrt(n))


def assert_rounded_once(y, ref, terms, dtype, n):
  """Each element of the half-precision y within half an ulp of the float64
  ``ref`` (plus the float32 computation's error, relative to the size of the
  terms summed, and the dtype's smallest subnormal)."""
  fi = jnp.finfo(dtype)
  y = np.asarray(jnp.asarray(y).astype(jnp.float32), np.float64)
  bound = (float(fi.eps) / 2 * np.abs(ref) + 2 * tol32(n) * terms
           + float(fi.smallest_subnormal))
  err = np.abs(y - ref)
  assert (err <= bound).all(), f"worst {np.max(err / bound):.2f}x the bound"


# -- group_norm ----------------------------------------------------------------

def last(p, x):
  """A per-channel parameter reshaped to broadcast against x (the tests run
  with rank promotion an error)."""
  return jnp.reshape(p, (1,) * (x.ndim - 1) + (-1,))


def np_group_norm(x, g, b, groups, eps):
  """Wu & He's eqs. 1-2 over S_i (eq. 7): for each example and each group of
  C / G channels, the mean and variance of all the group's non-batch values.
  Returns (y, |g x_hat| + |b|)."""
  x = np.asarray(x, np.float64)
  C = x.shape[-1]
  Cg = C // groups
  red = tuple(range(1, x.ndim))
  x_hat = np.empty_like(x)
  for i in range(groups):
    s = x[..., i * Cg:(i + 1) * Cg]
    mu = s.mean(red, keepdims=True)
    var = ((s - mu) ** 2).mean(red, keepdims=True)
    x_hat[..., i * Cg:(i + 1) * Cg] = (s - mu) / np.sqrt(var + eps)
  g = np.ones(C) if g is None else np.asarray(g, np.float64)
  b = np.zeros(C) if b is None else np.asarray(b, np.float64)
  return x_hat * g + b, np.abs(x_hat * g) + np.abs(b)


def naive_group_norm(x, g, b, groups, eps):
  """The same in jnp, two-pass and unshifted: its float64 autodiff is the
  gradient reference."""
  C = x.shape[-1]
  Cg = C // groups
  red = tuple(range(1, x.ndim))
  parts = []
  for i in range(groups):
    s = x[..., i * Cg:(i + 1) * Cg]
    mu = jnp.mean(s, red, keepdims=True)
    var = jnp.mean((s - mu) ** 2, red, keepdims=True)
    parts.append((s - mu) / jnp.sqrt(var + eps))
  return jnp.concatenate(parts, -1) * last(g, x) + last(b, x)


def group_size(shape, groups):
  return math.prod(shape[1:]) // groups


@pytest.mark.parametrize("shape,groups", [((6, 12), 1), ((6, 12), 3), ((6, 12), 12),
                                          ((3, 5, 4, 8), 1), ((3, 5, 4, 8), 2),
                                          ((3, 5, 4, 8), 8), ((2, 7, 32), 4)])
def test_group_norm_matches_float64(shape, groups):
  C = shape[-1]
  x = (RNG.normal(size=shape) * 3 + 1).astype(np.float32)
  g, b = RNG.normal(size=C), RNG.normal(size=C)
  f = jax.jit(N.group_norm, static_argnames=("groups", "eps"))
  y = f(x, jnp.asarray(g, jnp.float32), jnp.asarray(b, jnp.float32), groups=groups, eps=EPS)
  assert y.dtype == jnp.float32 and y.shape == shape
  ref, _ = np_group_norm(x, g.astype(np.float32), b.astype(np.float32), groups, EPS)
  assert rel_err(y, ref) < tol32(group_size(shape, groups))
  y = f(x, groups=groups, eps=EPS)
  assert rel_err(y, np_group_norm(x, None, None, groups, EPS)[0]) < tol32(group_size(shape, groups))


@pytest.mark.parametrize("mean", [1e4, -3e5])
def test_group_norm_accurate_when_the_mean_dwarfs_the_spread(mean):
  shape, groups = (4, 8, 8, 16), 4
  x = (mean + RNG.normal(0, 0.1, shape)).astype(np.float32)
  ref, _ = np_group_norm(x, None, None, groups, EPS)
  n = group_size(shape, groups)
  assert rel_err(N.group_norm(x, groups=groups, eps=EPS), ref) < tol32(n, bits_lost=5)
  # What the shift buys: float32 E[x^2] - E[x]^2 on raw x is off by O(1).
  xg = jnp.asarray(x).reshape(4, 64, groups, 4)
  m = jnp.mean(xg, (1, 3), keepdims=True)
  v = jnp.maximum(jnp.mean(xg * xg, (1, 3), keepdims=True) - m * m, 0)
  naive = ((xg - m) / jnp.sqrt(v + EPS)).reshape(shape)
  assert rel_err(naive, ref) > 100 * tol32(n, bits_lost=5)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape,groups,mean,std", [((4, 4, 4, 16), 4, 0.0, 1.0),
                                                   ((4, 4, 4, 16), 2, 30.0, 2.0),
                                                   ((2, 4096), 1, 100.0, 1.0)])
def test_group_norm_half_inputs_have_float32_statistics(dtype, shape, groups, mean, std):
  # (2, 4096) of ~100: sum(x^2) ~ 4e7 is beyond float16's 65504, so float16
  # statistics would overflow.
  C = shape[-1]
  x = jnp.asarray(RNG.normal(mean, std, shape), dtype)
  g = jnp.asarray(RNG.normal(1, 0.5, C), jnp.float32)
  b = jnp.asarray(RNG.normal(0, 0.5, C), jnp.float32)
  y = jax.jit(N.group_norm, static_argnames=("groups", "eps"))(x, g, b, groups=groups, eps=EPS)
  assert y.dtype == dtype and y.shape == shape
  ref, terms = np_group_norm(np.asarray(x.astype(jnp.float32)), g, b, groups, EPS)
  assert_rounded_once(y, ref, terms, dtype, group_size(shape, groups))


@pytest.mark.parametrize("shape,groups", [((3, 12), 4), ((2, 3, 4, 6), 3)])
def test_group_norm_gradients_match_naive_float64(shape, groups):
  C = shape[-1]
  x = RNG.normal(size=shape) * 2 + 0.5
  g, b, ct = RNG.normal(size=C), RNG.normal(size=C), RNG.normal(size=shape)
  with jax.enable_x64(True):
    loss = lambda f: lambda x, g, b: jnp.sum(f(x, g, b) * ct)
    ours = jax.grad(loss(lambda x, g, b: N.group_norm(x, g, b, groups=groups, eps=EPS)),
                    argnums=(0, 1, 2))(x, g, b)
    ref = jax.grad(loss(lambda x, g, b: naive_group_norm(x, g, b, groups, EPS)),
                   argnums=(0, 1, 2))(x, g, b)
    for o, r in zip(ours, ref):
      assert o.dtype == jnp.float64
      np.testing.assert_allclose(o, r, rtol=1e-9, atol=1e-11)


def test_group_norm_one_group_is_layer_norm_and_c_groups_instance_norm():
  B, H, W, C = 3, 4, 5, 6
  x = RNG.normal(1, 2, (B, H, W, C))
  g, b = RNG.normal(size=C), RNG.normal(size=C)
  with jax.enable_x64(True):
    # One group: layer norm over all non-batch axes (its gain tiled over H, W).
    ln = N.layer_norm(x, np.broadcast_to(g, (H, W, C)), np.broadcast_to(b, (H, W, C)),
                      axis=(1, 2, 3), eps=EPS)
    np.testing.assert_allclose(N.group_norm(x, g, b, groups=1, eps=EPS), ln,
                               rtol=1e-12, atol=1e-12)
    # C groups: instance norm, each channel over the spatial axes.
    inst = N.layer_norm(x, axis=(1, 2), eps=EPS) * last(g, x) + last(b, x)
    np.testing.assert_allclose(N.group_norm(x, g, b, groups=C, eps=EPS), inst,
                               rtol=1e-12, atol=1e-12)
    # And not the same function as each other.
    assert rel_err(N.group_norm(x, groups=1, eps=EPS), N.group_norm(x, groups=C, eps=EPS)) > 0.01


def test_group_norm_invariant_to_a_shift_and_scale_of_each_group():
  B, H, W, C, G = 3, 4, 4, 8, 4
  x = RNG.normal(size=(B, H, W, C))
  # One scale a > 0 and shift c per (example, group), repeated over the group's channels.
  a = np.repeat(RNG.uniform(0.5, 2.0, (B, 1, 1, G)), C // G, -1)
  c = np.repeat(RNG.normal(0, 10, (B, 1, 1, G)), C // G, -1)
  g, b = RNG.normal(size=C), RNG.normal(size=C)
  with jax.enable_x64(True):
    y = N.group_norm(x, g, b, groups=G, eps=1e-12)
    np.testing.assert_allclose(N.group_norm(a * x + c, g, b, groups=G, eps=1e-12), y,
                               rtol=1e-10, atol=1e-10)
    # A shift of one channel alone moves the output: the invariance is per group.
    x1 = x.copy()
    x1[..., 0] += 1.0
    assert rel_err(N.group_norm(x1, g, b, groups=G, eps=1e-12), y) > 0.01
  # In float32, within the eps-derived tolerance (eps=1e-5 is negligible at
  # these variances: a^2 var >= 0.25).
  y32 = N.group_norm(x.astype(np.float32), groups=G, eps=EPS)
  y32s = N.group_norm((a * x + c).astype(np.float32), groups=G, eps=EPS)
  n = H * W * C // G
  # The shifted input carries its own rounding: |c| / (a std) ~ 20 eps32 per element.
  assert rel_err(y32s, y32) < tol32(n, bits_lost=5)


def test_group_norm_constant_group_gives_the_bias():
  x = np.ones((2, 3, 3, 4), np.float32) * 7.0
  b = np.arange(4, dtype=np.float32)
  y = N.group_norm(x, np.full(4, 3.0, np.float32), b, groups=2, eps=EPS)
  np.testing.assert_array_equal(y, np.broadcast_to(b, x.shape))


@pytest.mark.parametrize("groups", [3, 0, -2, 2.0, "2", True])
def test_group_norm_bad_groups_is_one_clear_error(groups):
  with pytest.raises(ValueError, match="groups=.* must be a positive integer that divides the 8"):
    N.group_norm(np.ones((2, 8), np.float32), groups=groups, eps=EPS)


def test_group_norm_bad_shapes_are_one_clear_error():
  with pytest.raises(ValueError, match="rank >= 2"):
    N.group_norm(np.ones(8, np.float32), groups=2, eps=EPS)
  with pytest.raises(ValueError, match=r"gain has shape \(4,\); expected \(8,\)"):
    N.group_norm(np.ones((2, 8), np.float32), np.ones(4), groups=2, eps=EPS)


# -- dyt and derf ----------------------------------------------------------------

_erf = np.vectorize(math.erf)


def np_dyt(x, alpha, g, b):
  """Zhu et al.: gamma * tanh(alpha x) + beta; (y, |gamma tanh| + |beta|)."""
  t = np.tanh(alpha * np.asarray(x, np.float64))
  g, b = np.asarray(g, np.float64), np.asarray(b, np.float64)
  return t * g + b, np.abs(t * g) + np.abs(b)


def np_derf(x, alpha, s, g, b):
  """Chen et al.: gamma * erf(alpha x + s) + beta, erf from the math library."""
  t = _erf(alpha * np.asarray(x, np.float64) + s)
  g, b = np.asarray(g, np.float64), np.asarray(b, np.float64)
  return t * g + b, np.abs(t * g) + np.abs(b)


POINTWISE = {
    "dyt": (lambda x, p, g, b: N.dyt(x, p[0], g, b), lambda x, p, g, b: np_dyt(x, p[0], g, b),
            lambda x, p, g, b: jnp.tanh(p[0] * x) * last(g, x) + last(b, x), (0.7,)),
    "derf": (lambda x, p, g, b: N.derf(x, p[0], p[1], g, b),
             lambda x, p, g, b: np_derf(x, p[0], p[1], g, b),
             lambda x, p, g, b: jax.scipy.special.erf(p[0] * x + p[1]) * last(g, x) + last(b, x),
             (0.7, -0.3)),
}


def test_initial_values_are_the_papers():
  assert N.DYT_ALPHA0 == 0.5
  assert (N.DERF_ALPHA0, N.DERF_SHIFT0) == (0.5, 0.0)
  assert N.scale_norm_g0(64) == 8.0
  assert N.scale_norm_g0(2) == math.sqrt(2)


@pytest.mark.parametrize("name", sorted(POINTWISE))
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 4, 16)])
def test_pointwise_matches_float64(name, shape):
  f, ref_f, _, p = POINTWISE[name]
  C = shape[-1]
  x = (RNG.normal(size=shape) * 3).astype(np.float32)
  g, b = RNG.normal(size=C).astype(np.float32), RNG.normal(size=C).astype(np.float32)
  p32 = tuple(np.float32(v) for v in p)
  y = jax.jit(f)(x, p32, g, b)
  assert y.dtype == jnp.float32 and y.shape == shape
  ref, _ = ref_f(x, tuple(np.float64(v) for v in p32), g, b)
  assert rel_err(y, ref) < tol32(1)
  # Without gain and bias: the bare function, bounded by 1.
  y = f(x, p32, None, None)
  assert rel_err(y, ref_f(x, p32, 1.0, 0.0)[0]) < tol32(1)
  assert np.abs(np.asarray(y)).max() <= 1.0


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise_gradients_match_naive_float64(name):
  f, _, naive, p = POINTWISE[name]
  x = RNG.normal(size=(4, 6)) * 2
  g, b, ct = RNG.normal(size=6), RNG.normal(size=6), RNG.normal(size=(4, 6))
  with jax.enable_x64(True):
    p64 = tuple(jnp.float64(v) for v in p)
    loss = lambda h: lambda x, p, g, b: jnp.sum(h(x, p, g, b) * ct)
    ours = jax.grad(loss(f), argnums=(0, 1, 2, 3))(x, p64, g, b)
    ref = jax.grad(loss(naive), argnums=(0, 1, 2, 3))(x, p64, g, b)
    for o, r in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
      assert o.dtype == jnp.float64
      np.testing.assert_allclose(o, r, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(POINTWISE))
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_pointwise_half_inputs_rounded_once(name, dtype):
  f, ref_f, _, p = POINTWISE[name]
  x = jnp.asarray(RNG.normal(size=(16, 64)) * 3, dtype)
  g = jnp.asarray(RNG.normal(1, 0.5, 64), jnp.float32)
  b = jnp.asarray(RNG.normal(0, 0.5, 64), jnp.float32)
  p32 = tuple(np.float32(v) for v in p)
  y = jax.jit(f)(x, p32, g, b)
  assert y.dtype == dtype
  ref, terms = ref_f(np.asarray(x.astype(jnp.float32)), tuple(np.float64(v) for v in p32), g, b)
  assert_rounded_once(y, ref, terms, dtype, 1)


def test_pointwise_parameters_are_checked():
  x = np.ones((2, 4), np.float32)
  with pytest.raises(ValueError, match=r"alpha must be a scalar .*shape \(4,\)"):
    N.dyt(x, np.ones(4))
  with pytest.raises(ValueError, match=r"shift must be a scalar"):
    N.derf(x, 0.5, np.zeros(2))
  with pytest.raises(ValueError, match=r"gain has shape \(3,\); expected \(4,\)"):
    N.dyt(x, 0.5, np.ones(3))
  # shape (1,) is a scalar, as PyTorch modules store it.
  np.testing.assert_array_equal(N.dyt(x, np.full(1, 0.5)), N.dyt(x, 0.5))


# -- scale_norm --------------------------------------------------------------------

def np_scale_norm(x, g, eps):
  """Nguyen & Salazar: g x / ||x||, the L2 norm over the last axis floored at eps."""
  x = np.asarray(x, np.float64)
  n = np.sqrt((x ** 2).sum(-1, keepdims=True))
  y = g * x / np.maximum(n, eps)
  return y, np.abs(y)


def naive_scale_norm(x, g, eps):
  return g * x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 300), (4, 4096)])
def test_scale_norm_matches_float64(shape):
  x = (RNG.normal(size=shape) * 3 + 1).astype(np.float32)
  g0 = N.scale_norm_g0(shape[-1])
  assert g0 == math.sqrt(shape[-1])
  g = np.float32(g0)
  y = jax.jit(N.scale_norm, static_argnames="eps")(x, g, eps=EPS)
  assert y.dtype == jnp.float32 and y.shape == shape
  assert rel_err(y, np_scale_norm(x, np.float64(g), EPS)[0]) < tol32(shape[-1])
  # At the initial g every row has unit RMS.
  rms = np.sqrt((np.asarray(y, np.float64) ** 2).mean(-1))
  np.testing.assert_allclose(rms, 1.0, rtol=tol32(shape[-1]))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("mean,d", [(0.0, 64), (100.0, 4096)])
def test_scale_norm_half_inputs_have_float32_statistics(dtype, mean, d):
  # 4096 values of ~100: sum(x^2) ~ 4e7 overflows float16.
  x = jnp.asarray(RNG.normal(mean, 1.0, (8, d)), dtype)
  y = jax.jit(N.scale_norm, static_argnames="eps")(x, 1.7, eps=EPS)
  assert y.dtype == dtype
  ref, terms = np_scale_norm(np.asarray(x.astype(jnp.float32)), np.float64(np.float32(1.7)), EPS)
  assert_rounded_once(y, ref, terms, dtype, d)


def test_scale_norm_gradients_match_naive_float64():
  x = RNG.normal(size=(4, 9)) + 0.3
  ct = RNG.normal(size=(4, 9))
  with jax.enable_x64(True):
    loss = lambda h: lambda x, g: jnp.sum(h(x, g) * ct)
    ours = jax.grad(loss(lambda x, g: N.scale_norm(x, g, eps=EPS)), argnums=(0, 1))(x, 3.0)
    ref = jax.grad(loss(lambda x, g: naive_scale_norm(x, g, EPS)), argnums=(0, 1))(x, 3.0)
    for o, r in zip(ours, ref):
      assert o.dtype == jnp.float64
      np.testing.assert_allclose(o, r, rtol=1e-12, atol=1e-14)


def test_scale_norm_invariant_to_scaling_the_input():
  x = RNG.normal(size=(6, 50)).astype(np.float32)
  y = N.scale_norm(x, 2.0, eps=EPS)
  for c in (1e-3, 7.0, 1e4):
    # c x is exact for a power of two only; otherwise one more rounding of x.
    assert rel_err(N.scale_norm(np.float32(c) * x, 2.0, eps=EPS), y) < 2 * tol32(50)
  # Below eps the floor takes over: g x / eps, and zero rows stay zero and finite.
  tiny = np.full((1, 4), 1e-8, np.float32)
  np.testing.assert_allclose(N.scale_norm(tiny, 2.0, eps=EPS), 2.0 * tiny / EPS, rtol=tol32(4))
  z = np.zeros((2, 4), np.float32)
  assert (np.asarray(N.scale_norm(z, 2.0, eps=EPS)) == 0).all()
  gz = jax.grad(lambda x: jnp.sum(N.scale_norm(x, 2.0, eps=EPS)))(z)
  assert np.isfinite(np.asarray(gz)).all()


def test_scale_norm_g_must_be_a_scalar():
  with pytest.raises(ValueError, match=r"g must be a scalar"):
    N.scale_norm(np.ones((2, 4), np.float32), np.ones(4), eps=EPS)
