r"""The attentive reader (Hermann et al. 2015, section 4) as Cooijmans et al.
(2016, section 5.4) and Ba et al. (2016, section 6.2) ran it: unidirectional.

For a passage x_1..x_T and a query q_1..q_S (token ids, padded, with masks):

    y_t = LSTM_d(E x)_t                   passage encoder, every step  [B, T, H]
    u   = LSTM_q(E q)_S                   query encoder, last real step  [B, H]
    m_t = tanh(W_ym y_t + W_um u)                                         [B, T, A]
    s_t = softmax_t(w_ms . m_t)           over the passage's real tokens
    r   = sum_t s_t y_t                                                   [B, H]
    g   = tanh(W_rg r + W_ug u)                                           [B, H]
    p(a | d, q) = softmax_a(W_ga g)       over the entities in the passage

``norm`` selects the LSTMs: ``none``; ``layer``, the LN-LSTM of eqs. 20-22
(``recurrent.LSTM(norm='layer')``), gains starting at ``ln_gain_init`` (1.0;
the paper's ablation is 0.1); ``batch``, the recurrent BN-LSTM of Cooijmans
et al. with per-time-step statistics, gains starting at ``bn_gain_init``
(0.1); any other norm of an LSTM (``accept``) as ``layer``, its gains at
``ln_gain_init``. ``bn_everywhere`` (with ``norm='batch'``: Cooijmans' "BN-everywhere")
also batch-normalizes each term going into the two tanh above (W_ym y_t over
the real tokens, W_um u, W_rg r, W_ug u), with the same gain init and a
bias only where no other term brings one.

Padding: embeddings of masked tokens are zeroed before the LSTMs, which
freeze their carry there, and attention gives them weight 0, so no padded
token's id can change the output. (A BN-LSTM's per-step statistics do include
the padded rows of each step: batch norm itself is not masked.)
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen import initializers

from lnorm import norms, recurrent

Array = jax.Array


def accept(norm: object) -> norms.Norm:
  """The ``Norm`` of ``norm`` if the reader's LSTMs take it (any norm of
  their gates or cell state); else one ValueError line."""
  return norms.accept(norm, norms.GATES, norms.CELL)

# A finite stand-in for -inf: an all-masked row gives a finite loss, not NaN.
_NEG = -1e30


class MaskedBatchNorm(nn.Module):
  """Batch norm over all axes but the last, counting only rows where ``mask``
  is True; running averages in ``batch_stats`` as flax's BatchNorm keeps them."""
  gain_init: float = 0.1
  use_bias: bool = False
  momentum: float = 0.99
  eps: float = 1e-5

  @nn.compact
  def __call__(self, x: Array, mask: Array | None, train: bool) -> Array:
    F = x.shape[-1]
    gain = self.param("gain", initializers.constant(self.gain_init), (F,))
    mean_ra = self.variable("batch_stats", "mean", lambda: jnp.zeros((F,), jnp.float32))
    var_ra = self.variable("batch_stats", "var", lambda: jnp.ones((F,), jnp.float32))
    x32 = x.astype(jnp.float32)
    row = lambda v: v.reshape((1,) * (x.ndim - 1) + (F,))
    if train:
      w = (jnp.ones(x.shape[:-1], jnp.float32) if mask is None
           else mask.astype(jnp.float32))[..., None]
      axes = tuple(range(x.ndim - 1))
      n = jnp.maximum(jnp.sum(w), 1.0)
      mean = jnp.sum(w * x32, axes) / n
      var = jnp.sum(w * jnp.square(x32 - row(mean)), axes) / n
      if not self.is_initializing():
        m = self.momentum
        mean_ra.value = m * mean_ra.value + (1 - m) * mean
        var_ra.value = m * var_ra.value + (1 - m) * var
    else:
      mean, var = mean_ra.value, var_ra.value
    y = (x32 - row(mean)) * row(jax.lax.rsqrt(var + self.eps) * gain)
    if self.use_bias:
      y = y + row(self.param("bias", initializers.zeros_init(), (F,)))
    return y.astype(x.dtype)


def _bn_lstm_cell(norm: str, features: int, max_steps: int, train: bool, gain_init: float,
                  eps: float) -> nn.RNNCellBase:
  return recurrent.LSTMCell(features=features, norm=norm, max_steps=max_steps,
                            use_running_average=not train, gain_init=gain_init, eps=eps)


class Encoder(nn.Module):
  """An LSTM over (B, T, I) with a (B, T) mask -> (outputs [B, T, H], the
  output after each sequence's last real step [B, H])."""
  features: int
  norm: str
  bn_gain_init: float = 0.1
  ln_gain_init: float = 1.0
  eps: float = 1e-5
  max_steps: int | None = None  # BN's per-step statistics; None: x's length

  @nn.compact
  def __call__(self, x: Array, mask: Array, train: bool) -> tuple[Array, Array]:
    if norms.get(self.norm).running_stats:  # per-step statistics: the cell's scan
      cell = _bn_lstm_cell(self.norm, self.features, self.max_steps or x.shape[-2], train,
                           self.bn_gain_init, self.eps)
      carry, y = recurrent.Recurrent(cell, name="lstm")(x, mask)
      return y, carry[1]
    (_, h), y = recurrent.LSTM(self.features, norm=self.norm, eps=self.eps,
                               gain_init=self.ln_gain_init, return_carry=True,
                               name="lstm")(x, mask)
    return y, h


