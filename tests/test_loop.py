"""The run loop's guarantees, once, on a toy experiment defined here: files,
resume, evaluation points, the NaN stop, damaged files, the filesystem, the lock.
The same guarantees end to end through the CLI (pi_mnist on tiny data): two runs
at once, SIGINT, --help and config-file errors."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from experiments.runner import loop
from experiments.runner import workdir as wdir
from experiments.runner.errors import NonFiniteLossError, UserError
from tests.run_records import REPO, metrics, run_cli, without_timing
from tests.tiny_data import write_dataset

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow

N, D, B = 48, 5, 8  # 6 steps an epoch


def toy_config(**overrides) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dict(
      experiment="toy", seed=0, batch_size=B, num_epochs=3, learning_rate=0.1,
      eval_every_steps=0, steps_per_call=0, nan_from=-1, num_steps=0))
  c.update(overrides)
  return c


def toy_task(config, scan_epoch: bool = True) -> loop.Task:
  """Least squares on fixed random data, SGD, shuffled epochs."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(N, D)), jnp.float32)
  y = x @ jnp.arange(1.0, D + 1) + 0.1 * jnp.asarray(rng.normal(size=N), jnp.float32)
  root = jax.random.key(config.seed)

  def train_step(state, batch):
    xb, yb = batch
    loss, g = jax.value_and_grad(lambda p: jnp.mean((xb @ p["w"] - yb) ** 2))(state.params)
    loss = jnp.where(state.step >= config.nan_from, jnp.nan, loss) \
        if config.nan_from >= 0 else loss
    return state.apply_gradients(grads=g), {"mse": loss, "w0": state.params["w"][0]}

  feed = loop.EpochShuffle(
      data=(x, y), num_examples=N, batch_size=B,
      shuffle_key=lambda epoch: jax.random.fold_in(root, epoch),
      batch=lambda data, xs: (data[0][xs["idx"]], data[1][xs["idx"]]))
  state = TrainState.create(apply_fn=None, params={"w": jnp.zeros(D)},
                            tx=optax.sgd(config.learning_rate))
  return loop.Task(
      state=state, train_step=train_step, feed=feed,
      evaluate=lambda s: {"valid_mse": float(jnp.mean((x @ s.params["w"] - y) ** 2))},
      num_steps=config.num_steps or config.num_epochs * feed.steps_per_epoch,
      steps_per_epoch=feed.steps_per_epoch, examples_per_step=B, scan_epoch=scan_epoch,
      show=("train_mse", "valid_mse"))


def run(config, wd, **kw):
  return loop.run(config, str(wd), lambda: toy_task(config, **kw))


def params(state) -> np.ndarray:
  return np.asarray(state.params["w"])


def test_files_resume_and_summary(tmp_path, capsys):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=2), wd)
  first = metrics(wd)
  assert [(r["step"], r["epoch"]) for r in first] == [(6, 1), (12, 2)]
  assert set(first[0]) >= {"train_mse", "train_w0", "valid_mse", "epoch_time_s",
                           "examples_per_sec", "wall_time"}
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["12", "6"]
  assert json.loads((wd / "config.json").read_text())["config"]["num_epochs"] == 2
  out = capsys.readouterr().out
  assert "fresh run: 12 steps (2 epochs)" in out and "done: step 12 of 12" in out
  assert "best train_mse=" in out

  resumed = run(toy_config(num_epochs=3), wd)
  assert "resuming from step 12 of 18 (epoch 2 of 3 done)" in capsys.readouterr().out
  straight = run(toy_config(num_epochs=3), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))
  np.testing.assert_array_equal(params(resumed), params(straight))
  # The loop's mean is the mean of the steps' own values.
  assert metrics(wd)[0]["train_w0"] != 0

  run(toy_config(num_epochs=3), wd)
  assert "nothing was trained: the run is already at step 18 of 18" in \
      capsys.readouterr().out
  assert len(metrics(wd)) == 3


