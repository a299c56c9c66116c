"""Byte-level (character-level) language-modelling data: a training, a
validation and a test stream of bytes (uint8), cut into windows of T + 1
bytes (T inputs, each followed by its target). Models predict bytes, not
Unicode characters: "bits per character" (bpc) here is bits per byte, as for
enwik8.

Two sources (``SOURCES``):

``novels`` (default): the 99 Project Gutenberg novels of
  ``<data_dir>/text/novels/novels.tar.gz`` (52.4 MB of UTF-8; see its
  README), read straight from the archive. Split by whole books,
  deterministically: in file-name order, book i is a *test* book if
  i % 20 == 0, a *validation* book if i % 20 == 10, else a training book
  (``TEST_BOOKS``, ``VALID_BOOKS``: 5 books each; after cleaning 1.66 MB of
  test and 2.00 MB of validation bytes, the other 89 books 48.7 MB of
  training bytes). Books are joined in
  name order, each followed by one blank line. Light, documented cleaning
  (``clean_book``): the short paragraphs (8 lines or fewer) starting in a
  book's first 40 lines that credit its transcribers (e-mail, web addresses, "Proofreading", "Internet Archive",
  "Project Gutenberg", ...) are dropped, and ``[Illustration...]`` and
  ``[Picture: ...]`` markers are cut; all else (title pages, chapter
  headings, hard-wrapped lines, _underscore_ italics) is kept, byte for byte.
``enwik8``: the first 10^8 bytes of an English Wikipedia XML dump (Hutter
  prize), the standard character-level benchmark, read from
  ``<data_dir>/enwik8`` (or ``enwik8.zip`` holding it) when present: the
  standard split, first 90M bytes train, next 5M validation, last 5M test.

``load(source, data_dir)`` returns a ``ByteSplits``. Batches: ``windows``
(non-overlapping windows, for epochs and evaluation) and ``random_windows``
(uniform random starts); both work on NumPy and JAX arrays, jitted or not.
Every file is verified before it is used: ``novels.tar.gz`` against its
pinned SHA-256 (``files.SHA256``, as its README gives it) and read to the end
of its gzip stream (its CRC); enwik8 against the MD5 of its 10^8 bytes that
its author publishes (``ENWIK8_MD5``), and ``enwik8.zip``'s member by its CRC
too. ``verify=False`` skips the pinned checks (a copy of one's own), never the
CRC. A folder of one's own books (``load_text_dir``) has no checksum: plain
text carries none. Every missing, unreadable or damaged file, or a split too
short for one window, is one ``DataError`` line naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import zipfile
import zlib
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

# From the package, which exports both before and after the loaders' shared
# helpers moved to lnorm/data/files.py.
from lnorm.data import DataError
from lnorm.data.files import check_sha256, reason, resolve_data_dir, tar_files, txt_files

NOVELS = "text/novels/novels.tar.gz"
ENWIK8 = "enwik8"
SOURCES = ("novels", "enwik8")
ENWIK8_SPLIT = (90_000_000, 5_000_000, 5_000_000)
# MD5 of enwik8's 10^8 bytes, as Matt Mahoney publishes it
# (http://mattmahoney.net/dc/textdata.html).
ENWIK8_MD5 = "a1fa5ffddb56f4953e226637dabbb36a"

# The rule (book i in name order: i % 20 == 0 test, == 10 validation),
# applied to the 99 novels; fixed here so that the split does not move if a
# book is added. tests/test_bytes_lm.py checks that the rule still gives them.
TEST_BOOKS = ("aanrud_longfrock.txt", "chopin_awakening.txt", "gaskell_night.txt",
              "jordan_mirror.txt", "poe_narrative.txt")
VALID_BOOKS = ("babcock_comingoftheking.txt", "eddy_allisfamily.txt",
               "ingraham_pillar.txt", "neal_mysteries.txt", "twain_tom.txt")
SPLIT_PERIOD, TEST_PHASE, VALID_PHASE = 20, 0, 10

# Transcriber and producer credits; only looked for near a book's start.
_CREDIT = re.compile(r"https?:|www\.|\w@\w|e-?mail|proofread|internet archive|"
                     r"project gutenberg|transcribed from|produced by|"
                     r"made available|digital library", re.I)
_CREDIT_LINES, _CREDIT_PARAGRAPH = 40, 8
# Illustration markers, which may span lines ("[Illustration:\n  caption]").
_MARKER = re.compile(r"\[(?:Illustration|Picture)\b[^\]]*\]\n?")


@dataclasses.dataclass(frozen=True)
class ByteSplits:
  train: np.ndarray   # uint8 (N,)
  valid: np.ndarray
  test: np.ndarray
  source: str         # what the numbers come from: "novels" or "enwik8"
  description: str    # one line: the files and the split

  def check(self, seq_len: int) -> None:
    """DataError unless every split holds at least one window of seq_len + 1."""
    for name in ("train", "valid", "test"):
      n = len(getattr(self, name))
      if n < seq_len + 1:
        raise DataError(f"{self.source}: the {name} split holds {n:,} bytes, fewer than "
                        f"one window of seq_len + 1 = {seq_len + 1}")


def split_rule(names: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
  """(train, valid, test) book names by the documented rule, in name order."""
  names = sorted(names)
  test = [n for i, n in enumerate(names) if i % SPLIT_PERIOD == TEST_PHASE]
  valid = [n for i, n in enumerate(names) if i % SPLIT_PERIOD == VALID_PHASE]
  held = set(test) | set(valid)
  return [n for n in names if n not in held], valid, test


def clean_book(text: str) -> str:
  """The book without its transcriber credits and illustration markers: a
  paragraph (lines between blank lines) that starts in the first 40 lines,
  has at most 8 lines and matches a credit is dropped; see the module doc."""
  lines = text.split("\n")
  kept: list[str] = []
  para: list[str] = []
  start = 0
  for i, line in enumerate(lines + [""]):
    if line.strip():
      if not para:
        start = i
      para.append(line)
      continue
    credit = (start < _CREDIT_LINES and len(para) <= _CREDIT_PARAGRAPH
              and any(_CREDIT.search(l) for l in para))
    if not credit:
      kept.extend(para)
    para = []
    kept.append(line)
  return _MARKER.sub("", "\n".join(kept[:-1]))


def _to_bytes(books: Sequence[tuple[str, str]]) -> np.ndarray:
  """Books (name, text), cleaned, each followed by a blank line, as uint8."""
  blob = "".join(clean_book(t).strip("\n") + "\n\n" for _, t in books).encode("utf-8")
  return np.frombuffer(blob, np.uint8)


def read_novels(archive: str | os.PathLike[str], verify: bool = True) -> dict[str, str]:
  """Book name -> text of every ``*.txt`` member of the tar.gz, after its
  SHA-256 is checked against ``files.SHA256[NOVELS]`` (unless ``verify`` is
  False) and with the archive read to its end (its CRC checked either way)."""
  path = Path(archive)
  how = "see text/novels/README.md of the shared data for what it should hold"
  if not path.is_file():
    raise DataError(f"{path} not found; {how}")
  if verify:
    check_sha256(path, NOVELS, how)
  books = {}
  for name, data in tar_files(path, how):
    if name.endswith(".txt"):
      books[Path(name).name] = data.decode("utf-8", errors="replace")
  if not books:
    raise DataError(f"{path}: no .txt books inside; {how}")
  return books


def split_books(books: dict[str, str], valid: Sequence[str], test: Sequence[str],
                source: str, where: str, name: str | None = None) -> ByteSplits:
  """Byte streams of the named validation and test books, the rest training.
  ``where`` (the path) names them in errors, ``name`` (default ``where``) in
  the description that records keep: a path inside the data folder, relative
  to it, so that no machine's path goes into committed results."""
  missing = sorted((set(valid) | set(test)) - set(books))
  if missing:
    raise DataError(f"{where}: held-out books {', '.join(missing)} not among its "
                    f"{len(books)} books")
  if set(valid) & set(test):
    raise DataError(f"books {sorted(set(valid) & set(test))} are both validation and test")
  held = set(valid) | set(test)
  train = [(n, books[n]) for n in sorted(books) if n not in held]
  if not train:
    raise DataError(f"{where}: every book is held out; none is left to train on")
  pick = lambda names: [(n, books[n]) for n in sorted(names)]
  return ByteSplits(
      _to_bytes(train), _to_bytes(pick(valid)), _to_bytes(pick(test)), source,
      f"{name or where}: {len(train)} training books; validation {', '.join(sorted(valid))}; "
      f"test {', '.join(sorted(test))}")


