r"""The Fisher information of small normalized GLMs (paper section 5.2).

A GLM with H outputs reads the summed inputs ``a = W x`` (rows ``w_i`` of W) and,
normalized, ``abar_i = g_i (a_i - mu_i) / sigma_i + b_i`` (``none``:
``abar_i = a_i + b_i``). The outputs' sufficient statistics T(y) have natural
parameters ``abar`` (dispersion phi):

- ``softmax``: y is one of H classes with logits ``abar`` (phi = 1);
- ``gaussian``: H independent outputs, ``y_i ~ N(abar_i, phi)``.

The parameters of a GLM are an (H, P) array ``theta``, one row
``[w_i (D), b_i, g_i]`` per unit (``none``: ``[w_i, b_i]``), so that
``theta.reshape(-1)`` is the paper's ``vec([W, b, g]^T)`` and the Fisher's
(i, j) block of size P x P is the paper's F_ij.

Three ways to the Fisher, which must agree:

- ``fisher``: the definition, ``E_x E_{y ~ P(y|x)} [s s^T]`` with the score
  ``s = d log P(y|x) / d theta`` by autodiff through ``lnorm.normalization``.
  The expectation over y is exact: a sum over the classes (softmax), or over
  the 2^H points ``abar + sqrt(phi) z``, ``z in {-1, 1}^H``, which match the
  Gaussian's first and second moments, all that an outer product of scores
  (linear in y) needs.
- ``fisher_jfj``: ``E_x [J^T (Cov[y|x] / phi^2) J]``, J the Jacobian of
  ``abar`` by autodiff.
- closed forms: ``fisher_paper`` builds eqs. 12-14 as printed;
  ``fisher_analytic`` uses the whole analytic Jacobian of ``abar``. They differ
  for layer norm only, whose mu and sigma depend on every unit's weights, so that
  ``d abar_k / d w_i != 0`` for k != i: eq. 13 keeps the k = i terms alone.
  ``gain_metric`` is the gain block alone, and ``gain_metric_appendix`` that
  block as the appendix prints it (eqs. 32-35), which differs for batch norm.

Batch norm's statistics are those of the N inputs given (the data
distribution P(x) is uniform over them), as in the paper's eq. 2.
Call these in float64 (``with jax.enable_x64(True)``) for exact comparisons.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from lnorm import normalization
from lnorm import norms

Array = jax.Array

# The norms whose GLM the paper's section 5.2 analyses in closed form (eqs. 13-16,
# appendix): the forms below are each norm's own math, so this list is theirs.
NORMS = (norms.NONE, norms.BATCH, norms.WEIGHT, norms.LAYER)
OUTPUTS = ("softmax", "gaussian")


@dataclasses.dataclass(frozen=True)
class GLM:
  """A normalized GLM: its norm, its output distribution, phi and eps."""
  norm: str
  output: str = "softmax"
  phi: float = 1.0  # the Gaussian's variance; softmax has phi = 1
  eps: float = 0.0  # added to sigma^2, as in lnorm.normalization

  def __post_init__(self):
    norms.check(self.norm, NORMS)
    if self.output not in OUTPUTS:
      raise ValueError(f"output={self.output!r} is not valid; choose one of: "
                       f"{', '.join(OUTPUTS)}")
    if not self.phi > 0 or (self.output == "softmax" and self.phi != 1):
      raise ValueError(f"phi={self.phi!r} is not valid: it must be > 0, and 1 for softmax")
    if not self.eps >= 0:
      raise ValueError(f"eps={self.eps!r} is not valid: it must be >= 0")


def unit_size(norm: str, d: int) -> int:
  """P: the parameters of one unit, [w_i (d), b_i] plus g_i when normalized."""
  return d + 1 if norm == norms.NONE else d + 2


def init_params(key: Array, norm: str, d: int, h: int, dtype=jnp.float64) -> Array:
  """A random GLM: W ~ N(0, 1/d), b ~ N(0, 0.3^2), g ~ 1 + N(0, 0.2^2)."""
  kw, kb, kg = jax.random.split(key, 3)
  cols = [jax.random.normal(kw, (h, d), dtype) / math.sqrt(d),
          0.3 * jax.random.normal(kb, (h, 1), dtype)]
  if norm != norms.NONE:
    cols.append(1 + 0.2 * jax.random.normal(kg, (h, 1), dtype))
  return jnp.concatenate(cols, axis=1)


def split(theta_HxP: Array, norm: str) -> tuple[Array, Array, Array | None]:
  """(W (H, D), b (H,), g (H,) or None for ``none``)."""
  d = theta_HxP.shape[1] - (1 if norm == norms.NONE else 2)
  return (theta_HxP[:, :d], theta_HxP[:, d],
          None if norm == norms.NONE else theta_HxP[:, d + 1])


def with_weights(theta_HxP: Array, norm: str, w_HxD: Array) -> Array:
  """``theta`` with W replaced."""
  return theta_HxP.at[:, :theta_HxP.shape[1] - (1 if norm == norms.NONE else 2)].set(w_HxD)


def summed_inputs(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """abar (N, H): the normalized summed inputs, through ``lnorm.normalization``."""
  w_HxD, b_H, g_H = split(theta_HxP, glm.norm)
  if glm.norm == norms.WEIGHT:
    return x_NxD @ normalization.weight_norm(w_HxD.T, g_H, axis=0, eps=glm.eps) + b_H[None]
  a_NxH = x_NxD @ w_HxD.T
  if glm.norm == norms.NONE:
    return a_NxH + b_H[None]
  if glm.norm == norms.BATCH:
    return normalization.batch_norm(a_NxH, g_H, b_H, axis=0, eps=glm.eps)[0]
  return normalization.layer_norm(a_NxH, g_H, b_H, axis=-1, eps=glm.eps)


def output_covariance(abar_NxH: Array, glm: GLM) -> Array:
  """Cov[T(y) | x] / phi^2 (N, H, H): the Fisher of the outputs in abar."""
  n, h = abar_NxH.shape
  if glm.output == "softmax":
    p_NxH = jax.nn.softmax(abar_NxH, axis=-1)
    return jnp.eye(h, dtype=p_NxH.dtype)[None] * p_NxH[:, None, :] - p_NxH[:, :, None] * p_NxH[:, None, :]
  return jnp.broadcast_to(jnp.eye(h, dtype=abar_NxH.dtype)[None] / glm.phi, (n, h, h))


def _gaussian_log_density(abar_NxH: Array, y_NxH: Array, phi: float) -> Array:
  return jnp.sum(-0.5 * jnp.square(y_NxH - abar_NxH) / phi - 0.5 * math.log(2 * math.pi * phi),
                 axis=-1)


def fisher(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """The exact Fisher (H*P, H*P): E_x E_y [s s^T], scores by autodiff."""
  n, size = x_NxD.shape[0], theta_HxP.size
  if glm.output == "softmax":
    def log_p(th):
      return jax.nn.log_softmax(summed_inputs(th, x_NxD, glm), axis=-1)
    s_NxHxP = jax.jacrev(log_p)(theta_HxP).reshape(n, -1, size)
    p_NxH = jnp.exp(log_p(theta_HxP))
    return jnp.einsum("nk,nkp,nkq->pq", p_NxH, s_NxHxP, s_NxHxP) / n
  abar_NxH = summed_inputs(theta_HxP, x_NxD, glm)
  h = abar_NxH.shape[1]
  z_ZxH = jnp.asarray(list(itertools.product((-1.0, 1.0), repeat=h)), abar_NxH.dtype)
  y_ZxNxH = abar_NxH[None] + math.sqrt(glm.phi) * z_ZxH[:, None, :]

  def log_p(th, y_NxH):
    return _gaussian_log_density(summed_inputs(th, x_NxD, glm), y_NxH, glm.phi)
  s_ZxNxP = jax.vmap(jax.jacrev(log_p), (None, 0))(theta_HxP, y_ZxNxH).reshape(
      len(z_ZxH), n, size)
  return jnp.einsum("znp,znq->pq", s_ZxNxP, s_ZxNxP) / (len(z_ZxH) * n)


def fisher_jfj(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """E_x [J^T (Cov[y|x] / phi^2) J], J = d abar / d theta by autodiff."""
  n, size = x_NxD.shape[0], theta_HxP.size
  abar_NxH = summed_inputs(theta_HxP, x_NxD, glm)
  j_NxHxP = jax.jacfwd(summed_inputs)(theta_HxP, x_NxD, glm).reshape(n, -1, size)
  return jnp.einsum("nkp,nkl,nlq->pq", j_NxHxP, output_covariance(abar_NxH, glm),
                    j_NxHxP) / n


def fisher_monte_carlo(key: Array, theta_HxP: Array, x_NxD: Array, glm: GLM,
                       num_samples: int) -> Array:
  """The mean of s s^T over ``num_samples`` draws of y per input from the model."""
  n, size = x_NxD.shape[0], theta_HxP.size
  abar_NxH = summed_inputs(theta_HxP, x_NxD, glm)
  if glm.output == "softmax":
    y_S = jax.random.categorical(key, abar_NxH, axis=-1, shape=(num_samples, n))

    def log_p(th, y_N):
      lp_NxH = jax.nn.log_softmax(summed_inputs(th, x_NxD, glm), axis=-1)
      return jnp.take_along_axis(lp_NxH, y_N[:, None], axis=1)[:, 0]
  else:
    y_S = abar_NxH[None] + math.sqrt(glm.phi) * jax.random.normal(
        key, (num_samples, *abar_NxH.shape), abar_NxH.dtype)

    def log_p(th, y_NxH):
      return _gaussian_log_density(summed_inputs(th, x_NxD, glm), y_NxH, glm.phi)
  s_SxNxP = jax.vmap(jax.jacrev(log_p), (None, 0))(theta_HxP, y_S).reshape(
      num_samples, n, size)
  return jnp.einsum("snp,snq->pq", s_SxNxP, s_SxNxP) / (num_samples * n)


def _moments(theta_HxP: Array, x_NxD: Array, glm: GLM):
  """a, mu, sigma (N, H) and eq. 14's d mu_i / d w_i, d sigma_i / d w_i (N, H, D)."""
  w_HxD = split(theta_HxP, glm.norm)[0]
  (n, d), h = x_NxD.shape, w_HxD.shape[0]
  a_NxH = x_NxD @ w_HxD.T
  if glm.norm == norms.BATCH:
    mu_1xH = jnp.mean(a_NxH, axis=0, keepdims=True)
    sigma_1xH = jnp.sqrt(jnp.mean(jnp.square(a_NxH - mu_1xH), axis=0, keepdims=True) + glm.eps)
    xbar_1xD = jnp.mean(x_NxD, axis=0, keepdims=True)
    cov_DxD = (x_NxD - xbar_1xD).T @ (x_NxD - xbar_1xD) / n
    dmu = jnp.broadcast_to(xbar_1xD[None], (n, h, d))
    dsigma = jnp.broadcast_to((w_HxD @ cov_DxD / sigma_1xH.T)[None], (n, h, d))
    mu, sigma = (jnp.broadcast_to(v, (n, h)) for v in (mu_1xH, sigma_1xH))
  elif glm.norm == norms.WEIGHT:
    sigma_H = jnp.sqrt(jnp.sum(jnp.square(w_HxD), axis=1) + glm.eps)
    mu, sigma = jnp.zeros_like(a_NxH), jnp.broadcast_to(sigma_H[None], (n, h))
    dmu = jnp.zeros((n, h, d), a_NxH.dtype)
    dsigma = jnp.broadcast_to((w_HxD / sigma_H[:, None])[None], (n, h, d))
  elif glm.norm == norms.LAYER:
    mu_Nx1 = jnp.mean(a_NxH, axis=1, keepdims=True)
    sigma_Nx1 = jnp.sqrt(jnp.mean(jnp.square(a_NxH - mu_Nx1), axis=1, keepdims=True) + glm.eps)
    mu, sigma = (jnp.broadcast_to(v, (n, h)) for v in (mu_Nx1, sigma_Nx1))
    dmu = jnp.broadcast_to(x_NxD[:, None, :] / h, (n, h, d))
    dsigma = ((a_NxH - mu) / (h * sigma))[:, :, None] * x_NxD[:, None, :]
  else:
    raise ValueError(f"norm={glm.norm!r} has no normalization statistics")
  return a_NxH, mu, sigma, dmu, dsigma