def test_epoch_counts_read_as_english(tmp_path, capsys):
  # One epoch is singular; a run shorter than an epoch is in epoch 1 of 1, not 1/0.
  run(toy_config(num_epochs=1), tmp_path / "one")
  out = capsys.readouterr().out
  assert "fresh run: 6 steps (1 epoch)" in out and "epoch 1/1 step 6/6" in out
  run(toy_config(num_steps=3), tmp_path / "part")
  out = capsys.readouterr().out
  assert "fresh run: 3 steps (0.5 of an epoch)" in out and "epoch 1/1 step 3/3" in out
  run(toy_config(num_steps=9), tmp_path / "more")
  out = capsys.readouterr().out
  assert "fresh run: 9 steps (1.5 epochs)" in out and "epoch 2/2 step 9/9" in out
  assert "/0 " not in out


def test_zero_epochs_says_nothing_was_trained(tmp_path, capsys):
  run(toy_config(num_epochs=0), tmp_path / "run")
  assert "nothing was trained: the config asks for 0 steps (num_epochs=0)" in \
      capsys.readouterr().out
  assert not (tmp_path / "run" / "metrics.jsonl").exists() or not metrics(tmp_path / "run")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_before_training_stops_at_once_and_writes_nothing(tmp_path, signum):
  wd, config = tmp_path / "run", toy_config()
  before = signal.getsignal(signum)

  def setup():  # the signal comes while the data loads
    signal.raise_signal(signum)
    return toy_task(config)

  with pytest.raises(loop.Stopped) as e:
    loop.run(config, str(wd), setup)
  name = signal.Signals(signum).name
  assert str(e.value) == (f"stopped by {name} before training began; nothing was trained. "
                          "Rerun the same command to start or resume")
  assert e.value.exit_code == 128 + signum
  assert not (wd / "config.json").exists() and not (wd / "checkpoints").exists()
  assert signal.getsignal(signum) is before
  state = run(config, wd)  # the lock was released
  np.testing.assert_array_equal(params(state), params(run(config, tmp_path / "straight")))


def test_resume_mid_epoch_says_which_epoch(tmp_path, capsys):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=1, eval_every_steps=4), wd)  # checkpoints at steps 4 and 6
  shutil.rmtree(wd / "checkpoints" / "6")
  capsys.readouterr()
  run(toy_config(num_epochs=1, eval_every_steps=4), wd)
  assert "resuming from step 4 of 6 (in epoch 1 of 1)" in capsys.readouterr().out


def test_eval_every_steps_chunks_and_steps_one_a_call_agree(tmp_path):
  # Evaluations at steps 4, 6 (epoch end), 8, 12, ...; a mid-epoch record's
  # epoch is fractional.
  a = run(toy_config(eval_every_steps=4, num_epochs=2), tmp_path / "a")
  got = [(r["step"], r["epoch"]) for r in metrics(tmp_path / "a")]
  assert got == [(4, 4 / 6), (6, 1), (8, 8 / 6), (12, 2)] or \
      got == [(4, round(4 / 6, 6)), (6, 1), (8, round(8 / 6, 6)), (12, 2)]
  # The same run, two steps a call: the same numbers.
  b = run(toy_config(eval_every_steps=4, num_epochs=2, steps_per_call=2), tmp_path / "b")
  assert without_timing(metrics(tmp_path / "a")) == without_timing(metrics(tmp_path / "b"))
  np.testing.assert_array_equal(params(a), params(b))
  # One jitted call per step: the same steps, up to XLA's rounding.
  c = run(toy_config(eval_every_steps=4, num_epochs=2), tmp_path / "c", scan_epoch=False)
  np.testing.assert_allclose(params(a), params(c), rtol=1e-6)
  for ra, rc in zip(metrics(tmp_path / "a"), metrics(tmp_path / "c")):
    np.testing.assert_allclose(ra["train_mse"], rc["train_mse"], rtol=1e-5)
  # Resuming from a mid-epoch evaluation lands on the same numbers.
  run(toy_config(eval_every_steps=4, num_epochs=1), tmp_path / "d")
  assert [r["step"] for r in metrics(tmp_path / "d")] == [4, 6]
  d = run(toy_config(eval_every_steps=4, num_epochs=2), tmp_path / "d")
  assert without_timing(metrics(tmp_path / "d")) == without_timing(metrics(tmp_path / "a"))
  np.testing.assert_array_equal(params(a), params(d))


