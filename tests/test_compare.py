"""scripts/compare.py and experiments/runner/figures.py: curves and a comparison
table from any set of workdirs."""

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest

from configs import pi_mnist as pi_mnist_config
from experiments import pi_mnist
from experiments.runner import figures
from lnorm.data import mnist
from scripts import compare
from tests.run_records import REPO
from tests.tiny_data import write_dataset

PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(wd, config: dict, test_error: list[float], epoch_time_s: float = 2.0,
             steps_per_epoch: int = 10):
  wd.mkdir(parents=True)
  (wd / "config.json").write_text(json.dumps({"config": config, "git_commit": "abc"}))
  (wd / "metrics.jsonl").write_text("".join(json.dumps(
      {"step": steps_per_epoch * (e + 1), "epoch": e + 1, "wall_time": 100.0 + e,
       "epoch_time_s": epoch_time_s, "train_nll": 1.0 / (e + 1), "test_error": v}) + "\n"
      for e, v in enumerate(test_error)))
  return wd


def rows(md: str) -> list[list[str]]:
  return [[c.strip() for c in l.strip("|").split("|")] for l in md.strip().splitlines()]


def test_table_gives_final_and_best_with_their_steps_and_the_config_differences(tmp_path):
  a = fake_run(tmp_path / "a", {"norm": "layer", "batch_size": 128, "seed": 0},
               [0.30, 0.10, 0.20], epoch_time_s=1.5)
  b = fake_run(tmp_path / "b", {"norm": "none", "batch_size": 128, "seed": 0},
               [0.40, 0.35, 0.25, 0.26], epoch_time_s=2.0, steps_per_epoch=7)
  out = tmp_path / "fig" / "cmp.png"
  md = compare.compare([str(a), str(b)], out=out)
  t = rows(md)
  assert t[0] == ["run", "norm", "steps", "epochs", "final test_error", "at step",
                  "lowest test_error", "at step", "train time (s)"]
  assert t[2] == ["a", "layer", "30", "3", "0.2", "30", "0.1", "20", "4.5"]  # 3 x 1.5 s
  assert t[3] == ["b", "none", "28", "4", "0.26", "28", "0.25", "21", "8"]
  assert out.read_bytes().startswith(PNG)

  # --best max, two metrics, steps on x: one figure with a panel per metric.
  t = rows(compare.compare([str(a), str(b)], ["test_error", "train_nll"], "step", out, "max"))
  assert t[0][6:8] == ["highest test_error", "at step"]
  assert t[2][4:12] == ["0.2", "30", "0.3", "10", "0.3333", "30", "1", "10"]


def test_accuracies_are_best_highest_and_runs_without_epochs_are_drawn_by_step(tmp_path,
                                                                            monkeypatch):
  wd = tmp_path / "rnn"
  wd.mkdir()
  (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
      {"step": 200, "epoch": None, "valid_accuracy": 0.5, "valid_nll": 2.0},
      {"step": 400, "epoch": None, "valid_accuracy": 0.7, "valid_nll": 1.0},
      {"step": 600, "epoch": None, "valid_accuracy": 0.6, "valid_nll": 1.5}]))
  drawn = []
  monkeypatch.setattr(figures, "plot_panels", lambda runs, out, axes, x: drawn.append(x))
  t = rows(compare.compare([str(wd)], ["valid_accuracy", "valid_nll"], out=tmp_path / "c.png"))
  # No run counts epochs: no epochs column (not a blank one).
  assert t[0][1:10] == ["steps", "final valid_accuracy", "at step",
                        "highest valid_accuracy", "at step", "final valid_nll", "at step",
                        "lowest valid_nll", "at step"]
  assert t[2][1:11] == ["600", "0.6", "600", "0.7", "400", "1.5", "600", "1", "400", ""]
  assert drawn == ["step"]


