"""Beyond the paper (issue 36): where the norm goes in a byte Transformer LM,
with and without warm-up, and at what precision.

The grid is built around three claims, not the full product (``grid``):

  deep (the preset's 12 layers), Adam at the preset's rate ("high"):
    post-LN, pre-LN, pre-RMSNorm, no norm, each with and without warm-up  8 runs
  deep, a quarter of the rate ("low"), no warm-up: post-LN, pre-LN        2 runs
  shallow (2 layers), warm-up: the four norms                             4 runs
  deep pre-LN with warm-up in bfloat16 (against its float32 run)          1 run

15 runs a seed. Sizing (the cpu preset, 2,000 updates a run, measured on the
2-core CPU with a niced handwriting job on it; configs/transformer.py): a
12-layer run 0.30-0.37 s an update, ~12-14 min with its 20 evaluations and
compiling; a 2-layer one ~3 min. 11 deep and 4 shallow runs: ~2.3-2.7 h a
seed, ~5 h for ``--seeds 2`` (~9 h if the machine is as busy as at 0.65 s an
update), inside the issue's 12 h. A pilot of 300 updates showed the effect
the grid is for: post-LN without warm-up at 1e-3 stalled at 4.54 validation
bpc (its lower blocks' gradients near 0), pre-LN with warm-up 3.55.

No norm starts with W^O and W^2 scaled by 1/sqrt(2L) (GPT-2's
init): with Xavier's alone a 12-layer unnormalized stack starts at a loss of
~860 nats and the comparison would say nothing.

A run whose loss turns NaN is a result: the run stops with exit status 3
(the loop's NonFiniteLossError), its workdir holds diverged.json, and the
tables say "diverged in steps a-b"; every other failure stops the target as
scripts/paper/runs.run_all does. Runs are counted in updates (no epochs):
runs.finished takes a record as finished at ``num_steps`` or at its
divergence. At ~5 h the grid is split across sittings with reproduce.py's
``--only`` and ``--adopt_results``.
"""

from __future__ import annotations

import dataclasses
import json
import math
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
    "none": {"norm_position": "none", "norm": "none", "scaled_residual_init": True},
}
LABELS = {"post_layer": "post-LN", "pre_layer": "pre-LN", "pre_rms": "pre-RMSNorm",
          "none": "no norm"}
SHALLOW_LAYERS = 2   # the shallow model's blocks
LOW_RATE = 0.25      # the smaller learning rate, times the preset's
# The rules for Figure 3's claim: W^2's gradient norms "grow toward the
# output" when the last block's exceeds the first's and the log norms' slope
# over the blocks is positive (the size of the growth is reported beside it,
# against GROWTH), and are "flat" when the last is within a factor GROWTH of
# the first either way.
GROWTH = 2.0


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
  out = [Setting(n, warmup=w) for n in NORMS for w in (True, False)]
  out += [Setting(n, warmup=False, low_rate=True) for n in ("post_layer", "pre_layer")]
  out += [Setting(n, deep=False) for n in NORMS]
  out += [Setting("pre_layer", dtype="bfloat16")]
  return out


# -- Running the grid -----------------------------------------------------------

def run_grid(args, runs: dict) -> dict:
  """runs.run_all over ``runs``, a divergence (exit status 3, diverged.json)
  counting as a result; each seed's record also holds ``grad_norms`` and
  ``diverged`` (their JSON, None where the run wrote none)."""
  records = R.run_all(args, CONFIG, runs, optional=(GRAD_NORMS,),
                      stops={NONFINITE_EXIT: DIVERGED})
  for r in records.values():
    for x in R.seeds(r):
      for key, f in (("grad_norms", GRAD_NORMS), ("diverged", DIVERGED)):
        path = R.out_dir(args) / x["name"] / f
        x[key] = json.loads(path.read_text()) if path.exists() else None
    r.update({k: r["seeds"][0][k] for k in ("grad_norms", "diverged")})
  return records


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
  per = [x["epoch_time_s"] / max(x["step"] - p, 1) for x, p in zip(m, [0] + [y["step"] for y in m])
         if "epoch_time_s" in x]
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
    figures.draw(ax, {k: v for k, v in runs.items() if v}, "valid_bpc", "step")
    if ax.get_lines():  # the first evaluations (~8 bpc at init) would flatten the rest,
      # but a run stuck high (post-LN without warm-up) must stay in view
      ys = [np.asarray(l.get_ydata(), float) for l in ax.get_lines()]
      last = max(float(y[np.isfinite(y)][-1]) for y in ys if np.isfinite(y).any())
      ax.set_ylim(top=max(min(4.0, max(float(np.nanmax(y)) for y in ys)), last + 0.15))
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


