"""experiments/reader.py end to end through the run loop, on tiny cloze
questions written here (tests/test_cloze.py's articles, through the stand-in's
builder): a run stopped after one epoch and resumed gives what a straight run
gives."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from lnorm.data import cloze
from tests.run_records import metrics, straight_and_resumed, without_timing
from tests.test_cloze import _articles, _zip

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow

NUM_TRAIN, BATCH, EVAL_EVERY = 24, 8, 4  # 3 updates an epoch; an evaluation inside epoch 2


@pytest.fixture
def tiny_config(tmp_path):
  from configs import reader as cfg
  news = cloze.read_abc(_zip(tmp_path / "abc.zip", _articles(12)), verify=False)  # not NLTK's
  qs, _ = cloze.build(news, [], seed=3, fractions=(0.2, 0.2))
  assert len(qs["training"]) >= NUM_TRAIN and qs["validation"] and qs["test"]
  cloze.write_splits(tmp_path / "data" / "cnn_standin_4", qs)
  c = cfg.get_config("smoke")
  c.data_dir = str(tmp_path / "data")  # the preset's questions_dir, cnn_standin_4, in it
  c.features, c.embed, c.attention = 8, 8, 8
  c.num_train, c.num_eval, c.batch_size, c.eval_batch_size = NUM_TRAIN, 5, BATCH, 4
  c.max_passage_tokens = 0  # keeps every question: NUM_TRAIN of them
  # One update a jitted call: one program to compile, as the chunk lengths
  # between evaluations would each need their own.
  c.num_epochs, c.eval_every_steps, c.steps_per_call = 1, EVAL_EVERY, 1
  return c


def test_resumed_run_equals_straight_run(tiny_config, tmp_path):
  from experiments import reader as exp
  # The BN-LSTM: its running statistics are state the checkpoint must carry
  # too (the evaluations use them). One norm only, for time: each run
  # compiles its own programs.
  tiny_config.norm = "batch"
  straight, s_state, resumed, r_state = straight_and_resumed(
      exp.train_and_evaluate, tiny_config, tmp_path, stop_after=3)

  # Steps: 3 an epoch (24 questions, batch 8), every epoch end and every 4th update.
  records = metrics(straight)
  assert [r["step"] for r in records] == [3, 4, 6]
  assert [r["epoch"] for r in records] == [1, round(4 / 3, 6), 2]
  assert without_timing(metrics(resumed)) == without_timing(records)
  for r in records:
    for k in ("train_nll", "train_error", "valid_nll", "valid_error", "test_nll", "test_error"):
      assert np.isfinite(r[k]), (k, r)
    for k in ("train_error", "valid_error", "test_error"):
      assert 0 <= r[k] <= 1, (k, r)
  assert int(r_state.step) == int(s_state.step) == 6
  jax.tree.map(np.testing.assert_array_equal, (s_state.params, s_state.batch_stats),
               (r_state.params, r_state.batch_stats))  # the same tree, equal leaves
  assert jax.tree.leaves(s_state.batch_stats)
