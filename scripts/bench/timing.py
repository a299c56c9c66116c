"""The timing harness and environment header that the bench_*.py scripts share."""

from __future__ import annotations

import os
import platform
import time
from typing import Callable

import numpy as np


def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def host_line() -> str:
  xla = os.environ.get("XLA_FLAGS")
  return (f"host CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} usable cores"
          + (f", XLA_FLAGS={xla}" if xla else ""))


def print_environment(torch=False) -> None:
  """Versions, JAX's backend and devices, and the host: a benchmark's header.

  ``torch``: the module, None when it is not installed, False (the default)
  for a benchmark without torch.
  """
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jaxlib  # pylint: disable=g-import-not-at-top
  line = (f"python {platform.python_version()}, jax {jax.__version__}, "
          f"jaxlib {jaxlib.__version__}, flax {flax.__version__}")
  if torch is not False:
    line += f", torch {torch.__version__ if torch is not None else 'not installed'}"
  print(line)
  print(f"jax backend: {jax.default_backend()}, devices: {jax.devices()}")
  print(host_line())


def calibrate(fn: Callable[[], object], sample_s: float) -> int:
  """Calls per sample so that one sample lasts about ``sample_s``."""
  fn()
  t0 = time.perf_counter()
  fn()
  once = max(time.perf_counter() - t0, 1e-7)
  return max(1, int(sample_s / once))


def interleaved_samples(cands: dict[str, Callable[[], object]], repeats: int,
                        sample_s: float, seed: int = 0) -> dict[str, list[float]]:
  """Seconds per call: ``repeats`` samples of each candidate, interleaved.

  Each repeat takes one sample of every candidate in a fresh random order, so
  that a noisy neighbour slows them all alike and no candidate always runs
  first or right after the same other one (torch's OpenMP threads, for one,
  keep spinning for a while after a call and slow down whatever follows). A
  sample is the mean of enough back-to-back calls to last about ``sample_s``.
  """
  numbers = {k: calibrate(fn, sample_s) for k, fn in cands.items()}
  samples = {k: [] for k in cands}
  keys = list(cands)
  order_rng = np.random.default_rng(seed + 1)
  for _ in range(repeats):
    for i in order_rng.permutation(len(keys)):
      fn, n = cands[keys[i]], numbers[keys[i]]
      t0 = time.perf_counter()
      for _ in range(n):
        fn()
      samples[keys[i]].append((time.perf_counter() - t0) / n)
  return samples


def samples_and_cores(runs: dict[str, Callable[[], object]], repeats: int
                      ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
  """One call of each run per repeat, in a fresh random order (seeded by the
  repeat): the seconds of each call, and the cores it kept busy (the
  process's CPU time over the wall time). Each run is called twice first, to
  compile and warm up."""
  for run in runs.values():
    run(), run()
  samples = {name: [] for name in runs}
  busy = {name: [] for name in runs}
  for r in range(repeats):
    for name in np.random.default_rng(r).permutation(list(runs)):
      t0, c0 = time.perf_counter(), time.process_time()
      runs[name]()
      wall = time.perf_counter() - t0
      samples[name].append(wall)
      busy[name].append((time.process_time() - c0) / wall)
  return samples, busy


def step_runner(step: Callable, state, batch) -> Callable[[], None]:
  """One update per call of the result: ``state = step(state, batch)`` (a
  jitted step that donates its state), waiting for the step's metrics."""
  import jax  # pylint: disable=g-import-not-at-top
  box = [state]

  def run():
    box[0], metrics = step(box[0], batch)
    jax.block_until_ready(metrics)

  return run


def report_norms(cands: dict[str, Callable[[], object]], repeats: int, sample_s: float,
                 goal: float, fmt: str = ".4f") -> float:
  """Times ``cands`` ({norm: one update}) interleaved, prints each median
  and layer / none against ``goal``, and returns that ratio."""
  samples = interleaved_samples(cands, repeats, sample_s)
  med = {k: float(np.median(v)) for k, v in samples.items()}
  for k, v in samples.items():
    print(f"norm={k:5s}: median {med[k]:{fmt}} s/update (min {min(v):{fmt}}, "
          f"max {max(v):{fmt}}, {len(v)} samples)")
  ratio = med["layer"] / med["none"]
  print(f"layer / none = {ratio:.3f} (goal <= {goal}): {'met' if ratio <= goal else 'NOT met'}")
  return ratio
