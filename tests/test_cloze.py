"""The stand-in builder (lnorm/data/cloze.py) on a tiny article set."""

import collections
import gzip
import json
import zipfile

import pytest

from lnorm.data import DataError
from lnorm.data import cloze
from lnorm.data import cnn_questions as cq
from lnorm.data import news
from scripts import make_cloze
from tests.pinned import pin
from tests.test_news import GAZETTEER, _tar, gazetteer

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
  news = cloze.read_abc(_zip(tmp_path / "abc.zip", _articles(10)), verify=False)
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


def test_cli(tmp_path, monkeypatch, capsys):
  text = tmp_path / "text"
  (text / "gutenberg").mkdir(parents=True)
  _zip(text / "abc.zip", _articles(10))
  out = tmp_path / "out"
  # Not NLTK's abc.zip: one line naming it, nothing written.
  assert make_cloze.main(["--out", str(out), "--text_dir", str(text), "--no_books"]) == 1
  err = capsys.readouterr().err
  assert err.startswith(f"error: {text / 'abc.zip'}: SHA-256 is ") and err.count("\n") == 1
  assert not out.exists()
  pin(monkeypatch, "text/abc.zip", text / "abc.zip")
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
  pin(monkeypatch, "text/abc.zip", text / "abc.zip")
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
  pin(monkeypatch, "text/abc.zip", _zip(tmp_path / "text" / "abc.zip", _articles(10)))
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path))
  c = reader_config.get_config("smoke")  # the cpu preset reads news_standin
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


# --- the news stand-in ---------------------------------------------------------

FILLER = ("Officials gave no further details of the plan or of its cost . "
          "Analysts expect a decision within weeks , they said .")


def _tagged(headline, *sentences, names=None):
  """One article through news.tag with the gazetteer."""
  art = news.Article("bbc/x/001.txt", headline, tuple(sentences))
  (t,) = news.tag([art], gazetteer(names or GAZETTEER), news.Skips())
  return t


def test_news_questions_answer_in_passage_merged_and_anonymised():
  t = _tagged("Obama visits Paris",
              "Barack Obama arrived in France on Monday.",
              "Obama met the Bank of England's chief in Paris.",
              "France and the Bank of England were calm, Reuters said.")
  skips = collections.Counter()
  qs = cloze.news_questions_of(t, 0, 0, cloze.NewsSizes(), skips)
  answers = [(q.query.index(cq.PLACEHOLDER), dict(q.entities)[q.answer]) for q in qs]
  # Headline: "Obama" (the passage's "Obama", one entity with "Barack Obama")
  # and Paris; the lead: Barack Obama and France.
  assert answers == [(0, "Barack Obama"), (2, "Paris"), (0, "Barack Obama"), (3, "France")]
  assert not skips
  for q in qs:
    names = dict(q.entities)
    assert cloze.valid_question(q) and q.answer in q.passage
    # The lead is the query, never the passage.
    assert "arrived" not in q.passage
    toks = [t for t in (*q.passage, *q.query) if cq.entity_id(t) is not None]
    assert set(toks) == set(names)  # every listed entity occurs, every marker is listed
    assert sorted(cq.entity_id(e) for e in names) == list(range(len(names)))
    text = " ".join((*q.passage, *q.query))
    assert "obama" not in text.lower() and "paris" not in text.lower() and text == text.lower()
    restored = " ".join(names.get(t, t) for t in q.passage)
    assert restored.lower() == ("barack obama met the bank of england 's chief in paris . "
                                "france and the bank of england were calm , reuters said .")
  # The passage's "Obama" is "Barack Obama": one id for both in a question.
  q = qs[0]
  assert q.passage[0] == q.answer
  # A fresh permutation per question: the same entity gets other ids.
  ids = [{n: e for e, n in q.entities}["Bank of England"] for q in qs]
  assert len(set(ids)) > 1
  # And the permutation is seeded: the same article and seed give the same.
  assert cloze.news_questions_of(t, 0, 0, cloze.NewsSizes(), skips) == qs
  assert cloze.news_questions_of(t, 0, 1, cloze.NewsSizes(), skips) != qs


