"""Beyond the paper (issue 36): where the norm goes in a byte Transformer LM,
with and without warm-up, and at what precision.

The grid is built around three claims, not the full product (``grid``):

  deep (the preset's 12 layers), Adam at the preset's rate ("high"):
    post-LN, pre-LN, pre-RMSNorm, no norm, each with and without warm-up  8 runs
    no norm at Xavier's init, with warm-up                                1 run
  deep, a quarter of the rate ("low"), no warm-up: post-LN, pre-LN        2 runs
  shallow (2 layers), warm-up: the four norms and no norm at Xavier's     5 runs
  deep pre-LN with warm-up in bfloat16 (against its float32 run)          1 run

17 runs a seed, 3 seeds planned (issue 63; ``PLANNED_SEEDS``). Sizing (the cpu
preset, 2,000 updates a run, measured on the 2-core CPU with a niced
handwriting job on it; configs/transformer.py): a 12-layer run 0.30-0.37 s an
update, ~12-14 min with its 20 evaluations and compiling; a 2-layer one ~3
min. 12 deep and 5 shallow runs: ~2.7-3.1 h a seed, ~8-9 h for ``--seeds 3``
(nearly twice that if the machine is as busy as at 0.65 s an update). A pilot
of 300 updates showed the effect the grid is for: post-LN without warm-up at
1e-3 stalled at 4.54 validation bpc (its lower blocks' gradients near 0),
pre-LN with warm-up 3.55.

No norm runs twice: from GPT-2's init (W^O and W^2 scaled by 1/sqrt(2L):
``none``) and from Xavier's alone (``none_xavier``, the normalized models'
init; a 12-layer stack at it starts at a loss of ~860 nats and may diverge,
which is a result). Claim 3, fewer updates with a norm than without, is
judged three ways: against no norm at Xavier's init (the norm alone), no norm
GPT-2-scaled against Xavier's (the init alone), and against no norm
GPT-2-scaled (both at once, as first run).

A run whose loss turns NaN is a result: the run stops with exit status 3
(the loop's NonFiniteLossError), its workdir holds diverged.json, and the
tables say "diverged in steps a-b"; every other failure stops the target as
scripts/paper/runs.run_all does. Runs are counted in updates (no epochs):
runs.finished takes a record as finished at ``num_steps`` or at its
divergence. At ~9 h the grid is split across sittings with reproduce.py's
``--only`` and ``--adopt_results``; results.md lists the runs still to come
(the planned seeds past ``--seeds``, and under scripts/redraw.py every run
without a whole record), and its tables use the seeds recorded."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from experiments.runner import figures
from scripts.paper import runs as R
from scripts.paper import verdicts

CONFIG = "configs/transformer.py"
GRAD_NORMS, DIVERGED = "grad_norms.json", "diverged.json"  # experiments/transformer.py's
NONFINITE_EXIT = 3  # experiments.runner.errors.NonFiniteLossError.exit_code

NORMS = {  # key -> the config fields that pick it
    "post_layer": {"norm_position": "post", "norm": "layer"},
    "pre_layer": {"norm_position": "pre", "norm": "layer"},
    "pre_rms": {"norm_position": "pre", "norm": "rms"},
    # No norm twice: from GPT-2's init (W^O and W^2 at Xavier / sqrt(2 L)), and
    # from Xavier's, the normalized models' (claim 3: the norm apart from the init).
    "none": {"norm_position": "none", "norm": "none", "scaled_residual_init": True},
    "none_xavier": {"norm_position": "none", "norm": "none", "scaled_residual_init": False},
}
LABELS = {"post_layer": "post-LN", "pre_layer": "pre-LN", "pre_rms": "pre-RMSNorm",
          "none": "no norm (GPT-2-scaled)", "none_xavier": "no norm (Xavier)"}
WARMUP_PAIRS = ("post_layer", "pre_layer", "pre_rms", "none")  # deep, with and without warm-up
# The seeds the study is planned at, by preset (issue 63): results.md lists
# those past ``--seeds`` (or, redrawn, without a whole record) as to come.
PLANNED_SEEDS = {"cpu": 3}
# Minutes a run, 12 layers and 2 (the docstring's sizing), for the estimate
# beside the runs still to come.
MINUTES = {"cpu": ((12, 14), (3, 3))}
SHALLOW_LAYERS = 2   # the shallow model's blocks
LOW_RATE = 0.25      # the smaller learning rate, times the preset's
# The rules for Figure 3's claim: W^2's gradient norms "grow toward the
# output" when the last block's exceeds the first's and the log norms' slope
# over the blocks is positive (the size of the growth is reported beside it,
# against GROWTH), and are "flat" when the last is within a factor GROWTH of
# the first either way.
GROWTH = 2.0
# Validation bpc above which a run's curve is named off the scale of its panel
# (a byte holds 8 bits: a model that has learned anything is below).
OFF_SCALE = 10.0


@dataclasses.dataclass(frozen=True)
class Setting:
  norm: str                 # a key of NORMS
  deep: bool = True         # the preset's num_layers; else SHALLOW_LAYERS
  warmup: bool = True       # the preset's warmup_steps; else 0
  low_rate: bool = False    # LOW_RATE times the preset's rate
  dtype: str = "float32"

  def name(self, c) -> str:
    layers = c.num_layers if self.deep else SHALLOW_LAYERS
    return (f"L{layers}_{self.norm}_{'warm' if self.warmup else 'nowarm'}"
            + ("_lrlow" if self.low_rate else "") + ("_bf16" if self.dtype == "bfloat16" else ""))

  def overrides(self, c) -> dict[str, Any]:
    o = dict(NORMS[self.norm])
    if not self.deep:
      o["num_layers"] = SHALLOW_LAYERS
    if not self.warmup:
      o["warmup_steps"] = 0
    if self.low_rate:
      o["learning_rate"] = c.learning_rate * LOW_RATE
    if self.dtype != "float32":
      o["dtype"] = self.dtype
    return o

  def label(self) -> str:
    return LABELS[self.norm] + (" (bfloat16)" if self.dtype == "bfloat16" else "")


def grid() -> list[Setting]:
  out = [Setting(n, warmup=w) for n in WARMUP_PAIRS for w in (True, False)]
  out += [Setting("none_xavier")]  # with warm-up, as no norm's runs in claim 3
  out += [Setting(n, warmup=False, low_rate=True) for n in ("post_layer", "pre_layer")]
  out += [Setting(n, deep=False) for n in NORMS]
  out += [Setting("pre_layer", dtype="bfloat16")]
  return out


# -- Running the grid -----------------------------------------------------------

def planned_seeds(args) -> int:
  """The seeds a run of the grid is planned at: ``--seeds``, or the preset's
  ``PLANNED_SEEDS`` where that is more."""
  return max(args.seeds, PLANNED_SEEDS.get(args.preset, 1))


def run_grid(args, runs: dict) -> tuple[dict, list[str]]:
  """runs.run_all over ``runs`` ({setting: (name, overrides)}), a divergence
  (exit status 3, diverged.json) counting as a result: (records, the runs
  still to come). Each seed's record also holds ``grad_norms`` and
  ``diverged`` (their JSON, None where the run wrote none).

  Still to come: every run of the planned seeds (:func:`planned_seeds`)
  without a record here. Under scripts/redraw.py (``args.no_training``) the
  runs without a whole record are to come too, not refused: the records hold
  the settings with at least one whole seed, each with the seeds it has (in
  seed order); a setting with none is absent. A record there that is not
  whole (damaged, or of another config) is refused in one line, as run_all
  refuses it."""
  if getattr(args, "no_training", None):
    whole = {}
    for key, rs in R.expand(runs, R.seed_names(args, CONFIG)).items():
      for i, (name, o) in enumerate(rs):
        wd = R.workdir(args, name)
        state, why = R.record_state(wd, CONFIG, args.preset, o, (DIVERGED,))
        if state:
          whole[key, i] = (name, o)
        elif wd.exists():  # a record there, but damaged or of another config: not "to come"
          sys.exit(f"error: {args.no_training / name} is not a whole record of {args.target} "
                   f"({why}); redraw.py draws from whole records only and trains nothing")
    one = argparse.Namespace(**{**vars(args), "seeds": 1, "only": None})
    got = R.run_all(one, CONFIG, whole, optional=(GRAD_NORMS,),
                    stops={NONFINITE_EXIT: DIVERGED}) if whole else {}
    records = {}
    for (key, _), r in got.items():  # run_all keeps the order of ``whole``: seeds in order
      records.setdefault(key, {**r, "seeds": []})["seeds"].append(r["seeds"][0])
  else:
    records = R.run_all(args, CONFIG, runs, optional=(GRAD_NORMS,),
                        stops={NONFINITE_EXIT: DIVERGED})
  for r in records.values():
    for x in R.seeds(r):
      for key, f in (("grad_norms", GRAD_NORMS), ("diverged", DIVERGED)):
        path = R.out_dir(args) / x["name"] / f
        x[key] = json.loads(path.read_text()) if path.exists() else None
    r.update({k: r["seeds"][0][k] for k in ("grad_norms", "diverged")})
  have = {x["name"] for r in records.values() for x in R.seeds(r)}
  plan = argparse.Namespace(**{**vars(args), "seeds": planned_seeds(args)})
  left = [name for rs in R.expand(runs, R.seed_names(plan, CONFIG)).values()
          for name, _ in rs if name not in have]
  return {s: records[s] for s in runs if s in records}, left


# -- Reading the records --------------------------------------------------------

def final_bpc(r: dict) -> float:
  """The run's last validation bpc; inf if it diverged (whatever it had before)."""
  if r["diverged"] or not r["metrics"]:
    return math.inf
  return r["metrics"][-1]["valid_bpc"]


