"""Sentence-vector evaluation as SentEval (Conneau & Kiela 2018) and the
skip-thoughts papers do it, for any ``encode(list[str]) -> (N, D) array``.

* MR, CR, SUBJ, MPQA (``classification_cv``): logistic regression
  (scikit-learn) on the vectors, 10-fold stratified cross-validation with a
  seeded shuffle; accuracy is the mean over the test folds, with its standard
  deviation. The inverse regularisation C is chosen on the training folds
  alone, by an inner stratified cross-validation over ``CS`` (SentEval's grid,
  2^-2 .. 2^3), unless one C is given. Features are standardised with the
  training folds' statistics (lbfgs converges much faster; logistic
  regression is otherwise unchanged by it except through the penalty).
  Identical sentences are kept in one fold (``group_duplicates``, on by
  default), so that no test sentence is also a training sentence: MPQA has
  862 repeated phrases ("good", ...), CR 8. SentEval splits by row instead,
  which lets such repeats score by memory; ``group_duplicates=False`` does that.
* SICK relatedness (``sick``): the pair features ``[|u - v|, u * v]`` and a
  softmax over the scores 1..5 trained to match Tai et al.'s (2015) sparse
  target distribution (``score_distribution``): a score y puts y - floor(y)
  on floor(y) + 1 and the rest on floor(y). The prediction is the expected
  score (``expected_score``). The cross-entropy to a soft target equals a
  weighted sum of hard-label log-losses, so scikit-learn's multinomial
  logistic regression fits it exactly with each pair repeated once per
  non-zero class, weighted by its probability. C is chosen on SICK trial by
  Pearson r; trained on SICK train; Pearson r, Spearman rho and MSE on test.

Features may be dense arrays or scipy.sparse matrices (a bag of words: tens of
thousands of columns, nearly all zero). Dense ones are cast to float64 and
handled exactly as before; sparse ones stay sparse (CSR, float64): they are
scaled by the training rows' standard deviation without centring
(``StandardScaler(with_mean=False)``, since centring would make them dense),
and their SICK pair features ``[|u - v|, u * v]`` are built sparse.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import sparse, stats
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold
from sklearn.preprocessing import StandardScaler

from lnorm.data import senteval as data

Features = np.ndarray | sparse.spmatrix | sparse.sparray  # (N, D)
Encoder = Callable[[list[str]], Features]
TASKS = data.TASKS
CS = tuple(2.0 ** t for t in range(-2, 4))
SICK_CS = tuple(2.0 ** t for t in range(-6, 3))
NUM_SCORES = 5


def score_distribution(y_N: np.ndarray, k: int = NUM_SCORES) -> np.ndarray:
  """Tai et al.'s target: (N,) scores in [1, k] -> (N, k) probabilities."""
  y_N = np.asarray(y_N, np.float64)
  if np.any((y_N < 1) | (y_N > k)):
    raise ValueError(f"scores must lie in [1, {k}]")
  lo = np.minimum(np.floor(y_N), k - 1).astype(int)  # y = k goes to p[k-1] = 1
  frac = y_N - lo
  p = np.zeros((len(y_N), k))
  p[np.arange(len(y_N)), lo - 1] = 1.0 - frac
  p[np.arange(len(y_N)), lo] = frac
  return p


def expected_score(p_NxK: np.ndarray) -> np.ndarray:
  """The inverse of ``score_distribution``: sum_i i * p_i."""
  return np.asarray(p_NxK) @ np.arange(1, p_NxK.shape[-1] + 1)


def _logreg(C: float, seed: int) -> LogisticRegression:
  return LogisticRegression(C=C, max_iter=1000, random_state=seed)


def _fit(X, y, C, seed, sample_weight=None):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    return _logreg(C, seed).fit(X, y, sample_weight=sample_weight)


