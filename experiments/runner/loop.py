r"""The one run loop: every experiment trains through :func:`run`.

An experiment file (experiments/<name>.py, like a Flax example's train.py) holds
its data, its model and ``create_train_state``, ``train_step``, ``eval_step`` (an
``evaluate`` over the splits), and ``train_and_evaluate(config, workdir)``::

  def train_and_evaluate(config, workdir):
    validate(config)                    # one-line ConfigErrors, before anything
    def setup() -> loop.Task:           # called after the workdir checks
      data = load_data(config)
      return loop.Task(
          state=create_train_state(config, key),          # any pytree with .step
          train_step=train_step,                          # (state, batch) -> (state, {name: scalar})
          feed=loop.EpochShuffle(data=..., num_examples=n, batch_size=b,
                                 shuffle_key=lambda epoch: ..., batch=...),
          evaluate=lambda state: {"valid_nll": ..., ...}, # floats, over the splits
          num_steps=config.num_epochs * steps_per_epoch, steps_per_epoch=steps_per_epoch)
    return loop.run(config, workdir, setup)   # options: loop.Options.of(config)

A run reads top to bottom in :func:`run`, one call a step: check (the loop's
options and the device mesh), workdir (checked and locked:
``workdir.claim``), data and state (the experiment's ``setup``, placed on the
mesh: ``parallel.distribute``), resume (the workdir made, the newest
checkpoint restored: ``workdir.resume``), loop (:func:`_train`), finish (the
summary and the task's ``finish``). A one-shot experiment, which measures
once and trains nothing, goes through :func:`run_once`: the same workdir and
config.json, its measurements as the one record of metrics.jsonl.

The loop owns the rest: the workdir (lock, config.json, checks), resume from the
newest checkpoint that restores and has its record in metrics.jsonl (one whose
record is damaged or missing is trained again from the one before, so every
record is whole), metrics.jsonl and TensorBoard, progress, the NaN stop (the
newest checkpoint whose metrics are all finite is kept), evaluation (every
``Options.eval_every_steps`` updates, 0 = at epoch ends only, and at every
epoch end and the last step), a checkpoint after each evaluation,
SIGINT/SIGTERM, and the summary. It drives ``train_step`` as a
jitted ``lax.scan`` over the steps between two evaluations (at most
``Options.steps_per_call`` steps a call, 0 = no limit), with the state donated;
``Task.scan_epoch=False`` runs one jitted call per step instead (where XLA is slow
inside a scan, as for convolutions on CPU). Batches come from a :class:`Feed`,
a pure function of the step number, so a resumed run sees the same ones. Pass
what the steps need (the model, shapes) by closure or ``functools.partial``,
not as static fields of the state. Train metrics are recorded as ``train_<name>``,
the mean over the steps since the previous record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh

from experiments.runner import parallel
from experiments.runner import workdir as wdir
from experiments.runner.errors import NonFiniteLossError, UserError
from experiments.runner.progress import Progress, epochs_touched
# Which way each metric is better, read here by scripts (compare.py, paper/table3.py).
from experiments.runner.records import CORRELATIONS, HIGHER_IS_BETTER, higher_is_better  # noqa: F401

Metrics = Mapping[str, jax.Array]


class Feed(Protocol):
  """Where the batches come from: ``plan`` runs outside the jitted call, ``batch``
  inside it. Both must depend on the step numbers only."""

  data: Any  # pytree of arrays passed to every jitted call (not baked in as constants)

  def plan(self, start: int, stop: int) -> Any:
    """Per-step inputs for steps ``start .. stop - 1``, stacked on a leading axis."""

  def batch(self, data: Any, xs: Any) -> Any:
    """Traced: one step's slice of the plan -> the batch ``train_step`` takes."""


