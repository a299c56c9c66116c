r"""The command line of a run: its flags, the config loader and the errors.

  python -m experiments.main --config configs/pi_mnist.py:cpu --workdir runs/pi_mnist \
      --config.norm=layer
  python -m experiments.main --config configs/pi_mnist.py --help   # its fields

The config's ``experiment`` field names the experiment (``experiments/<name>.py``),
whose ``train_and_evaluate(config, workdir)`` does the work (experiments/runner/loop.py).
The config file is read once, by ``config_flags``; every mistake in it or in the
flags is one line and exit status 2. Each ``--config.<field>=<value>`` is
checked against the type of the field's value in the config file before
anything runs (:func:`check_overrides`): an integer field takes an integer, a
tuple field a tuple (``--config.hidden=(1000,)``; a bare ``1000`` is refused,
not quietly made a one-element tuple), each element of the type the file's
elements have.
"""

from __future__ import annotations

import ast
import copy
import ctypes
import difflib
import importlib
import os
import re
import sys
import traceback
from pathlib import Path

from absl import app, flags, logging
from ml_collections import config_flags

from experiments.runner import confighelp, parallel
from experiments.runner.errors import NonFiniteLossError, UserError
from experiments.runner.loop import Stopped
from lnorm import native
from lnorm.data import DataError

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for config.json, metrics.jsonl, TensorBoard "
    "events and checkpoints; a rerun on it resumes.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config: configs/<experiment>.py[:preset].",
    lock_config=True)
flags.mark_flags_as_required(["config", "workdir"])
parallel.define_flags()  # --coordinator_address etc., for several processes


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


class _Loaded:
  """The config that config_flags loaded, kept for the error messages, and a
  copy as the file gave it (before the overrides), for their types."""
  spec: str | None = None
  config = None
  defaults = None


def _where(e: BaseException, path: str) -> str:
  """``file:line`` of the deepest frame of ``e`` in the config file."""
  line = None
  for frame in traceback.extract_tb(e.__traceback__):
    if Path(frame.filename).resolve() == Path(path).resolve():
      line = frame.lineno
  return f"{path}:{line}" if line else path


def _load(parse, spec: str):
  """config_flags' own loader, with its failures as one-line UserErrors."""
  path = spec.split(":", 1)[0]
  try:
    config = parse(spec)
  except SyntaxError as e:
    raise UserError(f"{e.filename or path}:{e.lineno}: syntax error in the config file: "
                    f"{e.msg}") from None
  except (TypeError, ValueError) as e:
    # config_flags re-raises get_config's error with a traceback as its text.
    cause = e.__context__ or e
    if isinstance(cause, ValueError) and "preset" in str(cause):
      raise UserError(f"{spec}: {cause}") from None
    raise UserError(f"{_where(cause, path)}: {type(cause).__name__}: {cause}") from None
  except Exception as e:  # pylint: disable=broad-except  # An error in the file's code.
    if isinstance(e, AttributeError) and "get_config" in str(e):
      raise UserError(f"{path}:1: the config file has no get_config(preset) function; "
                      "see configs/*.py") from None
    raise UserError(f"{_where(e, path)}: {type(e).__name__}: {e}") from None
  if type(config).__name__ == "_ErrorConfig":  # config_flags defers an unreadable file.
    raise UserError(f"config file {path!r} not found; configs are in configs/*.py: "
                    + ", ".join(confighelp.available()))
  _Loaded.spec, _Loaded.config = spec, config
  _Loaded.defaults = copy.deepcopy(config)
  return config


def _install_loader() -> None:
  parser = flags.FLAGS["config"].parser
  if getattr(parser, "_lnorm_wrapped", False):
    return
  parse = parser.parse
  parser.parse = lambda spec: _load(parse, spec)
  parser._lnorm_wrapped = True  # pylint: disable=protected-access


def _unknown_field(argv: list[str]) -> UserError | None:
  """The first ``--config.<field>`` that the loaded config does not have."""
  config = _Loaded.config
  if config is None:
    return None
  for arg in argv:
    m = re.match(r"--?(?:no)?config\.([\w.]+)", arg)
    if not m:
      continue
    node, path = config, m.group(1).split(".")
    for i, field in enumerate(path):
      if not hasattr(node, "keys"):
        return UserError(f"config field {'.'.join(path[:i])!r} has no fields of its own; "
                         f"give --config.{'.'.join(path[:i])}=<value>")
      keys = list(node.keys())
      if field not in keys:
        name = ".".join(path[:i + 1])
        near = difflib.get_close_matches(field, keys, n=1)
        hint = f" (did you mean {'.'.join(path[:i] + near[:1])!r}?)" if near else ""
        return UserError(f"unknown config field {name!r}{hint}; valid fields: "
                         + ", ".join(sorted(keys)))
      node = node[field]
  return None


def _help(argv: list[str]) -> None:
  spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
  if spec is None and "--config" in argv and argv.index("--config") + 1 < len(argv):
    spec = argv[argv.index("--config") + 1]
  if spec is None:
    print(confighelp.usage())
  else:
    config = flags.FLAGS["config"].parser.parse(spec)  # The wrapped loader.
    print(confighelp.describe(spec, config))
  sys.exit(0)


def overrides(argv: list[str]) -> list[tuple[str, str | None]]:
  """``(field path, value as typed)`` of each ``--config.<field>`` in ``argv``;
  the value None for a boolean's ``--config.f`` / ``--noconfig.f``."""
  out = []
  for i, arg in enumerate(argv):
    m = re.fullmatch(r"--?(no)?config\.([\w.]+)(?:=(.*))?", arg, re.S)
    if not m:
      continue
    raw = m.group(3)
    if raw is None and not m.group(1) and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
      raw = argv[i + 1]  # --config.f VALUE; absl's form for a non-boolean flag
    out.append((m.group(2), raw))
  return out


