"""Skip-thought vectors with and without layer-normalized GRUs (paper §6.3,
Table 3, Figure 3), on the shared run loop (experiments/runner/loop.py).

Trains the uni-skip model (lnorm/skipthoughts.py) on (previous, current, next)
sentence triples (lnorm/data/books.py) with Adam after global-norm gradient
clipping, as Kiros et al.'s code does. Every evaluation records the held-out
books' per-word NLL and the SentEval tasks of ``config.eval_tasks``
(lnorm/senteval_protocol.py) into metrics.jsonl, so that Figure 3's curves are the
``SICK_r``, ``MR_acc``, ... columns against ``step``. With ``config.eval_baselines``
the last evaluation also scores two encoders without the GRU on the same tasks
(lnorm/skipthoughts.py): the mean of the trained word embeddings
(``embmean_<metric>``, e.g. ``embmean_SICK_r``) and a TF-IDF bag of words over
the vocabulary, its idf from the training sentences (``tfidf_<metric>``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax.training.train_state import TrainState

from experiments.runner import loop
from experiments.runner import train_state as ts
from experiments.runner.errors import at_least, check, check_common, off_or_more, positive
from lnorm import senteval_protocol, skipthoughts
from lnorm.data import books
from lnorm.skipthoughts import SkipThoughts, accept


CORPORA = ("gutenberg", "novels")  # books.load_gutenberg, books.load_novels


def validate(config: ml_collections.ConfigDict) -> None:
  check_common(config, accept)
  at_least(config, 1, "vocab_size", "embed_dim", "features", "eval_batch_size")
  check(config.vocab_size > len(books.SPECIALS),
        f"vocab_size={config.vocab_size} must exceed {len(books.SPECIALS)}")
  check(config.max_len >= 2, f"max_len={config.max_len} must be at least 2")
  positive(config, "eps")
  off_or_more(config, "grad_clip_norm")
  at_least(config, 0, "num_train", "num_heldout", "num_steps")
  check(config.corpus in CORPORA,
        f"corpus={config.corpus!r} is not valid; choose one of: {', '.join(CORPORA)}")
  check(not (config.text_dir and config.corpus != "gutenberg"),
        f"text_dir={config.text_dir!r} replaces the gutenberg books; it cannot be given "
        f"with corpus={config.corpus!r}")
  bad = [t for t in config.eval_tasks.split(",") if t and t not in senteval_protocol.TASKS]
  check(not bad, f"eval_tasks has {bad}; choose from: {', '.join(senteval_protocol.TASKS)}")
  check(config.eval_folds >= 2, f"eval_folds={config.eval_folds} must be at least 2")
  check(config.eval_inner_folds == 0 or config.eval_inner_folds >= 2,
        f"eval_inner_folds={config.eval_inner_folds} must be 0 (C = 1) or at least 2")
  least = senteval_protocol.min_examples(config.eval_folds, config.eval_inner_folds)
  check(config.eval_max_examples == 0 or config.eval_max_examples >= least,
        f"eval_max_examples={config.eval_max_examples} is too few for {config.eval_folds} "
        f"folds{f' and {config.eval_inner_folds} inner folds' if config.eval_inner_folds else ''}"
        f": give 0 (all) or at least {least}")


def tasks(config) -> tuple[str, ...]:
  return tuple(t for t in config.eval_tasks.split(",") if t)


def load_corpus(config) -> books.Corpus:
  """The Gutenberg books, the novels, or any directory of one-sentence-a-line books."""
  if config.text_dir:
    held = tuple(h for h in config.heldout_books.split(",") if h)
    train, heldout = books.split_books(books.book_files(config.text_dir), held)
    corpus = books.load_corpus(train, heldout, config.vocab_size, config.max_len)
  elif config.corpus == "novels":
    corpus = books.load_novels(config.data_dir, config.vocab_size, config.max_len)
  else:
    corpus = books.load_gutenberg(config.data_dir, config.vocab_size, config.max_len)
  if config.num_train:
    t = corpus.train
    keep = t.middle[:config.num_train]
    corpus = books.Corpus(books.Triples(t.tokens, keep, t.documents, t.doc_of), corpus.heldout,
                          corpus.vocab)
  check(len(corpus.train) >= config.batch_size,
        f"batch_size={config.batch_size} is larger than the {len(corpus.train)} training "
        "triples")
  return corpus


def create_model(config, vocab_size: int) -> SkipThoughts:
  return ts.model(SkipThoughts, vocab_size=vocab_size, embed_dim=config.embed_dim, features=config.features,
                norm=config.norm, eps=config.eps)



def create_train_state(config, vocab_size: int, rng: jax.Array) -> TrainState:
  model = create_model(config, vocab_size)
  t = jnp.ones((2, config.max_len), jnp.int32)
  return TrainState.create(apply_fn=model.apply,
                           params=ts.init_variables(model, rng, t, t, t)["params"],
                           tx=ts.adam(config.learning_rate, config.grad_clip_norm))


def train_step(model: SkipThoughts, state: TrainState, batch: tuple[jax.Array, ...]
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  (_, metrics), grads = jax.value_and_grad(
      lambda p: skipthoughts.loss(model, p, *batch), has_aux=True)(state.params)
  return state.apply_gradients(grads=grads), metrics


def feed(triples: books.Triples, train_key: jax.Array, batch_size: int) -> loop.EpochShuffle:
  def batch(data, xs):
    m_B = data["middle"][xs["idx"]]
    t = data["tokens"]
    return t[m_B - 1], t[m_B], t[m_B + 1]

  return loop.EpochShuffle(
      data={"tokens": jnp.asarray(triples.tokens), "middle": jnp.asarray(triples.middle)},
      num_examples=len(triples), batch_size=batch_size,
      shuffle_key=lambda epoch: jax.random.fold_in(train_key, epoch), batch=batch)


def eval_step(model: SkipThoughts, params: Any, prev: jax.Array, cur: jax.Array,
              nxt: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(summed NLL, number of words) over both decoders."""
  lp, ln = model.apply({"params": params}, prev, cur, nxt)
  sp, np_ = skipthoughts.token_nll(lp, prev)
  sn, nn_ = skipthoughts.token_nll(ln, nxt)
  return (sp + sn).sum(), (np_ + nn_).sum()


