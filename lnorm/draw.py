r"""DRAW (Gregor et al. 2015, arXiv 1502.04623) with plain or layer-normalized LSTMs.

"DRAW (n)" below is an equation of Gregor et al.; "eqs. 29-31" are Ba et al.'s.
For t = 1..T, with x an image of H x W pixels (DRAW's B x A):

    x^_t = x - sigmoid(c_{t-1})                                    DRAW (3)
    r_t = read(x, x^_t, h^dec_{t-1})                               DRAW (4)
    h^enc_t = RNN^enc(h^enc_{t-1}, [r_t, h^dec_{t-1}])             DRAW (5)
    z_t = mu_t + sigma_t * eps_t,  (mu_t, log sigma_t) = W(h^enc_t)  DRAW (1, 6)
    h^dec_t = RNN^dec(h^dec_{t-1}, z_t)                            DRAW (7)
    c_t = c_{t-1} + write(h^dec_t)                                 DRAW (8)

The loss is the negative variational bound in nats, per image:
``-log D(x | sigmoid(c_T)) + sum_t KL(N(mu_t, sigma_t^2) || N(0, I))``
(DRAW (9)-(12), Bernoulli D). Reading and writing use selective attention
(DRAW section 3.2): N x N Gaussian filterbanks placed by five numbers
computed from h^dec.

``norm`` selects the LSTM, ``LSTMCell(norm=...)``: ``none``, ``layer_c`` (the
paper's DRAW variant, LN on c_t only, eqs. 29-31), ``layer`` (the LN-LSTM of
eqs. 20-22), or any other norm of an LSTM without running statistics
(``accept``).

Choices DRAW's paper leaves open, made here:

* Pixel coordinates run 1..W (and 1..H), so that ``g~ = 0`` centres a glimpse
  exactly: DRAW (22) puts it at (W + 1) / 2.
* Each filter is normalised with a softmax over the image axis: the same as
  dividing by Z_X (DRAW (25)) wherever that sum does not underflow, and rows
  that sum to 1 when it would (a sharp filter off the image).
* The kernels of the write patch and of the posterior's (mu, log sigma) start
  at lecun_normal / 10 (``out_kernel_init``), so the untrained model writes
  almost nothing (every pixel p ~ 1/2) and q is close to the prior: the bound
  starts within ~2% of 784 ln 2 = 543.4 nats (lecun_normal: ~600 nats
  without LN, ~1600 with LN at T = 64, from the KL). Zero kernels would give
  exactly 543.4 but cut the path from x to the canvas at the first step; in
  our runs the baseline's posterior then collapsed (KL -> 0, the mean image,
  ~206 nats).
* c_0, h^enc_0 and h^dec_0 (and the LSTM cells' c) are learned, as DRAW says,
  starting at 0.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.typing import Initializer

from lnorm import norms, recurrent

Array = jax.Array


def accept(norm: object) -> norms.Norm:
  """The ``Norm`` of ``norm`` if DRAW's LSTM cells take it (any norm of their
  gates or cell state without running statistics); else one ValueError line."""
  return norms.accept(norm, norms.GATES, norms.CELL, running_stats=False)

# (canvas c_t of DRAW (8) as logits [B, H*W], encoder (c, h), decoder (c, h)).
Carry = tuple[Array, tuple[Array, Array], tuple[Array, Array]]


def make_cell(norm: str, features: int, eps: float = 1e-5) -> nn.RNNCellBase:
  accept(norm)
  return recurrent.LSTMCell(features, norm=norm, eps=eps)


class Attention(NamedTuple):
  """Where and how an N x N glimpse looks; each field is [B]."""
  g_x: Array      # grid centre, pixels 1..W
  g_y: Array      # grid centre, pixels 1..H
  delta: Array    # stride between filter centres, pixels
  sigma2: Array   # variance of each Gaussian filter, pixels^2
  gamma: Array    # intensity: read multiplies by it, write divides by it


def attention_params(a_Bx5: Array, height: int, width: int, n: int) -> Attention:
  """DRAW (21)-(24): (g~_X, g~_Y, log sigma^2, log delta~, log gamma) -> Attention."""
  gx_t, gy_t, log_sigma2, log_delta_t, log_gamma = jnp.moveaxis(a_Bx5, -1, 0)
  # n = 1 has one filter: its stride is never used.
  delta = (max(height, width) - 1) / max(n - 1, 1) * jnp.exp(log_delta_t)
  return Attention(g_x=(width + 1) / 2 * (gx_t + 1), g_y=(height + 1) / 2 * (gy_t + 1),
                   delta=delta, sigma2=jnp.exp(log_sigma2), gamma=jnp.exp(log_gamma))


def filter_centres(g_B: Array, delta_B: Array, n: int) -> Array:
  """DRAW (19)-(20): mu^i = g + (i - N/2 - 1/2) delta for i = 1..N; [B, N]."""
  offset_N = jnp.arange(1, n + 1, dtype=g_B.dtype) - n / 2 - 0.5
  return g_B[:, None] + delta_B[:, None] * offset_N[None, :]


def filterbank(g_B: Array, delta_B: Array, sigma2_B: Array, n: int, size: int) -> Array:
  """DRAW (25)-(26): F[b, i, a] ~ exp(-(a - mu^i)^2 / (2 sigma^2)), a = 1..size.

  Each row is normalised to sum to 1 over the image axis a; [B, N, size].
  """
  mu_BxN = filter_centres(g_B, delta_B, n)
  a_S = jnp.arange(1, size + 1, dtype=mu_BxN.dtype)
  d_BxNxS = a_S[None, None, :] - mu_BxN[:, :, None]
  return jax.nn.softmax(-jnp.square(d_BxNxS) / (2 * sigma2_B[:, None, None]), axis=-1)


def filterbanks(att: Attention, height: int, width: int, n: int
                ) -> tuple[Array, Array]:
  """(F_X [B, N, W], F_Y [B, N, H]) of one glimpse."""
  return (filterbank(att.g_x, att.delta, att.sigma2, n, width),
          filterbank(att.g_y, att.delta, att.sigma2, n, height))


def read(x_BxHxW: Array, xhat_BxHxW: Array, att: Attention, n: int) -> Array:
  """DRAW (27): gamma [F_Y x F_X^T, F_Y x^ F_X^T], flattened to [B, 2 N^2]."""
  B, H, W = x_BxHxW.shape
  fx_BxNxW, fy_BxNxH = filterbanks(att, H, W, n)

  def glimpse(img_BxHxW):
    return jnp.einsum("bnh,bhw,bmw->bnm", fy_BxNxH, img_BxHxW, fx_BxNxW).reshape(B, -1)

  both_Bx2NN = jnp.concatenate([glimpse(x_BxHxW), glimpse(xhat_BxHxW)], axis=-1)
  return att.gamma[:, None] * both_Bx2NN


def write(w_BxNxN: Array, att: Attention, height: int, width: int) -> Array:
  """DRAW (29): 1/gamma F_Y^T w F_X, the patch placed on the canvas; [B, H, W]."""
  fx_BxNxW, fy_BxNxH = filterbanks(att, height, width, w_BxNxN.shape[-1])
  patch = jnp.einsum("bnh,bnm,bmw->bhw", fy_BxNxH, w_BxNxN, fx_BxNxW)
  return patch / att.gamma[:, None, None]


def gaussian_kl(mu_BxZ: Array, log_sigma_BxZ: Array) -> Array:
  """KL(N(mu, sigma^2) || N(0, I)) in nats, summed over the latent; [B]. DRAW (11)."""
  return 0.5 * jnp.sum(jnp.square(mu_BxZ) + jnp.exp(2 * log_sigma_BxZ)
                       - 2 * log_sigma_BxZ - 1, axis=-1)


def bernoulli_nll(logits_BxD: Array, x_BxD: Array) -> Array:
  """-log Bernoulli(x; sigmoid(logits)) in nats, summed over pixels; [B]. DRAW (9)."""
  return jnp.sum(jax.nn.softplus(logits_BxD) - x_BxD * logits_BxD, axis=-1)


class DRAW(nn.Module):
  """The DRAW network. ``__call__`` encodes and returns what the bound needs;
  ``generate`` draws from the prior.

  Params: ``encoder`` / ``decoder`` (the cells), ``read_attention`` and
  ``write_attention`` (Dense to 5), ``write_patch`` (Dense to N_w^2),
  ``posterior`` (Dense to 2Z: mu, log sigma), ``canvas_0`` [H*W] and
  ``{enc,dec}_{c,h}_0`` [features].
  """

  num_glimpses: int = 64
  features: int = 256
  latent: int = 100
  read_n: int = 2
  write_n: int = 5
  norm: str = "layer_c"
  image_shape: tuple[int, int] = (28, 28)
  eps: float = 1e-5
  # write_patch and posterior: lecun_normal / 10 (see the module docstring).
  out_kernel_init: Initializer = nn.initializers.variance_scaling(0.01, "fan_in", "normal")

  def setup(self):
    self.encoder = make_cell(self.norm, self.features, self.eps)
    self.decoder = make_cell(self.norm, self.features, self.eps)
    self.read_attention = nn.Dense(5)
    self.write_attention = nn.Dense(5)
    self.write_patch = nn.Dense(self.write_n ** 2, kernel_init=self.out_kernel_init)
    self.posterior = nn.Dense(2 * self.latent, kernel_init=self.out_kernel_init)
    zeros = nn.initializers.zeros
    self.canvas_0 = self.param("canvas_0", zeros, (math.prod(self.image_shape),))
    self.state_0 = {k: self.param(f"{k}_0", zeros, (self.features,))
                    for k in ("enc_c", "enc_h", "dec_c", "dec_h")}

  def _initial(self, batch: int) -> Carry:
    def rows(v_F):
      return jnp.broadcast_to(v_F[None, :], (batch, v_F.shape[0]))
    s = self.state_0
    return (rows(self.canvas_0), (rows(s["enc_c"]), rows(s["enc_h"])),
            (rows(s["dec_c"]), rows(s["dec_h"])))

  def _write(self, h_dec_BxF: Array) -> Array:
    H, W = self.image_shape
    B, n = h_dec_BxF.shape[0], self.write_n
    att = attention_params(self.write_attention(h_dec_BxF), H, W, n)
    w_BxNxN = self.write_patch(h_dec_BxF).reshape(B, n, n)
    return write(w_BxNxN, att, H, W).reshape(B, H * W)

  def _glimpse(self, carry: Carry, inputs: tuple[Array, Array]
               ) -> tuple[Carry, Array]:
    x_BxD, eps_BxZ = inputs
    canvas_BxD, enc, dec = carry
    H, W = self.image_shape
    B = x_BxD.shape[0]
    xhat_BxD = x_BxD - jax.nn.sigmoid(canvas_BxD)
    h_dec_BxF = dec[1]
    att = attention_params(self.read_attention(h_dec_BxF), H, W, self.read_n)
    r_Bx2NN = read(x_BxD.reshape(B, H, W), xhat_BxD.reshape(B, H, W), att, self.read_n)
    enc, h_enc_BxF = self.encoder(enc, jnp.concatenate([r_Bx2NN, h_dec_BxF], axis=-1))
    mu_BxZ, log_sigma_BxZ = jnp.split(self.posterior(h_enc_BxF), 2, axis=-1)
    z_BxZ = mu_BxZ + jnp.exp(log_sigma_BxZ) * eps_BxZ
    dec, h_dec_BxF = self.decoder(dec, z_BxZ)
    canvas_BxD = canvas_BxD + self._write(h_dec_BxF)
    return (canvas_BxD, enc, dec), gaussian_kl(mu_BxZ, log_sigma_BxZ)

  def _dream(self, carry: Carry, z_BxZ: Array) -> tuple[Carry, Array]:
    canvas_BxD, enc, dec = carry
    dec, h_dec_BxF = self.decoder(dec, z_BxZ)
    canvas_BxD = canvas_BxD + self._write(h_dec_BxF)
    return (canvas_BxD, enc, dec), canvas_BxD

  def __call__(self, x_BxD: Array, eps_BxTxZ: Array) -> tuple[Array, Array]:
    """(final canvas logits [B, H*W], KL of each glimpse [T, B]).

    ``x`` holds pixels in [0, 1]; ``eps`` ~ N(0, I) is the reparameterisation
    noise, so the model itself draws nothing.
    """
    self._check(eps_BxTxZ)
    x_BxD = x_BxD.astype(jnp.float32)
    steps = nn.scan(lambda mdl, c, e: mdl._glimpse(c, (x_BxD, e)),
                    variable_broadcast="params", split_rngs={"params": False})
    (canvas_BxD, _, _), kl_TxB = steps(self, self._initial(x_BxD.shape[0]),
                                       jnp.swapaxes(eps_BxTxZ, 0, 1))
    return canvas_BxD, kl_TxB

  def generate(self, z_BxTxZ: Array) -> Array:
    """Canvas logits after each glimpse, [B, T, H*W], for z_t ~ N(0, I)."""
    self._check(z_BxTxZ)
    steps = nn.scan(lambda mdl, c, z: mdl._dream(c, z),
                    variable_broadcast="params", split_rngs={"params": False})
    _, canvas_TxBxD = steps(self, self._initial(z_BxTxZ.shape[0]),
                            jnp.swapaxes(z_BxTxZ, 0, 1))
    return jnp.swapaxes(canvas_TxBxD, 0, 1)

  def _check(self, e_BxTxZ: Array) -> None:
    if e_BxTxZ.shape[1:] != (self.num_glimpses, self.latent):
      raise ValueError(f"noise has shape {e_BxTxZ.shape}; expected (batch, "
                       f"{self.num_glimpses}, {self.latent})")

  @nn.nowrap
  def noise_shape(self, batch: int) -> tuple[int, int, int]:
    return (batch, self.num_glimpses, self.latent)


def negative_bound(canvas_BxD: Array, kl_TxB: Array, x_BxD: Array
                   ) -> tuple[Array, Array]:
  """(reconstruction NLL [B], KL summed over glimpses [B]); their sum is the
  negative variational bound of each image in nats."""
  return bernoulli_nll(canvas_BxD, x_BxD.astype(canvas_BxD.dtype)), jnp.sum(kl_TxB, 0)
