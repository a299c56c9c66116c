"""The uni-skip model (lnorm/skipthoughts.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lnorm import skipthoughts
from lnorm.data import books
from tests.run_records import steps_lower_the_loss

# End-to-end runs (minutes): the slow suite (`python -m pytest -m slow`).
pytestmark = pytest.mark.slow

V, E, H = 23, 6, 8


def _tokens(rng, B, T, lengths):
  t = rng.integers(3, V, (B, T)).astype(np.int32)
  for b, n in enumerate(lengths):
    t[b, n - 1] = books.EOS
    t[b, n:] = books.PAD
  return jnp.asarray(t)


def _model(norm):
  return skipthoughts.SkipThoughts(V, E, H, norm)


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_decoders_are_conditioned_on_the_sentence_vector(norm):
  rng = np.random.default_rng(0)
  m = _model(norm)
  prev, cur, nxt = (_tokens(rng, 2, 6, [6, 4]) for _ in range(3))
  params = m.init(jax.random.key(0), prev, cur, nxt)["params"]
  apply = lambda method, *a: m.apply({"params": params}, *a, method=method)
  u = apply(skipthoughts.SkipThoughts.encode, cur)
  dec = lambda u: apply(lambda mod, t, u: mod.decode(mod.decoder_next, t, u), nxt, u)
  out = dec(u)
  other = dec(u + 1.0)
  # Every real step's logits depend on u, the first too (its input is the zero vector).
  real = np.asarray(nxt != books.PAD)
  assert np.all(np.abs(np.asarray(other - out)).max(-1)[real] > 1e-4)
  # Each step sees only the tokens before it: changing the last real token of row 0
  # leaves the earlier steps alone.
  changed = nxt.at[0, 4].set(3 if int(nxt[0, 4]) != 3 else 4)
  d = np.abs(np.asarray(dec(u)[0] - apply(
      lambda mod, t, u: mod.decode(mod.decoder_next, t, u), changed, u)[0])).max(-1)
  assert np.all(d[:5] == 0) and d[5] > 0
  # The two decoders differ.
  assert not np.allclose(out, apply(lambda mod, t, u: mod.decode(mod.decoder_prev, t, u), nxt, u))


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_encoder_ignores_padding(norm):
  rng = np.random.default_rng(1)
  m = _model(norm)
  short = _tokens(rng, 2, 5, [3, 5])
  params = m.init(jax.random.key(0), short, short, short)["params"]
  enc = lambda t: m.apply({"params": params}, t, method=skipthoughts.SkipThoughts.encode)
  longer = jnp.concatenate([short, jnp.zeros((2, 4), jnp.int32)], 1)
  np.testing.assert_allclose(enc(short), enc(longer), atol=1e-6)
  changed = short.at[0, 0].set(3 + (int(short[0, 0]) - 2) % (V - 3))  # another word
  assert not np.allclose(enc(changed)[0], enc(short)[0])
  np.testing.assert_allclose(enc(changed)[1], enc(short)[1], atol=1e-6)


def test_loss_counts_real_tokens_only():
  rng = np.random.default_rng(2)
  m = _model("none")
  prev, cur, nxt = (_tokens(rng, 3, 5, [5, 2, 3]) for _ in range(3))
  params = m.init(jax.random.key(0), prev, cur, nxt)["params"]
  total, met = skipthoughts.loss(m, params, prev, cur, nxt)
  lp, ln = m.apply({"params": params}, prev, cur, nxt)
  ref = 0.0
  for logits, toks in ((lp, prev), (ln, nxt)):
    logp = np.asarray(jax.nn.log_softmax(np.asarray(logits, np.float64)))
    for b in range(3):
      for t in range(5):
        if toks[b, t] != books.PAD:
          ref -= logp[b, t, toks[b, t]]
  np.testing.assert_allclose(total, ref, rtol=1e-5)
  assert met["nll_prev"] > 0 and met["nll_next"] > 0


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_a_few_adam_steps_lower_the_loss_without_nan(norm):
  rng = np.random.default_rng(3)
  m = _model(norm)
  batch = tuple(_tokens(rng, 4, 6, [6, 3, 4, 5]) for _ in range(3))
  params = m.init(jax.random.key(0), *batch)["params"]
  opt = optax.chain(optax.clip_by_global_norm(5.0), optax.adam(1e-2))
  steps_lower_the_loss(lambda p: skipthoughts.loss(m, p, *batch)[0], params, opt, 8)


def test_bad_norm_is_refused():
  with pytest.raises(ValueError, match="norm='batch' is not valid; choose one of: none, layer"):
    _model("batch").init(jax.random.key(0), *(jnp.ones((1, 3), jnp.int32),) * 3)


def test_make_encoder_matches_the_model_and_keeps_order():
  m = _model("layer")
  vocab = books.Vocab.build(["the cat sat", "a dog ran far away"], 30)
  toks = vocab.encode(["x"], 4)
  params = m.init(jax.random.key(0), toks, toks, toks)["params"]
  enc = skipthoughts.make_encoder(m, params, vocab, batch_size=2, max_len=8, buckets=(4,))
  sents = ["a dog ran far away", "the cat", "sat", "the cat sat on a dog"]
  out = enc(sents)
  assert out.shape == (4, H)
  for s, row in zip(sents, out):
    ref = m.apply({"params": params}, jnp.asarray(vocab.encode([s], 8)),
                  method=skipthoughts.SkipThoughts.encode)
    np.testing.assert_allclose(row, ref[0], atol=1e-5)


def _tiny_run_dir(tmp_path, monkeypatch):
  """Tiny books and a tiny MR set (its SHA-256s patched in); returns the config."""
  import hashlib
  from configs import skipthoughts as cfg
  from lnorm.data import senteval as data
  rng = np.random.default_rng(0)
  words = [f"w{i}" for i in range(30)]
  bdir = tmp_path / "books"
  bdir.mkdir()
  for name, n in (("a.txt", 14), ("b.txt", 12), ("held.txt", 8)):
    (bdir / name).write_text("".join(" ".join(rng.choice(words, 4)) + " .\n" for _ in range(n)))
  for rel, word in zip(data.CLASSIFICATION["MR"], ("good", "bad")):
    text = "".join(f"{word} {' '.join(rng.choice(words, 3))}\n" for _ in range(12))
    (tmp_path / "senteval" / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "senteval" / rel).write_text(text)
    monkeypatch.setitem(data.SHA256, rel, hashlib.sha256(text.encode()).hexdigest())
  c = cfg.get_config("smoke")
  c.data_dir, c.text_dir, c.heldout_books = str(tmp_path), str(bdir), "held.txt"
  c.vocab_size, c.embed_dim, c.features, c.max_len, c.batch_size = 40, 4, 8, 6, 4
  c.num_train, c.num_epochs, c.num_heldout, c.eval_batch_size = 16, 1, 0, 8
  c.eval_tasks, c.eval_folds, c.eval_max_examples, c.eval_max_len = "MR", 2, 0, 8
  c.learning_rate = 1e-2
  return c


def test_experiment_trains_resumes_and_its_checkpoint_evaluates(tmp_path, monkeypatch):
  import json
  from experiments import skipthoughts as exp
  from scripts import eval_skipthoughts
  config = _tiny_run_dir(tmp_path, monkeypatch)
  wd = tmp_path / "run"
  exp.train_and_evaluate(config, str(wd))
  config.num_epochs = 2  # a rerun with more epochs resumes from step 4
  exp.train_and_evaluate(config, str(wd))
  lines = [json.loads(l) for l in (wd / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in lines] == [4, 8]
  for r in lines:
    assert np.isfinite(r["train_nll"]) and np.isfinite(r["heldout_nll"])
    assert 0 <= r["MR_acc"] <= 1
  assert eval_skipthoughts.main(["--workdir", str(wd), "--tasks", "MR", "--folds", "2",
                                 "--inner_folds", "0"]) == 0
  ev = json.loads((wd / "eval" / "step_8.json").read_text())
  assert ev["heldout_nll"] == pytest.approx(lines[-1]["heldout_nll"], rel=1e-6)
  assert ev["MR_acc"] == pytest.approx(lines[-1]["MR_acc"])
  assert eval_skipthoughts.main(["--workdir", str(wd), "--step", "3"]) == 2


def test_missing_senteval_file_stops_the_run_before_it_trains(tmp_path, monkeypatch):
  from experiments import skipthoughts as exp
  from lnorm.data import DataError
  from lnorm.data import senteval as data
  config = _tiny_run_dir(tmp_path, monkeypatch)
  (tmp_path / "senteval" / data.CLASSIFICATION["MR"][1]).unlink()
  traced = []
  step = exp.train_step
  monkeypatch.setattr(exp, "train_step", lambda *a: traced.append(1) or step(*a))
  with pytest.raises(DataError, match=data.CLASSIFICATION["MR"][1] + " not found"):
    exp.train_and_evaluate(config, str(tmp_path / "run"))
  assert not traced  # found before the train step was even compiled
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("folds,inner,least", [(2, 0, 20), (10, 5, 500), (5, 0, 50)])
def test_too_few_eval_examples_for_the_folds_is_refused_at_once(folds, inner, least):
  from configs import skipthoughts as cfg
  from experiments import skipthoughts as exp
  from experiments.runner.errors import ConfigError
  c = cfg.get_config("smoke")
  c.eval_folds, c.eval_inner_folds = folds, inner
  for n in (1, folds - 1, least - 1):
    c.eval_max_examples = n
    with pytest.raises(ConfigError, match=f"eval_max_examples={n} is too few for {folds} "
                       f"folds.*at least {least}"):
      exp.validate(c)
  for n in (0, least):
    c.eval_max_examples = n
    exp.validate(c)


def test_novels_run_scores_the_baselines_at_its_last_evaluation_only(tmp_path, monkeypatch):
  import json
  from experiments import skipthoughts as exp
  from tests.tiny_data import write_novels  # pylint: disable=g-import-not-at-top
  config = _tiny_run_dir(tmp_path, monkeypatch)
  rng = np.random.default_rng(1)
  words = [f"w{i}" for i in range(30)]
  novel = lambda n: "\n\n".join(" ".join(rng.choice(words, 5)).capitalize() + "." for _ in range(n))
  write_novels(tmp_path, {"a_one.txt": novel(20), "b_two.txt": novel(14),
                         **{name: novel(6) for name in books.NOVELS_HELDOUT}}, monkeypatch)
  config.text_dir, config.corpus = "", "novels"
  config.num_steps, config.eval_every_steps, config.num_train = 6, 3, 0
  exp.train_and_evaluate(config, str(tmp_path / "run"))
  lines = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in lines] == [3, 6]
  assert not any(k.startswith(("tfidf_", "embmean_")) for k in lines[0])
  for p in ("tfidf", "embmean"):
    assert 0 <= lines[1][f"{p}_MR_acc"] <= 1 and f"{p}_MR_acc_std" in lines[1]
  # The held-out books are the novels' named ones: 5 books of 6 sentences, 4 triples each.
  assert len(exp.load_corpus(config).heldout) == 5 * 4
