r"""Probe behind results/reader_probe/ (issue 17): can the attentive reader
(lnorm/reader.py, trained by experiments/reader.train_step) learn synthetic
questions whose answer a reader must find, and how soon does each norm do it?

On the cloze stand-in no variant beats the word-count baselines
(results/fig2_cpu/), and with entities renumbered every update its training
loss stays at chance for thousands of updates (results/reader_trials/). These
tasks ask whether that is the model or the data. Each passage is T filler tokens holding m entities at
random places, each entity right after a cue token; the query is
``<q> <cue> @placeholder`` and the answer is the entity after that cue:

  marker     one cue (m = 4: three entities after no cue): the answer is
             found by position alone; the query carries nothing
  lookup2    two cues, one entity after each, filler a single repeated token
  lookup4    four cues, filler drawn from 50 words

Entities are renumbered afresh every update (permute_entities), as in the
trial, so no answer can be learned by its number. Each run trains until the
validation error is at most --solved (then stops) or --steps updates, and
reports the first update at which it was.

  python -m scripts.probe_reader [--steps 6000] [--seeds 2] [--tasks ...]
      [--norms ...] [--results_dir DIR]

With --results_dir it writes DIR/results.md and DIR/curves.json beside the
commit and the command. Runtime: 2-4 minutes a run that is not solved in
6,000 updates, on one core of the 2-core CPU with a training job on the other
(64 units, batch 64, T = 40); the defaults took 40 minutes that way.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

if __package__ in (None, ""):  # Run as `python scripts/probe_reader.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import reader as ex  # pylint: disable=wrong-import-position
from experiments import workdir as wdir  # pylint: disable=wrong-import-position
from experiments.errors import UserError  # pylint: disable=wrong-import-position
from lnorm import reader  # pylint: disable=wrong-import-position

T, NUM_ENTITIES, NUM_WORDS = 40, 10, 160   # passage length, entity ids, word ids
FILLER = range(100, 150)
# Token ids: 0 pad, 1 the query's first token, 2.. cues, 100-149 filler,
# NUM_WORDS + n entity n, then the placeholder.
ENT_TOK = np.arange(NUM_WORDS, NUM_WORDS + NUM_ENTITIES)
PLACEHOLDER = NUM_WORDS + NUM_ENTITIES
TASKS = {  # name: (cues, entities a passage, filler words)
    "marker": (1, 4, 50),
    "lookup2": (2, 2, 1),
    "lookup4": (4, 4, 50),
}
VARIANTS = {  # name: (norm, ln_gain_init)
    "none": ("none", 1.0), "layer": ("layer", 1.0), "batch": ("batch", 1.0),
    "layer_gain0.1": ("layer", 0.1),
}


def make_task(task: str, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
  """n questions of ``task`` as the arrays experiments/reader trains on."""
  cues, m, filler = TASKS[task]
  P = rng.choice(np.asarray(FILLER)[:filler], (n, T))
  Q = np.zeros((n, 3), np.int32)
  A = np.zeros(n, np.int32)
  C = np.zeros((n, NUM_ENTITIES), bool)
  for i in range(n):
    ents = rng.choice(NUM_ENTITIES, m, replace=False)
    slots = rng.choice(T // 3, m, replace=False) * 3
    for k, (e, s) in enumerate(zip(ents, slots)):
      if k < cues:
        P[i, s + 1] = 2 + k
      P[i, s + 2] = ENT_TOK[e]
    C[i, ents] = True
    j = rng.integers(cues)
    Q[i] = (1, 2 + j, PLACEHOLDER)
    A[i] = ents[j]
  return dict(passage=P.astype(np.int32), passage_mask=np.ones((n, T), bool), query=Q,
              query_mask=np.ones((n, 3), bool), candidates=C, answer=A)


def run(task: str, variant: str, seed: int, steps: int, solved: float, every: int,
        lr: float = 1e-3, batch: int = 64, units: int = 64) -> dict:
  """Trains one variant on one task; its validation curve and first solved step."""
  rng = np.random.default_rng(seed)
  train, valid = make_task(task, 20_000, rng), make_task(task, 1_000, rng)
  norm, gain = VARIANTS[variant]
  model = reader.AttentiveReader(vocab_size=PLACEHOLDER + 1, num_entities=NUM_ENTITIES,
                                 features=units, embed=units, attention=units, norm=norm,
                                 ln_gain_init=gain)
  config = ml_collections.ConfigDict({"learning_rate": lr, "grad_clip_norm": 10.0})
  init_key, perm_key, data_key = jax.random.split(jax.random.key(seed), 3)
  state = ex.create_train_state(config, model, train, init_key)
  step = jax.jit(functools.partial(ex.train_step, permute=(perm_key, jnp.asarray(ENT_TOK))),
                 donate_argnums=0)
  train = {k: jnp.asarray(v) for k, v in train.items()}
  valid = {k: jnp.asarray(v) for k, v in valid.items()}
  curve, first, t0 = [], None, time.perf_counter()
  for s in range(1, steps + 1):
    idx = jax.random.randint(jax.random.fold_in(data_key, s), (batch,), 0, 20_000)
    state, _ = step(state, {k: v[idx] for k, v in train.items()})
    if s % every == 0:
      err = float(ex.evaluate(state, valid, 250)["error"])
      curve.append((s, err))
      if err <= solved:
        first = s
        break
  return {"task": task, "variant": variant, "seed": seed, "solved_at": first,
          "curve": curve, "seconds": time.perf_counter() - t0}


def table(runs: list[dict], steps: int, solved: float) -> str:
  tasks = list(dict.fromkeys(r["task"] for r in runs))
  variants = list(dict.fromkeys(r["variant"] for r in runs))
  cell = lambda rs: " / ".join(str(r["solved_at"]) if r["solved_at"] else f"> {steps}"
                               for r in rs)
  lines = [f"| variant | {' | '.join(tasks)} |", "|---" * (len(tasks) + 1) + "|"]
  for v in variants:
    lines.append(f"| {v} | " + " | ".join(
        cell([r for r in runs if r["task"] == t and r["variant"] == v]) for t in tasks) + " |")
  return (f"Updates until the validation error is at most {solved} (each seed in turn; "
          f"'> {steps}': not within the {steps} updates run):\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--steps", type=int, default=6000)
  p.add_argument("--seeds", type=int, default=2)
  p.add_argument("--every", type=int, default=100, help="updates between evaluations")
  p.add_argument("--solved", type=float, default=0.05, help="validation error that counts as solved")
  p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
  p.add_argument("--norms", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
  p.add_argument("--results_dir", type=Path, default=None)
  a = p.parse_args(argv)
  if a.steps < a.every or a.seeds < 1:
    p.error("--steps must be at least --every, and --seeds at least 1")
  if a.results_dir:  # before the runs, not after 40 minutes of them
    try:
      a.results_dir.mkdir(parents=True, exist_ok=True)
      e = wdir.writable(a.results_dir)
      if e is not None:
        raise e
    except OSError as e:
      print(f"error: cannot write {a.results_dir}: {e.strerror or e}; choose a writable "
            "--results_dir", file=sys.stderr)
      return 2
  runs = []
  for task in a.tasks:
    for v in a.norms:
      for seed in range(a.seeds):
        r = run(task, v, seed, a.steps, a.solved, a.every)
        runs.append(r)
        print(f"{task:8s} {v:14s} seed {seed}: solved at {r['solved_at']} "
              f"(final valid error {r['curve'][-1][1]:.3f}, {r['seconds']:.0f}s)", flush=True)
  report = table(runs, a.steps, a.solved)
  print(report)
  if a.results_dir:
    command = "python -m scripts.probe_reader " + " ".join(argv if argv is not None else sys.argv[1:])
    commit = wdir.git_commit()
    try:
      wdir.write_atomic(a.results_dir / "curves.json", json.dumps(
          {"git_commit": commit, "versions": wdir.versions(), "command": command,
           "runs": runs}, indent=1))
      wdir.write_atomic(a.results_dir / "results.md",
          "# Attentive reader on synthetic lookup questions (probe, issue 17)\n\n"
          f"Command: `{command}`  \nCommit: {commit}\n\n"
          "**Synthetic questions, not reading comprehension**: they test whether the "
          "reader's attention can learn to find a cued answer, and how soon each norm "
          "lets it (scripts/probe_reader.py says how they are made).\n\n" + report)
    except UserError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
