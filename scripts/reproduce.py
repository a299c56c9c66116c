r"""One command per table or figure of the paper.

  python scripts/reproduce.py table1   [--preset paper|cpu|smoke]   # Table 1
  python scripts/reproduce.py fig6_lr  [--preset ...]   # learning-rate search for fig6
  python scripts/reproduce.py fig6     [--preset ...]   # Figure 6, permutation-invariant MNIST
  python scripts/reproduce.py convnet  [--preset ...]   # section 6.7
  python scripts/reproduce.py fig4     [--preset ...]   # Figure 4, DRAW on binarized MNIST
  python scripts/reproduce.py fig2     [--preset ...]   # Figure 2, attentive reader (stand-in data)
  python scripts/reproduce.py fig5     [--preset ...]   # Figure 5, handwriting on IAM-OnDB
  python scripts/reproduce.py table3   [--preset ...]   # Table 3, Figure 3, skip-thoughts (stand-in books)
  python scripts/reproduce.py geometry                  # section 5.2, Fisher of normalized GLMs

Each run goes through ``experiments.main`` into ``<runs_dir>/<target>/<preset>/<run>``
(rerunning the command resumes there), then its config.json, metrics.jsonl
and outputs are copied into ``<results_dir>/<target>/`` (``<target>_<preset>/``
for the cpu and smoke presets) beside a results.md that names the command and
commit that made them. ``--results_dir`` is ``<runs_dir>/results`` unless told
otherwise: ``--results_dir results`` rewrites the committed results.

``--seeds N`` runs each run with N seeds (the config's seed, then the next
N - 1; workdirs ``<run>``, ``<run>_seed<s>``): the tables then give the mean
and standard deviation over the seeds, and the figures draw the mean with a
band over the seeds' range. ``--jobs N`` runs up to N of a target's runs at
once, each logging to ``<run>.log`` beside its workdir: on a small CPU machine,
where one XLA process leaves cores idle, that can finish sooner (README,
ConvNets).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from configs import pi_mnist as pi_mnist_config  # noqa: E402
from configs import reader as reader_config  # noqa: E402
from experiments import figures  # noqa: E402

NORM_NAMES = {"none": "Baseline", "layer": "Layer norm", "batch": "Batch norm"}
TIME_NOTE = ("\nTrain time: the training epochs' seconds, summed. It leaves out evaluation, "
             "checkpoints, compilation and any time between a stop and its resume.\n")


def run_all(args, config: str, runs: dict, keep=()) -> dict:
  """Runs (or resumes) each of ``runs`` ({key: (name, overrides)}), each with
  ``--seeds`` seeds, up to ``--jobs`` at a time, then copies each run's record
  into the results folder and returns the records by key: the first seed's,
  with every seed's record (itself first) under ``seeds``. With one job a
  run's progress goes to the terminal; with more, each run writes it to
  ``<name>.log`` beside its workdir. A workdir that holds a finished record
  of the same config is not run again (:func:`finished`)."""
  seeds = _seed_names(args, config)
  runs = {key: [(name + suffix, {**overrides, **seed})
                for suffix, seed in seeds] for key, (name, overrides) in runs.items()}
  pending, active, failed = [r for rs in runs.values() for r in rs], [], []
  for name, overrides in list(pending):
    if finished(_workdir(args, name), config, args.preset, overrides):
      print(f"finished: {name} (its record is complete; not run again)", flush=True)
      pending.remove((name, overrides))
  while active or (pending and not failed):
    while pending and not failed and len(active) < args.jobs:
      name, overrides = pending.pop(0)
      wd = _workdir(args, name)
      cmd = [sys.executable, "-m", "experiments.main", f"--config={config}:{args.preset}",
             f"--workdir={wd}", *(f"--config.{k}={v}" for k, v in overrides.items())]
      print("+", " ".join(cmd[1:]), flush=True)
      log = None
      if args.jobs > 1:
        wd.parent.mkdir(parents=True, exist_ok=True)
        log = open(wd.parent / f"{name}.log", "ab")  # pylint: disable=consider-using-with
      active.append((name, log, subprocess.Popen(cmd, cwd=REPO, stdout=log,
                                                 stderr=subprocess.STDOUT if log else None)))
    done = [j for j in active if j[2].poll() is not None]
    if not done:
      time.sleep(0.5)
    for job in done:
      active.remove(job)
      name, log, proc = job
      if log:
        log.close()
        print(f"{'failed' if proc.returncode else 'finished'}: {name} (log: {log.name})",
              flush=True)
      if proc.returncode:
        failed.append(name)
  if failed:
    failed = [name for rs in runs.values() for name, _ in rs if name in failed]  # target's order
    sys.exit(f"error: run(s) {', '.join(failed)} failed; rerun the same command to resume")
  records = {}
  for key, rs in runs.items():
    per_seed = [_collect(args, name, keep) for name, _ in rs]
    records[key] = {**per_seed[0], "seeds": per_seed}
  return records


def finished(wd: Path, config: str, preset: str, overrides: dict) -> bool:
  """Whether ``wd`` holds a whole run of ``config:preset`` with ``overrides``:
  a config.json of that very config (the data path aside) and metrics up to
  its last epoch. Such a record needs no checkpoint: the config.json and
  metrics.jsonl that results/ keeps, copied back into a runs folder on another
  machine, count as done."""
  try:
    recorded = json.loads((wd / "config.json").read_text())["config"]
    last = json.loads((wd / "metrics.jsonl").read_text().splitlines()[-1])
  except (OSError, ValueError, KeyError, IndexError, TypeError):
    return False
  want = _config_module(config).get_config(preset)
  for k, v in overrides.items():
    want[k] = v
  want = json.loads(json.dumps(want.to_dict()))  # tuples as JSON lists
  if "num_epochs" not in want or not isinstance(recorded, dict):
    return False
  # Where the data lives is not what the run is (the loaders check what they read).
  strip = lambda c: {k: v for k, v in c.items() if k not in ("data_dir", "questions_dir")}
  return strip(recorded) == strip(want) and last.get("epoch") == want["num_epochs"]


def _config_module(config: str):
  spec = importlib.util.spec_from_file_location("_config", REPO / config)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _seed_names(args, config: str) -> list[tuple[str, dict]]:
  """(workdir suffix, overrides) per seed: the config's own seed first, in the
  workdir a one-seed run uses, so that adding seeds keeps the runs made."""
  if args.seeds == 1:
    return [("", {})]
  base = _config_module(config).get_config(args.preset).seed
  return [("", {})] + [(f"_seed{s}", {"seed": s}) for s in range(base + 1, base + args.seeds)]


def seeds(record: dict) -> list[dict]:
  """A record's per-seed records (itself alone when it has none)."""
  return record.get("seeds", [record])


