"""Table 3's baseline encoders (lnorm/skipthoughts.py): the mean of the
trained word embeddings and a TF-IDF bag of words."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import sparse

from lnorm import skipthoughts
from lnorm.data import books


def test_embedding_mean_is_the_mean_of_the_sentence_words_rows():
  vocab = books.Vocab.build(["the cat sat .", "a dog ran far away ."], 30)
  m = skipthoughts.SkipThoughts(len(vocab), 6, 8, "none")
  t = jnp.ones((1, 4), jnp.int32)
  params = m.init(jax.random.key(0), t, t, t)["params"]
  enc = skipthoughts.make_embedding_mean_encoder(params, vocab, max_len=5)
  sents = ["The cat sat.", "a zebra ran", "", "the dog the dog the dog"]
  out = enc(sents)
  assert out.shape == (4, 6) and out.dtype == np.float64
  emb = np.asarray(params["embed"]["embedding"], np.float64)
  index = vocab.index
  for s, row in zip(sents, out):
    # Words as the model reads them: tokenised, unknown ones as UNK, at most
    # max_len - 1 = 4 of them; no PAD, no EOS.
    ids = [index.get(w, books.UNK) for w in books.tokenize(s)][:4]
    ref = np.mean([emb[i] for i in ids], axis=0) if ids else np.zeros(6)
    np.testing.assert_allclose(row, ref, rtol=1e-12, atol=1e-15)
  assert not np.allclose(out[1], out[0])
  with pytest.raises(ValueError, match="vocabulary has 12 words but the model's embedding 31"):
    skipthoughts.make_embedding_mean_encoder(
        {"embed": {"embedding": np.zeros((31, 6))}}, vocab)


def test_tfidf_matches_a_hand_computation():
  train = ["a b .", "a c c", "b"]
  vocab = books.Vocab.build(train, 10)  # <pad> <eos> <unk> a b c . (7 words)
  enc = skipthoughts.make_tfidf_encoder(vocab, vocab.encode(train, 8), max_len=8)
  # Document frequencies over the 3 training sentences; unk is in none.
  df = {"a": 2, "b": 2, "c": 1, ".": 1, "<unk>": 0}
  idf = {w: math.log((1 + 3) / (1 + d)) + 1 for w, d in df.items()}
  sents = ["c c a", "b z .", "a"]
  out = enc(sents)
  assert sparse.issparse(out) and out.format == "csr" and out.shape == (3, len(vocab))
  for s, row in zip(sents, out.toarray()):
    tf = {}
    for w in s.split():
      w = w if w in df else "<unk>"
      tf[w] = tf.get(w, 0) + 1
    v = {w: n * idf[w] for w, n in tf.items()}
    norm = math.sqrt(sum(x * x for x in v.values()))
    ref = np.zeros(len(vocab))
    for w, x in v.items():
      ref[vocab.words.index(w)] = x / norm
    np.testing.assert_allclose(row, ref, rtol=1e-12, atol=0)
  # PAD and EOS are no words.
  assert out[:, [books.PAD, books.EOS]].nnz == 0


def test_corpus_is_validated_in_one_line():
  from configs import skipthoughts as cfg
  from experiments import skipthoughts as exp
  from experiments.runner.errors import ConfigError
  c = cfg.get_config("smoke")
  c.corpus = "bookcorpus"
  with pytest.raises(ConfigError, match="^corpus='bookcorpus' is not valid; choose one of: "
                     "gutenberg, novels$"):
    exp.validate(c)
  c.corpus, c.text_dir = "novels", "/some/books"
  with pytest.raises(ConfigError, match="text_dir='/some/books' replaces the gutenberg books; "
                     "it cannot be given with corpus='novels'"):
    exp.validate(c)
  for preset in ("paper", "cpu", "smoke"):
    exp.validate(cfg.get_config(preset))
  assert cfg.get_config("cpu").corpus == "novels"
