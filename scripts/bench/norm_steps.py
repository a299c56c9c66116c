"""Times every norm's training step in each task of the norms study (issue
62), against layer norm's: the study's "step time / LN's" column.

Usage::

    python -m scripts.bench.norm_steps [--preset cpu] [--tasks a,b] [--norms x,y]
        [--repeats 5] [--sample_s 0.5] [--steps 4] [--placements pre|all]
        [--out results/norms_cpu/step_times.json]

For each task of scripts/paper/norms.py (``--tasks``, default all) its config
with the grid's own fields (``Variant.overrides``: the preset's, the task's,
the norm, and for the Transformer the placement and qk_norm; the learning
rate does not change the work), so the shapes are those the grid trains; for
every norm the model accepts (for the Transformer: each at pre-LN, layer
norm at every placement and with qk-norm, and the unnormalized model;
``--placements all``: every variant of the grid but its rates), that
experiment's own
``train_step`` on its own feed, as the runner calls it
(experiments/runner/loop.py): a jitted ``lax.scan`` of ``--steps`` updates a
call with the state donated (the runner's calls run an epoch or an
evaluation interval), or one update a call where the experiment runs so
(``scan_epoch`` off: the ConvNet, handwriting). The data are random, of the
task's shape (handwriting: lines of ``max_len`` rows and texts of 64
characters, as scripts/bench/handwriting.py).

All the variants of a task are timed in this one process, interleaved
(``timing.interleaved_samples``: every repeat takes one sample of each in a
fresh random order; a sample lasts about ``--sample_s``), and the JSON
(``--out``) gets, per task, the median ms an update of each variant, its
range, and its ratio to layer norm's: the same task and, for the
Transformer, the same placement and qk-norm (the unnormalized model's, to
pre-LN's). Each task's entry names the command, host CPU, core count,
commit and jax version; a run with ``--tasks`` replaces those tasks' entries
and keeps the others'. Run it idle (nothing else on the cores): the step
times go into results.md as measured, never the runs' own timings.

Its time, all tasks at the defaults (64 variants on 2 cores): ~11 minutes,
~7 of them compiling (handwriting's LSTMs ~16 s a variant, the 12-layer
Transformer's ~12 s) and ~4 timing; ``--placements all`` (99 variants)
~18. Estimated from a niced trial on shared cores (one variant a task:
compile and one call), so an idle run should take no longer.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # Run as a file: `python scripts/bench/norm_steps.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402  pylint: disable=wrong-import-position
import jax.numpy as jnp  # noqa: E402  pylint: disable=wrong-import-position
import numpy as np  # noqa: E402  pylint: disable=wrong-import-position

from experiments.runner import loop, workdir  # noqa: E402  pylint: disable=wrong-import-position
from lnorm import norms as lnorms  # noqa: E402  pylint: disable=wrong-import-position
from scripts.bench import timing  # noqa: E402  pylint: disable=wrong-import-position
from scripts.paper import norms as study  # noqa: E402  pylint: disable=wrong-import-position
from scripts.paper import runs as R  # noqa: E402  pylint: disable=wrong-import-position

TEXT_LEN = 64  # handwriting's characters a line (scripts/bench/handwriting.py's)


def configure(task: study.Task, variant: study.Variant, preset: str):
  """The ml_collections config the grid's run of ``variant`` trains with."""
  c = R.config_module(task.config).get_config(preset)
  for k, v in variant.overrides(task, preset).items():
    setattr(c, k, v)
  return c


def _classifier(c, steps: int, flatten: bool, module) -> loop.Task:
  from experiments import classifier  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  shape = (784,) if flatten else (28, 28, 1)
  n = c.batch_size * steps  # one plan of ``steps`` batches is one epoch
  data = {s: (rng.random((m, *shape), np.float32), rng.integers(0, 10, m).astype(np.int32))
          for s, m in (("train", n), ("valid", 1), ("test", 1))}
  module.validate(c)
  return classifier.task(c, module.create_model(c), data)


