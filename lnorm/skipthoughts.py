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

The GRUs are ``recurrent.GRU``, the paper's variant (the reset gate scales
U h, eq. 24), not Kiros et al.'s U (r * h); the decoders get u through its
``context``. Where a sentence has ended (PAD), the encoder's state is kept
and the decoders' outputs are 0, which the loss does not count.

Two baselines for what the GRU encoder adds (Table 3's baseline rows), over
the same tokens (``Vocab.encode``, cut to ``max_len - 1`` words) and the
same vocabulary: ``make_embedding_mean_encoder``, the mean of the model's own
trained word embeddings over a sentence's words (UNK counts as a word, PAD
and EOS do not), and ``make_tfidf_encoder``, a TF-IDF bag of words
(scikit-learn's ``TfidfTransformer``: smoothed idf, l2-normalised rows) whose
idf comes from the training sentences.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax.linen import initializers
from flax.typing import Array
from scipy import sparse
from sklearn.feature_extraction.text import TfidfTransformer

from lnorm import norms
from lnorm.data.books import EOS, PAD, Vocab
from lnorm.recurrent import GRU



def accept(norm: object) -> norms.Norm:
  """The ``Norm`` of ``norm`` if the GRUs take it (any norm of their gates
  without running statistics); else one ValueError line."""
  return norms.accept(norm, norms.GATES, running_stats=False)



class SkipThoughts(nn.Module):
  """The uni-skip model. Token arrays are int32 (B, T), PAD = 0 after EOS."""

  vocab_size: int
  embed_dim: int = 620
  features: int = 2400
  norm: str = "none"
  eps: float = 1e-5

  def setup(self):
    accept(self.norm)
    self.embed = nn.Embed(self.vocab_size, self.embed_dim,
                          embedding_init=initializers.normal(0.1))
    gru = lambda: GRU(self.features, norm=self.norm, eps=self.eps, return_carry=True)
    self.encoder, self.decoder_prev, self.decoder_next = gru(), gru(), gru()
    self.logits = nn.Dense(self.vocab_size)

  def encode(self, tokens_BxT: Array) -> Array:
    """Sentence vectors (B, H): the encoder's state after the last token."""
    u_BxH, _ = self.encoder(self.embed(tokens_BxT), tokens_BxT != PAD)
    return u_BxH

  def decode(self, decoder: GRU, tokens_BxT: Array, u_BxH: Array) -> Array:
    """Logits (B, T, V) of each target token given the ones before it and u."""
    e_BxTxE = self.embed(tokens_BxT)
    shifted = jnp.concatenate([jnp.zeros_like(e_BxTxE[:, :1]), e_BxTxE[:, :-1]], 1)
    _, h_BxTxH = decoder(shifted, tokens_BxT != PAD, context=u_BxH)
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


def word_counts(tokens_NxT: np.ndarray, vocab_size: int) -> sparse.csr_matrix:
  """float64 CSR (N, V): how often each word id occurs in each row; PAD and
  EOS are not words and are left out (their columns stay 0)."""
  tokens_NxT = np.asarray(tokens_NxT)
  rows, cols = np.nonzero(tokens_NxT > EOS)  # PAD = 0 and EOS = 1 sort below every word
  ids = tokens_NxT[rows, cols]
  # csr_matrix sums duplicate (row, id) entries: a count per word.
  return sparse.csr_matrix((np.ones(len(ids)), (rows, ids)),
                           shape=(tokens_NxT.shape[0], vocab_size))


def make_embedding_mean_encoder(params, vocab: Vocab, *, max_len: int = 64
                                ) -> Callable[[list[str]], np.ndarray]:
  """``encode(sentences) -> float64 (N, E)``: the mean of the trained word
  embeddings (``params['embed']['embedding']``) over each sentence's words;
  a sentence without words gets 0."""
  emb_VxE = np.asarray(params["embed"]["embedding"], np.float64)
  check_vocab(vocab, emb_VxE.shape[0])

  def encode(sentences: list[str]) -> np.ndarray:
    c_NxV = word_counts(vocab.encode(list(sentences), max_len), len(vocab))
    n_N = np.asarray(c_NxV.sum(1)).ravel()
    return (c_NxV @ emb_VxE) / np.maximum(n_N, 1.0)[:, None]

  return encode


def make_tfidf_encoder(vocab: Vocab, train_tokens_NxT: np.ndarray, *, max_len: int = 64
                       ) -> Callable[[list[str]], sparse.csr_matrix]:
  """``encode(sentences) -> float64 CSR (N, V)``: TF-IDF of the vocabulary's
  words, the idf fitted on ``train_tokens_NxT`` (the training sentences' ids,
  e.g. ``Triples.tokens``): tf = the count, idf = ln((1 + n) / (1 + df)) + 1,
  each row scaled to unit l2 norm (scikit-learn's defaults)."""
  tfidf = TfidfTransformer().fit(word_counts(train_tokens_NxT, len(vocab)))

  def encode(sentences: list[str]) -> sparse.csr_matrix:
    return sparse.csr_matrix(tfidf.transform(
        word_counts(vocab.encode(list(sentences), max_len), len(vocab))))

  return encode


def check_vocab(vocab: Vocab, vocab_size: int) -> None:
  if len(vocab) != vocab_size:
    raise ValueError(f"the vocabulary has {len(vocab)} words but the model's embedding "
                     f"{vocab_size}")
