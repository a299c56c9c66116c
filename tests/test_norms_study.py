"""scripts/paper/norms.py, `reproduce.py norms`: the grid from the registry,
its parts, results.md from fake runs, the learning-rate sensitivity and the
verdicts (the runs themselves: test_runner.py, test_transformer_run.py)."""

import json
import math
import statistics

import pytest

from lnorm import norms
from tests.test_reproduce import FakeMainRun, fake_inputs, fake_record, judge_smoke_runs


@pytest.fixture
def registry(monkeypatch):
  """The registry, restored after the test (a user norm registered in it goes)."""
  monkeypatch.setattr(norms, "_REGISTRY", dict(norms._REGISTRY))  # pylint: disable=protected-access
  return norms


def _args(*argv):
  from scripts import reproduce
  return reproduce.parse(["norms", *argv])


def _sites(*sites, running_stats=True, kernel=True):
  """The reference: the registered norms whose declared sites meet ``sites``."""
  return {n for n in norms.names() if norms.get(n).sites & set(sites)
          and (running_stats or not norms.get(n).running_stats)
          and (kernel or norms.get(n).kernel is None)}


def test_each_task_runs_every_norm_its_model_accepts_and_a_user_norm_joins(registry):
  from scripts.paper import norms as study
  from tests import user_norm
  got = lambda t: {v.norm for v in study.variants(study.TASKS[t])}
  assert got("pi_mnist_b4") == got("convnet_b64") == _sites(norms.FEATURES)
  assert got("handwriting") == _sites(norms.GATES, norms.CELL, running_stats=False)
  assert "batch" not in got("handwriting") and "layer_c" in got("handwriting")
  tf = study.variants(study.TASKS["transformer_L2"])
  sub = _sites(norms.SUBLAYER, running_stats=False, kernel=False)
  assert {v.norm for v in tf} == sub
  # Every placement but none with every normalizing norm, at each of the rates.
  for pos in ("post", "pre", "peri", "deepnorm"):
    assert {v.norm for v in tf if v.position == pos and not v.qk} == sub - {"none"}
  assert {(v.position, v.norm) for v in tf if v.position == "none"} == {("none", "none")}
  assert {v.norm for v in tf if v.qk} == sub - {"none"}
  assert not any(v.qk for v in study.variants(study.TASKS["transformer_L12"]))
  assert all(sorted(v.lr for v in tf if (v.norm, v.position, v.qk) == k) == list(study.RATES)
             for k in {(v.norm, v.position, v.qk) for v in tf})
  assert max(study.RATES) / min(study.RATES) >= 30 and len(study.RATES) >= 4
  # A user's norm with every site joins every task, and its runs import it.
  registry.register(user_norm.MyNorm)
  for t in study.TASKS:
    assert "my_norm" in got(t)
  assert study.spec("my_norm") == "tests.user_norm:MyNorm" and study.spec("layer") == "layer"
  v = study.Variant("pi_mnist_b128", "my_norm")
  assert v.overrides(study.TASKS["pi_mnist_b128"], "smoke")["norm"] == "tests.user_norm:MyNorm"


def test_a_user_norm_named_in_norms_is_imported_into_the_grid(registry):
  from scripts.paper import norms as study
  g = study.grid(_args("--preset", "smoke", "--tasks", "pi_mnist_b4",
                       "--norms", "layer,tests.user_norm:MyNorm"))
  assert [name for rs in g.values() for _, _, name, _ in rs] == [
      "pi_mnist_b4_layer", "pi_mnist_b4_my_norm"]
  assert [o["norm"] for rs in g.values() for _, _, _, o in rs] == ["layer",
                                                                   "tests.user_norm:MyNorm"]


