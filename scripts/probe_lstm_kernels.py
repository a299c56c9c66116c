"""One-off probe behind BENCHMARKS_LOG.md ("What each change did", items 14 and
15; BENCHMARKS.md, "Other findings"): how many kernels XLA compiles into each
step of ``lnorm.recurrent.LSTM``'s forward and backward scans (fusions, dots,
copies, concatenates, ...), from the compiled HLO of one training step at the
``short`` shape (T=100, B=8, H=400, I=3).

It also prints the kernels of one row statistic, ``mean(x * x, -1)``, for a
few shapes: XLA:CPU fuses a reduction with its elementwise producer into one
YNNPACK kernel only from some input size on, and the LSTM's per-step
statistics on (B, H) = (8, 400) are below it.

Usage: python -m scripts.probe_lstm_kernels
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

if __package__ in (None, ""):  # Run as `python scripts/probe_lstm_kernels.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lnorm import recurrent as R  # pylint: disable=wrong-import-position

T, B, H, I = 100, 8, 400, 3
KERNEL = re.compile(r"= \S+ (fusion|dot|copy|concatenate|custom-call|reduce|transpose|"
                    r"dynamic-slice|dynamic-update-slice|slice|add|multiply)\(")


def loop_kernels(norm: str) -> list[int]:
  """Kernels in the body of each while loop, in the order XLA lists them."""
  m = R.LSTM(H, norm=norm)
  x = jnp.ones((B, T, I))
  params = m.init(jax.random.key(0), x)
  dy = jnp.ones((B, T, H))
  step = jax.jit(jax.grad(lambda p, x: jnp.sum(m.apply(p, x) * dy)))
  text = step.lower(params, x).compile().as_text()
  bodies, name = {}, None
  for line in text.split("\n"):
    head = re.match(r"^(?:ENTRY )?%(\S+) ", line)
    if head:
      name = head.group(1)
      bodies[name] = []
    elif name:
      bodies[name].append(line)
  loops = re.findall(r"while\([^)]*\), condition=%\S+, body=%([\w.\-]+)", text)
  return [sum(bool(KERNEL.search(l)) for l in bodies[b]) for b in loops]


ROW_SHAPES = ((8, 400), (10, 400), (11, 400), (16, 400), (8, 500), (8, 512),
              (4, 1024), (32, 128), (128, 256))


def row_statistic_kernels(shape: tuple[int, int]) -> list[str]:
  """The kernels of a jitted ``mean(x * x, -1)`` on ``shape``, by name."""
  f = jax.jit(lambda x: jnp.mean(x * x, -1))
  text = f.lower(jnp.ones(shape)).compile().as_text()
  entry = text[text.index("ENTRY"):]
  return [re.match(r"\s*(?:ROOT )?%([\w\-]+?)(?:\.\d+)? =", l).group(1)
          for l in entry.split("\n") if KERNEL.search(l)]


def main() -> int:
  print("| LSTM norm | kernels per step (forward scan, backward scan) |\n|---|---|")
  for norm in ("none", "layer", "layer_c"):
    print(f"| {norm} | {', '.join(map(str, loop_kernels(norm)))} |", flush=True)
  print("\n| mean(x * x, -1) on | elements | kernels |\n|---|---:|---|")
  for shape in ROW_SHAPES:
    print(f"| {shape[0]}x{shape[1]} | {shape[0] * shape[1]} | "
          f"{', '.join(row_statistic_kernels(shape))} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
