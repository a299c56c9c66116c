"""Tiny IDX data sets that tests write themselves: nothing is downloaded."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np

from lnorm.data import bytes_lm, mnist
from tests.pinned import pin

NUM = {"train": 7, "test": 3}
STEMS = {stem: (split, kind) for split, stems in mnist.SPLIT_FILES.items()
         for kind, stem in zip(("images", "labels"), stems)}


def idx_bytes(array: np.ndarray) -> bytes:
  header = bytes([0, 0, 0x08, array.ndim])
  header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
  return header + array.astype(np.uint8).tobytes()


def make_arrays(seed: int = 0, num: dict[str, int] = NUM
                ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  rng = np.random.default_rng(seed)
  return {split: (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                  rng.integers(0, 10, n, dtype=np.uint8)) for split, n in num.items()}


def write_dataset(root: Path, name: str = "mnist", gz: bool = True, seed: int = 0,
                  num: dict[str, int] = NUM
                  ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, str]]:
  """Writes tiny IDX files; returns the arrays and their checksum table."""
  arrays = make_arrays(seed, num)
  directory = root / name
  directory.mkdir(parents=True, exist_ok=True)
  checksums = {}
  for stem, (split, kind) in STEMS.items():
    data = idx_bytes(arrays[split][kind == "labels"])
    checksums[stem] = hashlib.md5(data).hexdigest()
    write_file(directory, stem, data, gz)
  return arrays, checksums


def write_file(directory: Path, stem: str, data: bytes, gz: bool) -> None:
  """``data`` as ``stem``, or gzipped as ``stem.gz`` (mtime 0: the same bytes each time)."""
  if gz:
    (directory / f"{stem}.gz").write_bytes(gzip.compress(data, mtime=0))
  else:
    (directory / stem).write_bytes(data)


def write_novels(root: Path, books: dict[str, str], monkeypatch=None) -> Path:
  """<root>/text/novels/novels.tar.gz holding novels/<name> for each of
  ``books``; with ``monkeypatch``, its SHA-256 pinned for the test (files.SHA256)."""
  path = root / bytes_lm.NOVELS
  path.parent.mkdir(parents=True, exist_ok=True)
  with tarfile.open(path, "w:gz") as tar:
    for name, text in books.items():
      data = text.encode("utf-8")
      info = tarfile.TarInfo(f"novels/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  if monkeypatch is not None:
    pin(monkeypatch, bytes_lm.NOVELS, path)
  return path