mean_sd = figures.mean_sd


def per_seed(values) -> str:
  """Each seed's value, in seed order, or one value that all seeds share: for
  counts such as epochs to a level, which a mean would hide ("not reached")."""
  values = [str(v) for v in values]
  return values[0] if len(set(values)) == 1 else " / ".join(values)


def _workdir(args, name: str) -> Path:
  return (REPO / args.runs_dir / args.target / args.preset / name).resolve()


def _collect(args, name: str, keep) -> dict:
  wd = _workdir(args, name)
  dest = out_dir(args) / name
  dest.mkdir(parents=True, exist_ok=True)
  for f in ("config.json", "metrics.jsonl", *keep):
    shutil.copy2(wd / f, dest / f)
  return figures.read_run(wd)


def out_dir(args) -> Path:
  """<results_dir>/<target> for the paper preset, <results_dir>/<target>_<preset>
  otherwise."""
  suffix = "" if args.preset == "paper" else f"_{args.preset}"
  return REPO / results_dir(args) / f"{args.target}{suffix}"


def results_dir(args) -> Path:
  return args.results_dir if args.results_dir is not None else args.runs_dir / "results"


def header(args, records: list[dict], title: str) -> str:
  records = [s for r in records for s in seeds(r)]
  commits = sorted({r["git_commit"] for r in records})
  resumed = sorted({x["git_commit"] for r in records for x in r.get("resumed_with", [])})
  command = f"python scripts/reproduce.py {args.target} --preset {args.preset}"
  if args.seeds > 1:
    command += f" --seeds {args.seeds}"
  if args.results_dir is not None:
    command += f" --results_dir {args.results_dir}"
  # The core count matters: XLA's CPU thread pool follows it, and with another
  # count some sums round differently (README, "Running experiments").
  hosts = sorted({f"{h['cpu']}, {h['cpu_threads']} core(s)" for r in records
                  for h in [r.get("host"), *(x.get("host") for x in r.get("resumed_with", []))]
                  if h})
  return (f"# {title}\n\nCommand: `{command}`  \nCommit: {', '.join(commits)}  \n"
          + (f"Resumed or re-read by: {', '.join(resumed)}  \n" if resumed else "")
          + (f"Host: {'; '.join(hosts)}  \n" if hosts else "") +
          f"Versions: {json.dumps(records[0]['versions'])}\n\n"
          + (f"Seeds: {args.seeds} per run. A cell reads mean ± standard deviation over the "
             "seeds, or each seed's value in turn (a / b / ...); a figure's band spans the "
             "lowest to the highest seed.\n\n" if args.seeds > 1 else ""))


