"""Where the LSTM's input projection xw = x @ k_x should be formed: row by row
in the native kernels or by XLA before them.

Usage::

    python -m scripts.bench.lstm_xw_limit [--batches 8,64] [--inputs 3,5,8] [--repeats 15]

At T=100, H=400 (``scripts.bench.rnn``'s ``short`` at each B and I), it
compiles each LSTM's training step twice, with
``lnorm.recurrent.lstm_scan.XW_IN_KERNEL_MAX_I`` at 0 (xw by one XLA matmul,
read by the kernels) and at the kernels' most, 8 (formed in the kernels), and
times the four steps interleaved in this one process
(``scripts.bench.timing``). Prints the medians in ms and kernel / XLA for
each norm.
"""

from __future__ import annotations

import argparse

from lnorm.recurrent import lstm_scan
from scripts.bench.lstm_dw_limit import NAMES, _batches, median_ms

LIMITS = {"XLA's xw": 0, "kernel's xw": 8}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batches", default=[8, 64], type=_batches,
                  help="comma-separated batch sizes (default 8,64)")
  ap.add_argument("--inputs", default=[3, 5, 8], type=_batches,
                  help="comma-separated features of x, at most 8 (default 3,5,8)")
  ap.add_argument("--repeats", type=int, default=15)
  ap.add_argument("--sample-ms", type=float, default=50.0)
  args = ap.parse_args(argv)
  most = LIMITS["kernel's xw"]
  if max(args.inputs) > most:
    ap.error(f"--inputs: at most {most} features")
  kept = lstm_scan.XW_IN_KERNEL_MAX_I
  print("| B | I | step | XLA's xw (ms) | kernel's xw (ms) | kernel / XLA |")
  print("|---:|---:|---|---:|---:|---:|")
  for B in args.batches:
    for I in args.inputs:
      ms = median_ms("XW_IN_KERNEL_MAX_I", LIMITS, (100, B, 400, I, 1),
                     args.repeats, args.sample_ms)
      for name in NAMES:
        xla, kernel = ms[(name, "XLA's xw")], ms[(name, "kernel's xw")]
        print(f"| {B} | {I} | {name} | {xla:.2f} | {kernel:.2f} | {kernel / xla:.2f} |")
  print(f"(kept limit: {kept} features)")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