def test_tasks_and_norms_choose_a_part_and_refuse_bad_names_in_one_line():
  from scripts import reproduce
  from scripts.paper import norms as study
  g = study.grid(_args("--preset", "cpu", "--seeds", "2", "--tasks", "pi_mnist_b4,convnet_b4",
                       "--norms", "none,group,batch"))
  names = [name for rs in g.values() for _, _, name, _ in rs]
  assert names == [f"{t}_{n}{s}" for t in ("pi_mnist_b4", "convnet_b4")
                   for n in ("none", "batch", "group") for s in ("", "_seed1")]
  o = dict((name, o) for rs in g.values() for _, _, name, o in rs)
  assert o["convnet_b4_group_seed1"] == {"batch_size": 4, "num_train": 10000, "num_epochs": 2,
                                         "norm": "group", "seed": 1}
  # Figure 6's searched rate where it covers the norm, else layer norm's at that batch.
  assert o["pi_mnist_b4_none"]["learning_rate"] == 1e-4
  assert o["pi_mnist_b4_group"]["learning_rate"] == 3e-5
  for argv, line in (
      (["--tasks", "pi_mnist_b4,nope"], "error: --tasks nope: no such task; choose from: "
                                        "pi_mnist_b128, pi_mnist_b4, convnet_b64"),
      (["--norms", "layer,foo"], "error: --norms: norm='foo' is not valid; choose one of: "
                                 "none, layer, layer_c, batch"),
      (["--tasks", "handwriting", "--norms", "batch"],
       "error: --norms batch: no task of handwriting accepts it; they accept: none, layer"),
      (["--only", "pi_mnist_b4_nope"], "error: --only names no run of the norms grid")):
    with pytest.raises(SystemExit) as e:
      reproduce.main(["norms", "--preset", "smoke", *argv])
    assert isinstance(e.value.code, str) and "\n" not in e.value.code
    assert e.value.code.startswith(line), e.value.code
  with pytest.raises(SystemExit) as e:
    reproduce.parse(["fig6", "--tasks", "pi_mnist_b4"])
  assert e.value.code == 2


def test_lr_sensitivity_is_wortsmans_mean_of_capped_losses_less_the_best():
  from scripts.paper import norms as study
  # E_eta[min(l(eta), l_0) - min_eta l(eta)], a diverged run counting as l_0 = 8.
  # By hand: capped 3.0, 2.5, 8 (diverged), 8 (9.0 above l_0); the best 2.5;
  # the mean gap (0.5 + 0 + 5.5 + 5.5) / 4 = 2.875.
  assert study.lr_sensitivity([3.0, 2.5, math.inf, 9.0], 8.0) == pytest.approx(2.875)
  # 4 rates, l_0 = 8: capped 4.0, 3.5, 6.0, 8 (NaN); best 3.5; gaps 0.5, 0, 2.5, 4.5 -> 1.875.
  assert study.lr_sensitivity([4.0, 3.5, 6.0, math.nan], 8.0) == pytest.approx(1.875)
  assert study.lr_sensitivity([2.0, 2.0, 2.0, 2.0], 8.0) == 0.0
  assert study.lr_sensitivity([math.nan] * 4, 8.0) == 0.0  # nothing trains: no gap to the best
  # The best is not capped: every rate above l_0 gives mean(8, 8) - 9 = -1.
  assert study.lr_sensitivity([9.0, 10.0], 8.0) == pytest.approx(-1.0)


def test_a_diverged_seed_is_drawn_at_a_top_just_over_the_curves_that_trained():
  from scripts.paper import norms as study
  # The 12-layer panel's case: no norm diverged at 1e-2; the rest ends 3.4 to 4.6 bpc.
  bpcs = [3.74, 3.57, 3.42, math.nan, 4.61, 4.57, 4.57, 4.57]
  top = study._top_edge(bpcs)  # pylint: disable=protected-access
  assert 4.61 < top < 4.61 + 0.2 * (4.61 - 3.42) and top < study.INIT_BPC
  assert study._top_edge(bpcs[:3] + [9.5]) > 3.74  # pylint: disable=protected-access
  assert study._top_edge(bpcs[:3]) is None  # pylint: disable=protected-access
  assert study._top_edge([math.inf, 8.0]) is None  # pylint: disable=protected-access


