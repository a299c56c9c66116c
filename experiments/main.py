r"""Runs one experiment config.

  python -m experiments.main --config configs/pi_mnist.py:cpu --workdir runs/pi_mnist \
      --config.norm=layer
  python -m experiments.main --config configs/pi_mnist.py --help   # its fields

The config's ``experiment`` field names ``experiments/<name>.py``; the command
line itself is experiments/runner/cli.py.
"""

import os
import signal
import sys


def _stop_before_training(signum: int, frame) -> None:
  """SIGINT or SIGTERM before the run loop takes them over (while JAX imports
  or the flags parse): nothing has been written, so one line and out."""
  del frame
  print(f"stopped by {signal.Signals(signum).name} before training began; nothing was "
        "trained. Rerun the same command to start or resume", file=sys.stderr, flush=True)
  os._exit(128 + signum)  # pylint: disable=protected-access


if __name__ == "__main__":
  # Before the imports below: importing JAX takes seconds.
  for _s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_s, _stop_before_training)
  from experiments.runner import cli  # pylint: disable=g-import-not-at-top
  cli.run()
