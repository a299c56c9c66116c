"""A run's training speed on one CPU device against the CPU split into several.

Usage::

    LNORM_DATA_DIR=../shared/data python -m scripts.bench.cpu_devices \
        --config configs/transformer.py:cpu [--set num_layers=2 --set num_steps=300] \
        [--devices 0,-1] [--jobs 1] [--rounds 3] [--out PATH]

Runs the experiment as a user does (``python -m experiments.main``, a fresh
workdir each time) with ``--cpu_devices=N`` for each N of ``--devices`` (0:
JAX's one device; -1: one a core, the Transformer's default), the
order reversed every other round, and ``--jobs`` copies of each at once (as
``scripts/reproduce.py --jobs`` runs a study). A run's time an update comes
from its own records: each metrics.jsonl record's ``epoch_time_s`` over the
updates since the one before, the first record left out (it holds the
compilation). Per round and device count: the median over the records of
every copy; with several copies also their updates a second together. The
summary gives, per device count, the median over rounds and each round's
ratio to the first device count's.

``--set field=value`` is passed as ``--config.field=value`` (e.g. fewer
updates, so a round takes a minute). The data come from ``$LNORM_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile
import time

from experiments.runner import figures
from scripts.paper import runs as R

ROOT = Path(__file__).resolve().parents[2]


def per_update_s(metrics: Path) -> list[float]:
  """Seconds an update of each record after the first (which compiles)."""
  return R.update_seconds(figures.read_metrics(metrics.parent))[1:]


def run_copies(config: str, sets: list[str], devices: int, jobs: int) -> dict:
  """``jobs`` runs at once with ``--cpu_devices=devices``; their times an update."""
  with tempfile.TemporaryDirectory() as tmp:
    cmds = [[sys.executable, "-m", "experiments.main", f"--config={config}",
             f"--workdir={tmp}/run{j}", f"--cpu_devices={devices}",
             *(f"--config.{s}" for s in sets)] for j in range(jobs)]
    start = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for c in cmds]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - start
    for p, err in zip(procs, errs):
      if p.returncode:
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"error: the run with --cpu_devices={devices} failed: {tail}")
    times = [per_update_s(Path(tmp) / f"run{j}" / "metrics.jsonl") for j in range(jobs)]
  if not all(times):
    sys.exit("error: a run wrote fewer than two timed records: give it more updates "
             "than one evaluation interval (--set num_steps=...)")
  medians = [statistics.median(t) for t in times]
  return {"ms_per_update": 1e3 * statistics.median([x for t in times for x in t]),
          "updates_per_s_together": sum(1 / m for m in medians), "wall_s": wall}


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--config", required=True, help="configs/<experiment>.py[:preset]")
  p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                 help="a config override, passed as --config.FIELD=VALUE")
  p.add_argument("--devices", default="0,-1", help="--cpu_devices values to compare (0: "
                 "JAX's one device, -1: one a core); the first is the ratios' denominator")
  p.add_argument("--jobs", type=int, default=1, help="copies of each run at once")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--out", help="write every round and the summary here as JSON")
  a = p.parse_args(argv)
  try:
    counts = [int(x) for x in a.devices.split(",")]
  except ValueError:
    sys.exit(f"error: --devices={a.devices!r}: give device counts, e.g. 1,2")
  if not os.environ.get("LNORM_DATA_DIR"):
    print("note: $LNORM_DATA_DIR is not set; the runs look in ~/.cache/lnorm/data",
          file=sys.stderr)
  print(f"{a.config} {' '.join(a.set)}; jobs {a.jobs}; {a.rounds} rounds", flush=True)
  rounds = []
  for r in range(a.rounds):
    order = counts if r % 2 == 0 else counts[::-1]
    res = {n: run_copies(a.config, a.set, n, a.jobs) for n in order}
    rounds.append(res)
    print(f"round {r + 1}: " + "; ".join(
        f"cpu_devices={n} {res[n]['ms_per_update']:.1f} ms/update, "
        f"{res[n]['updates_per_s_together']:.2f} updates/s, wall {res[n]['wall_s']:.0f} s"
        for n in counts), flush=True)
  base = counts[0]
  summary = {}
  for n in counts:
    ms = statistics.median(rd[n]["ms_per_update"] for rd in rounds)
    ratios = [rd[n]["ms_per_update"] / rd[base]["ms_per_update"] for rd in rounds]
    summary[n] = {"ms_per_update": ms, "ratio_to_first": statistics.median(ratios),
                  "ratios": ratios}
    print(f"cpu_devices={n}: {ms:.1f} ms/update (median of {a.rounds}); / cpu_devices={base} "
          f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
  if a.out:
    Path(a.out).write_text(json.dumps({"argv": sys.argv, "rounds": rounds,
                                       "summary": summary}, indent=1))


if __name__ == "__main__":
  main()
