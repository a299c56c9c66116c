"""scripts/bench/norm_steps.py and the norms study's "step time / LN's"
column: which variants it times, its JSON on a tiny task, and the tables
reading that JSON (a fake one) or awaiting it."""

import json

import pytest

from scripts.bench import norm_steps as B
from scripts.paper import norms as study


def _args(tmp_path, preset="smoke"):
  from scripts import reproduce
  return reproduce.parse(["norms", "--preset", preset, "--results_dir", str(tmp_path / "res")])


def test_it_times_every_norm_at_pre_ln_and_ln_at_every_placement():
  keys = lambda t, p: {study.step_key(v) for v in B.timed_variants(study.TASKS[t], None, p)}
  tf = study.TASKS["transformer_L2"]
  taken = [n for n in tf.accepted() if n != "none"]
  pre = keys("transformer_L2", "pre")
  assert pre == ({f"pre_{n}" for n in taken} | {"none_none", "pre_layer_qk"}
                 | {f"{p}_layer" for p in ("post", "peri", "deepnorm")})
  every = {study.step_key(v) for v in study.variants(tf)}
  assert keys("transformer_L2", "all") == every and pre < every
  assert keys("pi_mnist_b4", "pre") == set(study.TASKS["pi_mnist_b4"].accepted())
  # A subset of norms keeps layer norm's baselines.
  got = B.timed_variants(tf, ("rms",), "pre")
  assert {study.step_key(v) for v in got} >= {"pre_rms", "pre_layer"}
  assert B.baseline(study.Variant(tf.name, "none", "none", False, 1e-3)).position == "pre"


def _entry(variants, preset="smoke"):
  return {"command": "python -m scripts.bench.norm_steps --preset smoke", "host_cpu": "Test CPU",
          "cores": 2, "commit": "abc1234", "jax": "0.0", "date": "2026-01-01 00:00 UTC",
          "preset": preset, "repeats": 5, "sample_s": 0.5, "steps": 4, "placements": "pre",
          "variants": {k: {"median_ms": 1.0, "ratio": r} for k, r in variants.items()}}


def test_tables_read_the_step_times_json_and_await_it_where_absent(tmp_path):
  args = _args(tmp_path)
  assert study.step_times(args) == {}
  path = tmp_path / "res" / "norms_smoke" / study.STEP_TIMES
  path.parent.mkdir(parents=True)
  path.write_text(json.dumps({"tasks": {
      "pi_mnist_b4": _entry({"layer": 1.0, "rms": 0.9512, "none": 0.8}),
      "transformer_L2": _entry({"pre_layer": 1.0, "pre_rms": 1.104}),
      "convnet_b4": _entry({"layer": 1.0}, preset="cpu")}}))  # another preset's: not read
  times = study.step_times(args)
  assert set(times) == {"pi_mnist_b4", "transformer_L2"}
  t = study.TASKS["pi_mnist_b4"]
  md = study.task_table(t, study.variants(t, ("none", "layer", "rms", "dyt")), {}, 1,
                        times["pi_mnist_b4"])
  cells = {l.split(" | ")[0][2:]: l.rsplit(" | ", 1)[1] for l in md.splitlines()
           if l.startswith("| ") and "to come" in l}
  assert cells == {"Baseline": "0.80 |", "Layer norm": "1.00 |", "RMS norm": "0.95 |",
                   "DyT": "not timed |"}
  assert ("medians of 5 interleaved samples, idle, in one process: `python -m "
          "scripts.bench.norm_steps --preset smoke` on Test CPU (2 cores), commit abc1234") in md
  tf = study.TASKS["transformer_L2"]
  md = study.sweep_table(tf, study.variants(tf, ("layer", "rms")), {}, 1,
                         times["transformer_L2"])
  row = lambda s: next(l for l in md.splitlines() if l.startswith(s)).rsplit(" | ", 1)[1]
  assert row("| pre, RMS norm |") == "1.10 |" and row("| post, RMS norm |") == "not timed |"
  # Without the JSON: the column awaits the benchmark, and no line names one.
  md = study.task_table(t, study.variants(t, ("layer",)), {}, 1, None)
  assert "Step time / LN's" not in md


def test_the_bench_times_a_tiny_task_into_the_json_keeping_other_tasks(tmp_path, capsys):
  out = tmp_path / "step_times.json"
  out.write_text(json.dumps({"tasks": {"convnet_b4": _entry({"layer": 1.0})}}))
  assert B.main(["--preset", "smoke", "--tasks", "pi_mnist_b4", "--norms", "none,layer",
                 "--repeats", "1", "--sample_s", "0", "--steps", "1", "--out", str(out)]) == 0
  got = json.loads(out.read_text())["tasks"]
  assert set(got) == {"convnet_b4", "pi_mnist_b4"}
  e = got["pi_mnist_b4"]
  assert e["preset"] == "smoke" and e["repeats"] == 1 and e["cores"] >= 1
  assert e["command"].startswith("python -m scripts.bench.norm_steps --preset smoke")
  assert e["host_cpu"] and e["commit"] and e["jax"]
  assert set(e["variants"]) == {"none", "layer"}
  assert e["variants"]["layer"]["ratio"] == 1.0 and e["variants"]["none"]["median_ms"] > 0
  assert e["variants"]["none"]["baseline"] == "layer" and e["variants"]["none"]["samples"] == 1
  assert "wrote" in capsys.readouterr().out


def test_a_damaged_step_times_json_is_one_line_not_awaits(tmp_path):
  args = _args(tmp_path)
  path = tmp_path / "res" / "norms_smoke" / study.STEP_TIMES
  path.parent.mkdir(parents=True)
  path.write_text('{"tasks": ')  # cut short
  with pytest.raises(SystemExit) as e:
    study.step_times(args)
  assert str(e.value).startswith(f"error: {path} is not scripts/bench/norm_steps.py's JSON")
  assert "\n" not in str(e.value) and path.read_text() == '{"tasks": '
