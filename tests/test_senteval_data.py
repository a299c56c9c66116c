"""The SentEval-layout loaders (lnorm/data/senteval.py) on tiny files."""

import hashlib

import numpy as np
import pytest

from lnorm.data import DataError
from lnorm.data import senteval

SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"


def _tiny(tmp_path):
  """A tiny senteval/ folder and the SHA-256s of its files."""
  root = tmp_path / senteval.NAME
  content = {}
  for task, (pos, neg) in senteval.CLASSIFICATION.items():
    content[pos] = f"good {task} one\ngood {task} two\n\n"
    content[neg] = f"bad {task}\n"
  for i, rel in enumerate(senteval.SICK_SPLITS.values()):
    content[rel] = (f"{SICK_HEADER}\r\n1\tA man walks\tA man is walking\t4.{i}\tENTAILMENT\r\n"
                    "2\tA dog\tA cat sleeps\t1.5\tNEUTRAL\r\n")
  sha = {}
  for rel, text in content.items():
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)
    sha[rel] = hashlib.sha256(text.encode()).hexdigest()
  return sha


def test_classification_and_sick(tmp_path):
  sha = _tiny(tmp_path)
  s, y = senteval.load_classification("MR", tmp_path, sha)
  assert s == ["good MR one", "good MR two", "", "bad MR"]  # blank lines kept, as SentEval
  np.testing.assert_array_equal(y, [1, 1, 1, 0])
  d = senteval.load_sick(tmp_path, sha)
  assert set(d) == {"train", "trial", "test"}
  a, b, score = d["trial"]
  assert a == ["A man walks", "A dog"] and b == ["A man is walking", "A cat sleeps"]
  np.testing.assert_allclose(score, [4.1, 1.5], rtol=1e-6)


def test_checksum_mismatch_names_the_file(tmp_path):
  sha = _tiny(tmp_path)
  (tmp_path / senteval.NAME / "CR/custrev.neg").write_text("tampered\n")
  with pytest.raises(DataError, match=r"custrev\.neg: SHA-256 is [0-9a-f]{64}, expected") as e:
    senteval.load_classification("CR", tmp_path, sha)
  assert "\n" not in str(e.value)
  senteval.load_classification("MR", tmp_path, sha)  # the others still load


def test_missing_file_names_it(tmp_path, monkeypatch):
  sha = _tiny(tmp_path)
  (tmp_path / senteval.NAME / "SICK/SICK_trial.txt").unlink()
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path))
  with pytest.raises(DataError, match=r"SICK_trial\.txt not found") as e:
    senteval.load_sick(None, sha)
  assert "\n" not in str(e.value)
  with pytest.raises(DataError, match="unknown task"):
    senteval.load_classification("TREC", tmp_path, sha)


def test_bad_sick_line(tmp_path):
  sha = _tiny(tmp_path)
  rel = senteval.SICK_SPLITS["train"]
  text = f"{SICK_HEADER}\n1\tonly one sentence\n"
  (tmp_path / senteval.NAME / rel).write_text(text)
  sha[rel] = hashlib.sha256(text.encode()).hexdigest()
  with pytest.raises(DataError, match="line 2: not pair_ID"):
    senteval.load_sick(tmp_path, sha)


def test_real_checksums_are_the_readmes():
  assert len(senteval.SHA256) == 11
  assert set(senteval.SHA256) == ({f for fs in senteval.CLASSIFICATION.values() for f in fs}
                                  | set(senteval.SICK_SPLITS.values()))