def _record(task, norm, values, *, diverged=False, lr=1e-3, metric="test_error", step=10):
  return {"config": {"learning_rate": lr, "batch_size": 4, "norm": norm},
          "metrics": [{"step": step * (i + 1), metric: v, "train_nll": v}
                      for i, v in enumerate(values)],
          "diverged": diverged, "grad_norms": None, "name": f"{task}_{norm}"}


def test_a_claim_is_judged_seed_by_seed_under_the_one_rule():
  from scripts.paper import norms as study
  task = study.TASKS["convnet_b4"]
  for gn, bn, word in (([0.02, 0.021, 0.022], [0.05, 0.06, 0.055], "**holds** (3 of 3 seeds, "
                                                                    "ranges apart)"),
                       ([0.05, 0.06, 0.055], [0.02, 0.021, 0.022], "**fails** (0 of 3 seeds, "
                                                                    "ranges apart)"),
                       ([0.02, 0.05, 0.03], [0.03, 0.04, 0.04], "**leans** (2 of 3 seeds; "
                                                                "the ranges overlap)")):
    records = {(study.Variant(task.name, n), s): _record(task.name, n, [1.0, v[s]])
               for n, v in (("group", gn), ("batch", bn)) for s in range(3)}
    md = study.claims([task], records, 3)
    row = next(l for l in md.splitlines() if l.startswith("| GroupNorm beats BatchNorm"))
    assert row.split(" | ")[3] == " / ".join(f"{a:.4f} vs {b:.4f}" for a, b in zip(gn, bn))
    assert row.split(" | ")[4] == word
    assert "Wu & He 2018, Figure 1" in row
  # A side still to come judges nothing.
  del records[study.Variant(task.name, "batch"), 2]
  md = study.claims([task], records, 3)
  row = next(l for l in md.splitlines() if l.startswith("| GroupNorm beats BatchNorm"))
  assert row.split(" | ")[3:5] == ["to come", "to come"]
  assert "| DyT better than LN on little data" not in md  # no Transformer in this grid
  md = study.claims([study.TASKS["transformer_L2"]], {}, 3)
  assert "| DyT better than LN on little data" in md and "cannot answer at this scale" in md


class FakeNormsRun(FakeMainRun):
  """Stands in for ``experiments.main``: the preset's whole config with the
  overrides; pi_mnist's test error 0.02 + 0.01 * (norm's index) + 0.001 *
  seed, falling over 2 epochs, and batch norm diverging after its first
  epoch (exit 3, no diverged.json: runs.run_all records it); the
  Transformer's final bpc 2 + |log10(lr / 1e-3)| (+0.5 for rms, +0.01 a
  seed), post-norm diverging at lr 1e-2 (diverged.json, as it writes)."""
  commands: list[list[str]] = []

  def __init__(self, cmd, **_):
    FakeNormsRun.commands.append(cmd)
    config, wd = fake_record(cmd, cpu_threads=2)
    seed, norm = config["seed"], config["norm"]
    self.returncode = 0
    if config["experiment"] == "pi_mnist":
      e = 0.02 + 0.01 * norms.names().index(norm) + 0.001 * seed
      epochs = (1,) if norm == "batch" else (1, 2)
      (wd / "metrics.jsonl").write_text("".join(json.dumps(
          {"step": 15 * k, "epoch": k, "train_nll": 1.0 / k + e, "test_error": 2 * e / k,
           "epoch_time_s": 1.0, "examples_per_sec": 1.0}) + "\n" for k in epochs))
      self.returncode = 3 if norm == "batch" else 0
      return
    bpc = 2 + abs(math.log10(config["learning_rate"] / 1e-3)) + (0.5 if norm == "rms" else 0)
    bpc += 0.01 * seed
    diverges = config["norm_position"] == "post" and config["learning_rate"] == 1e-2
    steps = (10,) if diverges else (10, 20)
    (wd / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": s, "train_bpc": 4.0, "valid_bpc": bpc + (1.0 if s == 10 else 0.0),
         "epoch_time_s": 1.0, "examples_per_sec": 1.0}) + "\n" for s in steps))
    if diverges:
      (wd / "diverged.json").write_text(json.dumps({"diverged": True, "first_step": 11,
                                                    "last_step": 20}))
      self.returncode = 3