def test_schedule_with_many_lengths_calls_in_powers_of_two():
  # The reader's plan: 227-step epochs, evaluations every 200 steps.
  plan = loop.schedule(0, 4540, 227, 200, 0)
  assert len({b - a for a, b, _ in plan}) <= 8
  assert all((b - a) & (b - a - 1) == 0 for a, b, _ in plan)
  assert [a for a, _, _ in plan[1:]] == [b for _, b, _ in plan[:-1]]
  assert plan[0][0] == 0 and plan[-1][1] == 4540
  points = sorted({*range(200, 4540, 200), *range(227, 4540, 227), 4540})
  assert [b for _, b, ev in plan if ev] == points
  # A resumed run's calls are the same as those from step 0.
  assert loop.schedule(2400, 4540, 227, 200, 0) == [c for c in plan if c[0] >= 2400]
  # Few lengths: one call between two points, as before.
  assert loop.schedule(0, 2000, None, 100, 0) == [(a, a + 100, True) for a in range(0, 2000, 100)]


def test_calls_in_powers_of_two_train_as_one_step_a_call(tmp_path):
  # 6-step epochs, evaluations every 5: call lengths 1-5, so the split applies.
  c = toy_config(eval_every_steps=5, num_epochs=5)
  assert len({b - a for a, b, _ in loop.schedule(0, 30, 6, 5, 0)}) < 5
  a = run(c, tmp_path / "a")
  b = run(toy_config(eval_every_steps=5, num_epochs=5, steps_per_call=1), tmp_path / "b")
  np.testing.assert_array_equal(params(a), params(b))
  assert without_timing(metrics(tmp_path / "a")) == without_timing(metrics(tmp_path / "b"))


def test_schedule_never_crosses_an_evaluation_or_epoch_end():
  assert loop.schedule(0, 12, 6, 4, 0) == [(0, 4, True), (4, 6, True), (6, 8, True),
                                           (8, 12, True)]
  assert loop.schedule(6, 12, 6, 0, 4) == [(6, 10, False), (10, 12, True)]
  assert loop.schedule(0, 5, None, 0, 2) == [(0, 2, False), (2, 4, False), (4, 5, True)]


class _HostBatches:
  """A Feed of host-side batches, one a step: ``get(step)`` is step's batch."""

  def __init__(self, get):
    self.get, self.data = get, ()

  def plan(self, start: int, stop: int):
    return jax.tree.map(lambda *a: np.stack(a), *(self.get(s) for s in range(start, stop)))

  def batch(self, data, xs):
    del data
    return xs


def test_host_batches_without_epochs(tmp_path):
  """A run counted in updates, its batches made on the host from the step."""
  c = toy_config(eval_every_steps=3, num_epochs=0)

  def task():
    t = toy_task(c)
    x, y = t.feed.data
    feed = _HostBatches(lambda s: (np.asarray(x)[s % N:s % N + 1].repeat(B, 0),
                                   np.asarray(y)[s % N:s % N + 1].repeat(B)))
    return loop.Task(state=t.state, train_step=t.train_step, feed=feed,
                     evaluate=t.evaluate, num_steps=7)

  loop.run(c, str(tmp_path / "run"), task)
  records = metrics(tmp_path / "run")
  assert [r["step"] for r in records] == [3, 6, 7] and "epoch" not in records[0]


def test_nan_stop_keeps_last_good_checkpoint(tmp_path):
  wd = tmp_path / "run"
  with pytest.raises(NonFiniteLossError, match=r"train_mse is nan in epoch 2 \(steps 7-12\)"
                     r"; stopped\. The last good checkpoint \(step 6\) is kept"):
    run(toy_config(nan_from=8), wd)
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["6"]
  assert [r["step"] for r in metrics(wd)] == [6]


def test_nan_stop_with_no_checkpoint_says_so(tmp_path):
  with pytest.raises(NonFiniteLossError, match="No checkpoint was written yet"):
    run(toy_config(nan_from=0), tmp_path / "run")


def test_changed_or_lowered_config_is_refused(tmp_path):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=2), wd)
  with pytest.raises(UserError, match="different config .fields: learning_rate"):
    run(toy_config(num_epochs=2, learning_rate=0.2), wd)
  with pytest.raises(UserError, match="num_epochs=1 is below the 2 of the run"):
    run(toy_config(num_epochs=1), wd)
  assert len(metrics(wd)) == 2


