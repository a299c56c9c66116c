"""Table 1: every invariance the paper claims (and every non-invariance) holds."""

import jax.numpy as jnp
import numpy as np
import pytest

from configs import invariance as invariance_config
from experiments import invariance as inv

RMS = ("Invariant", "No", "No", "Invariant", "No", "Invariant")


@pytest.fixture(scope="module")
def config():
  return invariance_config.get_config("smoke")


@pytest.fixture(scope="module")
def measured(config):
  return inv.measure(config)


@pytest.fixture(scope="module")
def changes(measured):
  return measured[0]


@pytest.mark.parametrize("norm", ["batch", "weight", "layer"])
def test_paper_rows(changes, config, norm):
  got = tuple(inv.verdict(c, config.tolerance) for c in changes[norm])
  assert got == inv.PAPER[norm]


def test_rms_row(changes, config):
  assert tuple(inv.verdict(c, config.tolerance) for c in changes["rms"]) == RMS


def test_non_invariances_are_large(changes):
  # "No" must mean a real change, not a value near the tolerance.
  for norm, row in changes.items():
    expected = inv.PAPER.get(norm, RMS)
    assert all(c > 0.05 for c, e in zip(row, expected) if e == "No")
    assert all(c < 1e-3 for c, e in zip(row, expected) if e == "Invariant")


def test_transformations_do_what_they_say():
  rng = np.random.default_rng(0)
  w, x = jnp.asarray(rng.normal(size=(5, 4))), jnp.asarray(rng.normal(size=(6, 5)))
  w2, _ = inv._weight_matrix_recenter(w, x, rng)
  d = np.asarray(w2 - w)
  np.testing.assert_allclose(d, np.repeat(d[:, :1], 4, axis=1), atol=1e-6)  # one vector
  w2, _ = inv._weight_vector_rescale(w, x, rng)
  r = np.asarray(w2 / w)
  assert np.allclose(r, r[:1], rtol=1e-5) and not np.allclose(r, r[0, 0])  # per unit
  _, x2 = inv._single_case_rescale(w, x, rng)
  changed = np.flatnonzero(np.any(np.asarray(x2) != np.asarray(x), axis=1))
  assert len(changed) == 1
  _, x2 = inv._dataset_recenter(w, x, rng)
  d = np.asarray(x2 - x)
  np.testing.assert_allclose(d, np.repeat(d[:1], 6, axis=0), atol=1e-6)


@pytest.mark.slow
def test_recurrent_invariance(config):
  rnn = inv.recurrent_changes(config)
  assert all(v > 0.05 for v in rnn["LSTM"].values())
  assert all(v > 0.05 for v in rnn["GRU"].values())
  assert all(v < 1e-3 for v in rnn["LN-LSTM (eps=1e-10)"].values())
  assert all(v < 1e-3 for v in rnn["LN-GRU (eps=1e-10)"].values())
  # Re-centring is removed exactly by the layer norms, whatever eps.
  assert rnn["LN-LSTM (eps=1e-05)"]["W_x re-centering"] < 1e-3
  assert rnn["LN-LSTM (eps=1e-05)"]["W_h re-centering"] < 1e-3
  # LN on c alone (the DRAW variant) does not make the gates invariant.
  assert all(v > 0.05 for v in rnn["LN-LSTM, LN on c only (DRAW) (eps=1e-10)"].values())


def test_verdicts_are_measured_at_the_documented_scale(config):
  # test_paper_rows holds the paper's verdicts at the paper preset's data
  # scale and eps, which the output states.
  paper = invariance_config.get_config("paper")
  assert (config.data_scale, config.eps) == (paper.data_scale, paper.eps) == (1.0, 1e-5)


@pytest.fixture(scope="module")
def small(config):
  return inv.measure(config, data_scale=0.01)


