"""Question answering with the attentive reader (section 6.2, Figure 2):
validation error against updates for LSTM, BN-LSTM, BN-everywhere and LN-LSTM.

Data: ``<data_dir>/<questions_dir>/cnn/questions/{training,validation,test}/*.question``
(DeepMind's CNN corpus with questions_dir '', or a stand-in that
``scripts/make_cloze.py --standin <questions_dir>`` builds), read by
``lnorm.data.cnn_questions``. Every split lives on the device as padded
arrays; the vocabulary comes from the training split. Each evaluation
records the error and NLL on the validation and the test split, so that the
test error of the best validation checkpoint is the test error recorded at
the step of the lowest ``valid_error`` (``best_valid_test_error``).
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax.training import train_state

from experiments.runner import loop
from experiments.runner import train_state as ts
from experiments.runner.errors import at_least, check, check_common, off_or_more, positive
from lnorm import norms, reader
from lnorm.data import DataError, resolve_data_dir
from lnorm.data import cloze
from lnorm.data import cnn_questions as cq

INPUTS = ("passage", "passage_mask", "query", "query_mask", "candidates")
EVAL_SPLITS = {"valid": "validation", "test": "test"}
# Static lengths (passage, query) that a batch's texts are cut to; () = uncut.
Buckets = tuple[tuple[int, ...], tuple[int, ...]]


class TrainState(train_state.TrainState):
  batch_stats: Any = None


def validate(config: ml_collections.ConfigDict) -> None:
  check_common(config, reader.accept)
  check(not config.bn_everywhere or norms.get(config.norm).running_stats,
        "bn_everywhere=True needs norm='batch'")
  at_least(config, 1, "features", "embed", "attention", "eval_batch_size")
  at_least(config, 0, "num_train", "num_eval", "max_passage_tokens", "passage_sentences",
           "vocab_size", "min_count", "sort_batches", "length_buckets")
  positive(config, "ln_gain_init", "bn_gain_init")
  off_or_more(config, "grad_clip_norm")


def questions_root(config) -> Path:
  """The folder holding cnn/questions/. A record from before questions_dir
  existed has the stand-in's folder as its data_dir."""
  return resolve_data_dir(config.data_dir) / config.get("questions_dir", "")


def _questions(config, split: str, limit: int) -> tuple[list[cq.Question], int]:
  """A split's questions after truncation and the length cap, and how many
  were dropped."""
  root = questions_root(config)
  if config.get("questions_dir") in cloze.STANDINS and not cq.split_dir(root, split).is_dir():
    text = resolve_data_dir(config.data_dir) / "text"
    raise DataError(f"{cq.split_dir(root, split)} not found: build the stand-in into a "
                    "folder you can write, DIR, with `LNORM_DATA_DIR=DIR python "
                    f"scripts/make_cloze.py --standin {config.questions_dir} --text_dir "
                    f"{text}`, then point --config.data_dir=DIR (or $LNORM_DATA_DIR) at it")
  qs = cq.load_split(root, split, limit)
  kept = [t for q in qs if (t := cq.truncate_passage(q, config.passage_sentences)) is not None]
  if config.max_passage_tokens:
    kept = [q for q in kept if len(q.passage) <= config.max_passage_tokens]
  return kept, len(qs) - len(kept)


