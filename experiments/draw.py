"""DRAW on binarized MNIST (section 6.4, Figure 4): the negative variational
bound on the test set, in nats per image, with plain and layer-normalized LSTMs.

As experiments/pi_mnist.py: the data set lives on the device (as uint8) and
each epoch is one jitted ``lax.scan`` over its minibatches; the glimpses are a
``scan`` inside the model. At the end, ``samples.png`` and ``canvas.png``
(generated images, and the canvas building up glimpse by glimpse) go into the
workdir.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax.training.train_state import TrainState

from experiments.runner import loop
from experiments.runner import train_state as ts
from experiments.runner.errors import at_least, check, check_common, off_or_more, positive
from lnorm.data import binarized_mnist
from lnorm.draw import DRAW, accept, negative_bound

SPLIT_IDS = {"valid": 0, "test": 1}  # each split's fixed evaluation noise stream


def validate(config: ml_collections.ConfigDict) -> None:
  check_common(config, accept)
  check(config.data_source in binarized_mnist.SOURCES,
        f"data_source={config.data_source!r} is not valid; choose one of: "
        f"{', '.join(binarized_mnist.SOURCES)}")
  at_least(config, 0, "num_train", "num_eval")
  at_least(config, 1, "eval_batch_size", "num_glimpses", "features", "latent", "read_n",
           "write_n")
  positive(config, "eps")
  off_or_more(config, "grad_clip_norm")


def load_data(config) -> dict[str, np.ndarray]:
  """Flattened uint8 {0, 1} pixels [N, 784] for train/valid/test."""
  raw = binarized_mnist.load(config.data_source, config.data_dir)
  out = {}
  for split, x in raw.items():
    keep = config.num_train if split == "train" else config.num_eval
    x = x[:keep] if keep else x
    out[split] = x.reshape(len(x), -1)
  check(len(out["train"]) >= config.batch_size,
        f"batch_size={config.batch_size} is larger than the {len(out['train'])} "
        "training images")
  return out


# Independent streams of the seed: init, per-epoch training, evaluation, samples.
KEYS = ("init", "train", "eval", "sample")


def create_model(config) -> DRAW:
  return ts.model(DRAW, num_glimpses=config.num_glimpses, features=config.features,
                  latent=config.latent, read_n=config.read_n, write_n=config.write_n,
                  norm=config.norm, eps=config.eps)


def create_train_state(config, rng: jax.Array) -> TrainState:
  model = create_model(config)
  x = jnp.zeros((2, binarized_mnist.NUM_PIXELS), jnp.uint8)
  params = ts.init_variables(model, rng, x, jnp.zeros(model.noise_shape(2)),
                             fast_compile=True)["params"]
  return TrainState.create(apply_fn=model.apply, params=params,
                           tx=ts.adam(config.learning_rate, config.grad_clip_norm))


def bound_terms(state: TrainState, params: Any, x_BxD: jax.Array, eps_BxTxZ: jax.Array
                ) -> tuple[jax.Array, jax.Array]:
  """(reconstruction NLL [B], summed KL [B]) in nats."""
  canvas_BxD, kl_TxB = state.apply_fn({"params": params}, x_BxD, eps_BxTxZ)
  return negative_bound(canvas_BxD, kl_TxB, x_BxD)


def train_step(state: TrainState, x_BxD: jax.Array, eps_BxTxZ: jax.Array
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  """One Adam step on the mean bound; returns (state, {mean bound, mean KL})."""
  def loss_fn(params):
    recon_B, kl_B = bound_terms(state, params, x_BxD, eps_BxTxZ)
    return jnp.mean(recon_B + kl_B), jnp.mean(kl_B)

  (loss, kl), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  return state.apply_gradients(grads=grads), {"bound": loss, "kl": kl}


def feed(model: DRAW, x_NxD: jax.Array, train_key: jax.Array, batch_size: int
         ) -> loop.EpochShuffle:
  """Shuffled epochs of ``x``, with each step's prior noise: the shuffle and
  the noise depend only on (``train_key``, epoch, step within the epoch)."""
  def keys(epoch):  # (shuffle key, noise key) of an epoch
    return jax.random.split(jax.random.fold_in(train_key, epoch))

  def batch(x_NxD, xs):
    return x_NxD[xs["idx"]], jax.random.normal(xs["key"], model.noise_shape(batch_size))

  return loop.EpochShuffle(
      data=x_NxD, num_examples=x_NxD.shape[0], batch_size=batch_size,
      shuffle_key=lambda epoch: keys(epoch)[0],
      step_key=lambda epoch, s: jax.random.fold_in(keys(epoch)[1], s), batch=batch)


def eval_step(model: DRAW, state: TrainState, x_BxD: jax.Array, keys_B: jax.Array,
              w_B: jax.Array) -> jax.Array:
  """Sums of [bound, reconstruction, KL] over the chunk, weighted by ``w``."""
  shape = model.noise_shape(1)[1:]
  eps_BxTxZ = jax.vmap(lambda k: jax.random.normal(k, shape))(keys_B)
  recon_B, kl_B = bound_terms(state, state.params, x_BxD, eps_BxTxZ)
  return jnp.stack([jnp.sum(w_B * (recon_B + kl_B)), jnp.sum(w_B * recon_B),
                    jnp.sum(w_B * kl_B)])


@functools.partial(jax.jit, static_argnums=(0, 4))
def evaluate(model: DRAW, state: TrainState, x_NxD: jax.Array, key: jax.Array, chunk: int
             ) -> dict[str, jax.Array]:
  """Mean bound, reconstruction and KL over the whole split (one posterior
  sample per image), in chunks of ``chunk`` images, the last partial one too.

  Image i's noise comes from ``fold_in(key, i)``: the result does not depend
  on ``chunk``, and the same key gives the same noise every epoch.
  """
  n = x_NxD.shape[0]
  (x_CxBxD, i_CxB), w_CxB = ts.padded_chunks((x_NxD, jnp.arange(n)), n, chunk)
  keys_CxB = jax.vmap(jax.vmap(lambda i: jax.random.fold_in(key, i)))(i_CxB)
  sums_Cx3 = jax.lax.map(lambda b: eval_step(model, state, *b), (x_CxBxD, keys_CxB, w_CxB))
  sums = jnp.sum(sums_Cx3, 0)
  return {"bound": sums[0] / n, "recon": sums[1] / n, "kl": sums[2] / n}


def sample_arrays(model: DRAW, state: TrainState, key: jax.Array, num_samples: int = 100,
                  num_canvas: int = 8) -> tuple[np.ndarray, np.ndarray]:
  """Draws from the prior: (samples [num_samples, 28, 28], canvases
  [num_canvas, T, 28, 28]), Bernoulli means sigmoid(c_t) in [0, 1].

  The canvases are those of the first ``num_canvas`` samples after each
  glimpse; their last column is the sample itself.
  """
  n = max(num_samples, num_canvas)
  z_BxTxZ = jax.random.normal(key, model.noise_shape(n))
  canvas_BxTxD = np.asarray(_generate(model, state.params, z_BxTxZ))
  images = canvas_BxTxD.reshape(n, model.num_glimpses, *model.image_shape)
  return images[:num_samples, -1], images[:num_canvas]


@functools.partial(jax.jit, static_argnums=0, compiler_options=ts.RUN_ONCE)
def _generate(model: DRAW, params: Any, z_BxTxZ: jax.Array) -> jax.Array:
  return jax.nn.sigmoid(model.apply({"params": params}, z_BxTxZ, method=DRAW.generate))


def tile(images_RxCxHxW: np.ndarray, gap: int = 1, fill: float = 0.5) -> np.ndarray:
  """A 2-D mosaic of rows x columns of images, with ``gap`` pixels between."""
  R, C, H, W = images_RxCxHxW.shape
  out = np.full((R * (H + gap) - gap, C * (W + gap) - gap), fill, images_RxCxHxW.dtype)
  for r in range(R):
    for c in range(C):
      out[r * (H + gap):r * (H + gap) + H, c * (W + gap):c * (W + gap) + W] = \
          images_RxCxHxW[r, c]
  return out


def save_samples(state: TrainState, config, directory: str | Path, num_samples: int = 100,
                 num_canvas: int = 8, num_columns: int = 16) -> tuple[Path, Path]:
  """Writes ``samples.png`` (a grid of samples) and ``canvas.png`` (one row
  per sample: the canvas after ``num_columns`` evenly spaced glimpses, the
  last one included) into ``directory``; returns their paths."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  directory = Path(directory)
  key = ts.named_keys(config.seed, *KEYS)["sample"]
  samples, canvases = sample_arrays(create_model(config), state, key, num_samples,
                                    num_canvas)
  side = int(np.ceil(np.sqrt(num_samples)))
  padded = np.zeros((side * side, *samples.shape[1:]), samples.dtype)
  padded[:num_samples] = samples
  T = canvases.shape[1]
  steps = np.unique(np.round(np.linspace(1, T, min(num_columns, T))).astype(int))
  label = f"DRAW, norm={config.norm}, {T} glimpses"

  fig, ax = plt.subplots(figsize=(6, 6.3))
  ax.imshow(tile(padded.reshape(side, side, *samples.shape[1:])), cmap="gray",
            vmin=0, vmax=1, interpolation="nearest")
  ax.set_axis_off()
  ax.set_title(f"{label}: samples (Bernoulli means)", fontsize=9)
  samples_path = directory / "samples.png"
  fig.savefig(samples_path, dpi=100, bbox_inches="tight")
  plt.close(fig)

  H, W = canvases.shape[2:]
  fig, ax = plt.subplots(figsize=(0.6 * len(steps) + 0.5, 0.6 * num_canvas + 0.8))
  ax.imshow(tile(canvases[:, steps - 1]), cmap="gray", vmin=0, vmax=1,
            interpolation="nearest")
  ax.set_xticks((np.arange(len(steps)) * (W + 1) + W / 2), [str(t) for t in steps],
                fontsize=7)
  ax.set_yticks([])
  ax.set_xlabel("glimpse t (canvas sigmoid(c_t))", fontsize=8)
  ax.set_title(label, fontsize=9)
  canvas_path = directory / "canvas.png"
  fig.savefig(canvas_path, dpi=100, bbox_inches="tight")
  plt.close(fig)
  return samples_path, canvas_path


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  validate(config)

  def setup() -> loop.Task:
    data = load_data(config)
    x_tr = jnp.asarray(data["train"])
    splits = {s: jnp.asarray(data[s]) for s in SPLIT_IDS}
    keys = ts.named_keys(config.seed, *KEYS)
    model = create_model(config)
    train = feed(model, x_tr, keys["train"], config.batch_size)

    def evaluate_splits(state: TrainState) -> dict[str, float]:
      out = {}
      for split, x in splits.items():
        m = evaluate(model, state, x, jax.random.fold_in(keys["eval"], SPLIT_IDS[split]),
                     min(config.eval_batch_size, len(x)))
        out |= {f"{split}_{k}": float(v) for k, v in m.items()}
      return out

    return loop.Task(
        state=create_train_state(config, keys["init"]),
        train_step=lambda state, batch: train_step(state, *batch), feed=train,
        evaluate=evaluate_splits, num_steps=config.num_epochs * train.steps_per_epoch,
        steps_per_epoch=train.steps_per_epoch, examples_per_step=config.batch_size,
        show=("train_bound", "valid_bound", "test_bound"),
        finish=lambda state, wd: save_samples(state, config, wd))

  return loop.run(config, workdir, setup)
