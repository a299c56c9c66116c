"""What the image classifiers (pi_mnist, convnet) share: data, train state,
steps and evaluation. The run mechanics are experiments/runner/loop.py's.

The whole data set lives on the device; the loop runs each epoch as one jitted
``lax.scan`` over its minibatches (``scan_epoch``), so small batches are not
ruled by Python dispatch, or as one jitted call per step.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training import train_state

from experiments.runner import loop, parallel
from experiments.runner.errors import check, check_common
from lnorm import norms as lnorms
from lnorm.data import mnist

Data = dict[str, tuple[np.ndarray, np.ndarray]]


def validate(config: ml_collections.ConfigDict, norms, widths) -> None:
  """``norms``: the model's ``accept``; ``widths()``: the features of each
  normalized layer (group norm's groups must divide each), read once the
  norm is known."""
  check_common(config, norms)
  try:
    lnorms.check_fit(config.norm, widths(), groups=config.norm_groups)
  except ValueError as e:
    check(False, str(e))
  check(config.dataset in mnist.DATASETS,
        f"dataset={config.dataset!r} is not valid; choose one of: {', '.join(mnist.DATASETS)}")
  check(config.num_valid >= 1, f"num_valid={config.num_valid} must be at least 1")
  check(config.num_train >= 0, f"num_train={config.num_train} must be 0 (all) or more")
  check(config.eval_batch_size >= 1, "eval_batch_size must be at least 1")
  check(not (lnorms.get(config.norm).running_stats and config.bn_unbiased
             and config.batch_size < 2),
        "batch norm with unbiased variance needs batch_size >= 2")
  parallel.bn_groups(config)  # bn_stats and num_devices, before the data loads


def norm_fields(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The normalization fields of a classifier model (MLP, ConvNet), from the config."""
  return dict(norm=config.norm, eps=config.eps, momentum=config.bn_momentum,
              unbiased=config.bn_unbiased, bn_groups=parallel.bn_groups(config),
              norm_groups=config.norm_groups)


def load_data(config, flatten: bool) -> Data:
  """float32 pixels in [0, 1] (N x 784, or N x 28 x 28 x 1) and int32 labels
  for train (the first 55,000), valid (the last ``num_valid``) and test."""
  raw = mnist.load(config.data_source, config.dataset, config.data_dir)
  train, valid = mnist.split_train_valid(*raw["train"], num_valid=config.num_valid)
  if config.num_train:
    train = (train[0][:config.num_train], train[1][:config.num_train])
  shape = (-1,) if flatten else (28, 28, 1)
  out = {}
  for split, (x, y) in (("train", train), ("valid", valid), ("test", raw["test"])):
    out[split] = (x.reshape(len(x), *shape).astype(np.float32) / 255.0, y.astype(np.int32))
  check(len(out["train"][0]) >= config.batch_size,
        f"batch_size={config.batch_size} is larger than the {len(out['train'][0])} "
        "training images")
  return out


class TrainState(train_state.TrainState):
  batch_stats: Any


def create_train_state(config, model: nn.Module, rng: jax.Array,
                       example_shape: tuple[int, ...]) -> TrainState:
  variables = model.init(rng, jnp.zeros((2, *example_shape), jnp.float32), train=False)
  return TrainState.create(apply_fn=model.apply, params=variables["params"],
                           tx=optax.adam(config.learning_rate),
                           batch_stats=variables.get("batch_stats", {}))


def nll(logits_BxK: jax.Array, y_B: jax.Array) -> jax.Array:
  return optax.softmax_cross_entropy_with_integer_labels(logits_BxK, y_B)


def train_step(state: TrainState, x_BxD: jax.Array, y_B: jax.Array
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  def loss_fn(params):
    logits, updates = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats}, x_BxD, train=True,
        mutable=["batch_stats"])
    return jnp.mean(nll(logits, y_B)), updates.get("batch_stats", {})

  (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  return state.apply_gradients(grads=grads, batch_stats=stats), {"nll": loss}


def batch_indices(rng: jax.Array, n: int, batch_size: int) -> jax.Array:
  """A shuffled epoch's example indices, (steps, batch); the last partial batch dropped."""
  steps = n // batch_size
  return jax.random.permutation(rng, n)[:steps * batch_size].reshape(steps, batch_size)


@functools.partial(jax.jit, static_argnames="batch_size", donate_argnums=(0,))
def train_epoch(state: TrainState, x_NxD: jax.Array, y_N: jax.Array, rng: jax.Array,
                batch_size: int) -> tuple[TrainState, jax.Array]:
  """One shuffled pass as a single ``lax.scan``; returns the mean NLL. The
  steps the loop runs, as one function for benchmarks and tests."""
  def body(state, idx_B):
    return train_step(state, x_NxD[idx_B], y_N[idx_B])

  state, m = jax.lax.scan(body, state, batch_indices(rng, x_NxD.shape[0], batch_size))
  return state, jnp.mean(m["nll"])


def eval_step(state: TrainState, x_BxD: jax.Array, y_B: jax.Array) -> jax.Array:
  logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats},
                          x_BxD, train=False)
  return jnp.stack([jnp.sum(nll(logits, y_B)),
                    jnp.sum(jnp.argmax(logits, -1) != y_B)])


