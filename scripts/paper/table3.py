"""Table 3 and Figure 3: skip-thoughts, evaluated on SentEval."""

from __future__ import annotations

import math
import statistics

from experiments.runner import figures
from lnorm import norms
from scripts.paper import verdicts
from scripts.paper.runs import first, header, mean_sd, out_dir, per_seed, reached, run_all, seeds


SKIP_METRICS = {"SICK_r": "SICK r", "SICK_rho": "SICK rho", "SICK_mse": "SICK MSE",
                "MR_acc": "MR", "CR_acc": "CR", "SUBJ_acc": "SUBJ", "MPQA_acc": "MPQA"}


SKIP_AXES = {"SICK_r": "SICK r (Pearson)", "SICK_rho": "SICK rho (Spearman)",
             "SICK_mse": "SICK MSE (squared score)",
             **{f"{t}_acc": f"{t} accuracy (fraction)" for t in ("MR", "CR", "SUBJ", "MPQA")}}


SKIP_NAMES = {n: f"Ours ({norms.label(n, 'GRU')})" for n in (norms.NONE, norms.LAYER)}


# The paper's Table 3 as printed (arXiv 1607.06450v1): uni-skip, 2400 units,
# BookCorpus; its models trained 1M updates, the one marked † about 1.7M (1 month).
PAPER_TABLE3 = (
    ("Original [Kiros et al., 2015]", "", (0.848, 0.778, 0.287, 75.5, 79.3, 92.1, 86.9)),
    ("Ours", "1M", (0.842, 0.767, 0.298, 77.3, 81.8, 92.6, 87.9)),
    ("Ours + LN", "1M", (0.854, 0.785, 0.277, 79.5, 82.6, 93.4, 89.0)),
    ("Ours + LN †", "1.7M", (0.858, 0.788, 0.270, 79.4, 83.1, 93.7, 89.3)),
)


def skip_cell(metric: str, value: float) -> str:
  """Table 3's units: accuracies in %, SICK to 3 places."""
  return f"{100 * value:.1f}" if metric.endswith("_acc") else f"{value:.3f}"


def skip_cells(metric: str, values) -> str:
  """``skip_cell`` of several seeds' values: mean ± sd (one value as it is)."""
  acc = metric.endswith("_acc")
  return mean_sd([100 * v if acc else v for v in values], ".1f" if acc else ".3f")


BASELINES = {"tfidf": "TF-IDF bag of words", "embmean": "mean of trained word embeddings"}


def corpus_name(c: dict) -> str:
  """Where our rows were trained (records made before ``corpus`` existed: Gutenberg)."""
  if c.get("text_dir"):
    return f"`{c['text_dir']}`"
  return "novels stand-in" if c.get("corpus") == "novels" else "Gutenberg stand-in"


def _per_seed_runs(ms: dict) -> dict[str, list[list[dict]]]:
  """{norm: one seed's metrics} or {norm: [each seed's metrics]} -> the latter."""
  return {n: ([m] if m and isinstance(m[0], dict) else list(m)) for n, m in ms.items()}


