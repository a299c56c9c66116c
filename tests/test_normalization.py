"""The primitives against float64 numpy references, naive float64 autodiff and flax."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import fused_layer_norm as F
from lnorm import normalization as N
from tests.references import naive_layer_norm, rel_err

RNG = np.random.default_rng(0)


def np_layer_norm(x, g, b, axes, eps):
  x = np.asarray(x, np.float64)
  m = x.mean(axes, keepdims=True)
  v = ((x - m) ** 2).mean(axes, keepdims=True)
  return (x - m) / np.sqrt(v + eps) * g + b


def bshape(shape, axes):
  return tuple(s if i in axes else 1 for i, s in enumerate(shape))


TOL = {jnp.float32: 1e-5, jnp.float16: 2e-3, jnp.bfloat16: 1.6e-2}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("shape,axis", [((5, 7), -1), ((3, 4, 6), (1, 2)),
                                        ((2, 3, 33), 2), ((64, 1000), -1)])
def test_layer_norm_matches_float64(dtype, shape, axis, impl):
  axes = N._axes(axis, len(shape))
  fshape = tuple(shape[a] for a in axes)
  x = (RNG.normal(size=shape) * 3 + 1).astype(np.float32)
  g, b = RNG.normal(size=fshape), RNG.normal(size=fshape)
  xd = jnp.asarray(x, dtype)
  y = jax.jit(N.layer_norm, static_argnames="axis")(
      xd, jnp.asarray(g, jnp.float32), jnp.asarray(b, jnp.float32), axis=axis)
  assert y.dtype == dtype and y.shape == shape
  ref = np_layer_norm(np.asarray(xd.astype(jnp.float32)),
                      g.reshape(bshape(shape, axes)), b.reshape(bshape(shape, axes)),
                      axes, 1e-5)
  assert rel_err(y, ref) < TOL[dtype]


def test_layer_norm_statistics_in_float32_for_half_inputs():
  # float16 cannot hold sum(x^2) for 4096 values of 100: the statistics must
  # not be computed in the input dtype.
  x = jnp.asarray(RNG.normal(100, 1, (2, 4096)), jnp.float16)
  y = N.layer_norm(x)
  ref = np_layer_norm(np.asarray(x, np.float32), 1, 0, (1,), 1e-5)
  assert np.isfinite(np.asarray(y, np.float32)).all()
  assert rel_err(y, ref) < 2e-3


@pytest.mark.parametrize("mean", [1e4, -3e5])
def test_layer_norm_accurate_far_from_zero(mean, impl):
  x = (mean + RNG.normal(0, 0.1, (128, 1000))).astype(np.float32)
  ref = np_layer_norm(x, 1, 0, (1,), 1e-5)
  assert rel_err(jax.jit(N.layer_norm)(x), ref) < 1e-4
  # The reference that fails here: a float32 two-pass that rounds the mean.
  m = nn.LayerNorm(epsilon=1e-5, use_fast_variance=False)
  flax_y = m.apply(m.init(jax.random.key(0), x), x)
  assert rel_err(flax_y, ref) > 1e-3


def test_layer_norm_outlier_first_element(impl):
  # The shift K is the first element; an outlier there must not hurt.
  x = RNG.normal(1e4, 0.1, (16, 512)).astype(np.float32)
  x[:, 0] += 5.0
  ref = np_layer_norm(x, 1, 0, (1,), 1e-5)
  assert rel_err(N.layer_norm(x), ref) < 1e-4


@pytest.mark.parametrize("ratio", [1.0, 30.0, 40.0, 1e3, 1e8])
def test_layer_norm_cpu_fast_path_keeps_the_error_bound(ratio, impl):
  # Row 5 has mean(x^2) / var = ratio, the others 1. The CPU fast path (no
  # shift) may serve ratios up to 33 only; one row beyond that sends the whole
  # array down the shifted path.
  x = RNG.normal(0, 1, (64, 1000))
  x = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
  x[5] += np.sqrt(ratio - 1)
  x = x.astype(np.float32)
  assert rel_err(jax.jit(N.layer_norm)(x), np_layer_norm(x, 1, 0, (1,), 1e-5)) < 1e-5
  cpu, shifted = (jax.jit(f, static_argnums=(1, 2))(jnp.asarray(x), (1,), 1e-5)
                  for f in (F._moments_cpu, F._shifted_moments))
  took_fast_path = bool(np.all(np.asarray(cpu[0]) == 0))  # cpu[0]: the shift
  assert took_fast_path == (ratio <= 33)
  np.testing.assert_allclose(np.asarray(cpu[2]), np.asarray(shifted[2]), rtol=1e-5)


def test_layer_norm_matches_flax(impl):
  x = RNG.normal(size=(8, 40)).astype(np.float32)
  m = nn.LayerNorm(epsilon=1e-5)
  p = m.init(jax.random.key(0), x)
  p = jax.tree.map(lambda a: a + jnp.asarray(RNG.normal(size=a.shape), a.dtype), p)
  ref = m.apply(p, x)
  ours = N.layer_norm(x, p["params"]["scale"], p["params"]["bias"])
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_constant_rows_are_finite(impl):
  x = jnp.full((3, 10), 7.0)
  g, b = jnp.arange(10.0), jnp.arange(10.0) - 5
  for y in (N.layer_norm(x, g, b), N.rms_norm(jnp.zeros((3, 10)), g, b),
            N.batch_norm(x, g, b)[0]):
    np.testing.assert_allclose(y, jnp.broadcast_to(b, (3, 10)), atol=1e-6)
  grad = jax.grad(lambda x: N.layer_norm(x, g, b).sum())(x)
  assert np.isfinite(grad).all()
  assert np.isfinite(N.weight_norm(jnp.zeros((4, 3)), jnp.ones(3))).all()


@pytest.mark.parametrize("shape,axis", [((4, 9), -1), ((2, 3, 5), (1, 2))])
def test_layer_norm_gradients_match_naive_float64(shape, axis):
  axes = N._axes(axis, len(shape))
  fshape = tuple(shape[a] for a in axes)
  x = RNG.normal(size=shape) * 2 + 0.5
  g, b = RNG.normal(size=fshape), RNG.normal(size=fshape)
  ct = RNG.normal(size=shape)
  with jax.enable_x64(True):
    def loss(f):
      return lambda x, g, b: jnp.sum(f(x, g, b) * ct)
    ours = jax.grad(loss(lambda x, g, b: N.layer_norm(x, g, b, axis=axis)),
                    argnums=(0, 1, 2))(x, g, b)
    ref = jax.grad(loss(lambda x, g, b: naive_layer_norm(x, g, b, axes, 1e-5)),
                   argnums=(0, 1, 2))(x, g, b)
    for o, r in zip(ours, ref):
      assert o.dtype == jnp.float64
      np.testing.assert_allclose(o, r, rtol=1e-9, atol=1e-11)
    # Forward mode and second order, which an analytic JVP keeps.
    t = RNG.normal(size=shape)
    _, jo = jax.jvp(lambda x: N.layer_norm(x, axis=axis), (x,), (t,))
    _, jr = jax.jvp(lambda x: naive_layer_norm(x, 1, 0, axes, 1e-5), (x,), (t,))
    np.testing.assert_allclose(jo, jr, rtol=1e-9, atol=1e-11)
    h = lambda f: jax.grad(lambda x: jnp.sum(jnp.sin(f(x))))
    np.testing.assert_allclose(
        jax.jvp(h(lambda x: N.layer_norm(x, axis=axis)), (x,), (t,))[1],
        jax.jvp(h(lambda x: naive_layer_norm(x, 1, 0, axes, 1e-5)), (x,), (t,))[1],
        rtol=1e-8, atol=1e-10)


def test_layer_norm_float32_gradient_close_to_float64(impl):
  x = RNG.normal(size=(16, 300)).astype(np.float32)
  ct = RNG.normal(size=(16, 300))
  g32 = jax.grad(lambda x: jnp.sum(N.layer_norm(x) * ct.astype(np.float32)))(x)
  with jax.enable_x64(True):
    g64 = jax.grad(lambda x: jnp.sum(naive_layer_norm(x, 1, 0, (1,), 1e-5) * ct))(
        x.astype(np.float64))
  assert rel_err(g32, np.asarray(g64)) < 1e-4


def test_vmap_and_jit(impl):
  x = RNG.normal(size=(3, 4, 6)).astype(np.float32)
  per_example = jax.vmap(N.layer_norm)(x)
  np.testing.assert_allclose(jax.jit(N.layer_norm)(x), per_example, atol=1e-6)
  np.testing.assert_allclose(per_example, np_layer_norm(x, 1, 0, (2,), 1e-5), atol=1e-5)


def test_rms_norm_matches_float64_and_gradients():
  x = RNG.normal(2, 3, size=(6, 20))
  g, b = RNG.normal(size=20), RNG.normal(size=20)
  ref = x / np.sqrt((x ** 2).mean(1, keepdims=True) + 1e-5) * g + b
  y = N.rms_norm(x.astype(np.float32), g, b)
  assert rel_err(y, ref) < 1e-5
  assert N.rms_norm(x.astype(jnp.bfloat16)).dtype == jnp.bfloat16
  with jax.enable_x64(True):
    naive = lambda x: jnp.sum(jnp.tanh(x / jnp.sqrt(jnp.mean(x ** 2, 1, keepdims=True) + 1e-5)))
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(jnp.tanh(N.rms_norm(x))))(x),
                               jax.grad(naive)(x), rtol=1e-10)


def np_batch_norm(x, g, b, axes, eps, unbiased):
  m = x.mean(axes, keepdims=True)
  v = x.var(axes, keepdims=True, ddof=1 if unbiased else 0)
  return (x - m) / np.sqrt(v + eps) * g + b, m, v


@pytest.mark.parametrize("unbiased", [False, True])
def test_batch_norm_training_matches_float64(unbiased):
  x = RNG.normal(5, 2, size=(4, 3, 7))
  g, b = RNG.normal(size=7), RNG.normal(size=7)
  ref, m, v = np_batch_norm(x, g.reshape(1, 1, 7), b.reshape(1, 1, 7), (0, 1), 1e-5,
                            unbiased)
  y, (mean, var) = N.batch_norm(x.astype(np.float32), g, b, axis=(0, 1),
                                unbiased=unbiased)
  assert rel_err(y, ref) < 1e-5
  np.testing.assert_allclose(mean, m, rtol=1e-5)
  np.testing.assert_allclose(var, v, rtol=1e-5)


def test_batch_norm_unbiased_at_batch_four_differs():
  x = RNG.normal(size=(4, 5)).astype(np.float32)
  y_b, (_, vb) = N.batch_norm(x)
  y_u, (_, vu) = N.batch_norm(x, unbiased=True)
  np.testing.assert_allclose(vu, vb * 4 / 3, rtol=1e-6)
  assert not np.allclose(y_b, y_u)
  with pytest.raises(ValueError, match="at least 2"):
    N.batch_norm(x[:1], unbiased=True)


def test_batch_norm_evaluation_uses_given_statistics():
  x = RNG.normal(size=(6, 4)).astype(np.float32)
  mean, var = RNG.normal(size=4), RNG.uniform(0.5, 2, size=4)
  y, _ = N.batch_norm(x, mean=mean, var=var)
  np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="both"):
    N.batch_norm(x, mean=mean)


def test_batch_norm_far_from_zero_and_gradients():
  x = (1e4 + RNG.normal(0, 0.1, (256, 32))).astype(np.float32)
  ref, _, _ = np_batch_norm(x.astype(np.float64), 1, 0, (0,), 1e-5, False)
  assert rel_err(N.batch_norm(x)[0], ref) < 1e-4
  xs = RNG.normal(size=(5, 3))
  ct = RNG.normal(size=(5, 3))
  with jax.enable_x64(True):
    def naive(x):
      m = jnp.mean(x, 0, keepdims=True)
      return (x - m) / jnp.sqrt(jnp.var(x, 0, keepdims=True) * 5 / 4 + 1e-5)
    ours = jax.grad(lambda x: jnp.sum(N.batch_norm(x, unbiased=True)[0] * ct))(xs)
    np.testing.assert_allclose(ours, jax.grad(lambda x: jnp.sum(naive(x) * ct))(xs),
                               rtol=1e-9, atol=1e-12)


def test_batch_norm_across_devices_equals_whole_batch():
  # vmap with an axis_name stands in for pmap: the collectives are the same.
  x = RNG.normal(size=(4, 8, 5)).astype(np.float32)        # 4 shards of 8
  f = jax.vmap(lambda s: N.batch_norm(s, unbiased=True, axis_name="d"), axis_name="d")
  y, (m, v) = f(x)
  y_all, (m_all, v_all) = N.batch_norm(x.reshape(32, 5), unbiased=True)
  np.testing.assert_allclose(y.reshape(32, 5), y_all, atol=2e-5)
  np.testing.assert_allclose(v[0], v_all, rtol=1e-5)


def test_weight_norm_matches_formula_and_gradient():
  w = RNG.normal(size=(6, 3))
  g = RNG.normal(size=3)
  ref = g * w / np.linalg.norm(w, axis=0, keepdims=True)
  np.testing.assert_allclose(N.weight_norm(w.astype(np.float32), g), ref, rtol=1e-5)
  assert N.weight_norm(w.astype(jnp.bfloat16), g).dtype == jnp.bfloat16
  np.testing.assert_allclose(N.weight_norm(3.7 * w, g), N.weight_norm(w, g), rtol=1e-5)
  with jax.enable_x64(True):
    naive = lambda w: jnp.sum(jnp.sin(g.reshape(1, 3) * w / jnp.linalg.norm(w, axis=0, keepdims=True)))
    np.testing.assert_allclose(
        jax.grad(lambda w: jnp.sum(jnp.sin(N.weight_norm(w, g))))(w),
        jax.grad(naive)(w), rtol=1e-9)


def test_bad_arguments_raise():
  x = jnp.ones((2, 3))
  with pytest.raises(ValueError, match="gain has shape"):
    N.layer_norm(x, jnp.ones(4))
  with pytest.raises(ValueError, match="axis=2 is not valid"):
    N.layer_norm(x, axis=2)
  with pytest.raises(ValueError, match=r"axis=\(1, -1\) is not valid"):
    N.rms_norm(x, axis=(1, -1))


FUNCTIONS = {
    "layer_norm": N.layer_norm, "rms_norm": N.rms_norm,
    "batch_norm": N.batch_norm, "weight_norm": N.weight_norm,
    "centered_moments": N.centered_moments}


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("axis", ["1", "last", 2, -3, 1.0, None, True, (),
                                  (0, "b"), (0, 2), [1, 1]])
def test_invalid_axis_is_a_value_error_that_says_what_is_valid(name, axis):
  with pytest.raises(ValueError) as e:
    FUNCTIONS[name](jnp.ones((2, 3)), axis=axis)
  assert str(e.value) == (
      f"axis={axis!r} is not valid for an input of rank 2: give an int in "
      "[-2, 2) or a non-empty sequence of distinct such ints")


@pytest.mark.parametrize("axis", [1, -1, np.int64(1), (1,), [-1], np.array([1])])
def test_valid_axis_spellings_agree(axis):
  x = jnp.asarray(RNG.normal(size=(2, 3)), jnp.float32)
  np.testing.assert_array_equal(N.layer_norm(x, axis=axis), N.layer_norm(x))