def table1(args) -> None:
  r = run_all(args, "configs/invariance.py", {0: ("table1", {})}, keep=("table1.md",))[0]
  (out_dir(args) / "results.md").write_text(
      header(args, [r], "Table 1") + (out_dir(args) / "table1" / "table1.md").read_text())


def geometry(args) -> None:
  """Section 5.2: no training runs; the Fisher of small GLMs in float64 (a few
  minutes on CPU). The presets are all the same computation."""
  from experiments import geometry as geo  # pylint: disable=g-import-not-at-top
  command = "python scripts/reproduce.py geometry" + (
      f" --results_dir {args.results_dir}" if args.results_dir is not None else "")
  print(geo.write_results(out_dir(args), command))


def fig6_lr(args) -> None:
  """Each (norm, batch size, rate) for a few epochs; the lowest final
  validation error picks the rate."""
  runs = {}
  for batch, rates in pi_mnist_config.LR_GRID.items():
    for norm in NORM_NAMES:
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


def _first(metrics: list[dict], key: str, threshold: float, at: str = "epoch") -> float:
  """``at`` (epoch or step) of the first record with ``key`` <= ``threshold``;
  inf if none (records without ``key`` never count)."""
  return next((m[at] for m in metrics if m.get(key, math.inf) <= threshold), math.inf)


def _reached(x: float) -> str:
  return "not reached" if x == math.inf else str(x)


def _epochs_to(metrics: list[dict], key: str, threshold: float) -> str:
  return _reached(_first(metrics, key, threshold))


def _steps_table(ms: dict[str, list[dict]], key: str, levels, fmt: str = "g") -> str:
  """A row per named run: the first step at which ``key`` <= each level."""
  return ("| run | " + " | ".join(f"<= {v:{fmt}}" for v in levels) + " |\n|---|"
          + "---|" * len(levels) + "\n" + "".join(
              f"| {name} | " + " | ".join(_reached(_first(m, key, v, "step")) for v in levels)
              + " |\n" for name, m in ms.items()))


