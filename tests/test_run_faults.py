"""Faults a run must not lie about (issue 58): a damaged or missing metrics
record, links out of the workdir, config overrides of the wrong type, fields
a resume adds or moves, non-finite metrics and the NaN stop. The loop's cases
run the toy experiment of tests/test_loop.py; the command line's, pi_mnist."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.runner import cli, figures, loop
from experiments.runner import records as rec
from experiments.runner import workdir as wdir
from experiments.runner.errors import NonFiniteLossError, UserError
from tests.run_records import REPO, metrics, without_timing
from tests.test_loop import params, run, toy_config, toy_task

slow = pytest.mark.slow


def strict(line: str) -> dict:
  """JSON as RFC 8259 has it: no NaN, no Infinity (what jq reads)."""
  def refuse(name):
    raise ValueError(f"not JSON: {name}")
  return json.loads(line, parse_constant=refuse)


# --- A record lost or damaged ------------------------------------------------

def _two_epochs(tmp_path: Path) -> Path:
  wd = tmp_path / "run"
  run(toy_config(num_epochs=2), wd)
  return wd


@slow
@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_lost_last_record_is_made_again_and_the_run_ends_complete(tmp_path, capsys,
                                                                     damage):
  # "truncated": the last line cut short (a damaged file); "missing": a run
  # killed after its checkpoint but before its record reached the disk.
  wd = _two_epochs(tmp_path)
  lines = (wd / "metrics.jsonl").read_text().splitlines(keepends=True)
  last = lines[-1][:len(lines[-1]) // 2] if damage == "truncated" else ""
  (wd / "metrics.jsonl").write_text("".join(lines[:-1]) + last)
  assert rec.unfinished(wd, num_steps=12) is not None
  assert not rec.finished(wd, num_epochs=2)
  capsys.readouterr()

  state = run(toy_config(num_epochs=2), wd)
  out = capsys.readouterr().out
  assert "checkpoint 12 has no record" in out and "trained again from checkpoint 6" in out
  assert "resuming from step 6 of 12" in out and "nothing was trained" not in out
  straight = run(toy_config(num_epochs=2), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))
  np.testing.assert_array_equal(params(state), params(straight))
  assert rec.finished(wd, num_steps=12) and rec.finished(wd, num_epochs=2)
  assert rec.checkpoint_steps(wd) == [6, 12]
  # Done now: the next run of the same command trains nothing.
  run(toy_config(num_epochs=2), wd)
  assert "nothing was trained: the run is already at step 12 of 12" in capsys.readouterr().out


@slow
def test_a_lost_only_record_is_made_again_from_the_start(tmp_path, capsys):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=1), wd)
  (wd / "metrics.jsonl").write_text("")
  run(toy_config(num_epochs=1), wd)
  assert "trained again from the start" in capsys.readouterr().out
  run(toy_config(num_epochs=1), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))


@slow
def test_a_damaged_record_before_the_resume_point_is_refused(tmp_path):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=3), wd)  # checkpoints 12 and 18 kept
  lines = (wd / "metrics.jsonl").read_text().splitlines(keepends=True)
  lines[1] = lines[1][:20] + "\n"  # step 12's record, whose step 6 checkpoint is gone
  (wd / "metrics.jsonl").write_text("".join(lines))
  before = (wd / "metrics.jsonl").read_text()
  with pytest.raises(UserError, match=r"line 2 of .*metrics.jsonl is damaged, before the "
                     r"record of step 18 that the run resumes from"):
    run(toy_config(num_epochs=4), wd)
  assert (wd / "metrics.jsonl").read_text() == before
  assert rec.unfinished(wd, num_epochs=3) == f"line 2 of {wd / 'metrics.jsonl'} is damaged"


def test_unfinished_says_why(tmp_path):
  wd = tmp_path
  assert "does not exist" in rec.unfinished(wd, num_steps=2)
  (wd / "metrics.jsonl").write_text('{"step": 1, "epoch": 1}\n{"step": 2, "epoch": 2}\n')
  assert rec.unfinished(wd, num_steps=2) is None and rec.finished(wd, num_epochs=2)
  assert rec.unfinished(wd, num_steps=3) == "its last record is at step 2 of 3"
  assert rec.unfinished(wd, num_epochs=3) == "its last record is at epoch 2 of 3"
  # Records copied without checkpoints count on their own; with checkpoints,
  # the newest must have its record.
  (wd / "checkpoints" / "2").mkdir(parents=True)
  (wd / "checkpoints" / "3.orbax-checkpoint-tmp-1").mkdir()  # being written: not one
  assert rec.finished(wd, num_steps=2)
  (wd / "checkpoints" / "3").mkdir()
  assert rec.unfinished(wd, num_steps=2) == (
      f"checkpoint 3 has no record in {wd / 'metrics.jsonl'}")


# --- Links out of the workdir ------------------------------------------------

@slow
@pytest.mark.parametrize("name", ["lock", "config.json", "metrics.jsonl", "checkpoints",
                                  "tensorboard"])
def test_a_link_in_the_workdir_is_refused_and_nothing_written_through_it(tmp_path, name):
  outside = tmp_path / "outside"
  if name in ("checkpoints", "tensorboard"):
    outside.mkdir()
  else:
    outside.write_text("keep\n")
  wd = tmp_path / "run"
  if name in ("config.json", "metrics.jsonl"):
    run(toy_config(num_epochs=1), wd)
    (wd / name).unlink()
  else:
    wd.mkdir()
  (wd / name).symlink_to(outside)
  with pytest.raises(UserError, match=f"{wd / name} is a symbolic link \\(to {outside}\\); "
                     "a run writes nothing through links"):
    run(toy_config(num_epochs=2), wd)
  if outside.is_dir():
    assert not list(outside.iterdir())
  else:
    assert outside.read_text() == "keep\n"


def test_writes_never_follow_a_link(tmp_path):
  outside = tmp_path / "outside"
  outside.write_text("keep\n")
  (tmp_path / "metrics.jsonl").symlink_to(outside)
  with pytest.raises(UserError, match="is a symbolic link"):
    wdir.append(tmp_path / "metrics.jsonl", "x\n")
  # A temporary that is a link (planted, or a crash's) is replaced, not written through.
  (tmp_path / "config.json.tmp").symlink_to(outside)
  wdir.write_atomic(tmp_path / "config.json", "{}\n")
  assert outside.read_text() == "keep\n" and (tmp_path / "config.json").read_text() == "{}\n"
  assert not (tmp_path / "config.json").is_symlink()


# --- Resumes that add or move config fields ----------------------------------

def _record(wd: Path) -> dict:
  return json.loads((wd / "config.json").read_text())


def _drop_field(wd: Path, field: str) -> None:
  record = _record(wd)
  del record["config"][field]
  (wd / "config.json").write_text(json.dumps(record))


def test_a_field_the_record_lacks_is_recorded_under_resumed_with(tmp_path):
  # A run made before the config had `learning_rate` ran with its old
  # behaviour; a resume that sets it must not claim it for the whole run.
  wd = tmp_path / "run"
  with wdir.RunDir(str(wd), toy_config(num_epochs=1)) as rd:
    rd.create()
  _drop_field(wd, "learning_rate")
  with wdir.RunDir(str(wd), toy_config(num_epochs=2, learning_rate=0.5)) as rd:
    rd.create()
  record = _record(wd)
  assert "learning_rate" not in record["config"] and record["config"]["num_epochs"] == 2
  assert record["resumed_with"][-1]["config"] == {"learning_rate": 0.5}
  # The same resume again adds nothing; another value is recorded again.
  for lr, entries in ((0.5, 1), (0.1, 2)):
    with wdir.RunDir(str(wd), toy_config(num_epochs=2, learning_rate=lr)) as rd:
      rd.create()
    assert len(_record(wd)["resumed_with"]) == entries
  assert _record(wd)["resumed_with"][-1]["config"] == {"learning_rate": 0.1}


def test_a_moved_data_dir_is_recorded_not_written_over(tmp_path):
  wd = tmp_path / "run"
  for data_dir in ("/data/a", "/data/b", "/data/b"):
    with wdir.RunDir(str(wd), toy_config(), data_dir=data_dir) as rd:
      rd.create()
  record = _record(wd)
  assert record["config"]["data_dir"] == "/data/a"
  assert [r.get("config") for r in record["resumed_with"]] == [{"data_dir": "/data/b"}]


# --- Non-finite metrics --------------------------------------------------------

def test_non_finite_metrics_are_strict_json_and_read_back(tmp_path):
  record = {"step": 3, "epoch": 1, "a": float("nan"), "b": float("inf"), "c": -math.inf,
            "d": 0.5}
  line = rec.encode(record)
  assert strict(line) == {"step": 3, "epoch": 1, "a": None, "b": None, "c": None, "d": 0.5,
                          "nonfinite": {"a": "nan", "b": "inf", "c": "-inf"}}
  back = rec.decode(line)
  assert math.isnan(back["a"]) and back["b"] == math.inf and back["c"] == -math.inf
  assert back["d"] == 0.5 and "nonfinite" not in back
  (tmp_path / "metrics.jsonl").write_text(line + '{"step": 4, "a": NaN}\n')  # an old file
  for records in (rec.read(tmp_path / "metrics.jsonl")[0], figures.read_metrics(tmp_path)):
    assert math.isnan(records[0]["a"]) and math.isnan(records[1]["a"])
    assert records[0]["b"] == math.inf and "nonfinite" not in records[0]


def _diverging_task(config, bad_step: int, eval_nan_from: int | None = None):
  """The toy task, whose update at step ``bad_step`` (0-based) makes the
  parameters NaN while that step's own loss is finite; or, with
  ``eval_nan_from``, whose evaluation alone is NaN from that step on."""
  task = toy_task(config)
  train_step, evaluate = task.train_step, task.evaluate

  def step(state, batch):
    new, m = train_step(state, batch)
    poison = jnp.where(state.step == bad_step, jnp.nan, 0.0)
    return new.replace(params=jax.tree.map(lambda p: p + poison, new.params)), m

  def ev(state):
    out = evaluate(state)
    if eval_nan_from is not None and int(state.step) >= eval_nan_from:
      out = {k: float("nan") for k in out}
    return out
  task.train_step, task.evaluate = step, ev
  return task


@slow
def test_nan_stop_names_the_last_checkpoint_with_finite_metrics(tmp_path):
  # Step 11, the last of epoch 2, makes the parameters NaN: epoch 2's train
  # mean is finite, its evaluation is not, and epoch 3's loss is NaN.
  wd, config = tmp_path / "run", toy_config(num_epochs=3)
  with pytest.raises(NonFiniteLossError, match=(
      r"train_mse is nan in epoch 3 \(steps 13-18\); stopped\. The last good checkpoint "
      r"\(step 6\) is kept in .*checkpoints; checkpoint 12 after it has valid_mse=nan")):
    loop.run(config, str(wd), lambda: _diverging_task(config, bad_step=11))
  assert rec.checkpoint_steps(wd) == [6, 12]
  lines = (wd / "metrics.jsonl").read_text().splitlines()
  assert strict(lines[1])["valid_mse"] is None
  assert strict(lines[1])["nonfinite"] == {"valid_mse": "nan"}


@slow
def test_the_last_checkpoint_with_finite_metrics_outlives_newer_ones(tmp_path):
  wd, config = tmp_path / "run", toy_config(num_epochs=4)
  loop.run(config, str(wd), lambda: _diverging_task(config, -1, eval_nan_from=12))
  assert rec.checkpoint_steps(wd) == [6, 18, 24]
  for line in (wd / "metrics.jsonl").read_text().splitlines():
    strict(line)


# --- The command line ----------------------------------------------------------

@pytest.mark.parametrize("raw,default,value,message", [
    ("abc", (64, 64), ("abc",), "hidden=abc is not valid: hidden is a tuple of integers "
     "(the config's is (64, 64)); write it as a Python tuple, e.g. --config.hidden=(64, 64)"),
    ("1000", (64, 64), (1000,), "hidden=1000 is not valid: hidden is a tuple of integers "
     "(the config's is (64, 64)); for one value write --config.hidden=(1000,)"),
    ("(64.5,32)", (64, 64), (64.5, 32), "hidden=(64.5,32) is not valid: hidden is a tuple of "
     "integers (the config's is (64, 64)), and 64.5 is not one"),
    ("(True,)", (64, 64), (True,), "and True is not one"),
    ("(1e-5,)", (1e-5, 1e-10), (1e-5,), None),
    ("(1, 2e-3)", (1e-5, 1e-10), (1, 2e-3), None),   # an integer is a number
    ("[32]", (64, 64), (32,), None),
    ("(32,)", (64, 64), (32,), None),
    ("1", 0.5, 1.0, None),
    ("x", "layer", "x", None),
])
def test_override_types(raw, default, value, message):
  got = cli._type_error("hidden", raw, default, value)  # pylint: disable=protected-access
  if message is None:
    assert got is None
  else:
    assert message in got


CLI_CASES = [
    (["--config.hidden=abc"], "error: hidden=abc is not valid: hidden is a tuple of integers"),
    (["--config.hidden=(64.5,32)"], "error: hidden=(64.5,32) is not valid: hidden is a tuple "
     "of integers (the config's is (64, 64)), and 64.5 is not one"),
    (["--config.hidden=1000"], "for one value write --config.hidden=(1000,)"),
    (["--config.experiment=runner.loop"], "error: experiment='runner.loop' is not an "
     "experiment; choose one of: convnet, draw"),
    (["--config.experiment=main"], "error: experiment='main' is not an experiment"),
    (["--config.seed=true"], "error: flag --config.seed=true"),
    (["--workdir="], "error: --workdir is empty; give the run's directory"),
]


@slow
@pytest.mark.parametrize("extra,message", CLI_CASES)
def test_bad_overrides_are_one_line_before_anything_runs(tmp_path, extra, message):
  # Run from an empty folder: where --workdir "" would train.
  wd = [] if any(a.startswith("--workdir") for a in extra) else [f"--workdir={tmp_path / 'run'}"]
  r = subprocess.run(
      [sys.executable, "-m", "experiments.main", f"--config={REPO}/configs/pi_mnist.py:smoke",
       *wd, *extra], cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env={**os.environ, "PYTHONPATH": str(REPO), "LNORM_DATA_DIR": str(tmp_path / "no_data")})
  assert r.returncode == 2 and message in r.stderr, r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
  assert not (tmp_path / "run").exists() and not os.listdir(tmp_path)
