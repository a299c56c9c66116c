"""layer_norm's primitives and native CPU kernels: every transform, both paths.

The references are float64 NumPy (the forward) and autodiff of a naive
float64 layer norm (the derivatives), written from the paper's equations.
"""

import functools
import os
from pathlib import Path
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import fused_layer_norm as F
from lnorm import native
from lnorm import normalization as N
from tests.references import naive_layer_norm, rel_err
from tests.run_records import REPO

RNG = np.random.default_rng(1)
EPS = 1e-5


def data(shape, mean=0.5, spread=2.0):
  x = (mean + spread * RNG.normal(size=shape)).astype(np.float32)
  n = shape[-1]
  g = (1 + 0.3 * RNG.normal(size=n)).astype(np.float32)
  b = (0.3 * RNG.normal(size=n)).astype(np.float32)
  dy = RNG.normal(size=shape).astype(np.float32)
  return x, g, b, dy


def grads64(x, g, b, dy):
  with jax.enable_x64(True):
    f = lambda x, g, b: jnp.sum(
        naive_layer_norm(x, g, b) * dy.astype(np.float64))
    return [np.asarray(a) for a in jax.grad(f, argnums=(0, 1, 2))(
        *(a.astype(np.float64) for a in (x, g, b)))]


def hlo(f, *args):
  return jax.jit(f).lower(*args).as_text()


def test_native_kernels_serve_float32_trailing_axes_on_cpu():
  if not native.load():
    pytest.skip("native kernels unavailable")
  x, g, b, dy = data((8, 400))
  loss = lambda x, g, b: jnp.sum(N.layer_norm(x, g, b) * dy)
  assert "lnorm_layer_norm_fwd" in hlo(lambda x: N.layer_norm(x, g, b), x)
  assert "lnorm_layer_norm_bwd" in hlo(jax.grad(loss, argnums=(0, 1, 2)), x, g, b)
  x3 = x.reshape(2, 4, 400)
  assert "lnorm_layer_norm_fwd" in hlo(lambda x: N.layer_norm(x, axis=(1, 2)), x3)
  # The XLA version everywhere else.
  assert "custom_call" not in hlo(lambda x: N.layer_norm(x, axis=0), x)
  assert "custom_call" not in hlo(N.layer_norm, x.astype(jnp.bfloat16))
  assert "custom_call" not in hlo(
      lambda x: F.normalize(x, g, b, axes=(1,), eps=EPS, native=False), x)


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_the_backward_reads_the_statistics_the_forward_saved(norm):
  """A gradient runs the saving forward and the backward that reads its
  statistics; the saved statistics give x_hat to float32 rounding (float64
  reference), whichever lowering made them; the native backward reads them
  (changed statistics change dx) and the XLA version makes its own."""
  if not native.load():
    pytest.skip("native kernels unavailable")
  from lnorm import fused_rms_norm as R  # pylint: disable=import-outside-toplevel
  prims = F.LAYER_PRIMITIVES if norm == "layer" else R.RMS_PRIMITIVES
  x, g, b, dy = data((37, 300))
  x = x * 3 + (100 if norm == "layer" else 0)  # far from zero: the shift matters
  loss = lambda x, g, b: jnp.sum(prims.forward.bind(
      x, g, b, axes=(1,), eps=EPS, native=True) * dy)
  text = hlo(jax.grad(loss, argnums=(0, 1, 2)), x, g, b)
  assert f"lnorm_{norm}_norm_fwd_saving" in text and f"lnorm_{norm}_norm_bwd_saved" in text

  def saving(native_):
    return jax.jit(lambda x: prims.forward_saving.bind(
        x, g, b, axes=(1,), eps=EPS, native=native_))(x)

  x64 = np.asarray(x, np.float64)
  if norm == "layer":
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + EPS)
    x_hat = lambda s: (((x64 - s[:, :1]) - s[:, 1:2]) * s[:, 2:])
  else:
    ref = x64 / np.sqrt(np.mean(x64 ** 2, 1, keepdims=True) + EPS)
    x_hat = lambda s: x64 * s
  # x - shift, - mean_d and * rstd round once each; rstd carries the error of
  # float32 sums of n terms (at most n roundings, XLA's lowering) besides.
  n = x.shape[1]
  bound = (n + 16) * np.finfo(np.float32).eps * np.abs(ref).max()
  for native_ in (True, False):
    y, saved = saving(native_)
    assert saved.shape == (37, 3 if norm == "layer" else 1) and saved.dtype == jnp.float32
    np.testing.assert_allclose(x_hat(np.asarray(saved, np.float64)), ref, rtol=0, atol=bound)

  _, saved = saving(True)
  off = saved.at[:, -1].multiply(2.0)  # rstd (rrms) doubled
  back = lambda saved, native_: jax.jit(lambda s: prims.backward.bind(
      x, s, g, dy, axes=(1,), eps=EPS, native=native_))(saved)
  dx, dx_off = back(saved, True)[0], back(off, True)[0]
  assert not np.allclose(dx, dx_off)
  np.testing.assert_array_equal(back(saved, False)[0], back(off, False)[0])


