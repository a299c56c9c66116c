"""Evaluates a skip-thoughts checkpoint on SICK, MR, CR, SUBJ and MPQA.

Usage::

    LNORM_DATA_DIR=../shared/data python -m scripts.eval_skipthoughts --workdir W \
        [--step N] [--tasks SICK,MR,CR,SUBJ,MPQA] [--folds 10] [--inner_folds 5] \
        [--max_examples 0]

Reads the run's config.json, rebuilds its vocabulary from the same training
text, restores the checkpoint at ``--step`` (default: the newest) and runs
lnorm/senteval_protocol.py with SentEval's full protocol by default (10 folds, C chosen
by 5 inner folds, every sentence). Prints the metrics and writes them to
``W/eval/step_<N>.json``. Mistakes are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import ml_collections
import orbax.checkpoint as ocp

from configs import skipthoughts as skip_config
from experiments import skipthoughts as exp
from experiments.runner import workdir as wdir
from experiments.runner.errors import UserError
from lnorm import senteval_protocol
from lnorm.data import DataError


def load_config(wd: Path) -> ml_collections.ConfigDict:
  path = wd / "config.json"
  if not path.is_file():
    raise UserError(f"{path} not found: is {wd} a skip-thoughts workdir?")
  try:
    saved = json.loads(path.read_text())["config"]
    config = skip_config.get_config("paper")  # fields a run's config may predate
    config.update(saved)
  except (ValueError, KeyError, TypeError) as e:
    raise UserError(f"{path} is damaged ({e})") from None
  if config.get("experiment") != "skipthoughts":
    raise UserError(f"{wd} is a {config.get('experiment')!r} run, not skipthoughts")
  return config


def restore(wd: Path, config, vocab_size: int, step: int | None):
  mngr = wdir.checkpoint_manager(wd)
  try:
    steps = sorted(mngr.all_steps())
    if not steps:
      raise UserError(f"{wd / 'checkpoints'} has no checkpoint")
    step = steps[-1] if step is None else step
    if step not in steps:
      raise UserError(f"no checkpoint at step {step}; there are: "
                      f"{', '.join(map(str, steps))}")
    fresh = exp.create_train_state(config, vocab_size, jax.random.key(0))
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, fresh)
    return mngr.restore(step, args=ocp.args.StandardRestore(abstract)), step
  finally:
    mngr.close()


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--step", type=int, default=None)
  p.add_argument("--tasks", default=",".join(senteval_protocol.TASKS))
  p.add_argument("--folds", type=int, default=10)
  p.add_argument("--inner_folds", type=int, default=5, help="0 = C = 1, no selection")
  p.add_argument("--max_examples", type=int, default=0, help="0 = every sentence")
  a = p.parse_args(argv)
  wd = Path(a.workdir)
  try:
    config = load_config(wd)
    with config.unlocked():
      config.eval_tasks, config.eval_folds = a.tasks, a.folds
      config.eval_inner_folds, config.eval_max_examples = a.inner_folds, a.max_examples
    exp.validate(config)
    corpus = exp.load_corpus(config)
    state, step = restore(wd, config, len(corpus.vocab), a.step)
    model = exp.create_model(config, len(corpus.vocab))
    t0 = time.perf_counter()
    metrics = exp.evaluate(model, state.params, corpus.vocab, config, corpus)
    metrics["eval_seconds"] = time.perf_counter() - t0
  except (UserError, DataError, ValueError) as e:
    print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    return 2
  record = {"step": step, "norm": config.norm, "tasks": a.tasks, "folds": a.folds,
            "inner_folds": a.inner_folds, "max_examples": a.max_examples, **metrics}
  out = wd / "eval" / f"step_{step}.json"
  out.parent.mkdir(exist_ok=True)
  wdir.write_atomic(out, json.dumps(record, indent=1) + "\n")
  for k, v in record.items():
    print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
  print(f"wrote {out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
