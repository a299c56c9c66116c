"""The experiment runner end to end: files written, resume, NaN stop, bad input."""

import json
import signal
import time
import os
import platform
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from configs import pi_mnist as pi_mnist_config
from experiments import classifier, pi_mnist
from experiments.runner import workdir as wdir
from experiments.runner.errors import NonFiniteLossError
from lnorm.data import mnist
from tests.run_records import REPO, metrics, resume_ends_as_fresh, run_cli, without_timing
from tests.tiny_data import write_dataset

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow


@pytest.fixture
def tiny(tmp_path, monkeypatch):
  """A data_dir with 240 training and 40 test images, and a matching config."""
  _, checksums = write_dataset(tmp_path / "data", num={"train": 240, "test": 40})
  monkeypatch.setitem(mnist.MD5, "mnist", checksums)
  c = pi_mnist_config.get_config("smoke")
  c.data_dir, c.num_train, c.num_valid, c.hidden = str(tmp_path / "data"), 0, 40, (16, 8)
  c.batch_size, c.num_epochs, c.eval_batch_size = 32, 2, 16
  return c


def test_workdir_contents_and_resume(tiny, tmp_path):
  wd = tmp_path / "run"
  pi_mnist.train_and_evaluate(tiny, str(wd))
  record = json.loads((wd / "config.json").read_text())
  assert record["config"]["norm"] == "layer" and record["config"]["hidden"] == [16, 8]
  assert record["git_commit"] and record["versions"]["jax"] == jax.__version__
  first = metrics(wd)
  assert [r["epoch"] for r in first] == [1, 2] and [r["step"] for r in first] == [6, 12]
  for key in ("train_nll", "valid_error", "test_error", "test_nll", "examples_per_sec"):
    assert all(key in r for r in first)
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["12", "6"]
  assert list((wd / "tensorboard").glob("events.out.tfevents.*"))

  # A second call with more epochs resumes from step 12 and runs epoch 3 only,
  # ending exactly where an uninterrupted 3-epoch run ends.
  tiny.num_epochs = 3
  resume_ends_as_fresh(pi_mnist.train_and_evaluate, tiny, wd, tmp_path / "fresh", first, 18)


def _prepare(workdir: str, config) -> None:
  """Checks, creates and records a workdir, as a run's start does."""
  with wdir.RunDir(workdir, config) as rd:
    rd.create()


def test_resume_keeps_the_commit_that_started_the_run(tmp_path, monkeypatch):
  c = pi_mnist_config.get_config("smoke")
  monkeypatch.setattr(wdir, "git_commit", lambda: "aaa")
  _prepare(str(tmp_path), c)
  for commit in ("aaa", "bbb", "bbb", "ccc"):
    monkeypatch.setattr(wdir, "git_commit", lambda commit=commit: commit)
    c.num_epochs += 1
    _prepare(str(tmp_path), c)
  record = json.loads((tmp_path / "config.json").read_text())
  assert record["git_commit"] == "aaa" and record["config"]["num_epochs"] == c.num_epochs
  assert [r["git_commit"] for r in record["resumed_with"]] == ["bbb", "ccc"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_resume_on_fewer_cores_is_recorded(tmp_path):
  # XLA's CPU thread count follows the cores a process may use, and sums can
  # round differently with another count: a resume on other cores is recorded.
  c = pi_mnist_config.get_config("smoke")
  cores = os.sched_getaffinity(0)
  _prepare(str(tmp_path), c)
  first = json.loads((tmp_path / "config.json").read_text())
  assert first["host"]["cpu_threads"] == len(cores) and first["host"]["cpu"]
  try:
    os.sched_setaffinity(0, {min(cores)})
    c.num_epochs += 1
    _prepare(str(tmp_path), c)
  finally:
    os.sched_setaffinity(0, cores)
  record = json.loads((tmp_path / "config.json").read_text())
  assert record["host"] == first["host"]
  if len(cores) > 1:
    assert [r["host"]["cpu_threads"] for r in record["resumed_with"]] == [1]
  else:
    assert "resumed_with" not in record


def test_resume_refuses_another_config(tiny, tmp_path):
  pi_mnist.train_and_evaluate(tiny, str(tmp_path / "run"))
  tiny.norm = "batch"
  with pytest.raises(Exception, match="different config.*norm"):
    pi_mnist.train_and_evaluate(tiny, str(tmp_path / "run"))


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny, tmp_path, monkeypatch):
  wd = tmp_path / "run"
  tiny.num_epochs = 1
  pi_mnist.train_and_evaluate(tiny, str(wd))
  monkeypatch.setattr(classifier, "nll", lambda logits, y: jnp.full(y.shape, jnp.nan))
  jax.clear_caches()  # The epoch step must be traced again with the broken loss.
  tiny.num_epochs = 3
  with pytest.raises(NonFiniteLossError, match="nan in epoch 2.*step 6"):
    pi_mnist.train_and_evaluate(tiny, str(wd))
  jax.clear_caches()
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["6"]
  assert [r["epoch"] for r in metrics(wd)] == [1]


