"""The .question reader and writer (lnorm/data/cnn_questions.py) on tiny files."""

import numpy as np
import pytest

from lnorm.data import DataError
from lnorm.data import cnn_questions as cq

TEXT = """http://www.cnn.com/2015/story.html

@entity1 said on monday that @entity0 would visit @entity2 . the talks start tuesday . @entity2 agreed .

@placeholder to visit @entity2

@entity0

@entity0:Barack Obama
@entity1:the White House
@entity2:Cuba
"""


def _q(url="u", passage="a @entity0 b .", query="@placeholder c", answer="@entity0",
       entities=(("@entity0", "X"),)):
  return cq.Question(url, tuple(passage.split()), tuple(query.split()), answer,
                     tuple(entities))


def test_parse_a_deepmind_file():
  q = cq.parse_question(TEXT)
  assert q.url == "http://www.cnn.com/2015/story.html"
  assert q.passage[:3] == ("@entity1", "said", "on") and q.passage[-1] == "."
  assert q.query == ("@placeholder", "to", "visit", "@entity2")
  assert q.answer == "@entity0"
  assert dict(q.entities) == {"@entity0": "Barack Obama", "@entity1": "the White House",
                              "@entity2": "Cuba"}


def test_round_trip(tmp_path):
  q = cq.parse_question(TEXT)
  path = tmp_path / "a.question"
  cq.write_question(path, q)
  assert path.read_text() == TEXT
  assert cq.read_question(path) == q
  q2 = _q(entities=(("@entity0", "name with: colon"), ("@entity3", "")))
  cq.write_question(path, q2)
  assert cq.read_question(path) == q2


@pytest.mark.parametrize("edit, line, what", [
    (lambda l: l[:1] + ["x"] + l[2:], 2, "blank line"),
    (lambda l: l[:4] + ["no placeholder here"] + l[5:], 5, "@placeholder"),
    (lambda l: l[:4] + ["@placeholder @placeholder"] + l[5:], 5, "@placeholder"),
    (lambda l: l[:6] + ["Obama"] + l[7:], 7, "not @entityN"),
    (lambda l: l[:6] + ["@entity7"] + l[7:], 7, "no @entityN:name"),
    (lambda l: l[:9] + ["entity1 the White House"] + l[10:], 10, "@entityN:name"),
    (lambda l: l[:5], 6, "at least 8"),
    (lambda l: l[:2] + [""] + l[3:], 3, "empty passage"),
])
def test_malformed_file_names_file_and_line(tmp_path, edit, line, what):
  path = tmp_path / "bad.question"
  path.write_text("\n".join(edit(TEXT.split("\n"))))
  with pytest.raises(DataError) as e:
    cq.read_question(path)
  msg = str(e.value)
  assert msg.startswith(f"{path}:{line}: ") and what in msg
  assert "\n" not in msg


def test_undecodable_file(tmp_path):
  path = tmp_path / "bin.question"
  path.write_bytes(b"\xff\xfe\x00")
  with pytest.raises(DataError, match="cannot read"):
    cq.read_question(path)


def test_load_split_resolves_data_dir(tmp_path, monkeypatch):
  d = tmp_path / "cnn" / "questions" / "validation"
  d.mkdir(parents=True)
  qs = [_q(url=f"u{i}") for i in range(3)]
  for i, q in enumerate(reversed(qs)):
    cq.write_question(d / f"{2 - i}.question", q)
  (d / "notes.txt").write_text("ignored")
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path))
  assert cq.load_split("", "validation") == qs
  assert cq.load_split(None, "validation", limit=2) == qs[:2]
  with pytest.raises(DataError, match="training not found"):
    cq.load_split(None, "training")
  with pytest.raises(DataError, match="choose one of"):
    cq.load_split(None, "train")


def test_truncate_passage():
  q = _q(passage="a @entity1 . b ! @entity0 c . d .", answer="@entity0",
         entities=(("@entity0", "X"), ("@entity1", "Y")))
  assert cq.truncate_passage(q, 0) == q
  assert cq.truncate_passage(q, 3).passage == ("a", "@entity1", ".", "b", "!", "@entity0",
                                               "c", ".")
  assert cq.truncate_passage(q, 2) is None  # the answer is in the third sentence
  assert cq.truncate_passage(q, 9) == q


def test_vocab_and_arrays():
  qs = [_q(passage="the @entity2 saw the @entity0 .", query="@placeholder saw it",
           answer="@entity2", entities=(("@entity0", "A"), ("@entity2", "B"))),
        _q(passage="rare @entity1", query="@placeholder", answer="@entity1",
           entities=(("@entity1", "C"),))]
  vocab = cq.build_vocab(qs, min_count=2)
  assert vocab[cq.PAD] == 0 and vocab[cq.UNK] == 1
  assert {"@placeholder", "@entity0", "@entity1", "@entity2", "the", "saw"} <= set(vocab)
  assert "rare" not in vocab and "it" not in vocab
  assert sorted(vocab.values()) == list(range(len(vocab)))
  E = cq.num_entities(qs)
  assert E == 3
  a = cq.to_arrays(qs, vocab, E)
  assert a["passage"].shape == (2, 6) and a["query"].shape == (2, 3)
  np.testing.assert_array_equal(a["passage_mask"].sum(1), [6, 2])
  np.testing.assert_array_equal(a["query_mask"].sum(1), [3, 1])
  assert a["passage"][1, 0] == vocab[cq.UNK] and (a["passage"][1, 2:] == 0).all()
  np.testing.assert_array_equal(a["candidates"], [[1, 0, 1], [0, 1, 0]])
  np.testing.assert_array_equal(a["answer"], [2, 1])
  with pytest.raises(DataError, match="longer than 4"):
    cq.to_arrays(qs, vocab, E, passage_len=4)
  with pytest.raises(DataError, match="not among"):
    cq.to_arrays([_q(passage="no entity", answer="@entity0")], vocab, E)