def _truncate_largest_file(directory: Path) -> Path:
  f = max((p for p in directory.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
  f.write_bytes(f.read_bytes()[:f.stat().st_size // 2])
  return f


def test_damaged_latest_checkpoint_falls_back(tmp_path, capsys):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=2), wd)
  _truncate_largest_file(wd / "checkpoints" / "12")
  capsys.readouterr()
  resumed = run(toy_config(num_epochs=3), wd)
  out = capsys.readouterr().out
  assert "checkpoint 12 does not restore" in out and "resumed from checkpoint 6" in out
  assert "resuming from step 6 of 18" in out
  moved = list((wd / "damaged_checkpoints").iterdir())
  assert len(moved) == 1 and moved[0].name.startswith("12-")  # kept, not deleted
  straight = run(toy_config(num_epochs=3), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))
  np.testing.assert_array_equal(params(resumed), params(straight))


def test_no_checkpoint_restores_is_one_line(tmp_path):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=1), wd)
  _truncate_largest_file(wd / "checkpoints" / "6")
  with pytest.raises(UserError, match="no checkpoint in .* restores"):
    run(toy_config(num_epochs=2), wd)
  assert (wd / "checkpoints" / "6").exists()


def test_partial_metrics_line_is_dropped(tmp_path, capsys):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=2), wd)
  with (wd / "metrics.jsonl").open("a") as f:
    f.write('{"step": 18, "epo')  # what a full disk leaves
  run(toy_config(num_epochs=3), wd)
  assert "dropped 1 damaged line" in capsys.readouterr().out
  run(toy_config(num_epochs=3), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))


def test_damaged_config_json_is_one_line(tmp_path):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=1), wd)
  (wd / "config.json").write_text('{"config": {"seed": 0')
  with pytest.raises(UserError, match=r"config.json is damaged .*; restore it from a copy, "
                     "or start afresh with another --workdir"):
    run(toy_config(num_epochs=2), wd)


def test_workdir_that_is_a_file_or_under_one(tmp_path):
  f = tmp_path / "file"
  f.write_text("x")
  calls = []
  with pytest.raises(UserError, match="is a file; give a directory"):
    loop.run(toy_config(), str(f), lambda: calls.append(1))
  with pytest.raises(UserError, match=f"is under {f}, which is a file"):
    loop.run(toy_config(), str(f / "run"), lambda: calls.append(1))
  assert not calls and f.read_text() == "x"  # checked before the data loads


@contextlib.contextmanager
def read_only_dir(path: Path):
  """A directory nobody may write: chmod, or for root a read-only tmpfs."""
  path.mkdir()
  if os.geteuid() != 0:
    path.chmod(0o555)
    try:
      yield path
    finally:
      path.chmod(0o755)
    return
  r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)],
                     capture_output=True)
  if r.returncode != 0:
    pytest.skip("root, and no read-only tmpfs can be mounted here")
  try:
    yield path
  finally:
    subprocess.run(["umount", str(path)], check=False)


def test_read_only_workdir(tmp_path):
  calls = []
  with read_only_dir(tmp_path / "ro") as ro:
    for wd in (ro, ro / "run"):
      with pytest.raises(UserError, match="is not writable .*use a writable --workdir"):
        loop.run(toy_config(), str(wd), lambda: calls.append(1))
    assert not calls and not list(ro.iterdir())


def _full_after(monkeypatch, calls: int) -> None:
  """Every metrics write from the ``calls``-th on writes 3 bytes, then finds the
  disk full."""
  real, seen = os.write, []

  def write(fd, data):
    seen.append(1)
    if len(seen) >= calls:
      real(fd, data[:3])
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd, data)
  monkeypatch.setattr(wdir, "_write", write)


def test_full_disk_leaves_no_partial_line_and_resumes(tmp_path, monkeypatch):
  wd = tmp_path / "run"
  _full_after(monkeypatch, calls=2)
  with pytest.raises(UserError, match=r"no space left on the device writing .*metrics.jsonl"
                     r" \(.* free\); free some space"):
    run(toy_config(), wd)
  assert [r["step"] for r in metrics(wd)] == [6]  # the half line was cut back
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["6"]
  monkeypatch.undo()
  run(toy_config(), wd)
  run(toy_config(), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))


