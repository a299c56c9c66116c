"""What a run leaves in its workdir, and the checks that keep it whole.

``config.json`` (the resolved config, the git commit, the package versions),
``metrics.jsonl`` (one JSON object per evaluation), TensorBoard event files
(``tensorboard/``), Orbax checkpoints (``checkpoints/``) and ``lock`` (held with
``flock`` for the run's life, so one workdir has one run at a time; the kernel
drops it when the process dies, so a killed run never blocks the next).

Every filesystem failure is a one-line :class:`UserError`: a workdir that is a
file or under one, a read-only one, a full disk, a damaged config.json. A run
writes nothing through a symbolic link: a workdir that holds one is refused,
and its files are opened with ``O_NOFOLLOW``.

config.json belongs to the run's start: a resume records what it ran with
(the commit, the packages, the host, and config fields the record lacks or
that moved, as ``data_dir``) under ``resumed_with``, never over the record.
metrics.jsonl's form is experiments/runner/records.py's.

The run loop comes here twice, in this order (experiments/runner/loop.py):
:func:`claim`, before the data loads (the workdir checked and locked, nothing
written), and :func:`resume`, once the fresh state is built (the workdir made,
config.json written, the newest recorded checkpoint restored, the metrics
writer opened; :class:`Resumed` then records and checkpoints each
evaluation). With several processes only process 0 takes the lock and writes
config.json, metrics.jsonl and TensorBoard; all of them write and read the
checkpoints (Orbax).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import importlib.metadata
import io
import json
import logging
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Container, Iterator, Mapping

import jax
import ml_collections
import orbax.checkpoint as ocp

from experiments.runner import parallel
from experiments.runner import records as rec
from experiments.runner.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "ml-collections",
            "numpy", "tensorflow-datasets", "tensorboardX")
# Fields a resumed run may change. num_epochs and num_steps may only grow:
# extending a run is the point of resuming. data_dir may move: the loaders
# verify the files' checksums, so another path holds the same data; the move
# is recorded under resumed_with, the run's own data_dir kept.
GROWABLE = ("num_epochs", "num_steps")
MOVABLE = ("data_dir",)
_FULL = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def git_commit() -> str:
  def git(*args: str) -> str:
    return subprocess.run(("git", *args), cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
  try:
    commit = git("rev-parse", "HEAD")
    # results/ holds outputs, which scripts/reproduce.py rewrites between runs.
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"
  return commit + ("-dirty" if dirty else "")


def versions() -> dict[str, str]:
  out = {"python": platform.python_version()}
  for p in PACKAGES:
    try:
      out[p] = importlib.metadata.version(p)
    except importlib.metadata.PackageNotFoundError:
      pass
  return out


def host() -> dict[str, object]:
  """The CPU and how many of its cores this process may use: XLA's CPU thread
  pool follows that count, and with another count its sums can round
  differently."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpu = next((line.split(":", 1)[1].strip() for line in f
                  if line.startswith("model name")), cpu)
  except OSError:
    pass
  return {"cpu": cpu, "cpu_threads": parallel.usable_cores()}


def _free_bytes(path: Path | str) -> int | None:
  p = Path(path)
  while not p.exists() and p != p.parent:
    p = p.parent
  try:
    return shutil.disk_usage(p).free
  except OSError:
    return None


def _size(n: float) -> str:
  for unit in ("bytes", "KiB", "MiB", "GiB"):
    if n < 1024:
      return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
    n /= 1024
  return f"{n:.1f} TiB"


def free_space(path: Path | str) -> str:
  """Free space on the filesystem of ``path`` (or of its nearest existing
  parent), for the message of a full disk."""
  free = _free_bytes(path)
  return "free space unknown" if free is None else f"{_size(free)} free"


# Besides the arrays, a checkpoint holds Orbax's metadata files.
_CHECKPOINT_OVERHEAD = 64 * 1024


def check_room(wd: Path, state: Any) -> None:
  """Refuses to start a run whose workdir has no room for one checkpoint of
  ``state``: the first save would fail after the first stretch of training."""
  need = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(state)) + _CHECKPOINT_OVERHEAD
  free = _free_bytes(wd)
  if free is not None and free < need:
    raise UserError(f"no room for a checkpoint in {wd}: {_size(free)} free, a checkpoint "
                    f"needs about {_size(need)}; free some space or use another --workdir")


