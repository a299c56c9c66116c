"""Where the GRU training step's time goes: the whole step, its matmuls, and
the autodiff scan that ``gru_scan`` replaced.

Usage::

    python -m scripts.bench.gru_parts [--batch 64] [--repeats 10]

At T=100, H=400, I=3 (``scripts.bench.rnn``'s ``short``, B from ``--batch``),
it times, interleaved in this one process (each repeat a fresh random order),
the gradient of ``sum(y * dy)``:

* ``GRU(none)``, ``GRU(layer)``: ``lnorm.recurrent.GRU``'s whole training
  step, as ``scripts.bench.rnn`` times it;
* ``autodiff scan (none | layer)``: the scan ``GRU`` ran before ``gru_scan``,
  differentiated by JAX: [z | r] as one (B, 2H) block through one sigmoid,
  then sliced, and ``lnorm.layer_norm`` on the recurrent blocks; the same
  input side, from arrays made outside the timed step;
* ``gru_scan (none | layer)``: today's scan on the same inputs;
* ``recurrent dots``: the 2T recurrent matmuls alone, ``h (B, H) @ W (H, 3H)``
  and ``d (B, 3H) @ W^T``, each in a ``fori_loop`` as in the scans; ``dW``:
  the W gradient, one ``(T B, H)^T @ (T B, 3H)`` matmul;
* ``scan: sigmoid of (B, 2H), sliced`` against ``scan: two sigmoids of
  (B, H)``: T steps of ``z * r`` from the gates' pre-activations, the two
  layouts of the gates inside a scan.

It prints the median and fastest sample in ms and the cores kept busy (the
process's CPU time over wall time, medians). torch is left out: its spinning
OpenMP workers slow whatever runs next in the process (BENCHMARKS.md); time
``torch GRU`` with ``scripts.bench.rnn`` in a process of its own.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from lnorm.normalization import layer_norm
from lnorm.recurrent.gru_scan import gru_scan
from scripts.bench import rnn as bench_rnn
from scripts.bench import timing as bench_timing

EPS = 1e-5


def autodiff_scan(norm, xz_TxBx2H, xc_TxBxH, w_Hx3H, g_2H, g_H, b_H, h0_BxH):
  """The scan ``GRU`` ran before ``gru_scan`` (no mask), for JAX to differentiate."""
  H = h0_BxH.shape[-1]

  def step(h_BxH, inp):
    xz_Bx2H, xc_BxH = inp
    a_Bx3H = h_BxH @ w_Hx3H
    az_Bx2H, ac_BxH = a_Bx3H[:, :2 * H], a_Bx3H[:, 2 * H:]
    if norm == "layer":
      az_Bx2H = layer_norm(az_Bx2H, g_2H, eps=EPS)
      ac_BxH = layer_norm(ac_BxH, g_H, b_H, eps=EPS)
    zr_Bx2H = jax.nn.sigmoid(az_Bx2H + xz_Bx2H)
    z_BxH, r_BxH = zr_Bx2H[:, :H], zr_Bx2H[:, H:]
    hh_BxH = jnp.tanh(xc_BxH + r_BxH * ac_BxH)
    h_new = (1.0 - z_BxH) * h_BxH + z_BxH * hh_BxH
    return h_new, h_new

  return jax.lax.scan(step, h0_BxH, (xz_TxBx2H, xc_TxBxH))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=10)
  args = ap.parse_args(argv)
  T, B, H, I = 100, args.batch, 400, 3
  rng = np.random.default_rng(0)
  arr = lambda *s, scale=1.0: jnp.asarray(rng.standard_normal(s) * scale, jnp.float32)
  dy_TxBxH = arr(T, B, H)
  cands, _, _ = bench_rnn.jax_candidates(["GRU(none)", "GRU(layer)"], (T, B, H, I, 1),
                                         *bench_rnn.batch_inputs((T, B, H, I, 1)), 0)
  runs = {name: c[0] for name, c in cands.items()}

  xz, xc, w = arr(T, B, 2 * H), arr(T, B, H), arr(H, 3 * H, scale=0.05)
  g2, g1, b1 = 1 + arr(2 * H, scale=0.1), 1 + arr(H, scale=0.1), arr(H, scale=0.1)
  h0 = jnp.zeros((B, H), jnp.float32)
  args_ = (xz, xc, w, g2, g1, b1, h0)
  for norm in ("none", "layer"):
    def old(xz, xc, w, g2, g1, b1, h0, norm=norm):
      h, y = autodiff_scan(norm, xz, xc, w, g2, g1, b1, h0)
      return jnp.sum(y * dy_TxBxH) + jnp.sum(h)

    def new(xz, xc, w, g2, g1, b1, h0, norm=norm):
      p = (g2, g1, b1) if norm == "layer" else (None, None, None)
      h, y = gru_scan(norm, EPS, 1, xz[..., :H], xz[..., H:], xc, w, *p, h0, None)
      return jnp.sum(y * dy_TxBxH) + jnp.sum(h)

    for name, f in ((f"autodiff scan ({norm})", old), (f"gru_scan ({norm})", new)):
      g = jax.jit(jax.grad(f, argnums=tuple(range(7))))
      runs[name] = lambda g=g: jax.block_until_ready(g(*args_))

  h_BxH, d_Bx3H = jnp.full((B, H), 0.1), jnp.full((B, 3 * H), 0.1)
  wt = jnp.asarray(np.ascontiguousarray(np.asarray(w).T))

  @jax.jit
  def recurrent_dots(h_BxH, d_Bx3H, w, wt):
    h = jax.lax.fori_loop(0, T, lambda _, h: jnp.tanh(h @ w)[:, :H], h_BxH)
    d = jax.lax.fori_loop(0, T, lambda _, d: jnp.tile(jnp.tanh(d @ wt), (1, 3)), d_Bx3H)
    return h, d

  dw = jax.jit(lambda a, b: a.T @ b)
  h_TBxH, d_TBx3H = arr(T * B, H), arr(T * B, 3 * H)
  runs["recurrent dots"] = lambda: jax.block_until_ready(recurrent_dots(h_BxH, d_Bx3H, w, wt))
  runs["dW"] = lambda: jax.block_until_ready(dw(h_TBxH, d_TBx3H))

  xu, xr = xz[..., :H], xz[..., H:]
  joint = jax.jit(lambda xz, h0: jax.lax.scan(
      lambda h, x: ((s := jax.nn.sigmoid(x + h[:, :1]))[:, :H] * s[:, H:], None), h0, xz)[0])
  apart = jax.jit(lambda xu, xr, h0: jax.lax.scan(
      lambda h, x: (jax.nn.sigmoid(x[0] + h[:, :1]) * jax.nn.sigmoid(x[1] + h[:, :1]), None),
      h0, (xu, xr))[0])
  runs["scan: sigmoid of (B, 2H), sliced"] = lambda: jax.block_until_ready(joint(xz, h0))
  runs["scan: two sigmoids of (B, H)"] = lambda: jax.block_until_ready(apart(xu, xr, h0))

  samples, busy = bench_timing.samples_and_cores(runs, args.repeats)
  print(f"T={T}, B={B}, H={H}, I={I}; {args.repeats} repeats; jax {jax.__version__}")
  print("| part | median (ms) | fastest (ms) | cores busy |")
  print("|---|---:|---:|---:|")
  for name, s in samples.items():
    print(f"| {name} | {np.median(s) * 1e3:.2f} | {min(s) * 1e3:.2f} "
          f"| {np.median(busy[name]):.2f} |")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
