"""The reader's batching for speed (experiments/reader.py): batches of similar
length, and texts cut to the batch's longest. Neither may change what a step
computes on a batch."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments import reader as exp

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow

V, E, B, TP, TQ = 29, 5, 6, 24, 16
VARIANTS = [("none", False), ("layer", False), ("batch", False), ("batch", True)]


def _batch(plen, qlen, seed=0) -> dict[str, jax.Array]:
  """A batch padded to (TP, TQ) whose texts are ``plen`` / ``qlen`` long."""
  r = np.random.default_rng(seed)
  plen, qlen = np.asarray(plen), np.asarray(qlen)
  pm = np.arange(TP)[None] < plen[:, None]
  qm = np.arange(TQ)[None] < qlen[:, None]
  cand = r.random((len(plen), E)) < 0.6
  cand[:, 0] = True
  answer = np.array([r.choice(np.flatnonzero(c)) for c in cand], np.int32)
  return {"passage": jnp.asarray(np.where(pm, r.integers(1, V, pm.shape), 0), jnp.int32),
          "passage_mask": jnp.asarray(pm),
          "query": jnp.asarray(np.where(qm, r.integers(1, V, qm.shape), 0), jnp.int32),
          "query_mask": jnp.asarray(qm), "candidates": jnp.asarray(cand),
          "answer": jnp.asarray(answer)}


def _state(norm, everywhere):
  config = ml_collections.ConfigDict(dict(
      features=8, embed=6, attention=5, norm=norm, bn_everywhere=everywhere,
      bn_gain_init=0.1, ln_gain_init=1.0, eps=1e-5, learning_rate=1e-2, grad_clip_norm=0.0))
  model = exp.create_model(config, V, E, passage_steps=TP, query_steps=TQ)
  example = {k: np.asarray(v) for k, v in _batch([3, 4], [2, 2]).items()}
  return exp.create_train_state(config, model, example, jax.random.key(0))


def test_bucket_lengths():
  assert exp.bucket_lengths(300, 4) == (80, 152, 232, 300)
  assert exp.bucket_lengths(247, 4) == (64, 128, 192, 247)
  assert exp.bucket_lengths(300, 1) == exp.bucket_lengths(300, 0) == ()
  assert exp.bucket_lengths(5, 4) == (5,)  # never longer than T


LENGTHS = [([5, 9, 3, 8, 1, 7], [4, 2, 3, 1, 4, 2]),        # the shortest buckets
           ([5, 24, 3, 8, 1, 7], [4, 2, 16, 1, 4, 2]),      # the full lengths
           ([5, 9, 17, 8, 1, 7], [4, 9, 3, 1, 4, 2])]       # in between


@pytest.mark.parametrize("norm, everywhere", VARIANTS)
def test_cut_step_equals_full_step(norm, everywhere):
  """A train step on texts cut to a bucket gives the full-length step's loss,
  parameters and (on the steps it ran) BN statistics."""
  state = _state(norm, everywhere)
  buckets = (exp.bucket_lengths(TP, 3), exp.bucket_lengths(TQ, 2))
  assert buckets == ((8, 16, 24), (8, 16))
  full_step = jax.jit(exp.train_step)
  cut_step = jax.jit(functools.partial(exp.train_step, buckets=buckets))
  before = {jax.tree_util.keystr(p): v
            for p, v in jax.tree_util.tree_flatten_with_path(state.batch_stats)[0]}
  for seed, (plen, qlen) in enumerate(LENGTHS):
    batch = _batch(plen, qlen, seed=seed)
    full_state, full_m = full_step(state, batch)
    cut_state, cut_m = cut_step(state, batch)
    np.testing.assert_allclose(cut_m["nll"], full_m["nll"], rtol=1e-6)
    assert float(cut_m["error"]) == float(full_m["error"])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7),
                 cut_state.params, full_state.params)
    # The bucket each text went to: the steps the cut step ran.
    ran = {k: next(t for t in lengths if t >= max(n))
           for k, lengths, n in (("passage", buckets[0], plen), ("query", buckets[1], qlen))}
    flat = jax.tree_util.tree_flatten_with_path(cut_state.batch_stats)[0]
    for (path, cut), full in zip(flat, jax.tree.leaves(full_state.batch_stats)):
      name = jax.tree_util.keystr(path)
      enc = next((k for k in ran if k in name), None)
      if enc is not None and "LSTMCell" in name:
        # Per-step statistics [steps, F]: equal on the steps the cut step
        # ran, and left as they were past them.
        n = ran[enc]
        np.testing.assert_allclose(cut[:n], full[:n], rtol=2e-5, atol=1e-7)
        np.testing.assert_array_equal(cut[n:], before[name][n:])
      else:
        np.testing.assert_allclose(cut, full, rtol=2e-5, atol=1e-7)
    # A changed real token changes the result, so the checks above are not empty.
    other = dict(batch, passage=batch["passage"].at[0, 0].set(
        batch["passage"][0, 0] % (V - 1) + 1))
    assert float(cut_step(state, other)[1]["nll"]) != float(cut_m["nll"])


@pytest.mark.parametrize("norm, everywhere", VARIANTS[1:3])
def test_cut_evaluation_equals_full(norm, everywhere):
  state = _state(norm, everywhere)
  state, _ = jax.jit(exp.train_step)(state, _batch([5, 9, 17, 8, 1, 7], [4, 9, 3, 1, 4, 2]))
  data = _batch([2, 3, 3, 5, 9, 11, 20, 24, 4], [1, 2, 2, 3, 8, 5, 16, 9, 12], seed=3)
  buckets = (exp.bucket_lengths(TP, 3), exp.bucket_lengths(TQ, 2))
  for chunk in (4, 9):  # the 9 examples in chunks of 4 (the last one padded), and whole
    full = exp.evaluate(state, data, chunk)
    cut = exp.evaluate(state, data, chunk, buckets)
    for k in full:
      np.testing.assert_allclose(cut[k], full[k], rtol=1e-6)


def _epoch_batches(feed, epoch):
  spe = feed.steps_per_epoch
  return np.asarray(feed.plan(epoch * spe, (epoch + 1) * spe)["idx"])


def test_sorted_batches():
  n, b = 203, 4
  lengths = np.random.default_rng(0).integers(1, 400, n)
  data = {"passage_mask": np.arange(500)[None] < lengths[:, None],
          "query_mask": np.zeros((n, 3), bool), "answer": np.zeros(n, np.int32)}
  key = jax.random.key(7)
  plain = exp.feed(data, key, b)
  one_run = exp.feed(data, key, b, sort_batches=plain.steps_per_epoch)
  runs = exp.feed(data, key, b, sort_batches=5)
  for epoch in (0, 1):
    base = _epoch_batches(plain, epoch)
    for feed in (one_run, runs):
      got = _epoch_batches(feed, epoch)
      # The same examples as the plain shuffle's epoch, each once.
      assert sorted(got.ravel()) == sorted(base.ravel())
      # Deterministic, and the same when planned a few steps at a time.
      parts = [np.asarray(feed.plan(epoch * feed.steps_per_epoch + s,
                                    epoch * feed.steps_per_epoch + s + 10)["idx"])
               for s in range(0, 50, 10)]
      np.testing.assert_array_equal(np.concatenate(parts), got)
    # One run over the epoch: the batches tile the sorted lengths.
    got = lengths[_epoch_batches(one_run, epoch)]
    by_min = got[np.argsort(got.min(1))]
    assert (by_min.max(1)[:-1] <= by_min.min(1)[1:]).all()
    # ...in an order that carries no length.
    assert not (np.diff(got.max(1)) >= 0).all()
    # Runs of 5 batches: a batch's spread is far below a random batch's.
    spread = lambda idx: np.mean(np.ptp(lengths[idx], 1))
    assert spread(_epoch_batches(runs, epoch)) < 0.5 * spread(base)
  # Another epoch, another order.
  assert not np.array_equal(_epoch_batches(runs, 0), _epoch_batches(runs, 1))
