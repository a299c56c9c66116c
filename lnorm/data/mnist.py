"""MNIST and Fashion-MNIST as uint8 images [N, 28, 28] and int32 labels [N].

Sources (``load(source, name, data_dir)``):

* ``idx``: the canonical IDX files in ``<data_dir>/mnist/`` or
  ``<data_dir>/fashion_mnist/``::

      train-images-idx3-ubyte.gz   train-labels-idx1-ubyte.gz
      t10k-images-idx3-ubyte.gz    t10k-labels-idx1-ubyte.gz

  or the same names without ``.gz`` (the ``.gz`` file wins when both exist).
  The MD5 of each file's *uncompressed* bytes is checked against ``MD5``: the
  gzip header (file name, mtime) differs between mirrors, the content must not.
  Images and labels are in file order.
* ``tfds``: TensorFlow Datasets' ``data_source`` (array_record), see
  ``load_tfds``. Its example order is TFDS's, not the files'.

The IDX data_dir is, in order: the ``data_dir`` argument if non-empty,
``$LNORM_DATA_DIR``, else ``~/.cache/lnorm/data`` (``DEFAULT_DATA_DIR``).
``python scripts/download_data.py mnist --data_dir DIR`` fills it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from lnorm.data import DataError
from lnorm.data.files import DATA_DIR_ENV, check_digest, find, read, reason, resolve_data_dir

DATASETS = ("mnist", "fashion_mnist")
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10

Split = tuple[np.ndarray, np.ndarray]

# split -> (images file, labels file), without the optional ".gz".
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# MD5 of the uncompressed files. MNIST: LeCun's published values. Fashion-MNIST:
# computed from Debian's dataset-fashion-mnist, whose .gz files reproduce
# Zalando's published .gz MD5s once their original gzip header is restored.
MD5: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    },
    "fashion_mnist": {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    },
}

_IDX_UBYTE = 0x08  # IDX type code of unsigned bytes: magic = 0x0000 08 <ndim>.


def how_to_get(name: str, root: Path) -> str:
  return (f"get it with `python scripts/download_data.py {name} --data_dir "
          f"{root}`, or set {DATA_DIR_ENV} to a directory holding {name}/, "
          "or use data_source='tfds'")


def _check_name(name: str) -> None:
  if name not in DATASETS:
    raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}")


def _parse_idx(data: bytes, path: Path, ndim: int, how: str) -> np.ndarray:
  header = 4 + 4 * ndim
  expected_magic = (_IDX_UBYTE << 8) | ndim
  magic = int.from_bytes(data[:4], "big") if len(data) >= 4 else None
  if magic != expected_magic:
    found = "too short" if magic is None else f"magic 0x{magic:08x}"
    raise DataError(f"{path}: not an IDX file of {ndim}-d unsigned bytes ({found}, "
                    f"expected magic 0x{expected_magic:08x}); {how}")
  if len(data) < header:
    raise DataError(f"{path}: IDX header truncated ({len(data)} bytes); {how}")
  dims = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
  if ndim == 3 and dims[1:] != IMAGE_SHAPE:
    raise DataError(f"{path}: images are {dims[1]}x{dims[2]}, expected "
                    f"{IMAGE_SHAPE[0]}x{IMAGE_SHAPE[1]}; {how}")
  if len(data) != header + math.prod(dims):
    raise DataError(f"{path}: {len(data) - header} data bytes for dims {dims}, "
                    f"expected {math.prod(dims)}; {how}")
  # A writable copy: callers may shuffle or normalize in place.
  return np.frombuffer(data, np.uint8, offset=header).reshape(dims).copy()


def _load_idx(directory: Path, stem: str, ndim: int, checksums: Mapping[str, str] | None,
              how: str) -> np.ndarray:
  path = find(directory, stem, how)
  data = read(path, how)
  if checksums is not None:
    check_digest(path, data, stem, checksums, "md5", how)
  return _parse_idx(data, path, ndim, how)


def load_mnist(name: str = "mnist", data_dir: str | os.PathLike[str] | None = None,
               verify: bool = True, checksums: Mapping[str, str] | None = None
               ) -> dict[str, Split]:
  """{'train': (images, labels), 'test': ...} from the IDX files of ``name``.

  ``checksums`` (file name without .gz -> MD5 of its uncompressed bytes)
  replaces ``MD5[name]``; ``verify=False`` skips the check.
  """
  _check_name(name)
  root = resolve_data_dir(data_dir)
  directory = root / name
  how = how_to_get(name, root)
  table = (MD5[name] if checksums is None else checksums) if verify else None
  out = {}
  for split, (images_stem, labels_stem) in SPLIT_FILES.items():
    images = _load_idx(directory, images_stem, 3, table, how)
    labels = _load_idx(directory, labels_stem, 1, table, how)
    if len(images) != len(labels):
      raise DataError(f"{directory}: {images_stem} has {len(images)} images but "
                      f"{labels_stem} has {len(labels)} labels; {how}")
    if labels.size and labels.max() >= NUM_CLASSES:
      raise DataError(f"{directory / labels_stem}: label {labels.max()} is not in "
                      f"0..{NUM_CLASSES - 1}; {how}")
    out[split] = (images, labels.astype(np.int32))
  return out


def split_train_valid(images: np.ndarray, labels: np.ndarray, num_valid: int = 5000
                      ) -> tuple[Split, Split]:
  """(train, valid): the last ``num_valid`` examples are the validation set.

  The paper uses 55,000 / 5,000 without saying which 5,000; the tail of the
  training file is the common choice and needs no seed.
  """
  n = len(images)
  if len(labels) != n:
    raise DataError(f"{n} images but {len(labels)} labels")
  if not 0 <= num_valid < n:
    raise DataError(f"num_valid={num_valid} is not valid for {n} training examples; "
                    f"it must be in 0..{n - 1}")
  cut = n - num_valid
  return (images[:cut], labels[:cut]), (images[cut:], labels[cut:])


def load_tfds(name: str = "mnist", data_dir: str | os.PathLike[str] | None = None,
              splits: tuple[str, ...] = ("train", "test"), download: bool = False
              ) -> dict[str, Split]:
  """The same dict via ``tfds.data_source`` (array_record), in TFDS's order.

  Reading needs no TensorFlow. Preparing the array_record files
  (``download=True`` or ``tfds.builder(name, file_format='array_record')
  .download_and_prepare()``) does: TFDS 4.9 gunzips and encodes images with
  TF. ``data_dir`` empty or None means TFDS's default ($TFDS_DATA_DIR, else
  ~/tensorflow_datasets).
  """
  _check_name(name)
  out = {}
  for split in splits:
    images, examples = tfds_split(name, split, data_dir, download, other="idx")
    out[split] = (images, np.asarray([e["label"] for e in examples], np.int32))
  return out


def tfds_split(name: str, split: str, data_dir: str | os.PathLike[str] | None,
               download: bool, other: str) -> tuple[np.ndarray, list]:
  """uint8 images (N, 28, 28) and the examples of TFDS ``name``'s ``split``
  (``tfds.data_source``); ``other``: the data_source a failure suggests."""
  # Imported here: it takes seconds and the file sources do not need it.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  tfds_dir = str(data_dir) if data_dir is not None and str(data_dir).strip() else None
  where = tfds_dir or "the TFDS default data_dir"
  try:
    source = tfds.data_source(name, split=split, data_dir=tfds_dir, download=download)
    # One by one: the mock of tfds.testing.mock_data breaks __getitems__.
    examples = [source[i] for i in range(len(source))]
  # TFDS reports a missing or TFRecord-only copy as KeyError, ValueError or
  # NotImplementedError (a RuntimeError), and preparing without TF as an ImportError.
  except (ImportError, KeyError, OSError, RuntimeError, ValueError) as e:
    raise DataError(
        f"TFDS cannot load {name} split {split!r} from {where} ({reason(e)}); "
        "data_source='tfds' needs a copy prepared as array_record (preparing "
        f"needs TensorFlow), or use data_source='{other}'") from e
  if not examples:
    raise DataError(f"TFDS {name} split {split!r} in {where} is empty")
  images = np.stack([np.asarray(e["image"]) for e in examples])
  if images.shape[1:] not in (IMAGE_SHAPE, (*IMAGE_SHAPE, 1)) or images.dtype != np.uint8:
    raise DataError(f"TFDS {name} split {split!r}: images are {images.dtype} "
                    f"{images.shape[1:]}, expected uint8 {IMAGE_SHAPE}")
  return images.reshape(len(images), *IMAGE_SHAPE), examples


def load(source: str, name: str, data_dir: str | os.PathLike[str] | None = None
         ) -> dict[str, Split]:
  """``load_mnist`` for source 'idx', ``load_tfds`` for source 'tfds'."""
  if source == "idx":
    return load_mnist(name, data_dir)
  if source == "tfds":
    return load_tfds(name, data_dir)
  raise DataError(f"data_source={source!r} is not valid; choose 'idx' or 'tfds'")