def test_float64_gain_beside_float32_input_takes_the_xla_version():
  # With x64 on, a float64 gain and bias beside a float32 x once reached the
  # float32 kernel and failed inside XLA; they take the XLA version, in the
  # promoted dtype, and match float64 to float32 rounding.
  x, g, b, dy = data((8, 400))
  with jax.enable_x64(True):
    g64, b64 = g.astype(np.float64), b.astype(np.float64)
    f = lambda x, g, b: F.normalize(x, g, b, axes=(1,), eps=EPS)
    assert "custom_call" not in hlo(f, x, g64, b64)
    y = jax.jit(f)(x, g64, b64)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(f(*a) * dy), argnums=(0, 1, 2)))(x, g64, b64)
  assert y.dtype == np.float32 and [a.dtype for a in grads] == [np.float32, np.float64, np.float64]
  x64 = x.astype(np.float64)
  ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + EPS) * g64 + b64
  np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
  for got, want in zip(grads, grads64(x, g, b, dy)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# Shapes: one row chunk; rows of a length that is not a multiple of the
# kernels' 8- and 16-wide steps; several chunks (the thread pool); more
# than kFlushRows rows per chunk; and two chunks of blocks of 6 rows
# (kBlockElements // 150) that end short, with a flush inside a block.
SHAPES = [(8, 400), (5, 37), (3, 1), (300, 1000), (2000, 72), (2000, 150)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_gradients_match_float64(shape, impl):
  x, g, b, dy = data(shape)
  with jax.enable_x64(True):
    ref = np.asarray(
        naive_layer_norm(*(a.astype(np.float64) for a in (x, g, b))))
  assert rel_err(jax.jit(N.layer_norm)(x, g, b), ref) < 1e-5
  loss = lambda x, g, b: jnp.sum(N.layer_norm(x, g, b) * dy)
  ours = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(x, g, b)
  for o, r in zip(ours, grads64(x, g, b, dy)):
    assert o.dtype == np.float32
    assert rel_err(o, r) < 2e-5


@pytest.mark.parametrize("mean", [1e4, -3e5])
def test_rows_far_from_zero_with_outliers_first(mean, impl):
  # The native kernel's shift starts at each row's first element: make some
  # of them outliers, which must cost nothing in accuracy.
  x = (mean + RNG.normal(0, 0.1, (64, 1000))).astype(np.float32)
  x[::3, 0] += 50.0
  x[1::3, 0] -= 1e3
  ref = ((x.astype(np.float64) - x.mean(1, keepdims=True, dtype=np.float64))
         / np.sqrt(x.astype(np.float64).var(1, keepdims=True) + EPS))
  assert rel_err(jax.jit(N.layer_norm)(x), ref) < 1e-4
  dy = RNG.normal(size=x.shape).astype(np.float32)
  g = jax.jit(jax.grad(lambda x: jnp.sum(N.layer_norm(x) * dy)))(x)
  ones = np.ones(1000, np.float32)
  assert rel_err(g, grads64(x, ones, 0 * ones, dy)[0]) < 1e-3


# Rows far longer than any model's, in U(0, 1), and far from zero: a
# ConvNet layer's 28 x 28 x 32 units of 1e4 + N(0, 0.1), and 2^20 of them.
# Float32 accumulators over a whole row were off by ~1e-5 at 2^20 uniform
# elements and ~1e-4 far from zero; float rounding of y is ~2.4e-7 here.
LONG = [("uniform", 2, 1 << 20), ("far", 4, 28 * 28 * 32), ("far", 2, 1 << 20)]


@functools.cache
def long_case(kind, rows, n):
  """Inputs, and the float64 references: numpy's forward, and autodiff of the
  naive float64 layer norm (jitted: eager, it takes seconds at 2^20)."""
  rng = np.random.default_rng(n + rows)
  x = (rng.random((rows, n)) if kind == "uniform"
       else 1e4 + rng.normal(0, 0.1, (rows, n))).astype(np.float32)
  g = (1 + 0.3 * rng.normal(size=n)).astype(np.float32)
  b = (0.3 * rng.normal(size=n)).astype(np.float32)
  dy = rng.normal(size=(rows, n)).astype(np.float32)
  x64 = x.astype(np.float64)
  y_ref = ((x64 - x64.mean(1, keepdims=True))
           / np.sqrt(x64.var(1, keepdims=True) + EPS)) * g + b
  with jax.enable_x64(True):
    loss = lambda x, g, b, dy: jnp.sum(naive_layer_norm(x, g, b) * dy)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(
        *(a.astype(np.float64) for a in (x, g, b, dy)))
  return (x, g, b, dy), y_ref, [np.asarray(r) for r in grads]


@pytest.mark.parametrize("kind,rows,n", LONG)
def test_long_rows_match_float64(kind, rows, n, impl):
  (x, g, b, dy), y_ref, grads_ref = long_case(kind, rows, n)

  def step(x, g, b, dy):
    y, vjp = jax.vjp(N.layer_norm, x, g, b)
    return y, vjp(dy)

  y, grads = jax.jit(step)(x, g, b, dy)
  assert rel_err(y, y_ref) < 1e-6
  for o, r in zip(grads, grads_ref):
    assert rel_err(o, r) < 1e-6


@pytest.mark.slow
def test_forward_mode_and_second_order_match_float64(impl):
  x, g, b, _ = data((6, 50))
  t = RNG.normal(size=x.shape).astype(np.float32)
  f32 = lambda x: N.layer_norm(x, g, b)
  _, jo = jax.jvp(f32, (x,), (t,))
  hvp = lambda f, x: jax.jvp(jax.grad(lambda x: jnp.sum(jnp.sin(f(x)))), (x,),
                             (t.astype(x.dtype),))[1]
  ho = hvp(f32, x)
  with jax.enable_x64(True):
    f64 = lambda x: naive_layer_norm(x, g.astype(np.float64),
                                     b.astype(np.float64))
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    _, jr = jax.jvp(f64, (x64,), (t64,))
    hr = hvp(f64, x64)
  assert rel_err(jo, jr) < 1e-4
  assert rel_err(ho, hr) < 1e-3
  # Reverse over reverse: the gradient of a gradient norm.
  gg = lambda f: jax.grad(lambda g_: jnp.sum(jax.grad(
      lambda x: jnp.sum(jnp.sin(f(x, g_))))(x) ** 2))
  ours = gg(lambda x, g_: N.layer_norm(x, g_, b))(g)
  with jax.enable_x64(True):
    ref = gg(lambda x, g_: naive_layer_norm(x.astype(np.float64), g_,
                                            b.astype(np.float64)))(
        g.astype(np.float64))
  assert rel_err(ours, ref) < 1e-3


@pytest.mark.slow
def test_vmap_over_inputs_and_over_gains(impl):
  x, g, b, dy = data((4, 6, 40))
  gs = np.stack([g, 2 * g, -g, g + 1])
  per_x = jax.vmap(lambda x: N.layer_norm(x, g, b))(x)
  per_g = jax.vmap(lambda x, g: N.layer_norm(x, g, b))(x, gs)
  # The batched and the single calls need not lower to the same version (a
  # vmap over the gain takes XLA's), so they agree to float32 rounding: a few
  # ulps of outputs up to ~9, not an absolute 1e-6 (under 2 ulps there).
  for i in range(4):
    np.testing.assert_allclose(per_x[i], N.layer_norm(x[i], g, b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(per_g[i], N.layer_norm(x[i], gs[i], b), rtol=1e-6, atol=1e-6)
  # Per-example gradients, and a Jacobian by forward mode.
  loss = lambda x, g: jnp.sum(N.layer_norm(x, g, b) * dy[0])
  per_ex = jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(0, None))(x, g)
  for i in range(4):
    for a, r in zip(per_ex, jax.grad(loss, argnums=(0, 1))(x[i], g)):
      np.testing.assert_allclose(a[i], r, rtol=1e-5, atol=1e-5)
  row = x[0, 0]
  jac = jax.jacfwd(lambda r: N.layer_norm(r, g, b))(row)
  jac_rev = jax.jacrev(lambda r: N.layer_norm(r, g, b))(row)
  np.testing.assert_allclose(jac, jac_rev, rtol=1e-5, atol=1e-5)


def test_eager_and_jit_agree(impl):
  x, g, b, _ = data((8, 40))
  np.testing.assert_array_equal(N.layer_norm(x, g, b), jax.jit(N.layer_norm)(x, g, b))


def test_constant_rows_give_the_bias(impl):
  x = np.full((4, 33), 3.0, np.float32)
  _, g, b, dy = data((4, 33))
  np.testing.assert_allclose(jax.jit(N.layer_norm)(x, g, b), np.broadcast_to(b, x.shape),
                             atol=1e-6)
  grads = jax.grad(lambda x, g, b: jnp.sum(N.layer_norm(x, g, b) * dy),
                   argnums=(0, 1, 2))(x, g, b)
  assert all(np.isfinite(a).all() for a in grads)


def test_native_mode_must_be_known(monkeypatch):
  monkeypatch.setenv("LNORM_NATIVE", "sometimes")
  with pytest.raises(ValueError, match="LNORM_NATIVE='sometimes': expected one of"):
    native.mode()


@pytest.mark.slow
def test_native_off_and_a_missing_compiler(tmp_path):
  # In a fresh process: load() caches its answer per process.
  code = ("import warnings; warnings.simplefilter('error')\n"
          "from lnorm import native\n"
          "try:\n  print(native.load())\n"
          "except Exception as e:\n  print(type(e).__name__, e)\n")
  def run(**env):
    env = {**os.environ, "LNORM_CACHE_DIR": str(tmp_path), **env}
    return subprocess.run([sys.executable, "-c", code], env=env, text=True,
                          capture_output=True, check=True).stdout.strip()
  assert run(LNORM_NATIVE="off") == "False"
  assert list(tmp_path.iterdir()) == []  # off builds nothing
  out = run(LNORM_NATIVE="auto", CXX="no-such-compiler", PATH="/nonexistent")
  assert out.startswith("RuntimeWarning lnorm: native CPU kernels unavailable")
  out = run(LNORM_NATIVE="require", CXX="no-such-compiler", PATH="/nonexistent")
  assert out.startswith("RuntimeError lnorm: LNORM_NATIVE=require")


@pytest.mark.slow
def test_build_is_cached(tmp_path, monkeypatch):
  if native.mode() == "off":
    pytest.skip("LNORM_NATIVE=off")
  # A one-line source in place of the kernels: the cache's logic is the same,
  # without a 20-second compile (every test session builds the real ones).
  src = tmp_path / "src" / "tiny.cc"
  src.parent.mkdir()
  src.write_text('extern "C" int lnorm_tiny() { return 1; }\n')
  monkeypatch.setattr(native, "SOURCES", (src,))
  monkeypatch.setattr(native, "HEADERS", ())
  cache = tmp_path / "cache"
  monkeypatch.setenv("LNORM_CACHE_DIR", str(cache))
  path = native.build()
  assert path.parent == cache and path.suffix == ".so"
  stamp = path.stat().st_mtime_ns
  assert native.build() == path and path.stat().st_mtime_ns == stamp
  assert [p.name for p in cache.iterdir()] == [path.name]  # no temporaries left
  src.write_text('extern "C" int lnorm_tiny() { return 2; }\n')  # another source, another build
  assert native.build() != path and len(list(cache.iterdir())) == 2


@pytest.mark.slow
def test_concurrent_first_uses_build_once(tmp_path):
  if native.mode() == "off":
    pytest.skip("LNORM_NATIVE=off")
  # Two processes' first use at once, with a compiler slowed by 2 s a call so
  # that they overlap: one builds, the other waits for it and loads its library.
  src = tmp_path / "tiny.cc"
  src.write_text('extern "C" int lnorm_tiny() { return 1; }\n')
  cxx = tmp_path / "slow_cxx"
  cxx.write_text(f'#!/bin/sh\nsleep 2\nexec {shutil.which(native._compiler())} "$@"\n')  # pylint: disable=protected-access
  cxx.chmod(0o755)
  cache = tmp_path / "cache"
  code = ("import pathlib, sys; from lnorm import native; "
          "native.SOURCES, native.HEADERS = (pathlib.Path(sys.argv[1]),), (); print(native.build())")
  env = {**os.environ, "CXX": str(cxx), "LNORM_CACHE_DIR": str(cache)}
  procs = [subprocess.Popen([sys.executable, "-c", code, str(src)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(2)]
  outs = [p.communicate(timeout=120) for p in procs]
  assert all(p.returncode == 0 for p in procs), outs
  assert outs[0][0] == outs[1][0]
  assert sum(err.count("building the native CPU kernels") for _, err in outs) == 1
  assert [p.name for p in cache.iterdir()] == [Path(outs[0][0].strip()).name]