def _handwriting(c, steps: int) -> loop.Task:
  import functools  # pylint: disable=g-import-not-at-top
  from experiments import handwriting as exp  # pylint: disable=g-import-not-at-top
  exp.validate(c)
  n, t = c.batch_size * steps, c.max_len
  k = jax.random.split(jax.random.key(1), 3)
  targets = jnp.concatenate([jax.random.normal(k[0], (n, t, 2)),
                             jax.random.bernoulli(k[1], 0.04, (n, t, 1)).astype(jnp.float32)], -1)
  data = {"inputs": jnp.concatenate([jnp.zeros((n, 1, 3)), targets[:, :-1]], 1),
          "targets": targets, "mask": jnp.ones((n, t), bool),
          "chars": jax.random.randint(k[2], (n, TEXT_LEN), 1, 57).astype(jnp.int32),
          "char_mask": jnp.ones((n, TEXT_LEN), bool)}
  model = exp.create_model(c)
  feed = exp.feed(data, jax.random.key(2), c.batch_size)
  return loop.Task(state=exp.create_train_state(c, jax.random.key(0)),
                   train_step=functools.partial(exp.train_step, model, float(c.output_grad_clip)),
                   feed=feed, evaluate=dict, num_steps=steps, scan_epoch=False)


def _transformer(c, steps: int) -> loop.Task:
  import functools  # pylint: disable=g-import-not-at-top
  from experiments import transformer as exp  # pylint: disable=g-import-not-at-top
  exp.validate(c)
  data = jax.random.randint(jax.random.key(1), (1 << 16,), 0, 256).astype(jnp.uint8)
  schedule = exp.lr_schedule(float(c.learning_rate), int(c.warmup_steps), int(c.num_steps),
                             c.schedule)
  return loop.Task(state=exp.create_train_state(c, jax.random.key(0)),
                   train_step=functools.partial(exp.train_step, exp.create_model(c), schedule),
                   feed=exp.RandomWindows((data, jax.random.key(2)), c.batch_size, c.seq_len),
                   evaluate=dict, num_steps=steps)


def experiment_task(c, steps: int) -> loop.Task:
  """The experiment's loop.Task on random data of its shapes, ``steps``
  updates a call."""
  if c.experiment in ("pi_mnist", "convnet"):
    import importlib  # pylint: disable=g-import-not-at-top
    return _classifier(c, steps, c.experiment == "pi_mnist",
                       importlib.import_module(f"experiments.{c.experiment}"))
  if c.experiment == "handwriting":
    return _handwriting(c, steps)
  if c.experiment == "transformer":
    return _transformer(c, steps)
  raise ValueError(f"no step benchmark for experiment {c.experiment!r}")


def runner(c, steps: int):
  """(one call, updates a call): the runner's jitted call of ``c``'s
  experiment, compiled here as loop._compile does (lowered from the fresh
  state), the state donated and carried from call to call."""
  task = experiment_task(c, steps)
  feed = task.feed
  if task.scan_epoch:
    fn = jax.jit(loop.scan_steps(task.train_step, feed), donate_argnums=(0,))
    xs, per_call = feed.plan(0, steps), steps
  else:
    fn = jax.jit(loop.one_step(task.train_step, feed), donate_argnums=(0,))
    xs, per_call = jax.tree.map(lambda v: v[0], feed.plan(0, 1)), 1
  compiled = fn.lower(task.state, feed.data, xs).compile()
  box = [task.state]

  def call():
    box[0], m = compiled(box[0], feed.data, xs)
    jax.block_until_ready(m)

  return call, per_call


def baseline(v: study.Variant) -> study.Variant:
  """Layer norm's variant that ``v`` is set against."""
  if not v.position:
    return study.Variant(v.task, lnorms.LAYER)
  return study.Variant(v.task, lnorms.LAYER, "pre" if v.position == "none" else v.position,
                       v.qk, v.lr)


def timed_variants(task: study.Task, chosen=None, placements: str = "pre"
                   ) -> list[study.Variant]:
  """The grid's variants of ``task`` at one rate (the reference rate), with
  layer norm's baselines added where ``chosen`` leaves them out. The
  Transformer's with ``placements`` "pre": every norm at pre-LN, layer norm
  at every placement and with qk-norm, and the unnormalized model; "all":
  every variant."""
  keep = lambda v: (placements == "all" or v.position in ("pre", "none") and not v.qk
                    or v.norm == lnorms.LAYER)
  out = [v for v in study.variants(task, chosen)
         if not v.position or v.lr == study.REF_RATE and keep(v)]
  if lnorms.LAYER in task.accepted():
    out += [b for b in dict.fromkeys(map(baseline, out)) if b not in out]
  return out


