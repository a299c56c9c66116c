"""Helpers for tests that run an experiment: the CLI, and a workdir's metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMING = ("wall_time", "epoch_time_s", "examples_per_sec")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "experiments.main", *args], cwd=REPO,
                        capture_output=True, text=True, env={**os.environ, **(env or {})},
                        timeout=300)


def metrics(wd: str | Path) -> list[dict]:
  return [json.loads(l) for l in (Path(wd) / "metrics.jsonl").read_text().splitlines()]


def without_timing(records: list[dict]) -> list[dict]:
  """The records less their wall-clock fields, which differ between runs."""
  return [{k: v for k, v in r.items() if k not in TIMING} for r in records]
