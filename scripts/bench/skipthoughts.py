"""Times the skip-thoughts training step with the LN-GRU against the plain GRU.

Usage::

    python -m scripts.bench.skipthoughts [--preset cpu|paper|smoke] [--repeats N]
        [--batch_size B] [--sample-s S]

One jitted training step (forward, backward through the three GRUs and the
output layer, clipping and Adam, the state donated) at a preset's model and
batch shape (configs/skipthoughts.py), on random full-length sentences, for
``norm=none`` and ``norm=layer`` side by side in this one process: every
repeat takes one sample of each in a fresh random order (scripts/bench/timing.py).
Prints the median seconds per update of each and their ratio; the goal is
layer / none <= 1.15 (the paper found "no significant difference" per
iteration).
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from configs import skipthoughts as cfg
from experiments import skipthoughts as exp
from scripts.bench import timing as bench_timing

GOAL = 1.15


def make_step(config, norm: str, batch):
  config = config.copy_and_resolve_references()
  config.norm = norm
  model = exp.create_model(config, config.vocab_size)
  state = exp.create_train_state(config, config.vocab_size, jax.random.key(0))
  step = jax.jit(lambda s, b: exp.train_step(model, s, b), donate_argnums=(0,))
  return bench_timing.step_runner(step, state, batch)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="cpu", choices=("cpu", "paper", "smoke"))
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--batch_size", type=int, default=0, help="0 = the preset's")
  p.add_argument("--sample-s", type=float, default=2.0, dest="sample_s")
  a = p.parse_args(argv)
  config = cfg.get_config(a.preset)
  if a.batch_size:
    config.batch_size = a.batch_size
  B, T, V = config.batch_size, config.max_len, config.vocab_size
  bench_timing.print_environment()
  print(f"preset {a.preset}: batch {B}, {T} tokens, vocab {V}, embed {config.embed_dim}, "
        f"{config.features} GRU units")
  rng = np.random.default_rng(0)
  batch = tuple(jnp.asarray(rng.integers(3, V, (B, T)), jnp.int32) for _ in range(3))
  steps = {norm: make_step(config, norm, batch) for norm in ("none", "layer")}
  bench_timing.report_norms(steps, a.repeats, a.sample_s, GOAL, ".3f")
  return 0


if __name__ == "__main__":
  sys.exit(main())
