r"""What layer norm and RMS norm would lose with their statistics in bfloat16.

  python -m scripts.bench.bf16_statistics [--widths 256,1024,4096] [--ratios 0,10,100,1000]

Rows of ``--rows`` values drawn from N(ratio, 1) (mean/spread = ratio) are
rounded to bfloat16; the reference is the float64 norm of those rounded
values, so only the statistics' arithmetic is measured, not the input's
rounding. Three ways to compute the statistics of a bfloat16 row:

* ``float32``: statistics in float32, output rounded to bfloat16 once. The
  output column is lnorm's ``layer_norm`` and ``rms_norm`` themselves; the
  statistics columns are float32 two-pass statistics, which the library's
  shifted ones (lnorm/normalization.py) match to float32 rounding.
* ``bf16 stats``: sums accumulated in float32 (as XLA's reductions do) but
  the mean, the centred values, the variance and the output each held in
  bfloat16, as a norm written in the input's dtype computes them.
* ``bf16 sums``: two-pass statistics whose sums are themselves accumulated in
  bfloat16, one term at a time (a naive kernel without a wide accumulator).

Columns: ``mean err`` is |mean - mean_64| / std_64, the centring error in
units of the spread; ``var err`` the relative error of the variance (of the
mean square, for RMS norm); ``out ulps`` the largest output error in bfloat16
ulps of the size of its terms, |g x_hat| + |b| (at least 1/64): 0.5 is
correct rounding; with the 1/64 floor, a centring error of e (in units of
the spread) shows as up to e / 2^-13 ulps on outputs near zero. Gains ~ N(1,
0.5), biases ~ N(0, 0.5); maxima over the rows. Prints a markdown table.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from lnorm import normalization as N

BF16 = ml_dtypes.bfloat16
METHODS = ("float32", "bf16 stats", "bf16 sums")


def bf16_ulp(v: np.ndarray) -> np.ndarray:
  """The spacing of bfloat16 (8 significant bits) at |v|, v float64."""
  return 2.0 ** (np.floor(np.log2(np.abs(v))) - 7)


def out_ulps(y: np.ndarray, ref: np.ndarray, terms: np.ndarray) -> np.ndarray:
  """|y - ref| in bfloat16 ulps of ``terms`` (|g x_hat| + |b|, at least 1/64):
  near a cancellation of g x_hat and b no result can be closer than that."""
  return np.abs(np.asarray(y, np.float64) - ref) / bf16_ulp(np.maximum(terms, 2.0 ** -6))


def reference(x: np.ndarray, g: np.ndarray, b: np.ndarray, norm: str, eps: float = 1e-5
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """float64 (y, terms, mean, var) of the rows of x (var: the mean square for rms)."""
  x = np.asarray(x, np.float64)
  if norm == "rms":
    mean, var = np.zeros(x.shape[:-1] + (1,)), (x ** 2).mean(-1, keepdims=True)
    x_hat = x / np.sqrt(var + eps)
  else:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    x_hat = (x - mean) / np.sqrt(var + eps)
  return x_hat * g + b, np.abs(x_hat * g) + np.abs(b), mean, var


def _seq_mean_bf16(v: np.ndarray) -> np.ndarray:
  """Row means with the sum accumulated in bfloat16, one term at a time."""
  s = np.cumsum(v.astype(BF16), axis=-1, dtype=BF16)[..., -1:]
  return (s / BF16(v.shape[-1])).astype(BF16)


def bf16_norm(x_bf: np.ndarray, g: np.ndarray, b: np.ndarray, norm: str, method: str,
              eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(y, mean, var) by ``method`` (``bf16 stats`` or ``bf16 sums``), every
  value after the sums held in bfloat16."""
  gb, bb = g.astype(BF16), b.astype(BF16)
  if method == "bf16 stats":  # float32 sums, each statistic rounded to bfloat16
    mean_of = lambda v: v.astype(np.float32).mean(-1, keepdims=True).astype(BF16)
  else:
    mean_of = _seq_mean_bf16
  if norm == "rms":
    mean = np.zeros(x_bf.shape[:-1] + (1,), BF16)
    x_c = x_bf
  else:
    mean = mean_of(x_bf)
    x_c = (x_bf - mean).astype(BF16)
  var = mean_of((x_c * x_c).astype(BF16))
  rstd = (1 / np.sqrt(var.astype(np.float32) + eps)).astype(BF16)
  y = ((x_c * rstd).astype(BF16) * gb + bb).astype(BF16)
  return y, mean, var


def library_norm(x_bf: np.ndarray, g: np.ndarray, b: np.ndarray, norm: str) -> np.ndarray:
  f = N.rms_norm if norm == "rms" else N.layer_norm
  return np.asarray(jax.jit(f)(jnp.asarray(x_bf), jnp.asarray(g), jnp.asarray(b)))


def measure(width: int, ratio: float, norm: str, rows: int = 64, seed: int = 0
            ) -> dict[str, dict[str, float]]:
  """method -> {mean_err, var_err, out_ulps} (maxima over the rows)."""
  rng = np.random.default_rng(seed)
  x_bf = rng.normal(ratio, 1.0, (rows, width)).astype(BF16)
  g = rng.normal(1, 0.5, width).astype(np.float32)
  b = rng.normal(0, 0.5, width).astype(np.float32)
  ref, terms, mean64, var64 = reference(x_bf, g, b, norm)
  std64 = np.sqrt(((np.asarray(x_bf, np.float64) - np.asarray(x_bf, np.float64).mean(
      -1, keepdims=True)) ** 2).mean(-1, keepdims=True))
  out = {}
  for method in METHODS:
    if method == "float32":
      y = library_norm(x_bf, g, b, norm)
      # Float32 two-pass statistics (the library's shifted ones agree with
      # them to float32 rounding; its output column is the library's own).
      x32 = np.asarray(x_bf, np.float32)
      if norm == "rms":
        mean, var = np.zeros_like(mean64), (x32 * x32).mean(-1, keepdims=True)
      else:
        mean = x32.mean(-1, keepdims=True)
        var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    else:
      y, mean, var = bf16_norm(x_bf, g, b, norm, method)
    mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    out[method] = {
        "mean_err": float((np.abs(mean - mean64) / std64).max()) if norm != "rms" else 0.0,
        "var_err": float((np.abs(var - var64) / var64).max()),
        "out_ulps": float(out_ulps(y, ref, terms).max()),
    }
  return out


def table(widths, ratios, norms=("layer", "rms"), rows: int = 64) -> str:
  head = ["norm", "width", "mean/std"] + [f"{m}: {c}" for m in METHODS
                                         for c in ("mean err", "var err", "out ulps")]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for norm in norms:
    for width in widths:
      for ratio in ratios:
        r = measure(width, ratio, norm, rows)
        cells = [norm, str(width), f"{ratio:g}"]
        for m in METHODS:
          cells += ["-" if norm == "rms" else f"{r[m]['mean_err']:.1e}",
                    f"{r[m]['var_err']:.1e}", f"{r[m]['out_ulps']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--widths", default="256,1024,4096")
  p.add_argument("--ratios", default="0,10,100,1000", help="row mean / row std")
  p.add_argument("--rows", type=int, default=64)
  a = p.parse_args()
  widths = [int(w) for w in a.widths.split(",")]
  ratios = [float(r) for r in a.ratios.split(",")]
  print(table(widths, ratios, rows=a.rows))


if __name__ == "__main__":
  main()
