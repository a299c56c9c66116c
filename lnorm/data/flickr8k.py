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
"""

from __future__ import annotations

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


def load(directory: str | os.PathLike[str]
         ) -> tuple[dict[str, list[Path]], dict[str, tuple[str, ...]]]:
  """(split -> image files, image name -> 5 captions) of a Flickr8k folder;
  every image must have its 5 captions."""
  directory = Path(directory)
  files = {p.name: p for p in image_files(directory)}
  captions = read_captions(directory / TOKEN_FILE)
  missing = sorted(set(files) - set(captions))
  if missing:
    raise DataError(f"{directory / TOKEN_FILE}: no captions for {missing[0]} "
                    f"({len(missing)} images without captions)")
  splits = assign_splits(files, read_split_lists(directory))
  return ({s: [files[n] for n in names] for s, names in splits.items()},
          {n: captions[n] for n in files})
