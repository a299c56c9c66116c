r"""Data parallelism for the run loop, with ``jax.sharding`` under ``jit``.

One code path for one device, many devices and many hosts: the loop builds a
1-D mesh over the devices (``config.num_devices``, 0 = all of them), shards each
batch's leading (batch) axis over its ``data`` axis, and keeps the train state
(parameters, optimizer state, batch norm's running averages) replicated. The
compiler partitions each step and inserts the collectives: the all-reduce of
the gradients, and for batch norm with ``bn_stats='global'`` the all-reduce of
each normalized layer's statistics. ``bn_stats='local'`` (per-device
statistics, as per-GPU batch norm) is the model's business: see ``bn_groups``.

Several processes (hosts): :func:`initialize` calls ``jax.distributed.initialize``
from the runner's flags (``--coordinator_address``, ``--num_processes``,
``--process_id``, or ``--distributed`` for the cluster's own detection: SLURM,
TPU pods, Open MPI) or the environment (``JAX_COORDINATOR_ADDRESS``,
``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``). Every process runs the same loop on
the same global arrays; each puts only its own devices' part of each batch on
them (:func:`shard_plan`). Orbax writes and reads the checkpoints from all of
them; only process 0 takes the workdir's lock and writes config.json,
metrics.jsonl, TensorBoard and figures (:func:`is_primary`; the workdir's side
is experiments/runner/workdir.py's ``claim`` and ``resume``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from experiments.runner.errors import UserError

DATA = "data"  # the mesh axis the batch is split over
BN_STATS = ("global", "local")


# --- Processes ---------------------------------------------------------------

def define_flags() -> None:
  """The runner's flags for several processes (experiments/main.py)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string(
      "coordinator_address", None, "host:port of process 0, for a run over several "
      "processes (default: $JAX_COORDINATOR_ADDRESS); with --num_processes and "
      "--process_id.")
  flags.DEFINE_integer("num_processes", None, "Processes in the run "
                       "(default: $JAX_NUM_PROCESSES).")
  flags.DEFINE_integer("process_id", None, "This process's index, 0 .. "
                       "num_processes - 1 (default: $JAX_PROCESS_ID).")
  flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with "
                    "no arguments: the cluster (SLURM, a TPU pod, Open MPI) says "
                    "who is who.")
  flags.DEFINE_integer(
      "cpu_devices", None, "Split the CPU into this many JAX devices and the batch over "
      "them (each core runs the whole step on its part of the batch, where one device "
      "leaves XLA to split each op). -1: one a core (the most, at most the cores and "
      "num_devices, that divide batch_size); 0: JAX's default, one. Default: the "
      "experiment's CPU_DEVICES (the Transformer: -1, BENCHMARKS.md; the others: 0), "
      "unless XLA_FLAGS or $JAX_NUM_CPU_DEVICES set a count. Another device count sums "
      "in another order: the late digits of a run change.")


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  if value in (None, ""):
    return None
  try:
    return int(value)
  except ValueError:
    raise UserError(f"${name}={value!r} is not an integer") from None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, auto: bool = False) -> bool:
  """``jax.distributed.initialize`` for a run over several processes, from the
  arguments or else the environment; nothing for a single process. Call it
  before anything asks JAX for its devices. Returns whether it initialized."""
  coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
  if num_processes is None:
    num_processes = _env_int("JAX_NUM_PROCESSES")
  if process_id is None:
    process_id = _env_int("JAX_PROCESS_ID")
  if not (auto or coordinator_address):
    if num_processes not in (None, 1) or process_id not in (None, 0):
      raise UserError("num_processes and process_id need a coordinator address "
                      "(--coordinator_address or $JAX_COORDINATOR_ADDRESS)")
    return False
  if coordinator_address and (num_processes is None or process_id is None):
    raise UserError(f"coordinator address {coordinator_address} given: also give "
                    "--num_processes and --process_id (or $JAX_NUM_PROCESSES, "
                    "$JAX_PROCESS_ID)")
  if num_processes is not None and not 0 <= (process_id or 0) < num_processes:
    raise UserError(f"process_id={process_id} is not in 0 .. {num_processes - 1}")
  # CPU devices of different processes talk through gloo (GPUs use NCCL, TPUs
  # their interconnect; the setting touches only the CPU client).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address, num_processes, process_id)
  return True