def claims(records: dict[Setting, dict], n: int, preset: str = "cpu") -> str:
  """Each claim, judged seed by seed (seed s against seed s: the same init
  key and batches) against the seeds' spread of the runs compared."""
  get = lambda *a, **k: R.seeds(records[Setting(*a, **k)])
  rec = lambda *a, **k: records[Setting(*a, **k)]
  rows = []
  bench = BENCH.format(preset=preset)

  def worse_row(claim, a_run, b_run, a_lab, b_lab, expect_worse: bool):
    sp = spread(a_run, b_run)
    pairs = list(zip(R.seeds(a_run), R.seeds(b_run)))
    a, b = [final_bpc(x) for x, _ in pairs], [final_bpc(y) for _, y in pairs]
    kept = verdicts.no_worse(a, b, lower=True, sp=sp)
    per_seed = per(f"{outcome(x)} vs {outcome(y)}" for x, y in pairs)
    # Needing warm-up: worse without it, the ranges apart; not needing it: no
    # worse without it beyond the spread in each seed (a stated test).
    v = verdicts.compare(a, b, lower=False) if expect_worse else verdicts.passes(kept)
    rows.append((claim, f"final valid bpc, {a_lab} vs {b_lab}", per_seed,
                 f"worse beyond the spread ({sp:.3f}) in {sum(not k for k in kept)} of {len(a)}",
                 str(v)))

  worse_row("1. post-LN needs warm-up (at the larger rate)", rec("post_layer", warmup=False),
            rec("post_layer"), "no warm-up", "warm-up", True)
  worse_row("1. pre-LN does not need warm-up", rec("pre_layer", warmup=False),
            rec("pre_layer"), "no warm-up", "warm-up", False)
  for norm in ("post_layer", "pre_layer"):
    lo, hi = R.seeds(rec(norm, warmup=False, low_rate=True)), get(norm, warmup=False)
    better = sum(final_bpc(a) < final_bpc(b) for a, b in zip(lo, hi))
    rows.append((f"1. ({LABELS[norm]}, no warm-up) the trouble is the rate's",
                 f"final valid bpc at lr x{LOW_RATE:g} vs the larger lr",
                 per(f"{outcome(a)} vs {outcome(b)}" for a, b in zip(lo, hi)),
                 f"smaller rate better in {better} of {len(lo)}", "(context)"))
  post, pre = get("post_layer"), get("pre_layer")
  ups, flats = [w2_ratio(x) for x in post], [w2_ratio(x) for x in pre]
  grows = [v > 1 and w2_slope(x) > 0 for v, x in zip(ups, post)]
  rows.append(("1. at init post-LN's gradients grow toward the output",
               "W^2 gradient norm, last block / first (blocks rising; slope of log norm a block)",
               per(f"{v:.2f} ({rising(x)}; {w2_slope(x):+.3f})" for v, x in zip(ups, post)),
               f"rising in {sum(grows)} of {len(grows)}; by >= {GROWTH:g}x in "
               f"{sum(v >= GROWTH for v in ups)} of {len(ups)}", str(verdicts.passes(grows))))
  flat = [1 / GROWTH < v < GROWTH for v in flats]
  rows.append(("1. at init pre-LN's stay flat", "W^2 gradient norm, last block / first "
               "(blocks rising; slope)",
               per(f"{v:.2f} ({rising(x)}; {w2_slope(x):+.3f})" for v, x in zip(flats, pre)),
               f"within {GROWTH:g}x in {sum(flat)} of {len(flat)}; falling (< 1) in "
               f"{sum(v < 1 for v in flats)}", str(verdicts.passes(flat))))
  more = [a > b for a, b in zip(ups, flats)]
  rows.append(("1. post-LN's grow more than pre-LN's (Figure 3's contrast)",
               "last / first, post-LN vs pre-LN", per(f"{a:.2f} vs {b:.2f}" for a, b in
                                                     zip(ups, flats)),
               f"post-LN's higher in {sum(more)} of {len(more)}",
               str(verdicts.compare(ups, flats, lower=False))))
  # 2. RMSNorm reaches LN's quality in less time: the quality from the final
  # bpc, the time only from an idle benchmark (the runs' own step times, shown
  # for reference, were taken with runs sharing the cores).
  for deep in (True, False):
    ln, rms, none = get("pre_layer", deep=deep), get("pre_rms", deep=deep), get("none", deep=deep)
    ratio = [step_seconds(b["metrics"]) / step_seconds(a["metrics"]) for a, b in zip(ln, rms)]
    a, b = [final_bpc(x) for x in rms], [final_bpc(x) for x in ln]
    sp = spread(*(records[Setting(k, deep=deep)] for k in ("pre_rms", "pre_layer")))
    kept = verdicts.no_worse(a, b, lower=True, sp=sp)
    depth = f"{ln[0]['config']['num_layers']} layers"
    rows.append((f"2. RMSNorm reaches LN's quality in less time ({depth})",
                 "final valid bpc, pre-RMS vs pre-LN; the runs' step time pre-RMS / pre-LN "
                 "(not judged: runs shared the cores)",
                 per(f"{outcome(x)} vs {outcome(y)}, x{q:.3f}" for x, y, q in zip(rms, ln, ratio)),
                 f"pre-RMS lower in {sum(x < y for x, y in zip(a, b))} of {len(a)}; worse beyond "
                 f"the spread ({sp:.3f}) in {sum(not k for k in kept)}",
                 str(verdicts.both({"LN's quality": verdicts.passes(kept),
                                    "less time": verdicts.untimed(len(a), bench)}))))
    shares = {k: [1 - step_seconds(z["metrics"]) / step_seconds(x["metrics"])
                  for x, z in zip(get(k, deep=deep), none)] for k in ("post_layer", "pre_layer",
                                                                       "pre_rms")}
    rows.append((f"2. the norm's share of the step ({depth})", "1 - none's s / update over "
                 "the norm's (post-LN, pre-LN, pre-RMS), the runs' own times",
                 per(", ".join(f"{100 * shares[k][i]:.0f}%" for k in shares)
                     for i in range(len(none))), "", "(measure)"))
  # 3. The normalized models reach a given bpc in fewer updates.
  for deep in (True, False):
    none = get("none", deep=deep)
    for norm in ("post_layer", "pre_layer", "pre_rms"):
      runs = get(norm, deep=deep)
      to = [(R.first(x["metrics"], "valid_bpc", final_bpc(b), "step"),
             b["metrics"][-1]["step"] if b["metrics"] and not b["diverged"] else math.inf)
            for x, b in zip(runs, none)]
      sooner = sum(a < b for a, b in to)
      rows.append((f"3. {LABELS[norm]} needs fewer updates than no norm "
                   f"({runs[0]['config']['num_layers']} layers, warm-up)",
                   "update at which it reaches its seed's no-norm final valid bpc, vs no norm's "
                   "last", per(f"{R.reached(a)} vs {R.reached(b)}" for a, b in to),
                   f"sooner in {sooner} of {len(to)}",
                   str(verdicts.compare([a for a, _ in to], [b for _, b in to], lower=True))))
  # bfloat16 against float32.
  f32, b16 = rec("pre_layer"), rec("pre_layer", dtype="bfloat16")
  sp = spread(f32, b16)
  pairs = list(zip(R.seeds(b16), R.seeds(f32)))
  d = [final_bpc(a) - final_bpc(b) for a, b in pairs]
  st = [step_seconds(a["metrics"]) / step_seconds(b["metrics"]) for a, b in pairs]
  rows.append(("bfloat16 matches float32 (pre-LN, warm-up)",
               "final valid bpc, bfloat16 vs float32; the runs' step time bf16 / f32 (not judged)",
               per(f"{outcome(a)} vs {outcome(b)}, x{q:.2f}" for (a, b), q in zip(pairs, st)),
               f"within the spread ({sp:.3f}) in {sum(abs(x) <= sp for x in d)} of {len(d)}",
               str(verdicts.passes([abs(x) <= sp for x in d]))))
  note = ("" if n > 1 else "\nOne seed: there is no spread to judge against; run "
          "`--seeds 3` for verdicts against the seeds' spread.\n")
  return ("\n## Verdicts, seed by seed\n\nValues in seed order; \"the spread\" is the "
          "largest range over seeds of the compared runs' final validation bpc (diverged "
          "seeds left out); a diverged run counts as worse than any bpc. W^2's gradient norms at "
          "initialisation \"grow\" when the last block's exceeds the first's and the slope "
          "of their logarithm over the blocks is positive, and are \"flat\" when the last is "
          f"within {GROWTH:g}x of the first either way. {verdicts.RULE} No step time is judged "
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


def transformer(args) -> None:
  """Runs the grid (``grid``) and writes results.md, curves.png and grad_norms.png."""
  c = R.config_module(CONFIG).get_config(args.preset)
  settings = grid()
  if c.num_layers == SHALLOW_LAYERS:
    sys.exit(f"error: preset {args.preset} has {c.num_layers} layers, the shallow model's; "
             "the grid needs a deeper one")
  records = run_grid(args, {s: (s.name(c), s.overrides(c)) for s in settings})
  out = R.out_dir(args)
  plot_curves(records, c, out / "curves.png")
  plot_grad_norms(records, c, out / "grad_norms.png")
  first = next(iter(records.values()))
  md = R.header(args, list(records.values()), "Beyond the paper: norms in a byte Transformer LM")
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
         f"{c.eval_every_steps}. No norm: W^O and W^2 start at Xavier / sqrt(2 L) (GPT-2); "
         "the normalized models at Xavier (Xiong et al.'s setting).\n\n"
         "![validation bpc](curves.png)\n\n"
         "![gradient norms](grad_norms.png)\n\n"
         "Gradient norms: the L2 norm of each block's gradient on one fixed training batch "
         "(`<run>/grad_norms.json`, which also has every layer's, W^O's and the embedding's).\n\n"
         "## Final bpc\n\n| run | layers | warm-up | lr | dtype | final valid bpc | best valid "
         "bpc | test bpc | s / update | x none's |\n|---|---|---|---|---|---|---|---|---|---|\n")
  for s, r in records.items():
    runs = R.seeds(r)
    none = records[Setting("none", deep=s.deep)]
    fin = [final_bpc(x) for x in runs]
    fin_s = (R.mean_sd([v for v in fin], ".3f") if all(map(math.isfinite, fin))
             else per(outcome(x) for x in runs))
    best = R.mean_sd([min((m["valid_bpc"] for m in x["metrics"]), default=math.nan)
                      for x in runs], ".3f")
    test = (R.mean_sd([x["metrics"][-1].get("test_bpc", math.nan) for x in runs], ".3f")
            if all(map(math.isfinite, fin)) else per(outcome(x, "test_bpc") for x in runs))
    secs = [step_seconds(x["metrics"]) for x in runs]
    ratio = [step_seconds(x["metrics"]) / step_seconds(z["metrics"])
             for x, z in zip(runs, R.seeds(none))]
    cfg = r["config"]
    md += (f"| {s.label()} | {cfg['num_layers']} | {cfg['warmup_steps'] or 'none'} | "
           f"{cfg['learning_rate']:g} | {cfg['dtype']} | {fin_s} | {best} | {test} | "
           f"{R.mean_sd(secs, '.3f')} | {R.mean_sd(ratio, '.3f')} |\n")
  div = [(x["name"], outcome(x)) for r in records.values() for x in R.seeds(r) if x["diverged"]]
  md += ("\nStep times: the median evaluation interval's training seconds per update, from the "
         "runs themselves (no evaluation, checkpoints or compiling); with `--jobs 2`, or other "
         "work on the machine, two runs share the cores and these times are noisier than "
         "`python -m scripts.bench.transformer` (all variants in one process, interleaved; "
         "BENCHMARKS.md has its table, measured idle).\n"
         "\n## Divergences\n\n"
         + ("".join(f"- {n}: {o} (NaN or Inf in a training metric; metrics up to the last good "
                    "evaluation)\n" for n, o in div) if div else "None: every run finished.\n"))
  md += claims(records, len(R.seeds(first)), args.preset)
  md += ANCHORS
  (out / "results.md").write_text(md)
  print(md)