@dataclasses.dataclass(eq=False)  # Hashed by identity: the static self of _plan.
class EpochShuffle:
  """Device-resident data, reshuffled every epoch; the last partial batch is
  dropped. Step ``s`` is in epoch ``s // steps_per_epoch + 1`` (1-based, so 0 is
  free for the init key). Each step gets ``idx`` (its rows) and, if
  ``step_key`` is given, ``key`` = ``step_key(epoch, step within the epoch)``.

  With ``lengths`` and ``sort_batches`` = G > 1, batches hold examples of
  similar length, so that a step can cut its padding short: the shuffled
  examples are taken G batches at a time, each run of G * batch_size sorted
  by length (stably) and cut into batches, and the epoch's batches are then
  shuffled again, so that their order carries no length."""
  data: Any
  num_examples: int
  batch_size: int
  shuffle_key: Callable[[jax.Array], jax.Array]
  batch: Callable[[Any, Any], Any]
  step_key: Callable[[jax.Array, jax.Array], jax.Array] | None = None
  lengths: np.ndarray | None = None  # [num_examples] ints, with sort_batches
  sort_batches: int = 0

  @property
  def steps_per_epoch(self) -> int:
    return self.num_examples // self.batch_size

  def plan(self, start: int, stop: int) -> Any:
    spe = self.steps_per_epoch
    epoch, first = divmod(start, spe)
    if stop - start > spe - first:
      raise ValueError(f"steps {start}..{stop} cross an epoch end")
    return self._plan(jnp.int32(epoch + 1), first, stop - start)

  @functools.partial(jax.jit, static_argnums=(0, 2, 3))
  def _plan(self, epoch: jax.Array, first: int, n: int) -> Any:
    spe, b = self.steps_per_epoch, self.batch_size
    key = self.shuffle_key(epoch)
    perm = jax.random.permutation(key, self.num_examples)[:spe * b]
    if self.sort_batches > 1 and self.lengths is not None:
      lens = np.asarray(self.lengths, np.int32)
      run = jnp.arange(spe * b) // (self.sort_batches * b)
      perm = perm[jnp.argsort(run * (int(lens.max()) + 1) + jnp.asarray(lens)[perm],
                              stable=True)]
      perm = perm.reshape(spe, b)[jax.random.permutation(jax.random.fold_in(key, 1), spe)]
    idx_SxB = perm.reshape(spe, b)[first:first + n]
    out = {"idx": idx_SxB}
    if self.step_key is not None:
      out["key"] = jax.vmap(lambda s: self.step_key(epoch, s))(jnp.arange(first, first + n))
    return out


@dataclasses.dataclass(frozen=True)
class Options:
  """What the loop takes from a config, by name; the config itself is only
  recorded (config.json), never read or changed by the loop."""
  eval_every_steps: int = 0        # evaluate every this many updates (0: at epoch ends only)
  steps_per_call: int = 0          # at most this many steps a jitted call (0: no limit)
  batch_size: int = 0              # must split evenly over the devices (0: not checked)
  num_devices: int = 0             # data parallel over this many devices (0: all)
  data_dir: str | None = None      # recorded resolved in config.json; None: reads no data dir
  num_epochs: int | None = None    # named in the message of a run asked for 0 steps

  @classmethod
  def of(cls, config: ml_collections.ConfigDict) -> "Options":
    """The fields of ``config`` that the loop uses, where it has them."""
    get = lambda k, d: config.get(k, d) if config.get(k, d) is not None else d
    return cls(eval_every_steps=get("eval_every_steps", 0), steps_per_call=get("steps_per_call", 0),
               batch_size=get("batch_size", 0), num_devices=get("num_devices", 0),
               data_dir=config.get("data_dir"), num_epochs=config.get("num_epochs"))


@dataclasses.dataclass
class Task:
  """What an experiment hands to :func:`run`."""
  state: Any                       # the fresh train state; ``state.step`` counts updates
  train_step: Callable[[Any, Any], tuple[Any, Metrics]]
  feed: Feed
  evaluate: Callable[[Any], Mapping[str, float]]  # {metric: value}, e.g. valid_nll
  num_steps: int                   # updates in the whole run
  steps_per_epoch: int | None = None  # None: a run counted in steps only
  examples_per_step: int = 1       # for the rates
  scan_epoch: bool = True          # the steps between evaluations as one lax.scan; False: a call a step
  show: tuple[str, ...] = ()       # metrics on the progress line and in the summary
  finish: Callable[[Any, Path], None] | None = None  # after training, e.g. samples


# --- One run, top to bottom -----------------------------------------------------

