"""scripts/bench/transformer.py: its table's ratios and its flags (the timed
runs are the peer benchmark's, tested in test_bench_transformer_peer.py)."""

import pytest

from scripts.bench import transformer as bench_tf


def test_table_gives_ratios_to_none_and_to_layer_norm_at_the_same_position(capsys):
  # Seconds a call of 10 updates: the table is per update.
  s = {"pre-layer": [2.0, 2.2, 2.4], "pre-dyt": [1.5, 1.8, 1.6], "post-rms": [3.0, 3.0, 3.0],
       "post-layer": [4.0, 4.0, 4.0], "none": [1.0, 1.1, 0.9]}
  bench_tf._table(list(s), s, per_call=10)
  rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]]
          for r in capsys.readouterr().out.splitlines()[2:]}
  assert rows["pre-layer"][:2] == ["0.2200", "0.2000-0.2400"]
  assert rows["pre-dyt"][2] == f"{0.16 / 0.10:.3f}"          # x none
  assert rows["pre-dyt"][3] == f"{100 * (1 - 0.10 / 0.16):.0f}%"
  assert rows["pre-dyt"][4] == f"{0.16 / 0.22:.3f}"          # x pre-layer
  assert rows["post-rms"][4] == f"{0.30 / 0.40:.3f}"         # x post-layer, not pre-layer
  assert rows["none"][4] == ""


@pytest.mark.parametrize("argv", [["--cores"], ["--steps", "3"], ["--shape", "wide", "--steps", "0"],
                                  ["--shape", "tall"]])
def test_bad_flags_exit_with_one_line(argv, capsys):
  with pytest.raises(SystemExit) as e:
    bench_tf.main(argv)
  assert e.value.code == 2
  assert "error:" in capsys.readouterr().err
