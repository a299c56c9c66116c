"""Section 6.7: ConvNets on MNIST and Fashion-MNIST."""

from __future__ import annotations


from lnorm import norms
from scripts.paper import verdicts
from scripts.paper.runs import TIME_NOTE, curves, header, out_dir, run_all, seeds, summary_row, train_nll_table

# The norms the paper compares in its MLPs and ConvNets (labels: norms.label).
MLP_NORMS = (norms.NONE, norms.LAYER, norms.BATCH)


def convnet(args) -> None:
  records = run_all(args, "configs/convnet.py", {
      (dataset, norm): (f"{dataset}_{norm}", {"norm": norm, "dataset": dataset})
      for dataset in ("mnist", "fashion_mnist") for norm in MLP_NORMS})
  curves(records, out_dir(args) / "convnet.png", "ConvNets (section 6.7)",
          lambda k: k[0], lambda k: norms.label(k[1]))
  md = header(args, list(records.values()), "Section 6.7: ConvNets")
  md += ("![ConvNets](convnet.png)\n\n| run | final test error | best test error | epochs "
         "to 2% test error | final train NLL | train time (s) | examples/s (median epoch) | "
         "learning rate |\n|---|---|---|---|---|---|---|---|\n")
  md += "".join(summary_row(f"{d}, {norms.label(n)}", r, "") for (d, n), r in records.items())
  md += TIME_NOTE
  md += train_nll_table({f"{d}, {norms.label(n)}": r for (d, n), r in records.items()})
  md += claims(records)
  (out_dir(args) / "results.md").write_text(md)
  print(md)


def claims(records: dict) -> str:
  """Section 6.7's claims, per data set and seed by seed (seed s of one run
  against seed s of the other): layer norm trains faster than none, batch norm
  faster still (training NLL), and whether the order holds in test error."""
  rows = []
  for dataset in dict.fromkeys(d for d, _ in records):
    ms = lambda norm, d=dataset: [s["metrics"] for s in seeds(records[d, norm])]
    for a, b in ((norms.LAYER, norms.NONE), (norms.BATCH, norms.LAYER)):
      la, lb = norms.label(a), norms.label(b)
      pairs = list(zip(ms(a), ms(b)))
      lower = [sum(x["train_nll"] < y["train_nll"] for x, y in zip(ma, mb)) for ma, mb in pairs]
      epochs = [min(len(ma), len(mb)) for ma, mb in pairs]
      ok = [2 * k > e for k, e in zip(lower, epochs)]
      rows.append((f"{dataset}: {la} trains faster than {lb}",
                   f"epochs in which {la}'s training NLL is the lower",
                   " / ".join(f"{k} of {e}" for k, e in zip(lower, epochs)),
                   f"lower in most epochs in {sum(ok)} of {len(ok)}", str(verdicts.passes(ok))))
      fin = [(ma[-1]["test_error"], mb[-1]["test_error"]) for ma, mb in pairs]
      rows.append((f"{dataset}: {la} ends lower in test error than {lb}",
                   f"final test error, {la} vs {lb}",
                   " / ".join(f"{x:.4f} vs {y:.4f}" for x, y in fin),
                   f"lower in {sum(x < y for x, y in fin)} of {len(fin)}",
                   str(verdicts.compare([x for x, _ in fin], [y for _, y in fin], lower=True))))
  return (f"\nThe claims, seed by seed (values in seed order). {verdicts.RULE}\n\n"
          "| claim | measure | per seed | how many seeds | verdict |\n|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))