def os_error(e: OSError, path: Path | str, resume: str = "") -> UserError:
  """An OSError met while writing ``path`` as one line that says what to do."""
  if e.errno in _FULL:
    what = (f"no space left on the device writing {path} ({free_space(path)}); "
            "free some space")
  elif e.errno == errno.ELOOP:
    what = link_message(Path(path))
  elif e.errno in _READ_ONLY:
    what = f"cannot write {path} ({os.strerror(e.errno).lower()}); use a writable --workdir"
  else:
    what = f"cannot write {path}: {e.strerror or e}"
  return UserError(what + (f"; {resume}" if resume else ""))


def link_message(path: Path) -> str:
  try:
    target = f" (to {os.readlink(path)})"
  except OSError:
    target = ""
  return (f"{path} is a symbolic link{target}; a run writes nothing through links: "
          "remove it, or use another --workdir")


def check_no_links(wd: Path) -> None:
  """Refuses a workdir that holds a symbolic link anywhere inside: the run
  would write through it (its lock, config.json, metrics, checkpoints) to
  wherever it points."""
  for root, dirs, files in os.walk(wd):  # does not descend into linked folders
    for name in sorted(dirs + files):
      path = Path(root) / name
      if path.is_symlink():
        raise UserError(link_message(path))


def write_atomic(path: Path, text: str) -> None:
  """Writes all of ``text`` or, on any error, leaves ``path`` as it was."""
  tmp = path.with_name(path.name + ".tmp")
  try:
    # A stale temporary (a crash's, or a planted link) goes first; "x" (O_CREAT
    # | O_EXCL, which never follows a link) then writes a new file here.
    with contextlib.suppress(FileNotFoundError):
      tmp.unlink()
    with tmp.open("x") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)  # replaces a link at ``path`` itself, never its target
  except OSError as e:
    with contextlib.suppress(OSError):
      tmp.unlink()
    raise os_error(e, path) from None


_write = os.write  # what append writes with (a test makes it fail as a full disk does)


def append(path: Path, text: str) -> None:
  """Appends ``text`` whole or not at all: a failed write (a full disk) is cut
  back to the file's old length, so no partial line is left behind. Synced
  before it returns: the checkpoint written after a metrics record must not
  outlive the record in a power cut."""
  try:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
  except OSError as e:
    raise os_error(e, path) from None
  try:
    size = os.fstat(fd).st_size
    try:
      data = text.encode()
      while data:
        data = data[_write(fd, data):]
      os.fsync(fd)
    except OSError as e:
      with contextlib.suppress(OSError):
        os.ftruncate(fd, size)
      raise os_error(e, path) from None
  finally:
    os.close(fd)


def writable(directory: Path) -> OSError | None:
  """Creates and removes a probe file in ``directory``; the error if it can't."""
  try:
    fd, probe = tempfile.mkstemp(prefix=".probe", dir=directory)
    os.close(fd)
    os.unlink(probe)
  except OSError as e:
    return e
  return None


def _config_record(wd: Path) -> dict | None:
  path = wd / "config.json"
  if not path.exists() and not path.is_symlink():
    return None
  if path.is_symlink():
    raise UserError(link_message(path))
  try:
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
      raise ValueError("no 'config' object")
  except (ValueError, OSError) as e:
    raise UserError(
        f"{path} is damaged ({e}); restore it from a copy, or start afresh with "
        f"another --workdir (the checkpoints in {wd} are left as they are)") from None
  return record


def _check_compatible(wd: Path, old: dict, new: dict) -> None:
  diff = sorted(k for k in old if k not in GROWABLE + MOVABLE and old[k] != new.get(k))
  if diff:
    raise ConfigError(
        f"workdir {wd} holds a run with a different config (fields: "
        f"{', '.join(diff)}); use a new --workdir or the same config")
  for k in GROWABLE:
    if isinstance(old.get(k), int) and isinstance(new.get(k), int) and new[k] < old[k]:
      raise ConfigError(
          f"{k}={new[k]} is below the {old[k]} of the run in {wd}; a resumed run may "
          f"only raise it: use {k}={old[k]} or more, or a new --workdir")


