"""What every loader shares: where the data lives, finding and reading a
(possibly gzipped) file, checking a file against its pinned SHA-256, reading
a .tar.gz to its end, writing a derived cache safely, and the one-line reason
of an error.

Every file a loader reads is verified: against a pinned checksum where the
file is fixed (``SHA256`` here for the text corpora several loaders share;
each loader's own table for the rest), else at least by the archive's own
CRC (``tar_files`` reads a .tar.gz to the end of its gzip stream, which
``tarfile`` alone never does, so a damaged archive cannot pass unnoticed).
Hashing is cheap next to parsing (SHA-256 runs at about 2 GB/s here: 10 ms
for the 20 MB of novels), so it is done on every load, not cached.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence
import zlib

from lnorm.data import DataError

DATA_DIR_ENV = "LNORM_DATA_DIR"
DEFAULT_DATA_DIR = "~/.cache/lnorm/data"

# SHA-256 of the shared text corpora, as their READMEs in <data_dir>/text/
# give them, by path under data_dir: books, bytes_lm, news and cloze read
# them. "text/gutenberg" is the digest of its 17 *.txt files concatenated in
# name order (``concat_sha256``).
GUTENBERG = "text/gutenberg"
SHA256: dict[str, str] = {
    GUTENBERG: "233973b58a8595eb6ade3f433e474a1342b3eb0bb3b1cf8a8c4a721d07a61a4d",
    "text/abc.zip": "129bb6001beb828049a90a59b7dd3c2f0594a47012e48fc5177dfae38e658565",
    "text/novels/novels.tar.gz":
        "0d821d63e5a1714998b66aee914fe93cd0fc72c9fb8bccb87e22bcea628a610a",
    "text/news/bbc/bbc.tar.gz":
        "9a3acd8b71dbc1f320df55d0588ab55681439789faf9a38742799a6ed32fc1c9",
    **{f"text/news/reuters21578/reut2-{i:03d}.sgm.gz": digest for i, digest in enumerate((
        "0f77a45ac8e1f7e32a5f1d24bfdaf29efccb39c4cae575d95f8810512a14ba14",
        "8d13f8d173d40301cb80c8068607a55bb2f2b93a558ac8116a3b001e1061028f",
        "d8d5b1b87cbfcc595dbbe56f3cd26712fc9eb1f7abbb3fb1ac383d562241c0b1",
        "4e4f1b4ec01b74a282d95d24b29df096f0f8ca06ca7e3e5af2d20a68c9116c15",
        "0a6e120206a1104f10d6bad2ae5a9353f6890ede183f839ea87b0929ff2739d7",
        "01fe4b95a67360ea8547c8447a798c880dcf33f2c9a27b459c015b5c34cc63ce",
        "f0ef0ec8fc20648a1c6292bebc59b3a46751ccd79ffaa0b818753de017bc3f8b",
        "a2f579938e8a15394c2a4329028f08942aae586e89d23f3ae85eae1808d7810b",
        "4771ae6a9245adf372a8d7ed218eee1182c43ecb72923271b30dab8794ba2b42",
        "fd32400d3ed0820a05317b288ca67664ad7d23fc4b23e419b03bb6322de694ab",
        "35f618957db0bce7f85a21a1d2979b09f57f3d8e5cd3dad67f037a20e1a94ae8",
        "2d9d48e367ca4b005cd5609cf76e4efe913d67225b7e535908c9d30e82531caf",
        "d5a7374109b8b6cf7867789fec81ae15e4326fb4b2bf5e5ee2e1506076b7b4ac",
        "847e370b5d0e715492f81a73eb6f2e1c681cedcd642f7e9c5129efc2012e083b",
        "15a7b7d4c45996a87dd81ce6fb21beccd1f692b1814f617c0a5bc4036b8b4630",
        "9e8e36db762714d82a4e52e7a1b33878898543fa90dfc152bf30147067f5fa9b",
        "5b0a342c29169f5accfa7e619caaf5b947964618b0cdfdcbd30871449d3116f6",
        "1ee9d08c30e92b08f253ba82ce8dcdcd6e68fc9271f0a39dc091233a8f5fa140",
        "f4dc2dd103889eca875cecdc87e58785f46e577741b38e5fe4d74cd6734f1c8d",
        "a6ecbaefc2f796e8e532ee41076e566aefbdc7e3417f627e5d04652847df227b",
        "92b986cdce039f09c9df6e9c4bf3dec323668ee461cd08a6c46ed0dfbccfa4cd",
        "2d0006344683b79a30aa02e6e9602846498117bfd5740a0db8ae91e30fe422b2"))},
}


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


def txt_files(directory: str | os.PathLike[str], holds: str) -> list[Path]:
  """The ``*.txt`` files of ``directory``, in name order; a DataError if it is
  missing (``holds``: what it should hold, for the message) or has none."""
  d = Path(directory)
  if not d.is_dir():
    raise DataError(f"{d}/ not found; it should hold {holds}")
  files = sorted(f for f in d.glob("*.txt") if f.is_file())
  if not files:
    raise DataError(f"{d}: no .txt books found")
  return files


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


_DIGESTS = {"md5": "MD5", "sha256": "SHA-256"}


def check_digest(path: Path, data: bytes, stem: str, checksums: Mapping[str, str],
                 algorithm: str, how: str) -> None:
  """Raises a DataError unless ``data`` (the uncompressed content of ``path``)
  has the digest ``checksums[stem]`` (hashlib's ``algorithm``: md5, sha256)."""
  want = checksums.get(stem)
  if want is None:
    raise DataError(f"{path}: no checksum known for {stem}")
  got = hashlib.new(algorithm, data).hexdigest()
  if got != want.lower():
    raise DataError(f"{path}: {_DIGESTS[algorithm]} of the uncompressed content is {got}, "
                    f"expected {want} (corrupt or a different file); delete it and {how}")


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


# -- Checksums. ----------------------------------------------------------------

def sha256_file(path: Path) -> str:
  h = hashlib.sha256()
  with Path(path).open("rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def concat_sha256(paths: Iterable[Path]) -> str:
  """SHA-256 of the files' bytes, one after another (``cat a b | sha256sum``)."""
  h = hashlib.sha256()
  for p in paths:
    with Path(p).open("rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
  return h.hexdigest()


def check_sha256(path: Path, key: str, how: str = "", got: str | None = None) -> None:
  """DataError, one line naming ``path``, unless its SHA-256 (``got``, or
  computed here) is ``SHA256[key]``."""
  path = Path(path)
  want = SHA256.get(key)
  if want is None:
    raise DataError(f"{path}: no SHA-256 known for {key}, so it cannot be checked")
  try:
    got = got if got is not None else sha256_file(path)
  except OSError as e:
    raise DataError(f"{path}: cannot read it ({reason(e)})") from e
  if got != want.lower():
    raise DataError(f"{path}: SHA-256 is {got}, expected {want} (truncated, corrupt or "
                    f"another version)" + (f"; {how}" if how else ""))


def check_gutenberg(directory: Path, paths: Sequence[Path]) -> None:
  """DataError unless ``paths`` (all the folder's *.txt, in name order) are
  the 17 books whose concatenation ``SHA256[GUTENBERG]`` pins."""
  try:
    got = concat_sha256(paths)
  except OSError as e:
    raise DataError(f"{directory}: cannot read its books ({reason(e)})") from e
  check_sha256(directory, GUTENBERG, f"its {len(paths)} .txt files, concatenated in name "
               "order, should be the 17 books of text/README.md", got)


def tar_files(path: Path, how: str = "") -> Iterator[tuple[str, bytes]]:
  """(member name, bytes) of every regular file of a .tar.gz, in archive
  order; then the rest of the gzip stream is read, so that its CRC and
  length are checked: ``tarfile`` stops at the end-of-archive blocks, before
  the trailer, and a damaged archive can otherwise read as a slightly
  different one. Damage is a one-line DataError naming ``path``."""
  path = Path(path)
  try:
    with tarfile.open(path, "r:gz") as tar:
      for m in tar:
        if m.isfile():
          f = tar.extractfile(m)
          yield m.name, f.read() if f is not None else b""
      while tar.fileobj.read(1 << 20):
        pass
  # gzip.BadGzipFile (a CRC error) is an OSError; a truncated stream an EOFError.
  except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
    raise DataError(f"{path}: cannot read it, truncated or corrupt ({reason(e)})"
                    + (f"; {how}" if how else "")) from e


# -- Derived caches. -------------------------------------------------------------

def note(message: str) -> None:
  """One line on stderr: a cache rebuilt or skipped is news, not an error."""
  print(f"lnorm: {message}", file=sys.stderr, flush=True)


def unwritable(directory: Path) -> str | None:
  """None if a file can be created in ``directory``, else why not (one
  line). Tried for real (root ignores permission bits, and a read-only mount
  or a file in the way shows only on writing); the folders made for the
  try are removed again, so that nothing is left when the caller then fails."""
  directory = Path(directory)
  made = []
  try:
    d = directory
    while not d.exists():
      made.append(d)
      d = d.parent
    for d in reversed(made):
      d.mkdir()
    probe = directory / f".probe-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()
  except OSError as e:
    return reason(e)
  finally:
    for d in made:
      try:
        d.rmdir()
      except OSError:
        pass
  return None


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
  """``write(f)`` into a temporary file beside ``path``, flushed to disk and
  renamed over it: a reader (or a kill) never sees half a file."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  try:
    with open(tmp, "wb") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  finally:
    tmp.unlink(missing_ok=True)
