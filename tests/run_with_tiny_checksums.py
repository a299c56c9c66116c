"""``python tests/run_with_tiny_checksums.py CHECKSUMS.json <experiments.main flags>``:
the runner in a subprocess (so that a test can SIGKILL it), with the MNIST
checksum table replaced by that of the tiny files a test wrote."""

import json
import sys

from absl import app

from experiments.runner import cli as main
from lnorm.data import mnist

if __name__ == "__main__":
  mnist.MD5["mnist"] = json.loads(open(sys.argv.pop(1)).read())
  app.run(main.main, flags_parser=main.parse_flags)