def outcome(r: dict, key: str = "valid_bpc", fmt: str = ".3f") -> str:
  """The last value of ``key``, or where the run diverged."""
  d = r["diverged"]
  if d:
    a, b = d.get("first_step"), d.get("last_step")
    where = f"in steps {a}-{b}" if a is not None else (
        f"after step {r['metrics'][-1]['step']}" if r["metrics"] else "before its first evaluation")
    return f"diverged {where}"
  m = [x for x in r["metrics"] if key in x]
  return format(m[-1][key], fmt) if m else "n/a"


def step_seconds(m: list[dict]) -> float:
  """The median interval's training seconds per update (no evaluation,
  checkpoints or compiling)."""
  per = R.update_seconds(m)
  return float(np.median(per)) if per else math.nan


def spread(*runs: dict) -> float:
  """The largest range over seeds of the runs' final validation bpc (0 with one
  seed; the diverged seeds left out)."""
  out = 0.0
  for r in runs:
    v = [final_bpc(s) for s in R.seeds(r) if math.isfinite(final_bpc(s))]
    if len(v) > 1:
      out = max(out, max(v) - min(v))
  return out


def w2_ratio(r: dict, when: str = "init") -> float:
  g = (r["grad_norms"] or {}).get(when)
  return g["w2"][-1] / g["w2"][0] if g and g["w2"][0] > 0 else math.nan


