"""The stand-in builder (lnorm/data/cloze.py) on a tiny article set."""

import zipfile

import pytest

from lnorm.data import DataError
from lnorm.data import cloze
from lnorm.data import cnn_questions as cq
from scripts import make_cloze

ARTICLE_1 = """Canberra backs Murray Darling plan
Farmers in New South Wales have welcomed the Murray Darling plan.
The plan was drawn up by the Federal Government in Canberra.
But growers say Canberra must pay for the water.
New South Wales irrigators met on Monday.
The Minister said Canberra would decide soon.
Farmers told the Minister that New South Wales needs rain."""

ARTICLE_2 = """Scientists find ice on Mars
NASA says its rover has found ice near the pole of Mars.
Mars has long been thought to hold water.
Scientists at NASA will study the samples.
The find excites Dr Jane Smith of the University of Sydney.
Dr Jane Smith says Mars may once have had life."""


def _articles(n=6):
  """n articles: the two above with their names changed, alternately."""
  out = []
  for k in range(n):
    text = (ARTICLE_1 if k % 2 == 0 else ARTICLE_2).replace("Canberra", f"Canberra{k}")
    out.append(text.replace("Mars", f"Mars{k}"))
  return out


def _zip(path, articles):
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("abc/rural.txt", "\n\n".join(articles[::2]) + "\n")
    z.writestr("abc/science.txt", "\r\n\r\n".join(a.replace("\n", "\r\n")
                                                  for a in articles[1::2]))
  return path


def _names(sentence, spans):
  return [" ".join(sentence[a:b]) for a, b in spans]


def test_tokenize():
  assert cloze.tokenize('The Opposition\'s "Gavan O\'Connor" paid $290 million.') == [
      "The", "Opposition", "'s", '"', "Gavan", "O'Connor", '"', "paid", "$290", "million", "."]


def test_find_entities_rule():
  sents = [cloze.tokenize(l) for l in ARTICLE_1.split("\n")]
  found = [_names(s, sp) for s, sp in zip(sents, cloze.find_entities(sents))]
  # Headline: "Canberra" starts it, and is kept because it is capitalised after
  # a word elsewhere ("in Canberra"); "Murray Darling" is a maximal run.
  assert found[0] == ["Canberra", "Murray Darling"]
  assert found[1] == ["New South Wales", "Murray Darling"]  # "Farmers" starts it
  assert found[2] == ["Federal Government", "Canberra"]     # "The" never
  assert found[3] == ["Canberra"]                            # "But" never
  # Sentence-initial "New" is kept: "New" is capitalised after a word elsewhere.
  assert found[4] == ["New South Wales", "Monday"]
  assert found[5] == ["Minister", "Canberra"]
  assert found[6] == ["Minister", "New South Wales"]
  # "Farmers" is capitalised only sentence-initially: never an entity.
  assert all("Farmers" not in f for f in found)


def test_news_questions_answer_in_passage_and_anonymised():
  doc = cloze.Document("abc/rural.txt#0", tuple(tuple(cloze.tokenize(l))
                                                  for l in ARTICLE_1.split("\n")))
  qs = cloze.news_questions(doc, 0, seed=0)
  # Headline: Canberra and Murray Darling (both in the passage); sentence 6:
  # Minister is not in the passage, Canberra is; sentence 7: New South Wales.
  answers = [dict(q.entities)[q.answer] for q in qs]
  assert answers == ["Canberra", "Murray Darling", "Canberra", "New South Wales"]
  for q in qs:
    names = dict(q.entities)
    assert q.answer in q.passage
    assert q.query.count(cq.PLACEHOLDER) == 1
    # Every entity token is anonymised and every listed entity occurs.
    toks = [t for t in (*q.passage, *q.query) if t.startswith("@entity")]
    assert set(toks) == set(names)
    assert sorted(cq.entity_id(e) for e in names) == list(range(len(names)))
    # No name survives in the text; the rest is lower-cased.
    text = " ".join((*q.passage, *q.query))
    assert "Canberra" not in text and "new south wales" not in text
    assert text == text.lower()
    # Replacing the markers by their names gives back the article's words.
    restored = " ".join(names.get(t, t) for t in q.passage)
    assert restored.lower() == " ".join(" ".join(s) for s in doc.sentences[1:5]).lower()
  # A fresh permutation per question: the same name gets different ids.
  ids = {q.url + str(i): {n: e for e, n in q.entities}["Canberra"] for i, q in enumerate(qs)}
  assert len(set(ids.values())) > 1


