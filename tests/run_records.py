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


def resume_ends_as_fresh(train_and_evaluate, config, wd: Path, fresh: Path, first: list[dict],
                         step: int) -> None:
  """Runs ``config`` (more epochs than the run in ``wd``, whose records were
  ``first``) on ``wd``: it resumes, keeps ``first``, ends at ``step``, and
  ends where a fresh run of ``config`` in ``fresh`` ends, records and
  parameters exactly."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  state = train_and_evaluate(config, str(wd))
  assert int(state.step) == step
  assert without_timing(metrics(wd)[:len(first)]) == without_timing(first)
  fresh_state = train_and_evaluate(config, str(fresh))
  assert without_timing(metrics(wd)) == without_timing(metrics(fresh))
  for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(fresh_state.params)):
    assert jnp.array_equal(a, b), "params differ"


def steps_lower_the_loss(loss, params, tx, steps: int):
  """``steps`` jitted updates of ``tx`` on ``loss(params)``: every loss and
  parameter finite, the last loss below the first. Returns the parameters."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import optax  # pylint: disable=import-outside-toplevel

  @jax.jit
  def step(params, opt):
    l, g = jax.value_and_grad(loss)(params)
    u, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, u), opt, l

  opt, losses = tx.init(params), []
  for _ in range(steps):
    params, opt, l = step(params, opt)
    losses.append(float(l))
  assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
  assert all(np.isfinite(np.asarray(a)).all() for a in jax.tree.leaves(params))
  return params