def skip_tables(ms: dict, c: dict) -> str:
  """Table 3's layout, the paper's rows above ours (mean ± sd over seeds), the
  baselines' rows where the runs scored them; then, for Figure 3, each metric
  at every evaluation, how often and how soon LN leads, and the paper's claims
  seed by seed. ``ms``: {norm: metrics} or {norm: [metrics of each seed]}."""
  from experiments.runner.loop import higher_is_better  # pylint: disable=g-import-not-at-top
  runs = _per_seed_runs(ms)
  corpus = corpus_name(c)
  shown = [k for k in SKIP_METRICS if all(k in m[-1] for m in runs["none"])]
  md = ("| run | updates | heldout NLL | " + " | ".join(SKIP_METRICS[k] for k in shown)
        + " | s / update |\n|---|---|---|" + "---|" * len(shown) + "---|\n")
  for name, updates, row in PAPER_TABLE3:
    paper = dict(zip(SKIP_METRICS, row))
    md += (f"| paper: {name} (BookCorpus) | {updates} | | "
           + " | ".join(f"{paper[k]:.3f}" if k.startswith("SICK") else f"{paper[k]:.1f}"
                        for k in shown) + " | |\n")
  for n, seeds_ms in runs.items():
    secs = [c["batch_size"] / statistics.median(x["examples_per_sec"] for x in m)
            for m in seeds_ms]
    md += (f"| {SKIP_NAMES[n]}, {corpus} | {per_seed(m[-1]['step'] for m in seeds_ms)} | "
           + (mean_sd((m[-1]["heldout_nll"] for m in seeds_ms), ".3f")
              if all("heldout_nll" in m[-1] for m in seeds_ms) else "nan") + " | "
           + " | ".join(skip_cells(k, (m[-1][k] for m in seeds_ms)) for k in shown)
           + f" | {mean_sd(secs, '.3f')} |\n")
  md += baseline_rows(runs, shown, corpus)
  keys = ["heldout_nll"] + shown
  at = {n: [{r["step"]: r for r in m} for m in seeds_ms] for n, seeds_ms in runs.items()}
  steps = sorted(set.intersection(*(set(a) for a_s in at.values() for a in a_s)))
  md += ("\nAt every evaluation (Figure 3 in numbers), baseline / LN"
         + (", mean ± sd over seeds" if len(runs["none"]) > 1 else "") + ":\n\n| update | "
         + " | ".join(SKIP_METRICS.get(k, "heldout NLL") for k in keys) + " |\n|---|"
         + "---|" * len(keys) + "\n")
  for step in steps:
    md += f"| {step} | " + " | ".join(
        f"{skip_cells(k, (a[step][k] for a in at['none']))} / "
        f"{skip_cells(k, (a[step][k] for a in at['layer']))}" for k in keys) + " |\n"
  md += ("\nPer metric: the evaluations at which LN is the better, and the first update at "
         "which each run reaches the baseline's final value (each seed against the same seed "
         "of the other run; seeds in turn, or one value that all share):\n\n| metric | LN "
         "better at | baseline reaches its final at | LN reaches it at |\n|---|---|---|---|\n")
  pairs = list(zip(at["layer"], at["none"], runs["layer"], runs["none"]))
  for k in keys:
    up = higher_is_better(k)
    better = lambda a, b, up=up: a > b if up else a < b
    def first_at(m, target, k=k, up=up):
      return next((str(r["step"]) for r in m if (r[k] >= target if up else r[k] <= target)),
                  "not reached")
    md += (f"| {SKIP_METRICS.get(k, 'heldout NLL')} | "
           + per_seed(f"{sum(better(ln[s][k], b[s][k]) for s in steps)} of {len(steps)}"
                      for ln, b, _, _ in pairs) + " | "
           + per_seed(first_at(mb, mb[-1][k]) for _, _, _, mb in pairs) + " | "
           + per_seed(first_at(ml, mb[-1][k]) for _, _, ml, mb in pairs) + " |\n")
  md += claims(runs, steps, shown)
  return md


def baseline_rows(runs: dict[str, list[list[dict]]], shown: list[str], corpus: str) -> str:
  """The baselines' rows, from the runs' last evaluations (runs made before
  ``eval_baselines`` have none: no rows). TF-IDF needs no training: it is the
  same in both norms' runs of a seed, so its row is the baseline runs'."""
  md = ""
  rows = [("tfidf", "none", f"{BASELINES['tfidf']}, {corpus} vocabulary")] + [
      ("embmean", n, f"{BASELINES['embmean']} ({norms.label(n, 'GRU')}), {corpus}")
      for n in runs]
  for prefix, n, label in rows:
    last = [m[-1] for m in runs[n]]
    if not all(f"{prefix}_{k}" in r for r in last for k in shown):
      continue
    md += (f"| baseline: {label} | {per_seed(r['step'] for r in last)} | | "
           + " | ".join(skip_cells(k, (r[f"{prefix}_{k}"] for r in last)) for k in shown)
           + " | |\n")
  return md


