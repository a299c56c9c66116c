"""scripts.bench.rnn_rounds: the per-round ratios and their verdicts."""

import json

import pytest

from scripts.bench import rnn_rounds as M


def _round(ln, plain, torch):
  return {"short": {"LSTM(layer)": ln, "LSTM(none)": plain, "torch LSTM": torch}}


def test_summary_ratios_median_and_count():
  rounds = [_round(9.0, 8.0, 10.0), _round(10.0, 8.0, 9.0),
            _round(9.5, 9.0, 9.5)]
  rows = {r["goal"]: r for r in M.summarize(rounds)}
  assert set(rows) == {"LSTM(layer) / LSTM(none)", "LSTM(layer) / torch LSTM"}
  vs_torch = rows["LSTM(layer) / torch LSTM"]
  assert vs_torch["ratios"] == pytest.approx([0.9, 10 / 9, 1.0])
  assert vs_torch["median"] == pytest.approx(1.0)
  assert vs_torch["at_or_under"] == 2 and vs_torch["met"]
  plain = rows["LSTM(layer) / LSTM(none)"]
  assert plain["median"] == pytest.approx(9.0 / 8.0)
  assert plain["at_or_under"] == 2 and plain["met"]  # 1.125, 1.25, 1.056


def test_summary_verdict_follows_the_median_not_the_best_round():
  rounds = [_round(9.0, 8.0, 10.0), _round(10.5, 9.5, 10.0),
            _round(10.4, 9.5, 10.0)]
  row = {r["goal"]: r for r in M.summarize(rounds)}["LSTM(layer) / torch LSTM"]
  assert row["at_or_under"] == 1 and not row["met"]


def test_summary_skips_a_goal_missing_from_a_round():
  rounds = [_round(9.0, 8.0, 10.0), {"short": {"LSTM(layer)": 9.0,
                                               "LSTM(none)": 8.0}}]
  goals = [r["goal"] for r in M.summarize(rounds)]
  assert goals == ["LSTM(layer) / LSTM(none)"]


def test_rounds_alternate_the_groups_and_write_json(monkeypatch, tmp_path, capsys):
  calls = []
  timed = {"LSTM(none),LSTM(layer)": {"LSTM(none)": 8.0, "LSTM(layer)": 9.0},
           "torch LSTM": {"torch LSTM": 10.0}}

  def fake(names, shapes, repeats):
    calls.append(names)
    return {"short": timed[names]}

  monkeypatch.setattr(M, "run_group", fake)
  out = tmp_path / "rounds.json"
  assert M.main(["--rounds", "2", "--shapes", "short", "--out", str(out)]) == 0
  assert calls == ["LSTM(none),LSTM(layer)", "torch LSTM",
                   "torch LSTM", "LSTM(none),LSTM(layer)"]
  saved = json.loads(out.read_text())
  assert len(saved["rounds"]) == 2
  assert {r["goal"] for r in saved["summary"]} == {
      "LSTM(layer) / LSTM(none)", "LSTM(layer) / torch LSTM"}
  assert "| short | LSTM(layer) / torch LSTM | 1.0 | 0.90 |" in capsys.readouterr().out


def test_a_failed_group_is_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys):
  def fail(names, shapes, repeats):
    raise RuntimeError("scripts.bench.rnn failed: boom")

  monkeypatch.setattr(M, "run_group", fail)
  out = tmp_path / "rounds.json"
  assert M.main(["--rounds", "1", "--shapes", "short", "--out", str(out)]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err == ["rnn_rounds: round 1: scripts.bench.rnn failed: boom"]
  assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "--rounds: at least 1"),
    (["--shapes", "long"], "unknown shape 'long'"),
    (["--groups", "LSTM(foo)"], "unknown candidate 'LSTM(foo)'"),
])
def test_bad_arguments(argv, message, capsys):
  with pytest.raises(SystemExit) as e:
    M.main(argv)
  assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_run_group_reads_the_benchmarks_json():
  timed = M.run_group("LSTM(none)", "short", 1)
  assert list(timed) == ["short"] and list(timed["short"]) == ["LSTM(none)"]
  assert timed["short"]["LSTM(none)"] > 0


def test_rnn_refuses_a_json_path_without_its_folder(tmp_path, capsys):
  from scripts.bench import rnn
  with pytest.raises(SystemExit) as e:
    rnn.main(["--shapes", "short", "--candidates", "LSTM(none)",
              "--json", str(tmp_path / "none" / "ms.json")])
  assert e.value.code == 2 and "--json: no folder" in capsys.readouterr().err
