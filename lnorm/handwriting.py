r"""Graves' (2013, arXiv 1308.0850, section 5) handwriting synthesis network.

"Graves (n)" is an equation of Graves 2013; "eqs. 20-22" are Ba et al.'s. At
each pen point t, with x_t = (dx, dy, eos) the previous row (x_1 = 0) and c the
one-hot characters c_1..c_U:

    h1_t = LSTM1([x_t, w_{t-1}], h1_{t-1})
    (a^, b^, k^) = W h1_t + b,  each (K,)                           Graves (48)
    alpha = exp(a^), beta = exp(b^), kappa_t = kappa_{t-1} + exp(k^)   (49-51)
    phi(t, u) = sum_k alpha_k exp(-beta_k (kappa_k - u)^2)            (46)
    w_t = sum_u phi(t, u) c_u                                          (47)
    h2_t = LSTM2([x_t, w_t, h1_t]),  h3_t = LSTM3([x_t, w_t, h2_t])
    y_t = W_y [h1_t, h2_t, h3_t] + b_y: e^, pi^ (M), mu (2M), sigma^ (2M), rho^ (M)

and the next row's density is ``sigmoid(e^)`` for eos = 1 times a mixture of
M bivariate Gaussians, pi = softmax(pi^), sigma = exp(sigma^), rho = tanh(rho^)
(Graves (18)-(26); the sign of e^ is ours). At the paper's size (H = 400, K =
10, M = 20, 57 characters) this has 3,650,151 weights without normalization
(``count_params``), the paper's "about 3.7M".

``norm``: ``none``; ``layer``, the LN-LSTM of eqs. 20-22 in all three layers;
``layer_c``, LN on c_t only (eqs. 29-31); or any other norm of an LSTM
without running statistics (``accept``), where ``layer`` normalizes. Layer 1 and the window are one scan
(each step needs the last window); layers 2 and 3 see their whole input once
that scan has run, so they are ``recurrent.LSTM``, the fast sequence layer.
``SynthesisStep`` is the same network one point at a time, on the same
parameters, for sampling.

Choices Graves leaves open, made here: the bias of k^ starts at
``kappa_bias_init`` = -3 (exp(-3) ~ 1/20 characters a point; the lines here
have ~17 points a character), so the untrained window does not run off the
text in the first few points; the other weights use the defaults of
``flax.linen.Dense`` and ``recurrent``.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lnorm import norms, recurrent

Array = jax.Array


def accept(norm: object) -> norms.Norm:
  """The ``Norm`` of ``norm`` if the network's LSTMs take it (any norm of
  their gates or cell state without running statistics); else one
  ValueError line."""
  return norms.accept(norm, norms.GATES, norms.CELL, running_stats=False)



def _cell(features: int, norm: str, eps: float, name: str) -> nn.RNNCellBase:
  return recurrent.LSTMCell(features, norm=norm, eps=eps, name=name)


def num_outputs(num_mixtures: int) -> int:
  return 1 + 6 * num_mixtures


class Window(nn.Module):
  """Graves (46)-(51). Returns (kappa (B, K), w (B, C), phi (B, U)); ``phi``
  is over all U positions, ``w`` sums only those ``onehot_BxUxC`` holds."""
  num_window: int = 10
  kappa_bias_init: float = -3.0

  @nn.compact
  def __call__(self, h_BxH: Array, kappa_BxK: Array, onehot_BxUxC: Array):
    K = self.num_window

    def bias_init(key, shape, dtype=jnp.float32):
      return jnp.zeros(shape, dtype).at[2 * K:].set(self.kappa_bias_init)

    p_Bx3K = nn.Dense(3 * K, bias_init=bias_init, name="dense")(h_BxH)
    a_BxK, b_BxK, k_BxK = jnp.split(p_Bx3K, 3, axis=-1)
    kappa_BxK = kappa_BxK + jnp.exp(k_BxK)
    u_1x1xU = jnp.arange(1, onehot_BxUxC.shape[1] + 1, dtype=h_BxH.dtype)[None, None, :]
    phi_BxU = jnp.sum(
        jnp.exp(a_BxK)[..., None]
        * jnp.exp(-jnp.exp(b_BxK)[..., None] * jnp.square(kappa_BxK[..., None] - u_1x1xU)),
        axis=1)
    w_BxC = jnp.einsum("bu,buc->bc", phi_BxU, onehot_BxUxC)
    return kappa_BxK, w_BxC, phi_BxU


class _Layer1Step(nn.Module):
  """One step of layer 1 and the window. Carry ((c, h), kappa, w)."""
  hidden: int
  num_window: int
  norm: str
  eps: float
  kappa_bias_init: float

  @nn.compact
  def __call__(self, carry, x_Bx3: Array, m_B: Array | None, onehot_BxUxC: Array):
    ch, kappa_BxK, w_BxC = carry
    ch_new, h1_BxH = _cell(self.hidden, self.norm, self.eps, "cell")(
        ch, jnp.concatenate([x_Bx3, w_BxC], -1))
    kappa_new, w_new, phi_BxU = Window(self.num_window, self.kappa_bias_init, name="window")(
        h1_BxH, kappa_BxK, onehot_BxUxC)
    new = (ch_new, kappa_new, w_new)
    if m_B is not None:  # past a line's end the carry stays as it was
      new = jax.tree_util.tree_map(lambda a, b: jnp.where(
          m_B.reshape(m_B.shape + (1,) * (a.ndim - 1)), a, b), new, carry)
    return new, (h1_BxH, w_new, phi_BxU, kappa_new)


def _onehot(chars_BxU: Array, char_mask_BxU: Array | None, num_chars: int) -> Array:
  oh = jax.nn.one_hot(chars_BxU, num_chars, dtype=jnp.float32)
  if char_mask_BxU is not None:
    oh = oh * char_mask_BxU[..., None].astype(oh.dtype)
  return oh


class _Config(nn.Module):
  hidden: int = 400
  num_layers: int = 3
  num_window: int = 10
  num_mixtures: int = 20
  num_chars: int = 57
  norm: str = "none"
  eps: float = 1e-5
  kappa_bias_init: float = -3.0

  def _layer1(self):
    return dict(hidden=self.hidden, num_window=self.num_window, norm=self.norm,
                eps=self.eps, kappa_bias_init=self.kappa_bias_init, name="layer1")

  def initial_carry(self, batch: int):
    z = jnp.zeros((batch, self.hidden), jnp.float32)
    return ((z, z), jnp.zeros((batch, self.num_window), jnp.float32),
            jnp.zeros((batch, self.num_chars), jnp.float32))


class Synthesis(_Config):
  """The network over whole sequences.

  ``__call__(inputs (B, T, 3), chars (B, U) int, char_mask (B, U), mask (B, T))``
  returns a dict: ``out`` (B, T, 1 + 6M) (see ``mixture``), ``phi`` (B, T, U),
  ``kappa`` (B, T, K). Where ``mask`` is False the carries are frozen and
  the outputs are meaningless: the loss masks them.
  """

  @nn.compact
  def __call__(self, inputs_BxTx3: Array, chars_BxU: Array, char_mask_BxU: Array | None = None,
               mask_BxT: Array | None = None) -> dict[str, Array]:
    accept(self.norm)
    B = inputs_BxTx3.shape[0]
    onehot = _onehot(chars_BxU, char_mask_BxU, self.num_chars)
    scan = nn.scan(_Layer1Step, variable_broadcast="params", split_rngs={"params": False},
                   in_axes=(1, 1 if mask_BxT is not None else nn.broadcast, nn.broadcast),
                   out_axes=1)
    m = None if mask_BxT is None else jnp.asarray(mask_BxT, bool)
    _, (h1, w, phi, kappa) = scan(**self._layer1())(self.initial_carry(B), inputs_BxTx3, m, onehot)
    hs, h = [h1], h1
    for k in range(2, self.num_layers + 1):
      h = recurrent.LSTM(self.hidden, norm=self.norm, eps=self.eps, name=f"lstm{k}")(
          jnp.concatenate([inputs_BxTx3, w, h], -1), m)
      hs.append(h)
    out = nn.Dense(num_outputs(self.num_mixtures), name="head")(jnp.concatenate(hs, -1))
    return {"out": out, "phi": phi, "kappa": kappa}


class SynthesisStep(_Config):
  """One point of ``Synthesis`` on its parameters: ``(carry, x (B, 3),
  onehot (B, U, C)) -> (carry, out (B, 1 + 6M), phi (B, U))``; the carry is
  ``(layer-1 carry, (c, h) of each further layer)``, zeros from ``zero_carry``."""

  def zero_carry(self, batch: int):
    z = jnp.zeros((batch, self.hidden), jnp.float32)
    return (self.initial_carry(batch), tuple((z, z) for _ in range(self.num_layers - 1)))

  @nn.compact
  def __call__(self, carry, x_Bx3: Array, onehot_BxUxC: Array):
    accept(self.norm)
    c1, rest = carry
    c1, (h1, w, phi, _) = _Layer1Step(**self._layer1())(c1, x_Bx3, None, onehot_BxUxC)
    hs, h, new_rest = [h1], h1, []
    for k, ch in zip(range(2, self.num_layers + 1), rest):
      ch, h = _cell(self.hidden, self.norm, self.eps, f"lstm{k}")(
          ch, jnp.concatenate([x_Bx3, w, h], -1))
      new_rest.append(ch)
      hs.append(h)
    out = nn.Dense(num_outputs(self.num_mixtures), name="head")(jnp.concatenate(hs, -1))
    return (c1, tuple(new_rest)), out, phi


# ---------------------------------------------------------------- the density


def mixture(out: Array, num_mixtures: int, bias: float = 0.0) -> dict[str, Array]:
  """Splits ``out`` (..., 1 + 6M): e_logit (...,), log_pi, mu1, mu2,
  log_sigma1, log_sigma2, rho_hat (..., M). ``bias`` is Graves' sampling bias
  (section 5.4): pi = softmax(pi^ (1 + b)), sigma = exp(sigma^ - b)."""
  M = num_mixtures
  e, pi, mu1, mu2, ls1, ls2, r = jnp.split(out, np.cumsum([1, M, M, M, M, M]), axis=-1)
  return {"e_logit": e[..., 0], "log_pi": jax.nn.log_softmax(pi * (1.0 + bias), -1),
          "mu1": mu1, "mu2": mu2, "log_sigma1": ls1 - bias, "log_sigma2": ls2 - bias,
          "rho_hat": r}


def _log1m_tanh2(r: Array) -> Array:
  """log(1 - tanh(r)^2) = 2 log sech(r), without cancelling for large |r|."""
  a = jnp.abs(r)
  return 2.0 * (math.log(2.0) - a - jnp.log1p(jnp.exp(-2.0 * a)))


def nll(out: Array, targets: Array, num_mixtures: int) -> Array:
  """-log p(target | out) per point, nats: out (..., 1 + 6M), targets (..., 3)."""
  p = mixture(out, num_mixtures)
  x1, x2, eos = targets[..., 0:1], targets[..., 1:2], targets[..., 2]
  z1 = (x1 - p["mu1"]) * jnp.exp(-p["log_sigma1"])
  z2 = (x2 - p["mu2"]) * jnp.exp(-p["log_sigma2"])
  rho = jnp.tanh(p["rho_hat"])
  l1m = _log1m_tanh2(p["rho_hat"])
  log_n = (-math.log(2 * math.pi) - p["log_sigma1"] - p["log_sigma2"] - 0.5 * l1m
           - (z1 * z1 + z2 * z2 - 2.0 * rho * z1 * z2) * 0.5 * jnp.exp(-l1m))
  log_xy = jax.nn.logsumexp(p["log_pi"] + log_n, axis=-1)
  e = p["e_logit"]
  log_e = jnp.where(eos > 0.5, -jax.nn.softplus(-e), -jax.nn.softplus(e))
  return -(log_xy + log_e)


@jax.custom_vjp
def clip_gradient(x: Array, bound: Array) -> Array:
  """Identity forward; the backward clips the cotangent to [-bound, bound]
  (Graves section 5: the derivatives w.r.t. the network outputs)."""
  return x


def _clip_fwd(x, bound):
  return x, bound


def _clip_bwd(bound, g):
  return jnp.clip(g, -bound, bound), jnp.zeros_like(bound)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


# ---------------------------------------------------------------- sampling


def sample_point(key: Array, out_Bx: Array, num_mixtures: int, bias: float) -> Array:
  """One row (B, 3) drawn from the density of ``out`` (B, 1 + 6M)."""
  p = mixture(out_Bx, num_mixtures, bias)
  k_pi, k_n, k_e = jax.random.split(key, 3)
  j_B = jax.random.categorical(k_pi, p["log_pi"], axis=-1)
  pick = lambda a: jnp.take_along_axis(a, j_B[:, None], -1)[:, 0]
  n1, n2 = jax.random.normal(k_n, (2,) + j_B.shape)
  s1, s2 = jnp.exp(pick(p["log_sigma1"])), jnp.exp(pick(p["log_sigma2"]))
  rho = jnp.tanh(pick(p["rho_hat"]))
  x1 = pick(p["mu1"]) + s1 * n1
  x2 = pick(p["mu2"]) + s2 * (rho * n1 + jnp.sqrt(1.0 - rho * rho) * n2)
  eos = jax.random.bernoulli(k_e, jax.nn.sigmoid(p["e_logit"])).astype(x1.dtype)
  return jnp.stack([x1, x2, eos], -1)


@functools.partial(jax.jit, static_argnames=("step", "num_steps"))
def sample(step: SynthesisStep, params, key: Array, chars_BxU: Array, char_mask_BxU: Array,
           num_steps: int, bias: float | Array = 0.0) -> dict[str, Array]:
  """Writes the texts: rows (B, num_steps, 3) and phi (B, num_steps, U + 1).

  ``end`` (B,) is Graves' stop, the first step where phi(t, U + 1) exceeds
  phi(t, u) for every character u of the text (``num_steps`` if never); the
  one extra position past the longest text is there for it.
  """
  B = chars_BxU.shape[0]
  chars = jnp.pad(chars_BxU, ((0, 0), (0, 1)))
  cmask = jnp.pad(char_mask_BxU, ((0, 0), (0, 1)))
  onehot = _onehot(chars, cmask, step.num_chars)
  lengths = jnp.sum(char_mask_BxU, -1)

  def body(state, key):
    carry, x = state
    carry, out, phi = step.apply(params, carry, x, onehot)
    x = sample_point(key, out, step.num_mixtures, bias)
    return (carry, x), (x, phi)

  init = (step.zero_carry(B), jnp.zeros((B, 3), jnp.float32))
  _, (rows, phi) = jax.lax.scan(body, init, jax.random.split(key, num_steps))
  rows, phi = jnp.moveaxis(rows, 0, 1), jnp.moveaxis(phi, 0, 1)
  u = jnp.arange(phi.shape[-1])
  inside = u[None, None, :] < lengths[:, None, None]
  after = jnp.take_along_axis(phi, lengths[:, None, None].repeat(num_steps, 1), -1)[..., 0]
  done = after > jnp.max(jnp.where(inside, phi, -jnp.inf), -1)
  end = jnp.where(jnp.any(done, -1), jnp.argmax(done, -1), num_steps)
  return {"rows": rows, "phi": phi, "end": end}


def count_params(params) -> int:
  return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(params))
