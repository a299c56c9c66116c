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

from experiments.runner import records

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
  """The records of ``workdir/metrics.jsonl``, non-finite metrics as floats
  (records.py's form). A last line that does not parse (what a full disk or
  a killed writer leaves) is skipped."""
  lines = [l for l in (Path(workdir) / "metrics.jsonl").read_text().splitlines() if l.strip()]
  out = []
  for i, line in enumerate(lines):
    try:
      out.append(records.restore(json.loads(line)))
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


# Runs that end on one another (pre-LN and pre-RMSNorm, float32 and bfloat16)
# must all show: each run of a panel has its own colour, dash and marker, the
# markers of run i shifted by i / n of their spacing so that they interleave.
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def style(i: int, n: int = 1, points: int = 0) -> dict:
  """Line properties of the ``i``-th of ``n`` runs in a panel, with ``points``
  points each: markers on about 6 of them, every run's on other points (the
  spacing at least ``n``)."""
  step = max(1, n, points // 6)
  return dict(color=f"C{i % 10}", linestyle=LINESTYLES[i % len(LINESTYLES)],
              marker=MARKERS[i % len(MARKERS)], ms=4,
              markevery=(i * step // max(n, 1) % step, step))


def draw(ax, runs: Runs, metric: str, x: str = "epoch") -> None:
  """One line per run on ``ax`` (each its own :func:`style`); a run of several
  seeds is their mean, with a band over their range."""
  for i, (label, run) in enumerate(runs.items()):
    s = series(seeds_of(run), metric, x)
    if not len(s.x):
      continue
    line, = ax.plot(s.x, s.mean, **style(i, len(runs), len(s.x)), label=label
                    if s.num_seeds == 1 else f"{label} (mean of {s.num_seeds} seeds)")
    if s.num_seeds > 1:
      ax.fill_between(s.x, s.lo, s.hi, color=line.get_color(), alpha=0.2, linewidth=0)


def plain_log_ticks(ax, which: str = "y") -> None:
  """Tick labels of a log axis as plain numbers (0.01, 2, 300), not 2 x 10^0;
  the minor ticks labelled where the axis spans too little for the decades
  alone (matplotlib's rule)."""
  from matplotlib.ticker import LogFormatter  # pylint: disable=g-import-not-at-top

  class Plain(LogFormatter):
    def __call__(self, v, pos=None):
      return f"{v:g}" if super().__call__(v, pos) else ""  # 0.01, 2, 300; 1e-06 beyond 1e-4
  target = ax.yaxis if which == "y" else ax.xaxis
  target.set_major_formatter(Plain(labelOnlyBase=False))
  target.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


@dataclasses.dataclass(frozen=True)
class Axis:
  """One plotted metric: its panel title and y label (with units), scale, and
  an upper limit (the axis then runs from 0 to at most ``ymax``, so that early
  spikes do not flatten the rest; unless every curve lies above it, as in a
  short smoke run)."""
  metric: str
  ylabel: str | None = None
  yscale: str = "linear"
  ymax: float | None = None

  @property
  def title(self) -> str:
    """The metric's name: ``ylabel`` without its "(units)"."""
    return (self.ylabel or self.metric.replace("_", " ")).split(" (")[0]

  @property
  def units(self) -> str:
    """What the y axis counts: the "(units)" of ``ylabel``, else the name."""
    label = self.ylabel or ""
    return label[label.index(" (") + 2:].rstrip(")") if " (" in label else self.title


# Read at 100% on a laptop: panels of 4.8 x 3.4 in at 110 dpi (528 x 374 px),
# at most 3 a row, text at matplotlib's 10 pt (15 px).
PANEL_IN = (4.8, 3.4)
DPI, MAX_COLS = 110, 3
X_LABELS = {"epoch": "epoch", "step": "update (step)"}


def _style(ax, axis: Axis, x: str, title: str) -> None:
  ax.set(yscale=axis.yscale, xlabel=X_LABELS.get(x, x), ylabel=axis.units, title=title)
  if axis.yscale == "log":
    plain_log_ticks(ax)
  if x == "step":  # 200k, not 200000: six-digit step counts overlap
    from matplotlib.ticker import EngFormatter  # pylint: disable=g-import-not-at-top
    ax.xaxis.set_major_formatter(EngFormatter())
  else:  # whole epochs: 5, 10, not 2.5, 5.0
    from matplotlib.ticker import MaxNLocator  # pylint: disable=g-import-not-at-top
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  if axis.ymax is not None:
    # Cut early spikes above ymax, never a curve's best part: the cap rises to
    # keep every line's lowest point in view (one line under ymax once hid the rest).
    top = ax.get_ylim()[1]
    lows = [np.nanmin(l.get_ydata()) for l in ax.get_lines() if len(l.get_ydata())]
    cap = max([axis.ymax] + [1.1 * low for low in lows])
    ax.set_ylim(0, min(cap, top) if lows and min(lows) < axis.ymax else top)
  ax.grid(alpha=0.3)


def pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def save(fig, path: str | Path, **kwargs) -> Path:
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, **kwargs)
  pyplot().close(fig)
  return path


def grid(n: int, title: str | None = None, cols: int | None = None):
  """A figure of ``n`` panels, at most MAX_COLS a row (the spare cells hidden),
  and its axes in reading order."""
  cols = min(cols or n, MAX_COLS, n)
  rows = -(-n // cols)
  # Beside the panels: the title's line and the legend's below them.
  fig, axs = pyplot().subplots(rows, cols, squeeze=False, figsize=(
      PANEL_IN[0] * cols, PANEL_IN[1] * rows + (0.4 if title else 0) + 0.5))
  flat = list(axs.flat)
  for ax in flat[n:]:
    ax.set_visible(False)
  if title:
    fig.suptitle(title)
  return fig, flat[:n]


def legend_columns(labels: tuple[str, ...], width_in: float) -> int:
  """The most columns (at most 4) whose row of labels fits ``width_in``: a
  label takes its characters at about 0.08 in each (the default 10 pt font)
  and 0.7 in for its line sample and the gap after it."""
  per = 0.7 + 0.08 * max(len(l) for l in labels)
  return max(1, min(len(labels), 4, int(width_in / per)))


def finish(fig, axes, path: str | Path, one_legend: bool = False) -> Path:
  """Lays out and saves: one legend below the panels where they share their
  labels (so that it covers no data), else a legend in each panel.
  ``one_legend``: one legend below of every panel's labels, for callers that
  give a label the same style in every panel where it appears."""
  labels = [tuple(ax.get_legend_handles_labels()[1]) for ax in axes]
  shared = len(set(labels)) == 1 and labels[0]
  if shared or (one_legend and any(labels)):
    by_label = {}
    for ax in axes:
      for h, l in zip(*ax.get_legend_handles_labels()):
        by_label.setdefault(l, h)
    handles, names = list(by_label.values()), tuple(by_label)
    ncol = legend_columns(names, fig.get_figwidth())
    fig.legend(handles, names, loc="lower center", ncol=ncol, frameon=False)
    legend_in = 0.15 + 0.3 * -(-len(handles) // ncol)  # its rows of labels
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
  else:
    for ax, l in zip(axes, labels):
      if l:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
  return save(fig, path, dpi=DPI)


def plot(runs: Runs, path: str | Path, metric: str | Axis, x: str = "epoch",
         title: str | None = None) -> Path:
  """One metric of each run against ``x`` in one titled panel; returns ``path``."""
  axis = metric if isinstance(metric, Axis) else Axis(metric)
  fig, (ax,) = grid(1, title)
  draw(ax, runs, axis.metric, x)
  _style(ax, axis, x, axis.title)
  return finish(fig, [ax], path)


def plot_panels(panels: Mapping[str, Runs], path: str | Path, axes: Sequence[Axis],
                x: str = "epoch", title: str | None = None) -> Path:
  """A panel per group of runs (``panels``' keys) and metric in ``axes``,
  titled with the metric (and the group, where there are several), a row per
  group or, for one group, rows of MAX_COLS; returns ``path``."""
  cells = [(name, axis) for name in panels for axis in axes]
  fig, flat = grid(len(cells), title, cols=len(axes) if len(panels) > 1 else None)
  for ax, (name, axis) in zip(flat, cells):
    draw(ax, panels[name], axis.metric, x)
    _style(ax, axis, x, f"{axis.title}, {name}" if len(panels) > 1 and name else axis.title)
  return finish(fig, flat, path)
