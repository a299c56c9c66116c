"""The five evaluation sets of the skip-thought experiment (paper §6.3, Table 3)
in SentEval's layout, ``<data_dir>/senteval/``:

* ``SICK/SICK_{train,trial,test_annotated}.txt``: tab-separated, a header line,
  then pair_ID, sentence_A, sentence_B, relatedness_score (1-5), entailment.
* ``MR/rt-polarity.{pos,neg}``, ``CR/custrev.{pos,neg}``,
  ``SUBJ/subj.{subjective,objective}``, ``MPQA/mpqa.{pos,neg}``: one sentence a
  line; the first file is label 1, the second label 0.

Every file is checked against its SHA-256 (``SHA256``) before it is parsed; a
missing or corrupt file is a one-line ``DataError`` naming it. Sentences are
returned as they are in the files (stripped); the encoder tokenises them.
The data_dir resolves as for MNIST (argument, ``$LNORM_DATA_DIR``, default).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from lnorm.data import DataError
from lnorm.data.files import reason, resolve_data_dir

NAME = "senteval"
CLASSIFICATION = {  # task -> (label-1 file, label-0 file)
    "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "CR": ("CR/custrev.pos", "CR/custrev.neg"),
    "SUBJ": ("SUBJ/subj.subjective", "SUBJ/subj.objective"),
    "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
SICK_SPLITS = {"train": "SICK/SICK_train.txt", "trial": "SICK/SICK_trial.txt",
               "test": "SICK/SICK_test_annotated.txt"}
TASKS = ("SICK",) + tuple(CLASSIFICATION)

SHA256: dict[str, str] = {
    "CR/custrev.neg": "ec94532766f6f962094841ab3bee2ad6f232f996c3756825a91e78bcc294750f",
    "CR/custrev.pos": "91a20a4ffeb5d38a39a4087bb247e16538aff21e7d621ae59738379f39f21732",
    "MPQA/mpqa.neg": "8da6e035fa4cea02f0555091096b29a6b3995ff0adf41fad25008dcee066b79e",
    "MPQA/mpqa.pos": "7487dbb74c77383e60b292845495163a9e21fb70a4fdacdda933413e43163f0d",
    "MR/rt-polarity.neg": "c4ac36eaa8adc8ee31c31f69594bfbe68d83ef5b6db53f1f19b28c0be52f3999",
    "MR/rt-polarity.pos": "34e5b0da2d491e46b700b00afe735aaae0962bcfe4f7f22b2d8077e714fa370f",
    "SICK/SICK_test_annotated.txt":
        "4c9aa1bb3c5bbf732520fe35b23c121739472a38eb47e7d5336e6df51896be02",
    "SICK/SICK_train.txt": "d07bdb73963dda1b2012f4d78c24044cd9503b1109218a518a481616973cf960",
    "SICK/SICK_trial.txt": "0d0786bd8671a0a70614f2f890b8ab24b3c24d1ccb624bcca87618091fbe4f11",
    "SUBJ/subj.objective": "d8ccd43f1674f1c17e4ab717564e3561cfb719b0db4cfb19e5677427c68ff8a1",
    "SUBJ/subj.subjective": "274c2ffe59c204dc4df779848561786f59a98cc20dda3cfdd7d9f76a4f730710",
}


def _how(root: Path) -> str:
  return (f"{root}/ should hold SentEval's data/downstream layout "
          f"(see ../shared/data/senteval/README.md), or set $LNORM_DATA_DIR")


def _lines(root: Path, rel: str, sha256: Mapping[str, str]) -> list[str]:
  path = root / rel
  if not path.is_file():
    raise DataError(f"{path} not found; {_how(root)}")
  try:
    raw = path.read_bytes()
  except OSError as e:
    raise DataError(f"{path}: cannot read it ({reason(e)})") from e
  got = hashlib.sha256(raw).hexdigest()
  if got != sha256[rel]:
    raise DataError(f"{path}: SHA-256 is {got}, expected {sha256[rel]} (truncated, corrupt "
                    "or another version)")
  # SentEval reads these as latin-1; SICK's test file has CRLF line ends.
  return raw.decode("latin-1").splitlines()


def _root(data_dir: str | os.PathLike[str] | None) -> Path:
  return resolve_data_dir(data_dir) / NAME


def load_classification(task: str, data_dir: str | os.PathLike[str] | None = None,
                        sha256: Mapping[str, str] = SHA256
                        ) -> tuple[list[str], np.ndarray]:
  """(sentences, int32 labels) of MR, CR, SUBJ or MPQA: one per line, label-1
  file first."""
  if task not in CLASSIFICATION:
    raise DataError(f"unknown task {task!r}; choose one of: {', '.join(CLASSIFICATION)}")
  root = _root(data_dir)
  sents, labels = [], []
  for label, rel in zip((1, 0), CLASSIFICATION[task]):
    # Blank lines stay (CR has 4, MPQA 3): SentEval keeps them, and the
    # published sizes count them.
    lines = [s.strip() for s in _lines(root, rel, sha256)]
    sents += lines
    labels += [label] * len(lines)
  return sents, np.asarray(labels, np.int32)


def load_sick(data_dir: str | os.PathLike[str] | None = None,
              sha256: Mapping[str, str] = SHA256
              ) -> dict[str, tuple[list[str], list[str], np.ndarray]]:
  """split -> (sentences A, sentences B, float32 relatedness scores)."""
  root = _root(data_dir)
  out = {}
  for split, rel in SICK_SPLITS.items():
    lines = _lines(root, rel, sha256)
    a, b, y = [], [], []
    for n, line in enumerate(lines[1:], start=2):
      if not line.strip():
        continue
      f = line.split("\t")
      try:
        a.append(f[1].strip())
        b.append(f[2].strip())
        y.append(float(f[3]))
      except (IndexError, ValueError) as e:
        raise DataError(f"{root / rel}, line {n}: not pair_ID, sentence_A, sentence_B, "
                        "score") from e
    out[split] = (a, b, np.asarray(y, np.float32))
  return out
