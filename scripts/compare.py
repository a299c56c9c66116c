r"""Compares runs: their curves in one figure, and a table of their final and
best metrics, the step each was reached at, and the train time.

  python scripts/compare.py runs/pi_mnist_layer runs/pi_mnist_none --out runs/cmp.png \
      [--metric test_error --metric train_nll] [--x step|epoch]

Any workdirs of ``experiments.main`` (or of ``reproduce.py``'s runs) of one
experiment will do; runs of different experiments are refused (their metrics
of one name measure different things), and metrics only some runs record are
named under the table. The metric compared by default is the experiment's own
(the one its progress line and its target's figure report, MAIN_METRICS: the
Transformer's valid_bpc, DRAW's test_bound), read from config.json's
``experiment``. ``--out`` is required: the figure goes where it is told, never
into the current folder unasked. The y axis is logarithmic only where every
value is positive and they span a decade. The table also shows each config
field that differs between the runs, the epochs where the runs count them
(runs counted in updates alone, as the Transformer's and order embeddings',
have no epochs column), and the training time: the seconds of the training
steps, summed (``epoch_time_s``; no evaluation, compiling or checkpoints).
``--group_seeds`` draws the runs whose configs differ only in ``seed`` as one
curve, their mean with a band over their range, and gives mean ± sd in the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from experiments.runner import figures, loop  # noqa: E402

# Bookkeeping fields of a metrics record, not metrics to compare.
NOT_METRICS = ("step", "epoch", "wall_time", "epoch_time_s", "examples_per_sec")
# The metric compared when none is named: the experiment's own (its figure's
# and its progress line's), else the first of DEFAULT_METRICS that every run has.
MAIN_METRICS = {"pi_mnist": "test_error", "convnet": "test_error", "draw": "test_bound",
                "handwriting": "valid_nll", "reader": "valid_error",
                "order_embeddings": "dev_image_recall_sum", "skipthoughts": "heldout_nll",
                "transformer": "valid_bpc"}
DEFAULT_METRICS = ("test_error", "test_bound", "valid_error", "valid_bound", "test_nll",
                   "valid_nll", "train_nll", "train_bound", "train_loss")


class CompareError(Exception):
  pass


def load(workdir: str) -> dict:
  wd = Path(workdir)
  if not wd.is_dir():
    raise CompareError(f"{workdir}: no such workdir")
  if not (wd / "metrics.jsonl").is_file():
    raise CompareError(f"{workdir}: no metrics.jsonl (not the workdir of a run?)")
  try:
    lines = [l for l in (wd / "metrics.jsonl").read_text().splitlines() if l.strip()]
  except (OSError, UnicodeDecodeError) as e:
    raise CompareError(f"{workdir}/metrics.jsonl cannot be read: {e}") from None
  # Every line, the last too: a record cut short (a full disk, a kill while it
  # was written) left out would make the one before it the run's "final".
  metrics = []
  for i, line in enumerate(lines):
    try:
      r = json.loads(line)
    except json.JSONDecodeError:
      r = None
    if not isinstance(r, dict) or "step" not in r:
      raise CompareError(f"{workdir}/metrics.jsonl line {i + 1} of {len(lines)} is not a whole "
                         "record (cut short?); rerun the run's command to evaluate it again")
    metrics.append(r)
  config = {}
  if (wd / "config.json").is_file():
    try:
      config = json.loads((wd / "config.json").read_text()).get("config", {})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
      raise CompareError(f"{workdir}/config.json cannot be read: {e}") from None
  return {"path": workdir, "config": config, "metrics": metrics}


def labels(paths: list[str]) -> list[str]:
  """Each workdir's name, or its path where two names are the same."""
  names = [Path(p).name or p for p in paths]
  return [n if names.count(n) == 1 else p.rstrip("/") for n, p in zip(names, paths)]


def differing_fields(configs: list[dict]) -> list[str]:
  keys = list(dict.fromkeys(k for c in configs for k in c))
  return [k for k in keys if len({json.dumps(c.get(k)) for c in configs}) > 1]


