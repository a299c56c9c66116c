"""scripts/reproduce.py: scheduling runs and reading their metrics into tables
(the runs themselves: test_runner.py)."""

import os
import subprocess
import sys

from tests.run_records import REPO


def test_a_failed_run_stops_the_target_and_writes_no_results(tmp_path):
  # fig4 has three runs; with --jobs 2 the first two start together and both
  # fail at once (no data), so the third must never start.
  (tmp_path / "empty").mkdir()
  p = subprocess.run(
      [sys.executable, "scripts/reproduce.py", "fig4", "--preset", "smoke", "--jobs", "2",
       "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results")],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env={**os.environ, "LNORM_DATA_DIR": str(tmp_path / "empty")})
  assert p.returncode == 1
  assert p.stderr.strip().splitlines()[-1] == (
      "error: run(s) none, layer_c failed; rerun the same command to resume")
  logs = tmp_path / "runs" / "fig4" / "smoke"
  for name in ("none", "layer_c"):
    assert "binarized_mnist_train.amat.gz not found" in (logs / f"{name}.log").read_text()
  assert not (logs / "layer.log").exists()
  assert not (tmp_path / "results").exists()


def test_jobs_must_be_positive(tmp_path):
  p = subprocess.run([sys.executable, "scripts/reproduce.py", "fig4", "--jobs", "0"],
                     cwd=REPO, capture_output=True, text=True, timeout=60)
  assert p.returncode == 2
  assert p.stderr.strip().splitlines()[-1].endswith("--jobs must be at least 1, got 0")


def test_train_nll_table_reads_the_epochs_and_the_first_crossings():
  from scripts import reproduce
  nll = [0.5, 0.08, 0.04, 0.02, 0.009, 0.012, 0.0009]  # not monotone: epoch 6 goes back up
  records = {"run a": {"metrics": [{"epoch": e + 1, "train_nll": v} for e, v in enumerate(nll)]}}
  lines = reproduce._train_nll_table(records).strip().splitlines()  # pylint: disable=protected-access
  assert lines[-3].startswith("| run | epoch 1 | epoch 2 | epoch 5 | <= 0.1 | <= 0.03 |")
  assert lines[-1] == "| run a | 0.5 | 0.08 | 0.009 | 2 | 4 | 5 | 7 |"
  assert reproduce._epochs_to(records["run a"]["metrics"], "train_nll", 1e-4) == "not reached"  # pylint: disable=protected-access
