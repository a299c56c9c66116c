"""Order embeddings of images and captions (Vendrov et al. 2016), with a plain
or layer-normalized GRU sentence encoder: the model of the paper's §6.1
(Table 2, Figure 1).

Partial order: x ⪯ y ("x is more specific than y") iff x_i >= y_i for every
i, on the non-negative orthant (the reversed product order). Captions are
abstractions of images, so an image lies below its captions: image ⪯ caption.
The order-violation penalty of the pair (x, y) is
E(x, y) = ||max(0, y - x)||^2 (Vendrov's eq. 2), here with x the image and y
the caption: a caption coordinate above the image's is a violation
(``order_violations``; Vendrov's code: ``max(0, s - im)^2`` summed, s the
sentence).

Encoders (Vendrov's code, ``encode_sentences`` / ``encode_images``): the
caption's words are embedded (300-d) and read by a GRU; its state after the
last token (the EOS) is the caption vector. The image's CNN features go
through one linear map. Both are scaled to unit L2 norm and then mapped to
the non-negative orthant by the absolute value (``abs`` in their options,
True for order embeddings; the norm is still 1 after it).

Loss (``contrastive_loss``): over a batch of B (caption, image) pairs, with
E the (B, B) violation matrix (captions in rows) and e_b = E[b, b] the
violation of pair b, the sum over all b != j of
  max(0, margin - E[b, j] + e_b)   (caption b against every other image)
+ max(0, margin - E[j, b] + e_b)   (image b against every other caption),
margin 0.05: a sum, not a mean, in both directions, the positive pair's
violation inside the hinge, as Vendrov's ``contrastive_loss``. Vendrov
clips each gradient tensor to norm 2 (``maxnorm``) and uses Adam at 1e-3,
batch 128.

Evaluation (``retrieval_metrics``, Vendrov's ``i2t`` / ``t2i``): with 5
captions an image (caption c is of image c // 5), caption retrieval ranks
every caption by its violation with the image and takes the rank of the
best of the image's 5; image retrieval ranks every image for a caption and
takes its own image's rank. R@K is the percentage of queries whose rank is
at most K; mean rank (the paper's "mean r") and median rank are 1-based.
A tie counts against the true match (Vendrov's argsort breaks ties by
index), so a collapsed model whose violations are all 0 ranks last, not first.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax.linen import initializers
from flax.typing import Array

from lnorm import norms
from lnorm.recurrent import GRU



def accept(norm: object) -> norms.Norm:
  """The ``Norm`` of ``norm`` if the GRUs take it (any norm of their gates
  without running statistics); else one ValueError line."""
  return norms.accept(norm, norms.GATES, running_stats=False)

MARGIN = 0.05
CAPTIONS_PER_IMAGE = 5
PAD = 0  # as lnorm.data.retrieval
RECALL_AT = (1, 5, 10)


def order_violations(c_CxD: Array, i_IxD: Array) -> Array:
  """(C, I): E(image j, caption c) = ||max(0, c - i_j)||^2 for every pair."""
  d_CxIxD = c_CxD[:, None, :] - i_IxD[None, :, :]
  return jnp.square(jnp.maximum(d_CxIxD, 0.0)).sum(-1)


def violation_matrix(c_CxD: Array, i_IxD: Array, chunk: int = 256) -> Array:
  """``order_violations`` over ``chunk`` captions at a time, so that an
  evaluation set (5,000 captions x 1,000 images x 1,024 dims) never holds
  the (C, I, D) differences at once."""
  C, D = c_CxD.shape
  n = -(-C // chunk)
  c_NxKxD = jnp.pad(c_CxD, ((0, n * chunk - C), (0, 0))).reshape((n, chunk, D))
  e_NxKxI = jax.lax.map(lambda c_KxD: order_violations(c_KxD, i_IxD), c_NxKxD)
  return e_NxKxI.reshape((n * chunk, -1))[:C]


def contrastive_loss(c_BxD: Array, i_BxD: Array, margin: float = MARGIN,
                     same_image_B: Array | None = None) -> Array:
  """Vendrov's summed hinge loss over all other pairs, both directions
  (module doc); pair b is (c_BxD[b], i_BxD[b]). ``same_image_B`` (int ids),
  if given, also leaves out pairs of two captions of one image, which
  Vendrov's batches count as negatives."""
  E_BxB = order_violations(c_BxD, i_BxD)
  e_B = jnp.diagonal(E_BxB)
  cost_c_BxB = jnp.maximum(margin - E_BxB + e_B[:, None], 0.0)  # row b: other images
  cost_i_BxB = jnp.maximum(margin - E_BxB + e_B[None, :], 0.0)  # column b: other captions
  B = E_BxB.shape[0]
  negative_BxB = ~jnp.eye(B, dtype=bool)
  if same_image_B is not None:
    negative_BxB &= same_image_B[:, None] != same_image_B[None, :]
  return jnp.where(negative_BxB, cost_c_BxB + cost_i_BxB, 0.0).sum()