def w2_slope(r: dict, when: str = "init") -> float:
  """The least-squares slope of ln(W^2's gradient norm) against the block index."""
  g = (r["grad_norms"] or {}).get(when)
  if not g or len(g["w2"]) < 2:
    return math.nan
  return float(np.polyfit(np.arange(len(g["w2"])), np.log(g["w2"]), 1)[0])


# The idle benchmark a step-time claim waits for: every variant in one process,
# interleaved (the runs' own step times were taken with runs sharing the cores).
BENCH = "python -m scripts.bench.transformer --preset {preset} --repeats 7"


def rising(r: dict, when: str = "init") -> str:
  g = (r["grad_norms"] or {}).get(when)
  if not g:
    return "n/a"
  w = g["w2"]
  return f"{sum(b > a for a, b in zip(w, w[1:]))} of {len(w) - 1}"


# -- The figures ----------------------------------------------------------------

def panels(records: dict[Setting, dict], c) -> dict[str, dict[str, list]]:
  lr, lo, L = c.learning_rate, c.learning_rate * LOW_RATE, c.num_layers
  out: dict[str, dict[str, list]] = {}
  for s, r in records.items():
    if s.dtype != "float32":
      title = f"{L} layers, pre-LN, float32 vs bfloat16"
    elif not s.deep:
      title = f"{SHALLOW_LAYERS} layers, warm-up {c.warmup_steps}, lr {lr:g}"
    elif s.low_rate:
      title = f"{L} layers, no warm-up, lr {lo:g}"
    else:
      title = f"{L} layers, {'warm-up ' + str(c.warmup_steps) if s.warmup else 'no warm-up'}, lr {lr:g}"
    label = s.label() + (" (diverged)" if any(x["diverged"] for x in R.seeds(r)) else "")
    out.setdefault(title, {})[label] = [x["metrics"] for x in R.seeds(r) if x["metrics"]]
  fp32 = next((r for s, r in records.items() if s == Setting("pre_layer")), None)
  bf = f"{L} layers, pre-LN, float32 vs bfloat16"
  if fp32 is not None and bf in out:
    out[bf] = {"pre-LN (float32)": [x["metrics"] for x in R.seeds(fp32)], **out[bf]}
  return out


