"""scripts.bench.transformer_peer: the torch peer is lnorm's model (counts,
losses and one Adam update from the same weights, against float64), and the
per-round ratios and their summary."""

import json

import jax
import jax.numpy as jnp
import pytest

from experiments import transformer as exp
from lnorm import transformer as tr
from scripts.bench import transformer_peer as M

TINY = (2, 16, 2, 32, 8, 4)  # layers, d_model, heads, d_ff, T, batch


def test_torch_names_follow_lnorm_paths():
  assert M.torch_name("embed/embedding") == ("embed.weight", False)
  assert M.torch_name("pos") == ("pos", False)
  assert M.torch_name("block_3/attn/query/kernel") == ("block_3.attn.query.weight", True)
  assert M.torch_name("block_3/mlp/fc/bias") == ("block_3.mlp.fc.bias", False)
  assert M.torch_name("final_norm/gain") == ("final_norm.weight", False)


def _lnorm_count(c) -> int:
  m = exp.create_model(c)
  shapes = jax.eval_shape(m.init, jax.random.key(0), jnp.zeros((1, c.seq_len), jnp.int32))
  return tr.num_params(shapes["params"])


@pytest.mark.parametrize("variant", M.VARIANTS)
def test_parameter_counts_equal(variant):
  pytest.importorskip("torch")
  for shape in (TINY, "wide"):
    c = M.configure(shape, variant)
    n_torch = sum(p.numel() for p in M.torch_model(c).parameters())
    assert n_torch == _lnorm_count(c)


def test_cpu_preset_pre_ln_has_the_issues_count():
  pytest.importorskip("torch")
  c = M.configure("cpu", "pre-layer")
  assert _lnorm_count(c) == 637_056
  assert sum(p.numel() for p in M.torch_model(c).parameters()) == 637_056


@pytest.mark.parametrize("variant", M.VARIANTS)
@pytest.mark.parametrize("attention", ["sdpa", "manual"])
def test_losses_and_update_agree_with_float64_torch(variant, attention):
  pytest.importorskip("torch")
  c = M.configure(TINY, variant)
  got = M.check_variant(c, attention)
  assert M.check_errors(c, got) == []
  # The update moved the loss far beyond the bound, so the bound tests it.
  ref = got["torch float64"]
  assert abs(ref["loss1"] - ref["loss0"]) > 100 * M.loss_tol(c, ref["loss0"])


def test_the_check_catches_a_different_model(monkeypatch):
  torch = pytest.importorskip("torch")
  sdpa = torch.nn.functional.scaled_dot_product_attention

  def unmasked(q, k, v, is_causal=False):  # the same parameters, another network
    return sdpa(q, k, v, is_causal=False)

  monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", unmasked)
  c = M.configure(TINY, "pre-layer")
  errs = M.check_errors(c, M.check_variant(c))
  assert any(e.startswith("lnorm loss0") for e in errs)
  assert not any(e.startswith("parameters") for e in errs)


def test_the_check_catches_a_parameter_count():
  c = M.configure(TINY, "pre-layer")
  same = {"loss0": 5.0, "grad_norm0": 1.0, "loss1": 4.9}
  got = {"params_lnorm": 10, "params_torch": 11, "lnorm": same, "torch": same,
         "torch float64": same}
  assert M.check_errors(c, got) == ["parameters: lnorm 10, torch 11"]


def _round(ln, eager, compiled):
  return {"cpu": {"pre-layer": {"lnorm": ln, "torch": eager, "compile": compiled}}}


def test_summary_per_round_ratios_median_and_range():
  rounds = [_round(200.0, 100.0, 150.0), _round(210.0, 140.0, 150.0),
            _round(180.0, 120.0, 200.0)]
  rows = {r["group"]: r for r in M.summarize(rounds)}
  assert set(rows) == {"torch", "compile"}
  eager = rows["torch"]
  assert eager["ratios"] == pytest.approx([2.0, 1.5, 1.5])
  assert eager["median"] == pytest.approx(1.5)
  # The median ratio is not the ratio of the medians (200 / 120).
  assert eager["base_ms"] == 200.0 and eager["ms"] == 120.0
  assert rows["compile"]["ratios"] == pytest.approx([4 / 3, 1.4, 0.9])
  assert rows["compile"]["at_or_under_1"] == 1
  line = M.table(M.summarize(rounds), ["lnorm", "torch", "compile"]).splitlines()[-1]
  assert line == ("| cpu | pre-layer | lnorm | 200.0 | 120.0 | 150.0 | 1.50 [1.50-2.00] "
                  "| 1.33 [0.90-1.40] |")


