"""IAM-OnDB (Liwicki & Bunke 2005) lines as Graves' (2013) pen offsets and text.

Files, in ``<data_dir>/iam_ondb/`` (data_dir resolved as for MNIST:
``data_dir``, else ``$LNORM_DATA_DIR``, else ``~/.cache/lnorm/data``):

* ``lineStrokes-all.tar.gz`` or the extracted ``lineStrokes/``: one
  ``<form>-NN.xml`` per handwritten line, a ``<StrokeSet>`` of ``<Stroke>``s of
  ``<Point x y time>`` (integer pen coordinates);
* ``ascii-all.tar.gz`` or the extracted ``ascii/``: one ``<form>.txt`` per form;
  line NN of the part after ``CSR:`` is the text of ``<form>-NN.xml``. A run of
  ``%`` in it is a line break: in a08-551z, the one form with one here, CSR
  line 8 "weeks to have a broken ankle bone %%%%%%%%%%% pinned." is the text
  of 08 and of 09, whose strokes are the one word "pinned."; a line of ``%``
  alone is a break with no text of its own.

An archive wins over its folder. An archive is checked against the SHA-256 of
the archive file (``SHA256``), a folder against a digest of its files' names
and contents (``CONTENT_SHA256``, see ``content_digest``), which is what the
archive holds. Lines without a transcription (no ascii file, no CSR section, or
fewer CSR lines than NN) are skipped and counted (7 of the 12,195 here, all in
z01-000z), and so are lines whose text is the transcription tool's placeholder
"Please Enter Transcription here" (``placeholders``; 2 here, z00-001-01 and
z01-000z-01).

A line of N points p_1..p_N becomes N-1 rows ``(dx, dy, eos)``: row t is
p_{t+1} - p_t and eos = 1 if p_{t+1} is the last point of its stroke (the pen
lifts after it). The first point's position is dropped: as an offset it would
always be (0, 0), a point the density could make arbitrarily likely. But where
the first stroke is that one point (a tap before the writing; 353 lines here),
its pen lift would have no row to carry it, so the point is kept: the line
starts with a row (0, 0, 1) and has N rows (a (0, 0) move, which also occurs
wherever a point repeats, 112,819 rows here). So every stroke's last point,
and no other, has eos = 1. dx and dy are divided by their standard deviations
over the training split's rows (``IamOnDB.scale``), without centring, so that
(0, 0) still means "no move".
y grows downwards, as the whiteboard records it.

Text: the CSR line stripped, as ids over ``ALPHABET`` (57 symbols, the size of
the paper's window vectors): id 0 for every character not in it, then space,
a-z, A-Z and the three most frequent other characters of the transcriptions
('.', ',', '"'). Digits and the rarer punctuation map to 0.

Split by form id (``a01-000u``; all its lines on one side): if
``trainset.txt``, ``testset_v.txt``, ``testset_t.txt`` and ``testset_f.txt`` (the
IAM-OnDB-t1 task files, one form or line id a line) lie beside the archives,
train = trainset + testset_t, valid = testset_v, test = testset_f (Graves also
trained on testset_t, the larger validation set, and stopped early on
testset_v; he trained on testset_f too, we keep it as the test set). Otherwise
a form goes to test if the first 8 hex digits of SHA-256(form id) mod 100 are
below ``TEST_PERCENT``, to valid if below ``TEST_PERCENT + VALID_PERCENT``, else
to train: deterministic, and a form's side does not depend on the others. On
the files here that gives 9,688 / 1,230 / 1,268 lines in 1,378 / 170 / 180
forms, 6,075,027 / 754,418 / 809,774 rows (train / valid / test), and scales
of 42.17 and 37.14 pen units for dx and dy.

Parsing the 12,195 XML files takes 30 s of CPU (two minutes on a loaded
2-core machine), loading the cache a few seconds, so the parsed rows are
cached in ``<cache_dir>/iam_ondb/parsed-<key>.npz``, the key hashed from the
sources' checksums and ``READER_VERSION`` (``cache_key``: a cache an older
reader wrote is not read); cache_dir is ``cache_dir``, else
``$LNORM_CACHE_DIR``, else ``$XDG_CACHE_HOME/lnorm``, else ``~/.cache/lnorm``
(as the native kernels').
The cache holds the whole database: it must stay out of the repository.
It is written to a temporary file and renamed into place (a kill never
leaves half a cache); every array of it is read back in full, so that the
zip's CRCs are checked, and its shapes are checked against each other. A
damaged cache is parsed again and rewritten, with a one-line notice naming
it; a cache folder that cannot be written is found before the parse (not
after it) and skipped with a one-line warning: the run goes on, parsing
every time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
import re
from typing import Iterator, Mapping
import xml.etree.ElementTree as ET
import zipfile
import zlib

import numpy as np

from lnorm.data import DataError
from lnorm.data.files import (atomic_write, note, reason, resolve_data_dir, sha256_file, tar_files,
                              unwritable)

NAME = "iam_ondb"
SPLITS = ("train", "valid", "test")
STROKES, ASCII = "lineStrokes", "ascii"
ARCHIVES = {STROKES: "lineStrokes-all.tar.gz", ASCII: "ascii-all.tar.gz"}
# SHA-256 of the archive files, as in the data's README.
SHA256 = {
    STROKES: "a534657670658387ccd0002a4791012a81feedc5207661fa0a0519ecef3937b7",
    ASCII: "5459ac4fb2de6179e4f698df1caf8f9e3f6cb94f88badd13d837bd53fbd98a8c",
}
# content_digest of the extracted folders (computed from the archives above).
CONTENT_SHA256 = {
    STROKES: "7e472220c7654cc204f7dddc4663c859392571993725a1734db661ce5f74def0",
    ASCII: "822dd3220b40e4e42e14ce4d7b0c4fe73edba5d0df9865d91c0fc2ded047a071",
}
SPLIT_FILES = {"train": ("trainset.txt", "testset_t.txt"), "valid": ("testset_v.txt",),
               "test": ("testset_f.txt",)}
TEST_PERCENT, VALID_PERCENT = 10, 10
UNKNOWN = 0
ALPHABET = ("\0 abcdefghijklmnopqrstuvwxyz"
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ" '.,"')
NUM_CHARS = len(ALPHABET)
assert NUM_CHARS == 57
CACHE_VERSION = 1  # the cache file's layout
# What the parse makes of the files, in the cache key so that a cache an older
# reader wrote is parsed again: bump it whenever the lines, texts or rows change.
# 1 kept '%' runs in the text, read the placeholder as text and dropped the pen
# lift of a first stroke of one point (see the module doc).
READER_VERSION = 2
# The transcription tool's default text, left where nobody transcribed the line.
PLACEHOLDER = "please enter transcription here"

_CHAR_ID = {ch: i for i, ch in enumerate(ALPHABET) if i != UNKNOWN}
_BREAK = re.compile(r"\s*%+\s*")
_LINE_FILE = re.compile(r"^(?P<form>[a-z0-9]+-[a-z0-9]+)-(?P<nn>\d+)\.xml$")
_HOW = ("IAM-OnDB is not downloadable by script: register with the FKI group of "
        "the University of Bern (IAM On-Line Handwriting Database) and put "
        f"{ARCHIVES[STROKES]} and {ARCHIVES[ASCII]} (or the extracted lineStrokes/ "
        "and ascii/) in {where}, or point LNORM_DATA_DIR or data_dir elsewhere")


def encode(text: str) -> np.ndarray:
  """int32 ids over ALPHABET; characters outside it are UNKNOWN."""
  return np.asarray([_CHAR_ID.get(ch, UNKNOWN) for ch in text], np.int32)


def decode(ids) -> str:
  return "".join("?" if i == UNKNOWN else ALPHABET[i] for i in np.asarray(ids).tolist())


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
  if cache_dir is not None and str(cache_dir).strip():
    return Path(cache_dir).expanduser()
  if os.environ.get("LNORM_CACHE_DIR"):
    return Path(os.environ["LNORM_CACHE_DIR"]).expanduser()
  base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
  return Path(base) / "lnorm"


def form_of(line_id: str) -> str:
  """'a01-000u-01' -> 'a01-000u'."""
  return line_id.rsplit("-", 1)[0]


def hash_split(form_id: str) -> str:
  r = int(hashlib.sha256(form_id.encode()).hexdigest()[:8], 16) % 100
  return "test" if r < TEST_PERCENT else "valid" if r < TEST_PERCENT + VALID_PERCENT else "train"


# ------------------------------------------------------------------ sources


@dataclasses.dataclass(frozen=True)
class _Source:
  """One component (lineStrokes or ascii): an archive or a folder."""
  kind: str
  path: Path
  is_archive: bool

  def members(self) -> Iterator[tuple[str, bytes]]:
    """(path relative to the component's parent, bytes) of every file, sorted."""
    if not self.is_archive:
      root = self.path.parent
      for p in sorted(self.path.rglob("*")):
        if p.is_file():
          yield p.relative_to(root).as_posix(), p.read_bytes()
      return
    # Read to the end of the gzip stream: its CRC is checked even without
    # the archive's SHA-256 (verify=False).
    yield from tar_files(self.path, f"delete it and {_how(self.path.parent)}")


def _how(where: Path) -> str:
  return _HOW.format(where=where)


def _find_source(directory: Path, kind: str) -> _Source:
  archive, folder = directory / ARCHIVES[kind], directory / kind
  if archive.is_file():
    return _Source(kind, archive, True)
  if folder.is_dir():
    return _Source(kind, folder, False)
  raise DataError(f"{archive} not found (nor {folder}/); {_how(directory)}")


def content_digest(members: Iterator[tuple[str, bytes]]) -> str:
  """SHA-256 over each file's relative path and the SHA-256 of its bytes, in
  sorted order: the same for an archive and its extracted folder."""
  h = hashlib.sha256()
  for name, data in sorted(members):
    h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
  return h.hexdigest()


def _checksum(src: _Source, verify: bool, checksums: Mapping[str, str] | None) -> str:
  """The source's checksum (archive SHA-256 or content digest), verified."""
  got = sha256_file(src.path) if src.is_archive else content_digest(src.members())
  if verify:
    table = checksums if checksums is not None else (SHA256 if src.is_archive else CONTENT_SHA256)
    want = table.get(src.kind, "")
    what = "SHA-256" if src.is_archive else "content digest"
    if not want:
      raise DataError(f"{src.path}: no {what} known for it")
    if got != want.lower():
      raise DataError(f"{src.path}: {what} is {got}, expected {want} (truncated, corrupt "
                      f"or a different version); replace it: {_how(src.path.parent)}")
  return got


# ------------------------------------------------------------------ parsing


def csr_lines(text: str) -> list[str] | None:
  """The lines after 'CSR:', broken at runs of '%', stripped, blank ones
  dropped; None without a CSR section."""
  _, sep, rest = text.partition("CSR:")
  if not sep:
    return None
  return [part for l in rest.splitlines() for part in _BREAK.split(l.strip()) if part]


def is_placeholder(text: str) -> bool:
  return text.strip().lower() == PLACEHOLDER


def parse_strokes(data: bytes, name: str) -> np.ndarray:
  """One line's XML -> int32 (N-1, 3) rows (dx, dy, eos), or (N, 3) where the
  first stroke is one point; see the module doc."""
  try:
    root = ET.fromstring(data)
  except ET.ParseError as e:
    raise DataError(f"{name}: not valid XML ({reason(e)})") from e
  stroke_set = root if root.tag == "StrokeSet" else root.find("StrokeSet")
  if stroke_set is None:
    raise DataError(f"{name}: no <StrokeSet> element; not an IAM-OnDB lineStrokes file")
  xs, ys, eos = [], [], []
  try:
    for stroke in stroke_set.iter("Stroke"):
      pts = stroke.findall("Point")
      for k, p in enumerate(pts):
        xs.append(int(p.get("x")))
        ys.append(int(p.get("y")))
        eos.append(k == len(pts) - 1)
  except (TypeError, ValueError) as e:
    raise DataError(f"{name}: a <Point> without integer x and y ({reason(e)})") from e
  xy = np.stack([np.asarray(xs, np.int64), np.asarray(ys, np.int64)], -1).reshape(-1, 2)
  # One row per point, the offset from the point before; the first point's row,
  # (0, 0), is kept only to carry the pen lift of a first stroke of one point.
  rows = np.empty((len(xs), 3), np.int32)
  rows[:, :2] = np.diff(xy, axis=0, prepend=xy[:1])
  rows[:, 2] = np.asarray(eos, np.int32)
  return rows if eos and eos[0] else rows[1:]


@dataclasses.dataclass
class _Parsed:
  ids: list[str]
  texts: list[str]
  rows: np.ndarray  # int32 (P, 3): all lines' rows, concatenated
  starts: np.ndarray  # int64 (n + 1,)
  skipped: list[str]  # line ids without a transcription
  placeholders: list[str]  # line ids whose text is PLACEHOLDER
  num_files: int


def _parse(strokes: _Source, ascii_src: _Source) -> _Parsed:
  transcriptions: dict[str, list[str] | None] = {}
  for name, data in ascii_src.members():
    if name.endswith(".txt"):
      transcriptions[Path(name).stem] = csr_lines(data.decode("latin-1"))
  ids, texts, chunks, skipped, placeholders, num_files = [], [], [], [], [], 0
  for name, data in strokes.members():
    m = _LINE_FILE.match(Path(name).name)
    if m is None:
      continue
    num_files += 1
    where = f"{strokes.path}:{name}" if strokes.is_archive else str(strokes.path.parent / name)
    rows = parse_strokes(data, where)
    line_id = Path(name).stem
    csr = transcriptions.get(m["form"])
    nn = int(m["nn"])
    if csr is None or not 1 <= nn <= len(csr) or len(rows) == 0:
      skipped.append(line_id)
      continue
    if is_placeholder(csr[nn - 1]):
      placeholders.append(line_id)
      continue
    ids.append(line_id)
    texts.append(csr[nn - 1])
    chunks.append(rows)
  if num_files == 0:
    raise DataError(f"{strokes.path}: no <form>-NN.xml stroke files in it; "
                    f"{_how(strokes.path.parent)}")
  lengths = np.asarray([len(c) for c in chunks], np.int64)
  starts = np.concatenate([[0], np.cumsum(lengths)])
  rows = np.concatenate(chunks) if chunks else np.zeros((0, 3), np.int32)
  return _Parsed(ids, texts, rows, starts, skipped, placeholders, num_files)


def _save(path: Path, p: _Parsed) -> None:
  small = np.abs(p.rows).max(initial=0) < 2**15
  atomic_write(path, lambda f: np.savez(
      f, version=CACHE_VERSION, ids=np.asarray(p.ids), texts=np.asarray(p.texts),
      rows=p.rows.astype(np.int16 if small else np.int32), starts=p.starts,
      skipped=np.asarray(p.skipped, dtype=str),
      placeholders=np.asarray(p.placeholders, dtype=str), num_files=p.num_files))


def _load_cache(path: Path) -> _Parsed | None:
  """The cached parse; None if there is none, or if it is damaged (said in
  one line naming it: the caller parses again and rewrites it)."""
  if not path.is_file():
    return None
  try:
    with np.load(path, allow_pickle=False) as z:
      if int(z["version"]) != CACHE_VERSION:
        raise ValueError(f"layout version {int(z['version'])}, not {CACHE_VERSION}")
      p = _Parsed([str(s) for s in z["ids"]], [str(s) for s in z["texts"]],
                  z["rows"].astype(np.int32), z["starts"], [str(s) for s in z["skipped"]],
                  [str(s) for s in z["placeholders"]], int(z["num_files"]))
    n = len(p.ids)
    if (len(p.texts) != n or p.starts.shape != (n + 1,) or p.rows.ndim != 2
        or p.rows.shape[1] != 3 or p.starts[0] != 0 or p.starts[-1] != len(p.rows)
        or np.any(np.diff(p.starts) < 0)):
      raise ValueError("its arrays disagree in size")
  # A flipped bit shows as a bad CRC (BadZipFile), a bad header (ValueError,
  # KeyError) or a short read (EOFError, OSError).
  except (OSError, EOFError, KeyError, ValueError, TypeError, IndexError, zlib.error,
          zipfile.BadZipFile) as e:
    note(f"{path}: the IAM-OnDB parse cache is damaged ({reason(e)}); parsing the files "
         "again and rewriting it")
    return None
  return p


# ------------------------------------------------------------------ splits


@dataclasses.dataclass(frozen=True)
class Split:
  """The lines of one split: ``rows[starts[i]:starts[i+1]]`` is line i's
  float32 (N-1, 3) (dx / scale_x, dy / scale_y, eos)."""
  ids: tuple[str, ...]
  texts: tuple[str, ...]
  rows: np.ndarray
  starts: np.ndarray

  def __len__(self) -> int:
    return len(self.ids)

  def lengths(self) -> np.ndarray:
    return np.diff(self.starts)

  def line(self, i: int) -> np.ndarray:
    return self.rows[self.starts[i]:self.starts[i + 1]]


@dataclasses.dataclass(frozen=True)
class IamOnDB:
  train: Split
  valid: Split
  test: Split
  scale: np.ndarray  # float64 (2,): std of dx and dy over the training rows, pen units
  skipped: tuple[str, ...]  # line ids without a transcription
  placeholders: tuple[str, ...]  # line ids with the placeholder text, skipped too
  num_files: int  # stroke files read
  split_source: str  # 'official' or 'hash'
  from_cache: bool

  def counts(self) -> str:
    parts = [f"{s} {len(getattr(self, s)):,} lines / "
             f"{len({form_of(i) for i in getattr(self, s).ids}):,} forms / "
             f"{int(getattr(self, s).starts[-1]):,} rows" for s in SPLITS]
    return (f"IAM-OnDB: {self.num_files:,} stroke files, {len(self.skipped)} skipped "
            f"without a transcription, {len(self.placeholders)} with the placeholder text; "
            + "; ".join(parts) + f" ({self.split_source} split)")


def _official_split(directory: Path) -> dict[str, set[str]] | None:
  names = [n for files in SPLIT_FILES.values() for n in files]
  present = [n for n in names if (directory / n).is_file()]
  if not present:
    return None
  if len(present) != len(names):
    missing = sorted(set(names) - set(present))
    raise DataError(f"{directory}: has {', '.join(present)} but not {', '.join(missing)}; "
                    "add the missing IAM-OnDB-t1 split files or remove them all")
  out = {}
  for split, files in SPLIT_FILES.items():
    out[split] = {l.strip() for n in files
                  for l in (directory / n).read_text("latin-1").splitlines() if l.strip()}
  return out


def _assign(ids: list[str], official: dict[str, set[str]] | None) -> list[str | None]:
  if official is None:
    return [hash_split(form_of(i)) for i in ids]
  out = []
  for i in ids:
    sides = [s for s in SPLITS if i in official[s] or form_of(i) in official[s]]
    out.append(sides[0] if sides else None)  # a line in no list is left out
  return out


def cache_key(strokes_sum: str, ascii_sum: str, reader_version: int | None = None) -> str:
  """The parsed cache's name: the sources' checksums, the file layout and the
  reader's version (READER_VERSION unless given)."""
  v = READER_VERSION if reader_version is None else reader_version
  text = f"v{CACHE_VERSION}:r{v}:{strokes_sum}:{ascii_sum}"
  return hashlib.sha256(text.encode()).hexdigest()[:20]


def load(data_dir: str | os.PathLike[str] | None = None,
         cache_dir: str | os.PathLike[str] | None = None, verify: bool = True,
         checksums: Mapping[str, str] | None = None, use_cache: bool = True) -> IamOnDB:
  """The three splits, normalised. ``checksums`` ({'lineStrokes': ..., 'ascii':
  ...}) replaces the known ones; ``verify=False`` skips the check."""
  directory = resolve_data_dir(data_dir) / NAME
  if not directory.is_dir():
    raise DataError(f"{directory}/ not found; {_how(directory)}")
  strokes, ascii_src = _find_source(directory, STROKES), _find_source(directory, ASCII)
  official = _official_split(directory)
  key = cache_key(*(_checksum(s, verify, checksums) for s in (strokes, ascii_src)))
  cache = cache_root(cache_dir) / NAME / f"parsed-{key}.npz"
  parsed = _load_cache(cache) if use_cache else None
  from_cache = parsed is not None
  if parsed is None:
    # Whether the cache can be written is found now, not after the parse.
    why = unwritable(cache.parent) if use_cache else None
    if why is not None:
      note(f"warning: cannot write the IAM-OnDB parse cache in {cache.parent} ({why}); "
           "parsing without it, on every run (set LNORM_CACHE_DIR to a writable folder)")
    parsed = _parse(strokes, ascii_src)
    if use_cache and why is None:
      try:
        _save(cache, parsed)
      except OSError as e:  # a full disk, say: the parse is good, the cache is not needed
        note(f"warning: cannot write the IAM-OnDB parse cache {cache} ({reason(e)}); "
             "going on without it")
  sides = _assign(parsed.ids, official)
  train = [k for k, s in enumerate(sides) if s == "train"]
  if not train:
    raise DataError(f"{directory}: no training lines (of {len(parsed.ids)} with a transcription)")
  lines = np.split(parsed.rows, parsed.starts[1:-1])
  dxy = np.concatenate([lines[k][:, :2] for k in train]).astype(np.float64)
  scale = dxy.std(0)
  scale = np.where(scale > 0, scale, 1.0)
  factor = np.asarray([1 / scale[0], 1 / scale[1], 1.0], np.float32)

  def make(split: str) -> Split:
    idx = [k for k, s in enumerate(sides) if s == split]
    chunks = [lines[k] for k in idx]
    rows = (np.concatenate(chunks).astype(np.float32) * factor if chunks
            else np.zeros((0, 3), np.float32))
    starts = np.concatenate([[0], np.cumsum([len(c) for c in chunks], dtype=np.int64)])
    return Split(tuple(parsed.ids[k] for k in idx), tuple(parsed.texts[k] for k in idx),
                 rows, starts)

  return IamOnDB(make("train"), make("valid"), make("test"), scale, tuple(parsed.skipped),
                 tuple(parsed.placeholders), parsed.num_files,
                 "hash" if official is None else "official", from_cache)


# ------------------------------------------------------------------ batches


def batch(split: Split, indices, max_len: int, max_chars: int = 0) -> dict[str, np.ndarray]:
  """Padded arrays for lines ``indices``, each cut to its first ``max_len`` rows.

  ``inputs`` (B, T, 3) are the targets shifted right by one, a zero row first
  (Graves' x_1 = 0); ``targets`` (B, T, 3); ``mask`` (B, T) marks real rows.
  ``chars`` (B, U) int32 ids, ``char_mask`` (B, U). The text is the whole
  line's even when its rows are cut. ``max_chars`` > 0 fixes U (texts longer
  are cut), else U is the longest text (at least 1).
  """
  indices = np.asarray(indices, np.int64)
  B, T = len(indices), max_len
  ids = [encode(split.texts[i]) for i in indices]
  U = max_chars if max_chars > 0 else max([len(c) for c in ids] + [1])
  targets = np.zeros((B, T, 3), np.float32)
  mask = np.zeros((B, T), bool)
  chars = np.zeros((B, U), np.int32)
  char_mask = np.zeros((B, U), bool)
  for b, i in enumerate(indices):
    rows = split.line(i)[:T]
    targets[b, :len(rows)] = rows
    mask[b, :len(rows)] = True
    c = ids[b][:U]
    chars[b, :len(c)] = c
    char_mask[b, :len(c)] = True
  inputs = np.concatenate([np.zeros((B, 1, 3), np.float32), targets[:, :-1]], 1)
  return {"inputs": inputs, "targets": targets, "mask": mask, "chars": chars,
          "char_mask": char_mask}


def to_points(rows: np.ndarray, scale: np.ndarray) -> list[np.ndarray]:
  """Rows (N, 3) -> the strokes as absolute (x, y) arrays in pen units, the
  line starting at (0, 0); for drawing. A first row (0, 0, 1) is the line's
  first point, a stroke of its own."""
  rows = np.asarray(rows, np.float64)
  xy = np.cumsum(rows[:, :2] * np.asarray(scale, np.float64), 0)
  ends = np.flatnonzero(rows[:, 2] > 0.5) + 1
  if not (len(rows) and rows[0, 2] > 0.5 and not rows[0, :2].any()):
    xy, ends = np.concatenate([np.zeros((1, 2)), xy]), ends + 1  # the first point has no row
  return [s for s in np.split(xy, ends) if len(s)]