def usable_cores() -> int:
  """The cores this process may run on (its affinity mask, else all)."""
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def cpu_devices_for(n: int, batch_size: Any = None, cores: int | None = None,
                    most: int = 0) -> int:
  """The CPU device count ``n`` asks for: ``n`` itself, 0 for JAX's default,
  and for -1 one a core (at most ``most``, a run's ``num_devices``, where it
  is set), lowered to the largest count that divides ``batch_size`` (an int;
  anything else leaves the cores)."""
  if n < -1:
    raise UserError(f"cpu_devices={n}: give 1 or more devices, -1 for one a core, or 0 "
                    "for JAX's default")
  if n != -1:
    return n
  cores = cores or usable_cores()
  if isinstance(most, int) and most > 0:
    cores = min(cores, most)
  if not isinstance(batch_size, int) or batch_size <= 0:
    return cores
  return max(d for d in range(1, cores + 1) if batch_size % d == 0)


def _count_set_outside() -> bool:
  """Whether the environment already sets the CPU device count."""
  return ("xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
          or bool(os.environ.get("JAX_NUM_CPU_DEVICES")))


def set_cpu_devices(n: int | None, default: int = 0, batch_size: Any = None,
                    most: int = 0) -> int:
  """Makes the CPU backend :func:`cpu_devices_for` devices and returns that
  count (0: JAX's default left). ``n`` None (no flag) takes ``default`` (the
  experiment's), unless the environment sets the count. Call it before
  anything asks JAX for its devices."""
  if n is None:
    if _count_set_outside():
      return 0
    n = default
  count = cpu_devices_for(n, batch_size, most=most)
  if count:
    jax.config.update("jax_num_cpu_devices", count)
  return count


def initialize_from_flags(default_cpu_devices: int = 0, batch_size: Any = None,
                          num_devices: int = 0) -> bool:
  """:func:`set_cpu_devices` and :func:`initialize` from the runner's flags;
  ``default_cpu_devices`` is the experiment's ``CPU_DEVICES``, ``batch_size``
  and ``num_devices`` the run's."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  set_cpu_devices(f.cpu_devices, default_cpu_devices, batch_size, num_devices)
  return initialize(f.coordinator_address, f.num_processes, f.process_id, f.distributed)


def is_primary() -> bool:
  """Whether this process writes the run's files (process 0)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


# --- The mesh ----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def make_mesh(num_devices: int = 0) -> Mesh:
  """A 1-D ``data`` mesh over the first ``num_devices`` devices (0 = all)."""
  available = jax.device_count()
  n = num_devices or available
  if not 1 <= n <= available:
    raise UserError(f"num_devices={num_devices} is not valid: there are {available} "
                    "devices (0 uses all)")
  if jax.process_count() > 1 and n != available:
    raise UserError(f"num_devices={num_devices}: a run over {jax.process_count()} "
                    f"processes uses all {available} devices; give 0")
  return Mesh(np.array(jax.devices()[:n]), (DATA,))


def mesh_for(num_devices: int, batch_size: int | None) -> Mesh:
  """The mesh of ``num_devices`` (0: all devices), after checking that
  ``batch_size`` splits evenly over it."""
  num = num_devices
  if not isinstance(num, int) or num < 0:
    raise UserError(f"num_devices={num!r} is not valid; it must be 0 (all) or more")
  mesh = make_mesh(num)
  b, n = batch_size, mesh.size
  if isinstance(b, int) and b % n:
    raise UserError(f"batch_size={b} does not divide by the {n} devices of the mesh; "
                    f"use a multiple of {n} or set num_devices")
  return mesh


def bn_groups(config) -> int:
  """How many parts of the batch batch norm takes statistics over apart: 1 for
  ``bn_stats='global'`` (the whole batch, across devices: synchronised batch
  norm), the number of devices for ``'local'`` (each device's part alone)."""
  stats = config.get("bn_stats", "global")
  if stats not in BN_STATS:
    raise UserError(f"bn_stats={stats!r} is not valid; choose one of: "
                    f"{', '.join(BN_STATS)}")
  mesh = mesh_for(config.get("num_devices", 0), config.get("batch_size"))
  return mesh.size if stats == "local" else 1


# --- Placing arrays ----------------------------------------------------------