def test_summary_gives_each_lnorm_group_against_each_torch_group():
  rounds = [{"cpu": {"none": {"lnorm": 200.0, "lnorm_cores": 150.0, "torch": 100.0,
                               "torch1": 180.0}}},
            {"cpu": {"none": {"lnorm": 220.0, "lnorm_cores": 130.0, "torch": 110.0,
                               "torch1": 200.0}}}]
  rows = {(r["base"], r["group"]): r for r in M.summarize(rounds)}
  assert set(rows) == {("lnorm", "torch"), ("lnorm", "torch1"),
                       ("lnorm_cores", "torch"), ("lnorm_cores", "torch1")}
  assert rows["lnorm_cores", "torch"]["ratios"] == pytest.approx([1.5, 130 / 110])
  assert rows["lnorm_cores", "torch1"]["base_ms"] == 140.0
  lines = M.table(M.summarize(rounds), list(M.GROUPS)).splitlines()
  assert lines[0].startswith("| shape | variant | lnorm group | its ms | torch ms |")
  assert lines[3].startswith("| cpu | none | lnorm_cores | 140.0 | 105.0 | 190.0 |")


def test_the_cores_worker_gets_one_cpu_device_a_core(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
  monkeypatch.setattr(M.os, "cpu_count", lambda: 3)
  assert M.cores_env()["XLA_FLAGS"] == (
      "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=3")


def test_summary_skips_a_group_missing_from_a_round():
  rounds = [_round(200.0, 100.0, 150.0),
            {"cpu": {"pre-layer": {"lnorm": 190.0, "torch": 100.0}}}]
  assert [r["group"] for r in M.summarize(rounds)] == ["torch"]


def test_rounds_alternate_the_groups_and_write_json(monkeypatch, tmp_path, capsys):
  pytest.importorskip("torch")
  calls = []
  ms = {"lnorm": 200.0, "torch": 100.0}

  def fake(group, shape, variants, repeats, sample_s, attention, lnorm_steps):
    calls.append((group, shape))
    return {v: ms[group] for v in variants.split(",")}

  monkeypatch.setattr(M, "run_worker", fake)
  out = tmp_path / "peer.json"
  assert M.main(["--rounds", "2", "--shapes", "cpu", "--variants", "pre-layer,none",
                 "--groups", "lnorm,torch", "--no-check", "--json", str(out)]) == 0
  assert calls == [("lnorm", "cpu"), ("torch", "cpu"), ("torch", "cpu"), ("lnorm", "cpu")]
  saved = json.loads(out.read_text())
  assert len(saved["rounds"]) == 2
  assert [(r["variant"], r["median"]) for r in saved["summary"]] == [
      ("pre-layer", 2.0), ("none", 2.0)]
  assert "| cpu | none | lnorm | 200.0 | 100.0 | 2.00 [2.00-2.00] |" in capsys.readouterr().out


def test_a_failed_worker_is_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys):
  pytest.importorskip("torch")

  def fail(*a):
    raise RuntimeError("torch at cpu failed: boom")

  monkeypatch.setattr(M, "run_worker", fail)
  out = tmp_path / "peer.json"
  assert M.main(["--rounds", "1", "--shapes", "cpu", "--no-check", "--json", str(out)]) == 1
  assert capsys.readouterr().err.strip().splitlines() == [
      "transformer_peer: round 1: torch at cpu failed: boom"]
  assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "--rounds: at least 1"),
    (["--shapes", "tall"], "--shapes: unknown 'tall'"),
    (["--variants", "peri-layer"], "--variants: unknown 'peri-layer'"),
    (["--groups", "torch"], "--groups: an lnorm group (lnorm, lnorm_cores) and at least one torch group"),
    (["--json", "/nonexistent/dir/x.json"], "--json: no folder /nonexistent/dir"),
])
def test_bad_arguments(argv, message, capsys):
  with pytest.raises(SystemExit) as e:
    M.main(argv)
  assert e.value.code == 2 and message in capsys.readouterr().err
