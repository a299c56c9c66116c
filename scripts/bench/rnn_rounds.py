"""The recurrent goals against torch over rounds of processes, as ratios.

Usage::

    python -m scripts.bench.rnn_rounds [--rounds 6] [--shapes short,short64]
        [--groups "LSTM(none),LSTM(layer);torch LSTM"] [--repeats 15]
        [--out PATH]

On a host whose speed drifts from one process to the next (the 2-vCPU VM
of BENCHMARKS.md drifts by 10-30%), one reading of ``scripts.bench.rnn``
cannot settle a goal within a few percent, and torch cannot share a process
with lnorm's kernels: its threads spin after each call and take the cores
the kernels' teams hold. So each round runs every group of candidates
(``--groups``, ``;`` between groups) in a process of its own, one
``python -m scripts.bench.rnn --no-check --json ...`` each, the groups'
order reversed every other round. Per round, each goal of
``scripts.bench.rnn.GOALS`` whose two candidates were timed gives a ratio of
the two processes' medians; the summary gives, per shape and goal, the median
of those ratios, their range, and the rounds at or under the limit. A goal is
met when the median ratio is at or under its limit.

``--out`` writes every round's medians and the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile

from scripts.bench.rnn import ALL, GOALS, SHAPES

ROOT = Path(__file__).resolve().parents[2]  # where -m scripts.bench.rnn resolves
Rounds = list[dict[str, dict[str, float]]]  # per round: {shape: {name: ms}}


def summarize(rounds: Rounds) -> list[dict]:
  """Per (shape, goal) timed in every round: the rounds' ratios a / b, their
  median, and how many are at or under the limit."""
  rows = []
  for shape in rounds[0] if rounds else []:
    for a, b, limit in GOALS:
      ratios = [r[shape][a] / r[shape][b] for r in rounds
                if a in r.get(shape, {}) and b in r.get(shape, {})]
      if len(ratios) != len(rounds):
        continue
      med = statistics.median(ratios)
      rows.append({"shape": shape, "goal": f"{a} / {b}", "limit": limit,
                   "ratios": ratios, "median": med,
                   "at_or_under": sum(x <= limit for x in ratios),
                   "met": med <= limit})
  return rows


def run_group(names: str, shapes: str, repeats: int) -> dict[str, dict[str, float]]:
  with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "ms.json"
    cmd = [sys.executable, "-m", "scripts.bench.rnn", "--shapes", shapes,
           "--candidates", names, "--repeats", str(repeats), "--no-check",
           "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0 or not out.exists():
      tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
      raise RuntimeError(f"{' '.join(cmd[1:])} failed: {tail}")
    return json.loads(out.read_text())


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=int, default=6)
  ap.add_argument("--shapes", default="short,short64")
  ap.add_argument("--groups", default="LSTM(none),LSTM(layer);torch LSTM",
                  help="candidate groups, one process each: names joined by "
                       "',', groups by ';'")
  ap.add_argument("--repeats", type=int, default=15)
  ap.add_argument("--out", type=Path, default=None)
  args = ap.parse_args(argv)
  groups = [g.strip() for g in args.groups.split(";") if g.strip()]
  if args.rounds < 1:
    ap.error("--rounds: at least 1")
  for s in args.shapes.split(","):
    if s not in SHAPES:
      ap.error(f"--shapes: unknown shape {s!r}; choose from {', '.join(SHAPES)}")
  for name in (n.strip() for g in groups for n in g.split(",")):
    if name not in ALL:
      ap.error(f"--groups: unknown candidate {name!r}")
  if args.out is not None and not args.out.parent.is_dir():
    ap.error(f"--out: no folder {args.out.parent}")

  rounds: Rounds = []
  for i in range(args.rounds):
    merged: dict[str, dict[str, float]] = {}
    for g in groups if i % 2 == 0 else groups[::-1]:
      try:
        timed = run_group(g, args.shapes, args.repeats)
      except RuntimeError as e:
        print(f"rnn_rounds: round {i + 1}: {e}", file=sys.stderr)
        return 1
      for shape, ms in timed.items():
        merged.setdefault(shape, {}).update(ms)
    rounds.append(merged)
    print(f"round {i + 1}: " + "; ".join(
        f"{shape} " + ", ".join(f"{n} {v:.1f}" for n, v in ms.items())
        for shape, ms in merged.items()), flush=True)

  rows = summarize(rounds)
  print()
  print(f"{args.rounds} rounds, groups in processes of their own: "
        + " | ".join(groups))
  print()
  print("| shape | goal | limit | median ratio | range | rounds at or under | verdict |")
  print("|---|---|---:|---:|---|---:|---|")
  for r in rows:
    print(f"| {r['shape']} | {r['goal']} | {r['limit']} | {r['median']:.2f} "
          f"| {min(r['ratios']):.2f}-{max(r['ratios']):.2f} "
          f"| {r['at_or_under']} of {len(r['ratios'])} "
          f"| {'met' if r['met'] else 'NOT met'} |")
  if args.out is not None:
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps({"rounds": rounds, "summary": rows}, indent=1)
                   + "\n")
    tmp.replace(args.out)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
