"""The data each run of a target reads, checked before the target's first run
starts: a target whose last runs lack their data (convnet's Fashion-MNIST
after three MNIST runs) stops at once, in one line that names the missing
file or folder and how to get it, instead of after hours of training.

What is checked here is that the files and folders are there; the loaders
check what is in them (checksums, formats) when the run reads them. A config
is read as its run records it (JSON, ``runs.config_dict``); each experiment's
entry lists (path, how to get it) for that config, in the loaders' layouts
(the module docstrings of lnorm/data/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from lnorm.data import binarized_mnist, cnn_questions, iam_ondb, mnist, senteval
from lnorm.data.files import DATA_DIR_ENV, resolve_data_dir

# lnorm/data/bytes_lm.py's NOVELS and books.py's GUTENBERG (those modules import
# JAX, which reproduce.py's own process does without); tests/test_reproduce.py
# checks that they agree.
NOVELS = "text/novels/novels.tar.gz"
GUTENBERG = "text/gutenberg"
ENWIK8 = ("enwik8", "enwik8.zip")
FEATURES_NAME = "flickr8k_1k_features"  # experiments/order_embeddings.py's
RETRIEVAL_SPLITS = ("train", "dev", "test")

Need = tuple[tuple[Path, ...], str]  # any one of the paths, and how to get it


def _idx(root: Path, name: str, stems) -> list[Need]:
  how = mnist.how_to_get(name, root)
  return [((root / name / f"{s}.gz", root / name / s), how) for s in stems]


def classifier(c: dict) -> list[Need]:
  if c.get("data_source", "idx") != "idx":
    return []  # TFDS finds (or fetches) its own
  root = resolve_data_dir(c.get("data_dir"))
  return _idx(root, c["dataset"], [s for pair in mnist.SPLIT_FILES.values() for s in pair])


def draw(c: dict) -> list[Need]:
  if c.get("data_source", "amat") != "amat":
    return []
  root = resolve_data_dir(c.get("data_dir"))
  return _idx(root, binarized_mnist.NAME, [binarized_mnist.file_stem(s)
                                           for s in binarized_mnist.SPLITS])


def handwriting(c: dict) -> list[Need]:
  d = resolve_data_dir(c.get("data_dir") or None) / iam_ondb.NAME
  how = ("IAM-OnDB is not downloadable by script: register with the FKI group of the "
         "University of Bern (IAM On-Line Handwriting Database) and put its archives in "
         f"{d}/, or set {DATA_DIR_ENV} (lnorm/data/iam_ondb.py)")
  return [((d / archive, d / kind), how) for kind, archive in iam_ondb.ARCHIVES.items()]


def reader(c: dict) -> list[Need]:
  root = resolve_data_dir(c.get("data_dir")) / c.get("questions_dir", "")
  how = ("build it with scripts/make_cloze.py as configs/reader.py's docstring says, or "
         f"set {DATA_DIR_ENV} to the folder that holds it")
  return [((cnn_questions.split_dir(root, s),), how) for s in cnn_questions.SPLITS]


def order_embeddings(c: dict) -> list[Need]:
  d = (Path(c["features_dir"]).expanduser() if c.get("features_dir")
       else iam_ondb.cache_root() / FEATURES_NAME)
  how = "extract them with `python scripts/extract_flickr8k_features.py`"
  p = c.get("prefix", "")
  return [((d / f"{p}{s}_{kind}",), how) for s in RETRIEVAL_SPLITS
          for kind in ("ims.npy", "caps.txt")]


def skipthoughts(c: dict) -> list[Need]:
  root = resolve_data_dir(c.get("data_dir"))
  how = f"see {root / 'text'}/README.md's source, or set {DATA_DIR_ENV}"
  if c.get("text_dir"):
    out = [((Path(c["text_dir"]).expanduser(),), "give text_dir a folder of *.txt books")]
  elif c.get("corpus", "gutenberg") == "novels":
    out = [((root / NOVELS,), how)]
  else:
    out = [((root / GUTENBERG,), how)]
  how = f"it should hold SentEval's data/downstream layout, or set {DATA_DIR_ENV}"
  for task in (t for t in c.get("eval_tasks", "").split(",") if t):
    files = (senteval.SICK_SPLITS.values() if task == "SICK"
             else senteval.CLASSIFICATION.get(task, ()))
    out += [((root / senteval.NAME / f,), how) for f in files]
  return out


def transformer(c: dict) -> list[Need]:
  root = resolve_data_dir(c.get("data_dir"))
  if c.get("data_source", "novels") == "enwik8":
    return [(tuple(root / n for n in ENWIK8), f"put enwik8 (or enwik8.zip) in {root}")]
  return [((root / NOVELS,), f"see {root / 'text'}/README.md, or set {DATA_DIR_ENV}")]


NEEDS: dict[str, Callable[[dict], list[Need]]] = {
    "pi_mnist": classifier, "convnet": classifier, "draw": draw, "handwriting": handwriting,
    "reader": reader, "order_embeddings": order_embeddings, "skipthoughts": skipthoughts,
    "transformer": transformer, "invariance": lambda c: []}


def missing(config: dict) -> list[Need]:
  """What ``config``'s run reads that is not there."""
  return [(paths, how) for paths, how in NEEDS[config["experiment"]](config)
          if not any(p.exists() for p in paths)]


def check(target: str, configs: list[dict]) -> None:
  """Stops (one line, exit 1) if any of ``configs`` lacks its data: the first
  missing path, how many more, and how to get it."""
  gone = {}
  for c in configs:
    for paths, how in missing(c):
      gone.setdefault(paths[0], how)
  if gone:
    (first, how), more = next(iter(gone.items())), len(gone) - 1
    sys.exit(f"error: {target} needs {first}" + (f" (and {more} more)" if more else "")
             + f", not found; {how}. Nothing was run")
