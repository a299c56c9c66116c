"""Times the order-embedding training step with the LN-GRU against the plain GRU.

Usage::

    python -m scripts.bench.order_embeddings [--preset cpu|paper|smoke] [--repeats N]
        [--sample-s S] [--vocab V] [--tokens T]

One jitted training update (the caption GRU and the image map forward and
backward, the contrastive loss over the batch, per-tensor clipping and Adam,
the state donated) at a preset's model and batch (configs/order_embeddings.py),
on one fixed batch of random captions padded to ``--tokens`` (the stand-in's
longest training caption is 34 tokens with the EOS; its vocabulary is 2,854
ids) and random 1280-d features, for ``norm=none`` and ``norm=layer`` side by
side in this one process: every repeat takes one sample of each in a fresh
random order (scripts/bench/timing.py). Prints the median seconds per update
of each and their ratio (goal: layer / none <= 1.15, as for the other
recurrent experiments).
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from configs import order_embeddings as cfg
from experiments import order_embeddings as exp
from scripts.bench import timing as bench_timing

GOAL = 1.15
NUM_FEATURES = 1280  # EfficientNet-Lite0's pooled features


def make_step(config, norm: str, vocab: int, batch):
  config = config.copy_and_resolve_references()
  config.norm = norm
  model = exp.create_model(config, vocab)
  state = exp.create_train_state(config, vocab, NUM_FEATURES, jax.random.key(0))
  step = jax.jit(lambda s, b: exp.train_step(model, config.margin, s, b), donate_argnums=(0,))
  return bench_timing.step_runner(step, state, batch)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="cpu", choices=("cpu", "paper", "smoke"))
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--sample-s", type=float, default=2.0, dest="sample_s")
  p.add_argument("--vocab", type=int, default=2854)
  p.add_argument("--tokens", type=int, default=34)
  a = p.parse_args(argv)
  config = cfg.get_config(a.preset)
  B, T, V = config.batch_size, a.tokens, a.vocab
  bench_timing.print_environment()
  print(f"preset {a.preset}: batch {B}, {T} tokens, vocab {V}, embed {config.embed_dim}, "
        f"{config.features} GRU units, {NUM_FEATURES} image features")
  rng = np.random.default_rng(0)
  # Lengths as the stand-in's (median 12): tokens, then EOS, then PAD.
  lengths = np.clip(rng.poisson(11, B) + 1, 2, T)
  tokens = np.where(np.arange(T)[None, :] < lengths[:, None] - 1, rng.integers(3, V, (B, T)), 0)
  tokens[np.arange(B), lengths - 1] = 1
  batch = (jnp.asarray(tokens, jnp.int32),
           jnp.asarray(np.abs(rng.normal(size=(B, NUM_FEATURES))), jnp.float32))
  steps = {norm: make_step(config, norm, V, batch) for norm in ("none", "layer")}
  bench_timing.report_norms(steps, a.repeats, a.sample_s, GOAL, ".4f")
  return 0


if __name__ == "__main__":
  sys.exit(main())