def group(runs: list[dict], by_seed: bool) -> dict[str, list[dict]]:
  """{label: runs}: one run each, or the runs that differ only in seed."""
  names = labels([r["path"] for r in runs])
  if not by_seed:
    return {n: [r] for n, r in zip(names, runs)}
  groups: dict[str, list[tuple[str, dict]]] = {}
  for n, r in zip(names, runs):
    key = json.dumps({k: v for k, v in r["config"].items() if k != "seed"}, sort_keys=True)
    groups.setdefault(key, []).append((n, r))
  return {(g[0][0] if len(g) == 1 else f"{g[0][0]} (+{len(g) - 1} seeds)"): [r for _, r in g]
          for g in groups.values()}


def default_metric(runs: list[dict]) -> str:
  have = [set(k for m in r["metrics"] for k in m) for r in runs if r["metrics"]]
  common = set.intersection(*have) if have else set()
  kinds = {r["config"].get("experiment") for r in runs}
  own = MAIN_METRICS.get(kinds.pop()) if len(kinds) == 1 else None
  for m in ((own,) if own else ()) + DEFAULT_METRICS:
    if m in common:
      return m
  others = sorted(common - set(NOT_METRICS))
  if not others:
    raise CompareError("the runs have no metric in common to compare")
  return others[0]


def best_of(metric: str, best: str = "auto") -> str:
  """min or max: ``best``, or for auto, max for accuracies and recalls."""
  if best != "auto":
    return best
  return "max" if loop.higher_is_better(metric) else "min"


def _final_and_best(metrics: list[dict], metric: str, best: str) -> tuple[dict, dict]:
  have = [m for m in metrics if metric in m]
  pick = min if best_of(metric, best) == "min" else max
  return have[-1], pick(have, key=lambda m: m[metric])


def table(groups: dict[str, list[dict]], metrics: list[str], best: str) -> str:
  fields = differing_fields([r["config"] for rs in groups.values() for r in rs])
  if any(len(rs) > 1 for rs in groups.values()):
    fields = [f for f in fields if f != "seed"]
  epochs = any(m.get("epoch") is not None for rs in groups.values() for r in rs
               for m in r["metrics"])
  head = ["run", *fields, "steps", *(["epochs"] if epochs else [])]
  for m in metrics:
    head += [f"final {m}", "at step",
             f"{'lowest' if best_of(m, best) == 'min' else 'highest'} {m}", "at step"]
  head.append("train time (s)")
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, rs in groups.items():
    row = [name, *(_value(rs[0]["config"][f]) if f in rs[0]["config"] else "" for f in fields)]
    if not all(r["metrics"] for r in rs):
      lines.append("| " + " | ".join(row + ["no records yet"] + [""] * (len(head) - len(row) - 1))
                   + " |")
      continue
    row += [_each(r["metrics"][-1]["step"] for r in rs)]
    if epochs:
      row += [_each(_value(r["metrics"][-1].get("epoch")) or "-" for r in rs)]
    for m in metrics:
      pairs = [_final_and_best(r["metrics"], m, best) for r in rs]
      row += [figures.mean_sd((f[m] for f, _ in pairs), ".4g"), _each(f["step"] for f, _ in pairs),
              figures.mean_sd((b[m] for _, b in pairs), ".4g"), _each(b["step"] for _, b in pairs)]
    times = [sum(m.get("epoch_time_s", 0.0) for m in r["metrics"]) for r in rs]
    timed = all(any("epoch_time_s" in m for m in r["metrics"]) for r in rs)
    # Seconds to 3 digits: a smoke run trains in under a second, not 0.
    row.append(figures.mean_sd(times, ".0f" if min(times) >= 100 else ".3g") if timed else "")
    lines.append("| " + " | ".join(str(c) for c in row) + " |")
  return "\n".join(lines) + "\n"


def _value(v) -> str:
  return "" if v is None else v if isinstance(v, str) else json.dumps(v)


def _each(values) -> str:
  """One value, or each seed's in turn."""
  return " / ".join(str(v) for v in values)


def _axis(metric: str, runs: list[dict]) -> figures.Axis:
  """A log axis where the values allow one and span a decade or more (a NLL
  falling as a run fits its training set), else a linear one: a NLL can be
  negative (a density's, as the handwriting runs'), and a log axis over it is
  blank."""
  values = [rec[metric] for r in runs for rec in r["metrics"] if metric in rec]
  finite = [v for v in values if v == v and abs(v) != float("inf")]
  log = bool(finite) and min(finite) > 0 and max(finite) >= 10 * min(finite)
  return figures.Axis(metric, yscale="log" if log else "linear")


