"""Image-caption retrieval data in Vendrov et al.'s (2016) layout, for the
order-embedding experiment (paper §6.1, Table 2).

Layout of a folder (``prefix`` '' by default; Kiros's and Vendrov's own
files are named e.g. ``coco_train_ims.npy``, prefix 'coco_'):

* ``{prefix}{split}_ims.npy``: float (N, D), one row of CNN features an
  image, for split in train, dev, test;
* ``{prefix}{split}_caps.txt``: 5N lines, 5 captions an image in image
  order: caption k of image i is line 5 i + k.

Every file is checked before anything is returned: a missing split, a
caption file not 5 lines an image (or with an empty line), features that
are not a finite 2-D float array, a row count that disagrees with the
captions, or feature sizes that differ between splits, is one line naming
the file (``RetrievalDataError``: a ``DataError``, which the run machinery
prints as one line, and a ``ValueError``).

Tokens (``tokenize``): lower-cased words of letters and digits (with inner
hyphens and apostrophes, and the "'s" of a Treebank-tokenised caption);
punctuation is dropped. Vocabulary (``Vocab.build``): from the training
captions alone: id 0 PAD, 1 EOS, 2 UNK, then the words seen at least
``min_count`` times, most frequent first (ties alphabetical), cut to
``max_size`` ids in all. (Vendrov's code keeps every word of train and dev.)
Captions are int32 (5N, T): the tokens, then EOS, then PAD; ``lengths``
counts the tokens and the EOS (the GRU reads the EOS, as in Vendrov's code).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path
import re
import shutil
from typing import Iterable, Mapping, Sequence

import numpy as np

from lnorm.data import DataError
from lnorm.data.files import atomic_write, reason, swap_in

SPLITS = ("train", "dev", "test")
CAPTIONS_PER_IMAGE = 5
PAD, EOS, UNK = 0, 1, 2
SPECIALS = ("<pad>", "<eos>", "<unk>")

_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|'s\b")


class RetrievalDataError(DataError, ValueError):
  """A retrieval folder that is missing a file or does not hold together."""



def tokenize(caption: str) -> list[str]:
  """'A dog\\'s ball .' -> ['a', 'dog', "'s", 'ball']."""
  return _WORD.findall(caption.lower())


def features_path(directory: str | os.PathLike[str], split: str, prefix: str = "") -> Path:
  return Path(directory) / f"{prefix}{split}_ims.npy"


def captions_path(directory: str | os.PathLike[str], split: str, prefix: str = "") -> Path:
  return Path(directory) / f"{prefix}{split}_caps.txt"


@dataclasses.dataclass(frozen=True)
class Split:
  """One split as stored: features and captions, caption k of image i at 5 i + k."""
  images: np.ndarray         # float32 (N, D)
  captions: tuple[str, ...]  # (5N,)

  @property
  def image_of(self) -> np.ndarray:
    """int32 (5N,): the image of each caption."""
    return np.arange(len(self.captions), dtype=np.int32) // CAPTIONS_PER_IMAGE


