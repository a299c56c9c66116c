"""The attentive reader (lnorm/reader.py): masks, attention, candidates, steps."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lnorm import reader

V, E, B, T, S = 23, 5, 4, 7, 4
VARIANTS = [("none", False), ("layer", False), ("batch", False), ("batch", True)]


def _batch(seed=0):
  r = np.random.default_rng(seed)
  plen, qlen = np.array([7, 3, 5, 1]), np.array([4, 2, 1, 3])
  pm = np.arange(T)[None] < plen[:, None]
  qm = np.arange(S)[None] < qlen[:, None]
  passage = np.where(pm, r.integers(1, V, (B, T)), 0).astype(np.int32)
  query = np.where(qm, r.integers(1, V, (B, S)), 0).astype(np.int32)
  cand = np.array([[1, 1, 0, 1, 0], [0, 1, 1, 0, 0], [1, 0, 0, 0, 1], [0, 0, 1, 0, 0]], bool)
  answer = np.array([3, 2, 0, 2], np.int32)
  return [jnp.asarray(a) for a in (passage, pm, query, qm, cand)], jnp.asarray(answer)


def _model(norm, everywhere, **kw):
  return reader.AttentiveReader(V, E, features=8, embed=6, attention=5, norm=norm,
                                bn_everywhere=everywhere, **kw)


def _apply(model, variables, inputs, train=False):
  out, upd = model.apply(variables, *inputs, train=train,
                         mutable=["intermediates", "batch_stats"] if train else
                         ["intermediates"])
  return out, upd["intermediates"]["attention"][0]


@pytest.mark.slow
@pytest.mark.parametrize("norm, everywhere", VARIANTS)
def test_attention_candidates_and_padding(norm, everywhere):
  inputs, _ = _batch()
  model = _model(norm, everywhere)
  variables = reader.init(model, jax.random.key(0), inputs)
  pm, qm, cand = np.asarray(inputs[1]), np.asarray(inputs[3]), np.asarray(inputs[4])
  # The same batch with other ids at the padded positions.
  r = np.random.default_rng(5)
  other = list(inputs)
  other[0] = jnp.where(inputs[1], inputs[0], jnp.asarray(r.integers(1, V, (B, T))))
  other[2] = jnp.where(inputs[3], inputs[2], jnp.asarray(r.integers(1, V, (B, S))))
  assert (np.asarray(other[0])[~pm] != 0).any() and (np.asarray(other[2])[~qm] != 0).any()
  for train in (False, True):
    logits, s_BxT = _apply(model, variables, inputs, train)
    s = np.asarray(s_BxT)
    np.testing.assert_allclose(s.sum(1), 1.0, rtol=1e-6)
    assert (s[~pm] == 0).all() and (s[pm] > 0).all()
    p = np.asarray(jax.nn.softmax(logits))
    assert (p[~cand] == 0).all()
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-6)
    assert cand[np.arange(B), np.asarray(logits).argmax(1)].all()
    # A masked padding token cannot change the output...
    logits_other, _ = _apply(model, variables, other, train)
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(logits_other))
  # ...while a real one does (so the check above cannot pass by accident).
  changed = list(inputs)
  changed[0] = inputs[0].at[0, 0].set((inputs[0][0, 0] % (V - 1)) + 1)
  c, _ = _apply(model, variables, changed, train=True)
  assert not np.allclose(np.asarray(c)[0], np.asarray(logits)[0])


@pytest.mark.slow
@pytest.mark.parametrize("norm, everywhere", VARIANTS[:2])
def test_extra_padding_columns(norm, everywhere):
  inputs, _ = _batch()
  model = _model(norm, everywhere)
  variables = reader.init(model, jax.random.key(2), inputs)
  padded = [jnp.pad(inputs[0], ((0, 0), (0, 3))), jnp.pad(inputs[1], ((0, 0), (0, 3))),
            jnp.pad(inputs[2], ((0, 0), (0, 2))), jnp.pad(inputs[3], ((0, 0), (0, 2))),
            inputs[4]]
  a, _ = _apply(model, variables, inputs)
  b, _ = _apply(model, variables, padded)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_gain_inits():
  inputs, _ = _batch()
  ln = reader.init(_model("layer", False), jax.random.key(0), inputs, ln_gain_init=0.1)
  gains = {k: v for k, v in jax.tree_util.tree_flatten_with_path(ln["params"])[0]
           if "gain" in jax.tree_util.keystr(k)}
  assert len(gains) == 6  # gain_h, gain_x, gain_c of both LSTMs
  assert all(np.allclose(v, 0.1) for v in gains.values())
  bn = reader.init(_model("batch", True), jax.random.key(0), inputs)
  flat = jax.tree_util.tree_flatten_with_path(bn["params"])[0]
  gains = [v for k, v in flat if "gain" in jax.tree_util.keystr(k)]
  assert len(gains) == 6 + 4 and all(np.allclose(v, 0.1) for v in gains)
  with pytest.raises(ValueError, match="choose one of"):
    _model("group", False).init(jax.random.key(0), *inputs)
  with pytest.raises(ValueError, match="bn_everywhere"):
    _model("layer", True).init(jax.random.key(0), *inputs)


@pytest.mark.parametrize("norm, everywhere, ln_gain", [
    ("none", False, 1.0), ("layer", False, 1.0), ("layer", False, 0.1), ("batch", False, 1.0),
    ("batch", True, 1.0)])
@pytest.mark.slow
def test_few_steps_finite_and_learning(norm, everywhere, ln_gain):
  inputs, answer = _batch()
  model = _model(norm, everywhere)
  variables = reader.init(model, jax.random.key(3), inputs, ln_gain_init=ln_gain)
  params, stats = variables["params"], variables.get("batch_stats", {})
  tx = optax.adam(3e-2)
  opt = tx.init(params)

  @jax.jit
  def step(params, stats, opt):
    def loss_fn(p):
      logits, upd = model.apply({"params": p, "batch_stats": stats}, *inputs, train=True,
                                mutable=["batch_stats"])
      return reader.loss_and_error(logits, answer)[0] / B, upd.get("batch_stats", {})
    (loss, stats), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
    upd, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, upd), stats, opt, loss

  losses = []
  for _ in range(8):
    params, stats, opt, loss = step(params, stats, opt)
    losses.append(float(loss))
  assert np.isfinite(losses).all()
  assert losses[-1] < losses[0]
  if norm == "batch":  # running averages moved
    assert not np.allclose(jax.tree.leaves(stats)[0], jax.tree.leaves(
        variables["batch_stats"])[0])
  logits = model.apply({"params": params, "batch_stats": stats}, *inputs)
  assert np.isfinite(np.asarray(reader.loss_and_error(logits, answer)[0]))


def test_loss_and_error_reference():
  logits = jnp.array([[2.0, 0.0, reader._NEG], [0.0, 1.0, 3.0]])
  answer = jnp.array([1, 2])
  nll, err = reader.loss_and_error(logits, answer, jnp.array([1.0, 0.5]))
  ref0 = -(0.0 - np.log(np.exp(2.0) + 1.0))
  ref1 = -(3.0 - np.log(1 + np.e + np.exp(3.0)))
  np.testing.assert_allclose(float(nll), ref0 + 0.5 * ref1, rtol=1e-6)
  assert float(err) == 1.0


def test_permute_entities_renumbers_each_question_consistently():
  from experiments.reader import permute_entities  # pylint: disable=g-import-not-at-top
  E, ent_tok = 6, np.asarray([10, 11, 12, 13, 14, 15], np.int32)  # entity n is token 10 + n
  rng = np.random.default_rng(0)
  B, Tp, Tq = 5, 12, 4
  passage = rng.integers(2, 16, (B, Tp)).astype(np.int32)
  query = rng.integers(2, 16, (B, Tq)).astype(np.int32)
  ent = lambda t: np.where(t >= 10, t - 10, -1)
  candidates = np.zeros((B, E), bool)
  for b in range(B):
    candidates[b, ent(passage[b])[ent(passage[b]) >= 0]] = True
  answer = np.asarray([np.flatnonzero(c)[0] for c in candidates], np.int32)
  batch = {"passage": passage, "query": query, "candidates": candidates, "answer": answer,
           "passage_mask": np.ones((B, Tp), bool), "query_mask": np.ones((B, Tq), bool)}
  out = {k: np.asarray(v) for k, v in
         permute_entities(jax.tree.map(jnp.asarray, batch), jax.random.key(3),
                          jnp.asarray(ent_tok)).items()}
  changed = False
  for b in range(B):
    # One bijection per question, read off the passage and query, carries everything.
    old = np.concatenate([passage[b], query[b]])
    new = np.concatenate([out["passage"][b], out["query"][b]])
    np.testing.assert_array_equal(new[ent(old) < 0], old[ent(old) < 0])  # words stay
    pairs = set(zip(ent(old)[ent(old) >= 0], ent(new)[ent(old) >= 0]))
    m = dict(pairs)
    assert len(m) == len(pairs) and len(set(m.values())) == len(m)  # a bijection
    assert out["answer"][b] == m[answer[b]]
    np.testing.assert_array_equal(np.flatnonzero(out["candidates"][b]),
                                  sorted(m[n] for n in np.flatnonzero(candidates[b])))
    changed |= any(k != v for k, v in m.items())
  assert changed
  np.testing.assert_array_equal(out["passage_mask"], batch["passage_mask"])


def test_frequency_baselines():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from experiments.reader import frequency_answer  # pylint: disable=g-import-not-at-top
  from lnorm.data.cnn_questions import Question  # pylint: disable=g-import-not-at-top
  passage = "@entity2 met @entity0 and @entity2 saw @entity1 , @entity0 @entity2".split()
  q = Question("u", tuple(passage), tuple("@placeholder saw @entity2".split()), "@entity0",
               (("@entity0", "a"), ("@entity1", "b"), ("@entity2", "c")))
  assert frequency_answer(q, exclusive=False) == "@entity2"  # 3 times
  assert frequency_answer(q, exclusive=True) == "@entity0"   # 2 times, not in the query
  alone = dataclasses.replace(q, passage=("@entity2", "ran"))
  assert frequency_answer(alone, exclusive=True) is None


def test_reader_attention_analysis_counts_against_hand_values():
  """scripts/reader_attention.analyse on two hand-made questions and attentions."""
  from lnorm.data import cnn_questions as cq
  from scripts import reader_attention as ra
  q = lambda passage, query, answer: cq.Question("u", tuple(passage.split()), tuple(query.split()),
                                                 answer, ())
  # 1: @entity0 is the most frequent non-query entity (the baseline's answer, and right).
  # 2: the answer @entity2 is second to @entity1 (the baseline is wrong).
  qs = [q("@entity0 met @entity1 and @entity0", "@placeholder left", "@entity0"),
        q("@entity1 saw @entity1 near @entity2 today", "@placeholder came", "@entity2")]
  att = np.zeros((2, 7))
  att[0, :5] = [0.5, 0.1, 0.1, 0.1, 0.2]      # answer mass 0.7, entity mass 0.8
  att[1, :6] = [0.1, 0.1, 0.1, 0.1, 0.5, 0.1]  # top token is the answer (0.5)
  assert ra.frequency_rank(qs[0]) == 1 and ra.frequency_rank(qs[1]) == 2
  m = ra.analyse(qs, np.array([0, 2]), att)   # the reader gets both right
  assert m["reader_accuracy"] == 1.0 and m["baseline_accuracy"] == 0.5
  assert (m["both_right"], m["reader_only"], m["baseline_only"], m["neither"]) == (1, 1, 0, 0)
  assert m["by_frequency_rank"]["1"] == {"questions": 1, "reader_accuracy": 1.0}
  assert m["by_frequency_rank"]["2"] == {"questions": 1, "reader_accuracy": 1.0}
  a = m["attention"]["right"]
  np.testing.assert_allclose(a["answer_mass"], (0.7 + 0.5) / 2)
  np.testing.assert_allclose(a["answer_share"], (2 / 5 + 1 / 6) / 2)
  np.testing.assert_allclose(a["entity_mass"], (0.8 + 0.7) / 2)
  np.testing.assert_allclose(a["entity_share"], (3 / 5 + 3 / 6) / 2)
  assert a["top_is_answer"] == 1.0 and m["attention"]["wrong"]["answer_mass"] is None
  assert m["max_mass_outside_passage"] == 0.0
  m = ra.analyse(qs, np.array([1, 2]), att)   # now question 1 is wrong
  assert (m["both_right"], m["reader_only"], m["baseline_only"]) == (0, 1, 1)


def test_reader_attention_refuses_a_workdir_without_a_run(tmp_path, capsys):
  from scripts import reader_attention as ra
  assert ra.main(["--workdir", str(tmp_path)]) == 2
  assert capsys.readouterr().err.strip() == (
      f"error: {tmp_path / 'config.json'} not found: is {tmp_path} a reader workdir?")