def run(config: ml_collections.ConfigDict, workdir: str, setup: Callable[[], Task],
        options: Options | None = None) -> Any:
  """Trains the :class:`Task` that ``setup()`` returns in ``workdir``, resuming
  what is there; returns the final state. ``setup`` runs after the workdir
  checks, so a bad workdir is reported before the data loads. ``config`` is
  recorded; the loop's settings are ``options`` (default ``Options.of(config)``)."""
  t_start = time.perf_counter()
  with _Stop() as stop, _stopped_early("before training began; nothing was trained. "
                                       "Rerun the same command to start or resume"):
    opts, mesh = check(config, options)                          # check
    with wdir.claim(workdir, config, opts.data_dir) as claim:    # workdir
      task = parallel.distribute(setup(), mesh, opts.batch_size)  # data, state
      # From here on the workdir is written: a signal waits for a safe point.
      stop.defer()
      with wdir.resume(claim, task.state) as resumed:            # resume
        state, progress = _train(opts, task, resumed, stop)      # loop
  return _finish(task, state, resumed, progress,                  # finish
                 time.perf_counter() - t_start, opts.num_epochs)


def run_once(config: ml_collections.ConfigDict, workdir: str,
             compute: Callable[[Path], Mapping[str, float]]) -> dict[str, Any]:
  """A one-shot experiment (it measures once and trains nothing: Table 1)
  through :func:`run`'s shared output: the workdir checked, locked and
  announced, config.json written; then ``compute(workdir)``, which may write
  its own files there (a table), and its measurements as the one record (step
  0) of metrics.jsonl, written last, so that a record means the run is whole.
  A rerun measures again and replaces the record. Returns the record."""
  with _Stop(), _stopped_early("before its record was written; nothing was recorded. "
                               "Rerun the same command to start it again"):
    with wdir.claim(workdir, config) as claim:
      wd = claim.create()
      return wdir.record_once(wd, compute(wd))


def check(config: ml_collections.ConfigDict, options: Options | None = None
          ) -> tuple[Options, Mesh]:
  """The loop's options (``Options.of(config)`` unless given) and the mesh of
  devices they ask for, checked before anything is read or written."""
  opts = Options.of(config) if options is None else options
  if opts.eval_every_steps < 0 or opts.steps_per_call < 0:
    raise UserError("eval_every_steps and steps_per_call must be 0 or more")
  # Data parallel over the devices (parallel.py).
  return opts, parallel.mesh_for(opts.num_devices, opts.batch_size)


def _train(opts: Options, task: Task, resumed: wdir.Resumed, stop: _Stop
           ) -> tuple[Any, Progress]:
  """Trains from ``resumed``'s state and step to ``task.num_steps``, evaluating,
  recording and checkpointing as :func:`schedule` says; the final state, and
  the progress (steps, seconds). A signal stops it at the next safe point."""
  spe, total, feed = task.steps_per_epoch, task.num_steps, task.feed
  first = resumed.step
  calls, names = _compile(task, opts)
  progress = Progress(total, first, task.examples_per_step, spe, epochs_touched(total, spe))
  progress.begin()
  state, step = resumed.state, first
  pending: list[jax.Array] = []
  interval_s, interval_steps = 0.0, 0
  try:
    for a, b, evaluate in schedule(first, total, spe, opts.eval_every_steps,
                                   opts.steps_per_call):
      if stop.signum is not None:
        break
      t0 = time.perf_counter()
      xs = feed.plan(a, b)
      if not task.scan_epoch:
        for i in range(b - a):
          state, m = calls[1](state, feed.data, jax.tree.map(lambda v: v[i], xs))
          pending.append(m)
        jax.block_until_ready(state)
      else:
        state, m = calls[b - a](state, feed.data, xs)
        pending.append(m)
        jax.block_until_ready(m)
      dt = time.perf_counter() - t0
      interval_s, interval_steps, step = interval_s + dt, interval_steps + b - a, b
      progress.advance(step, dt)
      if evaluate:
        train = _mean(pending, names, stacked=task.scan_epoch)
        _evaluate_and_record(task, resumed, progress, state, step, train, interval_s,
                             interval_steps)
        pending, interval_s, interval_steps = [], 0.0, 0
  finally:
    progress.close()
  if stop.signum is not None and step < total:
    last = resumed.latest_step()
    name = signal.Signals(stop.signum).name
    raise Stopped(
        f"stopped by {name} at step {step} of {total}; "
        + (f"the last checkpoint is step {last}" if last is not None
           else "no checkpoint was written yet") +
        ". Rerun the same command to resume", 128 + stop.signum)
  return state, progress


