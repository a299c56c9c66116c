"""``python tests/run_with_pins.py PINS.json <experiments.main flags>``: the
runner in a subprocess with ``lnorm.data.files.SHA256`` updated from PINS.json
({key: SHA-256}), so that a run reads the tiny corpus a test wrote in place
of a pinned one (as run_with_tiny_checksums.py does for MNIST)."""

import json
from pathlib import Path
import sys

if __package__ in (None, ""):  # Run as `python tests/run_with_pins.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position

from experiments.runner import cli as main  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import files  # pylint: disable=g-import-not-at-top,wrong-import-position

if __name__ == "__main__":
  files.SHA256.update(json.loads(Path(sys.argv.pop(1)).read_text()))
  app.run(main.main, flags_parser=main.parse_flags)