_ELEMENTS = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _get(config, path: str):
  for field in path.split("."):
    config = config[field]
  return config


def _type_error(path: str, raw: str | None, default, value) -> str | None:
  """Why the override ``path=raw`` (now ``value``) does not fit the field whose
  value in the config file is ``default``; None if it does."""
  shown = raw if raw is not None else value
  if default is None or hasattr(default, "keys"):
    return None  # a placeholder, or a ConfigDict (its own fields are checked)
  if isinstance(default, bool):
    ok, kind = isinstance(value, bool), "a boolean (true or false)"
  elif isinstance(default, int):
    ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
  elif isinstance(default, float):
    ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
  elif isinstance(default, str):
    ok, kind = isinstance(value, str), "a string"
  elif isinstance(default, (tuple, list)):
    kinds = {type(x) for x in default}
    elem = kinds.pop() if len(kinds) == 1 else None
    what = f"a tuple of {_ELEMENTS[elem]}" if elem in _ELEMENTS else "a tuple"
    example = tuple(default) or (1,)
    try:
      typed = ast.literal_eval(raw) if raw is not None else value
    except (ValueError, SyntaxError):
      return (f"{path}={shown} is not valid: {path} is {what} (the config's is "
              f"{tuple(default)}); write it as a Python tuple, e.g. --config.{path}="
              f"{example!r}")
    if not isinstance(typed, (tuple, list)):
      return (f"{path}={shown} is not valid: {path} is {what} (the config's is "
              f"{tuple(default)}); for one value write --config.{path}=({typed!r},)")
    if elem is not None:
      for x in typed:
        fits = (isinstance(x, elem) and (elem is bool or not isinstance(x, bool))
                or elem is float and isinstance(x, int) and not isinstance(x, bool))
        if not fits:
          return (f"{path}={shown} is not valid: {path} is {what} (the config's is "
                  f"{tuple(default)}), and {x!r} is not one")
    return None
  else:
    return None
  if ok:
    return None
  return f"{path}={shown} is not valid: {path} is {kind} (the config's is {default!r})"


def experiments_available() -> list[str]:
  """The experiments a config may name: experiments/<name>.py files with a
  ``train_and_evaluate``."""
  here = Path(__file__).resolve().parents[1]
  return sorted(p.stem for p in here.glob("*.py")
                if "def train_and_evaluate(" in p.read_text(errors="replace"))


def check_experiment(config) -> None:
  name = config.get("experiment")
  if name is None:
    raise UserError(f"{_Loaded.spec}: the config has no 'experiment' field naming "
                    "experiments/<name>.py")
  available = experiments_available()
  if name not in available:
    raise UserError(f"experiment={name!r} is not an experiment; choose one of: "
                    f"{', '.join(available)} (experiments/<name>.py with a "
                    "train_and_evaluate)")


def check_overrides(argv: list[str]) -> None:
  """Each ``--config.<field>`` against the type of the field in the config
  file, and the experiment it names, before anything runs."""
  config, defaults = _Loaded.config, _Loaded.defaults
  if config is None or defaults is None:
    return
  for path, raw in overrides(argv):
    try:
      default, value = _get(defaults, path), _get(config, path)
    except (KeyError, AttributeError, TypeError):
      continue  # named by _unknown_field
    message = _type_error(path, raw, default, value)
    if message:
      raise UserError(message)
  check_experiment(config)


def check_workdir(workdir: str | None) -> None:
  if workdir is not None and not workdir.strip():
    raise UserError("--workdir is empty; give the run's directory, e.g. --workdir runs/<name> "
                    "(a new one, or the run's own to resume it)")


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parser, with every mistake in the flags as one line and exit 2."""
  _install_loader()
  try:
    if any(a in ("--help", "-h", "--helpshort", "--helpfull", "-?") for a in argv[1:]):
      _help(argv)
    check_environment()
    rest = flags.FLAGS(argv)
    check_workdir(_WORKDIR.value)
    check_overrides(argv)
    return rest
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except (flags.Error, AttributeError, KeyError, TypeError) as e:
    # config_flags applies --config.<field> overrides as it parses: a field
    # the config lacks fails there, and is named against the loaded config.
    unknown = _unknown_field(argv)
    if unknown is None and not isinstance(e, flags.Error):
      raise
    message = str(unknown or e).strip().splitlines()[0]
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO.
  keep_freed_memory()
  config = _CONFIG.value
  try:
    check_experiment(config)
    try:  # importing an experiment starts no JAX backend
      experiment = importlib.import_module(f"experiments.{config.experiment}")
    except ModuleNotFoundError:
      raise UserError(f"experiment={config.experiment!r}: no experiments/"
                      f"{config.experiment}.py") from None
    # Before anything asks JAX for devices.
    parallel.initialize_from_flags(getattr(experiment, "CPU_DEVICES", 0),
                                   config.get("batch_size"), config.get("num_devices", 0))
    experiment.train_and_evaluate(config, _WORKDIR.value)
  except Stopped as e:
    print(str(e), file=sys.stderr)
    sys.exit(e.exit_code)
  except (UserError, DataError, NonFiniteLossError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(getattr(e, "exit_code", 1))


def run() -> None:
  app.run(main, flags_parser=parse_flags)
