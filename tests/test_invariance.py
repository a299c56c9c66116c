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
def changes(config):
  return inv.table(config)


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