def test_news_questions_skips_are_counted():
  t = _tagged(None, "NASA and Texaco Inc said Texaco would go to Mars.",
              "Texaco Inc was quiet. Canberra said nothing.", "Mars is red.")
  skips = collections.Counter()
  qs = cloze.news_questions_of(t, 0, 0, cloze.NewsSizes(), skips)
  assert [dict(q.entities)[q.answer] for q in qs] == ["Mars"]
  assert skips == {"questions whose answer is not in the passage": 1,  # NASA
                   "answers named twice in their query": 2}            # Texaco (Inc)
  # A passage budget cuts whole sentences: "Mars is red ." no longer fits.
  skips.clear()
  assert not cloze.news_questions_of(t, 0, 0, cloze.NewsSizes(max_passage_tokens=8), skips)
  assert skips == {"questions whose answer is not in the passage": 2,
                   "answers named twice in their query": 2, "documents with no question": 1}
  skips.clear()
  assert not cloze.news_questions_of(t, 0, 0, cloze.NewsSizes(max_query_tokens=5), skips)
  assert skips == {"queries over max_query_tokens": 1, "documents with no question": 1}
  skips.clear()
  assert not cloze.news_questions_of(_tagged(None, "Mars is red."), 0, 0, cloze.NewsSizes(),
                                     skips)
  assert skips == {"documents too short for a passage": 1}


def _q(passage: str, query: str, answer: str) -> cq.Question:
  p, q = tuple(passage.split()), tuple(query.split())
  ents = sorted({t for t in (*p, *q) if cq.entity_id(t) is not None}, key=cq.entity_id)
  return cq.Question("u", p, q, answer, tuple((e, e[1:]) for e in ents))


def test_baselines_against_hand_computed_values():
  q1 = _q("@entity0 met @entity1 . @entity1 saw @entity2 . @entity2 and @entity1 left .",
          "@entity1 greeted @placeholder .", "@entity2")
  q2 = _q("@entity0 and @entity1 . @entity0 won .", "@placeholder won again", "@entity1")
  q3 = _q("@entity1 x @entity0 y", "z @placeholder", "@entity0")
  # q1: counts e0 1, e1 3, e2 2: maxfreq e1; exclusive (e1 is in the query) e2.
  # Word distance, placeholder at 2: "@entity1" at offset -2, "greeted" (absent,
  # 8), "." at +1; the occurrence at 6 (e2) costs 0 + 8 + 0, every other more
  # (at 4: 0 + 8 + 2).
  assert [cloze.frequency_answer(q1), cloze.frequency_answer(q1, True),
          cloze.word_distance_answer(q1)] == ["@entity1", "@entity2", "@entity2"]
  # q2: e0 twice: both frequencies e0; "won" at +1 matches best after the
  # second e0 (cost 0 + 8), so word distance says e0 too.
  assert [cloze.frequency_answer(q2), cloze.frequency_answer(q2, True),
          cloze.word_distance_answer(q2)] == ["@entity0"] * 3
  # q3: all ties: the first seen.
  assert [cloze.frequency_answer(q3), cloze.frequency_answer(q3, True),
          cloze.word_distance_answer(q3)] == ["@entity1"] * 3
  assert cloze.baselines([q1, q2, q3]) == {"maxfreq": 1.0, "exclusive": 2 / 3,
                                           "word_distance": 2 / 3}
  assert cloze.baselines([q1]) == {"maxfreq": 1.0, "exclusive": 0.0, "word_distance": 0.0}
  # No entity left: no answer.
  assert cloze.frequency_answer(_q("@entity0 x", "@entity0 @placeholder", "@entity0"),
                                exclusive=True) is None