def claims(runs: dict[str, list[list[dict]]], steps: list[int], shown: list[str]) -> str:
  """The paper's claims on Table 3 and Figure 3, seed by seed (seed s of LN
  against seed s of the baseline: the same initialisation key, batch order and
  folds): LN's held-out NLL is lower at matched updates (it trains faster),
  and its final downstream scores are better. The last column is the paired
  difference, its mean ± sd over seeds, to hold against the spread."""
  from experiments.runner.loop import higher_is_better  # pylint: disable=g-import-not-at-top
  pairs = list(zip(runs["layer"], runs["none"]))
  n = len(pairs)
  by_step = lambda m, k: {r["step"]: r[k] for r in m}
  rows = []
  ahead = [sum(by_step(ln, "heldout_nll")[s] < by_step(b, "heldout_nll")[s] for s in steps)
           for ln, b in pairs]
  diffs = lambda k: [ln[-1][k] - b[-1][k] for ln, b in pairs]
  rows.append(("LN trains faster", "evaluations at which LN's held-out NLL is lower",
               " / ".join(f"{a} of {len(steps)}" for a in ahead),
               f"lower at most evaluations in {sum(2 * a > len(steps) for a in ahead)} of {n}",
               mean_sd(diffs("heldout_nll"), ".3f"),
               str(verdicts.passes([2 * a > len(steps) for a in ahead]))))
  to = [(first(ln, "heldout_nll", b[-1]["heldout_nll"], "step"), b[-1]["step"])
        for ln, b in pairs]
  rows.append(("LN trains faster", "update at which LN reaches its seed's baseline final "
               "held-out NLL, against the baseline's last update",
               " / ".join(f"{reached(a)} vs {b}" for a, b in to),
               f"sooner in {sum(a < b for a, b in to)} of {n}"
               + "".join(f"; {100 * a / b:.0f}%" for a, b in to if a != math.inf)
               + (" of the baseline's updates" if any(a != math.inf for a, _ in to) else ""),
               "", str(verdicts.compare([a for a, _ in to], [b for _, b in to], lower=True))))
  for k in shown:
    up = higher_is_better(k)
    fin = [(ln[-1][k], b[-1][k]) for ln, b in pairs]
    scale = 100 if k.endswith("_acc") else 1
    rows.append((f"LN scores better downstream ({SKIP_METRICS[k]})",
                 f"final {SKIP_METRICS[k]}, LN vs baseline"
                 + (" (%)" if scale == 100 else "") + (", lower is better" if not up else ""),
                 " / ".join(f"{skip_cell(k, a)} vs {skip_cell(k, b)}" for a, b in fin),
                 f"LN better in {sum((a > b) if up else (a < b) for a, b in fin)} of {n}",
                 mean_sd([scale * d for d in diffs(k)], ".1f" if scale == 100 else ".3f"),
                 str(verdicts.compare([a for a, _ in fin], [b for _, b in fin], lower=not up))))
  return (f"\nThe paper's claims, seed by seed (values in seed order). {verdicts.RULE}\n\n"
          "| claim | measure | per seed | how many seeds | LN − baseline, mean ± sd | verdict |\n"
          "|---|---|---|---|---|---|\n" + "".join(f"| {' | '.join(r)} |\n" for r in rows))


def gru_vs_baselines(runs: dict[str, list[list[dict]]], shown: list[str]) -> str:
  """What the GRU adds: each run's final score minus each baseline's, in the
  same seed (and, for the embedding mean, the same run); '' without baselines."""
  from experiments.runner.loop import higher_is_better  # pylint: disable=g-import-not-at-top
  cols = [(n, p) for p in BASELINES for n in runs]
  cols = [(n, p) for n, p in cols
          if all(f"{p}_{k}" in m[-1] for m in runs[n if p == "embmean" else "none"]
                 for k in shown)]
  if not cols:
    return ""
  md = ("\nWhat the GRU encoder adds: its final score minus the baseline's, seed by seed "
        "(mean ± sd over seeds; in how many seeds the GRU is the better). TF-IDF is the "
        "baseline runs'; the embedding mean is the same run's.\n\n| metric | "
        + " | ".join(f"{norms.label(n, 'GRU')} − {BASELINES[p]}" for n, p in cols)
        + " |\n|---|" + "---|" * len(cols) + "\n")
  for k in shown:
    up, scale = higher_is_better(k), (100 if k.endswith("_acc") else 1)
    cells = []
    for n, p in cols:
      base = runs[n if p == "embmean" else "none"]
      d = [m[-1][k] - bm[-1][f"{p}_{k}"] for m, bm in zip(runs[n], base)]
      wins = sum((x > 0) if up else (x < 0) for x in d)
      cells.append(f"{mean_sd([scale * x for x in d], '.1f' if scale == 100 else '.3f')} "
                   f"({wins} of {len(d)})")
    md += f"| {SKIP_METRICS[k]} | " + " | ".join(cells) + " |\n"
  return md


