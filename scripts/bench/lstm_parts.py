"""Where the LSTM training step's time goes: the whole step against its matmuls.

Usage::

    python -m scripts.bench.lstm_parts [--batch 8] [--repeats 30] [--parts NAME,...]

With ``LNORM_NATIVE_PHASES=1`` the native kernels also print, at exit, their
calls' wall times and each phase's share (``lnorm/native/phase_times.h``);
time one LSTM part per run for a clean reading.

At T=100, H=400, I=3 (``scripts.bench.rnn``'s ``short``, B from ``--batch``),
it times, interleaved in this one process (each repeat a fresh random order):

* ``LSTM(none)``, ``LSTM(layer)``: the whole training step, as
  ``scripts.bench.rnn`` times it (the gradient of ``sum(y * dy)``);
* ``recurrent dots``: the step's 2T recurrent matmuls alone, T of
  ``h (B, H) @ W_h (H, 4H)`` and T of ``d (B, 4H) @ W_h^T (4H, H)``, each
  inside a ``fori_loop`` as in the scans (a tanh between steps, so that every
  step depends on the last);
* ``dW``: the W_h gradient, one ``(T B, H)^T @ (T B, 4H)`` matmul;
* ``torch LSTM``: ``torch.nn.LSTM``'s step at torch's default threads, and
  with ``--torch-threads 1`` on one thread too.

``--parts`` times a subset (comma-separated names; the torch parts by
their prefix ``torch LSTM``). For each it prints the median, 90th percentile
and fastest sample in ms (a step whose native kernel stalled at a barrier
shows in the 90th percentile, not the median), the rate in GFLOP/s
(a multiply-add is 2 flops; the whole step is 3 of those matmuls' worth,
3 x 2 B H 4H T flops), and the cores it kept busy: the process's CPU time
over the wall time, medians (torch's threads spin between calls, so its
figure overstates).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import torch

from scripts.bench import rnn as bench_rnn
from scripts.bench import timing as bench_timing


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--repeats", type=int, default=30)
  ap.add_argument("--torch-threads", type=int, default=0,
                  help="also time torch on this many threads (0: only its default)")
  ap.add_argument("--parts", default="",
                  help="comma-separated parts to time (default: all)")
  args = ap.parse_args(argv)
  wanted = [p for p in args.parts.split(",") if p]
  keep = lambda name: not wanted or any(
      name == w or name.startswith(w + ",") for w in wanted)
  T, B, H, I = 100, args.batch, 400, 3
  rng = np.random.default_rng(0)
  x, dy = bench_rnn.batch_inputs((T, B, H, I, 1))
  cands, _, _ = bench_rnn.jax_candidates(["LSTM(none)", "LSTM(layer)"],
                                         (T, B, H, I, 1), x, dy, 0)
  runs = {name: c[0] for name, c in cands.items()}

  w_Hx4H = jnp.asarray(rng.standard_normal((H, 4 * H)), jnp.float32) * 0.05
  wt_4HxH = jnp.asarray(np.ascontiguousarray(np.asarray(w_Hx4H).T))
  h_BxH = jnp.full((B, H), 0.1, jnp.float32)
  d_Bx4H = jnp.full((B, 4 * H), 0.1, jnp.float32)

  @jax.jit
  def recurrent_dots(h_BxH, d_Bx4H, w_Hx4H, wt_4HxH):
    h = jax.lax.fori_loop(0, T, lambda _, h: jnp.tanh(h @ w_Hx4H)[:, :H], h_BxH)
    d = jax.lax.fori_loop(
        0, T, lambda _, d: jnp.tile(jnp.tanh(d @ wt_4HxH), (1, 4)), d_Bx4H)
    return h, d

  h_TBxH = jnp.asarray(rng.standard_normal((T * B, H)), jnp.float32)
  d_TBx4H = jnp.asarray(rng.standard_normal((T * B, 4 * H)), jnp.float32)
  dw = jax.jit(lambda a, b: a.T @ b)
  runs["recurrent dots"] = lambda: jax.block_until_ready(
      recurrent_dots(h_BxH, d_Bx4H, w_Hx4H, wt_4HxH))
  runs["dW"] = lambda: jax.block_until_ready(dw(h_TBxH, d_TBx4H))

  lstm = torch.nn.LSTM(I, H, batch_first=True)
  xt, dyt = torch.tensor(x), torch.tensor(dy)

  def torch_step(threads):
    def step():
      old = torch.get_num_threads()
      torch.set_num_threads(threads)
      lstm.zero_grad()
      y, _ = lstm(xt)
      y.backward(dyt)
      torch.set_num_threads(old)
    return step

  default_threads = torch.get_num_threads()
  runs[f"torch LSTM, {default_threads} thr."] = torch_step(default_threads)
  if args.torch_threads:
    runs[f"torch LSTM, {args.torch_threads} thr."] = torch_step(args.torch_threads)

  mac = B * H * 4 * H * T  # one of the three matmuls' multiply-adds
  flops = {"recurrent dots": 2 * 2 * mac, "dW": 2 * mac}
  runs = {name: run for name, run in runs.items() if keep(name)}
  if not runs:
    ap.error(f"--parts {args.parts!r} names none of the parts")
  samples, busy = bench_timing.samples_and_cores(runs, args.repeats)
  print(f"T={T}, B={B}, H={H}, I={I}; {args.repeats} repeats; "
        f"jax {jax.__version__}, torch {torch.__version__}")
  print("| part | median (ms) | p90 (ms) | fastest (ms) | GFLOP/s at the median | cores busy |")
  print("|---|---:|---:|---:|---:|---:|")
  for name, s in samples.items():
    med = float(np.median(s))
    rate = flops.get(name, 3 * 2 * mac) / med / 1e9
    p90 = float(np.percentile(s, 90))
    print(f"| {name} | {med * 1e3:.2f} | {p90 * 1e3:.2f} | {min(s) * 1e3:.2f} | {rate:.0f} "
          f"| {np.median(busy[name]):.2f} |")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
