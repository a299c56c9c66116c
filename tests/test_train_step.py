"""Golden steps: the classifier's jitted training against float64 NumPy.

Two Adam steps of the pi_mnist MLP, through ``classifier.train_epoch`` (the
runner's scanned epoch), must equal a NumPy float64 version written from the
equations: ReLU MLP, layer norm (paper eqs. 3-5) on the hidden layers, softmax
cross-entropy, backpropagation by hand, and Adam (Kingma & Ba, Algorithm 1).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import pi_mnist as pi_mnist_config
from experiments import classifier, pi_mnist

EPS_LN, LR, B1, B2, EPS_ADAM = 1e-5, 1e-2, 0.9, 0.999, 1e-8


def _forward_backward(params: list[dict], x_BxD: np.ndarray, y_B: np.ndarray, norm: str
                      ) -> tuple[float, list[dict]]:
  """Mean NLL and its gradient with respect to every parameter, in float64."""
  h, caches = x_BxD, []
  for i, p in enumerate(params):
    a = h @ p["kernel"]
    last = i == len(params) - 1
    if norm == "layer" and not last:
      mu = a.mean(1, keepdims=True)
      sigma = np.sqrt(((a - mu) ** 2).mean(1, keepdims=True) + EPS_LN)
      a_hat = (a - mu) / sigma
      z = p["gain"] * a_hat + p["bias"]
      caches.append((h, a_hat, sigma))
    else:
      z = a + p["bias"]
      caches.append((h, None, None))
    h = z if last else np.maximum(z, 0.0)
  logits = h - h.max(1, keepdims=True)
  prob = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  n = len(y_B)
  loss = -np.log(prob[np.arange(n), y_B]).mean()
  dz = prob.copy()
  dz[np.arange(n), y_B] -= 1.0
  dz /= n
  grads = [None] * len(params)
  for i in reversed(range(len(params))):
    p, (h_in, a_hat, sigma) = params[i], caches[i]
    g = {"bias": dz.sum(0)}
    if a_hat is not None:
      g["gain"] = (dz * a_hat).sum(0)
      d_hat = dz * p["gain"]
      da = (d_hat - d_hat.mean(1, keepdims=True)
            - a_hat * (d_hat * a_hat).mean(1, keepdims=True)) / sigma
    else:
      da = dz
    g["kernel"] = h_in.T @ da
    grads[i] = g
    if i:
      dh = da @ p["kernel"].T
      # The ReLU of layer i-1 passed where its output (h_in) is positive.
      dz = dh * (h_in > 0)
  return loss, grads


def _adam(params, grads, mu, nu, t: int):
  for p, g, mp, vp in zip(params, grads, mu, nu):
    for k in p:
      mp[k] = B1 * mp[k] + (1 - B1) * g[k]
      vp[k] = B2 * vp[k] + (1 - B2) * g[k] ** 2
      m_hat, v_hat = mp[k] / (1 - B1 ** t), vp[k] / (1 - B2 ** t)
      p[k] = p[k] - LR * m_hat / (np.sqrt(v_hat) + EPS_ADAM)


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_two_adam_steps_match_float64_numpy(norm):
  c = pi_mnist_config.get_config("smoke")
  c.norm, c.hidden, c.learning_rate, c.eps = norm, (12, 9), LR, EPS_LN
  model = pi_mnist.create_model(c)
  state = classifier.create_train_state(c, model, jax.random.key(0), (20,))
  rng = np.random.default_rng(1)
  x = rng.normal(size=(8, 20)).astype(np.float32)
  y = rng.integers(0, 10, 8).astype(np.int32)

  names = sorted(state.params)  # dense0, dense1, dense2
  params = [{k: np.asarray(v, np.float64) for k, v in state.params[n].items()} for n in names]
  init = [{k: a.copy() for k, a in p.items()} for p in params]
  idx = np.asarray(classifier.batch_indices(jax.random.key(5), 8, 4))
  mu = [{k: np.zeros_like(a) for k, a in p.items()} for p in params]
  nu = [{k: np.zeros_like(a) for k, a in p.items()} for p in params]
  losses = []
  for t, rows in enumerate(idx, start=1):
    loss, grads = _forward_backward(params, x[rows].astype(np.float64), y[rows], norm)
    losses.append(loss)
    _adam(params, grads, mu, nu, t)

  new, mean_loss = classifier.train_epoch(state, jnp.asarray(x), jnp.asarray(y),
                                          jax.random.key(5), batch_size=4)
  np.testing.assert_allclose(float(mean_loss), np.mean(losses), rtol=1e-5)
  assert int(new.step) == 2
  for n, p, p0 in zip(names, params, init):
    for k, ref in p.items():
      got = np.asarray(new.params[n][k], np.float64)
      # Adam moves a parameter by up to about LR a step: compare at that scale,
      # and make sure the steps did move it.
      np.testing.assert_allclose(got, ref, rtol=0, atol=LR * 1e-3, err_msg=f"{n}/{k}")
      assert np.abs(ref - p0[k]).max() > LR