def test_group_norm_note_states_what_its_automatic_groups_leave_of_the_input():
  """The Transformer's note on group norm: groups of 2 of 64 features and of
  1 of a head's 16; and what it says of such groups holds for the registry's
  group norm (a group of one: the bias alone; of two: about -1 and +1)."""
  import numpy as np
  from scripts.paper import norms as study
  gn = norms.get("group")
  rng = np.random.default_rng(0)
  bias = rng.normal(size=16).astype(np.float32)
  p = {"gain": np.ones(16, np.float32), "bias": bias}
  y1 = gn.fn(rng.normal(size=(3, 16)).astype(np.float32), p, axes=(1,), eps=1e-6, groups=0)
  np.testing.assert_array_equal(np.asarray(y1), np.broadcast_to(bias, (3, 16)))
  x64 = rng.normal(size=(3, 64)).astype(np.float32)
  y2 = gn.fn(x64, {"gain": np.ones(64, np.float32), "bias": np.zeros(64, np.float32)},
             axes=(1,), eps=1e-6, groups=0)
  pairs = x64.astype(np.float64).reshape(3, 32, 2)
  d = pairs - pairs.mean(-1, keepdims=True)  # +-half the pair's difference
  want = (d / np.sqrt(d ** 2 + 1e-6)).reshape(3, 64)
  np.testing.assert_allclose(np.asarray(y2), want, atol=1e-5)
  assert np.median(np.abs(want)) > 0.999  # about -1 and +1: the sign of the difference
  task = study.TASKS["transformer_L2"]
  v = lambda qk: study.Variant(task.name, "group", "pre", qk, 1e-3)
  rec = {"config": {"d_model": 64, "num_heads": 4}}
  note = study._group_note([v(False), v(True)], {(v(False), 0): rec, (v(True), 0): rec}, 1)
  assert "groups of 2 of the blocks' 64 features" in note
  assert "groups of 1 of each head's 16 query and key features" in note
  assert "the output is the bias alone" in note and "about -1 and +1" in note
  assert study._group_note([study.Variant(task.name, "layer", "pre", False, 1e-3)], {}, 1) == ""


