"""scripts/reproduce.py: scheduling runs and reading their metrics into tables
(the runs themselves: test_runner.py)."""

import contextlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.run_records import REPO


def test_a_failed_run_stops_the_target_and_writes_no_results(tmp_path, monkeypatch):
  # fig4 has three runs; with --jobs 2 the first two start together and both
  # fail at once, so the third must never start.
  from scripts import reproduce
  from scripts.paper import runs
  fake_inputs(monkeypatch, tmp_path / "data", "configs/draw.py:smoke")
  FakeFailedRun.commands = []
  monkeypatch.setattr(runs.subprocess, "Popen", FakeFailedRun)
  with pytest.raises(SystemExit) as stop:
    reproduce.main(["fig4", "--preset", "smoke", "--jobs", "2", "--runs_dir",
                    str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results")])
  assert stop.value.code == ("error: run(s) none, layer_c failed (none's log ends: error: none met "
                             "a fault); rerun the same command to resume")
  assert [workdir_name(c) for c in FakeFailedRun.commands] == ["none", "layer_c"]
  assert not (tmp_path / "results").exists()


def test_a_target_lacking_data_stops_before_its_first_run(tmp_path, monkeypatch):
  """convnet reads MNIST, then Fashion-MNIST: without the second it stops
  before the first MNIST run, naming what is missing and how to get it."""
  from scripts import reproduce
  from scripts.paper import runs
  data = tmp_path / "data"
  fake_inputs(monkeypatch, data, "configs/convnet.py:smoke", overrides=({"dataset": "mnist"},))
  FakeRun.commands = []
  monkeypatch.setattr(runs.subprocess, "Popen", FakeRun)
  with pytest.raises(SystemExit) as stop:
    reproduce.main(["convnet", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs"),
                    "--results_dir", str(tmp_path / "res")])
  assert stop.value.code == (
      f"error: convnet needs {data}/fashion_mnist/train-images-idx3-ubyte.gz (and 3 more), "
      f"not found; get it with `python scripts/download_data.py fashion_mnist --data_dir {data}`"
      ", or set LNORM_DATA_DIR to a directory holding fashion_mnist/, or use "
      "data_source='tfds'. Nothing was run")
  assert FakeRun.commands == [] and not (tmp_path / "runs" / "convnet").exists()
  # From the command line: one line, exit 1 (fig4: binarized MNIST, none there).
  p = subprocess.run(
      [sys.executable, "scripts/reproduce.py", "fig4", "--preset", "smoke", "--runs_dir",
       str(tmp_path / "runs"), "--results_dir", str(tmp_path / "res")],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env={**os.environ, "LNORM_DATA_DIR": str(tmp_path / "empty")})
  assert p.returncode == 1
  assert p.stderr.splitlines() == [
      f"error: fig4 needs {tmp_path}/empty/binarized_mnist/binarized_mnist_train.amat.gz (and 2 "
      f"more), not found; get it with `python scripts/download_data.py binarized_mnist "
      f"--data_dir {tmp_path}/empty`, or set LNORM_DATA_DIR to a directory holding "
      "binarized_mnist/, or use data_source='tfds'. Nothing was run"]
  assert not (tmp_path / "runs" / "fig4").exists() and not (tmp_path / "res").exists()


def test_every_experiment_lists_its_inputs_in_the_loaders_layout():
  from experiments import order_embeddings
  from lnorm.data import books, bytes_lm
  from scripts.paper import inputs, runs
  assert (inputs.NOVELS, inputs.GUTENBERG) == (bytes_lm.NOVELS, books.GUTENBERG)
  assert inputs.FEATURES_NAME == order_embeddings.FEATURES_NAME
  for config in sorted((REPO / "configs").glob("[!_]*.py")):
    c = runs.config_dict(f"configs/{config.name}", "cpu", {})
    assert c["experiment"] in inputs.NEEDS, config.name


def test_runs_side_by_side_share_the_cores_among_their_blas_threads(tmp_path, monkeypatch):
  from scripts.paper import runs
  assert runs.blas_threads(1) == {}
  assert runs.blas_threads(2, cores=2) == {k: "1" for k in runs.BLAS_THREADS}
  assert runs.blas_threads(4, cores=2)["OPENBLAS_NUM_THREADS"] == "1"
  assert runs.blas_threads(2, cores=16)["OMP_NUM_THREADS"] == "8"
  # Each run of --jobs 2 gets them, but a variable the caller set wins.
  for k in runs.BLAS_THREADS:
    monkeypatch.delenv(k, raising=False)
  monkeypatch.setenv("MKL_NUM_THREADS", "5")
  FakeRun.commands, FakeRun.envs = [], []
  reproduce_on(monkeypatch, tmp_path, FakeRun, ["fig6", "--preset", "smoke", "--jobs", "2"],
               "configs/pi_mnist.py:smoke")
  share = str(max(1, os.cpu_count() // 2))
  assert len(FakeRun.envs) == 6
  for env in FakeRun.envs:
    assert (env["OPENBLAS_NUM_THREADS"], env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == (
        share, share, "5")


def test_jobs_must_be_positive(tmp_path):
  p = subprocess.run([sys.executable, "scripts/reproduce.py", "fig4", "--jobs", "0"],
                     cwd=REPO, capture_output=True, text=True, timeout=60)
  assert p.returncode == 2
  assert p.stderr.strip().splitlines()[-1].endswith("--jobs must be at least 1, got 0")


def test_train_nll_table_reads_the_epochs_and_the_first_crossings():
  from scripts.paper import runs
  nll = [0.5, 0.08, 0.04, 0.02, 0.009, 0.012, 0.0009]  # not monotone: epoch 6 goes back up
  records = {"run a": {"metrics": [{"epoch": e + 1, "train_nll": v} for e, v in enumerate(nll)]}}
  lines = runs.train_nll_table(records).strip().splitlines()
  assert lines[-3].startswith("| run | epoch 1 | epoch 2 | epoch 5 | <= 0.1 | <= 0.03 |")
  assert lines[-1] == "| run a | 0.5 | 0.08 | 0.009 | 2 | 4 | 5 | 7 |"
  assert runs.epochs_to(records["run a"]["metrics"], "train_nll", 1e-4) == "not reached"


_REAL_POPEN = subprocess.Popen


def full_config(cmd: list[str]) -> tuple[dict[str, str], dict]:
  """The flags of an ``experiments.main`` command, and the whole config its run
  records (the preset's, with the overrides as their fields' types), as JSON."""
  from scripts.paper import runs
  flags = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--"))
  path, preset = flags["config"].rsplit(":", 1)
  config = runs.config_dict(path, preset, {})
  for k, v in flags.items():
    if k.startswith("config."):
      k = k[len("config."):]
      config[k] = (v == "True") if isinstance(config[k], bool) else type(config[k])(v)
  return flags, config


def fake_inputs(monkeypatch, root: Path, *configs: str, overrides=({},)) -> None:
  """Points $LNORM_DATA_DIR and $LNORM_CACHE_DIR into ``root`` and puts an empty
  stand-in for each input (scripts/paper/inputs.py) that the runs of
  ``configs`` ("path:preset"), with each of ``overrides``, read: enough for
  reproduce.py's check before a target's first run, which fake runs pass."""
  from scripts.paper import inputs, runs
  monkeypatch.setenv("LNORM_DATA_DIR", str(root))
  monkeypatch.setenv("LNORM_CACHE_DIR", str(root / "cache"))
  for spec in configs:
    for o in overrides:
      for paths, _ in inputs.missing(runs.config_dict(*spec.rsplit(":", 1), o)):
        p = paths[0]
        if p.suffix:  # a file: an archive, IDX, text
          p.parent.mkdir(parents=True, exist_ok=True)
          p.touch()
        else:  # a folder of files
          p.mkdir(parents=True, exist_ok=True)


def spread_epochs(records: list[dict], num_epochs: int) -> list[dict]:
  """``records``, evaluated at even fractions of ``num_epochs`` epochs: the
  last at the run's end, as a finished run's."""
  return [{**r, "epoch": num_epochs * (i + 1) / len(records)} for i, r in enumerate(records)]


def workdir_name(cmd: list[str]) -> str:
  return next(a for a in cmd if a.startswith("--workdir=")).rsplit("/", 1)[-1]


def judge_smoke_runs(monkeypatch) -> None:
  """Verdicts for a smoke-preset target, which otherwise reads "plumbing only":
  for tests whose fake runs take the smoke preset as the cheapest config and
  check the verdicts of their records."""
  from scripts import reproduce
  monkeypatch.setattr(reproduce.verdicts, "smoke", lambda on=True: contextlib.nullcontext())


class FakeMainRun:
  """The base of the fake runs that stand in for ``subprocess.Popen`` in
  scripts/paper/runs.py. Other programs run for real: matplotlib lists the
  fonts with fc-list the first time it draws on a machine (no font cache
  yet). A subclass's __init__ writes an ``experiments.main`` run's records
  (:func:`fake_record`) and sets ``returncode``."""
  returncode = 0

  def __new__(cls, cmd, **kw):
    if "experiments.main" not in cmd:
      return _REAL_POPEN(cmd, **kw)
    return super().__new__(cls)

  def poll(self):
    return self.returncode


def fake_record(cmd: list[str], cpu_threads: int | None = None) -> tuple[dict, Path]:
  """The whole config of ``cmd`` (:func:`full_config`) and its workdir, made,
  holding the config.json its run writes (a fake host's where ``cpu_threads``)."""
  flags, config = full_config(cmd)
  wd = Path(flags["workdir"])
  wd.mkdir(parents=True)
  host = {} if cpu_threads is None else {"host": {"cpu": "Fake CPU", "cpu_threads": cpu_threads}}
  (wd / "config.json").write_text(json.dumps(
      {"config": config, "git_commit": "abc", "versions": {"jax": "x"}, **host}))
  return config, wd


def reproduce_on(monkeypatch, tmp_path: Path, fake, argv: list[str], *configs: str) -> None:
  """``scripts/reproduce.py`` with ``argv``, its runs ``fake`` runs, its runs
  and results folders ``tmp_path`` / "runs" and "res", and the inputs of
  ``configs`` ("path:preset") stood in (:func:`fake_inputs`)."""
  from scripts import reproduce
  from scripts.paper import runs
  monkeypatch.setattr(runs.subprocess, "Popen", fake)
  fake_inputs(monkeypatch, tmp_path / "data", *configs)
  reproduce.main([*argv, "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "res")])


class FakeFailedRun:
  """A run that fails at once (exit 1), with a line in its log (--jobs 2)."""
  commands: list[list[str]] = []

  def __init__(self, cmd, stdout=None, **_):
    FakeFailedRun.commands.append(cmd)
    if stdout is not None:
      stdout.write(f"fresh run\nerror: {workdir_name(cmd)} met a fault\n\n".encode())
      stdout.flush()
    self.returncode = 1

  def poll(self):
    return self.returncode


class FakeRun(FakeMainRun):
  """Stands in for ``experiments.main``: writes a run's config.json and
  metrics.jsonl (test error 0.02 * (seed + 1) / epoch) into its workdir."""
  commands: list[list[str]] = []
  envs: list[dict[str, str]] = []

  def __init__(self, cmd, **kw):
    FakeRun.commands.append(cmd)
    FakeRun.envs.append(kw.get("env") or {})
    seed = full_config(cmd)[1]["seed"]
    config, wd = fake_record(cmd, cpu_threads=1 if seed == 2 else 2)
    (wd / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": 10 * e, "epoch": e, "train_nll": 1.0 / (e + seed), "test_error": 0.02 * (seed + 1) / e,
         "epoch_time_s": 1.0 + seed, "examples_per_sec": 100.0 * (seed + 1)}) + "\n"
        for e in (1, 2)))  # the smoke preset's 2 epochs
    self.returncode = 0


def test_seeds_run_in_their_own_workdirs_and_tables_give_mean_and_sd(tmp_path, monkeypatch):
  FakeRun.commands = []
  reproduce_on(monkeypatch, tmp_path, FakeRun, ["fig6", "--preset", "smoke", "--seeds", "3"],
               "configs/pi_mnist.py:smoke")
  # The config's seed (0) keeps the one-seed workdir; the others are named.
  assert len(FakeRun.commands) == 18
  layer = [c for c in FakeRun.commands
           if "--config.norm=layer" in c and "--config.batch_size=128" in c]
  assert [next(a for a in c if a.startswith("--workdir=")).rsplit("/", 1)[-1] for c in layer] == [
      "layer_b128", "layer_b128_seed1", "layer_b128_seed2"]
  assert [c[-1] for c in layer] == ["--config.learning_rate=0.0003", "--config.seed=1",
                                    "--config.seed=2"]
  out = tmp_path / "res" / "fig6_smoke"
  for name in ("layer_b128", "layer_b128_seed1", "layer_b128_seed2"):
    assert json.loads((out / name / "config.json").read_text())["config"]["norm"] == "layer"
  assert (out / "fig6.png").read_bytes().startswith(b"\x89PNG")
  md = (out / "results.md").read_text()
  assert ("Command: `python scripts/reproduce.py fig6 --preset smoke --seeds 3 --results_dir "
          f"{tmp_path / 'res'}`") in md
  assert "Host: Fake CPU, 1 core(s); Fake CPU, 2 core(s)  \n" in md  # seed 2 ran on one core
  row = next(l for l in md.splitlines() if l.startswith("| Layer norm, batch 128 |"))
  final = [0.02 * (s + 1) / 2 for s in range(3)]  # epoch 2
  best = final  # each seed's error falls
  nll = [1.0 / (2 + s) for s in range(3)]
  assert row.rstrip(" |").split(" | ")[1:8] == [
      f"{statistics.mean(final):.4f} ± {statistics.stdev(final):.4f}",
      f"{statistics.mean(best):.4f} ± {statistics.stdev(best):.4f}",
      "1 / 2 / not reached",  # 0.02 / 1, 0.04 / 2, 0.06 / 2
      f"{statistics.mean(nll):.3g} ± {statistics.stdev(nll):.3g}",
      "4 ± 2",  # 2 epochs of 1, 2 and 3 s
      "200 ± 100",
      "0.0003"]
  nll_row = [l for l in md.splitlines() if l.startswith("| Layer norm, batch 128 |")][1]
  e1 = [1.0 / (1 + s) for s in range(3)]
  assert nll_row.split(" | ")[1] == f"{statistics.mean(e1):.3g} ± {statistics.stdev(e1):.3g}"
  assert nll_row.split(" | ")[3] == "not reached"  # <= 0.1 in no seed: said once


def test_results_go_to_a_scratch_folder_unless_told(tmp_path, monkeypatch):
  from scripts import reproduce
  from scripts.paper import runs
  monkeypatch.setattr(runs.subprocess, "Popen", FakeRun)
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke")
  reproduce.main(["fig6", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs")])
  md = (tmp_path / "runs" / "results" / "fig6_smoke" / "results.md").read_text()
  assert "Command: `python scripts/reproduce.py fig6 --preset smoke`" in md
  assert "±" not in md and "Seeds:" not in md
  args = reproduce.argparse.Namespace(target="fig6", preset="paper", runs_dir=Path("runs"),
                                      results_dir=Path("results"))
  assert runs.out_dir(args) == REPO / "results" / "fig6"


@pytest.mark.slow
def test_seeds_must_be_positive_and_supported_by_the_target():
  for argv, message in ((["fig6", "--seeds", "0"], "--seeds must be at least 1, got 0"),
                        (["table1", "--seeds", "2"],
                         "--seeds is not supported by table1; targets with seeds: ")):
    p = subprocess.run([sys.executable, "scripts/reproduce.py", *argv], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert message in p.stderr.strip().splitlines()[-1]


def test_table3_puts_the_papers_rows_above_ours_and_says_where_and_how_soon_ln_leads():
  from scripts.paper import table3

  def run(evals):  # (SICK_r, SICK_mse, MR_acc, heldout_nll) at updates 100, 200, 300
    return [{"step": 100 * (i + 1), "SICK_r": r, "SICK_mse": e, "MR_acc": a, "heldout_nll": h,
             "examples_per_sec": 32.0} for i, (r, e, a, h) in enumerate(evals)]
  ms = {"none": run([(0.50, 0.60, 0.60, 5.0), (0.60, 0.50, 0.62, 4.5), (0.65, 0.45, 0.63, 4.2)]),
        "layer": run([(0.55, 0.55, 0.59, 4.8), (0.66, 0.44, 0.64, 4.3), (0.64, 0.46, 0.65, 4.1)])}
  lines = table3.skip_tables(ms, {"batch_size": 64}).splitlines()
  assert lines[0] == "| run | updates | heldout NLL | SICK r | SICK MSE | MR | s / update |"
  assert lines[2] == "| paper: Original [Kiros et al., 2015] (BookCorpus) |  | | 0.848 | 0.287 | 75.5 | |"
  assert lines[4] == "| paper: Ours + LN (BookCorpus) | 1M | | 0.854 | 0.277 | 79.5 | |"
  assert lines[6] == "| Ours (GRU), Gutenberg stand-in | 300 | 4.200 | 0.650 | 0.450 | 63.0 | 2.000 |"
  assert lines[7] == "| Ours (LN-GRU), Gutenberg stand-in | 300 | 4.100 | 0.640 | 0.460 | 65.0 | 2.000 |"
  assert "| 200 | 4.500 / 4.300 | 0.600 / 0.660 | 0.500 / 0.440 | 62.0 / 64.0 |" in lines
  # SICK MSE is better lower, the others higher; the baseline reaches its own final last.
  assert "| heldout NLL | 3 of 3 | 300 | 300 |" in lines
  assert "| SICK r | 2 of 3 | 300 | 200 |" in lines
  assert "| SICK MSE | 2 of 3 | 300 | 200 |" in lines
  assert "| MR | 2 of 3 | 300 | 200 |" in lines


class FakeReaderRun:
  """Stands in for ``experiments.main`` on configs/reader.py: the preset's
  whole config.json, and validation / test error falling 0.9 -> 0.5 over
  updates 100-500, faster for LN. Its data_dir: ``FakeReaderRun.data_dir``."""
  data_dir = ""

  def __init__(self, cmd, **_):
    from configs import reader as reader_config
    flags = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--"))
    config = reader_config.get_config(flags["config"].rsplit(":", 1)[1]).to_dict()
    for k, v in flags.items():
      if k.startswith("config."):
        config[k[len("config."):]] = type(config[k[len("config."):]])(
            v == "True" if v in ("True", "False") else v)
    config["data_dir"] = FakeReaderRun.data_dir
    wd = Path(flags["workdir"])
    wd.mkdir(parents=True)
    (wd / "config.json").write_text(json.dumps(
        {"config": config, "git_commit": "abc", "versions": {"jax": "x"}}))
    (wd / "metrics.jsonl").write_text("".join(
        json.dumps(r) + "\n" for r in spread_epochs(self.metrics(config), config["num_epochs"])))
    self.returncode = 0

  def metrics(self, config: dict) -> list[dict]:
    fast = config["norm"] == "layer" and config["ln_gain_init"] == 1.0
    return [{"step": 100 * i, "epoch": i, "valid_error": 0.9 - (0.2 if fast else 0.1) * i,
             "test_error": 0.8 - 0.1 * i, "train_nll": 1.45 - (0.3 if fast else 0.2) * i,
             "epoch_time_s": 10.0, "examples_per_sec": 640.0} for i in range(1, 5 if fast else 6)]

  def poll(self):
    return self.returncode


def write_questions(root: Path, qs) -> None:
  """``qs`` as every split of the stand-ins the reader presets read, in ``root``."""
  from lnorm.data import cnn_questions as cq
  for standin in ("cnn_standin", "cnn_standin_4", "news_standin"):  # paper, smoke, cpu
    for split in cq.SPLITS:
      d = root / standin / "cnn/questions" / split
      d.mkdir(parents=True)
      for i, q in enumerate(qs):
        cq.write_question(d / f"q{i}.question", q)


def test_fig2_reports_best_valid_levels_and_baselines_and_names_the_stand_in(tmp_path, monkeypatch):
  from lnorm.data import cnn_questions as cq
  from scripts import reproduce
  from scripts.paper import runs
  # One question a split, in a stand-in's place.
  FakeReaderRun.data_dir = str(tmp_path)
  q = cq.Question(url="u", passage=("@entity0", "met", "@entity1", "and", "@entity1", "."),
                  query=("@entity1", "saw", "@placeholder"), answer="@entity0",
                  entities=(("@entity0", "A"), ("@entity1", "B")))
  write_questions(tmp_path, [q])
  monkeypatch.setattr(runs.subprocess, "Popen", FakeReaderRun)
  fake_inputs(monkeypatch, tmp_path)  # write_questions put the stand-ins there
  reproduce.main(["fig2", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs"),
                  "--results_dir", str(tmp_path / "res")])
  md = (tmp_path / "res" / "fig2_smoke" / "results.md").read_text()
  assert ("**Every number here is from the stand-in** (`cnn_standin_4`), the cloze questions "
          "that `scripts/make_cloze.py` builds from ABC news and Gutenberg books") in md
  assert "entities renumbered" not in md  # the smoke preset keeps the numbering
  lines = md.splitlines()
  # LN: best 0.1 at update 400 (test 0.4 there); the others 0.4 at 500;
  # 10 s an epoch of 100 updates.
  assert "| LN-LSTM | 0.1000 | 400 | 0.4000 | 0.1000 | 0.100 |" in lines
  assert "| LSTM | 0.4000 | 500 | 0.3000 | 0.4000 | 0.100 |" in lines
  # The most frequent entity (@entity1) is wrong; the most frequent not in the query right.
  assert ("most frequent entity, valid error 1.0000, test 1.0000; the most frequent not in "
          "the query, valid 0.0000, test 0.0000.") in md
  assert "| LN-LSTM | 100 | 200 | 200 | 300 | 300 |" in lines
  assert "| LN-LSTM, gain init 0.1 | 200 | 300 | 400 | 500 | 500 |" in lines
  assert "| BN-LSTM, gain init 1.0 | 200 | 300 | 400 | 500 | 500 |" in lines
  # Training NLL 1.15, 0.85, ... for LN; 1.25, 1.05, 0.85, 0.65, ... for the others.
  nll = lines[lines.index(next(l for l in lines if l.startswith("Updates to reach a training"))):]
  assert "| LN-LSTM | 100 | 200 | 300 |" in nll and "| LSTM | 100 | 300 | 400 |" in nll
  assert (tmp_path / "res" / "fig2_smoke" / "fig2.png").read_bytes().startswith(b"\x89PNG")
  assert "Seeds:" not in md and "±" not in md and "ran once" not in md
  # The cpu preset renumbers entities at every update, and says so; it reads the news cloze.
  reproduce.main(["fig2", "--preset", "cpu", "--runs_dir", str(tmp_path / "runs"),
                  "--results_dir", str(tmp_path / "res")])
  md = (tmp_path / "res" / "fig2_cpu" / "results.md").read_text()
  assert "20 epochs, passages of any length, entities renumbered at every update, data" in md
  assert ("**Every number here is from the stand-in** (`news_standin`), the cloze questions that "
          "`python scripts/make_cloze.py --out <data_dir>/news_standin --news") in md


class FakeSeededReaderRun(FakeReaderRun):
  """A reader run whose validation error, every 100 updates, is
  ``FakeSeededReaderRun.VALID[(run, seed)]`` (test error 0.05 above it)."""
  VALID = {("lstm", 0): [0.8, 0.7, 0.6, 0.5, 0.5], ("lstm", 1): [0.8, 0.7, 0.6, 0.55, 0.45],
           ("bn", 0): [0.7, 0.6, 0.55, 0.6, 0.6], ("bn", 1): [0.7, 0.5, 0.6, 0.6, 0.6],
           ("ln", 0): [0.7, 0.5, 0.4, 0.45, 0.45], ("ln", 1): [0.6, 0.55, 0.5, 0.48, 0.47],
           ("other", 0): [0.8, 0.7, 0.6, 0.6, 0.6]}
  commands: list[list[str]] = []

  def __init__(self, cmd, **kw):
    FakeSeededReaderRun.commands.append(cmd)
    super().__init__(cmd, **kw)

  def metrics(self, config: dict) -> list[dict]:
    norm, seed = config["norm"], int(config["seed"])
    run = {"none": "lstm", "batch": "bn", "layer": "ln"}[norm]
    if config["bn_everywhere"] or config["ln_gain_init"] != 1.0 or config["bn_gain_init"] != 0.1:
      run = "other"
    return [{"step": 100 * (i + 1), "epoch": i + 1, "valid_error": v, "test_error": v + 0.05,
             "train_nll": 1.5 - 0.2 * i, "epoch_time_s": 10.0, "examples_per_sec": 640.0}
            for i, v in enumerate(self.VALID[(run, seed)])]


def test_fig2_with_seeds_gives_mean_and_sd_and_judges_the_claims_seed_by_seed(tmp_path, monkeypatch):
  from lnorm.data import cnn_questions as cq
  from scripts import reproduce
  from scripts.paper import runs
  judge_smoke_runs(monkeypatch)
  FakeReaderRun.data_dir = str(tmp_path)
  # Exclusive frequency answers the first right (@entity0), the second wrong
  # (@entity0 before @entity2 on a tie): 0.5; the most frequent entity (@entity1) 1.0.
  ents = (("@entity0", "A"), ("@entity1", "B"), ("@entity2", "C"))
  passage = ("@entity0", "met", "@entity1", "and", "@entity1", ".")
  write_questions(tmp_path, [
      cq.Question("u", passage, ("@entity1", "saw", "@placeholder"), "@entity0", ents[:2]),
      cq.Question("v", passage + ("@entity2", "left", "."), ("@entity1", "saw", "@placeholder"),
                  "@entity2", ents)])
  FakeSeededReaderRun.commands = []
  monkeypatch.setattr(runs.subprocess, "Popen", FakeSeededReaderRun)
  fake_inputs(monkeypatch, tmp_path)
  reproduce.main(["fig2", "--preset", "smoke", "--seeds", "2", "--runs_dir", str(tmp_path / "runs"),
                  "--results_dir", str(tmp_path / "res")])
  # The runs Figure 2 compares get both seeds; the gain and BN-everywhere variants one.
  assert [next(a for a in c if a.startswith("--workdir=")).rsplit("/", 1)[-1]
          for c in FakeSeededReaderRun.commands] == [
      "lstm", "lstm_seed1", "bn", "bn_seed1", "bn_everywhere", "ln", "ln_seed1", "ln_gain01",
      "bn_gain1"]
  out = tmp_path / "res" / "fig2_smoke"
  assert (out / "fig2.png").read_bytes().startswith(b"\x89PNG")
  md = (out / "results.md").read_text()
  lines = md.splitlines()
  assert "Seeds: 2 per run." in md
  assert ("Only LSTM, BN-LSTM and LN-LSTM, the runs Figure 2's claims compare, ran 2 seeds. "
          "These ran once (the config's seed), so their cells are that one run's: "
          "BN-everywhere; LN-LSTM, gain init 0.1; BN-LSTM, gain init 1.0.") in md
  ms = lambda *xs: f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"
  # LN: best 0.40 at 300 and 0.47 at 500 (test 0.05 above), final 0.45 and 0.47.
  assert (f"| LN-LSTM | {ms(0.4, 0.47)} | 400 ± 141 | {ms(0.45, 0.52)} | {ms(0.45, 0.47)} | "
          "0.100 ± 0.000 |") in lines
  assert (f"| LSTM | {ms(0.5, 0.45)} | 450 ± 71 | {ms(0.55, 0.5)} | {ms(0.5, 0.45)} | "
          "0.100 ± 0.000 |") in lines
  assert "| BN-everywhere | 0.6000 | 300 | 0.6500 | 0.6000 | 0.100 |" in lines  # one seed
  assert "valid error 1.0000, test 1.0000; the most frequent not in the query, valid 0.5000" in md
  # Updates to reach 0.7, 0.6, 0.5, 0.45, 0.4: each seed's in turn, or one shared by both.
  assert "| LN-LSTM | 100 | 200 / 100 | 200 / 300 | 300 / not reached | 300 / not reached |" in lines
  row = lambda start: next(l for l in lines if l.startswith(start)).strip("| ").split(" | ")
  # LN reaches the LSTM's best (0.5, 0.45) at 200 (vs 400) and never (vs 500);
  # BN's (0.55, 0.5) at 200 (vs 300) and 300 (vs 200). One seed of two each way,
  # the ranges overlapping: cannot tell; LN's best errors (0.40, 0.47) all below
  # BN's (0.55, 0.50): holds (scripts/paper/verdicts.py).
  tell = "**cannot tell** (1 of 2 seeds; the ranges overlap)"
  assert row("| LN trains faster than LSTM |")[2:] == [
      "200 vs 400 / not reached vs 500", "sooner in 1 of 2; 50% of LSTM's updates", tell]
  assert row("| LN trains faster than BN-LSTM |")[2:] == [
      "200 vs 300 / 300 vs 200", "sooner in 1 of 2; 67%, 150% of BN-LSTM's updates", tell]
  assert row("| LN converges to a better validation error than LSTM |")[2:] == [
      "0.4000 vs 0.5000 / 0.4700 vs 0.4500", "LN lower in 1 of 2", tell]
  assert row("| LN converges to a better validation error than BN-LSTM |")[2:] == [
      "0.4000 vs 0.5500 / 0.4700 vs 0.5000", "LN lower in 2 of 2",
      "**holds** (2 of 2 seeds, ranges apart)"]
  # Against exclusive frequency's 0.5: LN below it in both seeds, the LSTM in one
  # (0.45; 0.5 ties), BN in none; a one-seed run is one of one.
  beat = lambda name: row(f"| {name} beats counting words |")
  assert beat("LN-LSTM")[1] == "best validation error, and how far below the exclusive " \
      "frequency baseline's 0.5000"
  assert beat("LN-LSTM")[2:] == ["0.4000 (+0.1000) / 0.4700 (+0.0300)",
                                 f"below it in 2 of 2; baseline minus best {ms(0.5 - 0.4, 0.5 - 0.47)}",
                                 "**holds** (2 of 2 seeds)"]
  assert beat("LSTM")[3:] == [f"below it in 1 of 2; baseline minus best {ms(0.0, 0.05)}",
                              "**cannot tell** (1 of 2 seeds)"]
  assert beat("BN-LSTM")[3:] == [f"below it in 0 of 2; baseline minus best {ms(-0.05, 0.0)}",
                                 "**fails** (0 of 2 seeds)"]
  assert beat("BN-everywhere")[2:] == ["0.6000 (-0.1000)", "below it in 0 of 1; baseline minus best -0.1000",
                                       "disagrees in the one seed (no spread to judge against)"]


def test_single_runs_get_the_first_seed_alone(tmp_path):
  from scripts import reproduce
  from scripts.paper import runs
  seeds = [("", {}), ("_seed1", {"seed": 1}), ("_seed2", {"seed": 2})]
  assert runs.expand({"a": ("a", {"x": 1}), "b": ("b", {"x": 2})}, seeds, single=("b",)) == {
      "a": [("a", {"x": 1}), ("a_seed1", {"x": 1, "seed": 1}), ("a_seed2", {"x": 1, "seed": 2})],
      "b": [("b", {"x": 2})]}
  # fig2's gain and BN-everywhere variants run once; --only names them so.
  with pytest.raises(SystemExit) as stop:
    reproduce.main(["fig2", "--preset", "cpu", "--seeds", "3", "--runs_dir", str(tmp_path),
                    "--only", "nonexistent"])
  assert stop.value.code == (
      "error: --only names no run of fig2 (--seeds 3): nonexistent; its runs: lstm, lstm_seed1, "
      "lstm_seed2, bn, bn_seed1, bn_seed2, bn_everywhere, ln, ln_seed1, ln_seed2, ln_gain01, "
      "bn_gain1")
  assert not (tmp_path / "fig2").exists()


def test_fig6_claims_compare_each_seed_with_the_same_seed_of_the_other_run():
  from scripts.paper import fig6
  mk = lambda test, nll: [{"epoch": e + 1, "test_error": t, "train_nll": l}
                          for e, (t, l) in enumerate(zip(test, nll))]
  flat = [0.5, 0.5, 0.5]
  records = {
      ("layer", 4): [mk([0.03, 0.025, 0.019], [0.2, 0.09, 0.05]),
                     mk([0.03, 0.019, 0.018], [0.2, 0.09, 0.05])],
      ("layer", 128): [mk([0.025, 0.018, 0.015], [0.1, 0.009, 0.001]),
                       mk([0.024, 0.02, 0.02], [0.1, 0.009, 0.001])],
      ("batch", 4): [mk([0.05, 0.04, 0.03], [0.5, 0.3, 0.2]),
                     mk([0.03, 0.02, 0.01], [0.5, 0.3, 0.2])],
      ("none", 4): [mk(flat, [0.25, 0.08, 0.04])] * 2,
      ("none", 128): [mk(flat, [0.2, 0.05, 0.008])] * 2,
  }
  md = fig6.claims({k: {"seeds": [{"metrics": m} for m in v]}
                               for k, v in records.items()})
  rows = [l.strip("| ").split(" | ") for l in md.splitlines() if l.startswith("| (")]
  # Verdicts (scripts/paper/verdicts.py): (a) batch 4 no worse than 128 beyond the
  # spread (128's range, 0.5%) in both seeds; ranges overlapping with one seed of two
  # each way, or a tie (never reached by either), cannot tell.
  tell = lambda k: f"**cannot tell** ({k} of 2 seeds; the ranges overlap)"
  assert [r[2:] for r in rows] == [
      ["1.90% vs 1.50% / 1.80% vs 2.00%", "higher at batch 4 in 1 of 2, beyond the spread "
       "(0.50%) in 0; the seeds' ranges overlap", "**holds** (2 of 2 seeds)"],
      ["3 vs not reached / 2 vs 2", "layer norm sooner in 1 of 2", tell(1)],   # 2% test error
      ["2 vs not reached / 2 vs not reached", "layer norm sooner in 2 of 2",   # NLL 0.1
       "**holds** (2 of 2 seeds, ranges apart)"],
      ["1 of 3 / 1 of 3", "lower in most epochs in 0 of 2", "**fails** (0 of 2 seeds)"],  # batch 4
      ["not reached vs not reached / not reached vs not reached", "layer norm sooner in 0 of 2",
       tell(0)],
      ["3 of 3 / 3 of 3", "lower in most epochs in 2 of 2", "**holds** (2 of 2 seeds)"],  # 128
      ["2 vs 3 / 2 vs 3", "layer norm sooner in 2 of 2", "**holds** (2 of 2 seeds, ranges apart)"]]


def test_a_finished_record_is_collected_not_run_again(tmp_path, monkeypatch):
  """config.json and metrics.jsonl of a finished run (what results/ keeps),
  copied into a fresh runs folder, count as done; anything else runs."""
  from configs import pi_mnist
  from scripts.paper import runs
  c = pi_mnist.get_config("smoke")
  c.norm, c.batch_size, c.learning_rate = "layer", 128, 3e-4
  record = {"config": {**json.loads(json.dumps(c.to_dict())), "data_dir": "/elsewhere"},
            "git_commit": "def", "versions": {"jax": "x"},
            "host": {"cpu": "Other CPU", "cpu_threads": 2}}
  wd = tmp_path / "runs" / "fig6" / "smoke" / "layer_b128"
  wd.mkdir(parents=True)
  (wd / "config.json").write_text(json.dumps(record))
  (wd / "metrics.jsonl").write_text("".join(json.dumps(
      {"step": 10 * e, "epoch": e, "train_nll": 0.5 / e, "test_error": 0.01,
       "epoch_time_s": 1.0, "examples_per_sec": 50.0}) + "\n" for e in range(1, c.num_epochs + 1)))
  args = ("configs/pi_mnist.py", "smoke", {"norm": "layer", "batch_size": 128,
                                           "learning_rate": 3e-4})
  assert runs.finished(wd, *args)
  # Another config, preset or seed is another run; so is one cut short.
  assert not runs.finished(wd, *args[:2], {**args[2], "learning_rate": 1e-3})
  assert not runs.finished(wd, "configs/pi_mnist.py", "cpu", args[2])
  assert not runs.finished(wd, *args[:2], {**args[2], "seed": 1})
  assert not runs.finished(tmp_path / "nothing", *args)
  # A record made before a field existed counts as the preset's value for it,
  # unless an override asks for another.
  old = json.loads(json.dumps(record))
  del old["config"]["eval_batch_size"]
  (wd / "config.json").write_text(json.dumps(old))
  assert runs.finished(wd, *args)
  assert not runs.finished(wd, *args[:2], {**args[2], "eval_batch_size": 7})
  (wd / "config.json").write_text(json.dumps(record))
  FakeRun.commands = []
  reproduce_on(monkeypatch, tmp_path, FakeRun, ["fig6", "--preset", "smoke"],
               "configs/pi_mnist.py:smoke")
  launched = [next(a for a in cmd if a.startswith("--workdir=")).rsplit("/", 1)[-1]
              for cmd in FakeRun.commands]
  assert len(launched) == 5 and "layer_b128" not in launched
  out = tmp_path / "res" / "fig6_smoke"
  assert json.loads((out / "layer_b128" / "config.json").read_text())["git_commit"] == "def"
  row = next(l for l in (out / "results.md").read_text().splitlines()
             if l.startswith("| Layer norm, batch 128 |"))
  assert row.split(" | ")[1] == "0.0100"
  # A record whose last line is cut short (a full disk) is not finished.
  text = (wd / "metrics.jsonl").read_text()
  (wd / "metrics.jsonl").write_text(text[:-20])
  assert not runs.finished(wd, *args)


def test_runs_made_before_the_iam_ondb_reader_fix_are_told_apart():
  import subprocess  # pylint: disable=g-import-not-at-top
  from scripts.paper import fig5, runs
  head = subprocess.run(("git", "rev-parse", "HEAD"), cwd=runs.REPO, capture_output=True,
                        text=True).stdout.strip()
  # results/fig5_cpu's runs, at 4707ea4, read the old reader; HEAD has the fix.
  assert fig5.made_before("4707ea403575d5b5494850111b81fe5949407701-dirty",
                               fig5.IAM_READER_FIX) is True
  assert fig5.made_before(head, fig5.IAM_READER_FIX) is False
  assert fig5.made_before("not-a-commit", fig5.IAM_READER_FIX) is None
  assert fig5.OLD_READER_NOTE.startswith("> **Made with the old IAM-OnDB reader**")


class FakeHandwritingRun(FakeRun):
  """A handwriting run: LN's validation NLL falls 30 nats an evaluation, the
  baseline's 20 (seed s starts 10 s nats lower), 4 evaluations of 100 updates."""

  def __init__(self, cmd, **kw):
    FakeRun.commands.append(cmd)
    FakeRun.envs.append(kw.get("env") or {})
    config, wd = fake_record(cmd)
    seed = config["seed"]
    fall = 30.0 if config["norm"] == "layer" else 20.0
    (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in spread_epochs([
        {"step": 100 * i, "epoch": i, "valid_nll": -10.0 * seed - fall * i,
         "valid_nll_point": -1.0, "test_nll": -fall * i, "train_nll": -fall * i,
         "epoch_time_s": 50.0} for i in range(1, 5)], config["num_epochs"])))
    for f in ("samples.png", "attention.png"):
      (wd / f).write_bytes(b"\x89PNG")
    self.returncode = 0


def test_fig5_with_seeds_judges_the_claim_seed_by_seed(tmp_path, monkeypatch):
  FakeRun.commands = []
  reproduce_on(monkeypatch, tmp_path, FakeHandwritingRun, ["fig5", "--preset", "smoke", "--seeds", "3"],
               "configs/handwriting.py:smoke")
  assert len(FakeRun.commands) == 6
  md = (tmp_path / "res" / "fig5_smoke" / "results.md").read_text()
  lines = md.splitlines()
  # Final valid NLL: LN -120, -130, -140 (mean -130, sd 10); baseline -80, -90, -100.
  # (the test NLL is the same in every seed: sd 0).
  assert ("| LN-LSTM | -130.0 ± 10.0 | -130.0 ± 10.0 | -1.000 ± 0.000 | -120.0 ± 0.0 | "
          "0.500 ± 0.000 |") in lines
  assert ("| LSTM | -90.0 ± 10.0 | -90.0 ± 10.0 | -1.000 ± 0.000 | -80.0 ± 0.0 | "
          "0.500 ± 0.000 |") in lines
  # The mean baseline final (-90) is not reached by seed 0's baseline (-80 at the end).
  assert "| LSTM | 100 | 100 | 100 | not reached / 400 / 400 |" in lines
  # LN reaches each seed's baseline final (-80, -90, -100) at update 300 in every seed.
  row = next(l for l in lines if l.startswith("| LN is faster |"))
  assert "300 vs 400 / 300 vs 400 / 300 vs 400" in row and "sooner in 3 of 3" in row
  row = next(l for l in lines if l.startswith("| LN is ahead along training |"))
  assert "4 of 4 / 4 of 4 / 4 of 4" in row and "in 3 of 3" in row
  assert "**Made with the old IAM-OnDB reader**" not in md  # "abc" is no commit here
  assert (tmp_path / "res" / "fig5_smoke" / "fig5.png").read_bytes().startswith(b"\x89PNG")


def test_a_target_split_across_sittings_with_only_and_adopt_results(tmp_path, monkeypatch):
  """--only runs some runs and records them without tables; a later sitting on
  a fresh runs folder takes those records from the results folder
  (--adopt_results) and runs only the rest."""
  from scripts import reproduce
  from scripts.paper import runs
  monkeypatch.setattr(runs.subprocess, "Popen", FakeRun)
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke")
  res = tmp_path / "res"
  base = ["fig6", "--preset", "smoke", "--results_dir", str(res)]
  FakeRun.commands = []
  with pytest.raises(SystemExit) as stop:
    reproduce.main([*base, "--runs_dir", str(tmp_path / "a"), "--only", "layer_b128,none_b4"])
  assert stop.value.code == 0
  launched = lambda: sorted(next(a for a in c if a.startswith("--workdir=")).rsplit("/", 1)[-1]
                            for c in FakeRun.commands)
  assert launched() == ["layer_b128", "none_b4"]
  out = res / "fig6_smoke"
  assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["layer_b128", "none_b4"]
  md = (out / "results.md").read_text()
  assert md.startswith("# fig6 (smoke preset): 2 of 6 runs recorded; no tables yet")
  assert "Still to run: none_b128, batch_b128, layer_b4, batch_b4." in md
  assert ("`python scripts/reproduce.py fig6 --preset smoke --results_dir "
          f"{res} --adopt_results`") in md
  assert not (out / "fig6.png").exists()
  # Without --adopt_results a fresh runs folder runs everything again.
  FakeRun.commands = []
  reproduce.main([*base, "--runs_dir", str(tmp_path / "b")])
  assert len(FakeRun.commands) == 6
  # With it, the recorded runs are adopted and the rest run; then the tables.
  (tmp_path / "b").rename(tmp_path / "b_old")
  # The results folder as the first sitting committed it: its two records
  # (another commit), not the other sitting's four.
  import shutil  # pylint: disable=g-import-not-at-top
  for name in ("none_b128", "batch_b128", "layer_b4", "batch_b4"):
    shutil.rmtree(out / name)
  for name in ("layer_b128", "none_b4"):
    rec = json.loads((out / name / "config.json").read_text())
    (out / name / "config.json").write_text(json.dumps({**rec, "git_commit": "first"}))
  FakeRun.commands = []
  reproduce.main([*base, "--runs_dir", str(tmp_path / "c"), "--adopt_results"])
  assert "layer_b128" not in launched() and "none_b4" not in launched()
  assert len(FakeRun.commands) == 4
  assert json.loads((tmp_path / "c" / "fig6" / "smoke" / "layer_b128" / "config.json")
                    .read_text())["git_commit"] == "first"
  md = (out / "results.md").read_text()
  assert md.startswith("# ") and "no tables yet" not in md
  assert "Commit: abc, first" in md
  assert (out / "fig6.png").read_bytes().startswith(b"\x89PNG")


def test_only_names_runs_of_the_target(tmp_path, capsys):
  from scripts import reproduce
  with pytest.raises(SystemExit) as stop:
    reproduce.main(["fig6", "--preset", "smoke", "--runs_dir", str(tmp_path), "--only",
                    "layer_b128,layer_b12"])
  assert stop.value.code.startswith("error: --only names no run of fig6 (--seeds 1): layer_b12; "
                                    "its runs: ")
  assert not (tmp_path / "fig6").exists()
  with pytest.raises(SystemExit) as stop:
    reproduce.main(["geometry", "--only", "x"])
  assert stop.value.code == 2
  assert "geometry trains none" in capsys.readouterr().err


class FakeSkipRun(FakeRun):
  """A skip-thoughts run, 3 evaluations of 100 updates: LN's held-out NLL is
  lower at each; its final MR better by 1 point in every seed; its final SICK
  r better by 0.02 (1 - seed): better, equal, worse. The last record holds
  the baselines' scores (TF-IDF: seed-dependent SICK r, the same in both norms)."""

  def __init__(self, cmd, **kw):
    FakeRun.commands.append(cmd)
    FakeRun.envs.append(kw.get("env") or {})
    config, wd = fake_record(cmd)
    seed = config["seed"]
    ln = config["norm"] == "layer"
    recs = []
    for i in (1, 2, 3):
      r = {"step": 100 * i, "epoch": i, "examples_per_sec": 32.0,
           "heldout_nll": (4.9 - 0.25 * i if ln else 5.0 - 0.2 * i) + 0.01 * seed,
           "SICK_r": 0.5 + 0.05 * i + (0.02 * (1 - seed) if ln else 0.0),
           "SICK_mse": 0.6 - 0.05 * i - (0.02 if ln else 0.0),
           "MR_acc": 0.6 + 0.01 * i + (0.01 if ln else 0.0)}
      if i == 3:
        r |= {"tfidf_SICK_r": 0.4 + 0.01 * seed, "tfidf_SICK_mse": 0.8, "tfidf_MR_acc": 0.62,
              "embmean_SICK_r": 0.45, "embmean_SICK_mse": 0.7, "embmean_MR_acc": 0.55}
      recs.append(r)
    (wd / "metrics.jsonl").write_text("".join(
        json.dumps(r) + "\n" for r in spread_epochs(recs, config["num_epochs"])))
    self.returncode = 0


def test_table3_with_seeds_gives_mean_and_sd_baseline_rows_and_claims_seed_by_seed(
    tmp_path, monkeypatch):
  judge_smoke_runs(monkeypatch)
  FakeRun.commands = []
  reproduce_on(monkeypatch, tmp_path, FakeSkipRun, ["table3", "--preset", "smoke", "--seeds", "3"],
               "configs/skipthoughts.py:smoke")
  assert [next(a for a in c if a.startswith("--workdir=")).rsplit("/", 1)[-1]
          for c in FakeRun.commands] == ["none", "none_seed1", "none_seed2", "layer",
                                         "layer_seed1", "layer_seed2"]
  out = tmp_path / "res" / "table3_smoke"
  assert (out / "fig3.png").read_bytes().startswith(b"\x89PNG")
  lines = (out / "results.md").read_text().splitlines()
  assert lines[lines.index("| run | updates | heldout NLL | SICK r | SICK MSE | MR | s / update |")
               + 1:][5:10] == [
      "| Ours (GRU), Gutenberg stand-in | 300 | 4.410 ± 0.010 | 0.650 ± 0.000 | 0.450 ± 0.000 "
      "| 63.0 ± 0.0 | 1.000 ± 0.000 |",  # smoke: batch 32 at 32 triples a second
      "| Ours (LN-GRU), Gutenberg stand-in | 300 | 4.160 ± 0.010 | 0.650 ± 0.020 | 0.430 ± 0.000 "
      "| 64.0 ± 0.0 | 1.000 ± 0.000 |",
      "| baseline: TF-IDF bag of words, Gutenberg stand-in vocabulary | 300 | | 0.410 ± 0.010 "
      "| 0.800 ± 0.000 | 62.0 ± 0.0 | |",
      "| baseline: mean of trained word embeddings (GRU), Gutenberg stand-in | 300 | | "
      "0.450 ± 0.000 | 0.700 ± 0.000 | 55.0 ± 0.0 | |",
      "| baseline: mean of trained word embeddings (LN-GRU), Gutenberg stand-in | 300 | | "
      "0.450 ± 0.000 | 0.700 ± 0.000 | 55.0 ± 0.0 | |"]
  assert "Seeds: 3 per run." in "\n".join(lines)
  row = lambda start: next(l for l in lines if l.startswith(start))
  # Held-out NLL, seed s: LN 4.9 - 0.25 i + 0.01 s against 5.0 - 0.2 i + 0.01 s.
  assert row("| LN trains faster | evaluations") == (
      "| LN trains faster | evaluations at which LN's held-out NLL is lower | 3 of 3 / 3 of 3 / "
      "3 of 3 | lower at most evaluations in 3 of 3 | -0.250 ± 0.000 | **holds** (3 of 3 seeds) |")
  # The baseline's final NLL (4.40 + 0.01 s) is reached by LN at update 200 (4.40 + 0.01 s).
  assert row("| LN trains faster | update") .split(" | ")[2:4] == [
      "200 vs 300 / 200 vs 300 / 200 vs 300", "sooner in 3 of 3; 67%; 67%; 67% of the baseline's updates"]
  assert row("| LN scores better downstream (SICK r) |").split(" | ")[2:] == [
      "0.670 vs 0.650 / 0.650 vs 0.650 / 0.630 vs 0.650", "LN better in 1 of 3", "0.000 ± 0.020",
      "**cannot tell** (1 of 3 seeds; the ranges overlap) |"]  # a tie in the middle seed
  assert row("| LN scores better downstream (MR) |").split(" | ")[3:] == [
      "LN better in 3 of 3", "1.0 ± 0.0", "**holds** (3 of 3 seeds, ranges apart) |"]
  assert row("| LN scores better downstream (SICK MSE) |").split(" | ")[3] == "LN better in 3 of 3"
  # Matched updates, mean ± sd over seeds; LN better at every evaluation in MR.
  assert row("| 200 |").startswith("| 200 | 4.610 ± 0.010 / 4.410 ± 0.010 | 0.600 ± 0.000 / ")
  assert row("| MR | 3 of 3 |") == "| MR | 3 of 3 | 300 | 200 |"
  # What the GRU adds over each baseline, seed by seed.
  assert row("| SICK r | 0.240") == ("| SICK r | 0.240 ± 0.010 (3 of 3) | 0.240 ± 0.030 (3 of 3) "
                                     "| 0.200 ± 0.000 (3 of 3) | 0.200 ± 0.020 (3 of 3) |")


def test_table3_renders_one_seed_runs_made_before_the_baselines():
  from scripts.paper import table3
  # Records as the Gutenberg preset wrote them before eval_baselines and corpus existed.
  row = lambda step, nll: {"step": step, "heldout_nll": nll, "examples_per_sec": 64.0,
                           "SICK_r": 0.6, "SICK_rho": 0.55, "SICK_mse": 0.6, "MR_acc": 0.58,
                           "CR_acc": 0.66, "SUBJ_acc": 0.78, "MPQA_acc": 0.7}
  ms = {"none": [row(923, 4.5), row(5538, 4.146)], "layer": [row(923, 4.3), row(5538, 4.034)]}
  c = {"batch_size": 64, "eval_baselines": False}
  md = table3.skip_tables(ms, c)
  assert "baseline:" not in md and "| Ours (GRU), Gutenberg stand-in | 5538 |" in md
  assert "| LN trains faster | evaluations at which LN's held-out NLL is lower |" in md
  assert table3.gru_vs_baselines({n: [m] for n, m in ms.items()}, ["SICK_r"]) == ""


class FakeResume(FakeRun):
  """A run started again in its workdir: as the run loop did before it
  re-evaluated a damaged last record (nothing to train, exit 0), or with
  ``reevaluate`` as it does now (the final evaluation written again)."""
  reevaluate = False

  def __new__(cls, cmd, **kw):
    return FakeRun.__new__(cls, cmd, **kw)

  def __init__(self, cmd, **kw):
    wd = Path(dict(a[2:].split("=", 1) for a in cmd if a.startswith("--"))["workdir"])
    if not wd.exists():
      super().__init__(cmd, **kw)
      return
    FakeRun.commands.append(cmd)
    if FakeResume.reevaluate:
      good = [l for l in (wd / "metrics.jsonl").read_text().splitlines() if l.endswith("}")]
      last = {**json.loads(good[0]), "step": 20, "epoch": 2, "test_error": 0.01,
              "train_nll": 0.5}
      (wd / "metrics.jsonl").write_text("".join(l + "\n" for l in good[:1]) + json.dumps(last)
                                        + "\n")
    self.returncode = 0


def test_an_incomplete_record_is_run_again_and_never_tabled(tmp_path, monkeypatch):
  """A metrics.jsonl whose last line is cut short (a full disk, a kill) is no
  finished run: its command runs again, and while its record stays
  incomplete the target stops, naming it, with no table or figure from the
  records left."""
  from scripts import reproduce
  from scripts.paper import runs
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke")
  monkeypatch.setattr(runs.subprocess, "Popen", FakeResume)
  argv = ["fig6", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs"), "--results_dir",
          str(tmp_path / "res")]
  FakeResume.reevaluate = False
  reproduce.main(argv)
  out = tmp_path / "res" / "fig6_smoke"
  md, png = (out / "results.md").read_text(), (out / "fig6.png").read_bytes()
  row = lambda text: next(l for l in text.splitlines() if l.startswith("| Layer norm, batch 128 |"))
  assert row(md).split(" | ")[1] == "0.0100"  # epoch 2: 0.02 / 2
  wd = tmp_path / "runs" / "fig6" / "smoke" / "layer_b128"
  text = (wd / "metrics.jsonl").read_text()
  (wd / "metrics.jsonl").write_text(text[:-20])
  FakeRun.commands = []
  with pytest.raises(SystemExit) as stop:
    reproduce.main(argv)
  assert [workdir_name(c) for c in FakeRun.commands] == ["layer_b128"]
  assert stop.value.code == (
      f"error: run layer_b128 ended, but its record in {wd} is incomplete (metrics.jsonl line 2 "
      "of 2 is not a whole record); no tables or figures are made from a partial set of records")
  assert (out / "results.md").read_text() == md and (out / "fig6.png").read_bytes() == png
  # Once the run writes its final record again, the table is the whole run's.
  FakeResume.reevaluate = True
  FakeRun.commands = []
  reproduce.main(argv)
  assert [workdir_name(c) for c in FakeRun.commands] == ["layer_b128"]
  assert row((out / "results.md").read_text()).split(" | ")[1] == "0.0100"
  FakeRun.commands = []
  reproduce.main(argv)
  assert FakeRun.commands == []  # finished now: not run again


def test_a_finished_record_has_every_line_its_final_step_and_final_metrics(tmp_path):
  from configs import pi_mnist
  from scripts.paper import runs, table2
  c = json.loads(json.dumps(pi_mnist.get_config("smoke").to_dict()))
  wd = tmp_path / "wd"
  wd.mkdir()
  (wd / "config.json").write_text(json.dumps({"config": c}))
  rec = lambda e, **extra: json.dumps({"step": 10 * e, "epoch": e, "train_nll": 1.0 / e,
                                       "test_error": 0.1 / e, **extra})
  state = lambda **kw: runs.record_state(wd, "configs/pi_mnist.py", "smoke", {}, **kw)
  write = lambda *lines: (wd / "metrics.jsonl").write_text("".join(l + "\n" for l in lines))
  write(rec(1), rec(2))
  assert state() == ("finished", "")
  write(rec(1)[:-3], rec(2))  # a damaged line anywhere
  assert state() == (None, "metrics.jsonl line 1 of 2 is not a whole record")
  write(rec(1), '{"epoch": 2}')  # no step: not a record of the run loop
  assert state() == (None, "metrics.jsonl line 2 of 2 is not a whole record")
  write(rec(1))
  assert state() == (None, "its last record is at epoch 1, the run ends at epoch 2")
  write(rec(1), json.dumps({"step": 20, "epoch": 2, "train_nll": 0.5}))
  assert state() == (None, "its last record (step 20) lacks the final evaluation's test_error")
  write(json.dumps({"step": 20, "epoch": 2}))
  assert state() == (None, "its last record (step 20) lacks the final evaluation's metrics")
  write()
  assert state() == (None, "metrics.jsonl holds no record")
  (wd / "metrics.jsonl").unlink()
  assert state() == (None, "no metrics.jsonl")
  write(rec(1), rec(2))
  assert state(keep=("table1.md",)) == (None, "no table1.md")
  # A stop that is a result (the transformer's divergence) needs no final step.
  (wd / "diverged.json").write_text("{}")
  write(rec(1))
  assert state(stops=("diverged.json",)) == ("diverged", "")
  # Order embeddings: the last step is num_epochs passes of the training images.
  assert table2.final_step(wd, {"num_epochs": 200, "batch_size": 128}) is None  # no init file
  (wd / "init_metrics.json").write_text(json.dumps({"num_images": {"train": 762}}))
  assert table2.final_step(wd, {"num_epochs": 200, "batch_size": 128}) == 200 * (762 // 128)


def test_results_and_runs_folders_are_checked_before_the_first_run(tmp_path, monkeypatch):
  from scripts import reproduce
  from scripts.paper import runs
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke")
  FakeRun.commands = []
  monkeypatch.setattr(runs.subprocess, "Popen", FakeRun)
  afile = tmp_path / "afile"
  afile.write_text("")
  if os.geteuid() == 0:  # root writes through a folder's permissions; sysfs makes no files
    ro, why = Path("/sys/lnorm_results"), "/sys: permission denied"
  else:
    ro = tmp_path / "ro"
    ro.mkdir(0o555)
    why = f"{ro}: permission denied"
  for flag, path, line in (
      ("--results_dir", afile, f"error: --results_dir {afile} is a file"),
      ("--results_dir", afile / "x", f"error: --results_dir {afile / 'x'} is under {afile}, "
                                     "which is a file"),
      ("--results_dir", ro, f"error: --results_dir {ro} is not writable ({why})"),
      ("--runs_dir", afile, f"error: --runs_dir {afile} is a file")):
    argv = ["fig6", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs"), "--results_dir",
            str(tmp_path / "res"), flag, str(path)]
    with pytest.raises(SystemExit) as stop:
      reproduce.main(argv)
    assert stop.value.code.startswith(line + "; give a directory, new or writable. Nothing "
                                      "was run"), stop.value.code
  assert FakeRun.commands == []


def test_a_workdir_another_process_holds_is_named_before_anything_runs(tmp_path, monkeypatch):
  import fcntl
  from scripts import reproduce
  from scripts.paper import runs
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke")
  FakeRun.commands = []
  monkeypatch.setattr(runs.subprocess, "Popen", FakeRun)
  wd = tmp_path / "runs" / "fig6" / "smoke" / "batch_b4"
  wd.mkdir(parents=True)
  # As experiments/runner/workdir.py holds it: a flock, the holder's pid inside.
  with open(wd / "lock", "w") as f:
    f.write("4242\n")
    f.flush()
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    argv = ["fig6", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs"), "--results_dir",
            str(tmp_path / "res")]
    with pytest.raises(SystemExit) as stop:
      reproduce.main(argv)
    assert stop.value.code == (
        f"error: run batch_b4's workdir {wd} is in use by another process (pid 4242), another "
        "reproduce.py or experiments.main running it; wait for it to end, or use another "
        "--runs_dir")
    assert FakeRun.commands == []
    assert runs.lock_holder(wd) == "4242"
  # Let go (the process ended): a lock file alone holds nothing.
  assert runs.lock_holder(wd) is None
  (wd / "lock").unlink()
  wd.rmdir()
  reproduce.main(argv)
  assert len(FakeRun.commands) == 6


def _alive(pid: int) -> bool:
  """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
  try:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
  except (FileNotFoundError, ProcessLookupError, IndexError):
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_runs_end_with_reproduce_killed_by_sigkill(tmp_path):
  """kill -9 of reproduce.py leaves none of its runs training: here the run is
  a process that writes its pid and sleeps."""
  import signal
  import time
  pidfile = tmp_path / "run.pid"
  script = tmp_path / "reproduce_with_a_sleeping_run.py"
  script.write_text(f"""
import subprocess, sys
sys.path.insert(0, {str(REPO)!r})
from scripts import reproduce
from scripts.paper import runs
real = subprocess.Popen
sleeper = "import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
runs.subprocess.Popen = lambda cmd, **kw: real([sys.executable, "-c", sleeper], **kw)
reproduce.main(["table1", "--runs_dir", {str(tmp_path / 'runs')!r},
                "--results_dir", {str(tmp_path / 'res')!r}])
""")
  parent = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
  child = None
  try:
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and pidfile.read_text()):
      assert parent.poll() is None, parent.stderr.read().decode()
      assert time.monotonic() < deadline, "the run never started"
      time.sleep(0.1)
    child = int(pidfile.read_text())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
      time.sleep(0.1)
    assert not _alive(child), "the run outlived reproduce.py"
  finally:
    if parent.poll() is None:
      parent.kill()
    if child is not None and _alive(child):
      os.kill(child, signal.SIGKILL)


def test_redraw_uses_the_records_seeds_and_reproduces_the_committed_target(tmp_path):
  """results/fig5_cpu holds 3 seeds; its own docstring's command drew one."""
  from scripts import redraw
  out = tmp_path / "fig5"
  assert redraw.record_seeds(REPO / "results" / "fig5_cpu") == 3
  assert redraw.main(["fig5", "--preset", "cpu", "--out", str(out)]) == 0
  assert (out / "results.md").read_text() == (REPO / "results" / "fig5_cpu" / "results.md").read_text()
  assert "Seeds: 3 per run." in (out / "results.md").read_text()
  assert (out / "fig5.png").read_bytes().startswith(b"\x89PNG")


def test_redraw_replaces_only_figures_and_refuses_a_partial_record_set(tmp_path, capsys):
  import shutil
  from scripts import redraw
  res = tmp_path / "results"
  shutil.copytree(REPO / "results" / "fig5_cpu", res / "fig5_cpu")
  (res / "fig5_cpu" / "fig5.png").unlink()
  committed = {p: p.read_bytes() for p in (res / "fig5_cpu").rglob("*") if p.is_file()}
  assert redraw.main(["fig5", "--preset", "cpu", "--results_dir", str(res)]) == 0
  assert (res / "fig5_cpu" / "fig5.png").read_bytes().startswith(b"\x89PNG")
  assert {p: p.read_bytes() for p in committed} == committed  # records and results.md as they were
  (res / "fig5_cpu" / "fig5.png").unlink()
  m = res / "fig5_cpu" / "layer_seed1" / "metrics.jsonl"
  m.write_text(m.read_text()[:-20])
  capsys.readouterr()
  assert redraw.main(["fig5", "--preset", "cpu", "--results_dir", str(res)]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"error: {res}/fig5_cpu/layer_seed1 is not a whole record of fig5 (metrics.jsonl "
                 "line 17 of 17 is not a whole record); redraw.py draws from whole records only "
                 "and trains nothing"]
  assert not (res / "fig5_cpu" / "fig5.png").exists()
  m.write_bytes(committed[m])
  shutil.rmtree(res / "fig5_cpu" / "none_seed2")
  assert redraw.main(["fig5", "--preset", "cpu", "--results_dir", str(res)]) == 1
  assert capsys.readouterr().err.strip() == (
      f"error: {res}/fig5_cpu/none_seed2 is not a whole record of fig5 (no config.json); "
      "redraw.py draws from whole records only and trains nothing")


def test_a_smoke_results_md_checks_the_plumbing_not_the_claims(tmp_path, monkeypatch):
  """Smoke runs judge no claim: results.md says so at its top, under its one
  heading, and every verdict cell says so; one seed has no seeds' ranges."""
  from scripts import reproduce
  from scripts.paper import runs, verdicts
  monkeypatch.setattr(runs.subprocess, "Popen", FakeRun)
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke")
  argv = ["fig6", "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "res")]
  reproduce.main(argv + ["--preset", "smoke"])
  lines = (tmp_path / "res" / "fig6_smoke" / "results.md").read_text().splitlines()
  assert [l for l in lines if l.startswith("# ")] == [lines[0]]
  assert lines[2].startswith("**Smoke preset: this checks the plumbing, not the claims.**")
  claims = [l.strip("| ").split(" | ") for l in lines if l.startswith("| (")]
  assert len(claims) == 7 and all(r[-1] == verdicts.PLUMBING for r in claims)
  assert not any("ranges" in c for r in claims for c in r)
  # Outside a smoke run the verdicts are verdicts again.
  assert str(verdicts.compare([1.0], [2.0], lower=True)).startswith("agrees in the one seed")
  with verdicts.smoke():
    assert str(verdicts.compare([1.0], [2.0], lower=True)) == verdicts.PLUMBING
    with verdicts.smoke(False):
      assert str(verdicts.passes([True, True])) == "**holds** (2 of 2 seeds)"
  assert str(verdicts.passes([True, True])) == "**holds** (2 of 2 seeds)"


def test_training_seconds_keep_their_digits_below_ten():
  from scripts.paper import runs
  assert runs.seconds([0.31]) == "0.31"  # a smoke run's: not 0
  assert runs.seconds([2.0, 4.0, 6.0]) == "4 ± 2"
  assert runs.seconds([123.4, 125.6]) == f"124 ± {statistics.stdev([123.4, 125.6]):.0f}"


def test_table1_results_md_has_one_heading(tmp_path, monkeypatch):
  """The run's table1.md opens with a heading of its own: it becomes results.md's title."""
  from scripts import reproduce
  from scripts.paper import table1

  def fake_run_all(args, config, runs, keep=(), **_):
    (table1.out_dir(args) / "table1").mkdir(parents=True)
    (table1.out_dir(args) / "table1" / "table1.md").write_text(
        "# Table 1: invariance\n\nbody\n\n## More\n")
    return {0: {"git_commit": "abc", "versions": {}, "metrics": []}}
  monkeypatch.setattr(table1, "run_all", fake_run_all)
  args = reproduce.parse(["table1", "--preset", "smoke", "--runs_dir", str(tmp_path / "runs"),
                          "--results_dir", str(tmp_path / "res")])
  reproduce.run(args)
  md = (tmp_path / "res" / "table1_smoke" / "results.md").read_text()
  assert [l for l in md.splitlines() if l.startswith("# ")] == ["# Table 1: invariance"]
  assert md.startswith("# Table 1: invariance\n\n**Smoke preset") and md.endswith(
      "\n\nbody\n\n## More\n")


def test_committed_results_name_no_machine_path():
  """results.md and the READMEs in results/ say paths relative to the data
  folder or the repository, never one machine's (the records' config.json and
  grad_norms.json keep where each run read its data)."""
  import re  # pylint: disable=import-outside-toplevel
  found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in (REPO / "results").rglob("*.md")
           for m in re.finditer(r"(?<![\w.])/(?:work|home|tmp|root|Users)/\S*", p.read_text())]
  assert not found, found


def _table_widths(md: str) -> list[tuple[int, int, list[int]]]:
  """(line, header cells, [cells of the delimiter row and every body row]) of
  each markdown table in md; cells split on unescaped pipes."""
  import re  # pylint: disable=import-outside-toplevel
  width = lambda line: len(re.split(r"(?<!\\)\|", line.strip())) - 2
  lines, out, i = md.splitlines(), [], 0
  while i + 1 < len(lines):
    if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+\s*", lines[i + 1]):
      j = i + 1
      while j < len(lines) and lines[j].startswith("|"):
        j += 1
      out.append((i + 1, width(lines[i]), [width(l) for l in lines[i + 1:j]]))
      i = j
    else:
      i += 1
  return out


def test_table_widths_catch_a_delimiter_row_one_cell_too_wide():
  assert _table_widths("| a | b |\n|---|---|\n| 1 | 2 |\n") == [(1, 2, [2, 2])]
  assert _table_widths("x\n| a | b |\n|---|---|---|\n| 1 \\| 2 | 3 |\n") == [(2, 2, [3, 2])]


def test_committed_tables_have_as_many_cells_in_every_row_as_in_the_header():
  """A delimiter row of another width is not a table on GitHub: it renders as
  text (the norms study's sweep tables did, one cell too wide)."""
  docs = [*(REPO / "results").rglob("*.md"), REPO / "README.md", REPO / "BENCHMARKS.md"]
  bad = [f"{p.relative_to(REPO)}:{line} header {h}, rows {ws}"
         for p in docs for line, h, ws in _table_widths(p.read_text())
         if any(w != h for w in ws)]
  assert not bad, bad
