"""Times the whole handwriting training step, ``layer`` against ``none``.

Usage::

    python -m scripts.bench.handwriting [--shapes paper,cpu] [--repeats N]
        [--norms none,layer]

One update of experiments/handwriting.py's ``train_step`` (forward, backward
and Adam, with its clipping), jitted, on a random batch shaped as the config
preset's (``batch_size`` lines of ``max_len`` rows, texts of 64 characters),
the norms side by side in this one process. Every repeat takes one sample of
each norm in a fresh random order (``bench_timing.interleaved_samples``); the
table gives the median seconds per update and the ratio to ``none``. The
paper says layer norm made "no significant difference" per iteration; the
issue's goal is ``layer`` at most 1.15x ``none``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from configs import handwriting as hw_config  # noqa: E402
from experiments import handwriting as exp  # noqa: E402
from scripts.bench import timing as bench_timing  # noqa: E402

TEXT_LEN = 64


def make_batch(config, key) -> dict:
  B, T = config.batch_size, config.max_len
  k1, k2, k3 = jax.random.split(key, 3)
  targets = jnp.concatenate([jax.random.normal(k1, (B, T, 2)),
                             jax.random.bernoulli(k2, 0.04, (B, T, 1)).astype(jnp.float32)], -1)
  return {"inputs": jnp.concatenate([jnp.zeros((B, 1, 3)), targets[:, :-1]], 1),
          "targets": targets, "mask": jnp.ones((B, T), bool),
          "chars": jax.random.randint(k3, (B, TEXT_LEN), 1, 57),
          "char_mask": jnp.ones((B, TEXT_LEN), bool)}


def step_fn(config, norm: str):
  config = config.copy_and_resolve_references()
  config.norm = norm
  model = exp.create_model(config)
  state = exp.create_train_state(config, jax.random.key(0))
  batch = make_batch(config, jax.random.key(1))
  step = jax.jit(lambda s, b: exp.train_step(model, float(config.output_grad_clip), s, b))
  holder = [state]

  def run():
    # The state is not donated, so every call starts from the same one.
    _, m = step(holder[0], batch)
    jax.block_until_ready(m)

  return run


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--shapes", default="paper,cpu")
  p.add_argument("--norms", default="none,layer")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--sample-s", type=float, default=0.0,
                 help="seconds per sample (0: one call a sample)")
  args = p.parse_args(argv)
  bench_timing.print_environment()
  norms = args.norms.split(",")
  for shape in args.shapes.split(","):
    config = hw_config.get_config(shape)
    cands = {n: step_fn(config, n) for n in norms}
    samples = bench_timing.interleaved_samples(cands, args.repeats, args.sample_s)
    med = {n: statistics.median(s) for n, s in samples.items()}
    print(f"\n{shape}: batch {config.batch_size}, {config.max_len} rows, {config.num_layers} "
          f"layers of {config.hidden}, M={config.num_mixtures}, K={config.num_window}, "
          f"text {TEXT_LEN} chars; median of {args.repeats} alternating repeats")
    print("| norm | s / update (median) | min | max | ratio to none |\n|---|---|---|---|---|")
    for n in norms:
      ratio = med[n] / med["none"] if "none" in med else float("nan")
      print(f"| {n} | {med[n]:.3f} | {min(samples[n]):.3f} | {max(samples[n]):.3f} | "
            f"{ratio:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
  main()
