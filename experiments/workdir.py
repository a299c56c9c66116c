"""What a run leaves in its workdir: config.json, metrics.jsonl, TensorBoard
event files (``tensorboard/``) and Orbax checkpoints (``checkpoints/``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp

from experiments.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "ml-collections",
            "numpy", "tensorflow-datasets", "tensorboardX")
# Fields a resumed run may change: extending a run is the point of resuming.
RESUMABLE_CHANGES = ("num_epochs",)


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


def write_atomic(path: Path, text: str) -> None:
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(text)
  os.replace(tmp, path)


def prepare(workdir: str, config: ml_collections.ConfigDict) -> Path:
  """Creates ``workdir`` and writes config.json; refuses a workdir of another run."""
  wd = Path(workdir).resolve()
  cfg = json.loads(json.dumps(config.to_dict()))  # Tuples as JSON lists.
  old_path = wd / "config.json"
  old_record = json.loads(old_path.read_text()) if old_path.exists() else None
  if old_record is not None:
    old = old_record.get("config", {})
    # A field the old run did not have was added to the code since: allowed.
    diff = sorted(k for k in old if k not in RESUMABLE_CHANGES and old[k] != cfg.get(k))
    if diff:
      raise ConfigError(
          f"workdir {wd} holds a run with a different config (fields: "
          f"{', '.join(diff)}); use a new --workdir or the same config")
  wd.mkdir(parents=True, exist_ok=True)
  now = {"git_commit": git_commit(), "versions": versions(),
         "devices": [str(d) for d in jax.devices()]}
  if old_record is None:
    record = {"config": cfg, **now}
  else:
    # The run belongs to the code that started it; a resume under other code
    # or packages is recorded beside it, not over it.
    record = {**old_record, "config": cfg}
    seen = [{k: old_record.get(k) for k in now}, *old_record.get("resumed_with", [])]
    if now != seen[-1]:
      record["resumed_with"] = seen[1:] + [now]
  write_atomic(old_path, json.dumps(record, indent=2, sort_keys=True) + "\n")
  return wd


class MetricsWriter:
  """Appends one JSON object per evaluation to metrics.jsonl and the same
  scalars to TensorBoard. On resume, records past the restored step are
  dropped: the run will write them again."""

  def __init__(self, wd: Path, resume_step: int):
    self.path = wd / "metrics.jsonl"
    if self.path.exists():
      kept = [l for l in self.path.read_text().splitlines()
              if l.strip() and json.loads(l)["step"] <= resume_step]
      write_atomic(self.path, "".join(l + "\n" for l in kept))
    from tensorboardX import SummaryWriter  # Lazy: it imports protobuf.
    self.tb = SummaryWriter(str(wd / "tensorboard"),
                            purge_step=resume_step + 1 if resume_step else None)

  def write(self, step: int, epoch: int, metrics: dict[str, Any]) -> dict[str, Any]:
    record = {"step": int(step), "epoch": int(epoch), "wall_time": time.time(),
              **{k: float(v) for k, v in metrics.items()}}
    with self.path.open("a") as f:
      f.write(json.dumps(record) + "\n")
    for k, v in metrics.items():
      self.tb.add_scalar(k, float(v), global_step=int(step))
    self.tb.flush()
    return record

  def close(self) -> None:
    self.tb.close()


def checkpoint_manager(wd: Path, max_to_keep: int = 2) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(
      wd / "checkpoints",
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                           cleanup_tmp_directories=True))


def restore_latest(mngr: ocp.CheckpointManager, state: Any) -> tuple[Any, int]:
  """``(state, step)`` from the latest checkpoint, or the given state and 0."""
  step = mngr.latest_step()
  if step is None:
    return state, 0
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  return mngr.restore(step, args=ocp.args.StandardRestore(abstract)), int(step)


def save(mngr: ocp.CheckpointManager, step: int, state: Any) -> None:
  mngr.save(step, args=ocp.args.StandardSave(state))
  mngr.wait_until_finished()