def _news_article(k: int) -> tuple[str, list[str]]:
  """Article k: a headline and paragraphs naming Obama or Smith and a city."""
  city = ("Paris", "Canberra", "Washington")[k % 3]
  who = ("Barack Obama", "John Smith")[k % 2]
  last = who.split()[1]
  return (f"{last} visits {city}",
          [f"{who} arrived in {city} in story {k} of the wire .",
           f"{last} met officials in {city} for talks number {k} . {FILLER}",
           f"{last} left {city} the next day . {FILLER} {FILLER}"])


def _news_dir(root, n=30, monkeypatch=None):
  """<root>/news/{reuters21578,bbc}/ and <root>/abc.zip, n articles in all;
  with ``monkeypatch``, their SHA-256s pinned for the test."""
  arts = [_news_article(k) for k in range(n)]
  (root / "news" / "reuters21578").mkdir(parents=True)
  (root / "news" / "bbc").mkdir(parents=True)
  sgm = "".join(f'<REUTERS NEWID="{k}"><TEXT><BODY>' + "\n    ".join(p) + "\n REUTER\n&#3;"
                "</BODY></TEXT></REUTERS>\n" for k, (_, p) in enumerate(arts[:n // 3]))
  (root / "news" / "reuters21578" / "reut2-000.sgm.gz").write_bytes(gzip.compress(sgm.encode()))
  _tar(root / "news" / "bbc" / "bbc.tar.gz", {
      f"bbc/tech/{k:03d}.txt": (h + "\n\n" + "\n\n".join(p) + "\n").encode()
      for k, (h, p) in enumerate(arts[n // 3:2 * n // 3])})
  with zipfile.ZipFile(root / "abc.zip", "w") as z:
    z.writestr("abc/rural.txt", "\n\n".join(h + "\n" + "\n".join(p)
                                            for h, p in arts[2 * n // 3:]) + "\n")
    z.writestr("abc/science.txt", "")
  if monkeypatch is not None:
    pin(monkeypatch, news.REUTERS_KEY.format(name="reut2-000.sgm.gz"),
        root / "news" / "reuters21578" / "reut2-000.sgm.gz")
    pin(monkeypatch, news.BBC_KEY, root / "news" / "bbc" / "bbc.tar.gz")
    pin(monkeypatch, news.ABC_KEY, root / "abc.zip")
  return root


def test_news_cli_builds_checks_and_reports(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(news, "spacy_recognizer", gazetteer)
  text = _news_dir(tmp_path / "text", monkeypatch=monkeypatch)
  # A sound file without documents is skipped and counted.
  sgm = text / "news" / "reuters21578" / "reut2-001.sgm.gz"
  sgm.write_bytes(gzip.compress(b"<html>no documents</html>"))
  pin(monkeypatch, news.REUTERS_KEY.format(name=sgm.name), sgm)
  out = tmp_path / "out"
  assert make_cloze.main(["--out", str(out), "--news", "--text_dir", str(text)]) == 0
  printed = capsys.readouterr().out
  root = out / "cnn" / "questions"
  build = json.loads((root / "build.json").read_text())
  assert build["recognizer"] == "gazetteer"
  skipped = [l for l in printed.splitlines() if l.startswith("skipped: ")]
  assert skipped == [news.Skips(build["skipped"]).line()]
  assert "1 news files that do not parse" in skipped[0]
  assert set(build["documents"]) == {"reuters21578", "bbc", "abc"}
  for split in cq.SPLITS:
    qs = cq.load_split(out, split)
    assert len(qs) == build["splits"][split]["questions"] > 0
    assert all(cloze.valid_question(q) for q in qs)
    assert max(len(q.passage) for q in qs) <= cloze.NewsSizes().max_passage_tokens
    assert build["baselines"][split] == cloze.baselines(qs)
  # Byte-identical again; another seed gives other files.
  assert make_cloze.main(["--out", str(tmp_path / "again"), "--news", "--text_dir",
                          str(text)]) == 0
  files = sorted(p.relative_to(out) for p in out.rglob("*.question"))
  assert files == sorted(p.relative_to(tmp_path / "again")
                         for p in (tmp_path / "again").rglob("*.question"))
  assert all((out / f).read_bytes() == (tmp_path / "again" / f).read_bytes() for f in files)
  # Nothing to ask: one line, status 1, and the set that was there is kept.
  monkeypatch.setattr(news, "spacy_recognizer", lambda: gazetteer({"Nobody": "PERSON"}))
  capsys.readouterr()
  assert make_cloze.main(["--out", str(out), "--news", "--text_dir", str(text)]) == 1
  err = capsys.readouterr().err
  assert err.startswith("error: no training, validation, test questions") and err.count("\n") == 1
  assert "documents with no entities" in err
  assert sorted(p.relative_to(out) for p in out.rglob("*.question")) == files
  # A damaged source is an error naming it, not a smaller set; the set stays.
  monkeypatch.setattr(news, "spacy_recognizer", gazetteer)
  sgm.write_bytes(b"broken")
  assert make_cloze.main(["--out", str(out), "--news", "--text_dir", str(text)]) == 1
  err = capsys.readouterr().err
  assert err.startswith(f"error: {sgm}: SHA-256 is ") and err.count("\n") == 1
  pin(monkeypatch, news.REUTERS_KEY.format(name=sgm.name), sgm)
  assert make_cloze.main(["--out", str(out), "--news", "--text_dir", str(text)]) == 1
  err = capsys.readouterr().err
  assert err.startswith(f"error: {sgm}: cannot read it, truncated or corrupt") and \
      err.count("\n") == 1
  assert sorted(p.relative_to(out) for p in out.rglob("*.question")) == files
  # A missing source is an error, not a smaller set.
  sgm.unlink()
  (text / "abc.zip").unlink()
  assert make_cloze.main(["--out", str(out), "--news", "--text_dir", str(text)]) == 1
  assert "abc.zip not found" in capsys.readouterr().err


def test_news_cli_standin_and_sample(tmp_path, monkeypatch, capsys):
  from configs import reader as reader_config
  monkeypatch.setattr(news, "spacy_recognizer", gazetteer)
  _news_dir(tmp_path / "text", monkeypatch=monkeypatch)
  monkeypatch.setenv("LNORM_DATA_DIR", str(tmp_path))
  assert make_cloze.main(["--standin", "news_standin"]) == 0
  assert (tmp_path / "news_standin" / "cnn" / "questions" / "training").is_dir()
  # The smoke preset's length cap keeps every question of the stand-in.
  assert cloze.NEWS_STANDINS["news_standin"].max_passage_tokens <= \
      reader_config.get_config("smoke").max_passage_tokens
  capsys.readouterr()
  assert make_cloze.main(["--standin", "news_standin", "--sample_entities", "5"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 5 and all(" | bbc/" in l or " | abc/" in l or " | reuters" in l
                                 for l in lines)
  assert make_cloze.main(["--standin", "news_standin", "--max_passage_tokens", "99"]) == 1
  assert "use --out DIR --news" in capsys.readouterr().err
  assert make_cloze.main(["--standin", "cnn_standin", "--max_query_tokens", "9"]) == 1
  assert "are for the news stand-in" in capsys.readouterr().err


def test_news_cli_without_spacy_refuses_in_one_line(tmp_path, monkeypatch, capsys):
  def absent():
    raise DataError("the news stand-in needs spaCy and its English model "
                    f"({news.INSTALL})")
  monkeypatch.setattr(news, "spacy_recognizer", absent)
  assert make_cloze.main(["--out", str(tmp_path), "--news", "--text_dir", str(tmp_path)]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "requirements-extras.txt" in err
