"""rms_norm's primitives and native CPU kernels: every transform, both paths.

The references are float64 NumPy (the forward) and autodiff of a naive
float64 RMS norm (the derivatives), written from the definition
y = gain * x / sqrt(mean(x^2) + eps) + bias. The ``impl`` fixture
(conftest.py) runs a test on the native kernels and on XLA alone: it holds
``fused_layer_norm._native_ok``, which decides for both norms.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from lnorm import fused_rms_norm as R
from lnorm import native
from lnorm import normalization as N
from tests.references import rel_err
from tests.run_records import REPO

RNG = np.random.default_rng(7)
EPS = 1e-5


def naive_rms_norm(x, g, b, axes=(-1,), eps=EPS):
  """The textbook RMS norm over ``axes``, in jnp: autodiff of it on float64
  inputs (under ``jax.enable_x64``) is the gradient reference."""
  ax = tuple(a % x.ndim for a in axes)
  shape = tuple(n if i in ax else 1 for i, n in enumerate(x.shape))
  p = lambda v: jnp.reshape(v, shape)
  return x / jnp.sqrt(jnp.mean(x * x, ax, keepdims=True) + eps) * p(g) + p(b)


def np_rms_norm(x, g, b, axes=(-1,), eps=EPS):
  x = np.asarray(x, np.float64)
  ax = tuple(a % x.ndim for a in axes)
  shape = tuple(n if i in ax else 1 for i, n in enumerate(x.shape))
  ms = (x * x).mean(ax, keepdims=True)
  return (x / np.sqrt(ms + eps) * np.asarray(g, np.float64).reshape(shape)
          + np.asarray(b, np.float64).reshape(shape))


def data(shape, mean=0.5, spread=2.0, axes=(-1,)):
  """float32 (x, gain, bias, dy); gain and bias of the shape of ``axes``."""
  fshape = tuple(shape[a] for a in axes)
  x, dy = mean + spread * RNG.normal(size=shape), RNG.normal(size=shape)
  g, b = 1 + 0.3 * RNG.normal(size=fshape), 0.3 * RNG.normal(size=fshape)
  return tuple(a.astype(np.float32) for a in (x, g, b, dy))


def grads64(x, g, b, dy, axes=(-1,)):
  """Gradients of sum(rms_norm(x, g, b) * dy) by autodiff of the float64
  naive version."""
  with jax.enable_x64(True):
    f = lambda x, g, b: jnp.sum(naive_rms_norm(x, g, b, axes) * dy.astype(np.float64))
    return [np.asarray(a) for a in jax.jit(jax.grad(f, argnums=(0, 1, 2)))(
        *(np.asarray(a, np.float64) for a in (x, g, b)))]


def hlo(f, *args):
  return jax.jit(f).lower(*args).as_text()


def loss_grads(f, x, g, b, dy):
  return jax.jit(jax.grad(lambda x, g, b: jnp.sum(f(x, g, b) * dy),
                          argnums=(0, 1, 2)))(x, g, b)


def y_and_grads(f):
  """A training step's pass through f: [y, dx, dgain, dbias] for a
  cotangent dy, jitted."""
  def step(x, g, b, dy):
    y, vjp = jax.vjp(f, x, g, b)
    return [y, *vjp(dy)]
  return jax.jit(step)


def test_native_kernels_serve_float32_trailing_axes_on_cpu():
  if not native.load():
    pytest.skip("native kernels unavailable")
  x, g, b, dy = data((8, 400))
  assert "lnorm_rms_norm_fwd" in hlo(lambda x: N.rms_norm(x, g, b), x)
  assert "lnorm_rms_norm_bwd" in hlo(
      jax.grad(lambda x, g, b: jnp.sum(N.rms_norm(x, g, b) * dy), argnums=(0, 1, 2)), x, g, b)
  assert "lnorm_rms_norm_fwd" in hlo(lambda x: N.rms_norm(x, axis=(1, 2)),
                                     x.reshape(2, 4, 400))
  # A batch of x alone (vmap) is more rows for the same kernel.
  assert "lnorm_rms_norm_fwd" in hlo(jax.vmap(lambda x: N.rms_norm(x, g, b)),
                                     x.reshape(2, 4, 400))
  # The XLA version everywhere else.
  assert "custom_call" not in hlo(lambda x: N.rms_norm(x, axis=0), x)
  assert "custom_call" not in hlo(N.rms_norm, x.astype(jnp.bfloat16))
  assert "custom_call" not in hlo(N.rms_norm, x.astype(jnp.float16))
  assert "custom_call" not in hlo(
      lambda x: R.normalize(x, g, b, axes=(1,), eps=EPS, native=False), x)


# One row chunk; rows of lengths that are not multiples of the kernels' 8-,
# 32- and 512-element steps; one feature; several chunks (the thread pool);
# more than kFlushRows rows per chunk.
SHAPES = [(8, 400), (5, 37), (3, 1), (4, 1000 + 13), (300, 1000), (2000, 72), (2000, 150)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_gradients_match_float64(shape, impl):
  x, g, b, dy = data(shape)
  assert rel_err(jax.jit(N.rms_norm)(x, g, b), np_rms_norm(x, g, b)) < 1e-6
  ours = loss_grads(N.rms_norm, x, g, b, dy)
  refs = grads64(x, g, b, dy)
  for o, r in zip(ours, refs):
    assert o.dtype == np.float32
  # dx = rrms (g dy - x_hat mean(x_hat g dy)) cancels to ~eps / mean(x^2) of
  # its terms at one feature (x_hat^2 = 1 - eps / (x^2 + eps)): no float32
  # arithmetic gets such a dx to relative accuracy, so its error is measured
  # against its terms there.
  terms = np.abs(dy * g) / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True))
  assert np.abs(ours[0] - refs[0]).max() / max(np.abs(refs[0]).max(), terms.max()) < 2e-6
  for o, r in zip(ours[1:], refs[1:]):
    assert rel_err(o, r) < 2e-6
  # No gain and bias: ones and zeros.
  ones = np.ones(shape[-1], np.float32)
  assert rel_err(jax.jit(N.rms_norm)(x), np_rms_norm(x, ones, 0 * ones)) < 1e-6


@pytest.mark.parametrize("shape", [(8, 400), (5, 37), (300, 1000), (2000, 72)])
def test_native_and_xla_versions_agree(shape):
  if not native.load():
    pytest.skip("native kernels unavailable")
  x, g, b, dy = data(shape)
  native_, xla = (y_and_grads(lambda x, g, b, n=n: R.normalize(
      x, g, b, axes=(1,), eps=EPS, native=n)) for n in (True, False))
  assert "lnorm_rms_norm_bwd" in native_.lower(x, g, b, dy).as_text()
  assert "custom_call" not in xla.lower(x, g, b, dy).as_text()
  got, want = native_(x, g, b, dy), xla(x, g, b, dy)
  for a, w in zip(got, want):
    assert rel_err(a, w) < 1e-6
  # Both run in float32 and round differently: not bit for bit alike, but
  # each within a few ulps of the other and of float64.
  np.testing.assert_allclose(got[0], want[0], rtol=0, atol=4e-7 * np.abs(want[0]).max())


@pytest.mark.parametrize("mean,spread", [(1e4, 0.1), (-3e5, 1.0), (1e4, 100.0)])
def test_rows_far_from_zero(mean, spread, impl):
  # The sum of squares does not cancel: rows whose mean dwarfs their spread
  # keep float32 accuracy (x_hat ~ sign(mean), the spread in its low digits).
  x, g, b, dy = data((64, 1000), mean, spread)
  x[::3, 0] += 50 * spread  # outlier first elements, as for the layer-norm kernel
  assert rel_err(jax.jit(N.rms_norm)(x, g, b), np_rms_norm(x, g, b)) < 1e-6
  for o, r in zip(loss_grads(N.rms_norm, x, g, b, dy), grads64(x, g, b, dy)):
    assert rel_err(o, r) < 1e-5


def test_long_rows_match_float64(impl):
  # 2^20 features in U(0, 1): float32 accumulators over a whole row would be
  # off by ~1e-5; the kernel's float lanes move into double every 16 terms.
  x, g, b, dy = data((2, 1 << 20))
  x = RNG.random(x.shape).astype(np.float32)
  refs = [np_rms_norm(x, g, b), *grads64(x, g, b, dy)]
  for o, r in zip(y_and_grads(N.rms_norm)(x, g, b, dy), refs):
    assert rel_err(o, r) < 1e-6


@pytest.mark.parametrize("axes", [(1, 2), (0, 2), (0,), (1,)])
def test_several_and_leading_axes(axes, impl):
  # (1, 2) is trailing (native); (0, 2), (0,), (1,) take the XLA version.
  x, g, b, dy = data((6, 5, 24), axes=axes)
  f = lambda x, g, b: N.rms_norm(x, g, b, axis=axes)
  assert rel_err(jax.jit(f)(x, g, b), np_rms_norm(x, g, b, axes)) < 1e-6
  for o, r in zip(loss_grads(f, x, g, b, dy), grads64(x, g, b, dy, axes)):
    assert o.shape == r.shape and rel_err(o, r) < 2e-6


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_half_precision_inputs_take_float32_statistics(dtype):
  # Rows of ~300: x^2 ~ 1e5 overflows float16 (max 65504), and a bfloat16
  # sum of squares stalls; float32 statistics give the float64 norm of the
  # rounded inputs, rounded once to the input dtype.
  x, g, b, dy = data((16, 512), mean=300.0, spread=30.0)
  xh = x.astype(dtype)
  y = jax.jit(N.rms_norm)(xh, g, b)
  assert y.dtype == dtype
  ref = np_rms_norm(xh, g, b)
  ulp = np.finfo(dtype).eps  # relative spacing above 1
  terms = np.abs(ref) + 2 * np.abs(b)
  assert (np.abs(np.asarray(y, np.float64) - ref) <= ulp * np.maximum(terms, 1 / 64)).all()
  # Gradients: in the input's dtype for x, float32 for the (float32) gain
  # and bias; float32 arithmetic inside, one rounding at the end.
  ours = loss_grads(N.rms_norm, xh, g, b, dy)
  assert [o.dtype for o in ours] == [dtype, np.float32, np.float32]
  for o, r in zip(ours, grads64(xh, g, b, dy)):
    assert rel_err(o, r) < 2 * ulp
  # The check fails for statistics in the input's dtype.
  xs = jnp.asarray(xh)
  naive = xs / jnp.sqrt(jnp.mean(xs * xs, -1, keepdims=True) + jnp.asarray(EPS, dtype))
  naive = naive * g.astype(dtype)[None] + b.astype(dtype)[None]
  assert not (np.abs(np.asarray(naive, np.float64) - ref) <= ulp * np.maximum(terms, 1 / 64)).all()


def test_float64_gain_beside_float32_input_takes_the_xla_version():
  # With x64 on, a float64 gain and bias beside a float32 x must not reach
  # the float32 kernels, in any pass: the XLA version runs, in the promoted
  # dtype, and each result keeps its argument's dtype.
  x, g, b, dy = data((8, 400))
  with jax.enable_x64(True):
    g64, b64 = g.astype(np.float64), b.astype(np.float64)
    f = lambda x, g, b: R.normalize(x, g, b, axes=(1,), eps=EPS)
    vjp = lambda x, g, b: jax.vjp(f, x, g, b)[1](dy)
    jvp = lambda x, g, b: jax.jvp(f, (x, g, b), (x, g, b))[1]
    outs = {}
    for name, fn in [("y", f), ("vjp", vjp), ("jvp", jvp)]:
      assert "custom_call" not in hlo(fn, x, g64, b64), name
      outs[name] = jax.jit(fn)(x, g64, b64)
    # rms_norm itself casts the gain to x's stat dtype, float32: native.
    if native.load():
      assert "lnorm_rms_norm_fwd" in hlo(lambda x, g: N.rms_norm(x, g), x, g64)
    ref = np_rms_norm(x, g64, b64)
  # f is linear in (gain, bias), and x_hat(c x) = c x rrms(c x): along
  # (x, g, b) the derivative is y + g x_hat eps / (mean(x^2) + eps).
  ms = (x.astype(np.float64) ** 2).mean(1, keepdims=True)
  jvp_ref = ref + g64 * x / np.sqrt(ms + EPS) * EPS / (ms + EPS)
  dtypes = [a.dtype for a in (outs["y"], outs["jvp"], *outs["vjp"])]
  assert dtypes == [np.float32] * 3 + [np.float64] * 2
  assert rel_err(outs["y"], ref) < 1e-6
  assert rel_err(outs["jvp"], jvp_ref) < 1e-6
  for got, want in zip(outs["vjp"], grads64(x, g, b, dy)):
    assert rel_err(got, want) < 2e-6


def test_float64_inputs_compute_in_float64():
  x, g, b, dy = (a.astype(np.float64) for a in data((6, 50)))
  with jax.enable_x64(True):
    y = jax.jit(N.rms_norm)(x, g, b)
    assert y.dtype == np.float64 and "custom_call" not in hlo(N.rms_norm, x, g, b)
    ours = loss_grads(N.rms_norm, x, g, b, dy)
  assert rel_err(y, np_rms_norm(x, g, b)) < 1e-13
  for o, r in zip(ours, grads64(x, g, b, dy)):
    assert o.dtype == np.float64 and rel_err(o, r) < 1e-12


@pytest.mark.slow
def test_forward_mode_and_second_order_match_float64(impl):
  x, g, b, _ = data((6, 50))
  t = RNG.normal(size=x.shape).astype(np.float32)
  hvp = lambda f, x: jax.jvp(jax.grad(lambda x: jnp.sum(jnp.sin(f(x)))), (x,),
                             (t.astype(x.dtype),))[1]
  f32 = lambda x: N.rms_norm(x, g, b)
  jo = jax.jvp(f32, (x,), (t,))[1]
  ho = hvp(f32, x)
  # Reverse over reverse: the gradient, in the gain, of a gradient norm.
  gg = lambda f, x, g_: jax.grad(lambda g_: jnp.sum(jax.grad(
      lambda x: jnp.sum(jnp.sin(f(x, g_))))(x) ** 2))(g_)
  go = gg(lambda x, g_: N.rms_norm(x, g_, b), x, g)
  # Forward over reverse in all three arguments at once.
  tg, tb = RNG.normal(size=g.shape).astype(np.float32), RNG.normal(size=b.shape).astype(np.float32)
  loss = lambda f: lambda x, g, b: jnp.sum(jnp.sin(f(x, g, b)))
  fo = jax.jvp(jax.grad(loss(N.rms_norm), argnums=(0, 1, 2)), (x, g, b), (t, tg, tb))[1]
  with jax.enable_x64(True):
    x64, g64, b64, t64 = (a.astype(np.float64) for a in (x, g, b, t))
    f64 = lambda x: naive_rms_norm(x, g64, b64)
    jr = jax.jvp(f64, (x64,), (t64,))[1]
    hr = hvp(f64, x64)
    gr = gg(lambda x, g_: naive_rms_norm(x, g_, b64), x64, g64)
    fr = jax.jvp(jax.grad(loss(naive_rms_norm), argnums=(0, 1, 2)), (x64, g64, b64),
                 (t64, tg.astype(np.float64), tb.astype(np.float64)))[1]
  assert rel_err(jo, jr) < 1e-5
  assert rel_err(ho, hr) < 1e-4
  assert rel_err(go, gr) < 1e-4
  for o, r in zip(fo, fr):
    assert rel_err(o, r) < 1e-4


def test_vmap_over_inputs_and_over_gains(impl):
  x, g, b, dy = data((4, 6, 40))
  gs = np.stack([g, 2 * g, -g, g + 1])
  per_x = jax.jit(jax.vmap(lambda x: N.rms_norm(x, g, b)))(x)
  per_g = jax.jit(jax.vmap(lambda x, g: N.rms_norm(x, g, b)))(x, gs)
  for i in range(4):
    assert rel_err(per_x[i], np_rms_norm(x[i], g, b)) < 1e-6
    assert rel_err(per_g[i], np_rms_norm(x[i], gs[i], b)) < 1e-6
  # Per-example gradients: batched cotangents through the backward.
  loss = lambda x, g: jnp.sum(N.rms_norm(x, g, b) * dy[0])
  per_ex = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(0, None)))(x, g)
  for i in range(4):
    for a, r in zip(per_ex, grads64(x[i], g, b, dy[0])):
      assert rel_err(a[i], r) < 2e-6
  # A row's Jacobian, by vmapped forward and by vmapped reverse mode, against
  # diag(g) rrms (I - x_hat x_hat^T / n).
  row = x[0, 0].astype(np.float64)
  rrms = 1 / np.sqrt((row ** 2).mean() + EPS)
  x_hat = row * rrms
  want = g[:, None] * rrms * (np.eye(row.size) - np.outer(x_hat, x_hat) / row.size)
  f = lambda r: N.rms_norm(r, g, b)
  for jac in (jax.jacfwd(f), jax.jacrev(f)):
    assert rel_err(jax.jit(jac)(x[0, 0]), want) < 1e-6


def test_zero_rows_give_the_bias_and_finite_gradients(impl):
  x, g, b, dy = data((4, 33))
  x[1] = 0.0
  y = jax.jit(N.rms_norm)(x, g, b)
  np.testing.assert_array_equal(y[1], b)
  assert all(np.isfinite(a).all() for a in loss_grads(N.rms_norm, x, g, b, dy))


def test_eager_and_jit_agree(impl):
  x, g, b, _ = data((8, 40))
  np.testing.assert_array_equal(N.rms_norm(x, g, b), jax.jit(N.rms_norm)(x, g, b))


def _dispatch_worker() -> dict:
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top

  mesh = jax.sharding.Mesh(jax.devices(), ("data",))
  split, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  x = jax.random.normal(jax.random.key(0), (64, 48)) * 2 + 1
  g = jnp.linspace(0.5, 1.5, 48)
  fn = jax.grad(lambda x, g: jnp.sum(jnp.sin(N.rms_norm(x, g))), argnums=(0, 1))
  one, eight = jax.jit(fn), jax.jit(fn, in_shardings=(split, whole))
  hlo1, hlo8 = (f.lower(x, g).compile().as_text() for f in (one, eight))
  diff = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a)))
             for a, b in zip(one(x, g), eight(x, g)))
  return {"native": native.load(), "custom_1": hlo1.count('custom_call_target="lnorm_rms'),
          "custom_8": hlo8.count('custom_call_target="lnorm_'),
          "gathers_8": hlo8.count("all-gather"), "rel_diff": diff}


@pytest.mark.slow
def test_a_split_batch_stays_split_and_computes_the_same():
  env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  r = subprocess.run([sys.executable, "-m", "tests.test_rms_native"], cwd=REPO, env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  r = json.loads(r.stdout.strip().splitlines()[-1])
  assert r["gathers_8"] == 0 and r["rel_diff"] < 1e-5
  if r["native"]:  # the kernels run on one device and on each device's rows of the split
    assert r["custom_1"] > 0 and r["custom_8"] > 0


if __name__ == "__main__":
  print(json.dumps(_dispatch_worker()))
