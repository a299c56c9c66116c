"""What every loader shares: where the data lives, finding and reading a
(possibly gzipped) file, and the one-line reason of an error."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path
import zlib

from lnorm.data import DataError

DATA_DIR_ENV = "LNORM_DATA_DIR"
DEFAULT_DATA_DIR = "~/.cache/lnorm/data"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
  """``data_dir`` if non-empty, else $LNORM_DATA_DIR, else DEFAULT_DATA_DIR."""
  for candidate in (data_dir, os.environ.get(DATA_DIR_ENV)):
    if candidate is not None and str(candidate).strip():
      return Path(candidate).expanduser()
  return Path(DEFAULT_DATA_DIR).expanduser()


def find(directory: Path, stem: str, how: str) -> Path:
  for path in (directory / f"{stem}.gz", directory / stem):
    if path.is_file():
      return path
  raise DataError(f"{directory / stem}.gz not found (nor {stem}); {how}")


def reason(e: BaseException) -> str:
  lines = str(e).strip().splitlines()
  return (lines[0] if lines else type(e).__name__)[:200]


def read(path: Path, how: str) -> bytes:
  try:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw
  # gzip.BadGzipFile is an OSError; a truncated stream is an EOFError.
  except (OSError, EOFError, zlib.error) as e:
    raise DataError(f"{path}: cannot read it ({reason(e)}); {how}") from e


def swap_in(tmp: Path, final: Path, old: Path) -> Path:
  """Replaces the folder ``final`` with the complete folder ``tmp`` (the
  previous one moved to ``old`` first, then removed), so that a reader never
  sees a half-written set; returns ``final``."""
  if final.exists():
    if old.exists():
      shutil.rmtree(old)
    os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old)
  else:
    os.replace(tmp, final)
  return final