class RunDir:
  """The workdir of one run: checked at once, created only by :meth:`create`.

  Construction checks what can be checked without writing (a file in the way,
  no write permission, a damaged or other run's config.json) and, if the
  workdir exists, takes its lock. :meth:`create` makes it, takes the lock if
  not yet held and writes config.json. Use it as a context manager; the lock
  goes when the block ends.
  """

  def __init__(self, workdir: str | os.PathLike[str], config: ml_collections.ConfigDict,
               data_dir: str | None = None):
    self.path = Path(workdir).expanduser().absolute()
    self.config = config
    self.data_dir = data_dir  # recorded in place of config.data_dir: resolved
    self._lock_fd: int | None = None
    self._check_path()
    if self.path.is_dir():
      check_no_links(self.path)
      self._lock()
      try:
        record = _config_record(self.path)
        if record is not None:
          _check_compatible(self.path, record["config"], self.config_json())
      except BaseException:
        self.close()
        raise

  def config_json(self) -> dict:
    cfg = self.config.to_dict()
    if self.data_dir is not None:
      cfg["data_dir"] = self.data_dir
    return json.loads(json.dumps(cfg))  # Tuples as JSON lists.

  def _check_path(self) -> None:
    wd = self.path
    if wd.exists() and not wd.is_dir():
      raise UserError(f"workdir {wd} is a file; give a directory (new or of this run)")
    existing = wd
    while not existing.exists():
      existing = existing.parent
    if not existing.is_dir():
      raise UserError(f"workdir {wd} is under {existing}, which is a file; give a "
                      "directory path")
    e = writable(existing)
    if e is not None:
      raise UserError(f"workdir {wd} is not writable ({existing}: "
                      f"{os.strerror(e.errno).lower() if e.errno else e}); use a writable "
                      "--workdir")

  def _lock(self) -> None:
    if self._lock_fd is not None:
      return
    path = self.path / "lock"
    try:
      fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
      raise os_error(e, path) from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
      os.close(fd)
      raise UserError(f"workdir {self.path} is in use by another run (pid {holder}); "
                      "wait for it to end, or use another --workdir") from None
    # The pid is for the message above; the flock is the lock. On a full disk
    # it cannot be written, and config.json's write says why one line later.
    with contextlib.suppress(OSError):
      os.ftruncate(fd, 0)
      os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    self._lock_fd = fd

  def create(self) -> Path:
    """Makes the workdir, holds its lock, writes config.json; returns the path.
    A workdir it made is removed again if config.json cannot be written, so a
    failed start leaves nothing behind."""
    made = not self.path.exists()
    try:
      self.path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
      raise os_error(e, self.path) from None
    try:
      self._lock()
      # Read again under the lock: another run may have started it meanwhile.
      check_no_links(self.path)
      old_record = _config_record(self.path)
      cfg = self.config_json()
      if old_record is not None:
        _check_compatible(self.path, old_record["config"], cfg)
      self._write_record(old_record, cfg)
    except UserError:
      if made:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
      raise
    parallel.barrier("lnorm_workdir_created")  # the other processes wait for it
    return self.path

  def _write_record(self, old_record: dict | None, cfg: dict) -> None:
    now = {"git_commit": git_commit(), "versions": versions(),
           "devices": [str(d) for d in jax.devices()], "host": host()}
    if old_record is None:
      record = {"config": cfg, **now}
    else:
      # The run belongs to the code and config that started it; a resume under
      # other code, packages or host, or with a config field the record lacks
      # (added to the config since) or one that may move (data_dir), is
      # recorded beside it, not over it. Only num_epochs and num_steps, the
      # run's extent, are updated in place.
      old_cfg = old_record["config"]
      record = {**old_record, "config": {
          **old_cfg, **{k: cfg[k] for k in GROWABLE if k in cfg and k in old_cfg}}}
      changed = {k: v for k, v in cfg.items()
                 if k not in old_cfg or (k not in GROWABLE and old_cfg[k] != v)}
      if changed:
        now["config"] = changed
      seen = [{k: old_record.get(k) for k in now if k != "config"},
              *old_record.get("resumed_with", [])]
      if now != seen[-1]:
        record["resumed_with"] = seen[1:] + [now]
    write_atomic(self.path / "config.json",
                 json.dumps(record, indent=2, sort_keys=True) + "\n")

  def close(self) -> None:
    if self._lock_fd is not None:
      os.close(self._lock_fd)  # Closing the descriptor drops the flock.
      self._lock_fd = None

  def __enter__(self) -> "RunDir":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def read_metrics(path: Path) -> tuple[list[dict], int]:
  """The records of a metrics.jsonl, and how many lines did not parse (a partial
  last line is what a full disk or a crash mid-write leaves)."""
  records, damaged = rec.read(path)
  return records, len(damaged)


