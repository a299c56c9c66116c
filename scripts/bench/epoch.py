"""Times the Figure 6 training epoch, and what its optimizer update costs.

Usage::

    python -m scripts.bench.epoch [--batch_sizes 128,4] [--norms none,layer,batch]
        [--examples 6400] [--repeats 5]

For each (norm, batch size) it times, side by side in this one process,
``--examples / batch size`` steps of the pi_mnist MLP (784-1000-1000-10) on random data
shaped like MNIST, each as one jitted ``lax.scan`` with the state donated:

* ``adam``: ``experiments.classifier.train_epoch`` itself (gradients and
  ``optax.adam``), the loop that the runner uses;
* ``sgd``: the same scan with the same gradients, but plain SGD
  (``optax.sgd``), which reads and writes 2 arrays per parameter instead of
  Adam's 4 reads and 3 writes;
* ``adam floor``: ``optax.adam`` updates alone, one a step, in the same kind
  of scan, from a fixed gradient tree of the model's shapes (no forward or
  backward pass). Every Adam training step costs at least this much, so
  ``NUM_TRAIN / batch size`` times it bounds the epoch time from below.
* ``plain`` (norm none only): the issue's "straightforward jitted scan",
  written without the runner: the MLP as plain JAX on a list of (W, b),
  ``optax.adam``, the same shuffled minibatches gathered inside one donated
  ``lax.scan``. It shows what the runner's own structure (Flax, TrainState)
  costs over that.

and prints ms per step, the ratio sgd/adam, the time a full epoch (55,000
images) would take, and that lower bound. Medians over ``--repeats``
interleaved samples.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

if __package__ in (None, ""):  # Run as a file: `python scripts/bench/epoch.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from configs import pi_mnist as pi_mnist_config  # pylint: disable=wrong-import-position
from experiments import classifier, pi_mnist  # pylint: disable=wrong-import-position
from scripts.bench.timing import interleaved_samples, print_environment  # pylint: disable=wrong-import-position

NUM_TRAIN = 55_000


def model_and_data(norm: str, batch_size: int, steps: int):
  """The paper config with its searched learning rate, its MLP, and random
  MNIST-shaped data of exactly ``steps * batch_size`` examples (so that one
  scan over it runs ``steps`` steps)."""
  config = pi_mnist_config.get_config("paper")
  config.norm, config.batch_size = norm, batch_size
  config.learning_rate = pi_mnist_config.LEARNING_RATES[norm, batch_size]
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.random((steps * batch_size, 784), np.float32))
  y = jnp.asarray(rng.integers(0, 10, steps * batch_size, dtype=np.int32))
  return config, pi_mnist.create_model(config), x, y


def candidates(norm: str, batch_size: int, steps: int) -> dict:
  config, model, x, y = model_and_data(norm, batch_size, steps)
  out = {}
  for name, tx in (("adam", optax.adam(config.learning_rate)),
                   ("sgd", optax.sgd(config.learning_rate))):
    state = classifier.create_train_state(config, model, jax.random.key(0), (784,))
    state = state.replace(tx=tx, opt_state=tx.init(state.params))
    box = {"state": state, "epoch": 0}

    def run(box=box):
      box["epoch"] += 1
      box["state"], loss = classifier.train_epoch(
          box["state"], x, y, jax.random.key(box["epoch"]), batch_size=batch_size)
      loss.block_until_ready()

    out[name] = run
  out["adam floor"] = adam_floor(state.params, config.learning_rate, steps)
  if norm == "none":
    out["plain"] = plain_scan(config.learning_rate, x, y, batch_size, steps)
  return out


def plain_scan(learning_rate: float, x_NxD, y_N, batch_size: int, steps: int):
  """A 784-1000-1000-10 ReLU MLP trained by optax.adam in one jitted scan,
  with no Flax: ``steps`` shuffled minibatches of ``batch_size``."""
  dims = (784, 1000, 1000, 10)
  keys = jax.random.split(jax.random.key(0), 3)
  params = [(jax.random.normal(k, (m, n)) * m ** -0.5, jnp.zeros(n))
            for k, m, n in zip(keys, dims[:-1], dims[1:])]
  tx = optax.adam(learning_rate)

  def loss(params, x_BxD, y_B):
    h = x_BxD
    for i, (w, b) in enumerate(params):
      h = h @ w + b
      h = jax.nn.relu(h) if i < len(params) - 1 else h
    return optax.softmax_cross_entropy_with_integer_labels(h, y_B).mean()

  @functools.partial(jax.jit, donate_argnums=(0,))
  def epoch(carry, rng):
    def body(carry, idx_B):
      params, opt_state = carry
      l, g = jax.value_and_grad(loss)(params, x_NxD[idx_B], y_N[idx_B])
      u, opt_state = tx.update(g, opt_state, params)
      return (optax.apply_updates(params, u), opt_state), l
    idx_SxB = jax.random.permutation(rng, steps * batch_size).reshape(steps, batch_size)
    carry, l_S = jax.lax.scan(body, carry, idx_SxB)
    return carry, l_S.mean()

  box = {"carry": (params, tx.init(params)), "epoch": 0}

  def run():
    box["epoch"] += 1
    box["carry"], l = epoch(box["carry"], jax.random.key(box["epoch"]))
    l.block_until_ready()

  return run


def adam_floor(params, learning_rate: float, steps: int):
  """``steps`` optax.adam updates from a fixed gradient, one jitted scan."""
  tx = optax.adam(learning_rate)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 1e-3), params)

  @functools.partial(jax.jit, donate_argnums=(0,))
  def updates(carry, grads):
    def body(carry, _):
      p, s = carry
      u, s = tx.update(grads, s, p)
      return (optax.apply_updates(p, u), s), None
    return jax.lax.scan(body, carry, None, length=steps)[0]

  box = {"carry": (jax.tree.map(jnp.copy, params), tx.init(params))}

  def run():
    box["carry"] = updates(box["carry"], grads)
    jax.block_until_ready(box["carry"])

  return run


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--batch_sizes", default="128,4")
  p.add_argument("--norms", default="none,layer,batch")
  p.add_argument("--examples", type=int, default=6400,
                 help="images per sample (steps = examples / batch size)")
  p.add_argument("--repeats", type=int, default=5)
  args = p.parse_args(argv)
  try:
    batch_sizes = [int(v) for v in args.batch_sizes.split(",")]
  except ValueError:
    p.error(f"--batch_sizes={args.batch_sizes!r}: expected integers separated by commas")
  norms = args.norms.split(",")
  for norm in norms:
    for b in batch_sizes:
      if (norm, b) not in pi_mnist_config.LEARNING_RATES:
        p.error(f"no searched learning rate for norm={norm!r} at batch {b}; choose from "
                + ", ".join(f"{n}@{k}" for n, k in pi_mnist_config.LEARNING_RATES))
  if args.examples < 1 or args.repeats < 1:
    p.error("--examples and --repeats must be at least 1")
  print_environment()
  print(f"{args.examples} images a sample, median of {args.repeats}\n")
  print("| norm | batch | adam (ms/step) | sgd (ms/step) | sgd/adam | "
        "adam epoch (s) | adam images/s | adam floor (ms/step) | floor epoch (s) | "
        "plain (ms/step) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
  for b in batch_sizes:
    for norm in norms:
      steps = max(1, args.examples // b)
      cands = candidates(norm, b, steps)
      for fn in cands.values():
        fn()  # compile
      s = interleaved_samples(cands, args.repeats, sample_s=0.0)
      ms = {k: statistics.median(v) / steps * 1e3 for k, v in s.items()}
      epoch_s, floor_s = (ms[k] * (NUM_TRAIN // b) / 1e3 for k in ("adam", "adam floor"))
      plain = f"{ms['plain']:.3f}" if "plain" in ms else "-"
      print(f"| {norm} | {b} | {ms['adam']:.3f} | {ms['sgd']:.3f} | "
            f"{ms['sgd'] / ms['adam']:.2f} | {epoch_s:.1f} | {b / ms['adam'] * 1e3:,.0f} | "
            f"{ms['adam floor']:.3f} | {floor_s:.1f} | {plain} |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
