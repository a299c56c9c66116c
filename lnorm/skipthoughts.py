"""Uni-skip skip-thought vectors (Kiros et al. 2015) with plain or
layer-normalized GRUs (paper §6.3; eqs. 23-25 and 26-28).

A sentence's tokens are embedded and read by a GRU encoder; its last state
(at the sentence's EOS) is the sentence vector u. Two GRU decoders, one for
the previous sentence and one for the next, read the target sentence shifted
right by one (teacher forcing, a zero vector first) and get u at every step,
as Kiros et al.'s paper describes the conditional GRU: C u added to each
gate's and the candidate's input projection, which is the GRU of eqs. 23-24
on the input [x_t; u]. (Their public training code instead starts the
decoders from u as the initial state and adds nothing per step.) As in that
code, one output layer turns both decoders' states into word logits, the
word embeddings are shared by the encoder and the decoders, and the loss is
the summed word negative log likelihood of both decoders over the batch
(a sum, not a mean: with gradient-norm clipping at 5 the scale matters).

``GRU`` computes what scanning ``recurrent.GRUCell(norm='none')`` or
``recurrent.GRUCell(norm='layer')`` over [x_t; context] computes, with the
same parameter names, shapes and initialisers. The GRU is the paper's
variant (the reset gate scales U h, eq. 24), not Kiros et al.'s U (r * h).
The input side (W_x x and its layer norm) is known for every step in
advance, so it is one matmul and one normalization before the scan; only
h @ [W_h | U] and what follows are scanned. With 'layer', LN(h @ k) is
computed as RMSNorm(h @ k') with k' = k minus its row means, which is exact
and needs one reduction a row instead of two.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax.linen import initializers
from flax.typing import Array

from lnorm import norms
from lnorm.data.books import PAD, Vocab
from lnorm.normalization import layer_norm
from lnorm.recurrent.cells import stacked
from lnorm.recurrent.lstm_scan import center

NORMS = norms.supported("none", "layer")


def _rms(a_BxF: Array, eps: float) -> Array:
  return a_BxF * jax.lax.rsqrt(jnp.mean(jnp.square(a_BxF), -1, keepdims=True) + eps)


class GRU(nn.Module):
  """A GRU over (B, T, I) inputs, with an optional (B, D) ``context`` appended
  to every step's input and an optional (B, T) ``mask`` (where False, the
  state is kept). Returns ``(h_last (B, H), h (B, T, H))``."""

  features: int
  norm: str = "none"
  eps: float = 1e-5

  @nn.compact
  def __call__(self, x_BxTxI: Array, mask_BxT: Array | None = None,
               context_BxD: Array | None = None) -> tuple[Array, Array]:
    norms.check(self.norm, NORMS)
    H, (B, T, I) = self.features, x_BxTxI.shape
    D = 0 if context_BxD is None else context_BxD.shape[-1]
    p, ones, zeros = self.param, initializers.ones_init(), initializers.zeros_init()
    lecun, orth = initializers.lecun_normal(), initializers.orthogonal()
    k_x = p("kernel_x", stacked(lecun, 2), (I + D, 2 * H))
    k_h = p("kernel_h", stacked(orth, 2), (H, 2 * H))
    k_xc = p("kernel_xc", stacked(lecun, 1), (I + D, H))
    k_hc = p("kernel_hc", stacked(orth, 1), (H, H))
    b_2H = p("bias", zeros, (2 * H,))
    layer = self.norm == "layer"
    if layer:
      g_h, g_x = p("gain_h", ones, (2 * H,)), p("gain_x", ones, (2 * H,))
      g_xc, b_xc = p("gain_xc", ones, (H,)), p("bias_xc", zeros, (H,))
      g_hc, b_hc = p("gain_hc", ones, (H,)), p("bias_hc", zeros, (H,))
    else:
      b_c = p("bias_c", zeros, (H,))

    k_x3 = jnp.concatenate([k_x, k_xc], -1)  # (I + D, 3H)
    x_TxBxI = jnp.swapaxes(x_BxTxI, 0, 1)
    xw_TxBx3H = x_TxBxI @ k_x3[:I]
    if context_BxD is not None:
      xw_TxBx3H = xw_TxBx3H + (context_BxD @ k_x3[I:])[None]
    xg_TxBx2H, xc_TxBxH = xw_TxBx3H[..., :2 * H], xw_TxBx3H[..., 2 * H:]
    if layer:
      xg_TxBx2H = layer_norm(xg_TxBx2H, g_x, eps=self.eps) + b_2H[None, None]
      xc_TxBxH = layer_norm(xc_TxBxH, g_xc, b_xc, eps=self.eps)
      k_h3 = jnp.concatenate([center(k_h), center(k_hc)], -1)
    else:
      xg_TxBx2H = xg_TxBx2H + b_2H[None, None]
      xc_TxBxH = xc_TxBxH + b_c[None, None]
      k_h3 = jnp.concatenate([k_h, k_hc], -1)
    m_TxBx1 = (jnp.ones((T, B, 1), bool) if mask_BxT is None
               else jnp.swapaxes(mask_BxT, 0, 1)[..., None])

    def step(h_BxH, inp):
      xg_Bx2H, xc_BxH, m_Bx1 = inp
      a_Bx3H = h_BxH @ k_h3
      ag_Bx2H, ac_BxH = a_Bx3H[:, :2 * H], a_Bx3H[:, 2 * H:]
      if layer:
        ag_Bx2H = _rms(ag_Bx2H, self.eps) * g_h[None]
        ac_BxH = _rms(ac_BxH, self.eps) * g_hc[None] + b_hc[None]
      z_BxH, r_BxH = jnp.split(jax.nn.sigmoid(ag_Bx2H + xg_Bx2H), 2, -1)
      hh_BxH = jnp.tanh(xc_BxH + r_BxH * ac_BxH)
      new_BxH = (1.0 - z_BxH) * h_BxH + z_BxH * hh_BxH
      new_BxH = jnp.where(m_Bx1, new_BxH, h_BxH)
      return new_BxH, new_BxH

    h0 = jnp.zeros((B, H), xw_TxBx3H.dtype)
    h_BxH, hs_TxBxH = jax.lax.scan(step, h0, (xg_TxBx2H, xc_TxBxH, m_TxBx1))
    return h_BxH, jnp.swapaxes(hs_TxBxH, 0, 1)


class SkipThoughts(nn.Module):
  """The uni-skip model. Token arrays are int32 (B, T), PAD = 0 after EOS."""

  vocab_size: int
  embed_dim: int = 620
  features: int = 2400
  norm: str = "none"
  eps: float = 1e-5

  def setup(self):
    norms.check(self.norm, NORMS)
    self.embed = nn.Embed(self.vocab_size, self.embed_dim,
                          embedding_init=initializers.normal(0.1))
    self.encoder = GRU(self.features, self.norm, self.eps)
    self.decoder_prev = GRU(self.features, self.norm, self.eps)
    self.decoder_next = GRU(self.features, self.norm, self.eps)
    self.logits = nn.Dense(self.vocab_size)

  def encode(self, tokens_BxT: Array) -> Array:
    """Sentence vectors (B, H): the encoder's state after the last token."""
    u_BxH, _ = self.encoder(self.embed(tokens_BxT), tokens_BxT != PAD)
    return u_BxH

  def decode(self, decoder: GRU, tokens_BxT: Array, u_BxH: Array) -> Array:
    """Logits (B, T, V) of each target token given the ones before it and u."""
    e_BxTxE = self.embed(tokens_BxT)
    shifted = jnp.concatenate([jnp.zeros_like(e_BxTxE[:, :1]), e_BxTxE[:, :-1]], 1)
    _, h_BxTxH = decoder(shifted, tokens_BxT != PAD, u_BxH)
    return self.logits(h_BxTxH)

  def __call__(self, prev_BxT: Array, cur_BxT: Array, next_BxT: Array
               ) -> tuple[Array, Array]:
    u_BxH = self.encode(cur_BxT)
    return (self.decode(self.decoder_prev, prev_BxT, u_BxH),
            self.decode(self.decoder_next, next_BxT, u_BxH))


