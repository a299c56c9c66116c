"""Figure 4: DRAW on binarized MNIST."""

from __future__ import annotations

import math
import statistics

from experiments.runner import figures
from lnorm import norms
from scripts.paper import verdicts
from scripts.paper.runs import TIME_NOTE, epochs_to, first, header, mean_sd, out_dir, per_seed, reached, run_all, seconds, seeds, train_time_and_rate


# The paper's two runs (LN on the cell state only, eqs. 29-31), and the full
# LN-LSTM (eqs. 20-22) beside them.
DRAW_NAMES = {n: norms.label(n, "LSTM") for n in (norms.NONE, norms.LAYER_C, norms.LAYER)}
# A run whose final test bound is this close to the mean image's (nats) has
# learned nothing of its input (the bound stays there from the first epochs).
STUCK_NATS = 1.0


def fig4(args) -> None:
  """The paper's two runs, and the full LN-LSTM beside them (not in the paper)."""
  records = run_all(args, "configs/draw.py", {n: (n, {"norm": n}) for n in DRAW_NAMES},
                    keep=("samples.png", "canvas.png"))
  ms = {n: [s["metrics"] for s in seeds(r)] for n, r in records.items()}
  figures.plot({DRAW_NAMES[n]: m for n, m in ms.items()}, out_dir(args) / "fig4.png",
               figures.Axis("test_bound", "test bound (nats per image)"),
               title="DRAW on binarized MNIST (paper Figure 4)")
  # Convergence: epochs each run needs to reach the baseline's final bound
  # (its mean over seeds), and rounder bounds that the baseline passes on its
  # way there.
  base_final = statistics.mean(m[-1]["test_bound"] for m in ms["none"])
  top = 10 * math.ceil(base_final / 10)
  marks = [top + 40, top + 20, top + 10, top, base_final]
  c = records["none"]["config"]
  md = header(args, list(records.values()), "Figure 4: DRAW on binarized MNIST")
  md += (f"Setting: {c['num_glimpses']} glimpses, {c['features']} LSTM units, latent "
         f"{c['latent']}, batch {c['batch_size']}, Adam {c['learning_rate']:g}, "
         f"{c['num_epochs']} epochs. Bound: nats per image on all test images, one "
         "posterior sample each.\n\n![Figure 4](fig4.png)\n\n"
         "| run | final test bound | best test bound | final valid bound | final train bound "
         "| train time (s) | train examples/s (median epoch) |\n|---|---|---|---|---|---|---|\n")
  for n, m in ms.items():
    times = [train_time_and_rate(x) for x in m]
    md += (f"| {DRAW_NAMES[n]} | {mean_sd((x[-1]['test_bound'] for x in m), '.2f')} | "
           f"{mean_sd((min(y['test_bound'] for y in x) for x in m), '.2f')} | "
           f"{mean_sd((x[-1]['valid_bound'] for x in m), '.2f')} | "
           f"{mean_sd((x[-1]['train_bound'] for x in m), '.2f')} | "
           f"{seconds(t for t, _ in times)} | "
           f"{mean_sd((v for _, v in times), ',.0f')} |\n")
  md += TIME_NOTE
  md += "\nEpochs to reach a test bound (the last is the baseline's final bound):\n\n"
  md += "| run | " + " | ".join(f"<= {b:.1f}" for b in marks) + " |\n"
  md += "|---|" + "---|" * len(marks) + "\n"
  md += "".join(f"| {DRAW_NAMES[n]} | " + " | ".join(
      per_seed(epochs_to(x, "test_bound", b) for x in m) for b in marks) + " |\n"
      for n, m in ms.items())
  md += "\nTest bound by epoch:\n\n| epoch | " + " | ".join(DRAW_NAMES[n] for n in records)
  md += " |\n|---|" + "---|" * len(records) + "\n"
  for i in range(max(len(x) for m in ms.values() for x in m)):
    md += f"| {i + 1} | " + " | ".join(
        mean_sd((x[i]["test_bound"] for x in m), ".2f") if all(i < len(x) for x in m) else ""
        for m in ms.values()) + " |\n"
  floor = _mean_image_nll(c)
  md += (f"\nFor scale: drawing every test image from the training set's per-pixel means "
         f"gives {floor:.2f} nats, the bound of a model that ignores its input.")
  stuck = stuck_runs(ms, floor)
  md += (f" Runs that ended within {STUCK_NATS:g} nat of it (they learned nothing of their "
         f"input): {', '.join(stuck)}. A claim below that compares seed s with such a seed "
         "compares a model with one that did not train.\n" if stuck else "\n")
  md += claims(ms)
  md += "\nSamples from the prior (Bernoulli means), per run: `<run>/samples.png`; the "
  md += "canvas building up glimpse by glimpse: `<run>/canvas.png`.\n"
  (out_dir(args) / "results.md").write_text(md)
  print(md)


def stuck_runs(ms: dict[str, list[list[dict]]], floor: float) -> list[str]:
  """The seeds (``<label> seed <s>``) whose final test bound ended within
  STUCK_NATS of ``floor``, the input-ignoring model's bound."""
  return [f"{DRAW_NAMES[n]} seed {i}" for n, m in ms.items() for i, x in enumerate(m)
          if abs(x[-1]["test_bound"] - floor) <= STUCK_NATS]


def claims(ms: dict[str, list[list[dict]]]) -> str:
  """The paper's claim on Figure 4, that LN on c_t converges faster, seed by
  seed (seed s of LN against seed s of the baseline: the same initialisation
  key and batch order)."""
  pairs = list(zip(ms[norms.LAYER_C], ms[norms.NONE]))
  n = len(pairs)
  ahead = [sum(a["test_bound"] < b["test_bound"] for a, b in zip(ln, base)) for ln, base in pairs]
  epochs = [min(len(ln), len(base)) for ln, base in pairs]
  to = [(first(ln, "test_bound", base[-1]["test_bound"]), base[-1]["epoch"]) for ln, base in pairs]
  rows = [("LN on c_t is ahead along training", "epochs at which LN's test bound is the lower",
           " / ".join(f"{k} of {e}" for k, e in zip(ahead, epochs)),
           f"ahead in most epochs in {sum(2 * k > e for k, e in zip(ahead, epochs))} of {n}",
           str(verdicts.passes([2 * k > e for k, e in zip(ahead, epochs)]))),
          ("LN on c_t converges faster", "epoch at which LN reaches its seed's baseline final "
           "test bound, against the baseline's last epoch",
           " / ".join(f"{reached(a)} vs {b}" for a, b in to),
           f"sooner in {sum(a < b for a, b in to)} of {n}",
           str(verdicts.compare([a for a, _ in to], [b for _, b in to], lower=True)))]
  return (f"\nThe paper's claim, seed by seed (values in seed order). {verdicts.RULE}\n\n"
          "| claim | measure | per seed | how many seeds | verdict |\n|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))


def _mean_image_nll(config: dict) -> float:
  """Test NLL (nats per image) of independent pixels with the training means."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from lnorm.data import binarized_mnist  # pylint: disable=g-import-not-at-top
  data = binarized_mnist.load(config["data_source"], config["data_dir"] or None,
                              splits=("train", "test"))
  flat = {k: v.reshape(len(v), -1).astype(np.float64) for k, v in data.items()}
  p = np.clip(flat["train"].mean(0), 1e-6, 1 - 1e-6)
  x = flat["test"]
  return float(-(x * np.log(p) + (1 - x) * np.log1p(-p)).sum(1).mean())
