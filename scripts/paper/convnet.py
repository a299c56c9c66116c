"""Section 6.7: ConvNets on MNIST and Fashion-MNIST."""

from __future__ import annotations


from lnorm import norms
from scripts.paper.runs import TIME_NOTE, curves, header, out_dir, run_all, summary_row, train_nll_table

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
  (out_dir(args) / "results.md").write_text(md)
  print(md)
