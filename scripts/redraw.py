r"""Redraws a target's figures from the records committed in results/, without
training anything: the records are copied into a scratch runs folder, where
``reproduce.py`` counts them as finished, and the target collects them.

  python scripts/redraw.py fig5 --preset cpu        # results/fig5_cpu/fig5.png
  python scripts/redraw.py fig6 --preset paper --seeds 3

Only the figures are kept: the records and results.md in results/ are put back
as they were (a results.md is rewritten only by a real ``reproduce.py`` run).
A record older than a config field counts as finished all the same
(``scripts/paper/runs.finished``). Should anything still need training, the
script stops with one line instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import shutil
import subprocess
import sys
import tempfile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts import reproduce  # noqa: E402  pylint: disable=wrong-import-position

class WouldTrain(Exception):
  pass


_POPEN = subprocess.Popen


def _no_training(cmd, **kw):
  if "experiments.main" in map(str, cmd):
    raise WouldTrain(" ".join(map(str, cmd)))
  return _POPEN(cmd, **kw)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("target", choices=sorted(reproduce.TARGETS))
  p.add_argument("--preset", default="paper", choices=("paper", "cpu", "smoke"))
  p.add_argument("--seeds", default=1, type=int)
  a = p.parse_args(argv)
  name = a.target + ("" if a.preset == "paper" else f"_{a.preset}")
  src = REPO / "results" / name
  if not src.is_dir():
    print(f"error: {src} not found: nothing committed to redraw", file=sys.stderr)
    return 1
  with tempfile.TemporaryDirectory() as tmp:
    runs = Path(tmp) / a.target / a.preset
    for d in (d for d in src.iterdir() if (d / "config.json").is_file()):
      shutil.copytree(d, runs / d.name)
    subprocess.Popen = _no_training  # reproduce.py starts its runs with it
    try:
      reproduce.main([a.target, "--preset", a.preset, "--runs_dir", tmp,
                      "--results_dir", "results", "--seeds", str(a.seeds)])
    except WouldTrain as e:
      print(f"error: a record is missing or of another config; this would train: {e}",
            file=sys.stderr)
      return 1
    finally:
      subprocess.Popen = _POPEN
      # The records and tables as committed; only the figures are new.
      subprocess.run(("git", "checkout", "--", f"results/{name}/*.md",
                      f"results/{name}/*/config.json", f"results/{name}/*/metrics.jsonl"),
                     cwd=REPO, capture_output=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