def folds(y: np.ndarray, n_folds: int, seed: int, groups: np.ndarray | None = None
          ) -> list[tuple[np.ndarray, np.ndarray]]:
  """Stratified, seeded (train, test) index pairs; rows of one group share a fold."""
  if groups is None:
    cv = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
    return list(cv.split(np.zeros(len(y)), y))
  cv = StratifiedGroupKFold(n_splits=n_folds, shuffle=True, random_state=seed)
  return list(cv.split(np.zeros(len(y)), y, groups))


def as_features(X: Features) -> Features:
  """float64 (N, D): a dense array, or a sparse matrix as CSR (row slicing)."""
  if sparse.issparse(X):
    return sparse.csr_matrix(X, dtype=np.float64)
  return np.asarray(X, np.float64)


def _standardize(train: Features, *others: Features) -> list[Features]:
  # Centring a sparse matrix would fill it: sparse features are only scaled.
  sc = StandardScaler(with_mean=not sparse.issparse(train)).fit(train)
  return [sc.transform(train)] + [sc.transform(o) for o in others]


def _select_C(X, y, Cs, inner_folds, seed, groups) -> float:
  if len(Cs) == 1:
    return Cs[0]
  score = np.zeros(len(Cs))
  for tr, te in folds(y, inner_folds, seed, groups):
    Xtr, Xte = _standardize(X[tr], X[te])
    for j, C in enumerate(Cs):
      score[j] += np.mean(_fit(Xtr, y[tr], C, seed).predict(Xte) == y[te])
  return Cs[int(np.argmax(score))]


def classification_cv(X: Features, y: np.ndarray, *, n_folds: int = 10,
                      inner_folds: int = 5, Cs: Sequence[float] = CS, seed: int = 1111,
                      groups: np.ndarray | None = None) -> dict[str, float]:
  """``acc`` (mean test-fold accuracy), ``acc_std`` (over folds), ``C`` (median)."""
  X, y = as_features(X), np.asarray(y)
  accs, chosen = [], []
  for tr, te in folds(y, n_folds, seed, groups):
    g = None if groups is None else groups[tr]
    C = _select_C(X[tr], y[tr], tuple(Cs), inner_folds, seed, g)
    Xtr, Xte = _standardize(X[tr], X[te])
    accs.append(np.mean(_fit(Xtr, y[tr], C, seed).predict(Xte) == y[te]))
    chosen.append(C)
  return {"acc": float(np.mean(accs)), "acc_std": float(np.std(accs)),
          "C": float(np.median(chosen))}


def min_examples(n_folds: int, inner_folds: int = 0) -> int:
  """The fewest sentences of a classification set that ``max_examples`` may
  keep: 10 a (inner) fold, so that with the sets' rarest class at 31% (MPQA)
  every training fold still holds both classes."""
  return 10 * n_folds * max(inner_folds, 1)


def pair_features(u: Features, v: Features) -> Features:
  """``[|u - v|, u * v]``, (N, 2 D); sparse (CSR) if u and v are."""
  if sparse.issparse(u) or sparse.issparse(v):
    u, v = sparse.csr_matrix(u), sparse.csr_matrix(v)
    return sparse.hstack([abs(u - v), u.multiply(v)], format="csr")
  return np.concatenate([np.abs(u - v), u * v], axis=-1)


def _soft_fit(X: Features, y: np.ndarray, C: float, seed: int) -> LogisticRegression:
  p = score_distribution(y)
  rows, cls = np.nonzero(p > 0)
  return _fit(X[rows], cls + 1, C, seed, sample_weight=p[rows, cls])


def _predict(clf: LogisticRegression, X: Features) -> np.ndarray:
  p = np.zeros((X.shape[0], NUM_SCORES))
  p[:, clf.classes_ - 1] = clf.predict_proba(X)  # a class absent from training stays 0
  return expected_score(p)


