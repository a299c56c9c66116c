"""Figure 2: the attentive reader on cloze questions."""

from __future__ import annotations

import math
from pathlib import Path

from configs import reader as reader_config
from experiments.runner import figures
from lnorm import norms
from lnorm.data import cloze
from scripts.paper import verdicts
from scripts.paper.runs import first, header, mean_sd, out_dir, reached, run_all
from scripts.paper.runs import seeds, steps_table


_LSTM, _BN, _LN = (norms.label(n, "LSTM") for n in (norms.NONE, norms.BATCH, norms.LAYER))
READER_RUNS = {"lstm": (_LSTM, {"norm": "none"}),
               "bn": (_BN, {"norm": "batch"}),
               "bn_everywhere": ("BN-everywhere", {"norm": "batch", "bn_everywhere": True}),
               "ln": (_LN, {"norm": "layer"}),
               "ln_gain01": (f"{_LN}, gain init 0.1", {"norm": "layer", "ln_gain_init": 0.1}),
               # Not in Figure 2: the other half of the gain claim, that recurrent BN
               # needs its gains to start at 0.1 (Cooijmans et al.) where LN does not.
               "bn_gain1": (f"{_BN}, gain init 1.0", {"norm": "batch", "bn_gain_init": 1.0})}
# With --seeds N only the runs Figure 2's claims compare get N seeds; the
# gain and BN-everywhere variants run once (the config's seed), for time.
READER_SINGLE = ("bn_everywhere", "ln_gain01", "bn_gain1")
READER_LEVELS = (0.7, 0.6, 0.5, 0.45, 0.4)


READER_NLL_LEVELS = (1.3, 1.0, 0.7)


# The folders of the stand-ins: those the presets read, and every one
# make_cloze.py --standin builds (a record of an earlier preset may read another).
READER_STANDINS = sorted({reader_config.get_config(p).questions_dir
                          for p in ("paper", "cpu", "smoke")} | set(cloze.STANDINS))


# What each stand-in is, by its folder's name (cnn_standin*: the older one).
STANDIN_DATA = {
    "news_standin": (
        "cloze questions that `python scripts/make_cloze.py --out <data_dir>/news_standin --news "
        "--text_dir ../shared/data/text` builds from the news in Reuters-21578, BBC News and "
        "NLTK's ABC news: entities found by spaCy's en_core_web_sm (hand precision 93/100, "
        "results/cloze_ner/), mentions merged per article, entity ids permuted per question"),
    "cnn_standin": ("cloze questions that `scripts/make_cloze.py` builds from ABC news and "
                    "Gutenberg books")}
STANDIN_NOTE = ("**Every number here is from the stand-in** (`{name}`), the {what}, not from "
                "DeepMind's CNN corpus (README, \"The data behind the recurrent experiments\").\n\n")


def standin_of(config: dict) -> str:
  """The stand-in folder a reader run read (its questions_dir; a record from
  before questions_dir has the stand-in's folder as its data_dir)."""
  return config.get("questions_dir") or Path(config["data_dir"]).name


def is_standin(config: dict) -> bool:
  """Whether a reader run read a stand-in."""
  return standin_of(config) in READER_STANDINS


def standin_note(config: dict) -> str:
  name = standin_of(config)
  what = STANDIN_DATA["news_standin" if name.startswith("news_standin") else "cnn_standin"]
  return STANDIN_NOTE.format(name=name, what=what)