def token_nll(logits_BxTxV: Array, tokens_BxT: Array) -> tuple[Array, Array]:
  """(summed NLL of the real tokens (B,), their count (B,))."""
  logp = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32))
  nll_BxT = -jnp.take_along_axis(logp, tokens_BxT[..., None], -1)[..., 0]
  m_BxT = (tokens_BxT != PAD).astype(jnp.float32)
  return (nll_BxT * m_BxT).sum(-1), m_BxT.sum(-1)


def loss(model: SkipThoughts, params, prev_BxT: Array, cur_BxT: Array, next_BxT: Array
         ) -> tuple[Array, dict[str, Array]]:
  """Kiros et al.'s objective: both decoders' NLL summed over words and the
  batch. Metrics: ``loss`` and, per word, ``nll_prev``, ``nll_next``, ``nll``."""
  lp, ln = model.apply({"params": params}, prev_BxT, cur_BxT, next_BxT)
  sp, np_ = token_nll(lp, prev_BxT)
  sn, nn_ = token_nll(ln, next_BxT)
  total = (sp + sn).sum()
  return total, {"loss": total, "nll_prev": sp.sum() / np_.sum(),
                 "nll_next": sn.sum() / nn_.sum(),
                 "nll": total / (np_.sum() + nn_.sum())}


def make_encoder(model: SkipThoughts, params, vocab: Vocab, *, batch_size: int = 256,
                 max_len: int = 64, buckets: Sequence[int] = (16, 32, 64)
                 ) -> Callable[[list[str]], np.ndarray]:
  """``encode(sentences) -> float32 (N, H)``, in fixed-shape jitted batches.
  Sentences are tokenised as the training text (``books.tokenize``) and cut
  to ``max_len - 1`` tokens plus EOS; each batch is padded to the smallest
  bucket that holds its longest sentence."""
  fn = jax.jit(lambda p, t: model.apply({"params": p}, t, method=SkipThoughts.encode))
  buckets = sorted({min(b, max_len) for b in buckets} | {max_len})

  def encode(sentences: list[str]) -> np.ndarray:
    toks = vocab.encode(list(sentences), max_len)
    lengths = (toks != PAD).sum(1)
    order = np.argsort(lengths, kind="stable")  # similar lengths share a batch
    out = np.zeros((len(toks), model.features), np.float32)
    for s in range(0, len(toks), batch_size):
      idx = order[s:s + batch_size]
      T = next(b for b in buckets if b >= lengths[idx].max())
      batch = np.zeros((batch_size, T), np.int32)
      batch[:len(idx)] = toks[idx, :T]
      out[idx] = np.asarray(fn(params, batch))[:len(idx)]
    return out

  return encode