@dataclasses.dataclass(frozen=True)
class Vocab:
  words: tuple[str, ...]  # id -> word; words[:3] == SPECIALS

  @classmethod
  def build(cls, captions: Iterable[str], min_count: int = 1,
            max_size: int | None = None) -> "Vocab":
    """The words of ``captions`` seen ``min_count`` times or more, most
    frequent first, at most ``max_size`` ids with the 3 specials."""
    if min_count < 1:
      raise ValueError(f"min_count={min_count} must be at least 1")
    if max_size is not None and max_size <= len(SPECIALS):
      raise ValueError(f"max_size={max_size} must exceed {len(SPECIALS)} (the specials)")
    counts = collections.Counter(t for c in captions for t in tokenize(c))
    kept = sorted(((w, n) for w, n in counts.items() if n >= min_count),
                  key=lambda wn: (-wn[1], wn[0]))
    if max_size is not None:
      kept = kept[:max_size - len(SPECIALS)]
    return cls(SPECIALS + tuple(w for w, _ in kept))

  def __len__(self) -> int:
    return len(self.words)

  @property
  def index(self) -> dict[str, int]:
    return {w: i for i, w in enumerate(self.words)}

  def encode(self, captions: Sequence[str], max_len: int | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """(int32 tokens (N, T), int32 lengths (N,)). Each row is its words'
    ids, EOS, then PAD; T is the longest row, or ``max_len`` (rows cut to
    ``max_len - 1`` words so that each still ends with EOS)."""
    if max_len is not None and max_len < 2:
      raise ValueError(f"max_len={max_len} must be at least 2 (a word and EOS)")
    index = self.index
    rows = []
    for c in captions:
      ids = [index.get(t, UNK) for t in tokenize(c)]
      if max_len is not None:
        ids = ids[:max_len - 1]
      rows.append(ids + [EOS])
    T = max_len if max_len is not None else max((len(r) for r in rows), default=1)
    tokens = np.full((len(rows), T), PAD, np.int32)
    for i, r in enumerate(rows):
      tokens[i, :len(r)] = r
    return tokens, np.asarray([len(r) for r in rows], np.int32)

  def decode(self, ids: Sequence[int]) -> str:
    out = []
    for i in ids:
      if i in (PAD, EOS):
        break
      out.append(self.words[i])
    return " ".join(out)


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
  """A split ready for training: features, caption ids and each caption's image."""
  images: np.ndarray    # float32 (N, D)
  tokens: np.ndarray    # int32 (5N, T)
  lengths: np.ndarray   # int32 (5N,), EOS included
  captions: tuple[str, ...]

  @property
  def num_images(self) -> int:
    return len(self.images)

  @property
  def image_of(self) -> np.ndarray:
    return np.arange(len(self.tokens), dtype=np.int32) // CAPTIONS_PER_IMAGE

  def batch(self, caption_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens (B, T), lengths (B,), image features (B, D)) of captions
    ``caption_idx``, each with its own image's features."""
    idx = np.asarray(caption_idx)
    return self.tokens[idx], self.lengths[idx], self.images[self.image_of[idx]]


@dataclasses.dataclass(frozen=True)
class Retrieval:
  splits: Mapping[str, EncodedSplit]
  vocab: Vocab

  def __getitem__(self, split: str) -> EncodedSplit:
    return self.splits[split]


def _how(directory: Path, prefix: str) -> str:
  return (f"{directory}/ should hold Vendrov's layout, {prefix}{{train,dev,test}}_ims.npy and "
          f"{prefix}{{train,dev,test}}_caps.txt (for the Flickr8k stand-in: "
          "python scripts/extract_flickr8k_features.py)")


def read_captions(path: Path) -> tuple[str, ...]:
  """The lines of a caption file, checked: 5 an image, none empty."""
  try:
    text = path.read_bytes().decode("utf-8")
  except UnicodeDecodeError as e:
    raise RetrievalDataError(f"{path}: not UTF-8 text ({reason(e)})") from e
  except OSError as e:
    raise RetrievalDataError(f"{path}: cannot read it ({reason(e)})") from e
  lines = tuple(line.strip() for line in text.splitlines())
  if not lines:
    raise RetrievalDataError(f"{path}: no captions")
  if len(lines) % CAPTIONS_PER_IMAGE:
    raise RetrievalDataError(
        f"{path}: {len(lines)} lines, not {CAPTIONS_PER_IMAGE} captions an image "
        f"({len(lines)} is not a multiple of {CAPTIONS_PER_IMAGE})")
  empty = next((n for n, line in enumerate(lines, 1) if not line), None)
  if empty is not None:
    raise RetrievalDataError(f"{path}, line {empty}: empty caption (5 lines an image, "
                             "in image order)")
  return lines


def read_features(path: Path) -> np.ndarray:
  """A 2-D finite float array from .npy, as float32."""
  try:
    a = np.load(path, allow_pickle=False)
  except (OSError, ValueError, EOFError) as e:
    raise RetrievalDataError(f"{path}: cannot read it as .npy ({reason(e)})") from e
  if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
    raise RetrievalDataError(f"{path}: a {a.dtype} array of shape {a.shape}; expected "
                             "float (images, features)")
  if not np.isfinite(a).all():
    raise RetrievalDataError(f"{path}: {int((~np.isfinite(a)).sum())} NaN or Inf values")
  return a.astype(np.float32, copy=False)


def load_split(directory: str | os.PathLike[str], split: str, prefix: str = "") -> Split:
  """One split's features and captions, checked against each other."""
  directory = Path(directory)
  ims, caps = features_path(directory, split, prefix), captions_path(directory, split, prefix)
  for p in (ims, caps):
    if not p.is_file():
      raise RetrievalDataError(f"{p} not found; {_how(directory, prefix)}")
  captions = read_captions(caps)
  images = read_features(ims)
  n = len(captions) // CAPTIONS_PER_IMAGE
  if len(images) != n:
    raise RetrievalDataError(
        f"{ims}: {len(images)} rows of image features, but {caps} has {len(captions)} "
        f"captions, {n} images at {CAPTIONS_PER_IMAGE} an image")
  return Split(images, captions)


def load_splits(directory: str | os.PathLike[str], splits: Sequence[str] = SPLITS,
                prefix: str = "") -> dict[str, Split]:
  """Every split of ``splits``; their feature sizes must agree."""
  out = {s: load_split(directory, s, prefix) for s in splits}
  dims = {s: sp.images.shape[1] for s, sp in out.items()}
  if len(set(dims.values())) > 1:
    first = splits[0]
    other = next(s for s in splits if dims[s] != dims[first])
    raise RetrievalDataError(
        f"{features_path(directory, other, prefix)}: {dims[other]} features an image, but "
        f"{features_path(directory, first, prefix).name} has {dims[first]}")
  return out


def load(directory: str | os.PathLike[str], *, min_count: int = 1,
         max_size: int | None = None, max_len: int | None = None,
         splits: Sequence[str] = SPLITS, prefix: str = "") -> Retrieval:
  """Every split encoded with the vocabulary of the training captions
  (``splits`` must hold 'train'). ``max_len`` cuts captions (EOS included);
  None pads each split to its own longest caption."""
  if "train" not in splits:
    raise ValueError(f"splits={tuple(splits)} has no 'train' to build the vocabulary from")
  raw = load_splits(directory, splits, prefix)
  vocab = Vocab.build(raw["train"].captions, min_count=min_count, max_size=max_size)
  enc = {}
  for s, sp in raw.items():
    tokens, lengths = vocab.encode(sp.captions, max_len)
    enc[s] = EncodedSplit(sp.images, tokens, lengths, sp.captions)
  return Retrieval(enc, vocab)


def save_split(directory: str | os.PathLike[str], split: str, images: np.ndarray,
               captions: Sequence[str], prefix: str = "") -> tuple[Path, Path]:
  """Writes one split in the layout, each file to a temporary name first and
  renamed into place, so that no reader sees half a file. Checked as
  ``load_split`` checks it."""
  directory = Path(directory)
  images = np.asarray(images, np.float32)
  captions = [" ".join(c.split()) for c in captions]  # one line each
  if images.ndim != 2 or len(captions) != CAPTIONS_PER_IMAGE * len(images):
    raise ValueError(f"{len(captions)} captions for features of shape {images.shape}; "
                     f"expected {CAPTIONS_PER_IMAGE} an image")
  if any(not c for c in captions):
    raise ValueError("an empty caption")
  directory.mkdir(parents=True, exist_ok=True)
  ims, caps = features_path(directory, split, prefix), captions_path(directory, split, prefix)
  atomic_write(ims, lambda f: np.save(f, images))
  atomic_write(caps, lambda f: f.write("".join(c + "\n" for c in captions).encode("utf-8")))
  return ims, caps


def save_splits(directory: str | os.PathLike[str],
                splits: Mapping[str, tuple[np.ndarray, Sequence[str]]],
                extra: Mapping[str, str] | None = None, prefix: str = "") -> Path:
  """Writes every split {name: (features, captions)} and ``extra`` {file
  name: text} into ``<directory>.tmp`` first, then puts that folder in
  place of ``directory``: an existing set is replaced only once the new one
  is complete, and an interrupted write leaves the old set (or none)."""
  final = Path(directory).expanduser()
  tmp = final.with_name(final.name + ".tmp")
  if tmp.exists():
    shutil.rmtree(tmp)
  tmp.mkdir(parents=True)
  for split, (images, captions) in splits.items():
    save_split(tmp, split, images, captions, prefix)
  for name, text in (extra or {}).items():
    (tmp / name).write_text(text, encoding="utf-8")
  return swap_in(tmp, final, final.with_name(final.name + ".old"))