def fig2(args) -> None:
  """Figure 2: validation error against updates, the attentive reader; with
  ``--seeds N``, LSTM, BN-LSTM and LN-LSTM run N seeds (the mean and spread,
  and the paper's claims seed by seed: seed s of one against seed s of
  another, the same initialisation key and batch order), the other variants once."""
  from experiments.reader import best_valid, frequency_errors  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  records = run_all(args, "configs/reader.py",
                    {k: (k, overrides) for k, (_, overrides) in READER_RUNS.items()},
                    single=READER_SINGLE)
  ms = {k: [s["metrics"] for s in seeds(r)] for k, r in records.items()}
  named = {READER_RUNS[k][0]: m for k, m in ms.items()}
  # Two panels, as fig5's: one alone is too narrow for the title and the
  # legend's six labels (with "(mean of N seeds)").
  figures.plot_panels({"": named}, out_dir(args) / "fig2.png",
                      [figures.Axis("valid_error", "validation error (fraction)"),
                       figures.Axis("train_nll", "train NLL (nats per question)")], x="step",
                      title="Attentive reader, on a stand-in for the CNN corpus (paper Figure 2)"
                      if all(is_standin(s["config"]) for r in records.values() for s in seeds(r))
                      else "Attentive reader (paper Figure 2)")
  c = records["ln"]["config"]
  md = header(args, list(records.values()), "Figure 2: attentive reader")
  if args.seeds > 1:
    md += (f"Only {_LSTM}, {_BN} and {_LN}, the runs Figure 2's claims compare, ran "
           f"{args.seeds} seeds. These ran once (the config's seed), so their cells are that "
           "one run's: " + "; ".join(READER_RUNS[k][0] for k in READER_SINGLE) + ".\n\n")
  n = c["max_passage_tokens"]
  md += (f"Setting: {c['features']} LSTM units, embedding {c['embed']}, batch "
         f"{c['batch_size']}, Adam {c['learning_rate']:g}, {c['num_epochs']} epochs, "
         + (f"passages <= {n} tokens, " if n else "passages of any length, ")
         + ("entities renumbered at every update, " if c.get("permute_entities") else "")
         # Relative to the data folder: no machine's path in results.md.
         + f"data `<data_dir>/{standin_of(c)}`. Errors on "
         "all validation / test questions kept.\n\n"
         + (standin_note(c) if is_standin(c) else "")
         + "![Figure 2](fig2.png)\n\n"
         "| run | best valid error | at step | test error there | final valid error | "
         "s / update |\n|---|---|---|---|---|---|\n")
  for k, runs in ms.items():
    bs = [best_valid(m) for m in runs]
    secs = [sum(r["epoch_time_s"] for r in m) / max(m[-1]["step"], 1) for m in runs]
    md += (f"| {READER_RUNS[k][0]} | {mean_sd(b['valid_error'] for b in bs)} | "
           f"{mean_sd((b['step'] for b in bs), '.0f')} | "
           f"{mean_sd(b['test_error'] for b in bs)} | "
           f"{mean_sd(m[-1]['valid_error'] for m in runs)} | {mean_sd(secs, '.3f')} |\n")
  base = frequency_errors(ml_collections.ConfigDict(c))
  md += ("\nWord-count baselines on the same questions (Hermann et al.'s): the passage's most "
         f"frequent entity, valid error {base['valid_maxfreq']:.4f}, test "
         f"{base['test_maxfreq']:.4f}; the most frequent not in the query, valid "
         f"{base['valid_exclusive']:.4f}, test {base['test_exclusive']:.4f}.\n")
  md += "\nUpdates to reach a validation error:\n\n" + steps_table(
      named, "valid_error", READER_LEVELS)
  md += ("\nUpdates to reach a training NLL (the mean since the previous record): when "
         "each run leaves the plateau it starts on (results/reader_probe/):\n\n"
         + steps_table(named, "train_nll", READER_NLL_LEVELS))
  md += claims(ms, base)
  (out_dir(args) / "results.md").write_text(md)
  print(md)


def claims(ms: dict[str, list[list[dict]]], base: dict[str, float]) -> str:
  """The paper's claims on Figure 2, seed by seed (seed s of LN against seed s
  of the LSTM and of BN-LSTM): LN reaches their best validation error sooner,
  and ends at a lower one; and which runs beat the better word-count baseline
  (``base``: frequency_errors) on validation error, by how much."""
  from experiments.reader import best_valid  # pylint: disable=g-import-not-at-top
  best = lambda m: best_valid(m)["valid_error"]
  rows = []
  for k in ("lstm", "bn"):
    pairs = list(zip(ms["ln"], ms[k]))
    name = READER_RUNS[k][0]
    to = [(first(ln, "valid_error", best(b), "step"), best_valid(b)["step"]) for ln, b in pairs]
    pct = [f"{100 * a / b:.0f}%" for a, b in to if a != math.inf and b]
    rows.append((f"LN trains faster than {name}",
                 f"update at which LN reaches {name}'s best validation error, against {name}'s",
                 " / ".join(f"{reached(a)} vs {b}" for a, b in to),
                 f"sooner in {sum(a < b for a, b in to)} of {len(pairs)}"
                 + (f"; {', '.join(pct)} of {name}'s updates" if pct else ""),
                 str(verdicts.compare([a for a, _ in to], [b for _, b in to], lower=True))))
  for k in ("lstm", "bn"):
    pairs = list(zip(ms["ln"], ms[k]))
    name = READER_RUNS[k][0]
    vs = [(best(ln), best(b)) for ln, b in pairs]
    rows.append((f"LN converges to a better validation error than {name}",
                 f"best validation error, LN vs {name}",
                 " / ".join(f"{a:.4f} vs {b:.4f}" for a, b in vs),
                 f"LN lower in {sum(a < b for a, b in vs)} of {len(pairs)}",
                 str(verdicts.compare([a for a, _ in vs], [b for _, b in vs], lower=True))))
  word, top = min((("most frequent entity", base["valid_maxfreq"]),
                   ("exclusive frequency", base["valid_exclusive"])), key=lambda x: x[1])
  for k, runs in ms.items():
    gain = [top - best(m) for m in runs]
    rows.append((f"{READER_RUNS[k][0]} beats counting words",
                 f"best validation error, and how far below the {word} baseline's {top:.4f}",
                 " / ".join(f"{best(m):.4f} ({g:+.4f})" for m, g in zip(runs, gain)),
                 f"below it in {sum(g > 0 for g in gain)} of {len(runs)}; baseline minus "
                 f"best {mean_sd(gain)}", str(verdicts.passes([g > 0 for g in gain]))))
  return (f"\nThe paper's claims, seed by seed (values in seed order). {verdicts.RULE}\n\n"
          "| claim | measure | per seed | how many seeds | verdict |\n|---|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))