def sick(train: tuple[Features, np.ndarray], trial: tuple[Features, np.ndarray],
         test: tuple[Features, np.ndarray], *, Cs: Sequence[float] = SICK_CS,
         seed: int = 1111) -> dict[str, float]:
  """Each split is (pair features, scores). ``r``, ``rho``, ``mse`` on test;
  ``trial_r`` and ``C`` of the selected model."""
  Xtr, Xdev, Xte = _standardize(train[0], trial[0], test[0])
  best = None
  for C in Cs:
    clf = _soft_fit(Xtr, train[1], C, seed)
    r = stats.pearsonr(_predict(clf, Xdev), trial[1])[0]
    if best is None or r > best[0]:
      best = (r, C, clf)
  r_dev, C, clf = best
  pred = _predict(clf, Xte)
  return {"r": float(stats.pearsonr(pred, test[1])[0]),
          "rho": float(stats.spearmanr(pred, test[1])[0]),
          "mse": float(np.mean((pred - test[1]) ** 2)), "trial_r": float(r_dev), "C": C}


def _groups(sentences: Sequence[str]) -> np.ndarray:
  _, inverse = np.unique(np.asarray(sentences, dtype=object).astype(str), return_inverse=True)
  return inverse


def load(tasks: Sequence[str] = TASKS, data_dir: str | os.PathLike[str] | None = None
         ) -> dict[str, Any]:
  """Every file of ``tasks``, read and checked (a one-line DataError for a
  missing or corrupt one): what :func:`evaluate` takes as ``data``, so that a
  run finds a wrong data_dir before it trains, not at its first evaluation."""
  unknown = [t for t in tasks if t not in TASKS]
  if unknown:
    raise ValueError(f"unknown tasks {unknown}; choose from: {', '.join(TASKS)}")
  return {t: data.load_sick(data_dir) if t == "SICK" else data.load_classification(t, data_dir)
          for t in tasks}


def evaluate(encode: Encoder, tasks: Sequence[str] = TASKS,
             data_dir: str | os.PathLike[str] | None = None, *, n_folds: int = 10,
             inner_folds: int = 5, Cs: Sequence[float] = CS,
             sick_Cs: Sequence[float] = SICK_CS, group_duplicates: bool = True,
             max_examples: int = 0, seed: int = 1111,
             loaded: Mapping[str, Any] | None = None) -> dict[str, float]:
  """Flat metrics of ``encode`` (dense or sparse (N, D) features): ``SICK_r``,
  ``SICK_rho``, ``SICK_mse``, ``<task>_acc``, ``<task>_acc_std``, and
  ``<task>_seconds``. ``max_examples`` > 0 evaluates
  a seeded random subset of each classification set (SICK always whole).
  ``loaded`` is what :func:`load` returned; without it the files are read here."""
  loaded = load(tasks, data_dir) if loaded is None else loaded
  out: dict[str, float] = {}
  for task in tasks:
    t0 = time.perf_counter()
    if task == "SICK":
      feats = {}
      for name, (a, b, y) in loaded["SICK"].items():
        feats[name] = (pair_features(as_features(encode(a)), as_features(encode(b))), y)
      m = sick(feats["train"], feats["trial"], feats["test"], Cs=sick_Cs, seed=seed)
      out |= {"SICK_r": m["r"], "SICK_rho": m["rho"], "SICK_mse": m["mse"]}
    else:
      sents, y = loaded[task]
      if 0 < max_examples < len(sents):
        keep = np.sort(np.random.default_rng(seed).permutation(len(sents))[:max_examples])
        sents, y = [sents[i] for i in keep], y[keep]
      m = classification_cv(encode(sents), y, n_folds=n_folds, inner_folds=inner_folds,
                            Cs=Cs, seed=seed,
                            groups=_groups(sents) if group_duplicates else None)
      out |= {f"{task}_acc": m["acc"], f"{task}_acc_std": m["acc_std"]}
    out[f"{task}_seconds"] = time.perf_counter() - t0
  return out