def _train_time_and_rate(m: list[dict]) -> tuple[float, float]:
  """Seconds spent in the training epochs, summed (no evaluation, checkpoints,
  compilation, or time between a stop and its resume), and the median epoch's
  training examples/s."""
  return (sum(x["epoch_time_s"] for x in m),
          sorted(x["examples_per_sec"] for x in m)[len(m) // 2])


def _train_nll_table(records: dict[str, dict]) -> str:
  """Training NLL at a few epochs, and the epochs each run needs to get below
  a few levels: how fast each one trains (claim (c) of Figure 6, and section
  6.7's "speedup")."""
  n = max(len(s["metrics"]) for r in records.values() for s in seeds(r))
  epochs = [e for e in (1, 2, 5, 10, 20, 40, 60) if e <= n]
  levels = (0.1, 0.03, 0.01, 0.001)
  md = ("\nTraining NLL (the mean over an epoch's minibatches) by epoch, and the first "
        "epoch at or below a level:\n\n| run | " + " | ".join(f"epoch {e}" for e in epochs) + " | "
        + " | ".join(f"<= {v:g}" for v in levels) + " |\n|---|"
        + "---|" * (len(epochs) + len(levels)) + "\n")
  for name, r in records.items():
    ms = [s["metrics"] for s in seeds(r)]
    md += (f"| {name} | " + " | ".join(
        mean_sd((m[e - 1]["train_nll"] for m in ms), ".3g") if all(e <= len(m) for m in ms)
        else "" for e in epochs) + " | "
        + " | ".join(per_seed(_epochs_to(m, "train_nll", v) for m in ms) for v in levels)
        + " |\n")
  return md


def _summary_row(name: str, r: dict, extra: str) -> str:
  ms = [s["metrics"] for s in seeds(r)]
  times = [_train_time_and_rate(m) for m in ms]
  return (f"| {name} | {extra}{mean_sd(m[-1]['test_error'] for m in ms)} | "
          f"{mean_sd(min(x['test_error'] for x in m) for m in ms)} | "
          f"{per_seed(_epochs_to(m, 'test_error', 0.02) for m in ms)} | "
          f"{mean_sd((m[-1]['train_nll'] for m in ms), '.3g')} | "
          f"{mean_sd((t for t, _ in times), '.0f')} | {mean_sd((v for _, v in times), ',.0f')} | "
          f"{r['config']['learning_rate']:g} |\n")


def _curves(records: dict, path: Path, title: str, panel, label) -> None:
  """Per panel (a row): training NLL on a log scale and test error, by epoch;
  a run of several seeds is their mean, with a band."""
  panels = {}
  for key, r in records.items():
    panels.setdefault(panel(key), {})[label(key)] = [s["metrics"] for s in seeds(r)]
  figures.plot_panels(panels, path, [figures.Axis("train_nll", "train NLL (nats per image)",
                                                  yscale="log"),
                                     figures.Axis("test_error", "test error (fraction)",
                                                  ymax=0.1)],
                      title=title)


def fig6(args) -> None:
  lrs = pi_mnist_config.LEARNING_RATES
  if not lrs:
    sys.exit("error: configs/pi_mnist.py has no LEARNING_RATES yet; run "
             "`python scripts/reproduce.py fig6_lr` and copy its choice there")
  records = run_all(args, "configs/pi_mnist.py", {
      (norm, batch): (f"{norm}_b{batch}", {"norm": norm, "batch_size": batch,
                                           "learning_rate": lrs[norm, batch]})
      for batch in (128, 4) for norm in NORM_NAMES})
  _curves(records, out_dir(args) / "fig6.png", "Permutation-invariant MNIST",
          lambda k: f"batch size {k[1]}", lambda k: NORM_NAMES[k[0]])
  md = header(args, list(records.values()), "Figure 6: permutation-invariant MNIST")
  md += ("![Figure 6](fig6.png)\n\n| run | final test error | best test error | epochs to "
         "2% test error | final train NLL | train time (s) | examples/s (median epoch) | "
         "learning rate |\n|---|---|---|---|---|---|---|---|\n")
  md += "".join(_summary_row(f"{NORM_NAMES[n]}, batch {b}", r, "")
                for (n, b), r in records.items())
  md += TIME_NOTE
  md += _train_nll_table({f"{NORM_NAMES[n]}, batch {b}": r for (n, b), r in records.items()})
  md += _fig6_claims(records)
  (out_dir(args) / "results.md").write_text(md)
  print(md)


def _fig6_claims(records: dict) -> str:
  """The paper's three claims on Figure 6, seed by seed: seed s of one run
  against seed s of another (the same initialisation key and minibatch
  order), and in how many seeds each comparison goes one way, so that a
  verdict can be weighed against the spread between seeds."""
  ms = lambda norm, batch: [s["metrics"] for s in seeds(records[norm, batch])]
  pct = lambda x: f"{100 * x:.2f}%"
  n = len(ms("layer", 4))
  rows = []
  fin = {b: [m[-1]["test_error"] for m in ms("layer", b)] for b in (4, 128)}
  overlap = min(fin[4]) <= max(fin[128]) and min(fin[128]) <= max(fin[4])
  rows.append((
      "(a) layer norm does about as well at batch 4 as at batch 128",
      "final test error, batch 4 vs 128",
      " / ".join(f"{pct(a)} vs {pct(b)}" for a, b in zip(fin[4], fin[128])),
      f"higher at batch 4 in {sum(a > b for a, b in zip(fin[4], fin[128]))} of {n}; the "
      f"seeds' ranges {'overlap' if overlap else 'do not overlap'}"))
  for key, level, what in (("test_error", 0.02, "2% test error"), ("train_nll", 0.1, "training NLL 0.1")):
    ln, bn = ([_first(m, key, level) for m in ms(norm, 4)] for norm in ("layer", "batch"))
    rows.append((
        "(b) layer norm converges faster than batch norm at batch 4",
        f"first epoch at {what}, layer vs batch norm",
        " / ".join(f"{_reached(a)} vs {_reached(b)}" for a, b in zip(ln, bn)),
        f"layer norm sooner in {sum(a < b for a, b in zip(ln, bn))} of {n}"))
  for batch in (4, 128):
    lower = [sum(a["train_nll"] < b["train_nll"] for a, b in zip(l, base))
             for l, base in zip(ms("layer", batch), ms("none", batch))]
    epochs = len(ms("layer", batch)[0])
    rows.append((
        f"(c) layer norm trains faster than the baseline, batch {batch}",
        "epochs in which layer norm's training NLL is the lower",
        " / ".join(f"{k} of {epochs}" for k in lower),
        f"lower in most epochs in {sum(2 * k > epochs for k in lower)} of {n}"))
    ln, base = ([_first(m, "train_nll", 0.01) for m in ms(norm, batch)]
                for norm in ("layer", "none"))
    rows.append((
        f"(c) layer norm trains faster than the baseline, batch {batch}",
        "first epoch at training NLL 0.01, layer norm vs baseline",
        " / ".join(f"{_reached(a)} vs {_reached(b)}" for a, b in zip(ln, base)),
        f"layer norm sooner in {sum(a < b for a, b in zip(ln, base))} of {n}"))
  return ("\nThe paper's claims, seed by seed (seed s of one run against seed s of the other: "
          "the same initialisation and minibatch order; values in seed order):\n\n"
          "| claim | measure | per seed | how many seeds |\n|---|---|---|---|\n"
          + "".join(f"| {' | '.join(r)} |\n" for r in rows))


def convnet(args) -> None:
  records = run_all(args, "configs/convnet.py", {
      (dataset, norm): (f"{dataset}_{norm}", {"norm": norm, "dataset": dataset})
      for dataset in ("mnist", "fashion_mnist") for norm in NORM_NAMES})
  _curves(records, out_dir(args) / "convnet.png", "ConvNets (section 6.7)",
          lambda k: k[0], lambda k: NORM_NAMES[k[1]])
  md = header(args, list(records.values()), "Section 6.7: ConvNets")
  md += ("![ConvNets](convnet.png)\n\n| run | final test error | best test error | epochs "
         "to 2% test error | final train NLL | train time (s) | examples/s (median epoch) | "
         "learning rate |\n|---|---|---|---|---|---|---|---|\n")
  md += "".join(_summary_row(f"{d}, {NORM_NAMES[n]}", r, "") for (d, n), r in records.items())
  md += TIME_NOTE
  md += _train_nll_table({f"{d}, {NORM_NAMES[n]}": r for (d, n), r in records.items()})
  (out_dir(args) / "results.md").write_text(md)
  print(md)


DRAW_NAMES = {"none": "Baseline", "layer_c": "LN on c_t (eqs. 29-31)",
              "layer": "full LN-LSTM (eqs. 20-22)"}


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
    times = [_train_time_and_rate(x) for x in m]
    md += (f"| {DRAW_NAMES[n]} | {mean_sd((x[-1]['test_bound'] for x in m), '.2f')} | "
           f"{mean_sd((min(y['test_bound'] for y in x) for x in m), '.2f')} | "
           f"{mean_sd((x[-1]['valid_bound'] for x in m), '.2f')} | "
           f"{mean_sd((x[-1]['train_bound'] for x in m), '.2f')} | "
           f"{mean_sd((t for t, _ in times), '.0f')} | "
           f"{mean_sd((v for _, v in times), ',.0f')} |\n")
  md += TIME_NOTE
  md += "\nEpochs to reach a test bound (the last is the baseline's final bound):\n\n"
  md += "| run | " + " | ".join(f"<= {b:.1f}" for b in marks) + " |\n"
  md += "|---|" + "---|" * len(marks) + "\n"
  md += "".join(f"| {DRAW_NAMES[n]} | " + " | ".join(
      per_seed(_epochs_to(x, "test_bound", b) for x in m) for b in marks) + " |\n"
      for n, m in ms.items())
  md += "\nTest bound by epoch:\n\n| epoch | " + " | ".join(DRAW_NAMES[n] for n in records)
  md += " |\n|---|" + "---|" * len(records) + "\n"
  for i in range(max(len(x) for m in ms.values() for x in m)):
    md += f"| {i + 1} | " + " | ".join(
        mean_sd((x[i]["test_bound"] for x in m), ".2f") if all(i < len(x) for x in m) else ""
        for m in ms.values()) + " |\n"
  md += (f"\nFor scale: drawing every test image from the training set's per-pixel means "
         f"gives {_mean_image_nll(c):.2f} nats, the bound of a model that ignores its "
         "input.\n")
  md += "\nSamples from the prior (Bernoulli means), per run: `<run>/samples.png`; the "
  md += "canvas building up glimpse by glimpse: `<run>/canvas.png`.\n"
  (out_dir(args) / "results.md").write_text(md)
  print(md)


READER_RUNS = {"lstm": ("LSTM", {"norm": "none"}),
               "bn": ("BN-LSTM", {"norm": "batch"}),
               "bn_everywhere": ("BN-everywhere", {"norm": "batch", "bn_everywhere": True}),
               "ln": ("LN-LSTM", {"norm": "layer"}),
               "ln_gain01": ("LN-LSTM, gain init 0.1", {"norm": "layer", "ln_gain_init": 0.1}),
               # Not in Figure 2: the other half of the gain claim, that recurrent BN
               # needs its gains to start at 0.1 (Cooijmans et al.) where LN does not.
               "bn_gain1": ("BN-LSTM, gain init 1.0", {"norm": "batch", "bn_gain_init": 1.0})}
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
  md += "\nUpdates to reach a validation error:\n\n" + _steps_table(
      named, "valid_error", READER_LEVELS)
  md += ("\nUpdates to reach a training NLL (the mean since the previous record): when "
         "each run leaves the plateau it starts on (results/reader_probe/):\n\n"
         + _steps_table(named, "train_nll", READER_NLL_LEVELS))
  (out_dir(args) / "results.md").write_text(md)
  print(md)


HW_NAMES = {"none": "Baseline", "layer": "Layer norm"}
# The commit that fixed the IAM-OnDB reader (reader version 2, issue 32); runs
# made before it read other data and get OLD_READER_NOTE.
IAM_READER_FIX = "743c0d3"
OLD_READER_NOTE = (
    '> **Made with the old IAM-OnDB reader** (reader version 1: `lnorm/data/iam_ondb.py` as at 4707ea4,\n'
    "> before issue 32's fixes), not rerun since. Its three defects applied to these runs: (1) the\n"
    '> `%%%%%%%%%%%` line break in form a08-551z was read as text, so training line a08-551z-08 (658 rows)\n'
    '> had the text of lines 08 and 09, and a08-551z-09 (150 rows) was left out; (2) 2 training lines,\n'
    '> z00-001-01 and z01-000z-01 (1,045 rows), were trained on the placeholder text "Please Enter\n'
    '> Transcription here"; (3) the 353 lines whose first stroke is a single point lacked that stroke\'s\n'
    '> pen lift, one row (0, 0, 1) each: 286 training, 41 validation and 26 test lines, 4 of them among\n'
    '> the 256 validation lines evaluated here and 4 among the 256 test lines. In all 356 of the 12,187\n'
    '> lines read were wrong and 1 was missing: the old reader gave 9,689 / 1,230 / 1,268 lines and\n'
    '> 6,075,636 / 754,377 / 809,748 rows (train / valid / test), the fixed one 9,688 / 1,230 / 1,268\n'
    '> lines and 6,075,027 / 754,418 / 809,774 rows (scales 42.175 / 37.136 pen units, now 42.174 /\n'
    '> 37.136). **The NLLs here are not comparable with runs made with the fixed reader** (version 2 or\n'
    '> later): their training data differs and 8 of the 512 lines evaluated gain a row. Compare the two\n'
    '> runs here only with each other.\n'
    "\n")


def made_before(commit: str, fix: str) -> bool | None:
  """Whether ``commit`` (a run's git_commit, maybe ``-dirty``) precedes ``fix``;
  None where this clone's history cannot tell."""
  c = commit.removesuffix("-dirty")
  r = subprocess.run(("git", "merge-base", "--is-ancestor", c, f"{fix}^"), cwd=REPO,
                     capture_output=True)
  if r.returncode in (0, 1):
    return r.returncode == 0 and c != fix
  return None


def fig5(args) -> None:
  """Figure 5: Graves' handwriting synthesis, NLL per line against updates."""
  records = run_all(args, "configs/handwriting.py", {n: (n, {"norm": n}) for n in HW_NAMES},
                    keep=("samples.png", "attention.png"))
  ms = {n: r["metrics"] for n, r in records.items()}
  figures.plot_panels({"": {HW_NAMES[n]: m for n, m in ms.items()}}, out_dir(args) / "fig5.png",
                      [figures.Axis("train_nll", "train NLL (nats per line, first rows)"),
                       figures.Axis("valid_nll", "validation NLL (nats per line)")], x="step",
                      title="Handwriting on IAM-OnDB (paper Figure 5)")
  c = records["none"]["config"]
  md = header(args, list(records.values()), "Figure 5: handwriting synthesis on IAM-OnDB")
  if any(made_before(r.get("git_commit", ""), IAM_READER_FIX) for r in records.values()):
    title, rest = md.split("\n\n", 1)
    md = f"{title}\n\n{OLD_READER_NOTE}{rest}"
  md += (f"Setting: {c['num_layers']} LSTM layers of {c['hidden']}, window K={c['num_window']}, "
         f"{c['num_mixtures']} mixtures, batch {c['batch_size']}, sequences of {c['max_len']} "
         f"rows, Adam {c['learning_rate']:g}. NLL in nats per line (summed over its rows) on "
         f"{c['num_eval'] or 'all'} validation lines, "
         f"{'whole lines' if not c['eval_max_len'] else str(c['eval_max_len']) + ' rows each'}."
         "\n\n![Figure 5](fig5.png)\n\n| run | final valid NLL | best valid NLL | final "
         "valid NLL per point | final test NLL | s / update |\n|---|---|---|---|---|---|\n")
  for n, m in ms.items():
    secs = sorted(r["epoch_time_s"] / max(r["step"] - p, 1)
                  for r, p in zip(m, [0] + [x["step"] for x in m]))[len(m) // 2]
    md += (f"| {HW_NAMES[n]} | {m[-1]['valid_nll']:.1f} | {min(r['valid_nll'] for r in m):.1f} "
           f"| {m[-1]['valid_nll_point']:.3f} | {m[-1]['test_nll']:.1f} | {secs:.3f} |\n")
  base = ms["none"][-1]["valid_nll"]
  top = 100 * math.ceil(base / 100)
  levels = [top + 400, top + 200, top, base]
  md += ("\nUpdates to reach a validation NLL (the last is the baseline's final):\n\n"
         + _steps_table({HW_NAMES[n]: m for n, m in ms.items()}, "valid_nll", levels, ".1f"))
  md += "\nValidation NLL at matched updates:\n\n| step | " + " | ".join(
      HW_NAMES[n] for n in ms) + " |\n|---|" + "---|" * len(ms) + "\n"
  at = [{r["step"]: r["valid_nll"] for r in m} for m in ms.values()]
  for step in sorted(set.intersection(*(set(a) for a in at))):
    md += f"| {step} | " + " | ".join(f"{a[step]:.1f}" for a in at) + " |\n"
  md += ("\nSamples (a test line, then the network writing its text without and with "
         "bias): `<run>/samples.png`; the window's attention: `<run>/attention.png`.\n")
  (out_dir(args) / "results.md").write_text(md)
  print(md)


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


SKIP_METRICS = {"SICK_r": "SICK r", "SICK_rho": "SICK rho", "SICK_mse": "SICK MSE",
                "MR_acc": "MR", "CR_acc": "CR", "SUBJ_acc": "SUBJ", "MPQA_acc": "MPQA"}
SKIP_AXES = {"SICK_r": "SICK r (Pearson)", "SICK_rho": "SICK rho (Spearman)",
             "SICK_mse": "SICK MSE (squared score)",
             **{f"{t}_acc": f"{t} accuracy (fraction)" for t in ("MR", "CR", "SUBJ", "MPQA")}}
SKIP_NAMES = {"none": "Ours (GRU)", "layer": "Ours + LN (LN-GRU)"}
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
  from experiments.loop import higher_is_better  # pylint: disable=g-import-not-at-top
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


TARGETS = {"table1": table1, "fig6_lr": fig6_lr, "fig6": fig6, "convnet": convnet,
           "fig4": fig4, "fig2": fig2, "fig5": fig5, "geometry": geometry,
           "table3": table3}
# Targets whose tables and figures report every seed's runs (--seeds N > 1).
SEEDED = {"fig6", "convnet", "fig4"}


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("target", choices=sorted(TARGETS))
  p.add_argument("--preset", default="paper", choices=("paper", "cpu", "smoke"))
  p.add_argument("--runs_dir", default="runs", type=Path)
  p.add_argument("--results_dir", default=None, type=Path,
                 help="where results go (default <runs_dir>/results); `results` rewrites "
                      "the committed ones")
  p.add_argument("--jobs", default=1, type=int,
                 help="runs at a time (default 1); each then logs to <runs_dir>/.../<run>.log")
  p.add_argument("--seeds", default=1, type=int,
                 help="seeds per run (default 1); tables give mean ± sd, figures bands")
  args = p.parse_args(argv)
  if args.jobs < 1:
    p.error(f"--jobs must be at least 1, got {args.jobs}")
  if args.seeds < 1:
    p.error(f"--seeds must be at least 1, got {args.seeds}")
  if args.seeds > 1 and args.target not in SEEDED:
    p.error(f"--seeds is not supported by {args.target}; targets with seeds: "
            f"{', '.join(sorted(SEEDED))}")
  TARGETS[args.target](args)
  print(f"results in {out_dir(args)}"
        + ("" if args.results_dir is not None else
           " (a scratch folder; --results_dir results rewrites the committed results)"))


if __name__ == "__main__":
  main()