def load_data(config) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
  """{split: arrays} for train/valid/test, padded to common lengths (the
  evaluation splits ordered by length, so that their chunks can be cut short),
  and the model's sizes (vocab_size, num_entities, passage_steps, query_steps)
  with, for permute_entities, each entity's token id (entity_tokens)."""
  qs, dropped = {}, {}
  qs["train"], dropped["train"] = _questions(config, "training", config.num_train)
  for k, split in EVAL_SPLITS.items():
    qs[k], dropped[k] = _questions(config, split, config.num_eval)
  for k, v in qs.items():
    if not v:
      raise DataError(f"no {k} questions left after passage_sentences="
                      f"{config.passage_sentences} and max_passage_tokens="
                      f"{config.max_passage_tokens}")
  vocab = cq.build_vocab(qs["train"], config.min_count, config.vocab_size)
  entities = max(cq.num_entities(v) for v in qs.values())
  Tp = max(len(q.passage) for v in qs.values() for q in v)
  Tq = max(len(q.query) for v in qs.values() for q in v)
  for k in EVAL_SPLITS:
    qs[k] = eval_order(qs[k])
  arrays = {k: cq.to_arrays(v, vocab, entities, Tp, Tq) for k, v in qs.items()}
  print("questions: " + ", ".join(f"{k} {len(v)} ({dropped[k]} dropped)"
                                  for k, v in qs.items())
        + f" | vocabulary {len(vocab)}, entities {entities}, passage <= {Tp} tokens, "
        f"query <= {Tq}", flush=True)
  check(len(qs["train"]) >= config.batch_size,
        f"batch_size={config.batch_size} is larger than the {len(qs['train'])} "
        "training questions")
  return arrays, {"vocab_size": len(vocab), "num_entities": entities,
                  "passage_steps": Tp, "query_steps": Tq,
                  "entity_tokens": cq.entity_tokens(vocab, entities)
                  if config.permute_entities else None}


def eval_questions(config, split: str) -> list[cq.Question]:
  """An evaluation split's questions in the order of load_data's arrays."""
  return eval_order(_questions(config, EVAL_SPLITS[split], config.num_eval)[0])


def eval_order(questions: list[cq.Question]) -> list[cq.Question]:
  """By length (passage + query), so that an evaluation chunk's padding can be
  cut short; metrics are sums over the split, so the order is free."""
  return sorted(questions, key=lambda q: len(q.passage) + len(q.query))


def create_model(config, vocab_size: int, num_entities: int, passage_steps: int | None = None,
                 query_steps: int | None = None) -> reader.AttentiveReader:
  return reader.AttentiveReader(
      vocab_size=vocab_size, num_entities=num_entities, features=config.features,
      embed=config.embed, attention=config.attention, norm=config.norm,
      bn_everywhere=config.bn_everywhere, bn_gain_init=config.bn_gain_init,
      ln_gain_init=config.ln_gain_init, eps=config.eps, passage_steps=passage_steps,
      query_steps=query_steps)