def heldout_nll(model: SkipThoughts, params: Any, triples: books.Triples, n: int,
                batch_size: int) -> float:
  """Per-word NLL of the first ``n`` held-out triples (0 = all), in padded chunks."""
  n = len(triples) if n == 0 else min(n, len(triples))
  step = jax.jit(functools.partial(eval_step, model))
  total, words = 0.0, 0.0
  for s in range(0, n, batch_size):
    idx = np.arange(s, s + batch_size) % n
    prev, cur, nxt = triples.batch(idx)
    keep = (np.arange(s, s + batch_size) < n)[:, None]  # a padded row is all PAD
    nll, w = step(params, *(jnp.asarray(np.where(keep, t, books.PAD)) for t in (prev, cur, nxt)))
    total, words = total + float(nll), words + float(w)
  return total / max(words, 1.0)


def evaluate(model: SkipThoughts, params: Any, vocab: books.Vocab, config,
             corpus: books.Corpus | None = None, senteval_data: Any = None,
             baselines: bool = False) -> dict[str, float]:
  """Held-out NLL (if ``corpus``) and the SentEval metrics of ``config.eval_tasks``
  (on ``senteval_data``, what ``senteval_protocol.load`` read, or the files);
  with ``baselines`` (and ``corpus``, whose training sentences fit TF-IDF's
  idf) also those of the two baseline encoders, prefixed ``embmean_``, ``tfidf_``."""
  out = {}
  if corpus is not None and len(corpus.heldout):
    out["heldout_nll"] = heldout_nll(model, params, corpus.heldout, config.num_heldout,
                                     config.eval_batch_size)
  if not tasks(config):
    return out
  inner = config.eval_inner_folds
  score = functools.partial(
      senteval_protocol.evaluate, tasks=tasks(config), data_dir=config.data_dir,
      n_folds=config.eval_folds, inner_folds=max(inner, 2),
      Cs=senteval_protocol.CS if inner else (1.0,), max_examples=config.eval_max_examples,
      seed=config.seed + 1111, loaded=senteval_data)
  out |= score(skipthoughts.make_encoder(model, params, vocab, batch_size=config.eval_batch_size,
                                         max_len=config.eval_max_len))
  if baselines and corpus is not None:
    # The same folds, classifiers and sentences (the same seed), other vectors.
    encoders = {"embmean": skipthoughts.make_embedding_mean_encoder(
                    params, vocab, max_len=config.eval_max_len),
                # idf from every training sentence, as the model read it (max_len)
                "tfidf": skipthoughts.make_tfidf_encoder(
                    vocab, corpus.train.tokens, max_len=config.eval_max_len)}
    for prefix, encode in encoders.items():
      out |= {f"{prefix}_{k}": v for k, v in score(encode).items()}
  return out


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  validate(config)

  def setup() -> loop.Task:
    corpus = load_corpus(config)
    # Every SentEval file is read now: a wrong data_dir fails before training.
    senteval_data = senteval_protocol.load(tasks(config), config.data_dir)
    keys = ts.named_keys(config.seed, "init", "train")
    model = create_model(config, len(corpus.vocab))
    train = feed(corpus.train, keys["train"], config.batch_size)
    num_steps = config.num_steps or config.num_epochs * train.steps_per_epoch
    return loop.Task(
        state=create_train_state(config, len(corpus.vocab), keys["init"]),
        train_step=functools.partial(train_step, model), feed=train,
        # The baselines do not change along training but for the embeddings:
        # scored once, at the end.
        evaluate=lambda state: evaluate(
            model, state.params, corpus.vocab, config, corpus, senteval_data,
            baselines=config.eval_baselines and int(state.step) >= num_steps),
        num_steps=num_steps,
        steps_per_epoch=train.steps_per_epoch, examples_per_step=config.batch_size,
        show=("train_nll", "heldout_nll") + (("SICK_r",) if "SICK" in tasks(config) else ())
        + (("MR_acc",) if "MR" in tasks(config) else ()))

  return loop.run(config, workdir, setup)