def table3(args) -> None:
  """Skip-thoughts with and without LN-GRUs (configs/skipthoughts.py), Table 3's
  layout from the last evaluation and Figure 3's curves from metrics.jsonl;
  with ``--seeds N``, mean ± sd over seeds, bands, and the claims seed by seed."""
  records = run_all(args, "configs/skipthoughts.py", {n: (n, {"norm": n}) for n in SKIP_NAMES})
  runs = {n: [s["metrics"] for s in seeds(r)] for n, r in records.items()}
  c = records["none"]["config"]
  corpus = corpus_name(c)
  shown = [k for k in SKIP_METRICS if all(k in m[-1] for m in runs["none"])]
  figures.plot_panels({"": {SKIP_NAMES[n]: m for n, m in runs.items()}},
                      out_dir(args) / "fig3.png",
                      [figures.Axis("heldout_nll", "held-out NLL (nats per word)")]
                      + [figures.Axis(k, SKIP_AXES[k]) for k in shown], x="step",
                      title=f"Skip-thoughts on the {corpus.strip('`')} (paper Figure 3)")
  md = header(args, list(records.values()), "Table 3: skip-thoughts, with and without LN")
  last = runs["none"][0][-1]["step"]
  length = (f"{c['num_steps']:,} updates" if c.get("num_steps")
            else f"{c['num_epochs']} epochs")
  if c.get("text_dir"):
    data = f"Our rows are trained on `{c['text_dir']}`"
  elif c.get("corpus") == "novels":
    data = ("**Our rows are from a stand-in corpus**: the 99 Project Gutenberg novels of "
            "`text/novels` (94 training books, 5 held out; about 9M words against "
            "BookCorpus's ~1B)")
  else:
    data = ("**Our rows are from a stand-in corpus**: 17 Gutenberg books (1.4M training "
            "tokens against BookCorpus's ~1B)")
  md += (f"Setting: {c['embed_dim']}-d words, {c['features']} GRU units, {c['vocab_size']} "
         f"words, batch {c['batch_size']}, Adam {c['learning_rate']:g}, clipping at "
         f"{c['grad_clip_norm']:g}, {length} of the training books. "
         f"Evaluation at each point: {c['eval_folds']} folds, inner folds "
         f"{c['eval_inner_folds']} (0: C = 1), up to {c['eval_max_examples'] or 'all'} "
         "sentences a classification set. `python -m scripts.eval_skipthoughts --workdir "
         "<run>` gives SentEval's full protocol for any checkpoint. Accuracies in %.\n\n"
         + data + f", with {c['features']} GRU units against the paper's 2400 and "
         f"{last:,} updates against its 1M. The absolute numbers cannot "
         "be compared with the paper's rows, printed above ours for reference; only the "
         "comparison of the two norms carries over. The heldout NLL is per word, on the "
         "held-out books' triples."
         + (" The baseline rows score, with the same classifiers, folds and sentences, "
            "vectors without the GRU: a TF-IDF bag of words over the runs' vocabulary (idf "
            "from the training sentences), and the mean of each run's trained word "
            "embeddings over a sentence's words, both at the last evaluation."
            if any(k.startswith(tuple(f"{p}_" for p in BASELINES)) for k in last_keys(runs))
            else "")
         + "\n\n![Figure 3](fig3.png)\n\n")
  md += skip_tables(runs, c)
  md += gru_vs_baselines(runs, shown)
  (out_dir(args) / "results.md").write_text(md)
  print(md)


def last_keys(runs: dict[str, list[list[dict]]]) -> set[str]:
  return {k for seeds_ms in runs.values() for m in seeds_ms for k in m[-1]}
