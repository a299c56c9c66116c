r"""Redraws a target's figures from the records committed in results/, without
training anything: the records are copied into a scratch runs folder, where
``reproduce.py`` counts them as finished, and the target collects them.

  python scripts/redraw.py fig5 --preset cpu        # results/fig5_cpu/fig5.png
  python scripts/redraw.py fig6 --preset paper
  python scripts/redraw.py fig5 --preset cpu --out /tmp/fig5   # all of it, elsewhere
  python scripts/redraw.py norms --preset cpu        # heatmap.png, lr_curves.png

The norms study (issue 62) and the Transformer study (its planned seeds and
settings, issue 63) are recorded in parts: they redraw from the whole records
there are, their runs still to come left out (results.md lists them), not
refused; a record there that is not whole is refused all the same.

The seeds are the records' own (a committed 3-seed target redraws with its 3
seeds; ``--seeds`` only to check a record set against a count). The target is
written into a scratch folder, under the command that made the committed
one; only its figures (the ``*.png`` beside results.md) are copied into the
results folder: the records and results.md there are left as they are (a
results.md is rewritten only by a real ``reproduce.py`` run). ``--out DIR``
writes the whole redrawn folder (results.md, figures, records) to DIR
instead and leaves the results folder alone: ``diff -r`` against the committed
folder then shows what a redraw would change. A record older than a config
field counts as finished all the same (``scripts/paper/runs.record_state``);
a record set with a run missing or incomplete (a metrics line that does not
parse, no final evaluation) is refused in one line, as is a target that would
train.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import shutil
import sys
import tempfile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# pylint: disable=wrong-import-position
from scripts import reproduce  # noqa: E402
from scripts.paper import runs  # noqa: E402


def record_seeds(src: Path) -> int:
  """How many seeds the records in ``src`` span: seed s is workdir
  ``<run>_seed<s>`` beside ``<run>`` (the config's seed), so the count is the
  highest seed less the lowest, plus one."""
  seeds = []
  for d in sorted(src.iterdir()):
    try:
      seeds.append(int(json.loads((d / "config.json").read_text())["config"]["seed"]))
    except (OSError, ValueError, KeyError, TypeError):
      continue  # not a record (a figure, results.md); a damaged one is refused later
  return max(seeds) - min(seeds) + 1 if seeds else 1


def committed_results_dir(src: Path) -> list[str]:
  """The ``--results_dir`` flag of the command in ``src``'s results.md (as
  its header shows it), or ``--results_dir results`` where none is given."""
  try:
    line = next(l for l in (src / "results.md").read_text().splitlines()
                if l.startswith("Command: `"))
  except (OSError, StopIteration):
    return ["--results_dir", "results"]
  words = line.split("`")[1].split()
  if "--results_dir" in words:
    return ["--results_dir", words[words.index("--results_dir") + 1]]
  return []


def committed_part(src: Path) -> list[str]:
  """The ``--tasks`` and ``--norms`` of the command in ``src``'s results.md
  (the norms study's part of its grid), as flags; [] where none is given."""
  try:
    line = next(l for l in (src / "results.md").read_text().splitlines()
                if l.startswith("Command: `"))
  except (OSError, StopIteration):
    return []
  words = line.split("`")[1].split()
  return [w for f in ("--tasks", "--norms") if f in words[:-1]
          for w in (f, words[words.index(f) + 1])]


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("target", choices=sorted(reproduce.TARGETS))
  p.add_argument("--preset", default="paper", choices=("paper", "cpu", "smoke"))
  p.add_argument("--seeds", default=None, type=int,
                 help="seeds per run (default: as many as the records hold)")
  p.add_argument("--results_dir", default=REPO / "results", type=Path,
                 help="the folder of committed results (default results/)")
  p.add_argument("--out", default=None, type=Path,
                 help="write the whole redrawn target here, not its figures into results/")
  a = p.parse_args(argv)
  name = a.target + ("" if a.preset == "paper" else f"_{a.preset}")
  src = a.results_dir / name
  if a.target == "geometry":
    print("error: geometry has no figures and no records to redraw from", file=sys.stderr)
    return 1
  if not src.is_dir():
    print(f"error: {src} not found: nothing committed to redraw", file=sys.stderr)
    return 1
  if a.out is not None and (line := runs.check_writable(a.out, "--out")) is not None:
    print(line, file=sys.stderr)
    return 1
  seeds = a.seeds if a.seeds is not None else record_seeds(src)
  with tempfile.TemporaryDirectory() as tmp:
    scratch = Path(tmp) / "runs" / a.target / a.preset
    for d in (d for d in src.iterdir() if (d / "config.json").is_file()):
      shutil.copytree(d, scratch / d.name)
    # The committed folder's command: results.md reads as committed.
    argv = [a.target, "--preset", a.preset, "--runs_dir", str(Path(tmp) / "runs"),
            *committed_results_dir(src), *committed_part(src)] + (
                ["--seeds", str(seeds)] if seeds > 1 else [])
    args = reproduce.parse(argv)
    args.write_dir = Path(tmp) / "out"
    args.no_training = src  # a run without a whole record is refused, not trained
    try:
      reproduce.run(args)
    except SystemExit as e:
      if e.code not in (None, 0):
        print(e.code if isinstance(e.code, str) else f"error: exit {e.code}", file=sys.stderr)
        return 1
      raise
    made = runs.out_dir(args)
    if a.out is not None:
      shutil.copytree(made, a.out, dirs_exist_ok=True)
      print(f"redrawn into {a.out}")
      return 0
    figures = sorted(made.glob("*.png"))
    for f in figures:
      shutil.copy2(f, src / f.name)
      print(f"redrew {src / f.name}")
    if not figures:
      print(f"{a.target} has no figures: nothing redrawn (its records are whole)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