def load_novels(data_dir: str | os.PathLike[str] | None = None,
                valid: Sequence[str] = VALID_BOOKS, test: Sequence[str] = TEST_BOOKS,
                verify: bool = True) -> ByteSplits:
  """The novels, split by whole books (default: the documented rule)."""
  path = resolve_data_dir(data_dir) / NOVELS
  return split_books(read_novels(path, verify), valid, test, "novels", str(path), NOVELS)


def load_text_dir(directory: str | os.PathLike[str], valid: Sequence[str],
                  test: Sequence[str]) -> ByteSplits:
  """Any folder of ``*.txt`` books (UTF-8), split by the named books."""
  files = txt_files(directory, "the books as .txt files")
  books = {}
  for f in files:
    try:
      books[f.name] = f.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
      raise DataError(f"{f}: cannot read it ({reason(e)})") from e
  return split_books(books, valid, test, "text", str(Path(directory)))


def enwik8_path(data_dir: str | os.PathLike[str] | None = None) -> Path | None:
  """``<data_dir>/enwik8`` or ``<data_dir>/enwik8.zip``, whichever exists."""
  root = resolve_data_dir(data_dir)
  for p in (root / ENWIK8, root / f"{ENWIK8}.zip"):
    if p.is_file():
      return p
  return None