class MetricsWriter:
  """Appends one JSON object per evaluation to metrics.jsonl (records.py's
  strict form) and the same scalars to TensorBoard. On resume, records past
  the restored step are dropped (the run writes them again), and so are
  damaged lines (the loop has checked that none of them is a record the run
  keeps: :func:`check_records`). ``resume_step`` -1 keeps no record: a
  one-shot run's record replaces the one before (:func:`record_once`)."""

  def __init__(self, wd: Path, resume_step: int):
    self.path = wd / rec.METRICS
    self.records: list[dict] = []
    if self.path.exists():
      records, damaged = rec.read(self.path)
      if damaged:
        print(f"metrics: dropped {len(damaged)} damaged line(s) of {self.path}", flush=True)
      self.records = [r for r in records if r["step"] <= resume_step]
      write_atomic(self.path, "".join(rec.encode(r) for r in self.records))
    from tensorboardX import SummaryWriter  # Lazy: it imports protobuf.
    self.tb = SummaryWriter(str(wd / "tensorboard"),
                            purge_step=resume_step + 1 if resume_step else None)

  def write(self, step: int, epoch: int | float | None, metrics: dict[str, Any]
            ) -> dict[str, Any]:
    record = {"step": int(step), **({} if epoch is None else {"epoch": epoch}),
              "wall_time": time.time(), **{k: float(v) for k, v in metrics.items()}}
    append(self.path, rec.encode(record))
    self.records.append(record)
    for k, v in metrics.items():
      self.tb.add_scalar(k, float(v), global_step=int(step))
    self.tb.flush()
    return record

  def close(self) -> None:
    self.tb.close()


def checkpoint_manager(wd: Path, max_to_keep: int = 2) -> ocp.CheckpointManager:
  # Orbax logs an error for each checkpoint whose metadata does not parse;
  # restore_latest says what it means in one line.
  with _orbax_held(show_errors=False):
    return ocp.CheckpointManager(
        wd / "checkpoints",
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                             cleanup_tmp_directories=True))


def _abstract(state: Any) -> Any:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)


def restore_latest(mngr: ocp.CheckpointManager, state: Any) -> tuple[Any, int]:
  """``(state, step)`` from the newest checkpoint that restores, or the given
  state and 0 if there is none. Newer ones that do not restore (truncated,
  unreadable) are moved to ``damaged_checkpoints/`` beside ``checkpoints/``,
  with a line that says so; if none restores, a UserError."""
  steps = sorted(mngr.all_steps(), reverse=True)
  failed: list[tuple[int, str]] = []
  for step in steps:
    try:
      # Orbax logs what it could not parse; the line below says what it means.
      with _orbax_held():
        restored = mngr.restore(step, args=ocp.args.StandardRestore(_abstract(state)))
    except Exception as e:  # pylint: disable=broad-except  # Orbax raises many kinds.
      reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
      failed.append((step, reason))
      continue
    if failed:
      root = Path(mngr.directory)
      aside = root.parent / "damaged_checkpoints"
      aside.mkdir(exist_ok=True)
      for bad, reason in failed:
        target = aside / f"{bad}-{int(time.time())}"
        shutil.move(str(root / str(bad)), target)
        print(f"checkpoint {bad} does not restore ({reason}); moved it to {target} and "
              f"resumed from checkpoint {step}", flush=True)
      mngr.reload()
    return restored, int(step)
  if failed:
    step, reason = failed[0]
    raise UserError(f"no checkpoint in {mngr.directory} restores (the newest, {step}: "
                    f"{reason}); use a new --workdir, or remove {mngr.directory} to train "
                    "this run afresh")
  return state, 0


