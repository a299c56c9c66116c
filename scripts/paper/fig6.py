"""Figure 6: permutation-invariant MNIST, and its learning-rate search."""

from __future__ import annotations

import sys

from configs import pi_mnist as pi_mnist_config
from lnorm import norms
from scripts.paper import verdicts
from scripts.paper.runs import TIME_NOTE, curves, first, header, out_dir, reached, run_all, seeds, summary_row, train_nll_table

# The norms the paper compares in its MLPs and ConvNets (labels: norms.label).
MLP_NORMS = (norms.NONE, norms.LAYER, norms.BATCH)


def fig6_lr(args) -> None:
  """Each (norm, batch size, rate) for a few epochs; the lowest final
  validation error picks the rate."""
  runs = {}
  for batch, rates in pi_mnist_config.LR_GRID.items():
    for norm in MLP_NORMS:
      for lr in rates:
        runs[norm, batch, lr] = (f"{norm}_b{batch}_lr{lr:g}", {
            "norm": norm, "batch_size": batch, "learning_rate": lr,
            "num_epochs": 5 if batch >= 128 else 1})
  records = run_all(args, "configs/pi_mnist.py", runs)
  rows, best = [], {}
  for (norm, batch, lr), r in records.items():
    last = r["metrics"][-1]
    rows.append((norm, batch, lr, last["epoch"], last["valid_error"], last["valid_nll"]))
    if (norm, batch) not in best or last["valid_error"] < best[norm, batch][1]:
      best[norm, batch] = (lr, last["valid_error"])
  md = header(args, list(records.values()), "Learning-rate search for Figure 6 (validation set)")
  md += "| norm | batch | learning rate | epochs | valid error | valid NLL |\n|---|---|---|---|---|---|\n"
  md += "".join(f"| {n} | {b} | {lr:g} | {e} | {ve:.4f} | {vn:.4f} |\n" for n, b, lr, e, ve, vn in rows)
  md += "\nPicked (lowest validation error):\n\n" + "".join(
      f"- {n}, batch {b}: {lr:g} (valid error {ve:.4f})\n" for (n, b), (lr, ve) in best.items())
  md += "\nAs Python, for `LEARNING_RATES` in configs/pi_mnist.py:\n\n```\n" + "{" + ", ".join(
      f"({n!r}, {b}): {lr:g}" for (n, b), (lr, _) in best.items()) + "}\n```\n"
  (out_dir(args) / "results.md").write_text(md)
  print(md)


def claims(records: dict) -> str:
  """The paper's three claims on Figure 6, seed by seed: seed s of one run
  against seed s of another (the same initialisation key and minibatch
  order), and in how many seeds each comparison goes one way, so that a
  verdict can be weighed against the spread between seeds."""
  ms = lambda norm, batch: [s["metrics"] for s in seeds(records[norm, batch])]
  pct = lambda x: f"{100 * x:.2f}%"
  n = len(ms("layer", 4))
  rows = []
  fin = {b: [m[-1]["test_error"] for m in ms("layer", b)] for b in (4, 128)}
  overlap = verdicts.overlap(fin[4], fin[128])
  sp = verdicts.spread(fin[4], fin[128])
  kept = verdicts.no_worse(fin[4], fin[128], lower=True, sp=sp)
  rows.append((
      "(a) layer norm does about as well at batch 4 as at batch 128",
      "final test error, batch 4 vs 128",
      " / ".join(f"{pct(a)} vs {pct(b)}" for a, b in zip(fin[4], fin[128])),
      f"higher at batch 4 in {sum(a > b for a, b in zip(fin[4], fin[128]))} of {n}"
      + (f", beyond the spread ({pct(sp)}) in {sum(not k for k in kept)}; the seeds' ranges "
         f"{'overlap' if overlap else 'do not overlap'}" if n > 1 else ""),  # one seed: no spread
      str(verdicts.passes(kept))))
  for key, level, what in (("test_error", 0.02, "2% test error"), ("train_nll", 0.1, "training NLL 0.1")):
    ln, bn = ([first(m, key, level) for m in ms(norm, 4)] for norm in ("layer", "batch"))
    rows.append((
        "(b) layer norm converges faster than batch norm at batch 4",
        f"first epoch at {what}, layer vs batch norm",
        " / ".join(f"{reached(a)} vs {reached(b)}" for a, b in zip(ln, bn)),
        f"layer norm sooner in {sum(a < b for a, b in zip(ln, bn))} of {n}",
        str(verdicts.compare(ln, bn, lower=True))))
  for batch in (4, 128):
    lower = [sum(a["train_nll"] < b["train_nll"] for a, b in zip(l, base))
             for l, base in zip(ms("layer", batch), ms("none", batch))]
    epochs = len(ms("layer", batch)[0])
    rows.append((
        f"(c) layer norm trains faster than the baseline, batch {batch}",
        "epochs in which layer norm's training NLL is the lower",
        " / ".join(f"{k} of {epochs}" for k in lower),
        f"lower in most epochs in {sum(2 * k > epochs for k in lower)} of {n}",
        str(verdicts.passes([2 * k > epochs for k in lower]))))
    ln, base = ([first(m, "train_nll", 0.01) for m in ms(norm, batch)]
                for norm in ("layer", "none"))
    rows.append((
        f"(c) layer norm trains faster than the baseline, batch {batch}",
        "first epoch at training NLL 0.01, layer norm vs baseline",
        " / ".join(f"{reached(a)} vs {reached(b)}" for a, b in zip(ln, base)),
        f"layer norm sooner in {sum(a < b for a, b in zip(ln, base))} of {n}",
        str(verdicts.compare(ln, base, lower=True))))
  return ("\nThe paper's claims, seed by seed (seed s of one run against seed s of the other: "
          f"the same initialisation and minibatch order; values in seed order). {verdicts.RULE} "
          "\"About as well\" is a stated test: no worse than batch 128 beyond the spread (the "
          "larger range over seeds of the two).\n\n"
          "| claim | measure | per seed | how many seeds | verdict |\n|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))


def fig6(args) -> None:
  lrs = pi_mnist_config.LEARNING_RATES
  if not lrs:
    sys.exit("error: configs/pi_mnist.py has no LEARNING_RATES yet; run "
             "`python scripts/reproduce.py fig6_lr` and copy its choice there")
  records = run_all(args, "configs/pi_mnist.py", {
      (norm, batch): (f"{norm}_b{batch}", {"norm": norm, "batch_size": batch,
                                           "learning_rate": pi_mnist_config.learning_rate(norm, batch)})
      for batch in (128, 4) for norm in MLP_NORMS})
  curves(records, out_dir(args) / "fig6.png", "Permutation-invariant MNIST",
          lambda k: f"batch size {k[1]}", lambda k: norms.label(k[0]))
  md = header(args, list(records.values()), "Figure 6: permutation-invariant MNIST")
  md += ("![Figure 6](fig6.png)\n\n| run | final test error | best test error | epochs to "
         "2% test error | final train NLL | train time (s) | examples/s (median epoch) | "
         "learning rate |\n|---|---|---|---|---|---|---|---|\n")
  md += "".join(summary_row(f"{norms.label(n)}, batch {b}", r, "")
                for (n, b), r in records.items())
  md += TIME_NOTE
  md += train_nll_table({f"{norms.label(n)}, batch {b}": r for (n, b), r in records.items()})
  md += claims(records)
  (out_dir(args) / "results.md").write_text(md)
  print(md)
