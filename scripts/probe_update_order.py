"""One-off probe behind BENCHMARKS_LOG.md, "Tried and reverted: ordering the
update after the backward pass" (BENCHMARKS.md, "Other findings"): the Figure
6 epoch scan as committed ('old') against the same scan whose parameters are
made to depend on every gradient before the Adam update ('new'), side by side
in this process.

Usage: python -m scripts.probe_update_order [repeats, default 7]

Prints, per (norm, batch), ms per step of each, new/old, and whether the two
trained to bit-identical parameters. The 'new' variant was not kept: it
removed a per-step weight copy but was slower.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

if __package__ in (None, ""):  # Run as `python scripts/probe_update_order.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import classifier  # pylint: disable=wrong-import-position
from scripts.bench_epoch import model_and_data  # pylint: disable=wrong-import-position


def _train_step_tied(state, x_BxD, y_B):
  def loss_fn(params):
    logits, updates = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats}, x_BxD, train=True,
        mutable=["batch_stats"])
    return jnp.mean(classifier.nll(logits, y_B)), updates.get("batch_stats", {})

  (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  # p + 0 * (one entry of every gradient) is p, computed after all gradients.
  tie = 0.0 * sum(jnp.ravel(g)[0] for g in jax.tree.leaves(grads))
  params = jax.tree.map(lambda p: p + tie.astype(p.dtype), state.params)
  return state.replace(params=params).apply_gradients(grads=grads, batch_stats=stats), loss


@functools.partial(jax.jit, static_argnames="batch_size", donate_argnums=(0,))
def _train_epoch_tied(state, x_NxD, y_N, rng, batch_size):
  def body(state, idx_B):
    return _train_step_tied(state, x_NxD[idx_B], y_N[idx_B])
  idx_SxB = classifier.batch_indices(rng, x_NxD.shape[0], batch_size)
  state, loss_S = jax.lax.scan(body, state, idx_SxB)
  return state.replace(epoch=state.epoch + 1), jnp.mean(loss_S)


def main(argv: list[str]) -> int:
  reps = int(argv[0]) if argv else 7
  print("| norm | batch | old (ms/step) | new (ms/step) | new/old | same params |\n"
        "|---|---|---:|---:|---:|---|")
  for b, steps in ((4, 1600), (128, 50)):
    for norm in ("none", "layer", "batch"):
      c, model, x, y = model_and_data(norm, b, steps)
      fns = {"old": classifier.train_epoch, "new": _train_epoch_tied}
      states = {k: classifier.create_train_state(c, model, jax.random.key(0), (784,))
                for k in fns}
      times = {k: [] for k in fns}
      for k, f in fns.items():  # compile, and one epoch each
        states[k], loss = f(states[k], x, y, jax.random.key(0), batch_size=b)
        loss.block_until_ready()
      same = all(bool(jnp.array_equal(p, q)) for p, q in zip(
          jax.tree.leaves(states["old"].params), jax.tree.leaves(states["new"].params)))
      order = np.random.default_rng(1)
      for r in range(reps):
        for k in order.permutation(list(fns)):
          t0 = time.perf_counter()
          states[k], loss = fns[k](states[k], x, y, jax.random.key(r + 1), batch_size=b)
          loss.block_until_ready()
          times[k].append(time.perf_counter() - t0)
      old, new = (np.median(times[k]) / steps * 1e3 for k in ("old", "new"))
      print(f"| {norm} | {b} | {old:.3f} | {new:.3f} | {new / old:.2f} | {same} |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
