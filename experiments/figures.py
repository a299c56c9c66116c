"""Figures drawn from runs' metrics (each workdir's metrics.jsonl).

A figure shows curves of any metric against ``step`` or ``epoch``, one per
labelled run. A run is given as a workdir, as its metrics (the list of
metrics.jsonl records), or as a list of either: the seeds of one setting, drawn
as their mean with a band from the lowest to the highest seed.

  figures.plot({"LN": "runs/ln", "baseline": "runs/none"}, "fig.png", "test_error")
  figures.plot_panels({"batch 128": runs_128, "batch 4": runs_4}, "fig6.png",
                      [figures.Axis("train_nll", "train NLL", yscale="log"),
                       figures.Axis("test_error", "test error", ymax=0.1)])
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

Metrics = list[dict]  # one run's metrics.jsonl records, in order
Runs = Mapping[str, Any]  # label -> workdir | Metrics | list of either (seeds)
X_AXES = ("step", "epoch")


def mean_sd(values, fmt: str = ".4f") -> str:
  """``mean ± sd`` (the sample standard deviation) of several seeds' values,
  for the tables beside a figure; one value as it is."""
  values = list(values)
  if len(values) == 1:
    return format(values[0], fmt)
  return (f"{format(float(np.mean(values)), fmt)} ± "
          f"{format(float(np.std(values, ddof=1)), fmt)}")


def read_metrics(workdir: str | Path) -> Metrics:
  """The records of ``workdir/metrics.jsonl``. A last line that does not parse
  (what a full disk or a killed writer leaves) is skipped."""
  lines = [l for l in (Path(workdir) / "metrics.jsonl").read_text().splitlines() if l.strip()]
  out = []
  for i, line in enumerate(lines):
    try:
      out.append(json.loads(line))
    except json.JSONDecodeError:
      if i < len(lines) - 1:
        raise
  return out


def read_run(workdir: str | Path) -> dict:
  """config.json's record (``config``, ``git_commit``, ``versions``...) with
  the run's records under ``metrics``."""
  record = json.loads((Path(workdir) / "config.json").read_text())
  record["metrics"] = read_metrics(workdir)
  return record


def seeds_of(run: Any) -> list[Metrics]:
  """A run as the list of its seeds' metrics."""
  if isinstance(run, (str, Path)):
    return [read_metrics(run)]
  run = list(run)
  if not run or isinstance(run[0], dict):
    return [run]
  return [m for r in run for m in seeds_of(r)]


@dataclasses.dataclass(frozen=True)
class Series:
  """A metric against x, over the x values that every seed recorded it at."""
  x: np.ndarray
  mean: np.ndarray
  lo: np.ndarray  # the lowest seed
  hi: np.ndarray  # the highest seed
  num_seeds: int


def series(seeds: Sequence[Metrics], metric: str, x: str = "epoch") -> Series:
  if x not in X_AXES:
    raise ValueError(f"x={x!r} is not valid; choose one of: {', '.join(X_AXES)}")
  # Records without the metric (an evaluation every N steps may log only some
  # metrics) are left out; a later record at the same x replaces an earlier one.
  per_seed = [{r[x]: r[metric] for r in m if metric in r and r.get(x) is not None}
              for m in seeds]
  xs = sorted(set.intersection(*(set(d) for d in per_seed))) if per_seed else []
  values = np.array([[d[v] for v in xs] for d in per_seed], dtype=np.float64).reshape(
      len(per_seed), len(xs))
  return Series(np.array(xs), values.mean(0), values.min(0), values.max(0), len(per_seed))


def draw(ax, runs: Runs, metric: str, x: str = "epoch") -> None:
  """One line per run on ``ax``; a run of several seeds is their mean, with a
  band over their range."""
  for label, run in runs.items():
    s = series(seeds_of(run), metric, x)
    if not len(s.x):
      continue
    line, = ax.plot(s.x, s.mean, label=label if s.num_seeds == 1
                    else f"{label} (mean of {s.num_seeds} seeds)")
    if s.num_seeds > 1:
      ax.fill_between(s.x, s.lo, s.hi, color=line.get_color(), alpha=0.2, linewidth=0)


@dataclasses.dataclass(frozen=True)
class Axis:
  """One plotted metric: its y label, scale, and an upper limit (the axis then
  runs from 0 to at most ``ymax``, so that early spikes do not flatten the rest;
  unless every curve lies above it, as in a short smoke run)."""
  metric: str
  ylabel: str | None = None
  yscale: str = "linear"
  ymax: float | None = None


def _style(ax, axis: Axis, x: str, title: str | None) -> None:
  ax.set(yscale=axis.yscale, xlabel=x, ylabel=axis.ylabel or axis.metric.replace("_", " "))
  if x == "step":  # 200k, not 200000: six-digit step counts overlap
    from matplotlib.ticker import EngFormatter  # pylint: disable=g-import-not-at-top
    ax.xaxis.set_major_formatter(EngFormatter())
  if title:
    ax.set_title(title)
  if axis.ymax is not None:
    top = ax.get_ylim()[1]
    lowest = min((np.nanmin(l.get_ydata()) for l in ax.get_lines()), default=np.inf)
    ax.set_ylim(0, min(axis.ymax, top) if lowest < axis.ymax else top)
  ax.grid(alpha=0.3)
  if ax.get_legend_handles_labels()[0]:
    ax.legend()


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _save(fig, path: str | Path, **kwargs) -> Path:
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, **kwargs)
  _pyplot().close(fig)
  return path


def plot(runs: Runs, path: str | Path, metric: str | Axis, x: str = "epoch",
         title: str | None = None) -> Path:
  """One metric of each run against ``x`` in one plot; returns ``path``."""
  axis = metric if isinstance(metric, Axis) else Axis(metric)
  fig, ax = _pyplot().subplots(figsize=(6, 4))
  draw(ax, runs, axis.metric, x)
  _style(ax, axis, x, title)
  return _save(fig, path, dpi=120, bbox_inches="tight")


def plot_panels(panels: Mapping[str, Runs], path: str | Path, axes: Sequence[Axis],
                x: str = "epoch", title: str | None = None) -> Path:
  """A row per panel (a group of runs, titled by its key) and a column per
  metric in ``axes``; returns ``path``."""
  plt = _pyplot()
  fig, grid = plt.subplots(len(panels), len(axes), figsize=(5 * len(axes), 3.6 * len(panels)),
                           squeeze=False)
  for row, (name, runs) in enumerate(panels.items()):
    for col, axis in enumerate(axes):
      draw(grid[row, col], runs, axis.metric, x)
      _style(grid[row, col], axis, x, name)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  return _save(fig, path, dpi=100)
