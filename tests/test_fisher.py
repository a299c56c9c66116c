"""lnorm.fisher: the exact Fisher of small normalized GLMs against the paper's
closed forms (eqs. 12-14), the section 5.2 invariances, PSD and Monte Carlo."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lnorm import fisher as fi

D, H, N = 3, 3, 6  # inputs, units (classes), data points
CASES = list(itertools.product(fi.NORMS, fi.OUTPUTS))


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


@functools.cache
def _jit(f):
  return jax.jit(f, static_argnums=2)


def _glm(norm, output, eps=0.0):
  return fi.GLM(norm, output, 0.7 if output == "gaussian" else 1.0, eps)


def _setup(norm, output, seed=0, eps=0.0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(rng.normal(0, 1, D), rng.uniform(0.5, 2, D), (N, D)))
  return fi.init_params(jax.random.PRNGKey(seed), norm, D, H), x, _glm(norm, output, eps)


def _rel(a, b):
  return fi.max_rel_diff(a, b)


@pytest.mark.parametrize("norm,output", CASES)
def test_closed_forms_match_autodiff(norm, output):
  th, x, glm = _setup(norm, output)
  f = _jit(fi.fisher)(th, x, glm)
  assert _rel(_jit(fi.fisher_jfj)(th, x, glm), f) < 1e-12
  assert _rel(_jit(fi.fisher_analytic)(th, x, glm), f) < 1e-12
  paper = _jit(fi.fisher_paper)(th, x, glm)
  if norm != "layer":
    assert _rel(paper, f) < 1e-12
  else:
    # Eq. 13 drops d abar_k / d w_i for k != i: its w blocks are off, its b, g blocks exact.
    p = fi.unit_size(norm, D)
    w = np.zeros((H, p), bool)
    w[:, :D] = True
    w = w.reshape(-1)
    assert _rel(paper, f) > 1e-2
    bg = np.ix_(~w, ~w)
    assert _rel(np.asarray(paper)[bg], np.asarray(f)[bg]) < 1e-12


@pytest.mark.parametrize("output", fi.OUTPUTS)
def test_eq12_is_a_kronecker_product(output):
  """The unnormalized GLM against eq. 12 written out in numpy."""
  th, x, glm = _setup("none", output)
  w, b, _ = fi.split(th, "none")
  a = np.asarray(x @ w.T + b[None])
  if output == "softmax":
    p = np.exp(a - a.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    cov = [np.diag(q) - np.outer(q, q) for q in p]
  else:
    cov = [np.eye(H) / glm.phi] * N
  feats = [np.block([[np.outer(v, v), v[:, None]], [v[None, :], np.ones((1, 1))]])
           for v in np.asarray(x)]
  want = sum(np.kron(c, m) for c, m in zip(cov, feats)) / N
  assert _rel(_jit(fi.fisher)(th, x, glm), want) < 1e-12


def test_chi_of_weight_norm_is_orthogonal_to_w():
  """Eq. 14 with mu = 0, sigma = |w|: chi_i = x - (w_i^T x) w_i / |w_i|^2."""
  th, x, glm = _setup("weight", "softmax")
  w = fi.split(th, "weight")[0]
  c = fi.chi(th, x, glm)
  np.testing.assert_allclose(jnp.einsum("nhd,hd->nh", c, w), 0, atol=1e-12)
  np.testing.assert_allclose(c, x[:, None, :] - (x @ w.T / jnp.sum(w * w, 1)[None])[..., None]
                             * w[None], atol=1e-12)


@pytest.mark.parametrize("norm,output", CASES)
def test_gain_metric_against_input_scale(norm, output):
  """(a) Batch and layer norm: the metric along the gains does not change when
  the input is re-scaled. Weight norm and the plain GLM (along w_i / |w_i|): it
  does; with Gaussian outputs it grows exactly as c^2."""
  th, x, glm = _setup(norm, output)
  v = fi.gain_directions(th, glm)
  g = {c: v.T @ _jit(fi.fisher)(th, c * x, glm) @ v for c in (0.1, 1.0, 10.0)}
  assert _rel(_jit(fi.gain_metric)(th, x, glm), g[1.0]) < 1e-12
  for c in (0.1, 10.0):
    if norm in ("batch", "layer"):
      assert _rel(g[c], g[1.0]) < 1e-10
    elif output == "gaussian":
      assert _rel(g[c], c**2 * g[1.0]) < 1e-10
    else:
      assert _rel(g[c], g[1.0]) > 1e-2


@pytest.mark.parametrize("norm,output", CASES)
def test_appendix_gain_metric_eqs_32_to_35(norm, output):
  """The appendix's ds^2 along the gains, as printed, against the exact Fisher:
  eqs. 33-35 hold; eq. 32 (batch norm) leaves out n_i n_j, which is exact only
  where Cov[y | x] is constant (Gaussian outputs, and E_x[n_i^2] = 1 over the
  batch), and not for softmax."""
  th, x, glm = _setup(norm, output)
  v = fi.gain_directions(th, glm)
  exact = v.T @ _jit(fi.fisher)(th, x, glm) @ v
  err = _rel(_jit(fi.gain_metric_appendix)(th, x, glm), exact)
  if norm == "batch" and output == "softmax":
    assert err > 1e-2
  else:
    assert err < 1e-12


def test_gain_metric_with_eps_is_not_invariant_at_small_scales():
  th, x, glm = _setup("layer", "gaussian", eps=1e-5)
  v = fi.gain_directions(th, glm)
  g = [v.T @ _jit(fi.fisher)(th, c * x, glm) @ v for c in (1e-3, 1.0)]
  assert _rel(g[0], g[1]) > 1e-2


@pytest.mark.parametrize("norm,output", CASES)
def test_doubling_w_quarters_the_weight_block(norm, output):
  """(b) Normalized: F_WW(2W) = F_WW(W) / 4, the (b, g) block unchanged, so ds^2
  of a fixed step in W falls to 1/4. Gaussian GLM: F does not depend on W."""
  th, x, glm = _setup(norm, output)
  w = fi.split(th, norm)[0]
  th2 = fi.with_weights(th, norm, 2 * w)
  f1, f2 = _jit(fi.fisher)(th, x, glm), _jit(fi.fisher)(th2, x, glm)
  d = fi.weight_step(th, glm, jnp.asarray(np.random.default_rng(1).normal(size=w.shape)))
  ratio = fi.ds2(f2, d) / fi.ds2(f1, d)
  mask = np.zeros(th.shape, bool)
  mask[:, :D] = True
  m = mask.reshape(-1)
  if norm == "none":
    if output == "gaussian":
      assert _rel(f2, f1) < 1e-12
    else:
      assert abs(ratio - 0.25) > 1e-2
    return
  np.testing.assert_allclose(ratio, 0.25, rtol=1e-10)
  assert _rel(np.asarray(f2)[np.ix_(m, m)], np.asarray(f1)[np.ix_(m, m)] / 4) < 1e-10
  assert _rel(np.asarray(f2)[np.ix_(~m, ~m)], np.asarray(f1)[np.ix_(~m, ~m)]) < 1e-10


@pytest.mark.parametrize("norm", ["batch", "weight"])
def test_doubling_one_weight_vector_quarters_its_curvature(norm):
  """Per-unit statistics: w_1 -> 2 w_1 quarters the w_1 block alone."""
  th, x, glm = _setup(norm, "softmax")
  w = fi.split(th, norm)[0]
  th2 = fi.with_weights(th, norm, w.at[0].multiply(2))
  f1, f2 = _jit(fi.fisher)(th, x, glm), _jit(fi.fisher)(th2, x, glm)
  p = fi.unit_size(norm, D)
  np.testing.assert_allclose(f2[:D, :D], f1[:D, :D] / 4, rtol=1e-10, atol=1e-14)
  np.testing.assert_allclose(f2[:D, p:], f1[:D, p:] / 2, rtol=1e-10, atol=1e-14)
  np.testing.assert_allclose(f2[p:, p:], f1[p:, p:], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("norm,output", [("layer", "softmax"), ("batch", "gaussian"),
                                         ("weight", "softmax"), ("none", "gaussian")])
def test_psd_and_monte_carlo(norm, output):
  th, x, glm = _setup(norm, output, seed=3)
  f = _jit(fi.fisher)(th, x, glm)
  ev = np.linalg.eigvalsh(np.asarray(f))
  assert ev[0] > -1e-12 * ev[-1]
  np.testing.assert_allclose(f, f.T, atol=1e-14)
  mc = jax.jit(fi.fisher_monte_carlo, static_argnums=(3, 4))(
      jax.random.PRNGKey(0), th, x, glm, 4000)
  # Entries relative to sqrt(F_pp F_qq): the small weight entries count too.
  sd = np.sqrt(np.diag(np.asarray(f)))
  def err(a):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(f)) / np.outer(sd, sd)))
  assert err(mc) < 0.1
  # The tolerance tells Fishers apart: that of inputs with features re-scaled fails it.
  assert err(_jit(fi.fisher)(th, x * jnp.asarray([[1.0, 2.0, 0.5]]), glm)) > 0.3


def test_bad_glm_is_a_value_error():
  with pytest.raises(ValueError, match="not valid"):
    fi.GLM("rms")
  with pytest.raises(ValueError, match="output"):
    fi.GLM("layer", "poisson")
  with pytest.raises(ValueError, match="phi"):
    fi.GLM("layer", "softmax", phi=2.0)
  with pytest.raises(ValueError, match="phi"):
    fi.GLM("layer", "gaussian", phi=0.0)
