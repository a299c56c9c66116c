"""The news readers, clean-up, mention merging and tagging (lnorm/data/news.py)
on tiny files written here, with a gazetteer in place of spaCy."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile

import pytest

from lnorm.data import DataError
from lnorm.data import cloze
from lnorm.data import files
from lnorm.data import news
from tests.pinned import pin

# name -> type, for the gazetteer recognizer
GAZETTEER = {
    "Barack Obama": "PERSON", "Obama": "PERSON", "John Smith": "PERSON",
    "Jane Smith": "PERSON", "Smith": "PERSON", "Texaco Inc": "ORG", "Texaco": "ORG",
    "International Monetary Fund": "ORG", "IMF": "ORG", "US Senate": "ORG", "US": "GPE",
    "Washington": "GPE", "George Washington": "PERSON", "Canberra": "GPE",
    "Bank of England": "ORG", "Reuters": "ORG", "Paris": "GPE", "France": "GPE",
    "Monday": "DATE", "Mars": "LOC", "NASA": "ORG",
}


def gazetteer(names: dict[str, str] = GAZETTEER) -> news.Recognizer:
  """A recognizer: cloze.tokenize's tokens, longest gazetteer matches."""
  table = {tuple(cloze.tokenize(n)): l for n, l in names.items()}
  longest = max(map(len, table))

  def recognize(texts):
    for t in texts:
      toks = cloze.tokenize(t)
      ents, i = [], 0
      while i < len(toks):
        for n in range(min(longest, len(toks) - i), 0, -1):
          label = table.get(tuple(toks[i:i + n]))
          if label:
            if label in news.NAME_LABELS:
              ents.append((i, i + n, label))
            i += n
            break
        else:
          i += 1
      yield toks, ents

  recognize.name = "gazetteer"
  return recognize


def _merge(*mentions: str, labels: dict[str, str] = GAZETTEER) -> list[int]:
  ids, _ = news.merge([(tuple(m.split()), labels[m]) for m in mentions])
  return ids


def test_merge_rules():
  # A surname joins its only full name; the same words are one entity.
  assert _merge("Barack Obama", "Obama", "Obama") == [0, 0, 0]
  # Two full names with that surname: ambiguous, so it stays apart.
  assert _merge("John Smith", "Jane Smith", "Smith") == [0, 1, 2]
  assert _merge("Texaco Inc", "Texaco") == [0, 0]
  assert _merge("IMF", "International Monetary Fund") == [0, 0]
  # "US" is no acronym of "US Senate", nor its leading word (another type).
  assert _merge("US Senate", "US") == [0, 1]
  assert _merge("George Washington", "Washington") == [0, 1]
  # Case and full stops do not matter; the name is the longest mention.
  ids, names = news.merge([(("U.S.",), "GPE"), (("US",), "GPE"),
                           (("United", "States"), "GPE")])
  assert ids == [0, 0, 0] and names == ["United States"]
  # "Toshiba" is "Toshiba Corp" already: it does not join the unit as well.
  ids, names = news.merge([(("Toshiba", "Corp"), "ORG"), (("Toshiba",), "ORG"),
                           (("Toshiba", "Information", "Systems"), "ORG")])
  assert ids == [0, 0, 1] and names == ["Toshiba Corp", "Toshiba Information Systems"]


def test_trim_and_sentences():
  toks = "the Bank of England 's".split()
  assert news.trim(toks, 0, 5) == (1, 4)
  toks = "Lago Agrio to".split()
  assert news.trim(toks, 0, 3) == (0, 2)
  assert news.trim("Apollo 11".split(), 0, 2) == (0, 2)
  assert news.trim("the rest".split(), 0, 2) is None
  toks = 'He said " go . " Then Paris ! Done'.split()
  assert news.split_sentences(toks) == [(0, 6), (6, 9), (9, 10)]