def test_group_seeds_reports_mean_and_sd_and_keeps_other_settings_apart(tmp_path):
  errors = {0: [0.5, 0.2], 1: [0.4, 0.3], 2: [0.6, 0.1]}
  wds = [str(fake_run(tmp_path / f"ln_s{s}", {"norm": "layer", "seed": s}, e))
         for s, e in errors.items()]
  wds.append(str(fake_run(tmp_path / "bn", {"norm": "batch", "seed": 0}, [0.9, 0.8])))
  t = rows(compare.compare(wds, out=tmp_path / "cmp.png", group_seeds=True))
  assert [r[0] for r in t[2:]] == ["ln_s0 (+2 seeds)", "bn"]
  finals = [e[-1] for e in errors.values()]
  bests = [min(e) for e in errors.values()]
  assert t[2][1] == "layer"  # seed is not a column: it is what the group averages over
  assert t[2][4:8] == [f"{statistics.mean(finals):.4g} ± {statistics.stdev(finals):.4g}",
                       "20 / 20 / 20",
                       f"{statistics.mean(bests):.4g} ± {statistics.stdev(bests):.4g}",
                       "20 / 20 / 20"]
  assert t[3][4] == "0.8"


def test_series_is_mean_and_range_over_the_x_every_seed_has():
  seeds = [[{"step": 1, "epoch": 1, "m": 1.0}, {"step": 2, "epoch": 2, "m": 4.0},
            {"step": 3, "epoch": 2.5}],  # an evaluation without m: left out
           [{"step": 1, "epoch": 1, "m": 3.0}, {"step": 2, "epoch": 2, "m": 2.0},
            {"step": 3, "epoch": 3, "m": 7.0}]]  # epoch 3: only this seed has it
  s = figures.series(seeds, "m", "epoch")
  np.testing.assert_array_equal(s.x, [1, 2])
  np.testing.assert_array_equal(s.mean, [2.0, 3.0])
  np.testing.assert_array_equal(s.lo, [1.0, 2.0])
  np.testing.assert_array_equal(s.hi, [3.0, 4.0])
  assert s.num_seeds == 2
  with pytest.raises(ValueError, match="x='time' is not valid"):
    figures.series(seeds, "m", "time")


def test_ymax_caps_the_axis_unless_every_curve_lies_above_it(tmp_path, monkeypatch):
  limits = []
  monkeypatch.setattr(figures, "save", lambda fig, path, **_: limits.append(
      fig.axes[0].get_ylim()))
  axis = figures.Axis("e", ymax=0.1)
  figures.plot({"a": [{"epoch": 1, "e": 0.5}, {"epoch": 2, "e": 0.05}]}, tmp_path / "a.png", axis)
  figures.plot({"a": [{"epoch": 1, "e": 0.5}, {"epoch": 2, "e": 0.3}]}, tmp_path / "b.png", axis)
  assert limits[0] == (0, 0.1)
  assert limits[1][0] == 0 and limits[1][1] > 0.5


def test_read_metrics_skips_only_a_partial_last_line(tmp_path):
  (tmp_path / "metrics.jsonl").write_text('{"step": 1, "m": 1}\n{"step": 2, "m": 2}\n{"step": 3, "m')
  assert figures.read_metrics(tmp_path) == [{"step": 1, "m": 1}, {"step": 2, "m": 2}]
  (tmp_path / "metrics.jsonl").write_text('{"step": 1, "m\n{"step": 2, "m": 2}\n')
  with pytest.raises(json.JSONDecodeError):
    figures.read_metrics(tmp_path)


def test_mean_sd_matches_statistics():
  assert figures.mean_sd([0.25]) == "0.2500"
  v = [0.0133, 0.0141, 0.0127]
  assert figures.mean_sd(v, ".3g") == f"{statistics.mean(v):.3g} ± {statistics.stdev(v):.3g}"


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "{missing}: no such workdir"),
    (["{empty}"], "{empty}: no metrics.jsonl (not the workdir of a run?)"),
    (["{a}", "--metric", "valid_bound"],
     "{a} has no metric 'valid_bound'; its metrics: test_error, train_nll"),
    (["{a}", "--out", "{tmp}/fig.pgn"], "--out {tmp}/fig.pgn: the name must end in one of: "),
])
@pytest.mark.slow
def test_bad_input_is_one_line_and_draws_nothing(tmp_path, args, message):
  paths = {"a": fake_run(tmp_path / "a", {"norm": "layer"}, [0.3]), "missing": tmp_path / "x",
           "empty": tmp_path / "empty", "tmp": tmp_path}
  (tmp_path / "empty").mkdir()
  args = [a.format(**paths) for a in args]
  p = subprocess.run([sys.executable, "scripts/compare.py", *args, "--out", str(tmp_path / "f.png")]
                     if "--out" not in args else [sys.executable, "scripts/compare.py", *args],
                     cwd=REPO, capture_output=True, text=True, timeout=120)
  assert p.returncode == 1
  assert p.stderr.splitlines() == [p.stderr.strip()]
  assert p.stderr.startswith("error: " + message.format(**paths))
  assert not list(tmp_path.glob("*.p*g"))