def _is_key(x: Any) -> bool:
  return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _place(x: Any, sharding: NamedSharding) -> Any:
  """``x`` (the same value in every process) as a global array with
  ``sharding``; each process copies only its own devices' parts."""
  if _is_key(x):
    impl = jax.random.key_impl(x)
    return jax.random.wrap_key_data(_place(jax.random.key_data(x), sharding), impl=impl)
  if isinstance(x, jax.Array) and x.sharding == sharding:
    return x
  host = np.asarray(x)
  return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def replicate(tree: Any, mesh: Mesh) -> Any:
  """Every array leaf of ``tree`` whole on every device of ``mesh``. A Python
  number (a fresh TrainState's ``step``) becomes an array too: left a weakly
  typed scalar, the first step's output (a strong int32) would compile the
  step a second time."""
  rep = NamedSharding(mesh, P())

  def place(x):
    if isinstance(x, (int, float)):
      x = jax.numpy.asarray(x)
    return _place(x, rep) if hasattr(x, "shape") else x
  return jax.tree.map(place, tree)


def _batch_spec(x: Any, axis: int, batch_size: int, mesh: Mesh) -> P:
  # Leaves without the batch axis (per-step keys, counters) stay replicated.
  if (getattr(x, "ndim", 0) > axis and x.shape[axis] == batch_size
      and batch_size % mesh.size == 0):
    return P(*(None,) * axis, DATA)
  return P()


def shard_plan(plan: Any, mesh: Mesh, batch_size: int) -> Any:
  """A :class:`~experiments.runner.loop.Feed` plan (leaves ``[steps, batch, ...]``) on
  the mesh: the batch axis split over ``data``, other leaves replicated."""
  return jax.tree.map(
      lambda x: _place(x, NamedSharding(mesh, _batch_spec(x, 1, batch_size, mesh))), plan)


def constrain_batch(batch: Any, mesh: Mesh, batch_size: int) -> Any:
  """Traced: each leaf of one step's batch with a leading batch axis split over
  ``data`` (e.g. noise drawn inside the step, which no input's sharding fixes)."""
  return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(
      x, NamedSharding(mesh, _batch_spec(x, 0, batch_size, mesh))), batch)


def data_parallel(train_step: Callable, mesh: Mesh, batch_size: int) -> Callable:
  """``train_step`` with its batch split over the mesh and its new state
  replicated: the gradients' (and global statistics') all-reduce follows."""
  rep = NamedSharding(mesh, P())

  def step(state, batch):
    state, metrics = train_step(state, constrain_batch(batch, mesh, batch_size))
    return jax.lax.with_sharding_constraint(state, rep), metrics
  return step


class ShardedFeed:
  """A feed whose plans come split over the mesh and whose data is replicated."""

  def __init__(self, feed: Any, mesh: Mesh, batch_size: int):
    self.inner, self.mesh, self.batch_size = feed, mesh, batch_size
    self.data = replicate(feed.data, mesh)

  def plan(self, start: int, stop: int) -> Any:
    return shard_plan(self.inner.plan(start, stop), self.mesh, self.batch_size)

  def batch(self, data: Any, xs: Any) -> Any:
    return self.inner.batch(data, xs)

  def __getattr__(self, name: str) -> Any:
    return getattr(self.inner, name)


def distribute(task: Any, mesh: Mesh, batch_size: int) -> Any:
  """A :class:`~experiments.runner.loop.Task` on ``mesh``: its state replicated, its
  batches split, its step :func:`data_parallel`. With several processes each
  evaluates on its own copy of the state (:func:`to_local`), so that an
  experiment's evaluation may take its process-local arrays as they are; only
  process 0 writes what it measures."""
  evaluate = task.evaluate
  if jax.process_count() > 1:
    evaluate = lambda state: task.evaluate(to_local(state))
  return dataclasses.replace(
      task, state=replicate(task.state, mesh),
      feed=ShardedFeed(task.feed, mesh, batch_size),
      train_step=data_parallel(task.train_step, mesh, batch_size), evaluate=evaluate)


def to_local(tree: Any) -> Any:
  """A replicated tree as arrays on this process's first device, for work that
  process 0 does alone (figures, samples)."""
  device = jax.local_devices()[0]

  def local(x):
    if not isinstance(x, jax.Array):
      return x
    if _is_key(x):
      return jax.random.wrap_key_data(local(jax.random.key_data(x)),
                                      impl=jax.random.key_impl(x))
    return jax.device_put(x.addressable_data(0), device)
  return jax.tree.map(local, tree)