def chi(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """Eq. 14 (N, H, D): chi_i = x - d mu_i/d w_i - (a_i - mu_i)/sigma_i d sigma_i/d w_i."""
  a, mu, sigma, dmu, dsigma = _moments(theta_HxP, x_NxD, glm)
  return x_NxD[:, None, :] - dmu - ((a - mu) / sigma)[:, :, None] * dsigma


def _unit_vectors(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """u_i (N, H, P) with F_ij = E_x[Cov_ij / phi^2 u_i u_j^T] (eqs. 12 and 13)."""
  n, d = x_NxD.shape
  h = theta_HxP.shape[0]
  ones = jnp.ones((n, h, 1), x_NxD.dtype)
  if glm.norm == norms.NONE:
    return jnp.concatenate([jnp.broadcast_to(x_NxD[:, None, :], (n, h, d)), ones], axis=2)
  g_H = split(theta_HxP, glm.norm)[2]
  a, mu, sigma = _moments(theta_HxP, x_NxD, glm)[:3]
  return jnp.concatenate([(g_H[None] / sigma)[:, :, None] * chi(theta_HxP, x_NxD, glm),
                          ones, ((a - mu) / sigma)[:, :, None]], axis=2)


def fisher_paper(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """Eq. 12 (``none``) or eqs. 13-14 (normalized), as printed: blocks
  F_ij = E_x[Cov[y_i, y_j | x] / phi^2 u_i u_j^T], u_i = [g_i chi_i / sigma_i, 1,
  (a_i - mu_i) / sigma_i] (``none``: [x, 1], eq. 12's Kronecker product)."""
  n = x_NxD.shape[0]
  u_NxHxP = _unit_vectors(theta_HxP, x_NxD, glm)
  c_NxHxH = output_covariance(summed_inputs(theta_HxP, x_NxD, glm), glm)
  return jnp.einsum("nij,nip,njq->ipjq", c_NxHxH, u_NxHxP, u_NxHxP).reshape(
      theta_HxP.size, theta_HxP.size) / n


def jacobian_analytic(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """d abar_k / d theta_(i, p) (N, H, H, P) in closed form, every (k, i). Only
  layer norm has k != i terms: d abar_k / d w_i = g_k / sigma (delta_ki - 1/H -
  n_k n_i / H) x, n = (a - mu) / sigma."""
  u_NxHxP = _unit_vectors(theta_HxP, x_NxD, glm)
  n, h, _ = u_NxHxP.shape
  eye_1xHxHx1 = jnp.eye(h, dtype=u_NxHxP.dtype)[None, :, :, None]
  if glm.norm != norms.LAYER:
    return eye_1xHxHx1 * u_NxHxP[:, None, :, :]
  g_H = split(theta_HxP, glm.norm)[2]
  a, mu, sigma = _moments(theta_HxP, x_NxD, glm)[:3]
  z_NxH = (a - mu) / sigma
  coef_NxHxH = (g_H[None] / sigma)[:, :, None] * (
      jnp.eye(h, dtype=a.dtype)[None] - 1 / h - z_NxH[:, :, None] * z_NxH[:, None, :] / h)
  dw = coef_NxHxH[..., None] * x_NxD[:, None, None, :]
  rest = eye_1xHxHx1 * u_NxHxP[:, None, :, -2:]  # b_i and g_i move abar_i alone
  return jnp.concatenate([dw, rest], axis=3)


def fisher_analytic(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """The exact Fisher in closed form: E_x[sum_kl Cov_kl / phi^2 (d abar_k/d theta)
  (d abar_l/d theta)^T] with ``jacobian_analytic``. Equals ``fisher_paper``
  but for layer norm."""
  n = x_NxD.shape[0]
  j = jacobian_analytic(theta_HxP, x_NxD, glm)
  c_NxHxH = output_covariance(summed_inputs(theta_HxP, x_NxD, glm), glm)
  return jnp.einsum("nkl,nkip,nljq->ipjq", c_NxHxH, j, j).reshape(
      theta_HxP.size, theta_HxP.size) / n


def gain_directions(theta_HxP: Array, glm: GLM) -> Array:
  """(H*P, H) unit columns along each unit's magnitude: the gain g_i, or for
  ``none`` the radial direction w_i / ||w_i|| (where w_i = g_i v_i / ||v_i||
  would put a gain)."""
  h, p = theta_HxP.shape
  v = jnp.zeros((h, p, h), theta_HxP.dtype)
  if glm.norm == norms.NONE:
    w_HxD = split(theta_HxP, glm.norm)[0]
    r_HxD = w_HxD / jnp.linalg.norm(w_HxD, axis=1, keepdims=True)
    v = v.at[:, :p - 1, :].set(jnp.eye(h, dtype=v.dtype)[:, None, :] * r_HxD[:, :, None])
  else:
    v = v.at[:, p - 1, :].set(jnp.eye(h, dtype=v.dtype))
  return v.reshape(h * p, h)


def gain_metric(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """The gain block (H, H) in closed form (eq. 13's (g_i, g_j) entry):
  E_x[Cov_ij / phi^2 n_i n_j] with n_i = (a_i - mu_i) / sigma_i the normalized
  input; for ``none``, n_i = w_i^T x / ||w_i||, the metric along |w_i|."""
  if glm.norm == norms.NONE:
    w_HxD = split(theta_HxP, glm.norm)[0]
    z_NxH = x_NxD @ (w_HxD / jnp.linalg.norm(w_HxD, axis=1, keepdims=True)).T
  else:
    a, mu, sigma = _moments(theta_HxP, x_NxD, glm)[:3]
    z_NxH = (a - mu) / sigma
  c_NxHxH = output_covariance(summed_inputs(theta_HxP, x_NxD, glm), glm)
  return jnp.mean(c_NxHxH * z_NxH[:, :, None] * z_NxH[:, None, :], axis=0)


def gain_metric_appendix(theta_HxP: Array, x_NxD: Array, glm: GLM) -> Array:
  """The gain block (H, H) as the appendix prints it, in ds^2 = 1/2 dg^T G dg:
  eqs. 33 (layer), 34 (weight) and 35 (``none``, the step dg_i w_i / ||w_i||)
  are ``gain_metric``'s E_x[Cov_ij / phi^2 n_i n_j]; eq. 32 (batch) reads
  E_x[Cov[y | x] / phi^2], without the n_i n_j."""
  if glm.norm != norms.BATCH:
    return gain_metric(theta_HxP, x_NxD, glm)
  return jnp.mean(output_covariance(summed_inputs(theta_HxP, x_NxD, glm), glm), axis=0)


def weight_step(theta_HxP: Array, glm: GLM, d_HxD: Array) -> Array:
  """A step d in W alone, as a vector in vec([W, b, g]^T)."""
  return with_weights(jnp.zeros_like(theta_HxP), glm.norm, d_HxD).reshape(-1)


def ds2(f_PxP: Array, delta_P: Array) -> float:
  """delta^T F delta (the KL divergence of the step is half this, eq. 9)."""
  return float(delta_P @ f_PxP @ delta_P)


def max_rel_diff(a: Array, b: Array) -> float:
  """max |a - b| / max |b|."""
  a, b = np.asarray(a), np.asarray(b)
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