def _compile(task: Task, opts: Options) -> tuple[dict[int, Any], list[str]]:
  """The jitted calls of the run, ``{steps a call: compiled}``, and the names of
  the train metrics they return. Lowered from the fresh state (``task.state``),
  one call per distinct length of the plan from step 0: a restored state is
  committed to a device, and lowering with it would give other programs than
  a fresh run's."""
  feed = task.feed
  plan_from_zero = schedule(0, task.num_steps, task.steps_per_epoch,
                            opts.eval_every_steps, opts.steps_per_call)
  calls: dict[int, Any] = {}
  names: list[str] = []
  t0 = time.perf_counter()
  if not task.scan_epoch:
    if plan_from_zero:
      a, _, _ = plan_from_zero[0]
      x0 = jax.tree.map(lambda v: v[0], feed.plan(a, a + 1))
      calls[1] = jax.jit(one_step(task.train_step, feed, names), donate_argnums=(0,)).lower(
          task.state, feed.data, x0).compile()
  else:
    chunk = jax.jit(scan_steps(task.train_step, feed, names), donate_argnums=(0,))
    for a, b, _ in plan_from_zero:
      if b - a not in calls:
        calls[b - a] = chunk.lower(task.state, feed.data, feed.plan(a, b)).compile()
  if calls:
    print(f"compiled the train step in {time.perf_counter() - t0:.1f}s", flush=True)
  return calls, names


def _evaluate_and_record(task: Task, resumed: wdir.Resumed, progress: Progress, state,
                         step: int, train: dict[str, float], seconds: float, steps: int
                         ) -> None:
  """Evaluates, then records and checkpoints (``resumed.record``); a non-finite
  train metric stops the run first, saying which checkpoint is kept."""
  spe = task.steps_per_epoch
  train = {f"train_{k}": v for k, v in train.items()}
  bad = {k: v for k, v in train.items() if not np.isfinite(v)}
  if bad:
    where = (f"in epoch {-(-step // spe)} (steps {step - steps + 1}-{step})" if spe
             else f"in steps {step - steps + 1}-{step}")
    name, value = next(iter(bad.items()))
    raise NonFiniteLossError(f"{name} is {value} {where}; stopped. {resumed.kept()}")
  metrics = {**train, "epoch_time_s": seconds,
             "examples_per_sec": steps * task.examples_per_step / seconds}
  metrics |= {k: float(v) for k, v in task.evaluate(state).items()}
  resumed.record(step, _epoch_of(step, spe), metrics, state)
  shown = task.show or tuple(metrics)[:3]
  progress.report(step, **{k: metrics[k] for k in shown if k in metrics})


def _finish(task: Task, state: Any, resumed: wdir.Resumed, progress: Progress,
            total_s: float, num_epochs: int | None) -> Any:
  """The summary line, then the task's ``finish`` (process 0 alone)."""
  progress.done(resumed.records, task.show, total_s, num_epochs)
  if task.finish is not None and parallel.is_primary():
    task.finish(parallel.to_local(state), resumed.path)
  return state


# --- The loop's parts --------------------------------------------------------

def _pack(m: Metrics) -> jax.Array:
  # One output array a step: the metric itself if one, else the stacked vector.
  values = list(m.values())
  return values[0] if len(values) == 1 else jnp.stack(values)


def scan_steps(train_step: Callable, feed: Feed, names: list[str] | None = None
               ) -> Callable:
  """``(state, data, xs) -> (state, metrics [S] or [S, K])``: the steps of ``xs``
  as one ``lax.scan`` (jit it; the loop does, with the state donated). The
  metric names, in order, go into ``names`` when it is traced."""
  def chunk(state, data, xs):
    def body(st, x):
      st, m = train_step(st, feed.batch(data, x))
      if names is not None:
        names[:] = list(m)
      return st, _pack(m)
    return jax.lax.scan(body, state, xs)
  return chunk


def one_step(train_step: Callable, feed: Feed, names: list[str] | None = None
             ) -> Callable:
  """``(state, data, x) -> (state, metrics)``: one step of the plan, packed as
  :func:`scan_steps` packs them."""
  def step(state, data, x):
    state, m = train_step(state, feed.batch(data, x))
    if names is not None:
      names[:] = list(m)
    return state, _pack(m)
  return step


