"""lnorm/dense_dot.py: a Dense layer's products and derivatives of every
order against float64 NumPy, and the kernel gradient's form on XLA:CPU."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import dense_dot


def _layer(features):
  return nn.Dense(features, dot_general=dense_dot.dot_general)


def _bound(K, M=1):
  # float32 sums of K (then M) products of O(1) terms: a few eps a term.
  return 8 * np.finfo(np.float32).eps * (K + M)


# (B, T, K, N): x wider than the output (the MLP's second layer, which takes
# the transposed path on CPU) and narrower (the plain path).
SHAPES = [(2, 5, 24, 8), (3, 4, 8, 24), (1, 7, 16, 16)]


@pytest.mark.parametrize("B,T,K,N", SHAPES)
def test_values_and_gradients_match_float64(B, T, K, N):
  rng = np.random.default_rng(K * N)
  x = rng.standard_normal((B, T, K)).astype(np.float32)
  g = rng.standard_normal((B, T, N)).astype(np.float32)
  layer = _layer(N)
  p = layer.init(jax.random.key(0), x)
  w = np.asarray(p["params"]["kernel"], np.float64)
  b = np.asarray(p["params"]["bias"], np.float64)
  y, vjp = jax.vjp(layer.apply, p, jnp.asarray(x))
  dp, dx = vjp(jnp.asarray(g))
  x64, g64 = x.astype(np.float64), g.astype(np.float64)
  np.testing.assert_allclose(y, x64 @ w + b, atol=_bound(K) * np.abs(x64).max() * K ** 0.5)
  M = B * T
  np.testing.assert_allclose(dx, g64 @ w.T, atol=_bound(N) * np.abs(g64).max() * N ** 0.5)
  dw = x64.reshape(M, K).T @ g64.reshape(M, N)
  np.testing.assert_allclose(dp["params"]["kernel"], dw, atol=_bound(M) * 4 * M ** 0.5)
  np.testing.assert_allclose(dp["params"]["bias"], g64.reshape(M, N).sum(0),
                             atol=_bound(M) * 4 * M ** 0.5)


@pytest.mark.parametrize("B,T,K,N", SHAPES[:2])
def test_forward_mode_and_second_order_match_float64(B, T, K, N):
  # Forward mode (a custom_vjp would refuse it) and a Hessian-vector product
  # (forward over reverse) of L = sum(tanh(x @ W)^2 / 2).
  rng = np.random.default_rng(1)
  x = rng.standard_normal((B, T, K)) * 0.5
  w = rng.standard_normal((K, N)) / K ** 0.5
  dx, dw = rng.standard_normal(x.shape), rng.standard_normal(w.shape) / K ** 0.5
  with jax.enable_x64(True):
    f = lambda x, w: dense_dot.dot_general(x, w, (((2,), (0,)), ((), ())))
    _, t = jax.jvp(f, (jnp.asarray(x), jnp.asarray(w)), (jnp.asarray(dx), jnp.asarray(dw)))
    np.testing.assert_allclose(t, dx @ w + x @ dw, rtol=1e-12, atol=1e-12)
    loss = lambda w: jnp.sum(jnp.tanh(f(jnp.asarray(x), w)) ** 2) / 2
    hv = jax.jvp(jax.grad(loss), (jnp.asarray(w),), (jnp.asarray(dw),))[1]
  # By hand: a = x w, y = tanh a, dL/da = y (1 - y^2); its derivative along
  # da = x dw is (1 - y^2)(1 - 3 y^2) da, and the gradient is x^T (dL/da).
  x2, a = x.reshape(-1, K), x.reshape(-1, K) @ w
  y = np.tanh(a)
  want = x2.T @ ((1 - y ** 2) * (1 - 3 * y ** 2) * (x2 @ dw))
  np.testing.assert_allclose(hv, want, rtol=1e-10, atol=1e-10)


def test_other_forms_are_lax_dot_general():
  # A batch axis, or a contraction not Dense's: exactly lax.dot_general.
  rng = np.random.default_rng(2)
  a = jnp.asarray(rng.standard_normal((3, 4, 5)), jnp.float32)
  b = jnp.asarray(rng.standard_normal((3, 5, 6)), jnp.float32)
  dn = (((2,), (1,)), ((0,), (0,)))
  np.testing.assert_array_equal(dense_dot.dot_general(a, b, dn), jax.lax.dot_general(a, b, dn))
  c = jnp.asarray(rng.standard_normal((4, 5)), jnp.float32)
  dn = (((0,), (0,)), ((), ()))
  np.testing.assert_array_equal(dense_dot.dot_general(c, c, dn), jax.lax.dot_general(c, c, dn))


def _dots(fn, *args):
  hlo = jax.jit(fn).lower(*args).compile().as_text()
  return re.findall(r"dot\(.*?lhs_contracting_dims=\{(\d+)\}", hlo)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's dot forms")
def test_wide_kernel_gradient_contracts_rows_of_a_transposed_x():
  # x^T @ dy with x at least as wide as dy: no dot contracts x's rows (the
  # form XLA:CPU gives Eigen after a copy of its own); a narrow x keeps it.
  def kernel_grad(dg):
    def f(x, w, g):
      return jax.grad(lambda w: jnp.sum(dg(x, w, (((1,), (0,)), ((), ()))) * g))(w)
    return f
  rng = np.random.default_rng(3)
  for K, N, plain_has_it in ((64, 16, True), (16, 64, True)):
    x = jnp.asarray(rng.standard_normal((32, K)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((K, N)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((32, N)), jnp.float32)
    ours = _dots(kernel_grad(dense_dot.dot_general), x, w, g)
    plain = _dots(kernel_grad(jax.lax.dot_general), x, w, g)
    assert ("0" in plain) == plain_has_it, plain
    if K >= N:
      assert "0" not in ours, ours
    else:
      assert ours == plain
