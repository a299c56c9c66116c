r"""One command per table or figure of the paper.

  python scripts/reproduce.py table1 [--preset paper|cpu|smoke]

Each run goes through ``experiments.main`` into ``<runs_dir>/<target>/<run>``
(a rerun resumes there), then its config.json, metrics.jsonl and outputs are
copied into ``<results_dir>/<target>/`` with the command and commit that made
them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# target -> (config file, {run name: overrides}, extra files to keep)
TARGETS = {
    "table1": ("configs/invariance.py", {"table1": {}}, ("table1.md",)),
}


def run(config: str, preset: str, workdir: Path, overrides: dict) -> None:
  cmd = [sys.executable, "-m", "experiments.main", f"--config={config}:{preset}",
         f"--workdir={workdir}", *(f"--config.{k}={v}" for k, v in overrides.items())]
  print("+", " ".join(cmd[1:]), flush=True)
  if subprocess.run(cmd, cwd=REPO).returncode:
    sys.exit(f"error: run {workdir.name} failed; rerun the same command to resume it")


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("target", choices=sorted(TARGETS))
  p.add_argument("--preset", default="paper", choices=("paper", "cpu", "smoke"))
  p.add_argument("--runs_dir", default="runs", type=Path)
  p.add_argument("--results_dir", default="results", type=Path)
  args = p.parse_args(argv)
  config, runs, keep = TARGETS[args.target]
  out = REPO / args.results_dir / args.target
  for name, overrides in runs.items():
    wd = (REPO / args.runs_dir / args.target / name).resolve()
    run(config, args.preset, wd, overrides)
    dest = out / name if len(runs) > 1 else out
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "metrics.jsonl", *keep):
      shutil.copy2(wd / f, dest / f)
    commit = json.loads((wd / "config.json").read_text())["git_commit"]
    (dest / "COMMAND").write_text(
        f"python scripts/reproduce.py {args.target} --preset {args.preset}\n"
        f"commit {commit}\n")
  print(f"results in {out}")


if __name__ == "__main__":
  main()
