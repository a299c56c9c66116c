"""A run's metrics.jsonl, line by line, and whether the run it records is whole.

One line an evaluation, each a strict JSON object (RFC 8259: ``jq`` and every
JSON reader take it) with ``step``, ``epoch`` (runs counted in epochs),
``wall_time`` and the metrics. JSON has no NaN or infinity, so a non-finite
metric is written as ``null`` and named, with its value, under ``nonfinite``::

  {"step": 12, "valid_nll": null, "nonfinite": {"valid_nll": "nan"}, ...}

:func:`read` (and ``figures.read_metrics``) give such a metric back as the
float it was (``float("nan")``, ``float("inf")``) and drop the ``nonfinite``
key, so a reader sees the floats the run measured. Files written before this
form (with bare ``NaN``) read the same.

Imports no JAX, so scripts may ask :func:`unfinished` cheaply.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
NONFINITE = "nonfinite"


def _word(v: float) -> str:
  return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def encode(record: dict[str, Any]) -> str:
  """One line of metrics.jsonl (with its newline): strict JSON, a non-finite
  float as null named under ``nonfinite``."""
  bad = {k: _word(v) for k, v in record.items()
         if isinstance(v, float) and not math.isfinite(v)}
  out = {k: (None if k in bad else v) for k, v in record.items() if k != NONFINITE}
  if bad:
    out[NONFINITE] = bad
  return json.dumps(out, allow_nan=False) + "\n"


def decode(line: str) -> dict[str, Any]:
  """A record from one line; ValueError if the line is not one (a damaged or
  partial line, an object without an integer ``step``)."""
  record = json.loads(line)
  if not isinstance(record, dict) or not isinstance(record.get("step"), int):
    raise ValueError("not a metrics record")
  return restore(record)


def restore(record: dict[str, Any]) -> dict[str, Any]:
  """``record`` (parsed JSON) with its ``nonfinite`` metrics as floats again."""
  if not isinstance(record, dict):
    return record
  nonfinite = record.pop(NONFINITE, None) or {}
  if not isinstance(nonfinite, dict):
    raise ValueError(f"{NONFINITE} is not an object")
  for k, word in nonfinite.items():
    record[k] = float(word)  # "nan", "inf", "-inf"
  return record


def read(path: Path) -> tuple[list[dict], list[int]]:
  """The records of a metrics.jsonl in file order, and the numbers (1-based)
  of the lines that are not records. A missing file has neither."""
  records, damaged = [], []
  if not path.exists():
    return records, damaged
  for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
    if not line.strip():
      continue
    try:
      records.append(decode(line))
    except ValueError:
      damaged.append(i)
  return records, damaged


# Better higher: metrics named with one of these, and correlations (SentEval's
# SICK_r, SICK_rho) by their suffix. All others (losses, errors, MSE) lower.
HIGHER_IS_BETTER = ("accuracy", "acc", "recall")
CORRELATIONS = ("_r", "_rho")


def higher_is_better(metric: str) -> bool:
  return any(w in metric for w in HIGHER_IS_BETTER) or metric.endswith(CORRELATIONS)


def finite(record: dict) -> bool:
  """Whether every number in ``record`` is finite."""
  return all(math.isfinite(v) for v in record.values() if isinstance(v, (int, float)))


def checkpoint_steps(wd: Path) -> list[int]:
  """The steps of the finished checkpoints in ``wd/checkpoints`` (Orbax names
  each folder by its step; one being written has a suffix), ascending."""
  root = Path(wd) / CHECKPOINTS
  if not root.is_dir():
    return []
  return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir())


def unfinished(wd: str | Path, num_steps: int | None = None,
               num_epochs: int | float | None = None) -> str | None:
  """None when ``wd`` holds a whole run's records, else why not, in words.

  Whole: metrics.jsonl has no damaged line; its last record is at step
  ``num_steps`` (if given and > 0), else at epoch ``num_epochs`` (if given);
  and the newest checkpoint, where there are checkpoints, has its record (a
  run killed between its checkpoint and its record, or whose record was lost,
  is not finished: its next run makes the record again). A record copied
  elsewhere without its checkpoints counts on its records alone."""
  wd = Path(wd)
  path = wd / METRICS
  if not path.exists():
    return f"{path} does not exist"
  records, damaged = read(path)
  if damaged:
    return f"line {damaged[0]} of {path} is damaged"
  if not records:
    return f"{path} holds no record"
  last = records[-1]
  if num_steps:
    if last["step"] != num_steps:
      return f"its last record is at step {last['step']} of {num_steps}"
  elif num_epochs is not None and last.get("epoch") != num_epochs:
    return f"its last record is at epoch {last.get('epoch')} of {num_epochs}"
  steps = checkpoint_steps(wd)
  if steps and steps[-1] not in {r["step"] for r in records}:
    return f"checkpoint {steps[-1]} has no record in {path}"
  return None


def finished(wd: str | Path, num_steps: int | None = None,
             num_epochs: int | float | None = None) -> bool:
  """Whether ``wd`` holds a whole run's records (:func:`unfinished`)."""
  return unfinished(wd, num_steps, num_epochs) is None