def bench_task(task: study.Task, preset: str, repeats: int, sample_s: float, steps: int,
               chosen=None, placements: str = "pre", log=print) -> dict:
  """The task's entry of the JSON: {variant key: median, range, ratio}."""
  vs = timed_variants(task, chosen, placements)
  calls, per = {}, {}
  t0 = time.perf_counter()
  for v in vs:
    calls[v], per[v] = runner(configure(task, v, preset), steps)
  log(f"{task.name}: {len(vs)} variants compiled in {time.perf_counter() - t0:.0f}s", flush=True)
  samples = timing.interleaved_samples(calls, repeats, sample_s)
  ms = {v: [1e3 * s / per[v] for s in samples[v]] for v in vs}
  med = {v: statistics.median(x) for v, x in ms.items()}
  out = {}
  for v in vs:
    b = baseline(v)
    out[study.step_key(v)] = {
        "label": v.label(), "median_ms": round(med[v], 4), "min_ms": round(min(ms[v]), 4),
        "max_ms": round(max(ms[v]), 4), "samples": len(ms[v]), "updates_a_call": per[v],
        "baseline": study.step_key(b),
        "ratio": round(med[v] / med[b], 4) if b in med else None}
    log(f"  {study.step_key(v):24s} {med[v]:9.3f} ms/update  "
        f"x LN {out[study.step_key(v)]['ratio']}", flush=True)
  return out


def environment(command: str) -> dict:
  import jaxlib  # pylint: disable=g-import-not-at-top
  return {"command": command, "host_cpu": timing.cpu_model(),
          "cores": len(os.sched_getaffinity(0)), "commit": workdir.git_commit(),
          "jax": jax.__version__, "jaxlib": jaxlib.__version__,
          "python": platform.python_version(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--preset", default="cpu", choices=("cpu", "smoke"))
  p.add_argument("--tasks", default="", help="a subset of: " + ",".join(study.TASKS))
  p.add_argument("--norms", default="", help="a subset of the registry's norms "
                 "(layer norm's baselines are timed all the same)")
  p.add_argument("--repeats", type=int, default=5, help="samples of each variant (median)")
  p.add_argument("--sample_s", type=float, default=0.5,
                 help="seconds a sample (0: one call a sample)")
  p.add_argument("--steps", type=int, default=4,
                 help="updates a call where the runner scans (the MLP, the Transformer)")
  p.add_argument("--placements", default="pre", choices=("pre", "all"),
                 help="the Transformer's: every norm at pre-LN (and LN at every placement), "
                      "or every placement of every norm")
  p.add_argument("--out", type=Path, default=None,
                 help="the JSON (default results/norms_<preset>/step_times.json)")
  a = p.parse_args(argv)
  if a.repeats < 1 or a.steps < 1 or a.sample_s < 0:
    p.error("--repeats and --steps must be at least 1, --sample_s at least 0")
  tasks, chosen = study.choose(argparse.Namespace(tasks=a.tasks, norms=a.norms))
  out = a.out or R.REPO / "results" / f"norms_{a.preset}" / study.STEP_TIMES
  command = "python -m scripts.bench.norm_steps " + shlex.join(
      argv if argv is not None else sys.argv[1:])
  timing.print_environment()
  env = environment(command.strip())
  got = {}
  for task in tasks:
    entry = {**env, "preset": a.preset, "repeats": a.repeats, "sample_s": a.sample_s,
             "steps": a.steps, "placements": a.placements,
             "variants": bench_task(task, a.preset, a.repeats, a.sample_s, a.steps, chosen,
                                    a.placements)}
    got[task.name] = entry
    old = json.loads(out.read_text()) if out.exists() else {}
    old.setdefault("tasks", {})[task.name] = entry  # each task saved as it is done
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
  print(f"wrote {out} ({', '.join(got)})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