def bucket_lengths(T: int, n: int) -> tuple[int, ...]:
  """The ``n`` lengths up to ``T`` that texts padded to ``T`` are cut to: the
  i-th is i T / n rounded up to a multiple of 8 (at most T); () for n <= 1."""
  if n <= 1:
    return ()
  return tuple(sorted({min(T, 8 * -(-i * T // (8 * n))) for i in range(1, n + 1)}))


def _extent(mask_BxT: jax.Array) -> jax.Array:
  """One past the last real token of any row."""
  return jnp.max(jnp.where(mask_BxT, jnp.arange(1, mask_BxT.shape[-1] + 1), 0))


def by_length(fn: Callable[[dict], Any], batch: dict[str, jax.Array], buckets: Buckets) -> Any:
  """``fn(batch)`` with the passages and queries cut to the shortest of
  ``buckets``' lengths that keep every real token: the LSTMs then scan only
  as far as the batch's longest text. One ``lax.switch`` branch per pair of
  lengths (each compiled, one run). Exact: the cut columns are padding, which
  the model masks; a BN-LSTM's statistics of a step past every text's end
  are not updated."""
  if not buckets[0] or not buckets[1]:
    return fn(batch)
  lp, lq = buckets
  ip = jnp.searchsorted(jnp.asarray(lp), _extent(batch["passage_mask"]))
  iq = jnp.searchsorted(jnp.asarray(lq), _extent(batch["query_mask"]))

  def cut(Tp: int, Tq: int, b: dict[str, jax.Array]) -> Any:
    b = dict(b)
    for k, T in (("passage", Tp), ("passage_mask", Tp), ("query", Tq), ("query_mask", Tq)):
      b[k] = b[k][:, :T]
    return fn(b)

  branches = [functools.partial(cut, Tp, Tq) for Tp in lp for Tq in lq]
  return jax.lax.switch(ip * len(lq) + iq, branches, batch)



def create_train_state(config, model: reader.AttentiveReader, example: dict[str, np.ndarray],
                       rng: jax.Array) -> TrainState:
  inputs = tuple(jnp.asarray(example[k][:2]) for k in INPUTS)
  variables = jax.jit(functools.partial(reader.init, model))(rng, inputs)
  return TrainState.create(apply_fn=model.apply, params=variables["params"],
                           batch_stats=variables.get("batch_stats", {}),
                           tx=ts.adam(config.learning_rate, config.grad_clip_norm))


def permute_entities(batch: dict[str, jax.Array], key: jax.Array, ent_tok_E: jax.Array
                     ) -> dict[str, jax.Array]:
  """The batch with each question's entities renumbered by its own random
  permutation: entity n becomes perm[n] in the passage, query, candidates
  and answer. Since the numbering carries no meaning, a model cannot then
  learn a training question's answer by its number, only by reading."""
  B, E = batch["candidates"].shape
  perm_BxE = jax.vmap(lambda k: jax.random.permutation(k, E))(jax.random.split(key, B))
  out = dict(batch)
  for k in ("passage", "query"):
    t_BxT = batch[k]
    hit_BxTxE = t_BxT[..., None] == ent_tok_E[None, None]
    is_ent, n_BxT = jnp.any(hit_BxTxE, -1), jnp.argmax(hit_BxTxE, -1)
    new_n = jnp.take_along_axis(perm_BxE, n_BxT, -1)
    out[k] = jnp.where(is_ent, ent_tok_E[new_n], t_BxT)
  out["candidates"] = jax.vmap(lambda c, p: jnp.zeros_like(c).at[p].set(c))(
      batch["candidates"], perm_BxE)
  out["answer"] = jnp.take_along_axis(perm_BxE, batch["answer"][:, None], -1)[:, 0]
  return out


def train_step(state: TrainState, batch: dict[str, jax.Array],
               permute: tuple[jax.Array, jax.Array] | None = None,
               buckets: Buckets = ((), ())) -> tuple[TrainState, dict[str, jax.Array]]:
  """One Adam step on the mean cross-entropy; BN uses this batch's statistics.
  ``permute``: (key, entity_tokens) to renumber the entities first, with a
  key folded with the step (so a resumed run draws the same). ``buckets``:
  the lengths the texts may be cut to (:func:`by_length`)."""
  B = batch["answer"].shape[0]
  if permute is not None:
    key, ent_tok_E = permute
    batch = permute_entities(batch, jax.random.fold_in(key, state.step), ent_tok_E)

  def loss_fn(params, b):
    logits, upd = state.apply_fn({"params": params, "batch_stats": state.batch_stats},
                                 *(b[k] for k in INPUTS), train=True,
                                 mutable=["batch_stats"])
    nll, err = reader.loss_and_error(logits, b["answer"])
    return nll / B, (err / B, upd.get("batch_stats", {}))

  grad_fn = lambda b: jax.value_and_grad(loss_fn, has_aux=True)(state.params, b)
  (loss, (err, stats)), grads = by_length(grad_fn, batch, buckets)
  state = state.apply_gradients(grads=grads).replace(batch_stats=stats)
  return state, {"nll": loss, "error": err}


def eval_step(state: TrainState, batch: dict[str, jax.Array], w_B: jax.Array) -> jax.Array:
  """[summed NLL, summed errors] over a chunk, weighted by ``w``; BN uses its
  running averages."""
  logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats},
                          *(batch[k] for k in INPUTS), train=False)
  return jnp.stack(reader.loss_and_error(logits, batch["answer"], w_B))


@functools.partial(jax.jit, static_argnames=("chunk", "buckets"))
def evaluate(state: TrainState, data: dict[str, jax.Array], chunk: int,
             buckets: Buckets = ((), ())) -> dict[str, jax.Array]:
  """Mean NLL and error over a whole split, in chunks (the last padded with
  zero-weight questions), each cut to ``buckets``' lengths."""
  n = data["answer"].shape[0]
  chunks, w = ts.padded_chunks(data, n, chunk)
  sums = jnp.sum(jax.lax.map(
      lambda b: by_length(lambda c: eval_step(state, c, b[1]), b[0], buckets), (chunks, w)), 0)
  return {"nll": sums[0] / n, "error": sums[1] / n}


def feed(data: dict[str, jax.Array], train_key: jax.Array, batch_size: int,
         sort_batches: int = 0) -> loop.EpochShuffle:
  """Shuffled batches; with ``sort_batches`` > 1, of questions of similar
  length (passage + query tokens), sorted within runs of that many batches."""
  lengths = (np.asarray(data["passage_mask"]).sum(1) + np.asarray(data["query_mask"]).sum(1)
             if sort_batches > 1 else None)
  return loop.EpochShuffle(
      data=data, num_examples=int(data["answer"].shape[0]), batch_size=batch_size,
      shuffle_key=lambda epoch: jax.random.fold_in(train_key, epoch),
      batch=lambda d, xs: jax.tree.map(lambda a: a[xs["idx"]], d),
      lengths=lengths, sort_batches=sort_batches)


def make_train_step(config: ml_collections.ConfigDict, sizes: dict[str, Any],
                    train_key: jax.Array) -> tuple[Callable, Buckets]:
  """The run's ``train_step`` (length buckets, entity renumbering bound) and its
  buckets, from ``load_data``'s sizes."""
  buckets = (bucket_lengths(sizes["passage_steps"], config.length_buckets),
             bucket_lengths(sizes["query_steps"], config.length_buckets))
  step = functools.partial(train_step, buckets=buckets)
  if sizes.get("entity_tokens") is not None:
    # The shuffles fold in epoch numbers, which never reach this one.
    perm_key = jax.random.fold_in(train_key, np.iinfo(np.uint32).max)
    step = functools.partial(step, permute=(perm_key, jnp.asarray(sizes["entity_tokens"])))
  return step, buckets


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  validate(config)

  def setup() -> loop.Task:
    arrays, sizes = load_data(config)
    keys = ts.named_keys(config.seed, "init", "train")
    init_key, train_key = keys["init"], keys["train"]
    model = create_model(config, **{k: v for k, v in sizes.items() if k != "entity_tokens"})
    step, buckets = make_train_step(config, sizes, train_key)
    data = {k: {n: jnp.asarray(a) for n, a in v.items()} for k, v in arrays.items()}
    train = feed(data["train"], train_key, config.batch_size, config.sort_batches)

    def evaluate_splits(state: TrainState) -> dict[str, float]:
      out = {}
      for k in EVAL_SPLITS:
        n = int(data[k]["answer"].shape[0])
        m = evaluate(state, data[k], min(config.eval_batch_size, n), buckets)
        out |= {f"{k}_{name}": float(v) for name, v in m.items()}
      return out

    return loop.Task(
        state=create_train_state(config, model, arrays["train"], init_key),
        train_step=step, feed=train, evaluate=evaluate_splits,
        num_steps=config.num_epochs * train.steps_per_epoch,
        steps_per_epoch=train.steps_per_epoch, examples_per_step=config.batch_size,
        show=("train_nll", "valid_error", "test_error"))

  return loop.run(config, workdir, setup)


def frequency_errors(config: ml_collections.ConfigDict) -> dict[str, float]:
  """Hermann et al.'s two word-count baselines on the questions the runs use:
  the error of answering the passage's most frequent entity, and of the most
  frequent one that is not in the query (``{split}_{maxfreq|exclusive}``)."""
  out = {}
  for k, split in EVAL_SPLITS.items():
    qs, _ = _questions(config, split, config.num_eval)
    for name, exclusive in (("maxfreq", False), ("exclusive", True)):
      out[f"{k}_{name}"] = sum(frequency_answer(q, exclusive) != q.answer for q in qs) / len(qs)
  return out


def frequency_answer(q: cq.Question, exclusive: bool) -> str | None:
  """The passage's most frequent entity (the first seen on ties), leaving out
  those in the query if ``exclusive``; None if no entity is left."""
  skip = set(q.query) if exclusive else set()
  counts = collections.Counter(t for t in q.passage
                               if cq.entity_id(t) is not None and t not in skip)
  return counts.most_common(1)[0][0] if counts else None


def best_valid(records: list[dict]) -> dict | None:
  """The record with the lowest valid_error (the earliest on ties): its step,
  and the test error of that checkpoint."""
  rs = [r for r in records if "valid_error" in r and np.isfinite(r["valid_error"])]
  return min(rs, key=lambda r: (r["valid_error"], r["step"])) if rs else None
