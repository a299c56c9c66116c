"""Order embeddings of images and captions with a plain or layer-normalized
GRU (paper §6.1, Table 2, Figure 1), on the shared run loop.

Data: Vendrov's retrieval layout (lnorm/data/retrieval.py) in
``config.features_dir``: precomputed CNN features an image and 5 captions an
image. Training never touches the images.

Batches as Vendrov's code makes them (``hierarchy_data.HierarchyData``): a
pass shuffles the training images and cuts them into batches of distinct
images (the last partial batch dropped), each image with one of its 5
captions drawn at random. A pass is Vendrov's epoch, so on a small split an
"epoch" is a handful of updates; the run is counted in updates
(``num_epochs`` passes), and dev and test retrieval are evaluated every
``eval_every_steps`` updates (Vendrov's ``validFreq``), Figure 1's x-axis.
The gradient of each parameter tensor is clipped to norm ``grad_clip``
separately (Vendrov's ``maxnorm``), then Adam.

Model selection as Vendrov's: the evaluation with the highest dev image
retrieval R@1 + R@5 + R@10 (``dev_image_recall_sum``). At the end,
``init_metrics.json`` holds the metrics of the model at initialisation (the
seed's init key; random embeddings), the no-training row of Table 2.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax.training.train_state import TrainState

from experiments.runner import loop
from experiments.runner import train_state as ts
from experiments.runner import workdir as wdir
from experiments.runner.errors import at_least, check, check_common, off_or_more, positive
from lnorm import efficientnet_lite as enl
from lnorm import order_embeddings as oe
from lnorm.data import retrieval

EVAL_SPLITS = ("dev", "test")
# scripts/extract_flickr8k_features.py's default --out, under lnorm's cache.
FEATURES_NAME = "flickr8k_1k_features"
KEYS = ("init", "train")  # independent streams of the seed


def validate(config: ml_collections.ConfigDict) -> None:
  check_common(config, oe.accept)
  at_least(config, 1, "embed_dim", "features", "eval_batch_size", "min_count")
  positive(config, "margin", "eps")
  off_or_more(config, "grad_clip")
  check(config.max_vocab == 0 or config.max_vocab > len(retrieval.SPECIALS),
        f"max_vocab={config.max_vocab} must be 0 (all words) or more than "
        f"{len(retrieval.SPECIALS)} (the specials)")
  check(config.max_len == 0 or config.max_len >= 2,
        f"max_len={config.max_len} must be 0 (no cut) or at least 2 (a word and EOS)")
  check(config.num_train_images >= 0,
        f"num_train_images={config.num_train_images} must be 0 (all) or more")
  check(isinstance(config.features_dir, str) and isinstance(config.prefix, str),
        "features_dir and prefix must be strings")


def features_dir(config) -> Path:
  """``config.features_dir``, or where the Flickr8k extraction writes."""
  return (Path(config.features_dir).expanduser() if config.features_dir
          else enl.cache_root() / FEATURES_NAME)


def load_data(config) -> retrieval.Retrieval:
  """Train, dev and test, checked (a RetrievalDataError names the file), the
  training split cut to its first ``num_train_images`` images if set."""
  data = retrieval.load(features_dir(config), min_count=config.min_count,
                        max_size=config.max_vocab or None, max_len=config.max_len or None,
                        prefix=config.prefix)
  n = config.num_train_images
  if n and n < data["train"].num_images:
    t = data["train"]
    k = n * retrieval.CAPTIONS_PER_IMAGE
    data = retrieval.Retrieval({**data.splits, "train": retrieval.EncodedSplit(
        t.images[:n], t.tokens[:k], t.lengths[:k], t.captions[:k])}, data.vocab)
  have = data["train"].num_images
  check(have >= config.batch_size,
        f"batch_size={config.batch_size} is larger than the {have} training images "
        "(a batch holds distinct images, as Vendrov's)")
  return data


def create_model(config, vocab_size: int) -> oe.OrderEmbedding:
  return ts.model(oe.OrderEmbedding, vocab_size=vocab_size, embed_dim=config.embed_dim,
                  features=config.features, norm=config.norm, eps=config.eps)


def clip_each_by_norm(max_norm: float) -> optax.GradientTransformation:
  """Scales each gradient tensor whose L2 norm exceeds ``max_norm`` down to
  that norm, every tensor on its own (Vendrov's ``maxnorm``), unlike optax's
  ``clip_by_global_norm``, which scales all of them by one factor."""
  def update(updates, state, params=None):
    del params

    def clip(g):
      norm = jnp.sqrt(jnp.sum(jnp.square(g)))
      # where, not a division by max(norm, max_norm): exact where no clip is needed.
      return jnp.where(norm > max_norm, g * (max_norm / jnp.maximum(norm, 1e-30)), g)

    return jax.tree.map(clip, updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


@functools.lru_cache(maxsize=None)  # one tx per setting: jit keys on it (ts.adam's reason)
def optimizer(learning_rate: float, grad_clip: float) -> optax.GradientTransformation:
  """Per-tensor clipping (off at 0), then Adam (b1 0.9, b2 0.999, eps 1e-8)."""
  adam = optax.adam(learning_rate)
  return optax.chain(clip_each_by_norm(grad_clip), adam) if grad_clip else adam


def create_train_state(config, vocab_size: int, num_features: int, rng: jax.Array
                       ) -> TrainState:
  model = create_model(config, vocab_size)
  params = ts.init_variables(model, rng, jnp.ones((2, 3), jnp.int32),
                             jnp.zeros((2, num_features)), fast_compile=True)["params"]
  return TrainState.create(apply_fn=model.apply, params=params,
                           tx=optimizer(config.learning_rate, config.grad_clip))


def train_step(model: oe.OrderEmbedding, margin: float, state: TrainState,
               batch: tuple[jax.Array, jax.Array]) -> tuple[TrainState, dict[str, jax.Array]]:
  """One update on the summed contrastive loss of (tokens (B, T), features (B, F))."""
  tokens_BxT, images_BxF = batch
  (_, metrics), grads = jax.value_and_grad(
      lambda p: oe.loss(model, p, tokens_BxT, images_BxF, margin), has_aux=True)(state.params)
  return state.apply_gradients(grads=grads), metrics


@dataclasses.dataclass(eq=False)  # hashed by identity: the static self of _plan
class ImagePasses:
  """Vendrov's batches (module doc) as a ``loop.Feed`` counted in updates:
  step s is batch s % P of pass s // P (P = num_images // batch_size), and
  its images and captions depend only on (key, pass, batch), so a resumed run
  sees the same ones. A call may span passes."""
  data: Any             # {"tokens": (5N, T) int32, "images": (N, F) float32}
  num_images: int
  batch_size: int
  key: jax.Array

  @property
  def steps_per_pass(self) -> int:
    return self.num_images // self.batch_size

  def plan(self, start: int, stop: int) -> dict[str, jax.Array]:
    return self._plan(jnp.int32(start), stop - start)

  @functools.partial(jax.jit, static_argnums=(0, 2))
  def _plan(self, start: jax.Array, n: int) -> dict[str, jax.Array]:
    B, P = self.batch_size, self.steps_per_pass
    perm_key, cap_key = jax.random.split(self.key)

    def one(step):
      p, j = step // P, step % P
      perm = jax.random.permutation(jax.random.fold_in(perm_key, p), self.num_images)
      image_B = jax.lax.dynamic_slice(perm, (j * B,), (B,))
      k_B = jax.random.randint(jax.random.fold_in(cap_key, step), (B,), 0,
                               retrieval.CAPTIONS_PER_IMAGE)
      return image_B, image_B * retrieval.CAPTIONS_PER_IMAGE + k_B

    image_SxB, caption_SxB = jax.vmap(one)(start + jnp.arange(n))
    return {"image": image_SxB, "caption": caption_SxB}

  def batch(self, data: Any, xs: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    return data["tokens"][xs["caption"]], data["images"][xs["image"]]


def evaluate(model: oe.OrderEmbedding, params: Any, data: retrieval.Retrieval,
             batch_size: int) -> dict[str, float]:
  """Retrieval metrics of dev and test (``dev_caption_r1`` ...), and each
  split's recall sums: ``{split}_image_recall_sum`` (Vendrov's selection
  score on dev) and ``{split}_caption_recall_sum``."""
  out = {}
  for split in EVAL_SPLITS:
    s = data[split]
    m = oe.evaluate(model, params, s.tokens, s.images, batch_size=batch_size)
    for side in ("caption", "image"):
      m[f"{side}_recall_sum"] = sum(m[f"{side}_r{k}"] for k in oe.RECALL_AT)
    out |= {f"{split}_{k}": v for k, v in m.items()}
  return out


def write_init_metrics(model: oe.OrderEmbedding, config, data: retrieval.Retrieval,
                       init_key: jax.Array, wd: Path) -> None:
  """``init_metrics.json``: each split's image count, and the evaluation of
  the seed's initial parameters (``metrics``)."""
  init = create_train_state(config, len(data.vocab), data["train"].images.shape[1], init_key)
  record = {"num_images": {s: data[s].num_images for s in retrieval.SPLITS},
            "metrics": evaluate(model, init.params, data, config.eval_batch_size)}
  wdir.write_atomic(Path(wd) / "init_metrics.json", json.dumps(record, indent=1) + "\n")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  validate(config)

  def setup() -> loop.Task:
    data = load_data(config)
    train = data["train"]
    print(f"features: {features_dir(config)} ({train.num_images} training images, "
          f"vocabulary {len(data.vocab)})", flush=True)
    keys = ts.named_keys(config.seed, *KEYS)
    model = create_model(config, len(data.vocab))
    feed = ImagePasses(data={"tokens": jnp.asarray(train.tokens),
                             "images": jnp.asarray(train.images)},
                       num_images=train.num_images, batch_size=config.batch_size,
                       key=keys["train"])
    return loop.Task(
        state=create_train_state(config, len(data.vocab), train.images.shape[1], keys["init"]),
        train_step=functools.partial(train_step, model, config.margin), feed=feed,
        evaluate=lambda state: evaluate(model, state.params, data, config.eval_batch_size),
        num_steps=config.num_epochs * feed.steps_per_pass,
        steps_per_epoch=None,  # counted in updates: a pass can be a few (module doc)
        examples_per_step=config.batch_size,
        show=("train_loss", "dev_image_recall_sum", "dev_caption_recall_sum"),
        finish=lambda state, wd: write_init_metrics(model, config, data, keys["init"], wd))

  return loop.run(config, workdir, setup)