def test_small_data_against_eps_breaks_the_eps_dependent_invariances(config, changes, small):
  # The same layers, inputs x 0.01: var(x W) is 1e4 times smaller and eps is
  # no longer negligible. A correct layer norm then reads "No" for
  # weight-matrix re-scaling; re-centring stays exact.
  verdicts = lambda ch: {n: tuple(inv.verdict(c, config.tolerance) for c in row)
                         for n, row in ch.items()}
  got = verdicts(small[0])
  assert got["layer"][0] == "No" and got["batch"][0] == "No"
  assert got["layer"][1] == "Invariant"
  assert got["weight"] == inv.PAPER["weight"]  # its eps is on the weights
  # eps scaled down with the variance: the paper's verdicts again.
  rescaled = verdicts(inv.table(config, data_scale=0.01, eps=config.eps * 1e-4))
  assert all(rescaled[n] == inv.PAPER[n] for n in inv.PAPER)


def test_smallest_statistic_scales_with_the_data(measured, small):
  at_1 = measured[1]
  for n in ("batch", "layer", "rms"):
    np.testing.assert_allclose(small[1][n], 1e-4 * at_1[n], rtol=1e-4)
  assert np.isnan(at_1["weight"])


def test_output_states_scale_and_eps(config, changes):
  md = inv._small_scale_markdown(config, changes)
  assert "## The same layers at data scale 0.01" in md
  assert "while eps stays 1e-05" in md
  assert "Layer norm: Weight matrix re-scaling (No)" in md
  assert "(eps=1e-09), the same as the paper's: Batch norm yes, Weight norm yes, Layer norm yes" in md


@pytest.mark.slow
def test_the_workdir_is_locked_while_it_measures(config, tmp_path, monkeypatch, capsys):
  import fcntl  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  from experiments.runner.workdir import UserError  # pylint: disable=g-import-not-at-top
  held, measure = [], inv.measure

  def measure_and_try_the_lock(*args, **kwargs):
    fd = os.open(tmp_path / "lock", os.O_RDWR)  # what a second run would do
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      held.append(False)
    except BlockingIOError:
      held.append(True)
    finally:
      os.close(fd)
    return measure(*args, **kwargs)

  monkeypatch.setattr(inv, "measure", measure_and_try_the_lock)
  inv.train_and_evaluate(config, str(tmp_path))
  assert held and all(held)
  # Like every run, it says first what it runs and where it writes.
  assert capsys.readouterr().out.startswith(f"invariance: workdir {tmp_path} | devices cpu:0")
  fd = os.open(tmp_path / "lock", os.O_RDWR)  # and a run that finds it held is refused
  fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  try:
    with pytest.raises(UserError, match="is in use by another run"):
      inv.train_and_evaluate(config, str(tmp_path))
  finally:
    os.close(fd)


@pytest.mark.slow
def test_a_one_shot_run_writes_the_shared_output_and_a_rerun_replaces_its_record(
    config, tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  from experiments.runner import records  # pylint: disable=g-import-not-at-top
  record = inv.train_and_evaluate(config, str(tmp_path))
  written = json.loads((tmp_path / "config.json").read_text())
  assert written["config"]["num_trials"] == config.num_trials and written["git_commit"]
  assert "data_dir" in written["config"] and written["config"]["data_dir"] == ""  # reads none
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 1 and records.decode(lines[0]) == record
  assert record["step"] == 0 and record["epoch"] == 0
  cells = {k: v for k, v in record.items() if "/" in k}
  rnn_rows = sum(len(config.rnn_eps) if n != "none" else 1 for _, n in inv.RNN_CELLS.values())
  assert len(cells) == len(inv.ROWS) * len(inv.COLUMNS) + rnn_rows * len(inv.RNN_COLUMNS)
  assert f"| {inv.norms.label('layer')} |" in (tmp_path / "table1.md").read_text()
  assert records.finished(tmp_path, num_epochs=0)
  again = inv.train_and_evaluate(config, str(tmp_path))  # measured again: the one record
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 1 and {k: v for k, v in records.decode(lines[0]).items() if "/" in k} == \
      {k: v for k, v in again.items() if "/" in k} == cells
