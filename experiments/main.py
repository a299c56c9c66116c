r"""Runs one experiment config.

  python -m experiments.main --config configs/pi_mnist.py:cpu --workdir runs/pi_mnist \
      --config.norm=layer

The config's ``experiment`` field names the training loop (``experiments/<name>.py``),
whose ``train_and_evaluate(config, workdir)`` does the work.
"""

import ctypes
import importlib
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from experiments.errors import NonFiniteLossError, UserError
from experiments.overrides import check_argv
from lnorm import native
from lnorm.data import DataError

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for config.json, metrics.jsonl, TensorBoard "
    "events and checkpoints; a rerun on it resumes.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config: configs/<experiment>.py[:preset].",
    lock_config=True)
flags.mark_flags_as_required(["config", "workdir"])


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
  """Has glibc's malloc keep the memory this process frees, for reuse.

  XLA:CPU allocates each call's temporaries and outputs with malloc. By
  default glibc maps every block above its mmap threshold (at most 32 MiB)
  afresh and unmaps it when it is freed, so a training step with large
  temporaries page-faults all of them on every call (BENCHMARKS.md, "The
  allocator"). The price is that the process keeps its peak memory. Blocks
  over 64 MiB that XLA's threads allocate are still mapped afresh: only
  ``MALLOC_ARENA_MAX=1`` keeps those, at the cost of one lock for all
  threads, which slowed DRAW's training (BENCHMARKS.md); set it where the
  temporaries are that large.
  Skipped where the C library has no ``mallopt``, and where the user set
  glibc's ``MALLOC_MMAP_MAX_`` or ``MALLOC_TRIM_THRESHOLD_``. Returns whether
  it applied.
  """
  if "MALLOC_MMAP_MAX_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
    return False
  try:
    mallopt = ctypes.CDLL(None).mallopt
  except (OSError, AttributeError):
    return False
  return bool(mallopt(_M_MMAP_MAX, 0)) and bool(
      mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def check_environment() -> None:
  """The environment variables lnorm reads, checked before anything runs."""
  try:
    native.mode()
  except ValueError as e:
    raise UserError(str(e)) from None


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parser, with every mistake in the flags as one line and exit 2."""
  try:
    check_argv(argv)
    check_environment()
    return flags.FLAGS(argv)
  except (UserError, flags.Error) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO.
  keep_freed_memory()
  config = _CONFIG.value
  try:
    experiment = importlib.import_module(f"experiments.{config.experiment}")
    experiment.train_and_evaluate(config, _WORKDIR.value)
  except (UserError, DataError, NonFiniteLossError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(getattr(e, "exit_code", 1))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