def test_results_md_from_fake_runs_lists_divergences_and_the_runs_to_come(tmp_path, monkeypatch):
  from scripts import reproduce
  from scripts.paper import norms as study
  from scripts.paper import runs
  FakeNormsRun.commands = []
  monkeypatch.setattr(runs.subprocess, "Popen", FakeNormsRun)
  judge_smoke_runs(monkeypatch)
  fake_inputs(monkeypatch, tmp_path / "data", "configs/pi_mnist.py:smoke",
              "configs/transformer.py:smoke")
  part = ["norms", "--preset", "smoke", "--seeds", "2", "--tasks", "pi_mnist_b128,transformer_L2",
          "--norms", "none,layer,rms,batch", "--results_dir", str(tmp_path / "res")]
  g = study.grid(reproduce.parse(part))
  every = [name for rs in g.values() for _, _, name, _ in rs]
  assert len(every) == 2 * (4 + 4 * (4 * 2 + 1 + 2))  # MLP: 4 norms; Transformer: 11 variants x 4 rates
  missing = "pi_mnist_b128_rms_seed1"
  reproduce.main(part + ["--runs_dir", str(tmp_path / "runs1"), "--only",
                         ",".join(n for n in every if n != missing)])
  assert len(FakeNormsRun.commands) == len(every) - 1
  out = tmp_path / "res" / "norms_smoke"
  md = (out / "results.md").read_text()
  assert f"## Still to come\n\n1 of {len(every)} runs:\n\n- pi_mnist_b128: 1 of 8: {missing}\n" in md
  lines = md.splitlines()
  row = lambda start: next(l for l in lines if l.startswith(start))
  assert row("| RMS norm |").split(" | ")[1] == "to come (1 of 2 seeds recorded)"
  # Batch norm diverged in both seeds (exit 3, recorded by run_all); its metrics stay.
  assert json.loads((out / "pi_mnist_b128_batch" / "diverged.json").read_text()) == {
      "exit_status": 3}
  bn = row("| Batch norm |").split(" | ")
  assert bn[2] == "diverged / diverged" and bn[5] == "2 of 2"
  ln = row("| Layer norm |").split(" | ")
  e = [0.02 + 0.01 * norms.names().index("layer") + 0.001 * s for s in range(2)]
  assert ln[2] == f"{statistics.mean(e):.4f} ± {statistics.stdev(e):.4f}"  # final: 2e / 2
  assert ln[3] == ln[2]  # the best is the last
  # None's final train NLL (0.5 + e_none) at its own last step; layer norm's stays above it.
  assert row("| Baseline |").split(" | ")[4] == "30"
  assert ln[4] == "not reached" and ln[6] == "awaits benchmark |"
  # The Transformer's sweep: post diverged at 1e-2; LR sensitivity by hand.
  post = row("| post, Layer norm |").split(" | ")
  assert post[4] == "diverged / diverged" and post[8] == "2 of 8"
  pre = row("| pre, Layer norm |").split(" | ")
  fin = [[2 + abs(math.log10(lr / 1e-3)) + 0.01 * s for lr in study.RATES] for s in range(2)]
  sens = [statistics.mean(f) - min(f) for f in fin]
  assert pre[5] == f"{statistics.mean([min(f) for f in fin]):.3f} ± 0.007"
  assert pre[6] == f"{statistics.mean(sens):.3f} ± {statistics.stdev(sens):.3f}"
  # RMS sits 0.5 above LN in both seeds: not "as good", beyond the spread in each.
  claim = row("| RMSNorm is as good as LN (no worse beyond the spread) | transformer_L2")
  assert claim.split(" | ")[4] == "**fails** (0 of 2 seeds)"
  qk = row("| qk-norm widens the range of learning rates that train | transformer_L2")
  assert "cannot tell" in qk.split(" | ")[4]  # the fake's qk-norm changes nothing
  for f in ("heatmap.png", "lr_curves.png"):
    assert (out / f).read_bytes().startswith(b"\x89PNG")
  # The next sitting adopts the committed records and runs the one to come.
  FakeNormsRun.commands = []
  reproduce.main(part + ["--runs_dir", str(tmp_path / "runs2"), "--adopt_results"])
  assert [c for c in FakeNormsRun.commands if f"--workdir={tmp_path}/runs2/norms/smoke/{missing}"
          in c] and len(FakeNormsRun.commands) == 1
  md = (out / "results.md").read_text()
  assert "## Still to come\n\nNone: every run of the grid is recorded." in md
  assert "to come (" not in md
  # redraw.py rebuilds the same results.md and figures from the committed records
  # (the part of the grid, --tasks and --norms, read from its command line).
  from scripts import redraw
  assert redraw.main(["norms", "--preset", "smoke", "--results_dir", str(tmp_path / "res"),
                      "--out", str(tmp_path / "redrawn")]) == 0
  assert (tmp_path / "redrawn" / "results.md").read_text() == md
  assert (tmp_path / "redrawn" / "heatmap.png").read_bytes() == (out / "heatmap.png").read_bytes()
