"""experiments/handwriting.py end to end through the run loop, on a tiny
IAM-OnDB archive written here (tests/test_iam_ondb.py's writer): a run
stopped after one epoch and resumed gives what a straight run gives, and the
outputs written at the end are whole."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from PIL import Image

from lnorm import native
from lnorm.data import iam_ondb as iam
from tests.run_records import metrics, straight_and_resumed, without_timing
from tests.test_iam_ondb import write

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow

NUM_TRAIN, BATCH, EVAL_EVERY = 8, 4, 3  # 2 updates an epoch; an evaluation inside epoch 2


def _forms(n: int = 30, seed: int = 0) -> dict:
  """n one-line forms of 2-3 strokes, 20-28 points in all, each with a short text."""
  rng = np.random.default_rng(seed)
  words = ["ab", "cd", "the", "pen", "a", "move"]
  out = {}
  for k in range(n):
    sizes = rng.integers(7, 10, rng.integers(2, 4))
    strokes = [[tuple(int(v) for v in p) for p in rng.integers(0, 60, (m, 2))] for m in sizes]
    out[f"e{k:02d}-{k:03d}"] = ([strokes], [" ".join(rng.choice(words, 2))])
  return out


@pytest.fixture
def tiny_config(tmp_path, monkeypatch):
  from configs import handwriting as cfg
  forms = _forms()
  sides = [iam.hash_split(f) for f in forms]
  assert sides.count("train") >= NUM_TRAIN and "valid" in sides and "test" in sides
  for kind, digest in write(tmp_path, forms=forms).items():
    monkeypatch.setitem(iam.SHA256, kind, digest)
  # The parsed-lines cache goes under tmp_path. The native kernels read the
  # same variable: loaded first, they stay in the shared cache.
  native.load()
  monkeypatch.setenv("LNORM_CACHE_DIR", str(tmp_path / "cache"))
  c = cfg.get_config("smoke")
  c.data_dir = str(tmp_path)
  c.hidden, c.num_layers, c.num_window, c.num_mixtures = 8, 1, 2, 2
  c.num_train, c.batch_size, c.max_len = NUM_TRAIN, BATCH, 16
  c.num_eval, c.eval_max_len, c.eval_batch_size = 4, 0, 4
  c.num_epochs, c.num_steps, c.eval_every_steps = 1, 0, EVAL_EVERY
  c.num_samples, c.sample_points_per_char = 1, 2
  return c


def test_resumed_run_equals_straight_run_and_writes_whole_outputs(tiny_config, tmp_path):
  from experiments import handwriting as exp
  from experiments.runner import workdir as wdir
  straight, s_state, resumed, r_state = straight_and_resumed(
      exp.train_and_evaluate, tiny_config, tmp_path, stop_after=2)

  # Steps: 2 an epoch (8 lines, batch 4), every epoch end and every 3rd update.
  records = metrics(straight)
  assert [r["step"] for r in records] == [2, 3, 4]
  assert [r["epoch"] for r in records] == [1, 1.5, 2]
  assert without_timing(metrics(resumed)) == without_timing(records)
  names = ("train_nll", "train_nll_point", "train_grad_norm", "valid_nll", "valid_nll_point",
           "test_nll", "test_nll_point")
  for r in records:
    assert all(np.isfinite(r[k]) for k in names), r
  assert int(r_state.step) == int(s_state.step) == 4
  jax.tree.map(np.testing.assert_array_equal, s_state.params, r_state.params)

  for wd, state in ((straight, s_state), (resumed, r_state)):
    ckpt = wd / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["3", "4"]  # no temporary left over
    mngr = wdir.checkpoint_manager(wd)
    try:
      restored, step = wdir.restore_latest(mngr, state)
    finally:
      mngr.close()
    assert step == 4
    jax.tree.map(np.testing.assert_array_equal, state.params, restored.params)
    for name in ("samples.png", "attention.png"):
      with Image.open(wd / name) as im:
        im.load()  # decodes every row: a truncated file raises
        assert im.width > 50 and im.height > 50
    assert not list(wd.glob("*.tmp"))