REUTERS = """<!DOCTYPE lewis SYSTEM "lewis.dtd">
<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" NEWID="7">
<TEXT>&#2;
<TITLE>TEXACO SAYS</TITLE>
<DATELINE>    NEW YORK, March 9 - </DATELINE><BODY>Texaco Inc said it would sell
assets &lt;worth&gt; 2 billion dlrs &amp; more.
    The company said Texaco would act soon.
 REUTER
&#3;</BODY></TEXT>
</REUTERS>
<REUTERS TOPICS="NO" NEWID="8">
<TEXT TYPE="BRIEF">&#2;
<TITLE>HEADLINE ONLY</TITLE>
&#3;</TEXT>
</REUTERS>
"""


def test_reuters(tmp_path, monkeypatch):
  arts = news.reuters_articles(REUTERS, "reut2-000.sgm")
  assert len(arts) == 1  # the BRIEF one has no body
  a = arts[0]
  assert a.name == "reuters21578/reut2-000.sgm#7" and a.headline is None
  assert a.paragraphs == ("Texaco Inc said it would sell assets <worth> 2 billion dlrs & more.",
                          "The company said Texaco would act soon.")
  d = tmp_path / "reuters21578"
  d.mkdir()
  (d / "reut2-000.sgm.gz").write_bytes(gzip.compress(REUTERS.encode()))
  (d / "reut2-002.sgm.gz").write_bytes(gzip.compress(b"<html>no documents</html>"))
  # Not the pinned Reuters files: refused, naming the first.
  skips = news.Skips()
  with pytest.raises(DataError) as e:
    news.read_reuters(d, skips)
  assert str(e.value).startswith(f"{d / 'reut2-000.sgm.gz'}: SHA-256 is ")
  for name in ("reut2-000.sgm.gz", "reut2-002.sgm.gz"):
    pin(monkeypatch, news.REUTERS_KEY.format(name=name), d / name)
  # A sound file without documents is counted, not raised.
  assert news.read_reuters(d, skips) == arts
  assert skips == {"news files that do not parse": 1}
  # A damaged one is an error naming it, pinned or not: never a smaller set.
  (d / "reut2-001.sgm.gz").write_bytes(b"not gzip")
  with pytest.raises(DataError, match=r"reut2-001.sgm.gz: SHA-256 is [0-9a-f]{64}, expected 8d13f8d"):
    news.read_reuters(d, skips)
  with pytest.raises(DataError, match=r"reut2-001.sgm.gz: cannot read it, truncated or corrupt"):
    news.read_reuters(d, skips, verify=False)
  with pytest.raises(DataError, match="not found"):
    news.read_reuters(tmp_path / "none", skips)


def _tar(path, files: dict[str, bytes]):
  with tarfile.open(path, "w:gz") as tar:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return path


def test_bbc_and_abc(tmp_path, monkeypatch):
  tar = _tar(tmp_path / "bbc.tar.gz", {
      "bbc/README.TXT": b"readme",
      "bbc/tech/002.txt": "Obama visits Paris\n\nBarack Obama went to Paris.\n\nHe paid \xa35.\n"
                          .encode("latin-1"),  # a Latin-1 pound sign, as sport/199.txt
      "bbc/tech/001.txt": b"",  # does not parse: no headline and body
  })
  skips = news.Skips()
  with pytest.raises(DataError, match=r"bbc.tar.gz: SHA-256 is [0-9a-f]{64}, expected "
                     + files.SHA256[news.BBC_KEY]):
    news.read_bbc(tar, skips)
  pin(monkeypatch, news.BBC_KEY, tar)
  arts = news.read_bbc(tar, skips)
  assert [a.name for a in arts] == ["bbc/tech/002.txt"]
  assert arts[0].headline == "Obama visits Paris"
  assert arts[0].paragraphs == ("Barack Obama went to Paris.", "He paid \xa35.")
  assert skips == {"news files that do not parse": 1}
  (tmp_path / "bad.tar.gz").write_bytes(b"\x1f\x8b broken")
  with pytest.raises(DataError, match=r"bad.tar.gz: cannot read it, truncated or corrupt"):
    news.read_bbc(tmp_path / "bad.tar.gz", skips, verify=False)
  with zipfile.ZipFile(tmp_path / "abc.zip", "w") as z:
    z.writestr("abc/rural.txt", "Head one\nLine one.\nLine two.\n\nLonely\n\nHead two\nText.\n")
    z.writestr("abc/science.txt", "")
  with pytest.raises(DataError, match=r"abc.zip: SHA-256 is"):
    news.read_abc_articles(tmp_path / "abc.zip", skips)
  pin(monkeypatch, news.ABC_KEY, tmp_path / "abc.zip")
  arts = news.read_abc_articles(tmp_path / "abc.zip", skips)
  assert [(a.name, a.headline, a.paragraphs) for a in arts] == [
      ("abc/rural.txt#0", "Head one", ("Line one.", "Line two.")),
      ("abc/rural.txt#1", "Head two", ("Text.",))]
  (tmp_path / "abc2.zip").write_bytes(b"not a zip")
  with pytest.raises(DataError, match=r"abc2.zip: cannot read the ABC news"):
    news.read_abc_articles(tmp_path / "abc2.zip", skips, verify=False)
  assert skips["news files that do not parse"] == 1