def _l2_normalize(x_BxD: Array) -> Array:
  # The tiny floor only guards an all-zero row (Vendrov divides by the norm).
  return x_BxD / jnp.sqrt(jnp.maximum(jnp.square(x_BxD).sum(-1, keepdims=True), 1e-12))


def _uniform(scale: float):
  """U[-scale, scale] (flax's ``uniform`` is U[0, scale))."""
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -scale, scale)
  return init


class OrderEmbedding(nn.Module):
  """Caption and image encoders into the order-embedding space (module doc).

  Token arrays are int32 (B, T), PAD = 0 after the EOS; image features are
  float (B, F). ``features`` is the GRU's size and the embedding dimension
  (1024 in the paper). The initialisers follow Vendrov's code: word
  embeddings uniform in [-0.1, 0.1], the image map Glorot-uniform with a
  zero bias; the GRU's are lnorm's ``GRUCell`` ones."""
  vocab_size: int
  embed_dim: int = 300
  features: int = 1024
  norm: str = "none"
  eps: float = 1e-5
  absolute: bool = True

  def setup(self):
    accept(self.norm)
    self.embed = nn.Embed(self.vocab_size, self.embed_dim, embedding_init=_uniform(0.1))
    self.encoder = GRU(self.features, norm=self.norm, eps=self.eps, return_carry=True)
    self.image_map = nn.Dense(self.features, kernel_init=initializers.glorot_uniform())

  def _to_orthant(self, x_BxD: Array) -> Array:
    x_BxD = _l2_normalize(x_BxD)
    return jnp.abs(x_BxD) if self.absolute else x_BxD

  def encode_captions(self, tokens_BxT: Array) -> Array:
    """(B, features): the GRU's state after each caption's last token."""
    h_BxH, _ = self.encoder(self.embed(tokens_BxT), tokens_BxT != PAD)
    return self._to_orthant(h_BxH)

  def encode_images(self, images_BxF: Array) -> Array:
    return self._to_orthant(self.image_map(images_BxF))

  def __call__(self, tokens_BxT: Array, images_BxF: Array) -> tuple[Array, Array]:
    return self.encode_captions(tokens_BxT), self.encode_images(images_BxF)


def loss(model: OrderEmbedding, params: Any, tokens_BxT: Array, images_BxF: Array,
         margin: float = MARGIN, same_image_B: Array | None = None
         ) -> tuple[Array, dict[str, Array]]:
  """(summed contrastive loss, metrics): ``loss``, and ``violation``, the
  mean order violation of the batch's true pairs."""
  c_BxD, i_BxD = model.apply({"params": params}, tokens_BxT, images_BxF)
  total = contrastive_loss(c_BxD, i_BxD, margin, same_image_B)
  e_B = jnp.square(jnp.maximum(c_BxD - i_BxD, 0.0)).sum(-1)
  return total, {"loss": total, "violation": e_B.mean()}


# ------------------------------------------------------------------ metrics


def ranks(E_CxI: Array, captions_per_image: int = CAPTIONS_PER_IMAGE
          ) -> tuple[Array, Array]:
  """1-based (caption-retrieval ranks (I,), image-retrieval ranks (C,)) of a
  violation matrix, caption c of image c // captions_per_image; lower
  violation ranks higher and a tie counts against the true match."""
  E_CxI = jnp.asarray(E_CxI)
  C, I = E_CxI.shape
  if C != captions_per_image * I:
    raise ValueError(f"violations of shape {(C, I)}: expected {captions_per_image} "
                     "captions an image, captions in rows")
  true_C = jnp.arange(C) // captions_per_image
  own_CxI = true_C[:, None] == jnp.arange(I)[None, :]
  # Image retrieval: images (other than its own) as bad as or better than the caption's own.
  e_true_C = jnp.take_along_axis(E_CxI, true_C[:, None], 1)
  r_image_C = 1 + jnp.sum((E_CxI <= e_true_C) & ~own_CxI, axis=1)
  # Caption retrieval: other images' captions as good as its best own caption.
  e_best_I = jnp.min(E_CxI.reshape((I, captions_per_image, I))
                     [jnp.arange(I), :, jnp.arange(I)], axis=1)
  r_caption_I = 1 + jnp.sum((E_CxI <= e_best_I[None, :]) & ~own_CxI, axis=0)
  return r_caption_I, r_image_C


def _summary(r: np.ndarray, prefix: str) -> dict[str, float]:
  out = {f"{prefix}_r{k}": float(100.0 * np.mean(r <= k)) for k in RECALL_AT}
  out[f"{prefix}_mean_rank"] = float(np.mean(r))
  out[f"{prefix}_median_rank"] = float(np.median(r))
  return out