def plot_curves(records: dict[Setting, dict], c, path: Path) -> None:
  groups = panels(records, c)
  fig, axes = figures.grid(len(groups), "Byte Transformer LM: validation bpc")
  for ax, (title, runs) in zip(axes, groups.items()):
    # A run that ends far above a byte's 8 bits (no norm at Xavier's init, 12
    # layers) would flatten the rest: drawn, but named off the scale.
    final = {k: statistics.mean(m[-1]["valid_bpc"] for m in v) for k, v in runs.items() if v}
    off = {k: f for k, f in final.items() if f > OFF_SCALE}
    figures.draw(ax, {(f"{k}, {off[k]:,.0f} bpc: off scale" if k in off else k): v
                      for k, v in runs.items() if v}, "valid_bpc", "step")
    shown = [l for l in ax.get_lines() if "off scale" not in l.get_label()]
    if shown:  # the first evaluations (~8 bpc at init) would flatten the rest,
      # but a run stuck high (post-LN without warm-up) must stay in view
      ys = [np.asarray(l.get_ydata(), float) for l in shown]
      last = max(float(y[np.isfinite(y)][-1]) for y in ys if np.isfinite(y).any())
      low = min(float(np.nanmin(y)) for y in ys if np.isfinite(y).any())
      ax.set_ylim(low - 0.1, max(min(4.0, max(float(np.nanmax(y)) for y in ys)), last + 0.15))
    ax.set(title=title, xlabel=figures.X_LABELS["step"], ylabel="validation bpc (bits / byte)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
  fig.tight_layout()
  figures.save(fig, path, dpi=figures.DPI)


def plot_grad_norms(records: dict[Setting, dict], c, path: Path) -> None:
  """Per block, input to output: W^2's gradient norm at step 0 (Xiong et al.'s
  Figure 3), the whole block's at step 0, and W^2's after training; the deep
  warm-up runs, mean over seeds with a band over them."""
  deep = {s.norm: r for s, r in records.items()
          if s.deep and s.warmup and not s.low_rate and s.dtype == "float32"}
  cells = [("init", "w2", "$W^2$ (mlp/proj) at initialisation"),
           ("init", "blocks", "whole block at initialisation"),
           ("final", "w2", "$W^2$ after training")]
  from matplotlib.ticker import MaxNLocator  # pylint: disable=g-import-not-at-top
  fig, axes = figures.grid(len(cells), f"Gradient norm per layer, {c.num_layers} layers")
  for ax, (when, what, title) in zip(axes, cells):
    for i, (norm, r) in enumerate(deep.items()):
      ys = [x["grad_norms"][when][what] for x in R.seeds(r)
            if x["grad_norms"] and when in x["grad_norms"]]
      if not ys:
        continue
      y = np.array(ys)
      xs = np.arange(y.shape[1])
      # Its init is not the others': say so where its curve is compared.
      scaled = (" ($W^O$, $W^2$ init / $\\sqrt{2L}$)"
                if r["config"].get("scaled_residual_init") else "")
      line, = ax.plot(xs, y.mean(0), **{**figures.style(i, len(deep)), "markevery": None},
                      label=LABELS[norm] + scaled)  # a marker on every block
      if len(ys) > 1:
        ax.fill_between(xs, y.min(0), y.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set(yscale="log", title=title, xlabel="block (input to output)", ylabel="gradient L2 norm")
    figures.plain_log_ticks(ax)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
  figures.finish(fig, axes, path)


# -- results.md -----------------------------------------------------------------

def per(values) -> str:
  return " / ".join(values)


def paired(a: dict, b: dict) -> list[tuple[dict, dict]]:
  """Seed s of run ``a`` with seed s of run ``b``, for the seeds both have
  recorded, in seed order."""
  by = {x["config"]["seed"]: x for x in R.seeds(b)}
  return [(x, by[x["config"]["seed"]]) for x in R.seeds(a) if x["config"]["seed"] in by]


def updates_to(x: dict, base: dict) -> tuple[float, float]:
  """(the update at which ``x`` first reaches ``base``'s final valid bpc --
  its first evaluation where ``base`` diverged --, ``base``'s last update:
  inf where it diverged)."""
  return (R.first(x["metrics"], "valid_bpc", final_bpc(base), "step"),
          base["metrics"][-1]["step"] if base["metrics"] and not base["diverged"] else math.inf)


def claims(records: dict[Setting, dict], n: int, preset: str = "cpu", c=None,
           left: int = 0) -> str:
  """Each claim, judged seed by seed (seed s against seed s: the same init
  key and batches) against the seeds' spread of the runs compared. A claim
  whose runs are not all recorded reads "to come" (``left``: how many runs
  are; ``c``: the preset's config, for the layer counts of unrecorded runs)."""
  get = lambda *a, **k: R.seeds(records[Setting(*a, **k)])
  rec = lambda *a, **k: records.get(Setting(*a, **k))
  deep_layers = (c.num_layers if c is not None else
                 next(r["config"]["num_layers"] for s, r in records.items() if s.deep))
  layers = lambda deep: deep_layers if deep else SHALLOW_LAYERS
  rows = []
  bench = BENCH.format(preset=preset)

  def to_come(claim, measure, *settings) -> bool:
    """A row saying which of ``settings`` have no record yet; False if all have."""
    missing = [s for s in settings if s not in records]
    if missing:
      rows.append((claim, measure, "to come", "no record yet: " + ", ".join(
          f"{s.label()} ({layers(s.deep)} layers)" for s in dict.fromkeys(missing)), "to come"))
    return bool(missing)

  def worse_row(claim, a_set, b_set, a_lab, b_lab, expect_worse: bool):
    measure = f"final valid bpc, {a_lab} vs {b_lab}"
    if to_come(claim, measure, a_set, b_set):
      return
    a_run, b_run = records[a_set], records[b_set]
    sp = spread(a_run, b_run)
    pairs = paired(a_run, b_run)
    a, b = [final_bpc(x) for x, _ in pairs], [final_bpc(y) for _, y in pairs]
    kept = verdicts.no_worse(a, b, lower=True, sp=sp)
    per_seed = per(f"{outcome(x)} vs {outcome(y)}" for x, y in pairs)
    # Needing warm-up: worse without it, the ranges apart; not needing it: no
    # worse without it beyond the spread in each seed (a stated test).
    v = verdicts.compare(a, b, lower=False) if expect_worse else verdicts.passes(kept)
    rows.append((claim, measure, per_seed,
                 f"worse beyond the spread ({sp:.3f}) in {sum(not k for k in kept)} of {len(a)}",
                 str(v)))

  def updates_row(claim, a_set, b_set, measure):
    """Claim 3's measure: ``a_set`` reaches ``b_set``'s final bpc before
    ``b_set``'s last update, seed by seed."""
    if to_come(claim, measure, a_set, b_set):
      return
    pairs = paired(records[a_set], records[b_set])
    to = [updates_to(x, y) for x, y in pairs]
    cells = [f"{R.reached(a)} vs {'diverged' if y['diverged'] else R.reached(b)}"
             for (a, b), (_, y) in zip(to, pairs)]
    rows.append((claim, measure, per(cells), f"sooner in {sum(a < b for a, b in to)} of {len(to)}",
                 str(verdicts.compare([a for a, _ in to], [b for _, b in to], lower=True))))

  worse_row("1. post-LN needs warm-up (at the larger rate)", Setting("post_layer", warmup=False),
            Setting("post_layer"), "no warm-up", "warm-up", True)
  worse_row("1. pre-LN does not need warm-up", Setting("pre_layer", warmup=False),
            Setting("pre_layer"), "no warm-up", "warm-up", False)
  for norm in ("post_layer", "pre_layer"):
    claim = f"1. ({LABELS[norm]}, no warm-up) the trouble is the rate's"
    measure = f"final valid bpc at lr x{LOW_RATE:g} vs the larger lr"
    lo_set, hi_set = Setting(norm, warmup=False, low_rate=True), Setting(norm, warmup=False)
    if to_come(claim, measure, lo_set, hi_set):
      continue
    pairs = paired(records[lo_set], records[hi_set])
    better = sum(final_bpc(a) < final_bpc(b) for a, b in pairs)
    rows.append((claim, measure, per(f"{outcome(a)} vs {outcome(b)}" for a, b in pairs),
                 f"smaller rate better in {better} of {len(pairs)}", "(context)"))
  grow_claims = ("1. at init post-LN's gradients grow toward the output",
                 "1. at init pre-LN's stay flat",
                 "1. post-LN's grow more than pre-LN's (Figure 3's contrast)")
  if not any([to_come(claim, "W^2 gradient norm at init, last block / first",
                      Setting("post_layer"), Setting("pre_layer")) for claim in grow_claims]):
    post, pre = get("post_layer"), get("pre_layer")
    ups, flats = [w2_ratio(x) for x in post], [w2_ratio(x) for x in pre]
    grows = [v > 1 and w2_slope(x) > 0 for v, x in zip(ups, post)]
    rows.append((grow_claims[0],
                 "W^2 gradient norm, last block / first (blocks rising; slope of log norm a block)",
                 per(f"{v:.2f} ({rising(x)}; {w2_slope(x):+.3f})" for v, x in zip(ups, post)),
                 f"rising in {sum(grows)} of {len(grows)}; by >= {GROWTH:g}x in "
                 f"{sum(v >= GROWTH for v in ups)} of {len(ups)}", str(verdicts.passes(grows))))
    flat = [1 / GROWTH < v < GROWTH for v in flats]
    rows.append((grow_claims[1], "W^2 gradient norm, last block / first "
                 "(blocks rising; slope)",
                 per(f"{v:.2f} ({rising(x)}; {w2_slope(x):+.3f})" for v, x in zip(flats, pre)),
                 f"within {GROWTH:g}x in {sum(flat)} of {len(flat)}; falling (< 1) in "
                 f"{sum(v < 1 for v in flats)}", str(verdicts.passes(flat))))
    both = [(w2_ratio(a), w2_ratio(b)) for a, b in paired(records[Setting("post_layer")],
                                                          records[Setting("pre_layer")])]
    more = [a > b for a, b in both]
    rows.append((grow_claims[2], "last / first, post-LN vs pre-LN",
                 per(f"{a:.2f} vs {b:.2f}" for a, b in both),
                 f"post-LN's higher in {sum(more)} of {len(more)}",
                 str(verdicts.compare([a for a, _ in both], [b for _, b in both], lower=False))))
  # 2. RMSNorm reaches LN's quality in less time: the quality from the final
  # bpc, the time only from an idle benchmark (the runs' own step times, shown
  # for reference, were taken with runs sharing the cores).
  for deep in (True, False):
    depth = f"{layers(deep)} layers"
    ln_set, rms_set = Setting("pre_layer", deep=deep), Setting("pre_rms", deep=deep)
    claim = f"2. RMSNorm reaches LN's quality in less time ({depth})"
    if not to_come(claim, "final valid bpc, pre-RMS vs pre-LN", rms_set, ln_set):
      pairs = paired(records[rms_set], records[ln_set])
      ratio = [step_seconds(b["metrics"]) / step_seconds(a["metrics"]) for b, a in pairs]
      a, b = [final_bpc(x) for x, _ in pairs], [final_bpc(y) for _, y in pairs]
      sp = spread(records[rms_set], records[ln_set])
      kept = verdicts.no_worse(a, b, lower=True, sp=sp)
      rows.append((claim,
                   "final valid bpc, pre-RMS vs pre-LN; the runs' step time pre-RMS / pre-LN "
                   "(not judged: runs shared the cores)",
                   per(f"{outcome(x)} vs {outcome(y)}, x{q:.3f}" for (x, y), q in zip(pairs, ratio)),
                   f"pre-RMS lower in {sum(x < y for x, y in zip(a, b))} of {len(a)}; worse beyond "
                   f"the spread ({sp:.3f}) in {sum(not k for k in kept)}",
                   str(verdicts.both({"LN's quality": verdicts.passes(kept),
                                      "less time": verdicts.untimed(len(a), bench)}))))
    normed = [Setting(k, deep=deep) for k in ("post_layer", "pre_layer", "pre_rms")]
    claim = f"2. the norm's share of the step ({depth})"
    measure = ("1 - none's s / update over the norm's (post-LN, pre-LN, pre-RMS), the runs' own "
               "times (none: no norm GPT-2-scaled)")
    if not to_come(claim, measure, *normed, Setting("none", deep=deep)):
      none = records[Setting("none", deep=deep)]
      shares = {s: {x["config"]["seed"]: 1 - step_seconds(z["metrics"]) / step_seconds(x["metrics"])
                    for x, z in paired(records[s], none)} for s in normed}
      seeds = [x["config"]["seed"] for x in R.seeds(none) if all(x["config"]["seed"] in v
                                                                    for v in shares.values())]
      rows.append((claim, measure, per(", ".join(f"{100 * shares[s][i]:.0f}%" for s in normed)
                                       for i in seeds), "", "(measure)"))
  # 3. The normalized models reach a given bpc in fewer updates, told apart:
  # against no norm at the same (Xavier) init, the norm alone; no norm
  # GPT-2-scaled against Xavier, the init alone; against no norm GPT-2-scaled,
  # both at once (the comparison as first made).
  reach = ("update at which it reaches its seed's no-norm final valid bpc (its first "
           "evaluation where no norm diverged), vs no norm's last")
  for deep in (True, False):
    depth = f"{layers(deep)} layers, warm-up"
    xavier, gpt2 = Setting("none_xavier", deep=deep), Setting("none", deep=deep)
    for norm in ("post_layer", "pre_layer", "pre_rms"):
      updates_row(f"3. {LABELS[norm]} needs fewer updates than no norm at the same init "
                  f"(Xavier: the norm alone) ({depth})", Setting(norm, deep=deep), xavier, reach)
    updates_row(f"3. no norm: GPT-2's scaled init needs fewer updates than Xavier's (the init "
                f"alone) ({depth})", gpt2, xavier,
                "update at which no norm GPT-2-scaled reaches its seed's no norm (Xavier) final "
                "valid bpc (its first evaluation where that diverged), vs the latter's last")
    for norm in ("post_layer", "pre_layer", "pre_rms"):
      updates_row(f"3. {LABELS[norm]} needs fewer updates than no norm GPT-2-scaled (norm and "
                  f"init both differ) ({depth})", Setting(norm, deep=deep), gpt2, reach)
  # bfloat16 against float32.
  claim = "bfloat16 matches float32 (pre-LN, warm-up)"
  measure = "final valid bpc, bfloat16 vs float32; the runs' step time bf16 / f32 (not judged)"
  if not to_come(claim, measure, Setting("pre_layer", dtype="bfloat16"), Setting("pre_layer")):
    f32, b16 = rec("pre_layer"), rec("pre_layer", dtype="bfloat16")
    sp = spread(f32, b16)
    pairs = paired(b16, f32)
    d = [final_bpc(a) - final_bpc(b) for a, b in pairs]
    st = [step_seconds(a["metrics"]) / step_seconds(b["metrics"]) for a, b in pairs]
    rows.append((claim, measure,
                 per(f"{outcome(a)} vs {outcome(b)}, x{q:.2f}" for (a, b), q in zip(pairs, st)),
                 f"within the spread ({sp:.3f}) in {sum(abs(x) <= sp for x in d)} of {len(d)}",
                 str(verdicts.passes([abs(x) <= sp for x in d]))))
  note = ("" if n > 1 else "\nOne seed: there is no spread to judge against; run "
          "`--seeds 3` for verdicts against the seeds' spread.\n")
  if left:
    note += (f"\n**{left} runs still to come** (above): these verdicts rest on the seeds "
             "recorded, and a claim whose runs have no record reads \"to come\"; a verdict may "
             "change when they are in.\n")
  return ("\n## Verdicts, seed by seed\n\nValues in seed order; \"the spread\" is the "
          "largest range over seeds of the compared runs' final validation bpc (diverged "
          "seeds left out); a diverged run counts as worse than any bpc. W^2's gradient norms at "
          "initialisation \"grow\" when the last block's exceeds the first's and the slope "
          "of their logarithm over the blocks is positive, and are \"flat\" when the last is "
          f"within {GROWTH:g}x of the first either way. Claim 3 is told apart: against no norm "
          "at the normalized models' (Xavier) init it is the norm's alone, no norm GPT-2-scaled "
          "against no norm at Xavier's init is the init's alone, and against no norm "
          f"GPT-2-scaled both differ at once. {verdicts.RULE} No step time is judged "
          "from the runs' own timings (runs shared the cores): a speed claim waits for an idle "
          f"benchmark in one process, `{bench}`.\n{note}\n"
          "| claim | measure | per seed | how many seeds | verdict |\n|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))


ANCHORS = """
## The published anchors (theirs, not ours; other data, sizes and tasks)

- **Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"** (their
  Figure 3 and section 3, 6-layer translation Transformers at initialisation): the expected
  gradient norm of W^2 in each layer's FFN *grows with the layer index* for post-LN and stays
  *about the same across layers* for pre-LN (their Theorem 1: post-LN's last layer
  O(d sqrt(ln d)), pre-LN's O(d sqrt(ln d / L))). Their Figure 1 / section 3.1 (IWSLT14
  De-En, BERT): post-LN trained without the warm-up, at lr 5e-4 or 1e-3, ends well below the
  warm-up runs; pre-LN trains without warm-up and reaches comparable results sooner.
- **Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"** (abstract): RMSNorm
  performs comparably to LayerNorm and reduces the running time by 7%-64% on their models (RNNs,
  Transformer, CNNs on GPUs); ours is a 64-wide model on 2 CPU cores, where the norm's share of a
  step is small, so expect little of that saving.
- **Ba, Kiros & Hinton 2016** (the paper reproduced here): layer norm trains recurrent nets in
  fewer updates than none; it has no Transformer result, so claim 3 is carried over, not
  checked against a number.
"""


def still_to_come(args, c, runs: dict, left: list[str]) -> str:
  """results.md's list of the runs still to come (``left``, names of ``runs``'
  settings over the planned seeds), by seed, with the command that adds them
  and, at a preset with a sizing, the hours they take."""
  if not left:
    return ""
  names = {s: name for s, (name, _) in runs.items()}
  plan = planned_seeds(args)
  total = len(runs) * plan
  md = (f"\n## Still to come\n\n{len(left)} of {total} runs ({len(runs)} settings x {plan} "
        f"seeds, the seeds planned at the {args.preset} preset): no record of them is in these "
        "tables.\n\n")
  every = argparse.Namespace(**{**vars(args), "seeds": plan})
  suffixes = [suffix for suffix, _ in R.seed_names(every, CONFIG)]
  whole = [s for s, name in names.items() if all(name + x in left for x in suffixes)]
  if whole:
    md += ("- settings with no record yet, every seed: "
           + ", ".join(f"{s.label()} at {c.num_layers if s.deep else SHALLOW_LAYERS} layers "
                       f"(`{names[s]}`)" for s in whole) + "\n")
  md += "- the runs, by name (for `--only`): " + ", ".join(f"`{n}`" for n in left) + "\n"
  if args.preset in MINUTES:
    (lo_d, hi_d), (lo_s, hi_s) = MINUTES[args.preset]
    deep = sum(1 for s, name in names.items() if s.deep for x in left
               if x == name or x.startswith(name + "_seed"))
    shallow = len(left) - deep
    lo, hi = deep * lo_d + shallow * lo_s, deep * hi_d + shallow * hi_s
    md += (f"\nAbout {lo / 60:.1f}-{hi / 60:.1f} h, one run at a time on the 2-core CPU "
           f"({deep} runs of {c.num_layers} layers at ~{lo_d}-{hi_d} min, {shallow} of "
           f"{SHALLOW_LAYERS} at ~{lo_s} min; scripts/paper/transformer.py's sizing; a diverged "
           "run stops early).\n")
  md += ("\nThe rest, a part at a time, each sitting committing its records: `"
         + R.command(every) + " --adopt_results --only NAME,...`; without `--only`, all of them "
         "and the tables. A sitting with `--only` writes no tables: `python scripts/redraw.py "
         f"transformer --preset {args.preset} --out DIR` tables the records there are.\n")
  return md


def transformer(args) -> None:
  """Runs the grid (``grid``) and writes results.md, curves.png and grad_norms.png."""
  c = R.config_module(CONFIG).get_config(args.preset)
  settings = grid()
  if c.num_layers == SHALLOW_LAYERS:
    sys.exit(f"error: preset {args.preset} has {c.num_layers} layers, the shallow model's; "
             "the grid needs a deeper one")
  runs = {s: (s.name(c), s.overrides(c)) for s in settings}
  records, left = run_grid(args, runs)
  if not records:
    sys.exit(f"error: no whole record of {args.target} to table; its runs: "
             + ", ".join(left))
  out = R.out_dir(args)
  out.mkdir(parents=True, exist_ok=True)
  plot_curves(records, c, out / "curves.png")
  plot_grad_norms(records, c, out / "grad_norms.png")
  first = next(iter(records.values()))
  plan = planned_seeds(args)
  md = R.header(args, list(records.values()), "Beyond the paper: norms in a byte Transformer LM")
  if left:  # the header's "N per run" is the most any run has
    md = md.replace(f"Seeds: {args.seeds} per run.", f"Seeds: up to {args.seeds} per run, "
                    f"{plan} planned (the seeds column says how many each run has; the rest "
                    "are to come).")
  gn = next((x["grad_norms"] for r in records.values() for x in R.seeds(r) if x["grad_norms"]),
            {})
  # The files relative to the data folder: no machine's path goes into
  # results.md (records made before the loader said them so name them whole).
  data, root = gn.get("data", ""), (first["config"].get("data_dir") or "").rstrip("/")
  data = data[len(root) + 1:] if root and data.startswith(root + "/") else data
  data = f"<data_dir>/{data}" if data and not data.startswith("/") else data
  md += (f"Data: **{gn.get('source', c.data_source)}** ({data}). Bits per byte on "
         f"{c.num_eval_windows or 'all'} fixed windows of {c.seq_len} targets spread evenly over "
         "the validation books (test: the same on the test books, at the end).\n\n"
         f"Setting (preset {args.preset}): {c.num_layers} layers (shallow: {SHALLOW_LAYERS}), "
         f"d_model {c.d_model}, {c.num_heads} heads, d_ff {c.d_ff}, {c.positions} positions, "
         f"{c.activation}, windows of {c.seq_len} bytes, batch {c.batch_size}, Adam at "
         f"{c.learning_rate:g} (the smaller rate {c.learning_rate * LOW_RATE:g}), warm-up "
         f"{c.warmup_steps} updates (linear) then {c.schedule}, clipping "
         f"{c.grad_clip_norm or 'off'}, {c.num_steps} updates, evaluated every "
         f"{c.eval_every_steps}. No norm twice: GPT-2-scaled, W^O and W^2 starting at Xavier / "
         "sqrt(2 L) (GPT-2), and at Xavier, as the normalized models (Xiong et al.'s setting), "
         "so that claim 3 tells the norm from the init.\n"
         + still_to_come(args, c, runs, left) + "\n"
         "![validation bpc](curves.png)\n\n"
         "![gradient norms](grad_norms.png)\n\n"
         "Gradient norms: the L2 norm of each block's gradient on one fixed training batch "
         "(`<run>/grad_norms.json`, which also has every layer's, W^O's and the embedding's).\n\n"
         "## Final bpc\n\n| run | layers | warm-up | lr | dtype | "
         + ("seeds | " if left else "") + "final valid bpc | best valid "
         "bpc | test bpc | s / update | x none's |\n|---|---|---|---|---|---|---|---|---|---|"
         + ("---|" if left else "") + "\n")
  for s in settings:
    r = records.get(s)
    if r is None:
      o = {**c.to_dict(), **s.overrides(c)}
      md += (f"| {s.label()} | {o['num_layers']} | {o['warmup_steps'] or 'none'} | "
             f"{o['learning_rate']:g} | {o['dtype']} | 0 of {plan} | to come | | | | |\n")
      continue
    runs_ = R.seeds(r)
    none = records.get(Setting("none", deep=s.deep))
    fin = [final_bpc(x) for x in runs_]
    fin_s = (R.mean_sd([v for v in fin], ".3f") if all(map(math.isfinite, fin))
             else per(outcome(x) for x in runs_))
    best = R.mean_sd([min((m["valid_bpc"] for m in x["metrics"]), default=math.nan)
                      for x in runs_], ".3f")
    test = (R.mean_sd([x["metrics"][-1].get("test_bpc", math.nan) for x in runs_], ".3f")
            if all(map(math.isfinite, fin)) else per(outcome(x, "test_bpc") for x in runs_))
    secs = [step_seconds(x["metrics"]) for x in runs_]
    ratio = ([step_seconds(x["metrics"]) / step_seconds(z["metrics"]) for x, z in paired(r, none)]
             if none is not None else [])
    cfg = r["config"]
    md += (f"| {s.label()} | {cfg['num_layers']} | {cfg['warmup_steps'] or 'none'} | "
           f"{cfg['learning_rate']:g} | {cfg['dtype']} | "
           + (f"{len(runs_)} of {plan} | " if left else "")
           + f"{fin_s} | {best} | {test} | {R.mean_sd(secs, '.3f')} | "
           f"{R.mean_sd(ratio, '.3f') if ratio else 'n/a'} |\n")
  div = [(x["name"], outcome(x)) for r in records.values() for x in R.seeds(r) if x["diverged"]]
  md += ("\nStep times: the median evaluation interval's training seconds per update, from the "
         "runs themselves (no evaluation, checkpoints or compiling); with `--jobs 2`, or other "
         "work on the machine, two runs share the cores and these times are noisier than "
         "`python -m scripts.bench.transformer` (all variants in one process, interleaved; "
         "BENCHMARKS.md has its table, measured idle). x none's: over no norm's (GPT-2-scaled) "
         "of the same depth and seed.\n"
         "\n## Divergences\n\n"
         + ("".join(f"- {n}: {o} (NaN or Inf in a training metric; metrics up to the last good "
                    "evaluation)\n" for n, o in div) if div else
            "None among the runs recorded.\n" if left else "None: every run finished.\n"))
  md += claims(records, len(R.seeds(first)), args.preset, c, len(left))
  md += ANCHORS
  (out / "results.md").write_text(md)
  print(md)