def test_clean_counts_what_it_drops():
  prose = " ".join(f"word{chr(97 + i % 26)}" for i in range(60))
  table = " ".join(f"{i},000 vs {i}" for i in range(30))
  arts = [news.Article("a", None, (prose,)), news.Article("b", None, ("too short",)),
          news.Article("c", None, (table,)), news.Article("d", "H", (prose.upper(),))]
  skips = news.Skips()
  assert [a.name for a in news.clean(arts, skips)] == ["a"]
  assert skips == {"short documents": 1, "tables and price lists": 1,
                   "duplicate documents": 1}
  assert skips.line() == ("skipped: 1 duplicate documents, 1 short documents, "
                          "1 tables and price lists")
  assert news.Skips().line() == "skipped: nothing"


def test_head_cuts_at_a_paragraph():
  a = news.Article("a", None, ("one two three", "four five", "six"))
  assert news.head(a, 4).paragraphs == ("one two three", "four five")
  assert news.head(a, 3).paragraphs == ("one two three",)


def test_tag_merges_per_document_and_counts_empty_ones():
  arts = [news.Article("x", "Obama visits Paris", (
              "Barack Obama went to Paris on Monday. Obama met the Bank of England's chief.",
              "Texaco Inc and Texaco agreed.")),
          news.Article("y", None, ("nothing to see here.",))]
  skips = news.Skips()
  tagged = news.tag(arts, gazetteer(), skips)
  assert skips == {"documents with no entities": 1}
  (t,) = tagged
  assert t.entities == ("Barack Obama", "Paris", "Bank of England", "Texaco Inc")
  assert [" ".join(s.tokens) for s in t.body] == [
      "Barack Obama went to Paris on Monday .", "Obama met the Bank of England 's chief .",
      "Texaco Inc and Texaco agreed ."]
  # The headline's "Obama" is the body's "Barack Obama"; Monday is a date.
  assert t.headline.mentions == ((0, 1, 0), (2, 3, 1))
  assert t.body[1].mentions == ((0, 1, 0), (3, 6, 2))  # without 'the' and "'s"
  assert t.body[2].mentions == ((0, 2, 3), (3, 4, 3))


@pytest.mark.slow
def test_spacy_recognizer_offline():
  pytest.importorskip("spacy")
  try:
    rec = news.spacy_recognizer()
  except DataError:
    pytest.skip("the spaCy model is not installed (requirements-extras.txt)")
  (toks, ents), = rec(["Barack Obama met officials of the Bank of England in London "
                       "on Monday."])
  found = {(" ".join(toks[a:b]), l) for a, b, l in ents}
  assert ("Barack Obama", "PERSON") in found and ("London", "GPE") in found
  assert all(l in news.NAME_LABELS for _, l in found)  # no DATE
  assert "spaCy" in rec.name


def test_spacy_missing_is_one_line(monkeypatch):
  import builtins
  real = builtins.__import__

  def no_spacy(name, *a, **kw):
    if name == "spacy":
      raise ImportError("No module named 'spacy'")
    return real(name, *a, **kw)

  monkeypatch.setattr(builtins, "__import__", no_spacy)
  with pytest.raises(DataError, match="requirements-extras.txt") as e:
    news.spacy_recognizer()
  assert "\n" not in str(e.value)
