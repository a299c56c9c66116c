"""The SentEval-style evaluation (lnorm/senteval_protocol.py)."""

import hashlib

import numpy as np
import pytest
from scipy.special import softmax

from lnorm import senteval_protocol
from lnorm.data import senteval as data


def test_folds_partition_and_never_train_on_a_test_row():
  y = np.array([0] * 30 + [1] * 20)
  seen = np.zeros(len(y), int)
  for tr, te in senteval_protocol.folds(y, 10, seed=3):
    assert not set(tr) & set(te)
    assert len(tr) + len(te) == len(y)
    assert np.mean(y[te]) == pytest.approx(0.4)  # stratified
    seen[te] += 1
  np.testing.assert_array_equal(seen, 1)
  a = [te.tolist() for _, te in senteval_protocol.folds(y, 10, seed=3)]
  assert a == [te.tolist() for _, te in senteval_protocol.folds(y, 10, seed=3)]
  assert a != [te.tolist() for _, te in senteval_protocol.folds(y, 10, seed=4)]


def test_duplicate_sentences_never_cross_folds():
  rng = np.random.default_rng(0)
  sents = [f"s{rng.integers(25)}" for _ in range(200)]  # many repeats
  y = np.array([int(s[1:]) % 2 for s in sents])
  groups = senteval_protocol._groups(sents)
  for tr, te in senteval_protocol.folds(y, 10, seed=0, groups=groups):
    assert not {sents[i] for i in tr} & {sents[i] for i in te}


def test_score_distribution_is_tais_and_round_trips():
  p = senteval_protocol.score_distribution(np.array([3.7, 1.0, 5.0, 2.0, 4.25]))
  np.testing.assert_allclose(p, [[0, 0, 0.3, 0.7, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 1],
                                 [0, 1, 0, 0, 0], [0, 0, 0, 0.75, 0.25]], atol=1e-12)
  y = np.random.default_rng(1).uniform(1, 5, 1000)
  p = senteval_protocol.score_distribution(y)
  np.testing.assert_allclose(p.sum(1), 1)
  assert np.all((p > 0).sum(1) <= 2)
  np.testing.assert_allclose(senteval_protocol.expected_score(p), y, atol=1e-12)
  with pytest.raises(ValueError):
    senteval_protocol.score_distribution(np.array([0.5]))


def test_planted_separable_feature_and_random_feature():
  rng = np.random.default_rng(0)
  X = rng.normal(size=(300, 8))
  y = (X[:, 0] > 0).astype(int)
  X[:, 0] += np.where(y == 1, 0.5, -0.5)  # a margin
  m = senteval_protocol.classification_cv(X, y, n_folds=10, inner_folds=3)
  assert m["acc"] > 0.98
  r = senteval_protocol.classification_cv(rng.normal(size=(300, 8)), rng.integers(0, 2, 300),
                                 n_folds=10, Cs=(1.0,))
  assert 0.35 < r["acc"] < 0.65
  assert r["acc_std"] > 0


def test_soft_target_fit_minimises_the_soft_cross_entropy():
  """The weighted hard-label fit is the optimum of sum p log q + |W|^2 / 2C."""
  rng = np.random.default_rng(0)
  X = rng.normal(size=(120, 4))
  y = np.clip(3 + X[:, 0] + 0.3 * rng.normal(size=120), 1, 5)
  C = 0.5
  clf = senteval_protocol._soft_fit(X, y, C, seed=0)
  W, b = clf.coef_.T, clf.intercept_  # (4, 5), (5,)
  assert list(clf.classes_) == [1, 2, 3, 4, 5]
  q = softmax(X @ W + b, axis=1)
  p = senteval_protocol.score_distribution(y)
  grad_W = X.T @ (q - p) + W / C
  grad_b = (q - p).sum(0)
  at_zero = np.abs(X.T @ (1 / 5 - p)).max()  # the gradient at W = 0, b = 0
  assert at_zero > 10
  assert np.abs(grad_W).max() < 1e-3 * at_zero and np.abs(grad_b).max() < 1e-3 * at_zero
  # A hard-label fit (rounded scores) is not that optimum.
  hard = senteval_protocol._fit(X, np.rint(y).astype(int), C, seed=0)
  q_hard = softmax(X @ hard.coef_.T + hard.intercept_, axis=1)
  assert np.abs(X.T @ (q_hard - p) + hard.coef_.T / C).max() > 100 * np.abs(grad_W).max()


def test_sick_recovers_a_planted_relatedness():
  rng = np.random.default_rng(0)

  def split(n):
    y = rng.uniform(1, 5, n)
    f = np.column_stack([y + 0.2 * rng.normal(size=n), rng.normal(size=(n, 3))])
    return f, y

  m = senteval_protocol.sick(split(400), split(100), split(300))
  assert m["r"] > 0.9 and m["rho"] > 0.9 and m["mse"] < 0.3
  noise = senteval_protocol.sick(*[(rng.normal(size=(n, 4)), rng.uniform(1, 5, n))
                          for n in (400, 100, 300)])
  assert abs(noise["r"]) < 0.2