# More distinct call lengths than this, and the calls go in powers of two: each
# length is a program to compile (~9 s each for the reader, whose 227-step
# epochs and 200-step evaluations make 40 lengths), while a power-of-two split
# needs at most log2(longest) + 1 and runs the same steps in the same order.
MAX_CALL_LENGTHS = 4


def schedule(start: int, total: int, steps_per_epoch: int | None, eval_every: int,
             per_call: int) -> list[tuple[int, int, bool]]:
  """``(start, stop, evaluate after)`` of each jitted call from ``start`` on.
  A call never crosses an evaluation or an epoch end. The calls are those of
  the plan from step 0 (whose lengths were compiled), cut at ``start``."""
  points = {total}
  if eval_every:
    points |= set(range(eval_every, total, eval_every))
  if steps_per_epoch:
    points |= set(range(steps_per_epoch, total, steps_per_epoch))
  out, s = [], 0
  for p in sorted(points):
    while s < p:
      stop = min(p, s + per_call) if per_call else p
      out.append((s, stop, stop == p))
      s = stop
  if len({b - a for a, b, _ in out}) > MAX_CALL_LENGTHS:
    out = [c for call in out for c in _powers_of_two(*call)]
  return [(max(a, start), b, ev) for a, b, ev in out if b > start]


def _powers_of_two(a: int, b: int, evaluate: bool) -> list[tuple[int, int, bool]]:
  """[a, b) as calls of decreasing powers of two; the last keeps ``evaluate``."""
  out = []
  while a < b:
    n = 1 << ((b - a).bit_length() - 1)
    out.append((a, a + n, evaluate and a + n == b))
    a += n
  return out


class _Stop:
  """SIGINT and SIGTERM. Before the workdir is written (the checks, data
  loading), they stop at once; once ``defer()`` is called
  they ask the loop to stop at its next safe point (the end of the current
  jitted call), and a second one stops at once."""

  def __init__(self):
    self.signum: int | None = None
    self.deferred = False
    self._old = {}

  def __enter__(self) -> "_Stop":
    if threading.current_thread() is threading.main_thread():
      for s in (signal.SIGINT, signal.SIGTERM):
        self._old[s] = signal.signal(s, self._handle)
    return self

  def defer(self) -> None:
    self.deferred = True

  def _handle(self, signum, frame) -> None:
    if not self.deferred:
      raise _StoppedEarly(signum)
    if self.signum is not None:
      signal.signal(signum, signal.SIG_DFL)
      signal.raise_signal(signum)
    self.signum = signum
    print(f"\n{signal.Signals(signum).name}: stopping after the current step(s); "
          "send it again to stop at once", file=sys.stderr, flush=True)

  def __exit__(self, *exc) -> None:
    for s, h in self._old.items():
      signal.signal(s, h)


class _StoppedEarly(BaseException):
  """Raised from the signal handler before training; a BaseException, like
  KeyboardInterrupt, so that no ``except Exception`` on the way swallows it."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


@contextlib.contextmanager
def _stopped_early(what: str) -> Iterator[None]:
  """A signal before the workdir is written (:class:`_StoppedEarly`) as a
  :class:`Stopped` whose line says ``what``."""
  try:
    yield
  except _StoppedEarly as e:
    raise Stopped(f"stopped by {signal.Signals(e.signum).name} {what}",
                  128 + e.signum) from None


class Stopped(UserError):
  """A run stopped by a signal at a safe point; rerunning resumes it."""

  def __init__(self, message: str, exit_code: int):
    super().__init__(message)
    self.exit_code = exit_code


def _mean(chunks: list[jax.Array], names: list[str], stacked: bool) -> dict[str, float]:
  """The mean of each metric over the steps of ``chunks`` (outputs of scanned
  calls, or with ``stacked`` False, of single steps)."""
  if not chunks:
    return {}
  if not stacked:
    arr = jnp.stack(chunks)
  else:
    arr = chunks[0] if len(chunks) == 1 else jnp.concatenate(chunks)
  means = jnp.mean(arr, 0)
  if len(names) == 1:
    return {names[0]: float(means)}
  return {k: float(v) for k, v in zip(names, means)}


def _epoch_of(step: int, spe: int | None) -> int | float | None:
  if not spe:
    return None
  return step // spe if step % spe == 0 else round(step / spe, 6)
