"""Binarized MNIST with Larochelle & Murray's fixed binarization, as uint8
images [N, 28, 28] of 0s and 1s: 50,000 train, 10,000 valid, 10,000 test.

Sources (``load(source, data_dir)``):

* ``amat``: the original text files in ``<data_dir>/binarized_mnist/``::

      binarized_mnist_train.amat.gz   binarized_mnist_valid.amat.gz
      binarized_mnist_test.amat.gz

  or the same names without ``.gz`` (the ``.gz`` file wins when both exist).
  One image per line: 784 values "0"/"1" separated by single spaces, row-major,
  then "\\n", so every row is exactly 1568 bytes. The SHA-256 of each file's
  *uncompressed* bytes is checked against ``SHA256`` (the digests TFDS records
  for the official files). data_dir is resolved as for MNIST
  (``files.resolve_data_dir``); ``python scripts/download_data.py
  binarized_mnist --data_dir DIR`` fills it.
* ``tfds``: TensorFlow Datasets' ``binarized_mnist`` through
  ``tfds.data_source`` (array_record; reading needs no TensorFlow). Its
  ``validation`` split is our ``valid``.

The whole train file parses in well under a second (``np.frombuffer`` on the
bytes, no text parser), so no parsed copy is cached.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

from lnorm.data import DataError
from lnorm.data import mnist
# mnist's helpers, so that both loaders find files, gunzip and word errors alike.
from lnorm.data.files import check_digest, find, read, resolve_data_dir
from lnorm.data.mnist import how_to_get

NAME = "binarized_mnist"
SPLITS = ("train", "valid", "test")
SOURCES = ("amat", "tfds")
NUM_EXAMPLES = {"train": 50_000, "valid": 10_000, "test": 10_000}
IMAGE_SHAPE = mnist.IMAGE_SHAPE
NUM_PIXELS = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
ROW_BYTES = 2 * NUM_PIXELS  # 784 digits, 783 spaces and the newline.

# SHA-256 of the uncompressed files, as in TFDS's binarized_mnist/checksums.tsv.
SHA256: dict[str, str] = {
    "binarized_mnist_train.amat":
        "ad693b29f94c14277b095f5238ddefbbdaaae0939789dd2f4f0205278cee3e4d",
    "binarized_mnist_valid.amat":
        "1de3d397c40fe8eeb33dafd4099a1f665ec01e96d9be234aaeeac8a34930e2e2",
    "binarized_mnist_test.amat":
        "e6687bfea3f820c174f33b7865140b2a2dd2930ef786f35d45795fc193b5ab2c",
}
_TFDS_SPLIT = {"train": "train", "valid": "validation", "test": "test"}
_FORMAT = (f"expected {NUM_PIXELS} values 0 or 1 separated by single spaces, "
           f"{ROW_BYTES} bytes a line with its newline")


def file_stem(split: str) -> str:
  return f"{NAME}_{split}.amat"


def _check_splits(splits: tuple[str, ...]) -> None:
  for s in splits:
    if s not in SPLITS:
      raise DataError(f"unknown split {s!r}; choose from: {', '.join(SPLITS)}")


def parse_amat(data: bytes, path: Path | str, how: str = "") -> np.ndarray:
  """The images of one .amat file's bytes, uint8 [N, 28, 28] in {0, 1}.

  Raises DataError naming ``path`` and the first bad line (1-based).
  """
  suffix = f"; {how}" if how else ""
  buf = np.frombuffer(data, np.uint8)
  if buf.size == 0:
    raise DataError(f"{path}: the file is empty{suffix}")
  newline_at = np.flatnonzero(buf == ord("\n"))
  n_rows = buf.size // ROW_BYTES
  expected_at = np.arange(1, n_rows + 1) * ROW_BYTES - 1
  if buf.size % ROW_BYTES or not np.array_equal(newline_at, expected_at):
    if buf[-1] != ord("\n"):  # An unterminated last line is a line too.
      newline_at = np.append(newline_at, buf.size - 1)
    lengths = np.diff(newline_at, prepend=-1)
    wrong = np.flatnonzero(lengths != ROW_BYTES)
    bad = int(wrong[0]) if wrong.size else len(lengths) - 1
    line = bytes(buf[newline_at[bad] - lengths[bad] + 1:newline_at[bad] + 1])
    what = (f"has {len(line.split())} values in {len(line)} bytes" if wrong.size
            else "does not end with a newline")
    raise DataError(f"{path}: line {bad + 1} {what}; {_FORMAT}{suffix}")
  rows_NxR = buf.reshape(n_rows, ROW_BYTES)
  separators = rows_NxR[:, 1:-1:2]
  if (separators != ord(" ")).any():
    r, c = np.argwhere(separators != ord(" "))[0]
    raise DataError(f"{path}: line {r + 1}, byte {2 * c + 2} is "
                    f"{bytes([separators[r, c]])!r}, not a single space; {_FORMAT}{suffix}")
  digits_NxD = rows_NxR[:, 0::2]
  bad_NxD = (digits_NxD != ord("0")) & (digits_NxD != ord("1"))
  if bad_NxD.any():
    r, c = np.argwhere(bad_NxD)[0]
    raise DataError(f"{path}: line {r + 1}, value {c + 1} is "
                    f"{bytes([digits_NxD[r, c]]).decode('latin-1')!r}, not 0 or 1{suffix}")
  return (digits_NxD - ord("0")).reshape(n_rows, *IMAGE_SHAPE)


def load_amat(data_dir: str | os.PathLike[str] | None = None, verify: bool = True,
              checksums: Mapping[str, str] | None = None,
              splits: tuple[str, ...] = SPLITS) -> dict[str, np.ndarray]:
  """{'train': images, 'valid': ..., 'test': ...} from the .amat files, in file order.

  ``checksums`` (file name without .gz -> SHA-256 of its uncompressed bytes)
  replaces ``SHA256``; ``verify=False`` skips the check.
  """
  _check_splits(splits)
  root = resolve_data_dir(data_dir)
  directory = root / NAME
  how = how_to_get(NAME, root)
  table = (SHA256 if checksums is None else checksums) if verify else None
  out = {}
  for split in splits:
    stem = file_stem(split)
    path = find(directory, stem, how)
    data = read(path, how)
    if table is not None:
      check_digest(path, data, stem, table, "sha256", how)
    out[split] = parse_amat(data, path, how)
  return out


def load_tfds(data_dir: str | os.PathLike[str] | None = None,
              splits: tuple[str, ...] = SPLITS, download: bool = False
              ) -> dict[str, np.ndarray]:
  """The same dict via ``tfds.data_source('binarized_mnist')``, in TFDS's order.

  As ``mnist.load_tfds``: reading needs no TensorFlow, preparing the
  array_record copy does; ``data_dir`` empty or None is TFDS's default.
  """
  _check_splits(splits)
  out = {}
  for split in splits:
    name = _TFDS_SPLIT[split]
    images, _ = mnist.tfds_split(NAME, name, data_dir, download, other="amat")
    if images.max() > 1:
      raise DataError(f"TFDS {NAME} split {name!r}: pixel value {images.max()} is "
                      "not 0 or 1")
    out[split] = images
  return out


def load(source: str, data_dir: str | os.PathLike[str] | None = None,
         splits: tuple[str, ...] = SPLITS) -> dict[str, np.ndarray]:
  """``load_amat`` for source 'amat', ``load_tfds`` for source 'tfds'."""
  if source == "amat":
    return load_amat(data_dir, splits=splits)
  if source == "tfds":
    return load_tfds(data_dir, splits=splits)
  raise DataError(f"data_source={source!r} is not valid; choose one of: "
                  f"{', '.join(SOURCES)}")
