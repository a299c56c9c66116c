"""Flickr8k (Hodosh, Young & Hockenmaier 2013) as distributed: images, the
captions of ``Flickr8k.token.txt`` and the official split lists; here the
CPU-scale stand-in for COCO of the order-embedding experiment, the 1,000
images of ``<data_dir>/flickr8k_1k/`` (read its README).

* ``Flickr8k.token.txt``: lines ``<image>.jpg#<k><white space><caption>``,
  k = 0..4. Split on the first white space after ``#k``, so that copies with
  a space instead of the tab read the same.
* ``Flickr_8k.{train,dev,test}Images.txt``: one image name a line.

``assign_splits``: an image goes to the split whose list names it; images
in no list go to train (9 of the 1,000: 753 + 9 train, 113 dev, 125 test).
Within a split images are in name order, which is the token file's order.
``scripts/extract_flickr8k_features.py`` turns it into Vendrov's layout
(``lnorm/data/retrieval.py``).

Checks: a folder named ``flickr8k_1k`` is the stand-in, whose files are
fixed: its caption file, the three split lists and its images (together,
``images_digest``) are verified against the SHA-256s of its README
(``SHA256``) before anything is parsed; a mismatch is one ``DataError`` line
naming the file. Another folder (a full Flickr8k of one's own) has no pinned
checksums; pass ``checksums`` to check it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
import re
from typing import Iterable, Mapping

from lnorm.data import DataError
from lnorm.data.retrieval import CAPTIONS_PER_IMAGE, SPLITS, reason

NAME = "flickr8k_1k"
TOKEN_FILE = "Flickr8k.token.txt"
SPLIT_FILES = {"train": "Flickr_8k.trainImages.txt", "dev": "Flickr_8k.devImages.txt",
               "test": "Flickr_8k.testImages.txt"}
IMAGES = "images"
# SHA-256 of the stand-in's files, as its README gives them; IMAGES: the
# digest of images/ (``images_digest``).
SHA256 = {
    TOKEN_FILE: "fc18d93dd1816b367a790e08c73c10b4ef1465102bad4f2412f19ea967c1344a",
    SPLIT_FILES["train"]: "1350b91ed1ff0062ddae239123d8fc3949ab6e5d490293b2eedb02c4df7aa5ef",
    SPLIT_FILES["dev"]: "1a602de5700452f5d869790e4d310c0e9d97d07d7be5601e524419331ef99b0e",
    SPLIT_FILES["test"]: "6461ca86cf5d4c810cbbc3a7dd5a4ef0900b7306aba17dfa9b96e93f3afc452d",
    IMAGES: "f543c64aa498fab56dd0b4a8f62846c2e8dddac76b7d89aa47f75816f1cba6cb",
}
_LINE = re.compile(r"^(?P<name>\S+?)#(?P<k>\d+)\s+(?P<caption>.*)$")


def _read_text(path: Path) -> str:
  if not path.is_file():
    raise DataError(f"{path} not found; the folder should hold Flickr8k's images/, "
                    f"{TOKEN_FILE} and the split lists ({', '.join(SPLIT_FILES.values())})")
  try:
    return path.read_text(encoding="utf-8")
  except (OSError, UnicodeDecodeError) as e:
    raise DataError(f"{path}: cannot read it ({reason(e)})") from e


def read_captions(path: str | os.PathLike[str]) -> dict[str, tuple[str, ...]]:
  """image name -> its captions in k order; every name must have k = 0..4
  exactly once."""
  path = Path(path)
  caps: dict[str, dict[int, str]] = {}
  for n, line in enumerate(_read_text(path).splitlines(), 1):
    if not line.strip():
      continue
    m = _LINE.match(line.strip())
    if m is None or not m["caption"].strip():
      raise DataError(f"{path}, line {n}: not '<image>#<k> <caption>'")
    k = int(m["k"])
    got = caps.setdefault(m["name"], {})
    if k in got:
      raise DataError(f"{path}, line {n}: a second caption #{k} of {m['name']}")
    got[k] = m["caption"].strip()
  for name, got in caps.items():
    if sorted(got) != list(range(CAPTIONS_PER_IMAGE)):
      raise DataError(f"{path}: {name} has captions #{sorted(got)}, not "
                      f"#0..{CAPTIONS_PER_IMAGE - 1}")
  return {name: tuple(got[k] for k in range(CAPTIONS_PER_IMAGE)) for name, got in caps.items()}


def read_split_lists(directory: str | os.PathLike[str]) -> dict[str, frozenset[str]]:
  """split -> the image names of its official list; the lists must be disjoint."""
  directory = Path(directory)
  lists = {s: frozenset(l.strip() for l in _read_text(directory / f).splitlines() if l.strip())
           for s, f in SPLIT_FILES.items()}
  for a in SPLITS:
    for b in SPLITS[SPLITS.index(a) + 1:]:
      both = sorted(lists[a] & lists[b])
      if both:
        raise DataError(f"{directory / SPLIT_FILES[b]}: {both[0]} is also in "
                        f"{SPLIT_FILES[a]} ({len(both)} images in both)")
  return lists


def assign_splits(images: Iterable[str], lists: Mapping[str, frozenset[str]]
                  ) -> dict[str, list[str]]:
  """split -> its images in name order; images in no list go to train."""
  out: dict[str, list[str]] = {s: [] for s in SPLITS}
  for name in sorted(images):
    out[next((s for s in SPLITS if name in lists.get(s, ())), "train")].append(name)
  return out


def image_files(directory: str | os.PathLike[str]) -> list[Path]:
  """The ``.jpg`` files of ``<directory>/images/``, in name order."""
  d = Path(directory) / IMAGES
  if not d.is_dir():
    raise DataError(f"{d}/ not found; it should hold the Flickr8k JPEG images")
  files = sorted(p for p in d.iterdir() if p.suffix.lower() == ".jpg" and p.is_file())
  if not files:
    raise DataError(f"{d}: no .jpg images")
  return files


def images_digest(files: Iterable[Path]) -> str:
  """SHA-256 of the sorted ``sha256sum`` lines of the files, as
  ``sha256sum -- *.jpg | LC_ALL=C sort | sha256sum`` computes it (names count)."""
  lines = sorted(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in files)
  return hashlib.sha256("".join(lines).encode()).hexdigest()


def verify(directory: Path, images: list[Path], checksums: Mapping[str, str]) -> None:
  """DataError, one line naming the file, unless every file of ``checksums``
  has its SHA-256 (images/: ``images_digest``)."""
  for name, want in checksums.items():
    path = directory / name
    try:
      if name == IMAGES:
        got = images_digest(images)
      else:
        _read_text(path)  # missing: the loader's own message
        got = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as e:
      raise DataError(f"{path}: cannot read it ({reason(e)})") from e
    if got != want:
      what = f"digest of its {len(images)} .jpg files" if name == IMAGES else "SHA-256"
      raise DataError(f"{path}: {what} is {got}, expected {want} (truncated, corrupt or "
                      f"another version; see the README of {NAME})")


def load(directory: str | os.PathLike[str], checksums: Mapping[str, str] | None = None
         ) -> tuple[dict[str, list[Path]], dict[str, tuple[str, ...]]]:
  """(split -> image files, image name -> 5 captions) of a Flickr8k folder;
  every image must have its 5 captions. ``checksums`` (file name, or IMAGES,
  -> SHA-256) default to ``SHA256`` for a folder named ``flickr8k_1k``, to
  none for another; ``{}`` checks nothing."""
  directory = Path(directory)
  images = image_files(directory)
  if checksums is None:
    checksums = SHA256 if directory.name == NAME else {}
  verify(directory, images, checksums)
  files = {p.name: p for p in images}
  captions = read_captions(directory / TOKEN_FILE)
  missing = sorted(set(files) - set(captions))
  if missing:
    raise DataError(f"{directory / TOKEN_FILE}: no captions for {missing[0]} "
                    f"({len(missing)} images without captions)")
  splits = assign_splits(files, read_split_lists(directory))
  return ({s: [files[n] for n in names] for s, names in splits.items()},
          {n: captions[n] for n in files})
