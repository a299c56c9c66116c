"""What a trained attentive reader attends to, and which questions it gets right.

Usage::

    python -m scripts.reader_attention --workdir W [--split valid] [--examples 6] [--out DIR]

Reads the run's config.json, rebuilds its questions and vocabulary from the
same files (``--data_dir`` where they moved), restores the newest checkpoint
and answers every question of the split, keeping the attention weights s_t
over the passage that the model sows (lnorm/reader.py). Writes
``<out>/attention.md`` and ``attention.json`` (``<out>``: ``W/attention``):

* the reader's accuracy beside Hermann et al.'s exclusive-frequency baseline
  (the passage's most frequent entity not in the query), and their overlap:
  how many questions each gets right that the other gets wrong;
* the reader's accuracy by the answer's frequency rank among the passage's
  non-query entities (1 = the baseline's answer);
* how the attention falls: its mass on the tokens of the answer's mentions
  and on all entity tokens, each against the share of the passage those
  tokens are (the mass a uniform attention would give), for questions it
  answers right and wrong, and the share whose most-attended token is a
  mention of the answer;
* ``--examples`` questions it gets right, the passage's most-attended tokens
  marked.

Mistakes (no config.json, no checkpoint, a missing question file) are one
line and exit status 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from configs import reader as reader_config
from experiments import reader as exp
from experiments.runner import workdir as wdir
from experiments.runner.errors import UserError
from lnorm.data import DataError
from lnorm.data import cnn_questions as cq


def load_config(wd: Path, data_dir: str | None) -> ml_collections.ConfigDict:
  path = wd / "config.json"
  if not path.is_file():
    raise UserError(f"{path} not found: is {wd} a reader workdir?")
  try:
    config = reader_config.get_config("paper")  # fields a run's config may predate
    config.update(json.loads(path.read_text())["config"])
  except (ValueError, KeyError, TypeError) as e:
    raise UserError(f"{path} is damaged ({e})") from None
  if config.get("experiment") != "reader":
    raise UserError(f"{wd} is a {config.get('experiment')!r} run, not the reader")
  if data_dir is not None:
    config.data_dir = data_dir
  return config


def restore(wd: Path, state: Any) -> tuple[Any, int]:
  """The newest checkpoint, read only (nothing in the workdir moves)."""
  mngr = wdir.checkpoint_manager(wd)
  try:
    steps = sorted(mngr.all_steps())
    if not steps:
      raise UserError(f"{wd / 'checkpoints'} has no checkpoint")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    return mngr.restore(steps[-1], args=ocp.args.StandardRestore(abstract)), steps[-1]
  finally:
    mngr.close()


def answer_all(state: Any, data: dict[str, np.ndarray], chunk: int
               ) -> tuple[np.ndarray, np.ndarray]:
  """(predicted entity (N,), attention (N, Tp)) over a split, in chunks."""
  @jax.jit
  def fwd(b):
    logits, inter = state.apply_fn(
        {"params": state.params, "batch_stats": state.batch_stats},
        *(b[k] for k in exp.INPUTS), train=False, mutable=["intermediates"])
    return jnp.argmax(logits, -1), inter["intermediates"]["attention"][0]

  n = len(data["answer"])
  preds, atts = [], []
  for s in range(0, n, chunk):
    idx = np.arange(s, s + chunk) % n  # the last chunk wraps; its extra rows are dropped
    p, a = fwd({k: jnp.asarray(v[idx]) for k, v in data.items()})
    keep = min(chunk, n - s)
    preds.append(np.asarray(p)[:keep])
    atts.append(np.asarray(a)[:keep])
  return np.concatenate(preds), np.concatenate(atts)


def frequency_rank(q: cq.Question) -> int | None:
  """The answer's rank (1 = most frequent, first seen on ties, as
  experiments.reader.frequency_answer) among the passage's entities not in
  the query; None if the answer is in the query too."""
  skip = set(q.query)
  counts = collections.Counter(t for t in q.passage
                               if cq.entity_id(t) is not None and t not in skip)
  ranked = [e for e, _ in counts.most_common()]
  return ranked.index(q.answer) + 1 if q.answer in ranked else None


def analyse(questions: list[cq.Question], pred_N: np.ndarray, att_NxT: np.ndarray
            ) -> dict[str, Any]:
  """The numbers of attention.md (module doc)."""
  right = np.array([f"@entity{p}" == q.answer for p, q in zip(pred_N, questions)])
  base = np.array([exp.frequency_answer(q, exclusive=True) == q.answer for q in questions])
  rows = []
  for q, row_T, ok in zip(questions, att_NxT, right):
    T = len(q.passage)
    a_T = row_T[:T]
    ans = np.array([t == q.answer for t in q.passage])
    ent = np.array([cq.entity_id(t) is not None for t in q.passage])
    rows.append({"right": bool(ok), "answer_mass": float(a_T[ans].sum()),
                 "answer_share": float(ans.mean()), "entity_mass": float(a_T[ent].sum()),
                 "entity_share": float(ent.mean()), "top_is_answer": bool(ans[np.argmax(a_T)]),
                 "mass_outside_passage": float(row_T[T:].sum())})
  ranks = [frequency_rank(q) for q in questions]
  by_rank = {}
  for key, sel in (("1", [r == 1 for r in ranks]), ("2", [r == 2 for r in ranks]),
                   ("3 or more", [r is not None and r >= 3 for r in ranks]),
                   ("answer also in the query", [r is None for r in ranks])):
    sel = np.array(sel)
    by_rank[key] = {"questions": int(sel.sum()),
                    "reader_accuracy": float(right[sel].mean()) if sel.any() else None}

  def mean(key, which):
    v = [r[key] for r in rows if which is None or r["right"] == which]
    return float(np.mean(v)) if v else None

  attention = {w: {k: mean(k, sel) for k in ("answer_mass", "answer_share", "entity_mass",
                                               "entity_share", "top_is_answer")}
               for w, sel in (("right", True), ("wrong", False), ("all", None))}
  return {"questions": len(questions), "reader_accuracy": float(right.mean()),
          "baseline_accuracy": float(base.mean()),
          "both_right": int((right & base).sum()), "reader_only": int((right & ~base).sum()),
          "baseline_only": int((~right & base).sum()), "neither": int((~right & ~base).sum()),
          "by_frequency_rank": by_rank, "attention": attention,
          "max_mass_outside_passage": max(r["mass_outside_passage"] for r in rows)}


def marked(q: cq.Question, a_T: np.ndarray, k: int = 5) -> str:
  """The passage with its ``k`` most-attended tokens in bold, their weight beside."""
  T = len(q.passage)
  top = set(np.argsort(-a_T[:T])[:k].tolist())
  return " ".join(f"**{t}**({a_T[i]:.2f})" if i in top else t for i, t in enumerate(q.passage))


def report(wd: Path, config, step: int, split: str, m: dict[str, Any],
           examples: list[tuple[cq.Question, np.ndarray, str]]) -> str:
  pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"
  n = m["questions"]
  lines = [
      f"# What the reader attends to: `{wd.name}`, {split} split, checkpoint {step}", "",
      # The run's name, not its path: no machine's path in a committed report.
      f"Written by `python -m scripts.reader_attention --workdir .../{wd.name}`. Run: "
      f"norm={config.norm},"
      f" questions_dir={config.questions_dir!r}, seed {config.seed}. {n} questions.", "",
      "| | right | of the split |", "|---|---:|---:|",
      f"| reader | {round(m['reader_accuracy'] * n)} | {pct(m['reader_accuracy'])} |",
      f"| exclusive-frequency baseline | {round(m['baseline_accuracy'] * n)} | "
      f"{pct(m['baseline_accuracy'])} |",
      f"| both | {m['both_right']} | {pct(m['both_right'] / n)} |",
      f"| reader only | {m['reader_only']} | {pct(m['reader_only'] / n)} |",
      f"| baseline only | {m['baseline_only']} | {pct(m['baseline_only'] / n)} |", "",
      "The reader's accuracy by the answer's frequency rank among the passage's entities "
      "that are not in the query (rank 1 is the baseline's answer):", "",
      "| answer's rank | questions | reader right |", "|---|---:|---:|"]
  for k, v in m["by_frequency_rank"].items():
    lines.append(f"| {k} | {v['questions']} | {pct(v['reader_accuracy'])} |")
  lines += ["", "Where the attention falls (means over questions; *share* is the fraction of "
            "the passage's tokens, what a uniform attention would put there):", "",
            "| questions | mass on the answer's mentions | their share | mass on entity tokens "
            "| their share | top token is the answer |", "|---|---:|---:|---:|---:|---:|"]
  for w, a in m["attention"].items():
    lines.append(f"| {w} | {pct(a['answer_mass'])} | {pct(a['answer_share'])} | "
                 f"{pct(a['entity_mass'])} | {pct(a['entity_share'])} | "
                 f"{pct(a['top_is_answer'])} |")
  lines += ["", "Questions it gets right (the 5 most-attended tokens in bold, "
            "with their weight):", ""]
  for q, a_T, pred in examples:
    lines += [f"- **query**: {' '.join(q.query)}  \n  **answer** {q.answer}, reader {pred}, "
              f"baseline {exp.frequency_answer(q, exclusive=True)}  \n  {marked(q, a_T)}"]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--split", default="valid", choices=sorted(exp.EVAL_SPLITS))
  p.add_argument("--examples", type=int, default=6, help="right answers to show")
  p.add_argument("--data_dir", default=None, help="where the questions are now, if moved")
  p.add_argument("--out", default=None, help="default: <workdir>/attention")
  a = p.parse_args(argv)
  wd = Path(a.workdir)
  try:
    config = load_config(wd, a.data_dir)
    arrays, sizes = exp.load_data(config)
    questions = exp.eval_questions(config, a.split)
    model = exp.create_model(config, **{k: v for k, v in sizes.items() if k != "entity_tokens"})
    state = exp.create_train_state(config, model, arrays["train"], jax.random.key(0))
    state, step = restore(wd, state)
    pred_N, att_NxT = answer_all(state, arrays[a.split], config.eval_batch_size)
  except (UserError, DataError, ValueError) as e:
    print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    return 2
  if len(questions) != len(pred_N):
    raise AssertionError("questions and arrays disagree")  # load_data's order changed
  m = analyse(questions, pred_N, att_NxT)
  right = [i for i, (p_, q) in enumerate(zip(pred_N, questions)) if f"@entity{p_}" == q.answer]
  pick = np.random.default_rng(0).permutation(right)[:a.examples] if right else []
  examples = [(questions[i], att_NxT[i], f"@entity{pred_N[i]}") for i in sorted(pick)]
  out = Path(a.out) if a.out else wd / "attention"
  out.mkdir(parents=True, exist_ok=True)
  wdir.write_atomic(out / "attention.json",
                    json.dumps({"step": step, "split": a.split, **m}, indent=1) + "\n")
  wdir.write_atomic(out / "attention.md", report(wd, config, step, a.split, m, examples))
  print(f"reader {m['reader_accuracy']:.3f}, baseline {m['baseline_accuracy']:.3f} right; "
        f"wrote {out / 'attention.md'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
