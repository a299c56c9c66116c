"""layer_norm and rms_norm on bfloat16 inputs against float64 NumPy: the
output is the float64 norm of the bfloat16 values rounded to bfloat16, within
one bfloat16 ulp, also on rows whose mean dwarfs their spread. The same check
fails for statistics computed in bfloat16 (scripts/bench/bf16_statistics.py
measures by how much).

An ulp is bfloat16's spacing (8 significant bits) at the size of the output's
terms, |g x_hat| + |b|, floored at 1/64: near a cancellation of g x_hat and b
no arithmetic can do better, and the float32 statistics' own error (~1e-7 of
the spread) is far below the floor's ulp (2^-13)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from lnorm import normalization as N
from scripts.bench import bf16_statistics as M

BF16 = ml_dtypes.bfloat16
EPS = 1e-5
# (mean, std) of the rows before rounding to bfloat16; the last ones have a
# mean 100 to 1000 times their spread.
ROWS = [(0.0, 1.0), (3.0, 1.0), (100.0, 1.0), (1e3, 10.0), (1e3, 1.0), (1e4, 100.0),
        (-3e4, 300.0)]


def ref_norm(x, g, b, norm):
  """float64 (y, |g x_hat| + |b|) of the rows of x, two-pass, no shift."""
  x = np.asarray(x, np.float64)
  g, b = np.asarray(g, np.float64), np.asarray(b, np.float64)
  if norm == "rms":
    x_hat = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + EPS)
  else:
    m = x.mean(-1, keepdims=True)
    x_hat = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + EPS)
  return x_hat * g + b, np.abs(x_hat * g) + np.abs(b)


def ulps(y, ref, terms):
  scale = np.maximum(terms, 2.0 ** -6)
  return np.abs(np.asarray(y, np.float64) - ref) / 2.0 ** (np.floor(np.log2(scale)) - 7)


def assert_bf16_rounded(y, ref, terms, at_most=1.0):
  err = ulps(y, ref, terms)
  assert err.max() <= at_most, f"{err.max():.1f} ulps (mean {err.mean():.2f})"


def _rows(mean, std, width, seed=0, n=32):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(mean, std, (n, width)), jnp.bfloat16)
  g = jnp.asarray(rng.normal(1, 0.5, width), jnp.float32)
  b = jnp.asarray(rng.normal(0, 0.5, width), jnp.float32)
  return x, g, b


NORMS = {"layer": N.layer_norm, "rms": N.rms_norm}


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("width", [64, 1024, 4096])
@pytest.mark.parametrize("mean,std", ROWS)
def test_bfloat16_matches_float64_to_bfloat16_rounding(norm, width, mean, std):
  x, g, b = _rows(mean, std, width)
  y = jax.jit(NORMS[norm])(x, g, b)
  assert y.dtype == jnp.bfloat16 and y.shape == x.shape
  assert_bf16_rounded(y, *ref_norm(x, g, b, norm))
  # Without gain and bias too.
  y = jax.jit(NORMS[norm])(x)
  assert_bf16_rounded(y, *ref_norm(x, 1.0, 0.0, norm))


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_spread_below_bfloat16_resolution(norm):
  # Mean 1e3, std 0.1: bfloat16's spacing at 1000 is 8, so every value rounds
  # to 1000 and the rows are constant. Layer norm gives the bias exactly; RMS
  # norm the gain (x / |x|).
  x, g, b = _rows(1e3, 0.1, 1024)
  assert (np.asarray(x, np.float64) == 1000.0).all()
  y = np.asarray(NORMS[norm](x, g, b), np.float64)
  ref, terms = ref_norm(x, g, b, norm)
  if norm == "layer":
    np.testing.assert_array_equal(y, np.broadcast_to(np.asarray(b.astype(jnp.bfloat16),
                                                                np.float64), y.shape))
  assert_bf16_rounded(y, ref, terms)


def _layer_norm_in_bf16(x, g, b):
  """A layer norm written in the input's dtype: mean, centring, variance and
  output all bfloat16 (jnp's reductions still sum in float32)."""
  m = jnp.mean(x, -1, keepdims=True)
  x_c = x - m
  var = jnp.mean(x_c * x_c, -1, keepdims=True)
  y = x_c * jax.lax.rsqrt(var + jnp.asarray(EPS, x.dtype))
  return y * g.astype(x.dtype)[None] + b.astype(x.dtype)[None]


@pytest.mark.parametrize("mean,std", [(1e3, 10.0), (1e4, 100.0), (100.0, 1.0)])
def test_the_check_fails_for_bfloat16_statistics_on_large_mean_rows(mean, std):
  x, g, b = _rows(mean, std, 1024)
  ref, terms = ref_norm(x, g, b, "layer")
  y = jax.jit(_layer_norm_in_bf16)(x, g, b)
  assert y.dtype == jnp.bfloat16
  with pytest.raises(AssertionError):
    assert_bf16_rounded(y, ref, terms, at_most=2.0)
  # Its centring is off by a sizeable part of the spread: the rounding of
  # the mean (spacing 8 at 1000 against a spread of 10).
  xf = np.asarray(x, np.float64)
  m_err = np.abs(np.asarray(jnp.mean(x, -1), np.float64) - xf.mean(-1)) / xf.std(-1)
  assert m_err.max() > 0.01


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_the_check_fails_for_bfloat16_accumulation(norm):
  # Sums accumulated in bfloat16 one term at a time stall once the running sum's
  # spacing passes the terms: wrong by orders of magnitude at width 4096.
  x, g, b = _rows(100.0, 1.0, 4096)
  y, _, _ = M.bf16_norm(np.asarray(x), np.asarray(g), np.asarray(b), norm, "bf16 sums")
  with pytest.raises(AssertionError):
    assert_bf16_rounded(y, *ref_norm(x, g, b, norm), at_most=2.0)


def test_layer_norm_gradient_of_bfloat16_input():
  # d/dx of sum(w * layer_norm(x)): rstd (w - mean(w) - x_hat mean(x_hat w)),
  # in float64 against the bfloat16 result (its own rounding: 2^-8 relative).
  x, g, b = _rows(1e3, 10.0, 1024, n=8)
  w = jnp.asarray(np.random.default_rng(1).normal(size=x.shape), jnp.bfloat16)
  dx = jax.grad(lambda x: jnp.sum(N.layer_norm(x, g, b).astype(jnp.float32)
                                  * w.astype(jnp.float32)))(x)
  assert dx.dtype == jnp.bfloat16
  xf, wg = np.asarray(x, np.float64), np.asarray(w, np.float64) * np.asarray(g, np.float64)
  m = xf.mean(-1, keepdims=True)
  rstd = 1 / np.sqrt(((xf - m) ** 2).mean(-1, keepdims=True) + EPS)
  x_hat = (xf - m) * rstd
  ref = rstd * (wg - wg.mean(-1, keepdims=True) - x_hat * (x_hat * wg).mean(-1, keepdims=True))
  err = np.abs(np.asarray(dx, np.float64) - ref).max() / np.abs(ref).max()
  assert err < 2 ** -7, err


def test_measurement_script_prints_a_table():
  out = M.table([64], [0, 100], rows=4)
  lines = out.splitlines()
  assert lines[0].startswith("| norm | width | mean/std | float32: mean err")
  assert len(lines) == 2 + 4  # header, rule, 2 norms x 2 ratios
  r = M.measure(256, 100.0, "layer", rows=8)
  assert r["float32"]["out_ulps"] <= 1.0 < r["bf16 stats"]["out_ulps"] < r["bf16 sums"]["out_ulps"]