@functools.partial(jax.jit, static_argnames="chunk")
def evaluate(state: TrainState, x_NxD: jax.Array, y_N: jax.Array, chunk: int
             ) -> dict[str, jax.Array]:
  """Mean NLL and error over the whole split, in chunks of ``chunk`` examples."""
  n = x_NxD.shape[0]
  full = n // chunk * chunk
  sums = jnp.zeros(2)
  if full:
    xs = x_NxD[:full].reshape(-1, chunk, *x_NxD.shape[1:])
    sums = jnp.sum(jax.lax.map(lambda b: eval_step(state, *b),
                               (xs, y_N[:full].reshape(-1, chunk))), 0)
  if full < n:
    sums = sums + eval_step(state, x_NxD[full:], y_N[full:])
  return {"nll": sums[0] / n, "error": sums[1] / n}


def task(config: ml_collections.ConfigDict, model: nn.Module, data: Data) -> loop.Task:
  """Trains on data['train'], evaluating on 'valid' and 'test'."""
  x_tr, y_tr = (jnp.asarray(a) for a in data["train"])
  splits = {s: tuple(jnp.asarray(a) for a in data[s]) for s in ("valid", "test")}
  root = jax.random.key(config.seed)
  feed = loop.EpochShuffle(
      data=(x_tr, y_tr), num_examples=len(x_tr), batch_size=config.batch_size,
      # The shuffle depends only on (seed, epoch >= 1; 0 is the init).
      shuffle_key=lambda epoch: jax.random.fold_in(root, epoch),
      batch=lambda data, xs: (data[0][xs["idx"]], data[1][xs["idx"]]))

  def evaluate_splits(state: TrainState) -> dict[str, float]:
    out = {}
    for split, (x, y) in splits.items():
      m = evaluate(state, x, y, min(config.eval_batch_size, len(x)))
      out |= {f"{split}_nll": float(m["nll"]), f"{split}_error": float(m["error"])}
    return out

  return loop.Task(
      state=create_train_state(config, model, jax.random.fold_in(root, 0), x_tr.shape[1:]),
      train_step=lambda state, batch: train_step(state, *batch), feed=feed,
      evaluate=evaluate_splits, num_steps=config.num_epochs * feed.steps_per_epoch,
      steps_per_epoch=feed.steps_per_epoch, examples_per_step=config.batch_size,
      # XLA:CPU runs convolutions ~3x slower inside a scan's while loop (ConvNet,
      # batch 128: 446 vs 158 ms a step), and at 100+ ms a step Python dispatch
      # costs nothing.
      scan_epoch=config.scan_epoch,
      show=("train_nll", "valid_error", "test_error"))
