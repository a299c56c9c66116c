r"""Downloads a data set's canonical files into <data_dir>/<dataset>/.

  python scripts/download_data.py {mnist,fashion_mnist,binarized_mnist} [--data_dir DIR]

data_dir: --data_dir, else $LNORM_DATA_DIR, else ~/.cache/lnorm/data. Each file
is fetched from the first mirror that answers, written to a temporary file in
the target directory, checked against the digest of its uncompressed content
and only then renamed into place, so an interrupted or failed run leaves no
partial file. Files already present and valid are skipped (--force refetches).
Errors: one line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import http.client
import os
from pathlib import Path
import sys
import tempfile
import urllib.error
import urllib.request
from typing import Callable
import zlib

if __package__ in (None, ""):  # Run as `python scripts/download_data.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lnorm.data import files  # pylint: disable=wrong-import-position

from lnorm.data import binarized_mnist, mnist  # pylint: disable=g-import-not-at-top,wrong-import-position

_TIMEOUT_S = 60
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Dataset:
  mirrors: tuple[str, ...]   # base URLs ending in "/", tried in order
  digests: dict[str, str]    # file name -> hex digest of its uncompressed bytes
  algorithm: str             # hashlib name of the digest


def _idx_digests(name: str) -> dict[str, str]:
  return {f"{stem}.gz": md5 for stem, md5 in mnist.MD5[name].items()}


DATASETS: dict[str, Dataset] = {
    "mnist": Dataset(
        mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/",
                 "https://storage.googleapis.com/cvdf-datasets/mnist/"),
        digests=_idx_digests("mnist"), algorithm="md5"),
    "fashion_mnist": Dataset(
        mirrors=("https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/"
                 "master/data/fashion/",
                 "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"),
        digests=_idx_digests("fashion_mnist"), algorithm="md5"),
    # Larochelle & Murray's fixed binarization.
    "binarized_mnist": Dataset(
        mirrors=("http://www.cs.toronto.edu/~larocheh/public/datasets/binarized_mnist/",),
        digests=dict(binarized_mnist.SHA256),
        algorithm="sha256"),
}


class DownloadError(Exception):
  """Ends the script with a one-line message."""


def _one_line(e: BaseException) -> str:
  return " ".join(str(e).split()) or type(e).__name__


def _digest(path: Path, algorithm: str, gzipped: bool) -> str:
  """Digest of the uncompressed content of ``path``."""
  h = hashlib.new(algorithm)
  opener = gzip.open if gzipped else open
  with opener(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
  return h.hexdigest()


def _is_valid(path: Path, algorithm: str, want: str, gzipped: bool) -> bool:
  try:
    return _digest(path, algorithm, gzipped) == want
  except (OSError, EOFError, zlib.error):  # gzip.BadGzipFile is an OSError.
    return False


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _fetch(url: str, directory: Path, name: str) -> Path:
  """Downloads ``url`` to a temporary file in ``directory``; returns its path."""
  fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
  try:
    with os.fdopen(fd, "wb") as out:
      os.fchmod(out.fileno(), 0o666 & ~_umask())  # Not mkstemp's 0600.
      with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as r:
        while chunk := r.read(_CHUNK):
          out.write(chunk)
  except BaseException:  # Also on Ctrl-C: never leave a partial file.
    Path(tmp).unlink(missing_ok=True)
    raise
  return Path(tmp)


def download_file(dataset: Dataset, name: str, directory: Path) -> str:
  """Puts a valid ``directory/name`` in place; returns where it came from."""
  want = dataset.digests[name]
  errors = []
  for base in dataset.mirrors:
    url = base + name
    try:
      tmp = _fetch(url, directory, name)
    except (OSError, http.client.HTTPException, ValueError) as e:  # URLError is an OSError.
      errors.append(f"{url}: {_one_line(e)}")
      continue
    try:
      if _is_valid(tmp, dataset.algorithm, want, name.endswith(".gz")):
        os.replace(tmp, directory / name)
        return url
      errors.append(f"{url}: wrong {dataset.algorithm} of the uncompressed content")
    finally:
      tmp.unlink(missing_ok=True)
  raise DownloadError(f"cannot download {name}: " + "; ".join(errors))


def download(name: str, data_dir: str | None = None, force: bool = False,
             log: Callable[[str], None] = print) -> Path:
  """Fetches every file of data set ``name``; returns its directory."""
  dataset = DATASETS[name]
  directory = files.resolve_data_dir(data_dir) / name
  try:
    directory.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise DownloadError(f"cannot create {directory}: {_one_line(e)}") from e
  for file_name, want in dataset.digests.items():
    path = directory / file_name
    if (not force and path.is_file()
        and _is_valid(path, dataset.algorithm, want, file_name.endswith(".gz"))):
      log(f"{path}: present and valid")
      continue
    url = download_file(dataset, file_name, directory)
    log(f"{path}: downloaded from {url}")
  return directory


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("dataset", choices=sorted(DATASETS))
  parser.add_argument("--data_dir", default=None,
                      help=f"default: ${files.DATA_DIR_ENV}, else {files.DEFAULT_DATA_DIR}")
  parser.add_argument("--force", action="store_true",
                      help="download even the files that are present and valid")
  args = parser.parse_args(argv)
  try:
    download(args.dataset, args.data_dir, args.force)
  except (DownloadError, OSError) as e:
    print(f"error: {_one_line(e)}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    print("error: interrupted; no partial file was left", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