@pytest.mark.parametrize("override,message", [
    ("--config.norm=grop", "norm='grop' is not valid; choose one of: none, layer"),
    ("--config.batch_size=0", "batch_size=0 is not valid"),
    ("--config.nrom=layer", "unknown config field 'nrom' (did you mean 'norm'?); valid fields:"),
    ("--config.batch_size=abc", "--config.batch_size=abc"),
    ("--config.data_dir=/nonexistent", "/nonexistent/mnist/train-images-idx3-ubyte.gz not found"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, override, message):
  wd = tmp_path / "run"
  r = run_cli("--config=configs/pi_mnist.py:smoke", f"--workdir={wd}", override)
  assert r.returncode != 0
  assert r.stderr.strip().startswith("error: ") and message in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
  assert not wd.exists()


def test_bad_native_mode_is_one_line(tmp_path):
  wd = tmp_path / "run"
  r = run_cli("--config=configs/pi_mnist.py:smoke", f"--workdir={wd}",
              env={"LNORM_NATIVE": "sometimes"})
  assert r.returncode == 2 and not wd.exists()
  assert r.stderr.strip() == ("error: LNORM_NATIVE='sometimes': expected one of "
                              "auto, off, require")


_FAULTS = """
import resource
import numpy as np
from experiments.runner.cli import keep_freed_memory

applied = keep_freed_memory()
for _ in range(2):
  np.ones(1 << 24)  # 128 MiB, freed at once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
  np.ones(1 << 24)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_keep_freed_memory_stops_page_faults_on_reused_blocks():
  def run(**env):
    env.update((k, v) for k, v in os.environ.items()
               if not k.startswith("MALLOC_"))
    r = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True,
                       text=True, cwd=REPO, env=env, check=True)
    applied, faults = r.stdout.split()
    return applied, int(faults)

  applied, kept = run()
  # glibc's own default, which the user's setting of it leaves in place.
  untouched, default = run(MALLOC_MMAP_MAX_="65536")
  assert (applied, untouched) == ("True", "False")
  assert kept < 50 < default


def test_bad_config_file_and_preset(tmp_path):
  for spec, message in (("configs/nope.py", "not found"),
                        ("configs/pi_mnist.py:gpu", "unknown preset 'gpu'")):
    r = run_cli(f"--config={spec}", f"--workdir={tmp_path / 'run'}")
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_cli_runs_table1(tmp_path):
  wd = tmp_path / "table1"
  r = run_cli("--config=configs/invariance.py:smoke", f"--workdir={wd}")
  assert r.returncode == 0, r.stderr
  assert "| Layer norm | Invariant" in r.stdout
  assert (wd / "table1.md").read_text().startswith("# Table 1")
  assert json.loads((wd / "config.json").read_text())["config"]["experiment"] == "invariance"
  assert len(metrics(wd)) == 1


def test_sigkill_then_rerun_matches_uninterrupted_run(tmp_path):
  _, checksums = write_dataset(tmp_path / "data", num={"train": 1500, "test": 100})
  (tmp_path / "md5.json").write_text(json.dumps(checksums))
  flags = ["--config=configs/pi_mnist.py:smoke", f"--config.data_dir={tmp_path / 'data'}",
           "--config.num_train=0", "--config.num_valid=100", "--config.num_epochs=6",
           "--config.batch_size=8", "--config.hidden=(128, 128)"]

  def command(wd):
    return [sys.executable, str(REPO / "tests" / "run_with_tiny_checksums.py"),
            str(tmp_path / "md5.json"), *flags, f"--workdir={wd}"]

  env = {**os.environ, "PYTHONPATH": str(REPO)}
  killed = tmp_path / "killed"
  p = subprocess.Popen(command(killed), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 240
  while not (killed / "checkpoints" / "350").exists() and p.poll() is None:
    assert time.monotonic() < deadline, "no checkpoint after 240 s"
    time.sleep(0.02)
  p.send_signal(signal.SIGKILL)   # Mid-run: after epoch 2's checkpoint appeared.
  p.wait()
  assert p.returncode == -signal.SIGKILL
  assert len(metrics(killed)) < 6
  for wd in (killed, tmp_path / "straight"):
    r = subprocess.run(command(wd), cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
  assert without_timing(metrics(killed)) == without_timing(metrics(tmp_path / "straight"))
  assert [r["epoch"] for r in metrics(killed)] == [1, 2, 3, 4, 5, 6]


def test_truncated_gz_is_one_line_and_writes_nothing(tmp_path):
  write_dataset(tmp_path / "data", num={"train": 50, "test": 10})
  f = tmp_path / "data" / "mnist" / "train-images-idx3-ubyte.gz"
  f.write_bytes(f.read_bytes()[:-100])
  r = run_cli("--config=configs/pi_mnist.py:smoke", f"--workdir={tmp_path / 'run'}",
              f"--config.data_dir={tmp_path / 'data'}")
  assert r.returncode != 0 and "train-images-idx3-ubyte.gz" in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
  assert not (tmp_path / "run").exists()


def test_convnet_on_tiny_fashion_mnist(tmp_path, monkeypatch):
  from configs import convnet as convnet_config
  from experiments import convnet
  _, checksums = write_dataset(tmp_path / "data", name="fashion_mnist",
                               num={"train": 120, "test": 20})
  monkeypatch.setitem(mnist.MD5, "fashion_mnist", checksums)
  c = convnet_config.get_config("smoke")
  c.dataset, c.data_dir, c.num_train, c.num_valid = "fashion_mnist", str(tmp_path / "data"), 0, 20
  c.batch_size, c.norm = 16, "batch"
  state = convnet.train_and_evaluate(c, str(tmp_path / "run"))
  (m,) = metrics(tmp_path / "run")
  assert int(state.step) == 6 and m["epoch"] == 1 and 0 <= m["test_error"] <= 1
  assert "mean" in state.batch_stats["conv0"]
