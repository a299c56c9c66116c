"""Checks the command line before absl parses it, so that a mistake is one
line that says what is valid, not a traceback from inside config_flags."""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

from experiments.errors import UserError


def _config_spec(argv: list[str]) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def load_config(spec: str):
  """``configs/x.py[:preset]`` -> the ConfigDict, or a UserError saying why not."""
  path, _, preset = spec.partition(":")
  if not Path(path).is_file():
    raise UserError(f"config file {path!r} not found; configs are in configs/*.py")
  module_spec = importlib.util.spec_from_file_location("_checked_config", path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
    return module.get_config(preset) if preset else module.get_config()
  except ValueError as e:  # get_config's own message, e.g. an unknown preset.
    raise UserError(f"{spec}: {e}") from None


def check_argv(argv: list[str]) -> None:
  spec = _config_spec(argv)
  if spec is None:
    return  # absl reports the missing required flag.
  config = load_config(spec)
  for arg in argv:
    m = re.match(r"--config\.([\w.]+)", arg)
    if not m:
      continue
    field = m.group(1).split(".")[0]
    if field not in config:
      near = difflib.get_close_matches(field, list(config.keys()), n=1)
      hint = f" (did you mean {near[0]!r}?)" if near else ""
      raise UserError(f"unknown config field {field!r}{hint}; valid fields: "
                      + ", ".join(sorted(config.keys())))
