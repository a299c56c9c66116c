"""Where the LSTM's W_h gradient should be formed: in the backward kernel or by XLA.

Usage::

    python -m scripts.bench.lstm_dw_limit [--batches 8,16,32,64] [--repeats 15]

At T=100, H=400, I=3 (``scripts.bench.rnn``'s ``short`` at each B), it
compiles each LSTM's training step twice, with
``lnorm.recurrent.lstm_scan.DW_IN_KERNEL_MAX_ROWS`` at 0 (dW by one XLA
matmul after the backward kernel) and unlimited (the kernel's), and times
the four steps interleaved in this one process (``scripts.bench.timing``).
Prints the medians in ms and kernel / XLA for each norm.
"""

from __future__ import annotations

import argparse

import numpy as np

from lnorm.recurrent import lstm_scan
from scripts.bench import rnn as bench_rnn
from scripts.bench import timing as bench_timing

NAMES = ("LSTM(none)", "LSTM(layer)")
LIMITS = {"XLA's dW": 0, "kernel's dW": 2**62}


def _batches(text: str) -> list[int]:
  try:
    batches = [int(b) for b in text.split(",")]
  except ValueError:
    batches = []
  if not batches or min(batches) < 1:
    raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers, e.g. 8,16")
  return batches


def median_ms(attr: str, limits: dict[str, int], shape, repeats: int,
              sample_ms: float) -> dict[tuple[str, str], float]:
  """Each step of NAMES at ``shape`` compiled once per entry of ``limits``,
  with ``lstm_scan.<attr>`` at its value (read when the step is traced),
  timed interleaved in this process: median ms by (name, label)."""
  x, dy = bench_rnn.batch_inputs(shape)
  kept = getattr(lstm_scan, attr)
  runs = {}
  try:
    for label, limit in limits.items():
      setattr(lstm_scan, attr, limit)
      cands, _, _ = bench_rnn.jax_candidates(list(NAMES), shape, x, dy, 0)
      for name, (run, _, _) in cands.items():
        run()
        runs[(name, label)] = run
  finally:
    setattr(lstm_scan, attr, kept)
  samples = bench_timing.interleaved_samples(runs, repeats, sample_ms * 1e-3)
  return {k: float(np.median(v)) * 1e3 for k, v in samples.items()}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batches", default=[8, 16, 32, 64], type=_batches,
                  help="comma-separated batch sizes (default 8,16,32,64)")
  ap.add_argument("--repeats", type=int, default=15)
  ap.add_argument("--sample-ms", type=float, default=50.0)
  args = ap.parse_args(argv)
  kept = lstm_scan.DW_IN_KERNEL_MAX_ROWS
  print("| B | T B rows | step | XLA's dW (ms) | kernel's dW (ms) | kernel / XLA |")
  print("|---:|---:|---|---:|---:|---:|")
  for B in args.batches:
    ms = median_ms("DW_IN_KERNEL_MAX_ROWS", LIMITS, (100, B, 400, 3, 1),
                   args.repeats, args.sample_ms)
    for name in NAMES:
      xla, kernel = ms[(name, "XLA's dW")], ms[(name, "kernel's dW")]
      print(f"| {B} | {100 * B} | {name} | {xla:.2f} | {kernel:.2f} | {kernel / xla:.2f} |")
  print(f"(kept limit: {kept} rows)")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