class AttentiveReader(nn.Module):
  """Logits [B, num_entities] (``_NEG`` outside the passage's entities)."""
  vocab_size: int
  num_entities: int
  features: int = 240    # H: units of each LSTM, and of g
  embed: int = 240       # word embedding size
  attention: int = 240   # A: size of m_t
  norm: str = "none"
  bn_everywhere: bool = False
  bn_gain_init: float = 0.1
  ln_gain_init: float = 1.0  # where the LSTMs' LN gains start (norm='layer')
  eps: float = 1e-5
  # Time steps with BN statistics of their own (norm='batch'); None: the
  # input's length. Fixed, so that batches cut shorter share the variables.
  passage_steps: int | None = None
  query_steps: int | None = None

  @nn.compact
  def __call__(self, passage: Array, passage_mask: Array, query: Array, query_mask: Array,
               candidates: Array, train: bool = False) -> Array:
    if not accept(self.norm).running_stats and self.bn_everywhere:
      raise ValueError("bn_everywhere needs norm='batch'")
    emb = nn.Embed(self.vocab_size, self.embed, name="embed")
    x_d = emb(passage) * passage_mask[..., None].astype(jnp.float32)
    x_q = emb(query) * query_mask[..., None].astype(jnp.float32)
    enc = lambda name, steps: Encoder(self.features, self.norm, self.bn_gain_init,
                                      self.ln_gain_init, self.eps, steps, name=name)
    y_BxTxH, _ = enc("passage", self.passage_steps)(x_d, passage_mask, train)
    _, u_BxH = enc("query", self.query_steps)(x_q, query_mask, train)

    def term(name: str, v: Array, features: int, mask: Array | None = None,
             bias: bool = False) -> Array:
      """W v, batch-normalized with bn_everywhere; ``bias``: this term
      carries the sum's bias."""
      if not self.bn_everywhere:
        return nn.Dense(features, use_bias=bias, name=name)(v)
      w = nn.Dense(features, use_bias=False, name=name)(v)
      return MaskedBatchNorm(self.bn_gain_init, use_bias=bias, eps=self.eps,
                             name=name + "_bn")(w, mask, train)

    A = self.attention
    wy_BxTxA = term("W_ym", y_BxTxH, A, passage_mask, bias=True)
    wu_BxA = term("W_um", u_BxH, A)
    m_BxTxA = jnp.tanh(wy_BxTxA + wu_BxA[:, None, :])
    e_BxT = nn.Dense(1, use_bias=False, name="w_ms")(m_BxTxA)[..., 0]
    s_BxT = jax.nn.softmax(jnp.where(passage_mask, e_BxT, _NEG), axis=-1)
    s_BxT = jnp.where(passage_mask, s_BxT, 0.0)
    self.sow("intermediates", "attention", s_BxT)
    r_BxH = jnp.einsum("bt,bth->bh", s_BxT, y_BxTxH)
    g_BxH = jnp.tanh(term("W_rg", r_BxH, self.features, bias=True)
                     + term("W_ug", u_BxH, self.features))
    logits_BxE = nn.Dense(self.num_entities, name="W_ga")(g_BxH)
    return jnp.where(candidates, logits_BxE, _NEG)


def init(model: AttentiveReader, rng: jax.Array, inputs: tuple[Array, ...],
         ln_gain_init: float | None = None) -> dict[str, Any]:
  """``model.init`` on ``inputs`` (passage, passage_mask, query, query_mask,
  candidates), the LSTMs' LN gains starting at ``ln_gain_init`` if given
  (else at the model's ``ln_gain_init``)."""
  if ln_gain_init is not None:
    model = model.clone(ln_gain_init=ln_gain_init)
  return dict(model.init(rng, *inputs, train=False))


def loss_and_error(logits_BxE: Array, answer_B: Array, weight_B: Array | None = None
                   ) -> tuple[Array, Array]:
  """Summed cross-entropy and summed errors (argmax != answer), weighted."""
  logp = jax.nn.log_softmax(logits_BxE, axis=-1)
  nll_B = -jnp.take_along_axis(logp, answer_B[:, None], axis=-1)[:, 0]
  err_B = (jnp.argmax(logits_BxE, -1) != answer_B).astype(jnp.float32)
  w = jnp.ones_like(nll_B) if weight_B is None else weight_B.astype(jnp.float32)
  return jnp.sum(w * nll_B), jnp.sum(w * err_B)