def drop_unrecorded(mngr: ocp.CheckpointManager, recorded: Container[int]) -> None:
  """Removes each checkpoint whose step has no record in metrics.jsonl
  (``recorded``: the steps it has records of), with a line that says so, so
  that :func:`restore_latest` resumes from the one before it: the run trains
  those steps again (bit for bit the same) and writes the record whole, train
  metrics and all, which no evaluation of the checkpoint alone could. First
  refuses a damaged line before the record of the checkpoint the run will
  resume from (:func:`check_records`), so a refused run loses nothing."""
  wd = Path(mngr.directory).parent
  steps = sorted(mngr.all_steps(), reverse=True)
  unrecorded = [s for s in steps if s not in recorded]
  base = next((s for s in steps if s in recorded), 0)
  check_records(wd, base)
  if not unrecorded:
    return
  for step in unrecorded:
    with _orbax_held():
      mngr.delete(step)
  many = len(unrecorded) > 1
  print(f"checkpoint{'s' * many} {', '.join(str(s) for s in sorted(unrecorded))} "
        f"ha{'ve' if many else 's'} no record in {wd / rec.METRICS} (a damaged or missing "
        f"line): removed, and steps {base + 1}-{max(unrecorded)} are trained again from "
        + (f"checkpoint {base}" if base else "the start") + " to record them whole",
        flush=True)


def check_records(wd: Path, step: int) -> None:
  """Refuses a resume from ``step`` when a damaged line of metrics.jsonl comes
  before step's record: the run's records would have a hole that only
  training again from an earlier checkpoint (most often: from the start) could
  fill, which is the user's call, not the loop's."""
  path = wd / rec.METRICS
  if not step or not path.exists():
    return
  lines = path.read_text(errors="replace").splitlines()
  damaged, at = [], None
  for i, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      if rec.decode(line)["step"] == step:
        at = i
    except ValueError:
      damaged.append(i)
  before = [i for i in damaged if at is not None and i < at]
  if before:
    raise UserError(
        f"line {before[0]} of {path} is damaged, before the record of step {step} that the run "
        "resumes from: the record it held is lost, and only training again from before it "
        "could make it. Restore the file from a copy, delete the line to go on without "
        "that record, or start afresh with another --workdir")


def prune(mngr: ocp.CheckpointManager, keep: int, good: int | None) -> None:
  """Removes all checkpoints but the ``keep`` newest and ``good`` (the newest
  whose metrics are all finite: after a NaN stop it is the one to go back to,
  and must outlive the newer, non-finite ones)."""
  steps = sorted(mngr.all_steps())
  for step in steps[:-keep] if keep else steps:
    if step != good:
      with _orbax_held():
        mngr.delete(step)


# Orbax's errors in its writer threads, as TensorStore words them: "...:
# No space left on device [os_error_code='28']".
_OS_ERROR_CODE = re.compile(r"os_error_code='?(\d+)")


def _os_cause(e: BaseException, logged: list[str]) -> OSError | None:
  """The OSError behind an Orbax failure: in the exception chain, or named by
  its text or by what Orbax's threads logged."""
  cause: BaseException | None = e
  while cause is not None:
    if isinstance(cause, OSError):
      return cause
    cause = cause.__cause__ or cause.__context__
  for text in (str(e), *logged):
    m = _OS_ERROR_CODE.search(text)
    if m:
      return OSError(int(m.group(1)), os.strerror(int(m.group(1))))
    if "No space left on device" in text:
      return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  return None


class _Held(logging.Handler):
  """The absl records of a block, kept back; ``failed`` is set by the block."""

  def __init__(self):
    super().__init__(logging.DEBUG)
    self.records: list[logging.LogRecord] = []
    self.failed = False

  def emit(self, record: logging.LogRecord) -> None:
    self.records.append(record)


@contextlib.contextmanager
def _orbax_held(show_errors: bool = True) -> Iterator[_Held]:
  """Holds what Orbax and TensorStore print while a checkpoint is written or
  closed: after a failed write each of their threads logs its traceback, and
  callbacks print "Event loop is closed" tracebacks, where the user needs one
  line. Held output is dropped if the block set ``failed``; if not, what was
  printed and the logged errors are shown."""
  logger = logging.getLogger("absl")
  held, handlers, propagate, stderr = _Held(), logger.handlers[:], logger.propagate, sys.stderr
  logger.handlers, logger.propagate = [held], False
  sys.stderr = io.StringIO()
  try:
    yield held
  except BaseException:
    held.failed = True
    raise
  finally:
    text = sys.stderr.getvalue()
    sys.stderr, logger.handlers, logger.propagate = stderr, handlers, propagate
    if not held.failed:
      # Orbax's warnings at this level are about its own internals, on every
      # run; its errors the user may need.
      sys.stderr.write(text)
      for record in held.records:
        if show_errors and record.levelno >= logging.ERROR:
          logger.handle(record)


