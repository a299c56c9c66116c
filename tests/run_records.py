"""Helpers for tests that run an experiment: the CLI, and a workdir's metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def straight_and_resumed(train_and_evaluate, config, tmp_path: Path, stop_after: int,
                         epochs: int = 2) -> tuple[Path, Any, Path, Any]:
  """Runs ``config`` for ``epochs`` epochs straight, and in another workdir for
  one epoch, then again for ``epochs`` (resuming there). Checks that the
  stopped run recorded only step ``stop_after``; returns (straight workdir,
  its final state, resumed workdir, its final state)."""
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  full = config.copy_and_resolve_references()
  full.num_epochs = epochs
  s_state = train_and_evaluate(full, str(straight))
  one = config.copy_and_resolve_references()
  one.num_epochs = 1
  train_and_evaluate(one, str(resumed))
  assert [r["step"] for r in metrics(resumed)] == [stop_after]
  r_state = train_and_evaluate(full, str(resumed))
  return straight, s_state, resumed, r_state