def _full_on_config_json(monkeypatch) -> None:
  """config.json's write finds the disk full."""
  real_open = Path.open

  def full_open(self, mode="r", *a, **kw):
    f = real_open(self, mode, *a, **kw)
    if self.name == "config.json.tmp":
      f.write = lambda text: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    return f
  monkeypatch.setattr(Path, "open", full_open)


def test_full_disk_on_config_json_writes_nothing_half(tmp_path, monkeypatch):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=1), wd)
  before = (wd / "config.json").read_text()
  _full_on_config_json(monkeypatch)
  with pytest.raises(UserError, match="no space left on the device writing .*config.json"):
    run(toy_config(num_epochs=2), wd)
  monkeypatch.undo()
  assert (wd / "config.json").read_text() == before
  assert not (wd / "config.json.tmp").exists()


def test_full_disk_in_a_checkpoint_write_is_one_line_and_resumes(tmp_path, monkeypatch,
                                                                  capfd):
  """What Orbax does when the disk fills while it writes (seen on a 1000 KiB
  tmpfs): each writer thread logs its traceback, TensorStore's callbacks print
  "Event loop is closed" tracebacks, a partial <step>.orbax-checkpoint-tmp is
  left, and the error is a ValueError that names the errno in its text."""
  import logging  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  wd = tmp_path / "run"
  real = ocp.CheckpointManager.save

  def save(self, step, *a, **kw):
    if step < 12:
      return real(self, step, *a, **kw)
    (Path(self.directory) / f"{step}.orbax-checkpoint-tmp" / "default").mkdir(parents=True)
    try:
      raise ValueError("RESOURCE_EXHAUSTED: Error writing local file: No space left on device "
                       "[os_error_code='28']")
    except ValueError:
      logging.getLogger("absl").exception("_SignalingThread.run() raised an exception")
    print("Traceback (most recent call last):\nRuntimeError: Event loop is closed",
          file=sys.stderr)
    raise ValueError("RESOURCE_EXHAUSTED: Error writing local file "
                     f"\"{self.directory}/{step}.orbax-checkpoint-tmp/default/_sharding\": "
                     "No space left on device [os_error_code='28']")
  monkeypatch.setattr(ocp.CheckpointManager, "save", save)
  with pytest.raises(UserError) as e:
    run(toy_config(), wd)
  message = str(e.value)
  assert message.startswith(f"no space left on the device writing {wd / 'checkpoints' / '12'} (")
  assert " free); free some space; the last good checkpoint is kept; rerun the same command" \
      in message and "\n" not in message
  captured = capfd.readouterr()
  assert "Traceback" not in captured.err + captured.out
  assert "raised an exception" not in captured.err + captured.out
  assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == ["6"]  # partial one gone
  monkeypatch.undo()
  run(toy_config(), wd)
  run(toy_config(), tmp_path / "straight")
  assert without_timing(metrics(wd)) == without_timing(metrics(tmp_path / "straight"))


def test_no_room_for_a_checkpoint_is_refused_before_training(tmp_path, monkeypatch):
  monkeypatch.setattr(wdir, "_free_bytes", lambda path: 1000)
  traced = []
  config = toy_config()

  def setup():
    task = toy_task(config)
    step = task.train_step
    return dataclasses.replace(task, train_step=lambda *a: traced.append(1) or step(*a))
  with pytest.raises(UserError, match=r"no room for a checkpoint in .*run: 1000 bytes free, a "
                     r"checkpoint needs about 64\.\d KiB; free some space"):
    loop.run(config, str(tmp_path / "run"), setup)
  assert not traced and not (tmp_path / "run" / "checkpoints").exists()


def test_full_disk_on_a_new_workdir_leaves_nothing(tmp_path, monkeypatch):
  _full_on_config_json(monkeypatch)
  with pytest.raises(UserError, match=r"no space left on the device writing .*config.json "
                     r"\(.* free\); free some space"):
    run(toy_config(), tmp_path / "new" / "run")
  assert not (tmp_path / "new" / "run").exists()