@pytest.mark.slow
def test_two_tiny_real_runs(tmp_path, monkeypatch, capsys):
  _, checksums = write_dataset(tmp_path / "data", num={"train": 96, "test": 16})
  monkeypatch.setitem(mnist.MD5, "mnist", checksums)
  c = pi_mnist_config.get_config("smoke")
  c.data_dir, c.num_train, c.num_valid, c.hidden = str(tmp_path / "data"), 0, 16, (8,)
  c.batch_size, c.num_epochs, c.eval_batch_size = 16, 2, 16
  for norm in ("none", "layer"):
    c.norm = norm
    pi_mnist.train_and_evaluate(c, str(tmp_path / norm))
  capsys.readouterr()  # the runs' progress
  out = tmp_path / "cmp.png"
  compare.main([str(tmp_path / "none"), str(tmp_path / "layer"), "--out", str(out)])
  t = rows(capsys.readouterr().out.split("figure:")[0])
  assert [r[0] for r in t[2:]] == ["none", "layer"] and t[0][1] == "norm"
  for r, norm in zip(t[2:], ("none", "layer")):
    m = figures.read_metrics(tmp_path / norm)
    assert r[1:4] == [norm, "10", "2"]  # 80 training images at batch 16, 2 epochs
    assert float(r[4]) == pytest.approx(m[-1]["test_error"], rel=1e-3)
    assert float(r[6]) == pytest.approx(min(x["test_error"] for x in m), rel=1e-3)
  assert out.read_bytes().startswith(PNG)


def test_accuracies_and_correlations_are_better_higher_all_else_lower():
  from experiments.runner import loop
  assert all(map(loop.higher_is_better, ("MR_acc", "valid_accuracy", "recall_at_1", "SICK_r",
                                         "SICK_rho")))
  assert not any(map(loop.higher_is_better, ("SICK_mse", "heldout_nll", "valid_error",
                                             "train_nll", "error_rate", "examples_per_sec")))


def _records(wd, config: dict, records: list[dict]):
  wd.mkdir(parents=True)
  (wd / "config.json").write_text(json.dumps({"config": config, "git_commit": "abc"}))
  (wd / "metrics.jsonl").write_text("".join(
      json.dumps({"step": 10 * (i + 1), **r}) + "\n" for i, r in enumerate(records)))
  return str(wd)


def test_the_y_axis_is_chosen_from_the_values():
  runs = lambda *vs: [{"metrics": [{"m": v} for v in vs]}]
  # A density's NLL is negative (the handwriting runs'): a log axis there is blank.
  assert compare._axis("valid_nll", runs(-550.0, -900.0)).yscale == "linear"
  assert compare._axis("train_nll", runs(2.0, 0.01)).yscale == "linear"  # no values of "m"
  assert compare._axis("m", runs(2.0, 0.01)).yscale == "log"  # positive, two decades
  assert compare._axis("m", runs(0.3, 0.1)).yscale == "linear"  # less than one
  assert compare._axis("m", runs(0.0, 1.0)).yscale == "linear"


