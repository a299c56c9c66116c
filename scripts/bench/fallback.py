"""Times the whole-sequence layers' fallback (a norm without a fast path scans
the cell) against their fast paths: one training step, forward and backward.

Usage::

    python -m scripts.bench.fallback [--shape T,B,H,I] [--repeats N] [--sample-ms MS]

Candidates, each one layer of H units over (B, T, I) inputs, the gradient of
``sum(y * dy)`` with respect to the parameters and the input:

* ``LSTM(layer)``: the fast path (on CPU, float32, native kernels);
  ``LSTM(layer) xla``: the same scans in XLA (``native=False``);
* ``Recurrent(LSTMCell(layer))``: the cell scanned by ``Recurrent``, which is
  what the fallback runs; the cost of falling back for a norm of the same
  work as layer norm;
* ``LSTM(rms)``, ``LSTM(dyt)``, ``LSTM(scale)``: norms without a fast path,
  so ``LSTM`` scans ``LSTMCell`` (the fallback);
* ``GRU(layer)`` and ``GRU(rms)``, ``GRU(dyt)``: the same for the GRU.

Samples are interleaved (``scripts.bench.timing``); the table gives each
candidate's median ms and its ratio to the fast path of its recurrence.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

import jax
import jax.numpy as jnp
import numpy as np

if __package__ in (None, ""):  # Run as a file.
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lnorm import recurrent as R  # pylint: disable=wrong-import-position
from scripts.bench.timing import interleaved_samples, print_environment  # pylint: disable=wrong-import-position

CANDIDATES = {  # name: (module maker, fast path it is compared with)
    "LSTM(layer)": (lambda H: R.LSTM(H, norm="layer"), "LSTM(layer)"),
    "LSTM(layer) xla": (lambda H: R.LSTM(H, norm="layer", native=False), "LSTM(layer)"),
    "Recurrent(LSTMCell(layer))": (lambda H: _Scan(R.LSTMCell(H, norm="layer")), "LSTM(layer)"),
    "LSTM(rms)": (lambda H: R.LSTM(H, norm="rms"), "LSTM(layer)"),
    "LSTM(dyt)": (lambda H: R.LSTM(H, norm="dyt"), "LSTM(layer)"),
    "LSTM(scale)": (lambda H: R.LSTM(H, norm="scale"), "LSTM(layer)"),
    "GRU(layer)": (lambda H: R.GRU(H, norm="layer"), "GRU(layer)"),
    "GRU(rms)": (lambda H: R.GRU(H, norm="rms"), "GRU(layer)"),
    "GRU(dyt)": (lambda H: R.GRU(H, norm="dyt"), "GRU(layer)"),
}


class _Scan(R.Recurrent):
  """``Recurrent`` returning the outputs alone, as the sequence layers do."""

  def __call__(self, x, mask=None):  # pylint: disable=arguments-differ
    return super().__call__(x, mask)[1]


def step(module, x, dy):
  """A jitted training step: d sum(y * dy) / d(params, x)."""
  params = module.init(jax.random.key(0), x)["params"]
  loss = lambda p, x: jnp.sum(module.apply({"params": p}, x) * dy)
  g = jax.jit(jax.grad(loss, argnums=(0, 1)))
  return lambda: jax.block_until_ready(g(params, x))


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--shape", default="100,8,400,3", help="T,B,H,I (default: rnn.py's short)")
  p.add_argument("--repeats", type=int, default=15)
  p.add_argument("--sample-ms", type=float, default=200.0)
  args = p.parse_args(argv)
  try:
    T, B, H, I = (int(v) for v in args.shape.split(","))
  except ValueError:
    p.error(f"--shape={args.shape!r}: expected four integers T,B,H,I")
  if min(T, B, H, I, args.repeats) < 1:
    p.error("--shape's sizes and --repeats must be at least 1")
  print_environment()
  x = jax.random.normal(jax.random.key(1), (B, T, I))
  dy = jax.random.normal(jax.random.key(2), (B, T, H))
  cands = {name: step(make(H), x, dy) for name, (make, _) in CANDIDATES.items()}
  samples = interleaved_samples(cands, args.repeats, args.sample_ms / 1e3)
  med = {k: 1e3 * float(np.median(v)) for k, v in samples.items()}
  print(f"\nT={T}, B={B}, H={H}, I={I}: one training step, median of {args.repeats} samples\n")
  print("| candidate | path | ms | x its fast path |\n|---|---|---|---|")
  for name, (make, base) in CANDIDATES.items():
    path = ("fast" if name in (base, base + " xla") or name.endswith("xla")
            else "cell scan" if name.startswith("Recurrent") else "fallback")
    print(f"| {name} | {path} | {med[name]:.2f} | {med[name] / med[base]:.2f} |")


if __name__ == "__main__":
  main()
