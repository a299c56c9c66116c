"""Table 3 and Figure 3: skip-thoughts, evaluated on SentEval."""

from __future__ import annotations

import statistics

from experiments.runner import figures
from lnorm import norms
from scripts.paper.runs import header, out_dir, run_all


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


def skip_tables(ms: dict[str, list[dict]], c: dict) -> str:
  """Table 3's layout, the paper's rows above ours; then, for Figure 3, each
  metric at every evaluation and how often and how soon LN leads."""
  corpus = "Gutenberg stand-in" if not c.get("text_dir") else f"`{c['text_dir']}`"
  from experiments.runner.loop import higher_is_better  # pylint: disable=g-import-not-at-top
  shown = [k for k in SKIP_METRICS if k in ms["none"][-1]]
  md = ("| run | updates | heldout NLL | " + " | ".join(SKIP_METRICS[k] for k in shown)
        + " | s / update |\n|---|---|---|" + "---|" * len(shown) + "---|\n")
  for name, updates, row in PAPER_TABLE3:
    paper = dict(zip(SKIP_METRICS, row))
    md += (f"| paper: {name} (BookCorpus) | {updates} | | "
           + " | ".join(f"{paper[k]:.3f}" if k.startswith("SICK") else f"{paper[k]:.1f}"
                        for k in shown) + " | |\n")
  for n, m in ms.items():
    last = m[-1]
    rate = statistics.median(x["examples_per_sec"] for x in m)
    md += (f"| {SKIP_NAMES[n]}, {corpus} | {last['step']} | "
           f"{last.get('heldout_nll', float('nan')):.3f} | "
           + " | ".join(skip_cell(k, last[k]) for k in shown)
           + f" | {c['batch_size'] / rate:.3f} |\n")
  keys = ["heldout_nll"] + shown
  at = {n: {r["step"]: r for r in m} for n, m in ms.items()}
  steps = sorted(set(at["none"]) & set(at["layer"]))
  md += ("\nAt every evaluation (Figure 3 in numbers), baseline / LN:\n\n| update | "
         + " | ".join(SKIP_METRICS.get(k, "heldout NLL") for k in keys) + " |\n|---|"
         + "---|" * len(keys) + "\n")
  for step in steps:
    md += f"| {step} | " + " | ".join(
        f"{skip_cell(k, at['none'][step][k])} / {skip_cell(k, at['layer'][step][k])}"
        for k in keys) + " |\n"
  md += ("\nPer metric: the evaluations at which LN is the better, and the first update at "
         "which each run reaches the baseline's final value:\n\n| metric | LN better at | "
         "baseline reaches its final at | LN reaches it at |\n|---|---|---|---|\n")
  for k in keys:
    up = higher_is_better(k)
    better = sum((at["layer"][s][k] > at["none"][s][k]) if up
                 else (at["layer"][s][k] < at["none"][s][k]) for s in steps)
    target = ms["none"][-1][k]
    def first(m, k=k, up=up, target=target):
      return next((str(r["step"]) for r in m if (r[k] >= target if up else r[k] <= target)),
                  "not reached")
    md += (f"| {SKIP_METRICS.get(k, 'heldout NLL')} | {better} of {len(steps)} | "
           f"{first(ms['none'])} | {first(ms['layer'])} |\n")
  return md


def table3(args) -> None:
  """Skip-thoughts with and without LN-GRUs (configs/skipthoughts.py), Table 3's
  layout from the last evaluation and Figure 3's curves from metrics.jsonl."""
  records = run_all(args, "configs/skipthoughts.py", {n: (n, {"norm": n}) for n in SKIP_NAMES})
  ms = {n: r["metrics"] for n, r in records.items()}
  shown = [k for k in SKIP_METRICS if k in ms["none"][-1]]
  figures.plot_panels({"": {SKIP_NAMES[n]: m for n, m in ms.items()}},
                      out_dir(args) / "fig3.png",
                      [figures.Axis("heldout_nll", "held-out NLL (nats per word)")]
                      + [figures.Axis(k, SKIP_AXES[k]) for k in shown], x="step",
                      title="Skip-thoughts on the Gutenberg stand-in (paper Figure 3)")
  c = records["none"]["config"]
  md = header(args, list(records.values()), "Table 3: skip-thoughts, with and without LN")
  md += (f"Setting: {c['embed_dim']}-d words, {c['features']} GRU units, {c['vocab_size']} "
         f"words, batch {c['batch_size']}, Adam {c['learning_rate']:g}, clipping at "
         f"{c['grad_clip_norm']:g}, {c['num_epochs']} epochs of the training books. "
         f"Evaluation at each point: {c['eval_folds']} folds, inner folds "
         f"{c['eval_inner_folds']} (0: C = 1), up to {c['eval_max_examples'] or 'all'} "
         "sentences a classification set. `python -m scripts.eval_skipthoughts --workdir "
         "<run>` gives SentEval's full protocol for any checkpoint. Accuracies in %.\n\n"
         + ("**Our rows are from a stand-in corpus**: 17 Gutenberg books (1.4M training "
            "tokens against BookCorpus's ~1B)" if not c["text_dir"] else
            f"Our rows are trained on `{c['text_dir']}`")
         + f", with {c['features']} GRU units against the paper's 2400 and "
         f"{ms['none'][-1]['step']:,} updates against its 1M. The absolute numbers cannot "
         "be compared with the paper's rows, printed above ours for reference; only the "
         "comparison of the two norms carries over. The heldout NLL is per word, on the "
         "held-out books' triples.\n\n![Figure 3](fig3.png)\n\n")
  md += skip_tables(ms, c)
  (out_dir(args) / "results.md").write_text(md)
  print(md)
