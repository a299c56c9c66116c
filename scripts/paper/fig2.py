"""Figure 2: the attentive reader on cloze questions."""

from __future__ import annotations

from pathlib import Path

from configs import reader as reader_config
from experiments.runner import figures
from lnorm import norms
from scripts.paper.runs import header, out_dir, run_all, steps_table


_LSTM, _BN, _LN = (norms.label(n, "LSTM") for n in (norms.NONE, norms.BATCH, norms.LAYER))
READER_RUNS = {"lstm": (_LSTM, {"norm": "none"}),
               "bn": (_BN, {"norm": "batch"}),
               "bn_everywhere": ("BN-everywhere", {"norm": "batch", "bn_everywhere": True}),
               "ln": (_LN, {"norm": "layer"}),
               "ln_gain01": (f"{_LN}, gain init 0.1", {"norm": "layer", "ln_gain_init": 0.1}),
               # Not in Figure 2: the other half of the gain claim, that recurrent BN
               # needs its gains to start at 0.1 (Cooijmans et al.) where LN does not.
               "bn_gain1": (f"{_BN}, gain init 1.0", {"norm": "batch", "bn_gain_init": 1.0})}
READER_LEVELS = (0.7, 0.6, 0.5, 0.45, 0.4)


READER_NLL_LEVELS = (1.3, 1.0, 0.7)


# The folders of the stand-ins that the presets read (make_cloze.py --standin).
READER_STANDINS = sorted({reader_config.get_config(p).questions_dir
                          for p in ("paper", "cpu", "smoke")})


STANDIN_NOTE = ("**Every number here is from the stand-in**, the cloze questions that "
                "`scripts/make_cloze.py` builds from ABC news and Gutenberg books, not from "
                "DeepMind's CNN corpus (README, \"The data behind the recurrent experiments\").\n\n")


def is_standin(config: dict) -> bool:
  """Whether a reader run read a stand-in (its questions_dir names one; a record
  from before questions_dir has the stand-in's folder as its data_dir)."""
  return (config.get("questions_dir") or Path(config["data_dir"]).name) in READER_STANDINS


def fig2(args) -> None:
  """Figure 2: validation error against updates, the attentive reader."""
  from experiments.reader import best_valid  # pylint: disable=g-import-not-at-top
  records = run_all(args, "configs/reader.py",
                    {k: (k, overrides) for k, (_, overrides) in READER_RUNS.items()})
  ms = {k: r["metrics"] for k, r in records.items()}
  figures.plot({READER_RUNS[k][0]: m for k, m in ms.items()}, out_dir(args) / "fig2.png",
               figures.Axis("valid_error", "validation error (fraction)"), x="step",
               title="Attentive reader, on a stand-in for the CNN corpus (paper Figure 2)"
               if all(is_standin(r["config"]) for r in records.values())
               else "Attentive reader (paper Figure 2)")
  c = records["ln"]["config"]
  md = header(args, list(records.values()), "Figure 2: attentive reader")
  md += (f"Setting: {c['features']} LSTM units, embedding {c['embed']}, batch "
         f"{c['batch_size']}, Adam {c['learning_rate']:g}, {c['num_epochs']} epochs, passages "
         f"<= {c['max_passage_tokens'] or 'any'} tokens, "
         + ("entities renumbered at every update, " if c.get("permute_entities") else "")
         + f"data `{Path(c['data_dir']) / c.get('questions_dir', '')}`. Errors on "
         "all validation / test questions kept.\n\n"
         + (STANDIN_NOTE if is_standin(c) else "")
         + "![Figure 2](fig2.png)\n\n"
         "| run | best valid error | at step | test error there | final valid error | "
         "s / update |\n|---|---|---|---|---|---|\n")
  for k, m in ms.items():
    b = best_valid(m)
    secs = sum(r["epoch_time_s"] for r in m) / max(m[-1]["step"], 1)
    md += (f"| {READER_RUNS[k][0]} | {b['valid_error']:.4f} | {b['step']} | "
           f"{b['test_error']:.4f} | {m[-1]['valid_error']:.4f} | {secs:.3f} |\n")
  from experiments.reader import frequency_errors  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  base = frequency_errors(ml_collections.ConfigDict(c))
  md += ("\nWord-count baselines on the same questions (Hermann et al.'s): the passage's most "
         f"frequent entity, valid error {base['valid_maxfreq']:.4f}, test "
         f"{base['test_maxfreq']:.4f}; the most frequent not in the query, valid "
         f"{base['valid_exclusive']:.4f}, test {base['test_exclusive']:.4f}.\n")
  named = {READER_RUNS[k][0]: m for k, m in ms.items()}
  md += "\nUpdates to reach a validation error:\n\n" + steps_table(
      named, "valid_error", READER_LEVELS)
  md += ("\nUpdates to reach a training NLL (the mean since the previous record): when "
         "each run leaves the plateau it starts on (results/reader_probe/):\n\n"
         + steps_table(named, "train_nll", READER_NLL_LEVELS))
  (out_dir(args) / "results.md").write_text(md)
  print(md)