def test_book_questions():
  sents = [f"Then Alice Bob met {i} ." if i % 2 else f"He walked to Paris {i} ."
           for i in range(50)]
  doc = cloze.Document("gutenberg/x.txt", tuple(tuple(s.split()) for s in sents))
  qs = cloze.book_questions(doc, 0, seed=1, context_sentences=4)
  assert len(qs) == 46  # one window per sentence from the 5th on; one entity each
  for q in qs:
    start = int(q.url.rsplit("#", 1)[1])
    assert q.passage[-1] == "." and q.passage.count(".") == 4
    assert dict(q.entities)[q.answer] == ("Paris" if (start + 4) % 2 == 0 else "Alice Bob")
    assert q.answer in q.passage
  assert len(cloze.book_questions(doc, 0, 1, context_sentences=4, stride=5)) == 10
  assert not cloze.book_questions(doc, 0, 1, context_sentences=4, max_context_tokens=10)


def test_split_by_article_and_determinism(tmp_path):
  news = cloze.read_abc(_zip(tmp_path / "abc.zip", _articles(10)))
  assert len(news) == 10 and news[1].name == "abc/rural.txt#1"
  assert news[5].name == "abc/science.txt#0" and news[5].sentences[0][-1] == "Mars1"
  qs, counts = cloze.build(news, [], seed=3, fractions=(0.2, 0.2))
  assert counts.documents["news"] == {"training": 6, "validation": 2, "test": 2}
  assert {s: len(v) for s, v in qs.items()} == counts.questions["news"]
  split_of = {}
  for split, questions in qs.items():
    for q in questions:
      assert split_of.setdefault(q.url, split) == split  # never split by question
  out1 = cloze.write_splits(tmp_path / "a", qs)
  out2 = cloze.write_splits(tmp_path / "b", cloze.build(news, [], seed=3,
                                                       fractions=(0.2, 0.2))[0])
  files1 = sorted(p.relative_to(out1) for p in out1.rglob("*.question"))
  assert files1 == sorted(p.relative_to(out2) for p in out2.rglob("*.question"))
  assert len(files1) == sum(len(v) for v in qs.values())
  for f in files1:
    assert (out1 / f).read_bytes() == (out2 / f).read_bytes()
  # The loader reads what the builder wrote.
  assert sorted(cq.load_split(tmp_path / "a", "training"), key=cq.format_question) == \
      sorted(qs["training"], key=cq.format_question)
  # Another seed: other splits or other ids.
  other = cloze.build(news, [], seed=4, fractions=(0.2, 0.2))[0]
  assert other != qs


def test_cli(tmp_path, capsys):
  text = tmp_path / "text"
  (text / "gutenberg").mkdir(parents=True)
  _zip(text / "abc.zip", _articles(10))
  out = tmp_path / "out"
  assert make_cloze.main(["--out", str(out), "--text_dir", str(text), "--no_books"]) == 0
  printed = capsys.readouterr().out
  n = len(list((out / "cnn" / "questions").rglob("*.question")))
  totals = [int(l.split()[-1]) for l in printed.splitlines() if l.startswith("all ")]
  assert n > 0 and len(totals) == 3 and sum(totals) == n
  assert make_cloze.main(["--out", str(tmp_path / "o2"), "--text_dir", str(text)]) == 1
  err = capsys.readouterr().err
  assert err.startswith("error: ") and "no .txt books" in err and err.count("\n") == 1
  assert not (tmp_path / "o2" / "cnn" / "questions").exists()
  (text / "abc.zip").write_bytes(b"not a zip")
  assert make_cloze.main(["--out", str(out), "--text_dir", str(text), "--no_books"]) == 1
  assert "cannot read the ABC news" in capsys.readouterr().err
  assert len(list((out / "cnn" / "questions").rglob("*.question"))) == n  # kept


def test_read_abc_missing(tmp_path):
  with pytest.raises(DataError, match="cannot read"):
    cloze.read_abc(tmp_path / "none.zip")


def test_cli_standin_writes_where_the_reader_preset_reads(tmp_path, monkeypatch, capsys):
  from configs import reader as reader_config
  from experiments import reader as exp
  (tmp_path / "text" / "gutenberg").mkdir(parents=True)
  _zip(tmp_path / "text" / "abc.zip", _articles(10))
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path))
  c = reader_config.get_config("cpu")
  with pytest.raises(DataError, match="make_cloze.py --standin cnn_standin_4"):
    exp._questions(c, "training", 0)
  built = []
  monkeypatch.setattr(cloze, "build", lambda *a, **kw: built.append(kw) or cloze_build(*a, **kw))
  # The text from $LNORM_DATA_DIR/text, the questions to $LNORM_DATA_DIR/cnn_standin_4.
  assert make_cloze.main(["--standin", "cnn_standin_4", "--no_books"]) == 0
  assert built[-1]["context_sentences"] == 4
  assert exp.questions_root(c) == tmp_path / "cnn_standin_4"
  assert exp._questions(c, "training", 0)[0]
  # Another context for a named stand-in would make another data set: refused.
  assert make_cloze.main(["--standin", "cnn_standin_4", "--context_sentences", "20"]) == 1
  assert "use --out DIR" in capsys.readouterr().err


cloze_build = cloze.build