def check_same_experiment(runs: list[dict]) -> None:
  """Runs of different experiments share metric names, not their meaning
  (valid_nll is per image in one, per line in another): refused."""
  kinds = sorted({r["config"].get("experiment", "?") for r in runs if r["config"]})
  if len(kinds) > 1:
    raise CompareError(f"the runs are of different experiments ({', '.join(kinds)}), whose "
                       "metrics of one name are different quantities; compare runs of one "
                       "experiment")


def metrics_note(runs: list[dict]) -> str:
  """A line naming the metrics that only some runs record, or ''."""
  names = labels([r["path"] for r in runs])
  have = [set(k for rec in r["metrics"] for k in rec) - set(NOT_METRICS) for r in runs]
  only = sorted(set.union(*have) - set.intersection(*have)) if have else []
  if not only:
    return ""
  return ("\nNot every run records every metric: " + "; ".join(
      f"{m} only in {', '.join(n for n, h in zip(names, have) if m in h)}" for m in only)
      + ".\n")


def compare(workdirs: list[str], metrics: list[str] | None = None, x: str | None = None,
            out: str | Path | None = None, best: str = "auto",
            group_seeds: bool = False) -> str:
  """Draws the runs' curves into ``out`` and returns the comparison table."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  if out is None:
    raise CompareError("give --out FILE.png, where the figure goes (e.g. --out runs/cmp.png)")
  formats = Figure().canvas.get_supported_filetypes()
  if Path(out).suffix.lstrip(".").lower() not in formats:
    raise CompareError(f"--out {out}: the name must end in one of: "
                       f"{', '.join('.' + f for f in sorted(formats))}")
  runs = [load(w) for w in workdirs]
  check_same_experiment(runs)
  metrics = metrics or [default_metric(runs)]
  for m in metrics:
    for r in runs:
      if r["metrics"] and not any(m in rec for rec in r["metrics"]):
        have = sorted(set(k for rec in r["metrics"] for k in rec) - set(NOT_METRICS))
        raise CompareError(f"{r['path']} has no metric {m!r}; its metrics: {', '.join(have)}")
  if x is None:  # runs measured in updates alone log no epochs
    x = "epoch" if all(m.get("epoch") is not None for r in runs for m in r["metrics"]) else "step"
  groups = group(runs, group_seeds)
  curves = {n: [r["metrics"] for r in rs] for n, rs in groups.items()}
  try:
    if len(metrics) == 1:
      figures.plot(curves, out, _axis(metrics[0], runs), x)
    else:
      figures.plot_panels({"": curves}, out, [_axis(m, runs) for m in metrics], x)
  except OSError as e:
    raise CompareError(f"--out {out}: {e.strerror or e}") from None
  return table(groups, metrics, best) + metrics_note(runs)


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("workdirs", nargs="+", metavar="WORKDIR")
  p.add_argument("--metric", action="append", dest="metrics", metavar="M",
                 help="a metric of metrics.jsonl (repeat for more); default: the experiment's "
                      "own (valid_bpc for the Transformer, test_error for pi_mnist, ...), else "
                      f"the first of {', '.join(DEFAULT_METRICS[:4])}... that every run has")
  p.add_argument("--x", default=None, choices=figures.X_AXES,
                 help="x axis (default epoch, or step where a run logs no epochs)")
  p.add_argument("--out", default=None, type=Path, help="the figure, e.g. runs/cmp.png (required)")
  p.add_argument("--best", default="auto", choices=("auto", "min", "max"),
                 help="whether the best value is the lowest or the highest (default auto: the "
                      f"highest for metrics named with {', '.join(loop.HIGHER_IS_BETTER)} or "
                      f"ending {', '.join(loop.CORRELATIONS)}, else the lowest)")
  p.add_argument("--group_seeds", action="store_true",
                 help="runs that differ only in seed: one curve with a band, mean ± sd")
  args = p.parse_args(argv)
  try:
    md = compare(args.workdirs, args.metrics, args.x, args.out, args.best, args.group_seeds)
  except CompareError as e:
    sys.exit(f"error: {e}")
  print(md, end="")
  print(f"figure: {args.out}")


if __name__ == "__main__":
  main()