def load_enwik8(data_dir: str | os.PathLike[str] | None = None,
                split: tuple[int, int, int] = ENWIK8_SPLIT, md5: str | None = ENWIK8_MD5
                ) -> ByteSplits:
  """enwik8's standard split (``split`` bytes of train, valid, test, in file
  order; tests pass small ones for a small file), its bytes checked against
  ``md5`` (None: not checked)."""
  path = enwik8_path(data_dir)
  root = resolve_data_dir(data_dir)
  how = ("enwik8 is the first 10^8 bytes of the English Wikipedia dump of "
         "2006-03-03 (http://mattmahoney.net/dc/enwik8.zip); put enwik8 or "
         f"enwik8.zip in {root}")
  if path is None:
    raise DataError(f"{root / ENWIK8} not found; {how}")
  try:
    if path.suffix == ".zip":
      with zipfile.ZipFile(path) as z:
        raw = z.read(ENWIK8)
    else:
      raw = path.read_bytes()
  except (OSError, KeyError, zipfile.BadZipFile, zlib.error) as e:
    raise DataError(f"{path}: cannot read it ({reason(e)}); {how}") from e
  n_train, n_valid, n_test = split
  if len(raw) < sum(split):
    raise DataError(f"{path}: {len(raw):,} bytes, fewer than the {sum(split):,} of the "
                    f"split {n_train:,} / {n_valid:,} / {n_test:,}; is it truncated?")
  if md5 is not None and (got := hashlib.md5(raw).hexdigest()) != md5:
    raise DataError(f"{path}: MD5 of the enwik8 bytes is {got}, expected {md5} (truncated, "
                    f"corrupt or another file); {how}")
  data = np.frombuffer(raw, np.uint8)
  a, b = n_train, n_train + n_valid
  return ByteSplits(data[:a], data[a:b], data[b:b + n_test], "enwik8",
                    f"{path.name}: bytes [0, {a:,}) train, [{a:,}, {b:,}) validation, "
                    f"[{b:,}, {b + n_test:,}) test")


def load(source: str = "novels", data_dir: str | os.PathLike[str] | None = None
         ) -> ByteSplits:
  """``source`` is one of ``SOURCES``; ``enwik8`` needs its file."""
  if source not in SOURCES:
    raise DataError(f"source={source!r} is not valid; choose one of: {', '.join(SOURCES)}")
  return load_novels(data_dir) if source == "novels" else load_enwik8(data_dir)


# -- Windows. ------------------------------------------------------------------

def num_windows(n_bytes: int, seq_len: int) -> int:
  """Non-overlapping windows of seq_len + 1 bytes in a stream of n_bytes;
  window i is bytes [i T, i T + T + 1), so consecutive windows share one
  byte and every byte after the first is a target exactly once."""
  if n_bytes < seq_len + 1:
    raise DataError(f"{n_bytes:,} bytes are fewer than one window of seq_len + 1 = "
                    f"{seq_len + 1}")
  return (n_bytes - 1) // seq_len


def windows(data_N, idx_B, seq_len: int, offset=0):
  """(B, seq_len + 1) windows ``idx_B`` (see ``num_windows``), shifted by
  ``offset`` bytes (0 <= offset < n_bytes - num_windows * seq_len, e.g. a
  random shift per epoch). NumPy in, NumPy out; JAX in (jitted too), JAX out.
  Bytes stay uint8; the model casts them."""
  starts_B = idx_B * seq_len + offset
  return gather(data_N, starts_B, seq_len)


def gather(data_N, starts_B, seq_len: int):
  """Rows ``data_N[s : s + seq_len + 1]`` for each start s."""
  xp = np if isinstance(data_N, np.ndarray) else jnp
  return data_N[starts_B[:, None] + xp.arange(seq_len + 1)[None, :]]


def random_windows(key, data_N, batch_size: int, seq_len: int):
  """(B, seq_len + 1) windows at uniform random starts (a JAX key; jittable)."""
  starts_B = jax.random.randint(key, (batch_size,), 0, data_N.shape[0] - seq_len)
  return gather(data_N, starts_B, seq_len)


def eval_windows(data_N: np.ndarray, seq_len: int, max_windows: int = 0) -> np.ndarray:
  """The first ``max_windows`` (0 = all) non-overlapping windows, (M, T + 1):
  a fixed evaluation set; its bpc is the mean NLL over all M T targets / ln 2."""
  n = num_windows(len(data_N), seq_len)
  n = n if max_windows <= 0 else min(n, max_windows)
  return windows(np.asarray(data_N), np.arange(n), seq_len)


def bpc(nll_nats: float) -> float:
  """Bits per byte from a mean NLL in nats."""
  return nll_nats / math.log(2)