def save(mngr: ocp.CheckpointManager, step: int, state: Any) -> None:
  """Writes the checkpoint of ``step`` whole, or raises one UserError and
  leaves the checkpoints as they were: the partial one is removed (on a full
  disk it holds space the run needs), the last good one is kept."""
  error: Exception | None = None
  with _orbax_held() as held:
    try:
      mngr.save(step, args=ocp.args.StandardSave(state))
      mngr.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except  # Orbax wraps the OSError.
      error, held.failed = e, True
      time.sleep(0.5)  # the failed writer's last callbacks, still printing
  if error is None:
    return
  cause = _os_cause(error, [r.getMessage() for r in held.records])
  if cause is None:
    raise error
  # The failed write leaves asyncio tasks whose errors asyncio logs when they
  # are collected, after this line; the run ends here, with this one line.
  logging.getLogger("asyncio").disabled = True
  root = Path(mngr.directory)
  for partial in root.glob(f"{step}.orbax-checkpoint-tmp*"):
    shutil.rmtree(partial, ignore_errors=True)
  raise os_error(cause, root / str(step),
                 "the last good checkpoint is kept; rerun the same command to resume"
                 ) from None


def close_manager(mngr: ocp.CheckpointManager) -> None:
  """Closes ``mngr``. After a failed save its threads can fail again while
  closing, and the save's one line is what the user needs to read."""
  with contextlib.suppress(Exception), _orbax_held():
    mngr.close()


def announce(config: ml_collections.ConfigDict, path: Path, data_dir: str | None = None
             ) -> None:
  """A run's first line: what runs, where it writes, what it reads, on what."""
  devices = ", ".join(f"{d.platform}:{d.id}" for d in jax.devices())
  print(f"{config.get('experiment', '?')}: workdir {path}"
        + (f" | data {data_dir}" if data_dir is not None else "")
        + f" | devices {devices}", flush=True)


# --- A run's two visits: claim, then resume ------------------------------------

@contextlib.contextmanager
def claim(workdir: str, config: ml_collections.ConfigDict, data_dir: str | None = None
          ) -> Iterator[RunDir | _Follower]:
  """The run's workdir, checked and locked (:class:`RunDir`), nothing written
  yet, and the run announced. ``data_dir``: the config's, recorded resolved in
  config.json (None: the run reads no data folder). On processes other than 0
  a view of the same path whose ``create`` waits for process 0's."""
  if data_dir is not None:
    from lnorm.data import resolve_data_dir  # pylint: disable=g-import-not-at-top
    # Recorded as resolved: '' would lose $LNORM_DATA_DIR.
    data_dir = str(resolve_data_dir(data_dir).absolute())
  with (RunDir(workdir, config, data_dir) if parallel.is_primary() else _Follower(workdir)
        ) as rd:
    announce(config, rd.path, data_dir)
    yield rd


class _Follower:
  """The workdir as a process other than 0 sees it: no lock, no config.json."""

  def __init__(self, workdir: str | os.PathLike[str]):
    self.path = Path(workdir).expanduser().absolute()

  def create(self) -> Path:
    parallel.barrier("lnorm_workdir_created")
    return self.path

  def __enter__(self) -> "_Follower":
    return self

  def __exit__(self, *exc) -> None:
    pass


KEEP_CHECKPOINTS = 2  # the newest; and the newest with finite metrics (prune)