def retrieval_metrics(E_CxI: Array, captions_per_image: int = CAPTIONS_PER_IMAGE
                      ) -> dict[str, float]:
  """R@1, R@5, R@10 (percent), mean and median rank of caption retrieval
  (``caption_*``: image -> its captions) and image retrieval (``image_*``:
  caption -> its image) from the (C, I) violation matrix."""
  r_caption_I, r_image_C = ranks(E_CxI, captions_per_image)
  return (_summary(np.asarray(r_caption_I), "caption")
          | _summary(np.asarray(r_image_C), "image"))


# Jitted once a process, the model static: every evaluation of a run (and
# every run of one setting) reuses the compiled encoders.
@functools.partial(jax.jit, static_argnums=0)
def _encode_captions(model: OrderEmbedding, params: Any, tokens_BxT: Array) -> Array:
  return model.apply({"params": params}, tokens_BxT, method=OrderEmbedding.encode_captions)


@functools.partial(jax.jit, static_argnums=0)
def _encode_images(model: OrderEmbedding, params: Any, images_BxF: Array) -> Array:
  return model.apply({"params": params}, images_BxF, method=OrderEmbedding.encode_images)


_violation_matrix = jax.jit(violation_matrix)


def _batches(fn, model: OrderEmbedding, params: Any, x: np.ndarray, batch_size: int,
             lengths: np.ndarray | None = None) -> np.ndarray:
  """``fn`` over ``x`` in batches (the last padded to ``batch_size``). With
  ``lengths``, rows go in order of length and each batch's columns are cut to
  its longest row rounded up to a multiple of 8 (a few compiled shapes): the
  GRU then runs only as far as the batch needs. Exact: the cut columns are
  PAD, which the encoder masks."""
  order = np.argsort(lengths, kind="stable") if lengths is not None else np.arange(len(x))
  out = np.zeros((len(x), model.features), np.float32)
  for s in range(0, len(x), batch_size):
    rows = order[s:s + batch_size]
    part = x[rows]
    if lengths is not None:
      part = part[:, :min(x.shape[1], 8 * -(-int(lengths[rows].max()) // 8))]
    pad = np.zeros((batch_size - len(part),) + part.shape[1:], part.dtype)
    out[rows] = np.asarray(fn(model, params, np.concatenate([part, pad])))[:len(part)]
  return out


def evaluate(model: OrderEmbedding, params: Any, tokens_CxT: Array, images_IxF: Array,
             batch_size: int = 500) -> dict[str, float]:
  """``retrieval_metrics`` of a held-out split: every caption and image
  embedded in batches (captions of similar length together), then all their
  violations. The metrics do not depend on ``batch_size``."""
  tokens_CxT = np.asarray(tokens_CxT)
  # One past the last non-PAD token (the EOS) of each caption.
  lengths_C = np.where(tokens_CxT != PAD, np.arange(1, tokens_CxT.shape[1] + 1), 0).max(1)
  c_CxD = _batches(_encode_captions, model, params, tokens_CxT, batch_size, lengths_C)
  i_IxD = _batches(_encode_images, model, params, np.asarray(images_IxF), batch_size)
  return retrieval_metrics(_violation_matrix(c_CxD, i_IxD))


def chance_metrics(num_images: int, captions_per_image: int = CAPTIONS_PER_IMAGE
                   ) -> dict[str, float]:
  """The expected metrics of a random ranking (the chance row): image
  retrieval's rank is uniform on 1..I; caption retrieval's is the best of
  the image's k captions placed at random among the C = k I (ties among the
  others broken at random), i.e. 1 + the false captions ahead of the first true one."""
  I, k = num_images, captions_per_image
  C = k * I
  out = {f"image_r{K}": 100.0 * min(K, I) / I for K in RECALL_AT}
  out["image_mean_rank"] = (I + 1) / 2
  out["image_median_rank"] = float(np.median(np.arange(1, I + 1)))
  # P(best rank <= K) = 1 - P(the first K places are all false captions).
  for K in RECALL_AT:
    out[f"caption_r{K}"] = 100.0 * (1 - (math.comb(C - k, K) / math.comb(C, K)
                                         if K <= C - k else 0.0))
  # Rank r = 1 + m, m the false captions before the first true one:
  # E[m] = (C - k) / (k + 1).
  out["caption_mean_rank"] = 1 + (C - k) / (k + 1)
  p_r = [math.comb(C - r, k - 1) / math.comb(C, k) for r in range(1, C - k + 2)]
  cdf = np.cumsum(p_r)
  out["caption_median_rank"] = float(np.searchsorted(cdf, 0.5) + 1)
  return {key: float(v) for key, v in out.items()}