def test_evaluate_end_to_end_on_tiny_files(tmp_path, monkeypatch):
  rng = np.random.default_rng(0)
  content = {}
  for task, (pos, neg) in data.CLASSIFICATION.items():
    content[pos] = "".join(f"good w{rng.integers(50)} w{i}\n" for i in range(30))
    content[neg] = "".join(f"bad w{rng.integers(50)} w{i}\n" for i in range(30))
  for i, rel in enumerate(data.SICK_SPLITS.values()):
    rows = [f"{k}\tx{k}\tx{k} y\t{1 + (k % 9) / 2}\tNEUTRAL" for k in range(40)]
    content[rel] = "pair_ID\tA\tB\tscore\tlabel\n" + "\n".join(rows) + "\n"
  sha = {}
  for rel, text in content.items():
    (tmp_path / "senteval" / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "senteval" / rel).write_text(text)
    sha[rel] = hashlib.sha256(text.encode()).hexdigest()
  monkeypatch.setattr(data, "SHA256", sha)
  monkeypatch.setattr(data.load_sick, "__defaults__", (None, sha))
  monkeypatch.setattr(data.load_classification, "__defaults__", (None, sha))

  def encode(sents):
    # 'good' / 'bad' and the SICK score (k % 9) are readable from these vectors.
    out = np.zeros((len(sents), 12))
    for i, s in enumerate(sents):
      out[i, 0] = ("good" in s) - ("bad" in s)
      k = int(s.split()[0][1:]) if s.startswith("x") else 0
      out[i, 1 + k % 9] = 1.0
      out[i, 10] = len(s.split())
      out[i, 11] = rng.normal()
    return out

  m = senteval_protocol.evaluate(encode, ("MR", "SICK"), tmp_path, n_folds=3, inner_folds=2,
                        max_examples=50)
  assert m["MR_acc"] == 1.0
  assert set(m) == {"MR_acc", "MR_acc_std", "MR_seconds", "SICK_r", "SICK_rho", "SICK_mse",
                    "SICK_seconds"}
  assert np.isfinite(m["SICK_r"])
  with pytest.raises(ValueError, match="unknown tasks"):
    senteval_protocol.evaluate(encode, ("TREC",), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("folds,inner", [(2, 0), (5, 0), (3, 2), (10, 5)])
def test_min_examples_keeps_both_classes_in_every_fold(folds, inner):
  # The rarest class of the sets (MPQA: 31%), a seeded subset as evaluate takes it.
  rng = np.random.default_rng(folds)
  y_all = (rng.random(20_000) < 0.31).astype(np.int32)
  n = senteval_protocol.min_examples(folds, inner)
  for seed in range(5):
    y = y_all[np.sort(np.random.default_rng(seed).permutation(len(y_all))[:n])]
    X = rng.normal(size=(n, 3)) + y[:, None]
    # Two of the grid's Cs: the inner folds are what can lose a class, not how
    # many Cs each fits (the whole grid made this one case minutes long).
    m = senteval_protocol.classification_cv(X, y, n_folds=folds, inner_folds=max(inner, 2),
                                   Cs=senteval_protocol.CS[:2] if inner else (1.0,), seed=seed)
    assert 0.5 < m["acc"] <= 1.0
  # Fewer examples than folds is what sklearn refuses (the guard's reason).
  with pytest.raises(ValueError):
    senteval_protocol.classification_cv(X[:folds - 1], y[:folds - 1], n_folds=folds, Cs=(1.0,))


def test_sparse_features_give_what_the_same_dense_ones_give():
  from scipy import sparse
  rng = np.random.default_rng(5)
  # A bag of words: 60 columns, ~90% zeros, one column tells the class apart.
  X = rng.poisson(0.1, size=(200, 60)).astype(np.float64)
  y = rng.integers(0, 2, 200)
  X[:, 0] += 2 * y  # a margin: no row near the boundary, where solvers may differ
  X[:5, 0] += 2 * (1 - y[:5])  # and a few rows on the wrong side
  S = sparse.csr_matrix(X)
  # Scaling without centring changes only the (unpenalised) intercept, so the
  # sparse path fits the same classifier as the dense one.
  for kw in ({"Cs": (1.0,)}, {"inner_folds": 3}):
    dense = senteval_protocol.classification_cv(X, y, n_folds=5, **kw)
    sp = senteval_protocol.classification_cv(S, y, n_folds=5, **kw)
    assert sp["acc"] == dense["acc"] and sp["C"] == dense["C"]
    assert 0.9 < dense["acc"] < 1.0
  u, v = X[:100], X[100:]
  pf = senteval_protocol.pair_features(sparse.csr_matrix(u), sparse.csr_matrix(v))
  assert sparse.issparse(pf) and pf.format == "csr"
  np.testing.assert_array_equal(pf.toarray(), np.hstack([np.abs(u - v), u * v]))
  np.testing.assert_array_equal(senteval_protocol.pair_features(u, v),
                                np.hstack([np.abs(u - v), u * v]))

  def split(n):
    a = rng.poisson(0.3, size=(n, 20)).astype(np.float64)
    b = np.where(rng.random((n, 20)) < 0.5, a, rng.poisson(0.3, size=(n, 20)))
    y = np.clip(1 + 4 * (a == b).mean(1) + 0.1 * rng.normal(size=n), 1, 5)
    return senteval_protocol.pair_features(a, b), y

  splits = [split(n) for n in (300, 80, 200)]
  dense = senteval_protocol.sick(*splits, Cs=(0.25, 1.0))
  sp = senteval_protocol.sick(*[(sparse.csr_matrix(f), y) for f, y in splits], Cs=(0.25, 1.0))
  assert dense["r"] > 0.5
  assert sp["C"] == dense["C"]
  for k in ("r", "rho", "mse"):
    assert sp[k] == pytest.approx(dense[k], rel=1e-3)
