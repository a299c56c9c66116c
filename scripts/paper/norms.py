"""Every norm on every task (issue 62): one grid, a leaderboard, and verdicts
on the published claims about normalizations.

  python scripts/reproduce.py norms --preset cpu --seeds 3 [--tasks a,b] [--norms x,y] [--plan]

The tasks (``TASKS``): the PI-MNIST MLP at batch 128 and 4, the ConvNet at
batch 64 and 4, handwriting's LSTMs (a shortened run), and the byte
Transformer at 2 and 12 layers. A task's norms are not listed here: they are
every norm of the registry (lnorm/norms.py) that its model accepts, asked of
the model itself (``Task.accepted``), so a norm registered later, a user's
included (``--norms mypackage.norms:MyNorm``), joins every task with a site
for it. ``--norms`` keeps a subset (each checked against the registry),
``--tasks`` a subset of the tasks.

The Transformer's grid: every placement of lnorm/transformer.py but ``none``
crossed with every norm it accepts, plus the unnormalized model (GPT-2's
scaled init, as scripts/paper/transformer.py), and ``qk_norm`` on with
pre-norm, each over the learning rates ``RATES`` (33x), without warm-up (the
setting of DeepNorm's claim, and the harder test for every placement). Each
variant's learning-rate sensitivity (Wortsman et al. 2023) comes from its
sweep: ``lr_sensitivity``.

The grid is ~20 machine-hours at the cpu preset on 2 cores: it runs in parts
(``--only`` with names from ``--plan``; a later sitting's
``--adopt_results``). results.md tables every whole record in the results
folder and lists the runs still to come; ``redraw.py norms --preset cpu``
rebuilds its figures from the committed records, whole or partial.

A run whose loss turns NaN is a result: the Transformer writes diverged.json
itself; the other experiments stop with exit status 3, which
``runs.run_all`` records as diverged.json (``{"exit_status": 3}``).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from experiments.runner import figures
from lnorm import norms
from scripts.paper import inputs
from scripts.paper import runs as R
from scripts.paper import verdicts

DIVERGED, GRAD_NORMS, NONFINITE_EXIT = "diverged.json", "grad_norms.json", 3
# The Transformer's learning-rate sweep: 4 rates spanning 33x around the
# transformer target's 1e-3 (Adam, no warm-up).
RATES = (3e-4, 1e-3, 3e-3, 1e-2)
REF_RATE = 1e-3  # the rate of the Transformer's "updates to none's final" and gradient columns
# Wortsman et al.'s l_0, the loss at initialisation, in bits per byte: the
# runs record no step-0 evaluation, and a model at init predicts bytes near
# uniformly (8 bits); a diverged run's loss counts as this.
INIT_BPC = 8.0
QK_DEPTHS = (2,)  # qk_norm on is run at these depths only (cut to fit: see PLAN_NOTE)
OVERHEAD_S = 30.0  # a run's start, compile and data load (a guess; the plan says so)
EVAL_S = 5.0       # an evaluation's seconds (a guess)
STEP_TIMES = "step_times.json"  # scripts/bench/norm_steps.py's, beside results.md
BENCH_COMMAND = "python -m scripts.bench.norm_steps --preset {preset}"
BENCH = f"awaits benchmark (`{BENCH_COMMAND}`, run idle, writes {STEP_TIMES} here)"


# -- The tasks -----------------------------------------------------------------

def _takes(accept: Callable[[str], object]) -> tuple[str, ...]:
  """The registered norms ``accept`` (a model's one-line check) lets through."""
  out = []
  for n in norms.names():
    try:
      accept(n)
    except ValueError:
      continue
    out.append(n)
  return tuple(out)


def _dense_norms() -> tuple[str, ...]:
  from lnorm import layers  # pylint: disable=g-import-not-at-top
  return layers.accepted()


def _lstm_norms() -> tuple[str, ...]:
  from lnorm import handwriting  # pylint: disable=g-import-not-at-top
  return _takes(handwriting.accept)


def _sublayer_norms() -> tuple[str, ...]:
  from lnorm import transformer  # pylint: disable=g-import-not-at-top
  return transformer.accepted()


def _mnist_rate(norm: str, batch: int) -> float:
  """The searched rate of (norm, batch) (configs/pi_mnist.py); layer norm's at
  that batch for a norm the search did not cover (said in the table)."""
  from configs import pi_mnist  # pylint: disable=g-import-not-at-top
  key = (norm, batch) if (norm, batch) in pi_mnist.LEARNING_RATES else (norms.LAYER, batch)
  return pi_mnist.LEARNING_RATES[key]


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  config: str
  title: str
  accepted: Callable[[], tuple[str, ...]]  # the registry's norms the model takes
  presets: dict                            # preset -> overrides every run shares
  metric: str                              # the table's metric (lower is better)
  metric_label: str
  speed: str                               # "updates to reach none's final" of this metric
  fmt: str = ".4f"
  layers: int = 0                          # the Transformer's depth; 0: not a Transformer
  rate: Callable[[str, dict], float] | None = None  # (norm, fields) -> learning rate

  def fields(self, preset: str) -> dict:
    if preset not in self.presets:
      sys.exit(f"error: the norms study has no {preset} preset for {self.name}; "
               f"choose one of: {', '.join(self.presets)}")
    return dict(self.presets[preset])


def _mnist(batch: int, epochs: int) -> Task:
  return Task(f"pi_mnist_b{batch}", "configs/pi_mnist.py",
              f"PI-MNIST MLP (784-1000-1000-10), batch {batch}", _dense_norms,
              {"cpu": {"batch_size": batch, "num_epochs": epochs},
               "smoke": {"batch_size": batch}},
              "test_error", "test error", "train_nll",
              rate=lambda n, f: _mnist_rate(n, f["batch_size"]))


def _convnet(batch: int, train: int, epochs: int) -> Task:
  return Task(f"convnet_b{batch}", "configs/convnet.py",
              f"ConvNet (16, 32 channels, 128 units) on MNIST, batch {batch}", _dense_norms,
              {"cpu": {"batch_size": batch, "num_train": train, "num_epochs": epochs},
               "smoke": {"batch_size": batch}},
              "test_error", "test error", "train_nll")


def _transformer(layers: int, steps: int, every: int) -> Task:
  cpu = {"num_layers": layers, "num_steps": steps, "eval_every_steps": every,
         "num_eval_windows": 256, "warmup_steps": 0}
  return Task(f"transformer_L{layers}", "configs/transformer.py",
              f"Byte Transformer LM, {layers} layers of width 64", _sublayer_norms,
              {"cpu": cpu, "smoke": {"num_layers": layers, "warmup_steps": 0}},
              "valid_bpc", "valid bpc", "valid_bpc", fmt=".3f", layers=layers)


TASKS: dict[str, Task] = {t.name: t for t in (
    _mnist(128, 3), _mnist(4, 2),
    _convnet(64, 15000, 3), _convnet(4, 10000, 2),
    Task("handwriting", "configs/handwriting.py",
         "Handwriting (3 LSTMs of 128, IAM-OnDB), 500 updates", _lstm_norms,
         {"cpu": {"num_steps": 500, "eval_every_steps": 125, "num_eval": 128,
                  "num_samples": 0},
          "smoke": {"num_samples": 0}},
         "valid_nll", "valid NLL (nats a line)", "valid_nll", fmt=".1f"),
    _transformer(2, 300, 100), _transformer(12, 250, 125))}

PLAN_NOTE = (
    "What was cut to fit ~20 machine-hours on 2 cores (the cpu preset): the MLP trains 3 "
    "epochs at batch 128 and 2 at batch 4 (Figure 6's cpu preset: 10); the ConvNet 3 epochs "
    "of 15,000 images at batch 64 and 2 epochs of 10,000 at batch 4 (its cpu preset: 3 of "
    "55,000); handwriting 500 updates (its cpu preset: 6,055) evaluated on 128 lines; the "
    "Transformer 300 updates at 2 layers and 250 at 12 (its target: 2,000) without warm-up, "
    "validated on 256 windows, and `qk_norm` on only with pre-norm and only at 2 layers. One learning rate a norm outside the Transformer "
    "(the searched one where Figure 6's search covered the norm, else layer norm's; the "
    "ConvNet's and handwriting's presets' own): a norm that wants another rate is at a "
    "disadvantage there, which the Transformer's sweep measures.")


@dataclasses.dataclass(frozen=True)
class Variant:
  """One run of the grid, before seeds: a task's norm (and, for the
  Transformer, its placement, qk_norm and learning rate)."""
  task: str
  norm: str            # the registered name
  position: str = ""   # the Transformer's norm_position
  qk: bool = False
  lr: float = 0.0

  def name(self) -> str:
    if not self.position:
      return f"{self.task}_{self.norm}"
    return f"{self.task}_{self.position}_{self.norm}{'_qk' if self.qk else ''}_lr{self.lr:g}"

  def label(self) -> str:
    base = norms.label(self.norm)
    if not self.position:
      return base
    if self.position == "none":
      return "no norm" + (f" (qk {base})" if self.qk else "")
    return f"{self.position}, {base}" + (", qk-norm" if self.qk else "")

  def overrides(self, task: Task, preset: str) -> dict:
    o = {**task.fields(preset), "norm": spec(self.norm)}
    if task.rate is not None:
      o["learning_rate"] = task.rate(self.norm, o)
    if self.position:
      o.update(norm_position=self.position, qk_norm=self.qk, learning_rate=self.lr)
      if self.position == "none" and not self.qk:
        o["scaled_residual_init"] = True  # GPT-2's init: as the transformer target's no norm
    return o


def step_key(v: Variant) -> str:
  """The variant's key in step_times.json: its name less the task and the
  rate (the rate does not change the work)."""
  return v.norm if not v.position else f"{v.position}_{v.norm}{'_qk' if v.qk else ''}"


def spec(name: str) -> str:
  """What a run's config names the norm by: its name for lnorm's own, else
  ``module:Attr`` where the registered Norm lives, so that the run's process
  (another Python) imports and registers it too."""
  nm = norms.get(name)
  f = nm.fn or nm.kernel
  # none, batch: lnorm's own; a function made by exec() has no module (None)
  where = (f.__module__ or "__main__") if f is not None else "lnorm.norms"
  if where.split(".")[0] == "lnorm":
    return nm.name
  mod = sys.modules.get(where)
  for attr, value in vars(mod or object()).items():
    if value is nm:
      return f"{mod.__name__}:{attr}"
  sys.exit(f"error: norm {nm.name!r} is registered in this process only; name it in --norms "
           "as package.module:Name so that each run can import it")


def choose(args) -> tuple[list[Task], tuple[str, ...] | None]:
  """The tasks and norms of ``--tasks`` / ``--norms`` (None: every registered
  norm), each checked in one line."""
  tasks = list(TASKS.values())
  if getattr(args, "tasks", None):
    asked = [t for t in args.tasks.split(",") if t]
    bad = [t for t in asked if t not in TASKS]
    if bad:
      sys.exit(f"error: --tasks {','.join(bad)}: no such task; choose from: {', '.join(TASKS)}")
    tasks = [TASKS[t] for t in asked]
  chosen = None
  if getattr(args, "norms", None):
    try:
      chosen = tuple(dict.fromkeys(norms.get(n).name for n in args.norms.split(",") if n))
    except ValueError as e:
      sys.exit(f"error: --norms: {e}")
    taken = {n for t in tasks for n in t.accepted()}
    idle = [n for n in chosen if n not in taken]
    if idle:
      sys.exit(f"error: --norms {','.join(idle)}: no task of {','.join(t.name for t in tasks)} "
               f"accepts it; they accept: {', '.join(n for n in norms.names() if n in taken)}")
  return tasks, chosen


def variants(task: Task, chosen: Sequence[str] | None = None) -> list[Variant]:
  """Every run of ``task`` (before seeds): each norm its model accepts (of
  ``chosen``, if given); for the Transformer, the placements, qk_norm and
  rates, each combination its model's own checks let through."""
  names = [n for n in task.accepted() if chosen is None or n in chosen]
  if not task.layers:
    return [Variant(task.name, n) for n in names]
  from lnorm import transformer as T  # pylint: disable=g-import-not-at-top
  out = []
  for pos in (p for p in T.NORM_POSITIONS if p != "none"):
    out += [(pos, n, False) for n in names if not norms.get(n).identity]
  if norms.NONE in names:
    out.append(("none", norms.NONE, False))
  if task.layers in QK_DEPTHS:
    out += [("pre", n, True) for n in names if not norms.get(n).identity]
  ok = []
  for pos, n, qk in out:
    try:
      T.check_config(norm=n, norm_position=pos, qk_norm=qk)
    except ValueError:
      continue  # a combination the model refuses is not in the grid
    ok += [Variant(task.name, n, pos, qk, lr) for lr in RATES]
  return ok


def grid(args) -> dict[str, list[tuple[Variant, int, str, dict]]]:
  """{config: [(variant, seed index, workdir name, overrides)]} of the chosen
  tasks, seeds expanded as runs.seed_names does."""
  tasks, chosen = choose(args)
  out: dict[str, list] = {}
  for task in tasks:
    seeds = R.seed_names(args, task.config)
    for v in variants(task, chosen):
      o = v.overrides(task, args.preset)
      for i, (suffix, seed) in enumerate(seeds):
        out.setdefault(task.config, []).append((v, i, v.name() + suffix, {**o, **seed}))
  return out


# -- The plan --------------------------------------------------------------------

def _updates(c: dict) -> int:
  if c.get("num_steps", 0) > 0:
    return c["num_steps"]
  if c["experiment"] == "handwriting":
    return c["num_epochs"] * (c.get("num_train") or 9689) // c["batch_size"]
  return c["num_epochs"] * ((c.get("num_train") or 55000) // c["batch_size"])


SIZE_FIELDS = {"pi_mnist": ("hidden",), "convnet": ("channels", "hidden"),
               "handwriting": ("hidden", "num_mixtures", "max_len", "batch_size"),
               "transformer": ("num_layers", "d_model", "d_ff", "seq_len", "batch_size")}


def measured(c: dict, root: Path | None = None) -> tuple[float, str]:
  """Seconds an update of ``c``'s model, from committed records of the same
  experiment and size (results/*/*/metrics.jsonl: training seconds over
  updates, median over the records); a classifier at a batch without records
  scales the nearest batch's by the batch ratio. (nan, why) if none."""
  root = root or R.REPO / "results"
  same, other = [], []
  for cfg_path in sorted(glob.glob(str(root / "*" / "*" / "config.json"))):
    try:
      rc = json.loads(Path(cfg_path).read_text())["config"]
      m = figures.read_metrics(Path(cfg_path).parent)
    except (OSError, ValueError, KeyError):
      continue
    if rc.get("experiment") != c["experiment"] or not m or "epoch_time_s" not in m[-1]:
      continue
    if any(json.dumps(rc.get(k)) != json.dumps(c.get(k)) for k in SIZE_FIELDS[c["experiment"]]):
      continue
    s = sum(x.get("epoch_time_s", 0.0) for x in m) / max(m[-1]["step"], 1)
    (same if rc.get("batch_size") == c.get("batch_size") else other).append(
        (s, rc.get("batch_size"), str(Path(cfg_path).parent.parent.name)))
  if same:
    return statistics.median(s for s, _, _ in same), (
        f"{len(same)} records ({', '.join(sorted({d for _, _, d in same}))})")
  if other:
    b = min({b for _, b, _ in other}, key=lambda x: abs(math.log(x / c["batch_size"])))
    s = statistics.median(s for s, bb, _ in other if bb == b)
    return s * c["batch_size"] / b, f"batch {b}'s records, scaled by {c['batch_size']}/{b}"
  return math.nan, "no committed record of this size"


def plan(args) -> str:
  """The estimated time of each task's runs (all seeds), as a table."""
  rows, total = [], 0.0
  for config, rs in grid(args).items():
    by_task: dict[str, list] = {}
    for v, _, _, o in rs:
      by_task.setdefault(v.task, []).append(o)
    for task, os_ in by_task.items():
      c = R.config_dict(config, args.preset, os_[0])
      s, src = measured(c)
      evals = math.ceil(_updates(c) / c["eval_every_steps"]) if c.get("eval_every_steps") else (
          c.get("num_epochs", 1))
      each = _updates(c) * s + OVERHEAD_S + EVAL_S * evals
      total += each * len(os_)
      h = lambda x, f: "n/a" if math.isnan(x) else format(x, f)
      rows.append(f"| {task} | {len(os_)} | {_updates(c):,} | {h(s, '.4f')} ({src}) | "
                  f"{h(each / 60, '.1f')} | {h(each * len(os_) / 3600, '.2f')} |")
  return ("| task | runs | updates a run | s an update (from) | min a run | hours |\n"
          "|---|---|---|---|---|---|\n" + "\n".join(rows)
          + f"\n| all | {sum(len(r) for r in grid(args).values())} | | | | "
          + ("n/a" if math.isnan(total) else f"{total / 3600:.1f}") + " |\n\n"
          f"A run: its updates at the measured seconds an update (training only), plus "
          f"{OVERHEAD_S:g} s to start and {EVAL_S:g} s an evaluation (guesses); on 2 cores, one "
          "run at a time.\n")


# -- Running and reading -----------------------------------------------------------

def _state(d: Path, config: str, preset: str, o: dict) -> str | None:
  return R.record_state(d, config, preset, o, (DIVERGED,))[0]


def read(d: Path) -> dict:
  rec = json.loads((d / "config.json").read_text())
  rec["metrics"] = figures.read_metrics(d) if (d / "metrics.jsonl").exists() else []
  rec["diverged"] = (d / DIVERGED).exists()
  rec["grad_norms"] = (json.loads((d / GRAD_NORMS).read_text())
                       if (d / GRAD_NORMS).exists() else None)
  rec["name"] = d.name
  return rec


def run_grid(args) -> tuple[dict, dict[str, list[str]]]:
  """Runs what this sitting runs, then reads every whole record of the grid in
  the results folder: ({(variant, seed index): record}, {task: its runs
  still to come})."""
  g = grid(args)
  every = [name for rs in g.values() for _, _, name, _ in rs]
  only = set(getattr(args, "only", None) or ())
  unknown = sorted(only - set(every))
  if unknown:
    sys.exit(f"error: --only names no run of the norms grid (--preset {args.preset}, --seeds "
             f"{args.seeds}): {', '.join(unknown[:5])}"
             + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
             + "; `--plan` sizes the grid, its names are <task>_<norm> and "
               "transformer_L<n>_<placement>_<norm>[_qk]_lr<rate>[_seed<s>]")
  out = R.out_dir(args)
  todo: dict[str, dict] = {}
  for config, rs in g.items():
    for v, i, name, o in rs:
      if only and name not in only:
        continue
      wd = R.workdir(args, name)
      if getattr(args, "no_training", None) and not _state(wd, config, args.preset, o):
        continue  # redraw: whole records only
      todo.setdefault(config, {})[(v, i)] = (name, o)
  # Every input of the runs to start, before the first of them (any config).
  start = [R.config_dict(c, args.preset, o) for c, rs in todo.items() for name, o in rs.values()
           if not _state(R.workdir(args, name), c, args.preset, o)
           and not (getattr(args, "adopt_results", False) and _state(out / name, c, args.preset, o))]
  inputs.check(args.target, start)
  one = argparse.Namespace(**{**vars(args), "seeds": 1, "only": None})
  for config, rs in todo.items():
    R.run_all(one, config, rs, optional=(GRAD_NORMS,), stops={NONFINITE_EXIT: DIVERGED})
  records, left = {}, {}
  for config, rs in g.items():
    for v, i, name, o in rs:
      if _state(out / name, config, args.preset, o):
        records[v, i] = read(out / name)
      else:
        left.setdefault(v.task, []).append(name)
  return records, left


def to_come(args, left: dict[str, list[str]]) -> str:
  """results.md's list of the runs still to come: by task, a task with none
  recorded in one line."""
  if not left:
    return "None: every run of the grid is recorded.\n\n"
  g = grid(args)
  size = {}
  for rs in g.values():
    for v, _, _, _ in rs:
      size[v.task] = size.get(v.task, 0) + 1
  md = f"{sum(map(len, left.values()))} of {sum(size.values())} runs:\n\n"
  for task, names in left.items():
    md += (f"- {task}: all {size[task]} runs (`--plan` sizes them)\n" if len(names) == size[task]
           else f"- {task}: {len(names)} of {size[task]}: {', '.join(names)}\n")
  return md + ("\nThe rest, a part at a time, each sitting committing its records: `"
               + command(args) + " --adopt_results --only NAME,...` (names "
               "`<task>_<norm>`, `transformer_L<n>_<placement>_<norm>[_qk]_lr<rate>`, then "
               "`_seed<s>` for seeds past the first); last, without `--only`, for the tables "
               "of all.\n\n")


# -- Measures ----------------------------------------------------------------------

def final(r: dict, metric: str) -> float:
  """The run's last value of ``metric``; inf if it diverged."""
  if r["diverged"] or not r["metrics"]:
    return math.inf
  return r["metrics"][-1].get(metric, math.nan)


def best(r: dict, metric: str) -> float:
  return min((m[metric] for m in r["metrics"] if metric in m and math.isfinite(m[metric])),
             default=math.inf)


def lr_sensitivity(losses: Sequence[float], init: float = INIT_BPC) -> float:
  """Wortsman et al. 2023's LR sensitivity ("Small-scale proxies for
  large-scale Transformer training instabilities", arXiv:2309.14322, section
  2.2; their Figure 1 draws the curves it summarises):
  E_eta[min(l(eta), l_0) - min_eta l(eta)] over the sweep's rates eta, with
  l(eta) the final loss at rate eta and l_0 the loss at initialisation; a
  diverged run (inf, NaN) counts as l_0. The min with l_0 caps a blow-up at
  the loss of not training at all; the best, min_eta l(eta), is not capped
  (so the value is negative only where every rate ends above l_0). The
  formula as we read it: its symbols were not checked against the paper's
  text, which we could not retrieve (its introduction, retrieved, defines it
  in words: the deviation from optimal performance as the rate varies over
  orders of magnitude). Their sweep, 3e-4 to 3e-1 by a reader's notes (not
  checked), is wider than ours (``RATES``, 33x)."""
  ls = [x if math.isfinite(x) else init for x in losses]
  return statistics.mean(min(x, init) for x in ls) - min(ls)


def updates_to(r: dict, metric: str, level: float) -> float:
  """The first evaluated step with ``metric`` <= ``level``; inf if none."""
  return R.first(r["metrics"], metric, level, "step")


def _cell(values: Sequence[float], fmt: str) -> str:
  if all(math.isfinite(v) for v in values):
    return R.mean_sd(values, fmt)
  return " / ".join("diverged" if math.isinf(v) else "n/a" if math.isnan(v) else
                    format(v, fmt) for v in values)


# -- Tables ------------------------------------------------------------------------

def _seeds(records: dict, v: Variant, n: int) -> list[dict] | None:
  """The variant's records, seed by seed; None unless all ``n`` are whole."""
  rs = [records.get((v, i)) for i in range(n)]
  return rs if all(rs) else None


def step_times(args) -> dict[str, dict]:
  """{task: its entry} of scripts/bench/norm_steps.py's step_times.json in
  the results folder (the committed one, also when redrawing elsewhere), for
  this preset; {} where there is none."""
  path = R.out_dir(argparse.Namespace(**{**vars(args), "write_dir": None})) / STEP_TIMES
  if not path.exists():
    return {}
  try:
    tasks = json.loads(path.read_text())["tasks"]
    return {k: e for k, e in tasks.items() if e["preset"] == args.preset and e["variants"]}
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    # A damaged benchmark file is not "no benchmark": say so, write nothing.
    sys.exit(f"error: {path} is not scripts/bench/norm_steps.py's JSON ({type(e).__name__}: "
             f"{e}); rerun `{BENCH_COMMAND.format(preset=args.preset)}` or remove it")


def _step_cell(entry: dict | None, v: Variant) -> str:
  """The variant's median step time over layer norm's, from the benchmark."""
  if not entry:
    return "awaits benchmark"
  got = entry["variants"].get(step_key(v)) or {}
  return "not timed" if got.get("ratio") is None else f"{got['ratio']:.2f}"


def bench_note(entry: dict | None, sweep: bool = False) -> str:
  """The line under a table naming its step times' benchmark."""
  if not entry:
    return ""
  part = (" (`--placements pre`: a norm other than LN timed at pre-LN only)"
          if sweep and entry.get("placements") == "pre" else "")
  return (f"\nStep time / LN's: medians of {entry['repeats']} interleaved samples, idle, in one "
          f"process: `{entry['command']}` on {entry['host_cpu']} ({entry['cores']} cores), "
          f"commit {entry['commit']}, jax {entry['jax']}, {entry['date']}{part}.\n")


def task_table(task: Task, vs: list[Variant], records: dict, n: int,
               times: dict | None = None) -> str:
  none = Variant(task.name, norms.NONE)
  base = _seeds(records, none, n)
  md = (f"| norm | learning rate | final {task.metric_label} | best {task.metric_label} | "
        f"updates to none's final {task.speed} | diverged | step time / LN's |\n"
        "|---|---|---|---|---|---|---|\n")
  for v in vs:
    rs = _seeds(records, v, n)
    if rs is None:
      got = sum((v, i) in records for i in range(n))
      md += (f"| {v.label()} | to come ({got} of {n} seeds recorded) | | | | | "
             f"{_step_cell(times, v)} |\n")
      continue
    lr = rs[0]["config"]["learning_rate"]
    lr_note = (" (LN's)" if task.rate is not None
               and not _mnist_searched(v.norm, rs[0]["config"]["batch_size"]) else "")
    to = (R.per_seed(R.reached(updates_to(x, task.speed, final(b, task.speed)))
                     for x, b in zip(rs, base)) if base else "n/a (none to come)")
    md += (f"| {v.label()} | {lr:g}{lr_note} | "
           f"{_cell([final(x, task.metric) for x in rs], task.fmt)} | "
           f"{_cell([best(x, task.metric) for x in rs], task.fmt)} | {to} | "
           f"{sum(x['diverged'] for x in rs)} of {n} | {_step_cell(times, v)} |\n")
  return md + bench_note(times)


def _mnist_searched(norm: str, batch: int) -> bool:
  from configs import pi_mnist  # pylint: disable=g-import-not-at-top
  return (norm, batch) in pi_mnist.LEARNING_RATES


def sweep_table(task: Task, vs: list[Variant], records: dict, n: int,
                times: dict | None = None) -> str:
  """The Transformer: per variant, its final bpc at each rate, its best rate's,
  its LR sensitivity, and at REF_RATE the updates to none's final."""
  md = ("| variant | " + " | ".join(f"lr {lr:g}" for lr in RATES)
        + " | best over rates | LR sensitivity | updates to none's final (lr "
        f"{REF_RATE:g}) | diverged | step time / LN's |\n|---|" + "---|" * (len(RATES) + 5) + "\n")
  base = _seeds(records, Variant(task.name, norms.NONE, "none", False, REF_RATE), n)
  edge = {RATES[0]: [], RATES[-1]: []}  # variants best at the sweep's edge in every seed
  for key in dict.fromkeys((v.norm, v.position, v.qk) for v in vs):
    sweep = [Variant(task.name, key[0], key[1], key[2], lr) for lr in RATES]
    got = [_seeds(records, v, n) for v in sweep]
    cells = [_cell([final(x, "valid_bpc") for x in rs], ".3f") if rs else "to come" for rs in got]
    if all(got):
      fin = np.array([[final(x, "valid_bpc") for x in rs] for rs in got])  # rates x seeds
      bst = _cell([min(fin[:, s]) for s in range(n)], ".3f")
      sens = _cell([lr_sensitivity(fin[:, s]) for s in range(n)], ".3f")
      div = f"{int(np.isinf(fin).sum())} of {fin.size}"
      at = {RATES[int(np.argmin(fin[:, s]))] for s in range(n)}
      if len(at) == 1 and (lr := at.pop()) in edge and not np.isinf(fin).all():
        edge[lr].append(sweep[0].label())
    else:
      bst = sens = div = "to come"
    ref = got[RATES.index(REF_RATE)]
    to = (R.per_seed(R.reached(updates_to(x, "valid_bpc", final(b, "valid_bpc")))
                     for x, b in zip(ref, base)) if ref and base else "to come")
    md += (f"| {sweep[0].label()} | " + " | ".join(cells)
           + f" | {bst} | {sens} | {to} | {div} | {_step_cell(times, sweep[0])} |\n")
  md += bench_note(times, sweep=True)
  md += _group_note(vs, records, n)
  for lr, names in edge.items():
    if names:
      side = "largest" if lr == RATES[-1] else "smallest"
      md += (f"\nBest at the sweep's {side} rate ({lr:g}) in every seed: {'; '.join(names)}. "
             f"Their best over the rates and LR sensitivity hold for these {len(RATES)} rates "
             f"only: a rate past {lr:g} might do better and would change both.\n")
  return md


def _group_note(vs: list[Variant], records: dict, n: int) -> str:
  """The Transformer's group norm at the registry's automatic groups (Wu &
  He's G = 32, or the largest divisor under it): how many features a group
  holds in the blocks and, under qk-norm, in each head's queries and keys,
  where a group of 1 or 2 features carries little or nothing of its input."""
  rs = next((r for v in vs if v.norm == "group" for r in [_seeds(records, v, n)] if r), None)
  if not rs:
    return ""
  c = rs[0]["config"]
  d, head = c["d_model"], c["d_model"] // c["num_heads"]
  size = lambda f: f // norms.auto_groups(f, 0)
  what = {1: "a group of one feature standardizes to 0 (the output is the bias alone)",
          2: "a group of two features standardizes to about -1 and +1 (the sign of their "
             "difference alone)"}
  note = (f"\nGroup norm here has the registry's automatic groups (`groups=0`: Wu & He's "
          f"G = 32, or the largest divisor of the features under it): groups of {size(d)} of "
          f"the blocks' {d} features")
  if any(v.norm == "group" and v.qk for v in vs):
    note += f", and under qk-norm groups of {size(head)} of each head's {head} query and key features"
  hit = sorted({k for k in (size(d), size(head)) if k in what})
  note += ("; " + "; ".join(what[k] for k in hit) + ". Its rows measure group norm at these "
           "groups, not group norm with wider ones" if hit else "") + ".\n"
  return note


# -- Figures ----------------------------------------------------------------------

def _score(task: Task, records: dict, n: int, norm: str, position: str = "") -> float:
  """The heat map's cell: the mean over seeds of the final metric (for the
  Transformer, each seed's best over the rates, qk_norm off); nan if to come."""
  if not task.layers:
    rs = _seeds(records, Variant(task.name, norm), n)
    return statistics.mean(final(x, task.metric) for x in rs) if rs else math.nan
  got = [_seeds(records, Variant(task.name, norm, position, False, lr), n) for lr in RATES]
  if not all(got):
    return math.nan
  return statistics.mean(min(final(rs[s], "valid_bpc") for rs in got) for s in range(n))


def heatmap(tasks: list[Task], records: dict, n: int, chosen, path: Path) -> None:
  """Rows: the tasks (the Transformer's, a row a placement); columns: every
  norm of the grid. Colour: the norm's rank within its row, best green to
  worst red (ranks, not values: one norm far off would wash out the rest);
  the mean value written in; a dash where the model takes no such norm."""
  from lnorm import transformer as T  # pylint: disable=g-import-not-at-top
  cols = [nm for nm in norms.names()
          if any(nm in t.accepted() for t in tasks) and (chosen is None or nm in chosen)]
  rows = []
  for t in tasks:
    if not t.layers:
      rows.append((f"{t.name} ({t.metric_label})", t, ""))
    else:
      rows += [(f"{t.name}, {p} (valid bpc)", t, p) for p in T.NORM_POSITIONS if p != "none"]
  plt = figures.pyplot()
  fig, ax = plt.subplots(figsize=(max(1.0 * len(cols) + 3.5, 8), 0.45 * len(rows) + 1.8))
  z = np.full((len(rows), len(cols)), np.nan)
  text = [[""] * len(cols) for _ in rows]
  for i, (_, t, pos) in enumerate(rows):
    for j, nm in enumerate(cols):
      if nm not in t.accepted():
        text[i][j] = "–"
        continue
      # The Transformer's baseline: the unnormalized model (placement none) in every row.
      v = _score(t, records, n, nm, "none" if pos and nm == norms.NONE else pos)
      z[i, j] = v
      text[i][j] = ("to come" if math.isnan(v) else "diverged" if math.isinf(v)
                    else format(v, ".3f" if t.layers else ".4f" if t.fmt == ".4f" else t.fmt))
    known = {j: z[i, j] for j in range(len(cols)) if not math.isnan(z[i, j])}
    for j, v in known.items():  # ties share a rank; a diverged norm (inf) ranks last
      z[i, j] = sum(u < v for u in known.values()) / max(len(known) - 1, 1)
  ax.imshow(np.ma.masked_invalid(z), cmap="RdYlGn_r", vmin=0, vmax=1, aspect="auto", alpha=0.7)
  for i in range(len(rows)):
    for j in range(len(cols)):
      ax.text(j, i, text[i][j], ha="center", va="center", fontsize=7)
  ax.set_xticks(range(len(cols)), [norms.label(c) for c in cols], rotation=30, ha="right")
  ax.set_yticks(range(len(rows)), [r[0] for r in rows])
  fig.suptitle("Final metric by task and norm, mean over seeds; the Transformer's, each "
               "seed's best over the rates\n(lower is better; colour: rank within the row, "
               "best green to worst red; –: the model takes no such norm)", fontsize=9)
  fig.tight_layout()
  figures.save(fig, path, dpi=figures.DPI)


def _capped(bpc: float) -> bool:
  return not math.isfinite(bpc) or bpc >= INIT_BPC


def _top_edge(bpcs: Sequence[float]) -> float | None:
  """A panel's top where some of its seeds diverged or ended at l_0 or above:
  just over its other values, so that one diverged run (drawn at l_0 = 8
  bpc) does not squeeze the curves that trained into a sliver. None where
  nothing is capped (or nothing else is drawn)."""
  kept = [v for v in bpcs if not _capped(v)]
  if not kept or len(kept) == len(bpcs):
    return None
  lo, hi = min(kept), max(kept)
  return min(hi + 0.12 * ((hi - lo) or 1.0), INIT_BPC)


def lr_curves(tasks: list[Task], records: dict, n: int, path: Path) -> bool:
  """Final validation bpc against the learning rate, a panel per depth and
  placement (and pre with qk-norm), a line per norm: the mean over seeds of
  min(bpc, l_0) with a band over the seeds; a cross where a seed diverged,
  at the panel's top (``_top_edge``).
  No norm, the baseline, is drawn in every panel of its depth; a norm keeps
  its style in every panel, so one legend below serves them all."""
  def points(v_of):
    got = [_seeds(records, v_of(lr), n) for lr in RATES]
    return [(lr, [final(x, "valid_bpc") for x in rs]) for lr, rs in zip(RATES, got) if rs]

  panels = []
  for t in (t for t in tasks if t.layers):
    vs = variants(t)
    order = list(dict.fromkeys(v.norm for v in vs if v.position != "none"))
    base = points(lambda lr: Variant(t.name, norms.NONE, "none", False, lr))
    for key in dict.fromkeys((v.position, v.qk) for v in vs if v.position != "none"):
      lines = {}
      for nm in dict.fromkeys(v.norm for v in vs if (v.position, v.qk) == key):
        pts = points(lambda lr: Variant(t.name, nm, key[0], key[1], lr))
        if pts:
          lines[norms.label(nm)] = (pts, figures.style(order.index(nm), len(order)))
      if lines and base:
        lines["no norm (baseline)"] = (base, dict(color="black", linestyle="--",
                                                  marker="None"))
      if lines:
        panels.append((f"{t.layers} layers, {key[0]}" + (", qk-norm" if key[1] else ""), lines))
  if not panels:
    return False
  fig, axes = figures.grid(len(panels), "Byte Transformer: final validation bpc against the "
                           "learning rate (no warm-up)", cols=3)
  for ax, (title, lines) in zip(axes, panels):
    top = _top_edge([v for pts, _ in lines.values() for _, s in pts for v in s])
    for label, (pts, st) in lines.items():
      x = np.array([lr for lr, _ in pts])
      y = np.array([[INIT_BPC if _capped(v) else v for v in s] for _, s in pts])
      line, = ax.plot(x, y.mean(1), label=label, **{**st, "markevery": None})
      if y.shape[1] > 1:
        ax.fill_between(x, y.min(1), y.max(1), color=line.get_color(), alpha=0.15, linewidth=0)
      dx = [lr for lr, s in pts if any(_capped(v) for v in s)]
      if dx:
        ax.plot(dx, [top or INIT_BPC] * len(dx), "x", color=line.get_color(), ms=8,
                clip_on=False)
    if top is not None:
      ax.set_ylim(top=top)
      ax.plot([], [], "x", color="black", label=f"a seed diverged or at {INIT_BPC:g}+ bpc "
              "(drawn at the top)")
    ax.set(xscale="log", title=title, xlabel="learning rate (Adam)",
           ylabel="final valid bpc, min(bpc, 8)")
    from matplotlib.ticker import NullFormatter  # pylint: disable=g-import-not-at-top
    ax.set_xticks(RATES, [f"{r:g}" for r in RATES])  # the sweep's rates, no crowded minors
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)
  figures.finish(fig, axes, path, one_legend=True)
  return True


# -- Verdicts -------------------------------------------------------------------

def claims(tasks: list[Task], records: dict, n: int, chosen: Sequence[str] | None = None) -> str:
  """Each published claim, seed by seed, through scripts/paper/verdicts.py;
  with the paper's own result cited beside ours (theirs, not a copy). Only
  the norms of the grid (``chosen``: --norms) are compared."""
  by = {t.name: t for t in tasks}
  rows: list[tuple[str, ...]] = []

  def side(task: Task, norm: str, position: str = "", qk: bool = False, what: str = "final"):
    """Per seed: the final metric (Transformer: best over the rates, or the LR
    sensitivity, or the final W^2 gradient spread); None if to come."""
    if not task.layers:
      rs = _seeds(records, Variant(task.name, norm), n)
      return [final(x, task.metric) for x in rs] if rs else None
    if what == "grad":
      rs = _seeds(records, Variant(task.name, norm, position, qk, REF_RATE), n)
      return [_grad_spread(x) for x in rs] if rs else None
    got = [_seeds(records, Variant(task.name, norm, position, qk, lr), n) for lr in RATES]
    if not all(got):
      return None
    fin = [[final(rs[s], "valid_bpc") for rs in got] for s in range(n)]
    return [lr_sensitivity(f) if what == "sens" else min(f) for f in fin]

  def row(claim, task, measure, a, b, la, lb, verdict_of, theirs, fmt=".4f"):
    if a is None or b is None:
      rows.append((claim, task, measure, "to come", "to come", theirs))
      return
    per = " / ".join(f"{_fmt(x, fmt)} vs {_fmt(y, fmt)}" for x, y in zip(a, b))
    rows.append((claim, task, f"{measure}, {la} vs {lb}", per, str(verdict_of(a, b)), theirs))

  lower = lambda a, b: verdicts.compare(a, b, lower=True)
  as_good = lambda a, b: verdicts.passes(verdicts.no_worse(a, b, lower=True))
  match = lambda a, b: verdicts.passes(verdicts.within(a, b))
  tf = [t for t in tasks if t.layers]
  grid_norms = lambda t: [x for x in t.accepted() if chosen is None or x in chosen]
  has = lambda t, *ns: all(nm in grid_norms(t) for nm in ns)
  L, DYT, DERF, RMS, GN, BN = norms.LAYER, "dyt", "derf", norms.RMS, "group", norms.BATCH
  for t in tf:
    if has(t, DYT, L):
      row("DyT matches LayerNorm in Transformers", t.name, "best final bpc over the rates, pre",
          side(t, DYT, "pre"), side(t, L, "pre"), "DyT", "LN", match,
          "Zhu et al., CVPR 2025 (arXiv 2503.10622), abstract: DyT matches or exceeds LN "
          "(RMSNorm for LLaMA) on ViT, ConvNeXt, MAE, DINO, DiT, LLaMA, wav2vec 2.0 and DNA "
          "models (their results tables)", ".3f")
  if any(has(t, DYT, L) for t in tf):
    rows.append(("DyT better than LN on little data, worse on more (arXiv 2604.23434)",
                 "transformer", "", "", "cannot answer at this scale: each task here trains on "
                 "one amount of data; the claim needs a sweep of data sizes", "Verma 2026 (arXiv "
                 "2604.23434), abstract: at 64M parameters DyT's validation loss is 27.3% below "
                 "LN's on 1M tokens, 18.8% above on 118M (GPT-2 family)"))
  for t in tasks:
    if not has(t, DERF, DYT, L):
      continue
    pos = "pre" if t.layers else ""
    for other, lab in ((DYT, "DyT"), (L, "LN")):
      row("Derf beats DyT and LN", t.name, ("best final bpc over the rates, pre" if t.layers
                                           else f"final {t.metric_label}"),
          side(t, DERF, pos), side(t, other, pos), "Derf", lab, lower,
          "Chen et al. 2025 (arXiv 2512.10938), abstract: Derf outperforms LN, RMSNorm and "
          "DyT across vision, speech and DNA; their Figure 1c: ViT top-1 82.8% vs LN 82.3%, "
          "DyT 82.5%",
          ".3f" if t.layers else t.fmt)
  for name in ("convnet_b4", "pi_mnist_b4", "convnet_b64"):
    t = by.get(name)
    if t is not None and has(t, GN, BN):
      row("GroupNorm beats BatchNorm at batches of 2 to 4" + (
          " (context: a large batch)" if name.endswith("64") else ""), name,
          f"final {t.metric_label}", side(t, GN), side(t, BN), "GN", "BN", lower,
          "Wu & He 2018, Figure 1 (ResNet-50's ImageNet error against batch size) and "
          "abstract: GN's error 10.6% below BN's at 2 images a GPU, comparable at typical "
          "batches (the figure's number not checked against the text)")
  for t in tf:
    if t.layers >= 12 and has(t, L):
      for what, m in (("best", "best final bpc over the rates"),
                      ("sens", "LR sensitivity over the rates (near 0 for a stack that "
                               "trains at no rate: read it with the row above)")):
        row("DeepNorm trains deep post-LN stacks that post-LN cannot, without warm-up", t.name,
            m + ", LN", side(t, L, "deepnorm", what=what), side(t, L, "post", what=what),
            "DeepNorm", "post-LN", lower,
            "Wang et al. 2022 (DeepNet, arXiv 2203.00555), abstract: DeepNorm trains "
            "Transformers to 1,000 layers, Post-LN's performance with Pre-LN's stability. Their "
            "Table 1 (post-LN by depth) and whether they warm up: not checked against the "
            "paper", ".3f")
  for t in tf:
    if t.layers not in QK_DEPTHS:
      rows.append(("qk-norm widens the range of learning rates that train", t.name, "", "",
                   f"not run at {t.layers} layers (cut to fit the budget: qk_norm on runs at "
                   f"{', '.join(map(str, QK_DEPTHS))} layers)",
                   "Wortsman et al. 2023 (arXiv 2309.14322), Figure 1"))
      continue
    for nm in (x for x in grid_norms(t) if not norms.get(x).identity):
      row("qk-norm widens the range of learning rates that train" + (
          "" if nm == L else f" (extension: {norms.label(nm)})"), t.name,
          f"LR sensitivity, pre-{norms.label(nm)}", side(t, nm, "pre", True, "sens"),
          side(t, nm, "pre", False, "sens"), "qk-norm", "without", lower,
          "Wortsman et al. 2023 (arXiv 2309.14322), Figure 1 (final loss against the "
          "learning rate across model sizes, with and without qk-layernorm, which their text "
          "says mitigates the high-rate instability) and their LR sensitivity (section 2.2)",
          ".3f")
  for t in tf:
    if has(t, L):
      row("Peri-LN keeps gradients steadier than pre-LN", t.name,
          f"W^2 gradient norm after training, largest block / smallest (lr {REF_RATE:g})",
          side(t, L, "peri", what="grad"), side(t, L, "pre", what="grad"), "peri", "pre", lower,
          "Kim et al., ICML 2025 (Peri-LN, arXiv 2502.02732), abstract: \"more balanced "
          "variance growth, steadier gradient flow\" up to 3.2B parameters (their figures' "
          "numbers not checked)", ".2f")
      row("Peri-LN trains steadier than pre-LN over learning rates", t.name,
          "LR sensitivity", side(t, L, "peri", what="sens"), side(t, L, "pre", what="sens"),
          "peri", "pre", lower, "Kim et al., ICML 2025, abstract: \"convergence stability\" "
          "(any learning-rate sweep of theirs: not checked against the paper)", ".3f")
  if any(has(t, L) for t in tf):
    rows.append(("Peri-LN keeps activations steadier than pre-LN", "transformer", "", "",
                 "cannot answer here: the runs record gradient norms by block, not the hidden "
                 "states' size", "Kim et al., ICML 2025, abstract: \"more balanced variance "
                 "growth\""))
  for t in tasks:
    if has(t, RMS, L):
      pos = "pre" if t.layers else ""
      row("RMSNorm is as good as LN (no worse beyond the spread)", t.name,
          "best final bpc over the rates, pre" if t.layers else f"final {t.metric_label}",
          side(t, RMS, pos), side(t, L, pos), "RMS", "LN", as_good,
          "Zhang & Sennrich 2019, abstract: \"comparable performance against LayerNorm\", "
          "running time 7%-64% less (ours: the tables' step time / LN's)",
          ".3f" if t.layers else t.fmt)
  hw = by.get("handwriting")
  if hw is not None and has(hw, L, norms.NONE):
    a, b = _seeds(records, Variant(hw.name, L), n), _seeds(records, Variant(hw.name, norms.NONE), n)
    if a and b:
      to = [updates_to(x, hw.speed, final(y, hw.speed)) for x, y in zip(a, b)]
      last = [y["metrics"][-1]["step"] if not y["diverged"] else math.inf for y in b]
      row("LN trains recurrent nets faster than none", hw.name,
          "updates to none's final valid NLL", to, last, "LN", "none's last", lower,
          "Ba et al. 2016, Figure 5 (handwriting: LN reaches the baseline's NLL much sooner)",
          ".0f")
    else:
      row("LN trains recurrent nets faster than none", hw.name, "", None, None, "", "", lower,
          "Ba et al. 2016, Figure 5")
  return ("\n## Verdicts on the published claims, seed by seed\n\nValues in seed order (seed s "
          "against seed s: the same initialisation and batches). " + verdicts.RULE
          + " \"Theirs\" cites the paper's own figure or table, to be read beside ours: theirs, "
          "not a copy, on other data and sizes. A diverged run counts as worse than any value.\n\n"
          "| claim | task | measure | per seed | verdict | theirs |\n|---|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))


def _fmt(x: float, fmt: str) -> str:
  return "diverged" if math.isinf(x) else "n/a" if math.isnan(x) else format(x, fmt)


def _grad_spread(r: dict) -> float:
  """max / min over the blocks of W^2's gradient norm after training (inf if
  the run diverged; nan without a record)."""
  if r["diverged"]:
    return math.inf
  w = ((r["grad_norms"] or {}).get("final") or {}).get("w2")
  return max(w) / min(w) if w and min(w) > 0 else math.nan


# -- The target --------------------------------------------------------------------

def command(args) -> str:
  """runs.command with the part of the grid chosen (--tasks, --norms)."""
  return R.command(args) + "".join(f" --{k} {getattr(args, k)}" for k in ("tasks", "norms")
                                   if getattr(args, k, None))


def norms_study(args) -> None:
  """``reproduce.py norms``: with ``--plan`` the estimate alone; else the runs
  of this sitting, then results.md and the figures from every whole record."""
  if getattr(args, "plan", False):
    print(plan(args) + "\n" + PLAN_NOTE)
    return
  tasks, chosen = choose(args)
  records, left = run_grid(args)
  out = R.out_dir(args)
  out.mkdir(parents=True, exist_ok=True)
  n = args.seeds
  times = step_times(args)
  md = (R.header(args, list(records.values()), "Every norm on every task (issue 62)")
        .replace(f"Command: `{R.command(args)}`", f"Command: `{command(args)}`")
        if records else f"# Every norm on every task (issue 62)\n\n"
        + (R.SMOKE_NOTE if args.preset == "smoke" else "")
        + f"Command: `{command(args)}`\n\n")
  md += (f"Tasks: {', '.join(t.name for t in tasks)}. Norms: every norm of the registry "
         "(lnorm/norms.py) that the task's model accepts"
         + (f", of `--norms {args.norms}`" if chosen else "") + ".\n\n")
  md += "## Still to come\n\n" + to_come(args, left)
  heatmap(tasks, records, n, chosen, out / "heatmap.png")
  md += "![tasks x norms](heatmap.png)\n\n"
  if lr_curves(tasks, records, n, out / "lr_curves.png"):
    md += "![loss against learning rate](lr_curves.png)\n\n"
  for t in tasks:
    vs = variants(t, chosen)
    md += f"## {t.title} (`{t.name}`)\n\n"
    md += (sweep_table if t.layers else task_table)(t, vs, records, n, times.get(t.name))
    md += "\n"
  missing = [t.name for t in tasks if t.name not in times]
  bench = BENCH.format(preset=args.preset)
  md += ("Step time / LN's: the median time an update over layer norm's in the same task (the "
         "Transformer's: at the same placement and qk-norm; the unnormalized model's: over "
         "pre-LN's), from an idle benchmark in one process, never the runs' own timings"
         + (f": {bench}" if len(missing) == len(tasks) else
            ", named under each table" + (f"; {', '.join(missing)}: {bench}" if missing else ""))
         + ". Diverged: seeds whose loss turned NaN or Inf (their "
         "final counts as worse than any value). Updates to none's final: the first "
         "evaluation at or below the same seed's no-norm run's final value (the training NLL "
         "for the classifiers), each seed in turn.\n")
  md += claims(tasks, records, n, chosen)
  md += "\n## The plan\n\n" + plan(args) + "\n" + PLAN_NOTE + "\n"
  (out / "results.md").write_text(md)
  print(md)
