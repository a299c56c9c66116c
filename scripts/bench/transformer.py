"""Times the byte Transformer's training step for each norm, against none's.

Usage::

    python -m scripts.bench.transformer [--preset cpu] [--layers 12,2] [--repeats 5]
        [--sample_s 3] [--variants post-layer,pre-layer,pre-rms,none,pre-layer-bfloat16]
    python -m scripts.bench.transformer --shape wide --cores [--steps 10]
        --variants pre-layer,pre-rms,pre-dyt,pre-derf,pre-scale,none

One update of experiments/transformer.py's ``train_step`` (forward, backward,
Adam), jitted, on a random batch of the preset's shape, every variant in this
one process; every repeat takes one sample of each in a fresh random order
(``timing.interleaved_samples``), so a noisy neighbour slows them alike. The
table gives the median seconds an update, its ratio to ``none`` at the same
depth, and the norm's share of the step, 1 - none / variant (Zhang & Sennrich
2019 measure RMSNorm's saving this way), and its ratio to layer norm's at the
same position where that variant is timed too. A variant is
``<position>-<norm>[-<dtype>]`` with any registered norm (``pre-dyt``,
``peri-derf``) or ``none``. It sized the study's grid
(scripts/paper/transformer.py).

``--shape cpu|wide`` times instead at a shape of scripts/bench/transformer_peer.py
(``wide``: 6 layers, d 256, ff 1024, T 128, batch 16) as the run loop runs it:
``--steps`` updates a jitted ``lax.scan``, the state donated; with ``--cores``
the batch split over one CPU device a core, the runner's default for the
Transformer (the process restarts itself with that XLA flag).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from configs import transformer as tf_config  # noqa: E402
from experiments import transformer as exp  # noqa: E402
from scripts.bench import timing  # noqa: E402

VARIANTS = ("post-layer", "pre-layer", "pre-rms", "none", "pre-layer-bfloat16")


def configure(preset: str, layers: int, variant: str):
  """The preset's config with ``layers`` blocks and the variant's norm:
  ``<position>-<norm>[-<dtype>]`` or ``none``."""
  c = tf_config.get_config(preset)
  c.num_layers = layers
  parts = variant.split("-")
  if parts[0] == "none":
    c.norm, c.norm_position, c.scaled_residual_init = "none", "none", True
  else:
    c.norm_position, c.norm = parts[0], parts[1]
  if len(parts) > 2:
    c.dtype = parts[2]
  return c


def step_fn(config):
  model = exp.create_model(config)
  state = exp.create_train_state(config, jax.random.key(0))
  schedule = exp.lr_schedule(float(config.learning_rate), config.warmup_steps,
                             config.num_steps, config.schedule)
  x = jax.random.randint(jax.random.key(1), (config.batch_size, config.seq_len + 1), 0, 256)
  x = x.astype(jnp.uint8)
  step = jax.jit(lambda s, b: exp.train_step(model, schedule, s, b))

  def run():
    _, m = step(state, x)  # not donated: every call starts from the same state
    jax.block_until_ready(m)
  return run


def _table(variants: list[str], s: dict[str, list[float]], per_call: int = 1) -> None:
  med = {v: statistics.median(x) / per_call for v, x in s.items()}
  base = med.get("none")
  print("| variant | s / update (median) | range | x none | norm's share | x LN at its position |\n"
        "|---|---|---|---|---|---|")
  for v in variants:
    ratio = f"{med[v] / base:.3f}" if base else ""
    share = f"{100 * (1 - base / med[v]):.0f}%" if base and v != "none" else ""
    ln = "-".join([v.split("-")[0], "layer", *v.split("-")[2:]])
    to_ln = f"{med[v] / med[ln]:.3f}" if ln in med and v != "none" else ""
    lo, hi = min(s[v]) / per_call, max(s[v]) / per_call
    print(f"| {v} | {med[v]:.4f} | {lo:.4f}-{hi:.4f} | {ratio} | {share} | {to_ln} |", flush=True)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--preset", default="cpu")
  p.add_argument("--layers", default="12,2")
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--sample_s", type=float, default=3.0)
  p.add_argument("--shape", choices=("cpu", "wide"), default=None,
                 help="a shape of scripts/bench/transformer_peer.py, timed as the run loop runs")
  p.add_argument("--cores", action="store_true", help="with --shape: one CPU device a core")
  p.add_argument("--steps", type=int, default=10, help="with --shape: updates a jitted scan")
  a = p.parse_args(argv)
  if (a.cores or a.steps != 10) and a.shape is None:
    p.error("--cores and --steps go with --shape")
  if a.steps < 1:
    p.error("--steps: at least 1")
  from scripts.bench import transformer_peer as peer  # pylint: disable=g-import-not-at-top
  if a.cores and "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # The device count is read when JAX starts its backend: a fresh process.
    os.execve(sys.executable, [sys.executable, "-m", "scripts.bench.transformer",
                               *(sys.argv[1:] if argv is None else argv)], peer.cores_env())
  timing.print_environment()
  variants = a.variants.split(",")
  if a.shape is not None:
    print(f"\n{peer.shape_name(a.shape)}; {a.steps} updates a call, state donated, "
          f"{len(jax.devices())} device(s)")
    fns = peer.lnorm_runs(a.shape, variants, split=a.cores, steps=a.steps)
    _table(variants, timing.interleaved_samples(fns, a.repeats, a.sample_s), a.steps)
    return 0
  for layers in (int(v) for v in a.layers.split(",")):
    c = tf_config.get_config(a.preset)
    print(f"\n{layers} layers, d_model {c.d_model}, {c.num_heads} heads, d_ff {c.d_ff}, "
          f"T {c.seq_len}, batch {c.batch_size}")
    fns = {v: step_fn(configure(a.preset, layers, v)) for v in variants}
    _table(variants, timing.interleaved_samples(fns, a.repeats, a.sample_s))
  return 0


if __name__ == "__main__":
  sys.exit(main())