def test_a_second_run_on_a_locked_workdir_is_refused(tmp_path):
  wd = tmp_path / "run"
  run(toy_config(num_epochs=1), wd)
  with wdir.RunDir(str(wd), toy_config(num_epochs=1)):
    with pytest.raises(UserError, match=f"workdir {wd} is in use by another run "
                       f"\\(pid {os.getpid()}\\)"):
      run(toy_config(num_epochs=2), wd)
  # A lock left by a killed process does not block.
  holder = subprocess.Popen(
      [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
       "os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
       "time.sleep(600)", str(wd / "lock")], stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline().strip() == "held"
  with pytest.raises(UserError, match="in use by another run"):
    run(toy_config(num_epochs=2), wd)
  holder.kill()
  holder.wait()
  run(toy_config(num_epochs=2), wd)
  assert [r["step"] for r in metrics(wd)] == [6, 12]


# End to end, through the CLI: pi_mnist on tiny data, in subprocesses.

@pytest.fixture
def tiny_cli(tmp_path):
  """``command(workdir, *flags)`` for experiments.main on 300 tiny MNIST images."""
  _, checksums = write_dataset(tmp_path / "data", num={"train": 340, "test": 40})
  (tmp_path / "md5.json").write_text(json.dumps(checksums))
  flags = ["--config=configs/pi_mnist.py:smoke", f"--config.data_dir={tmp_path / 'data'}",
           "--config.num_train=0", "--config.num_valid=40", "--config.batch_size=4",
           "--config.hidden=(32, 32)"]

  def command(wd, *extra):
    return [sys.executable, str(REPO / "tests" / "run_with_tiny_checksums.py"),
            str(tmp_path / "md5.json"), *flags, *extra, f"--workdir={wd}"]
  return command


ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _wait_for(path: Path, p: subprocess.Popen, seconds: float = 240) -> None:
  deadline = time.monotonic() + seconds
  while not path.exists():
    assert p.poll() is None, p.communicate()
    assert time.monotonic() < deadline, f"no {path} after {seconds} s"
    time.sleep(0.02)


def test_two_runs_at_once_one_refused_other_intact(tiny_cli, tmp_path):
  wd = tmp_path / "run"
  first = subprocess.Popen(tiny_cli(wd, "--config.num_epochs=4"), cwd=REPO, env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  _wait_for(wd / "config.json", first)
  # Paused, the first run still holds the lock, however fast the machine would have let it finish.
  first.send_signal(signal.SIGSTOP)
  try:
    second = subprocess.run(tiny_cli(wd, "--config.num_epochs=4"), cwd=REPO, env=ENV,
                            capture_output=True, text=True, timeout=300)
  finally:
    first.send_signal(signal.SIGCONT)
  assert second.returncode == 2
  assert second.stderr.strip().startswith(f"error: workdir {wd} is in use by another run "
                                          f"(pid {first.pid})")
  assert len(second.stderr.strip().splitlines()) == 1
  out, err = first.communicate(timeout=600)
  assert first.returncode == 0, err
  assert [r["epoch"] for r in metrics(wd)] == [1, 2, 3, 4]


def test_sigint_stops_at_a_safe_point_and_resumes(tiny_cli, tmp_path):
  wd, straight = tmp_path / "run", tmp_path / "straight"
  p = subprocess.Popen(tiny_cli(wd, "--config.num_epochs=8"), cwd=REPO, env=ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  _wait_for(wd / "checkpoints" / "75", p)
  p.send_signal(signal.SIGINT)
  out, err = p.communicate(timeout=300)
  assert p.returncode == 128 + signal.SIGINT, err
  assert "Traceback" not in err
  last = err.strip().splitlines()[-1]
  assert last.startswith("stopped by SIGINT at step ") and \
      last.endswith("Rerun the same command to resume")
  assert 1 <= len(metrics(wd)) < 8
  for w in (wd, straight):
    r = subprocess.run(tiny_cli(w, "--config.num_epochs=8"), cwd=REPO, env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
  assert without_timing(metrics(wd)) == without_timing(metrics(straight))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_jax_imports_is_one_line(tmp_path, signum):
  # The signal is sent by an import hook the moment experiments.main first
  # imports jax: after main's own first lines, before the run loop exists.
  wrapper = f"""
import importlib.abc, os, runpy, signal, sys

class Hook(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if name == "jax":
      sys.meta_path.remove(self)
      os.kill(os.getpid(), {int(signum)})
    return None
sys.meta_path.insert(0, Hook())
sys.argv = ["experiments.main", "--config=configs/pi_mnist.py:smoke", "--workdir={tmp_path / 'run'}"]
runpy.run_module("experiments.main", run_name="__main__", alter_sys=True)
"""
  r = subprocess.run([sys.executable, "-c", wrapper], cwd=REPO, env=ENV, capture_output=True,
                     text=True, timeout=300)
  name = signal.Signals(signum).name
  assert r.returncode == 128 + signum, r.stderr
  assert r.stderr.strip() == (f"stopped by {name} before training began; nothing was trained. "
                              "Rerun the same command to start or resume")
  assert not (tmp_path / "run").exists()


def test_help_lists_fields_presets_and_configs():
  r = run_cli("--config=configs/pi_mnist.py:smoke", "--help")
  assert r.returncode == 0, r.stderr
  assert "norm = 'layer'" in r.stdout and "(lnorm/norms.py: none, layer, batch, weight, rms" in r.stdout
  # The smoke preset's value, with the default's that the comment describes.
  line = next(l for l in r.stdout.splitlines() if "num_epochs = " in l)
  assert "num_epochs = 2 " in line and "[paper: 60] the paper's Figure 6 spans 60 epochs" in line
  assert "[paper:" not in next(l for l in r.stdout.splitlines() if "norm = " in l)
  assert "presets: paper, cpu, smoke" in r.stdout
  assert "configs/draw.py" in r.stdout and "configs/convnet.py" in r.stdout
  paper = run_cli("--config=configs/pi_mnist.py", "--help")
  assert "[paper:" not in paper.stdout and "num_epochs = 60 " in paper.stdout
  # The declaration's comment, then a preset's own where it gives one.
  cpu = run_cli("--config=configs/reader.py:cpu", "--help").stdout
  assert "[paper: 8e-05] Adam; the authors' command (cpu: ours for the shorter run" in cpu
  bare = run_cli("--help")
  assert bare.returncode == 0 and "configs/pi_mnist.py" in bare.stdout


@pytest.mark.parametrize("source,message", [
    ("def get_config(:\n  pass\n", "bad.py:1: syntax error in the config file"),
    ("X = 1\n", "bad.py:1: the config file has no get_config(preset) function"),
    ("def get_config(preset='paper'):\n  return undefined_name\n",
     "bad.py:2: NameError: name 'undefined_name' is not defined"),
])
def test_broken_config_file_is_one_line_with_file_and_line(tmp_path, source, message):
  (tmp_path / "bad.py").write_text(source)
  r = run_cli(f"--config={tmp_path / 'bad.py'}", f"--workdir={tmp_path / 'run'}")
  assert r.returncode == 2 and message in r.stderr, r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
  assert not (tmp_path / "run").exists()


def test_cli_records_the_resolved_data_dir(tiny_cli, tmp_path):
  _, checksums = write_dataset(tmp_path / "envdata", num={"train": 60, "test": 10})
  (tmp_path / "md5.json").write_text(json.dumps(checksums))
  cmd = [a for a in tiny_cli(tmp_path / "run") if not a.startswith("--config.data_dir")]
  r = subprocess.run(cmd + ["--config.num_valid=20", "--config.num_epochs=1"], cwd=REPO,
                     env={**ENV, "LNORM_DATA_DIR": str(tmp_path / "envdata")},
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  record = json.loads((tmp_path / "run" / "config.json").read_text())
  assert record["config"]["data_dir"] == str(tmp_path / "envdata")
  assert f"data {tmp_path / 'envdata'}" in r.stdout and "devices cpu:0" in r.stdout


def test_orbax_output_during_a_good_save_keeps_errors_only():
  import logging  # pylint: disable=g-import-not-at-top
  logger, seen = logging.getLogger("absl"), []
  handler = logging.Handler()
  handler.emit = lambda record: seen.append(record.getMessage())
  logger.addHandler(handler)
  try:
    with wdir._orbax_held():  # pylint: disable=protected-access
      logger.warning("an Orbax internal")
      logger.error("a failure the user needs")
  finally:
    logger.removeHandler(handler)
  assert seen == ["a failure the user needs"]