def test_runs_of_different_experiments_are_refused_and_partial_metrics_named(tmp_path):
  a = _records(tmp_path / "a", {"experiment": "pi_mnist", "norm": "layer"},
               [{"valid_nll": 0.5, "test_error": 0.1}])
  b = _records(tmp_path / "b", {"experiment": "handwriting", "norm": "layer"},
               [{"valid_nll": -900.0}])
  with pytest.raises(compare.CompareError, match=r"different experiments \(handwriting, "
                     r"pi_mnist\)"):
    compare.compare([a, b], out=tmp_path / "x.png")
  c = _records(tmp_path / "c", {"experiment": "pi_mnist", "norm": "none"}, [{"valid_nll": 0.6}])
  md = compare.compare([a, c], ["valid_nll"], out=tmp_path / "y.png")
  assert md.strip().endswith("Not every run records every metric: test_error only in a.")


def test_a_damaged_record_is_refused_not_dropped(tmp_path):
  """A last line cut short would leave the evaluation before it as the final."""
  from scripts import compare
  a = fake_run(tmp_path / "a", {"norm": "layer"}, [0.3, 0.2])
  text = (a / "metrics.jsonl").read_text()
  (a / "metrics.jsonl").write_text(text[:-10])
  with pytest.raises(SystemExit) as stop:
    compare.main([str(a), "--out", str(tmp_path / "f.png")])
  assert stop.value.code == (
      f"error: {a}/metrics.jsonl line 2 of 2 is not a whole record (cut short?); rerun the "
      "run's command to evaluate it again")
  assert not (tmp_path / "f.png").exists()


def test_the_default_metric_is_the_experiments_own_and_small_times_are_not_zero(tmp_path):
  """A Transformer run prints valid_bpc: that is compared, not train_nll,
  which it records too; it counts updates, not epochs; a smoke run's training
  takes under a second, which reads as such, not 0."""
  times = {"a": [0.125, 0.0625, 0.0625], "b": [0.5, 0.25, 0.125]}
  wds = [_records(tmp_path / n, {"experiment": "transformer", "norm": n},
                  [{"train_nll": 3.0 - i, "valid_bpc": 4.0 - i / (1 + (n == "b")),
                    "epoch_time_s": t} for i, t in enumerate(ts)])
         for n, ts in times.items()]
  t = rows(compare.compare(wds, out=tmp_path / "c.png"))
  assert t[0] == ["run", "norm", "steps", "final valid_bpc", "at step", "lowest valid_bpc",
                  "at step", "train time (s)"]
  assert t[2] == ["a", "a", "30", "2", "30", "2", "30", "0.25"]
  assert t[3] == ["b", "b", "30", "3", "30", "3", "30", "0.875"]


def test_every_experiment_has_its_own_metric_and_its_records_hold_it():
  """MAIN_METRICS names a metric of every experiment there is a config for
  (but Table 1's, which draws no curve), and the committed records of that
  experiment hold it."""
  import ast  # pylint: disable=import-outside-toplevel
  kinds = set()
  for path in (REPO / "configs").glob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute)
          and node.targets[0].attr == "experiment"):
        kinds.add(node.value.value)
  assert set(compare.MAIN_METRICS) == kinds - {"invariance"}
  seen = set()
  for cfg in (REPO / "results").glob("*/*/config.json"):
    kind = json.loads(cfg.read_text())["config"].get("experiment")
    if kind in compare.MAIN_METRICS:
      if not (cfg.parent / "metrics.jsonl").exists():
        # A run that diverged before its first evaluation records that alone.
        assert json.loads((cfg.parent / "diverged.json").read_text())["diverged"], cfg
        continue
      records = figures.read_metrics(cfg.parent)
      assert any(compare.MAIN_METRICS[kind] in r for r in records), cfg
      seen.add(kind)
  assert seen == set(compare.MAIN_METRICS)


@pytest.mark.slow
def test_no_out_is_one_line_and_writes_nothing_here(tmp_path):
  a = fake_run(tmp_path / "a", {"norm": "layer"}, [0.3])
  p = subprocess.run([sys.executable, str(REPO / "scripts/compare.py"), str(a)], cwd=tmp_path,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 1
  assert p.stderr == "error: give --out FILE.png, where the figure goes (e.g. --out runs/cmp.png)\n"
  assert not list(tmp_path.rglob("*.png"))
