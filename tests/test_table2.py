"""scripts/reproduce.py table2 on fake runs: the paper's rows above ours, the
chance and no-training rows, best-dev selection, Figure 1 and the verdicts."""

import json
import statistics

from lnorm import order_embeddings as oe
from tests.test_reproduce import FakeMainRun, fake_record, judge_smoke_runs, reproduce_on
KEYS = [f"{side}_{c}" for side in ("caption", "image")
        for c in ("r1", "r5", "r10", "mean_rank", "median_rank")]


def _split_metrics(prefix: str, level: float) -> dict:
  m = {f"{prefix}{k}": (level if "_r" in k and "rank" not in k else 100.0 / level)
       for k in KEYS}
  for side in ("caption", "image"):
    m[f"{prefix}{side}_recall_sum"] = 3 * level
  return m


class FakeOERun(FakeMainRun):
  """Stands in for ``experiments.main`` on configs/order_embeddings.py: the
  preset's config.json, and every recall rising with the update, faster and
  higher for LN (each seed a little higher), with dev peaking at update 300
  and falling after (so best dev is not the last evaluation)."""
  commands: list[list[str]] = []

  def __init__(self, cmd, **_):
    FakeOERun.commands.append(cmd)
    config, wd = fake_record(cmd)
    ln, seed = config["norm"] == "layer", config["seed"]
    records = []
    for step in (100, 200, 300, 400):
      dev = (20 if ln else 10) + seed + (step if step <= 300 else 200) / 10
      test = dev + 1
      records.append({"step": step, "train_loss": 1000.0 / step, "epoch_time_s": 10.0,
                      "examples_per_sec": 12.8, **_split_metrics("dev_", dev),
                      **_split_metrics("test_", test)})
    (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # 5,120 training images: the smoke preset's 10 passes of batch 128 end at update 400
    # (table2.final_step), the last record's.
    (wd / "init_metrics.json").write_text(json.dumps(
        {"num_images": {"train": 5120, "dev": 113, "test": 125},
         "metrics": {**_split_metrics("dev_", 1.0 + seed), **_split_metrics("test_", 2.0 + seed)}}))
    self.returncode = 0


def test_table2_rows_verdicts_and_figure(tmp_path, monkeypatch):
  FakeOERun.commands = []
  judge_smoke_runs(monkeypatch)
  reproduce_on(monkeypatch, tmp_path, FakeOERun, ["table2", "--preset", "smoke", "--seeds", "2"],
               "configs/order_embeddings.py:smoke")
  assert sorted(c[-1] for c in FakeOERun.commands if c[-1].startswith("--config.seed")) == [
      "--config.seed=1", "--config.seed=1"]
  out = tmp_path / "res" / "table2_smoke"
  assert (out / "fig1.png").read_bytes().startswith(b"\x89PNG")
  assert (out / "layer_seed1" / "init_metrics.json").exists()
  md = (out / "results.md").read_text()
  lines = md.splitlines()
  # The paper's rows first, marked as the paper's and COCO.
  i = lines.index("| paper: OE [Vendrov et al., 2016] | COCO, 1,000 test images | 46.6 | 79.3 "
                  "| 89.1 | 5.2 | 37.8 | 73.6 | 85.7 | 7.9 | |")
  assert lines[i + 1] == ("| paper: OE + LN | COCO, 1,000 test images | 48.5 | 80.6 | 89.8 | 5.1 "
                          "| 38.9 | 74.3 | 86.3 | 7.6 | |")
  chance = oe.chance_metrics(125)
  assert lines[i + 2].startswith(
      f"| chance (a random ranking) | Flickr8k-1k stand-in, 125 test images | "
      f"{chance['caption_r1']:.1f} | ")
  assert lines[i + 2].split(" | ")[9] == f"{chance['image_mean_rank']:.1f}"  # 63.0
  assert lines[i + 3].startswith("| no training: OE (GRU) at initialisation | Flickr8k-1k "
                                 "stand-in | 2.5 ± 0.7 | ")
  # Best dev is update 300 (dev falls after it): test = dev + 1 = 10 + seed + 30 + 1.
  ln_best = [21 + 30 + s for s in range(2)]
  base_best = [11 + 30 + s for s in range(2)]
  row = next(l for l in lines if l.startswith("| ours: OE + LN (LN-GRU), best dev |"))
  cells = row.rstrip(" |").split(" | ")
  assert cells[1] == "Flickr8k-1k stand-in"
  assert cells[2] == f"{statistics.mean(ln_best):.1f} ± {statistics.stdev(ln_best):.1f}"
  assert cells[-1] == "300"
  last = next(l for l in lines if l.startswith("| ours: OE (GRU), last evaluation |"))
  assert last.rstrip(" |").split(" | ")[-1] == "400"
  # LN is ahead at all 4 evaluations, reaches the baseline's best dev recall sum (3 x 40, at
  # update 300) at update 200 and ends higher in both seeds, the seeds' ranges apart.
  assert "| 4 of 4 / 4 of 4 | ahead at most evaluations in 2 of 2 | **holds** (2 of 2 seeds) |" in md
  assert ("| 200 vs 300 / 200 vs 300 | sooner in 2 of 2 | **holds** (2 of 2 seeds, ranges apart) |"
          in md)
  total = lambda x: 6 * x  # both directions' R@1+5+10
  assert (" / ".join(f"{total(a):.1f} vs {total(b):.1f}" for a, b in zip(ln_best, base_best))
          + " | LN higher in 2 of 2; the seeds' ranges do not overlap | **holds** (2 of 2 seeds, "
          "ranges apart) |") in md
  assert "EfficientNet-Lite0" in md and "1280-d global average pool" in md and "10 crops" in md
  assert "Seeds: 2 per run." in md
