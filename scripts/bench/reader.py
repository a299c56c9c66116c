"""Times the attentive reader's training epoch with and without length batching.

Usage::

    LNORM_DATA_DIR=../shared/data python -m scripts.bench.reader [--preset cpu]
        [--norms none,layer] [--steps 100] [--repeats 3]

Reads the preset's questions (configs/reader.py; build the stand-in first with
the ``make_cloze.py`` command of its docstring) and times, side by side in this
one process, ``--steps`` training updates of epoch 1 as one jitted ``lax.scan``
with the state donated (the loop's own call), for each norm:

* ``padded``: plain shuffled batches, every text padded to the longest of the
  data (``sort_batches=0, length_buckets=0``), as the reader ran before;
* ``bucketed``: the preset's ``sort_batches`` and ``length_buckets``.

Each repeat takes one sample of each in a fresh random order
(scripts/bench/timing.py). Prints the median seconds per update, the ratio,
and the mean LSTM steps (passage + query length scanned) per update, the
ratio one would expect if the scans' steps were all the cost.
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from configs import reader as cfg
from experiments.runner import loop
from experiments import reader as exp
from lnorm.data import resolve_data_dir
from scripts.bench import timing as bench_timing


def make_epoch(config, arrays, sizes, steps: int, sort_batches: int, length_buckets: int):
  """A callable running ``steps`` updates of epoch 1 as the loop runs them,
  and the mean scanned length (passage + query) of those updates."""
  config = config.copy_and_resolve_references()
  config.sort_batches, config.length_buckets = sort_batches, length_buckets
  model = exp.create_model(config, sizes["vocab_size"], sizes["num_entities"],
                           sizes["passage_steps"], sizes["query_steps"])
  init_key, train_key = jax.random.split(jax.random.key(config.seed))
  step, buckets = exp.make_train_step(config, sizes, train_key)
  data = {k: jax.numpy.asarray(v) for k, v in arrays["train"].items()}
  feed = exp.feed(data, train_key, config.batch_size, sort_batches)
  xs = feed.plan(0, steps)
  call = jax.jit(loop.scan_steps(step, feed), donate_argnums=(0,))
  box = [exp.create_train_state(config, model, arrays["train"], init_key)]
  box[0] = jax.block_until_ready(call(box[0], feed.data, xs)[0])  # compile

  def run():
    box[0], m = call(box[0], feed.data, xs)
    jax.block_until_ready(m)

  idx = np.asarray(xs["idx"])
  cut = lambda lengths, mask: np.mean([
      next((t for t in lengths if t >= n), mask.shape[1]) for n in
      (np.flatnonzero(mask[i].any(0)).max() + 1 for i in idx)])
  tr = arrays["train"]
  scanned = (cut(buckets[0], tr["passage_mask"]) + cut(buckets[1], tr["query_mask"]))
  return run, scanned


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="cpu", choices=("cpu", "paper", "smoke"))
  p.add_argument("--norms", default="none,layer")
  p.add_argument("--steps", type=int, default=100, help="updates a sample; 0 = one epoch")
  p.add_argument("--repeats", type=int, default=3)
  a = p.parse_args(argv)
  config = cfg.get_config(a.preset)
  config.data_dir = str(resolve_data_dir(config.data_dir))
  bench_timing.print_environment()
  arrays, sizes = exp.load_data(config)
  steps = a.steps or len(arrays["train"]["answer"]) // config.batch_size
  print(f"preset {a.preset}: batch {config.batch_size}, {config.features} units, {steps} "
        f"updates a sample; bucketed = sort_batches {config.sort_batches}, length_buckets "
        f"{config.length_buckets}")
  cands, scanned = {}, {}
  for norm in a.norms.split(","):
    c = config.copy_and_resolve_references()
    c.norm = norm
    for name, sb, lb in (("padded", 0, 0), ("bucketed", c.sort_batches, c.length_buckets)):
      cands[norm, name], scanned[norm, name] = make_epoch(c, arrays, sizes, steps, sb, lb)
  samples = bench_timing.interleaved_samples(
      {f"{n}/{v}": f for (n, v), f in cands.items()}, a.repeats, 0.0)
  for norm in a.norms.split(","):
    med = {v: float(np.median(samples[f"{norm}/{v}"])) / steps for v in ("padded", "bucketed")}
    print(f"norm={norm:5s}: padded {med['padded']:.4f} s/update, bucketed "
          f"{med['bucketed']:.4f} s/update, padded / bucketed = "
          f"{med['padded'] / med['bucketed']:.2f} (LSTM steps per update "
          f"{scanned[norm, 'padded']:.0f} / {scanned[norm, 'bucketed']:.0f} = "
          f"{scanned[norm, 'padded'] / scanned[norm, 'bucketed']:.2f})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
