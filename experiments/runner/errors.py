"""Errors that end a run with a one-line message instead of a traceback."""


class UserError(Exception):
  """A mistake the user can fix: printed as one line, exit status 2."""
  exit_code = 2


class ConfigError(UserError):
  """A config field with an invalid value."""


class NonFiniteLossError(Exception):
  """Training produced NaN or Inf; the last good checkpoint is kept."""
  exit_code = 3


def check(ok: bool, message: str) -> None:
  if not ok:
    raise ConfigError(message)


def check_common(config, norms) -> None:
  """The fields every experiment config has. ``norms``: the names the model
  takes, or its ``accept(norm)`` (lnorm.norms.accept for its sites), whose
  ValueError (an unknown name, a ``module:Name`` that does not import) is
  the line."""
  if callable(norms):
    try:
      norms(config.norm)
    except ValueError as e:
      raise ConfigError(str(e)) from None
  else:
    check(config.norm in norms,
          f"norm={config.norm!r} is not valid; choose one of: {', '.join(norms)}")
  check(isinstance(config.seed, int), f"seed={config.seed!r} must be an integer")
  check(config.batch_size >= 1,
        f"batch_size={config.batch_size} is not valid; it must be at least 1")
  check(config.num_epochs >= 0,
        f"num_epochs={config.num_epochs} is not valid; it must be 0 or more")
  check(config.learning_rate >= 0,
        f"learning_rate={config.learning_rate} is not valid; it must be >= 0")
  at_least(config, 0, *(f for f in ("eval_every_steps", "steps_per_call", "num_steps")
                        if f in config))


def at_least(config, low: int, *fields: str) -> None:
  """Each of ``fields`` an integer of at least ``low``."""
  for f in fields:
    check(isinstance(config[f], int) and config[f] >= low,
          f"{f}={config[f]!r} is not valid; it must be "
          + ("0 or more" if low == 0 else f"at least {low}"))


def positive(config, *fields: str) -> None:
  """Each of ``fields`` above 0 (an eps, a margin)."""
  for f in fields:
    check(config[f] > 0, f"{f}={config[f]} must be > 0")


def off_or_more(config, *fields: str) -> None:
  """Each of ``fields`` 0 (the feature off) or more: clipping thresholds."""
  for f in fields:
    check(config[f] >= 0, f"{f}={config[f]} must be 0 (off) or more")
