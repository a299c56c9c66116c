r"""What each norm costs across devices: the collectives in one data-parallel
training step, read from the compiled HLO, and the step's time.

  python -m scripts.bench.collectives [--devices 8] [--batch_size 128] [--hidden 1000,1000]

One pi-MNIST training step (experiments/classifier.py's ``train_step`` through
``parallel.data_parallel``, the run loop's path) per norm, compiled for a mesh
of ``--devices`` devices (forced host CPU devices unless the machine has that
many). Every norm shares one all-reduce of the gradients (as many bytes as the
parameters, in f32) and of the loss; the table gives the all-reduces and bytes
beyond those, and any other collectives (all-gather, all-to-all,
collective-permute), and the calls to lnorm's native CPU kernels left in the
compiled step (none where it is split over several devices:
lnorm/native/dispatch.py).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time


def _parse() -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--devices", type=int, default=8)
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--hidden", default="1000,1000", help="hidden sizes, comma separated")
  p.add_argument("--steps", type=int, default=20, help="timed steps per norm")
  p.add_argument("--norms", default="none,layer,rms,weight,batch,batch_local")
  return p.parse_args()


ARGS = _parse()
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             f" --xla_force_host_platform_device_count={ARGS.devices}")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from configs import pi_mnist as pi_config  # pylint: disable=g-import-not-at-top,wrong-import-position
from experiments import classifier, pi_mnist  # pylint: disable=g-import-not-at-top,wrong-import-position
from experiments.runner import parallel
from lnorm import native  # pylint: disable=g-import-not-at-top,wrong-import-position

COLLECTIVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute",
               "reduce-scatter")
_BYTES = {"f64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "u8": 1,
          "pred": 1, "s64": 8, "u64": 8}


def _type_bytes(type_str: str) -> int:
  return sum(_BYTES[dt] * math.prod(int(d) for d in dims.split(",") if d)
             for dt, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", type_str))


def collectives(hlo: str) -> dict[str, tuple[int, int]]:
  """{kind: (ops, bytes of their results)} in a compiled module's text
  (``-start`` ops counted, their ``-done`` halves not)."""
  out = {k: [0, 0] for k in COLLECTIVES}
  for line in hlo.splitlines():
    m = re.match(r"\s*(?:ROOT )?%?\S+ = (.+?) (" + "|".join(COLLECTIVES) +
                 r")(-start)?\(", line)
    if m:
      out[m.group(2)][0] += 1
      out[m.group(2)][1] += _type_bytes(m.group(1))
  return {k: tuple(v) for k, v in out.items()}


def bench(norm: str, mesh, batch_size: int) -> dict:
  config = pi_config.get_config("paper")
  config.hidden = tuple(int(h) for h in ARGS.hidden.split(","))
  config.batch_size, config.num_devices = batch_size, mesh.size
  config.norm, config.bn_stats = ("batch", "local") if norm == "batch_local" else (norm, "global")
  model = pi_mnist.create_model(config)
  state = parallel.replicate(
      classifier.create_train_state(config, model, jax.random.key(0), (784,)), mesh)
  rng = np.random.default_rng(0)
  batch = (rng.random((batch_size, 784), np.float32),
           rng.integers(0, 10, batch_size).astype(np.int32))
  batch = jax.tree.map(lambda a: jax.device_put(a, NamedSharding(mesh, P(parallel.DATA))),
                       batch)
  step = jax.jit(parallel.data_parallel(
      lambda s, b: classifier.train_step(s, *b), mesh, batch_size), donate_argnums=(0,))
  compiled = step.lower(state, batch).compile()
  hlo = compiled.as_text()
  found = collectives(hlo)
  param_bytes = sum(x.size * 4 for x in jax.tree.leaves(state.params))
  times = []
  for _ in range(ARGS.steps + 2):
    t0 = time.perf_counter()
    state, m = compiled(state, batch)
    jax.block_until_ready((state, m))
    times.append(time.perf_counter() - t0)
  n_ar, b_ar = found["all-reduce"]
  return {"norm": norm, "params_bytes": param_bytes, "all_reduce_ops": n_ar,
          "all_reduce_bytes": b_ar, "extra_bytes": b_ar - param_bytes - 4,
          "others": {k: v for k, v in found.items() if k != "all-reduce" and v[0]},
          "native_calls": hlo.count('custom_call_target="lnorm_'),
          "step_ms": 1e3 * float(np.median(times[2:]))}


def main() -> None:
  mesh = parallel.make_mesh(ARGS.devices)
  layer_norm = ("native kernels built (used only where a step is not split over devices)"
                if native.load() else "XLA")
  print(f"pi-MNIST MLP 784-{ARGS.hidden.replace(',', '-')}-10, batch {ARGS.batch_size} "
        f"over {mesh.size} {jax.devices()[0].platform} devices ({ARGS.batch_size // mesh.size}"
        f" examples each), jax {jax.__version__}, layer norm on CPU: {layer_norm}; "
        f"step time: median of {ARGS.steps}")
  rows = [bench(n, mesh, ARGS.batch_size) for n in ARGS.norms.split(",")]
  base = next((r for r in rows if r["norm"] == "none"), rows[0])
  print("| norm | all-reduce ops | all-reduce bytes | beyond the gradients' | "
        "other collectives | native calls | step (ms) |")
  print("|---|---:|---:|---:|---|---:|---:|")
  for r in rows:
    others = ", ".join(f"{k} {n} ({b:,} B)" for k, (n, b) in r["others"].items()) or "none"
    print(f"| {r['norm']} | {r['all_reduce_ops']} (+{r['all_reduce_ops'] - base['all_reduce_ops']})"
          f" | {r['all_reduce_bytes']:,} | {r['extra_bytes']:,} | {others} | "
          f"{r['native_calls']} | {r['step_ms']:.2f} |")


if __name__ == "__main__":
  main()