@dataclasses.dataclass
class Resumed:
  """A run's workdir once :func:`resume` has made it: where the run starts
  (``state`` at ``step``; 0 and the fresh state for a new run), its records,
  and the checkpoints."""
  path: Path
  state: Any
  step: int
  mngr: ocp.CheckpointManager
  writer: Any  # MetricsWriter (process 0), _Records (the others)
  good: set[int]  # the steps whose records are all finite

  @property
  def records(self) -> list[dict]:
    return self.writer.records

  def latest_step(self) -> int | None:
    return self.mngr.latest_step()

  def record(self, step: int, epoch: int | float | None, metrics: dict[str, float],
             state: Any) -> dict[str, Any]:
    """Appends the record of ``step``, then writes its checkpoint, keeping the
    :data:`KEEP_CHECKPOINTS` newest and the newest whose record is all finite.
    Metrics first: a run killed in between rewrites the metrics line on resume
    instead of losing it (a checkpoint whose record is lost all the same is
    trained again: :func:`drop_unrecorded`)."""
    record = self.writer.write(step, epoch, metrics)
    if rec.finite(record):
      self.good.add(step)
    save(self.mngr, step, state)
    prune(self.mngr, KEEP_CHECKPOINTS,
          max((s for s in self.mngr.all_steps() if s in self.good), default=None))
    return record

  def kept(self) -> str:
    """What a NaN stop leaves to go back to: the newest checkpoint whose metrics
    are all finite, and any newer one, which holds a non-finite metric (its
    state may hold the NaN that the next steps met)."""
    wd, steps = self.path, sorted(self.mngr.all_steps())
    ok = [s for s in steps if s in self.good]
    if not ok:
      out = (f"No checkpoint with finite metrics was written: {wd} has none to resume from"
             if steps else f"No checkpoint was written yet: {wd} has none to resume from")
    else:
      out = f"The last good checkpoint (step {ok[-1]}) is kept in {wd / 'checkpoints'}"
    newer = [s for s in steps if not ok or s > ok[-1]]
    if newer:
      by_step = {r["step"]: r for r in self.records}
      what = [", ".join(f"{k}={v}" for k, v in by_step.get(s, {}).items()
                        if isinstance(v, float) and not math.isfinite(v)) or "no record"
              for s in newer]
      out += "; " + "; ".join(f"checkpoint {s} after it has {w}" if ok
                              else f"checkpoint {s} has {w}" for s, w in zip(newer, what))
    return out


@contextlib.contextmanager
def resume(rd: RunDir | _Follower, fresh: Any) -> Iterator[Resumed]:
  """The run's start in its claimed workdir: made, config.json written, room
  for a checkpoint of ``fresh`` (the state of step 0) checked, the newest
  checkpoint that restores and has its record restored, and the metrics
  writer opened at it. A checkpoint is only as good as its record: one whose
  line in metrics.jsonl is damaged or missing is trained again
  (:func:`drop_unrecorded`). Closes the writer and the checkpoints after."""
  wd = rd.create()
  check_room(wd, fresh)
  # The run keeps the two newest checkpoints and the newest whose metrics are
  # all finite (Resumed.record), so it does its own pruning.
  mngr = checkpoint_manager(wd, max_to_keep=None)
  try:
    records, _ = rec.read(wd / rec.METRICS)
    parallel.barrier("lnorm_records_read")  # before process 0 rewrites the file
    drop_unrecorded(mngr, {r["step"] for r in records})
    state, step = restore_latest(mngr, fresh)
    check_records(wd, step)  # again, if a damaged checkpoint moved it back
    good = {r["step"] for r in records if r["step"] <= step and rec.finite(r)}
    writer = MetricsWriter(wd, step) if parallel.is_primary() else _Records()
    try:
      yield Resumed(wd, state, step, mngr, writer, good)
    finally:
      writer.close()
  finally:
    close_manager(mngr)


class _Records:
  """What a process other than 0 keeps of the metrics: the records, for the
  summary, and no files."""

  def __init__(self):
    self.records: list[dict] = []

  def write(self, step: int, epoch, metrics: dict[str, Any]) -> dict[str, Any]:
    record = {"step": int(step), **({} if epoch is None else {"epoch": epoch}),
              **{k: float(v) for k, v in metrics.items()}}
    self.records.append(record)
    return record

  def close(self) -> None:
    pass


def record_once(wd: Path, metrics: Mapping[str, float]) -> dict[str, Any]:
  """A one-shot run's measurements as the one record of its metrics.jsonl
  (step 0, epoch 0), replacing any earlier run's (process 0 writes it)."""
  writer = MetricsWriter(wd, resume_step=-1) if parallel.is_primary() else _Records()
  try:
    return writer.write(0, 0, dict(metrics))
  finally:
    writer.close()
