"""Stand-ins for the CNN question-answering corpus, built from real text and
written in DeepMind's ``.question`` format (``lnorm/data/cnn_questions.py``).

Two kinds (``STANDINS``, the folder names the reader's presets read):

* ``news_standin`` (``build_news``, ``NEWS_STANDINS``): all the news text
  there is (Reuters-21578, BBC News, ABC news), entities found by spaCy's
  English NER and merged per article (``lnorm/data/news.py``). Queries are
  each article's headline (BBC, ABC; Reuters' are in capitals) and its lead,
  the first sentence, which is not in the passage; the passage is the
  sentences after the lead, as many whole ones as fit in
  ``max_passage_tokens``. Each entity named once in a query and present in
  the passage is one question, anonymised and permuted per question as
  below. What cannot be used (a file that does not parse, a document with
  no entities, an answer not in the passage, ...) is counted and skipped
  (``news.Skips``). ``baselines`` gives Hermann et al.'s maximum-frequency,
  exclusive-frequency and word-distance errors on any questions.
* ``cnn_standin``, ``cnn_standin_4`` (``build``): the first stand-in, from
  ABC news and Gutenberg books with a capitalisation rule for entities, as
  described next.

Sources: ABC news (``abc.zip``: articles of a headline line and one sentence a
line, a blank line between articles) and, where the news gives too few
questions, Children's-Book-Test-style questions from Gutenberg books (one
sentence a line). Both are checked before they are read, against the SHA-256s
of text/README.md (``files.SHA256``; ``verify=False`` skips that) and the
zip's CRCs: a damaged or other copy is one ``DataError`` line naming it.

Entities (``find_entities``), per document (an article, or a whole book):
a token is *capitalised* when its first character is an upper-case letter.
A capitalised token that follows a word (a token that starts with a letter
or digit) is entity-capable. One in an *initial* position (first in its
sentence, or after punctuation such as an opening quote) is entity-capable
only if the same word occurs capitalised after a word somewhere else in the
document, so that "The" or "But" starting a sentence are not entities while
"Canberra" starting one is. An entity is a maximal run of entity-capable
tokens within a sentence ("Deputy Prime Minister Mark Vaile"), its identity
its exact token string. Closed-class words (``NEVER_ENTITY``: "I", "The",
"In", ...) are never part of one.
Unlike Hermann et al.'s corpus there is no coreference: "John Howard" and
"Mr Howard" are different entities.

Questions:

* news (``news_questions``): the passage is the article's first
  ``passage_sentences`` (4) sentences after the headline. Query sentences are
  the headline and every sentence after the passage. Each entity that occurs
  exactly once in a query sentence and also in the passage gives one
  question: that occurrence becomes ``@placeholder`` and the entity is the
  answer, so the answer is always in the passage.
* books (``book_questions``): consecutive windows of ``context_sentences``
  (20) sentences and the next one as the query, as in the Children's Book
  Test, one window every ``stride`` sentences (default: every sentence is a
  query once, so contexts overlap). Entities are masked in the query as for
  news. Windows whose context has more than ``max_context_tokens`` tokens
  are skipped. Verse (``VERSE``) is left out: its line-initial capitals
  make most words entities.

Each question's entities (those in its passage or query) are anonymised as
``@entityN``, N a fresh random permutation for each question as in Hermann
et al., so that a model cannot learn facts about particular names. Text
other than entity markers is lower-cased, as in DeepMind's files.

Splits are by document: news articles are shuffled (seeded) and cut into
training / validation / test fractions; books go whole to one split. A
question's randomness comes from (seed, document, question) alone, so the
same inputs and seed give byte-identical files.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from lnorm.data import DataError
from lnorm.data import cnn_questions as cq
from lnorm.data import files as data_files
from lnorm.data.files import swap_in
from lnorm.data import news

ABC_FILES = ("abc/rural.txt", "abc/science.txt")
VERSE = ("blake-poems.txt", "milton-paradise.txt", "whitman-leaves.txt")
# Whole books held out; the rest is training.
# The stand-ins the reader's presets read (configs/reader.py questions_dir):
# folder name -> sentences of context of the books' questions; 0: the news
# stand-in (NEWS_STANDINS), which has no books.
STANDINS = {"cnn_standin": 20, "cnn_standin_4": 4, "news_standin": 0}
VALIDATION_BOOKS = ("chesterton-brown.txt", "shakespeare-macbeth.txt")
TEST_BOOKS = ("carroll-alice.txt", "bryant-stories.txt")
# Closed-class words that are capitalised only for their position or in titles.
NEVER_ENTITY = frozenset(
    "I A An The This That These Those It Its He She We They You His Her Their Our My "
    "In On At Of For From By With To As And But Or Nor If So Then When While "
    "What Why Where Who How Not All No Yes O Oh I'".split())
# Possessive 's split off, as in DeepMind's tokenisation.
_POSSESSIVE = re.compile(r"(\w)'s\b")
_TOKEN = re.compile(r"\$?\d+(?:[.,:]\d+)*%?|\w+(?:[-'.]\w+)*|'s|[^\w\s]")


@dataclasses.dataclass(frozen=True)
class Document:
  name: str  # the .question url: where the text comes from
  sentences: tuple[tuple[str, ...], ...]  # news: headline first


def tokenize(line: str) -> list[str]:
  return _TOKEN.findall(_POSSESSIVE.sub(r"\1 's", line))


def _is_word(tok: str) -> bool:
  return tok[:1].isalnum() or tok == "'s"


def _capitalised(tok: str) -> bool:
  return tok[:1].isupper() and tok not in NEVER_ENTITY


def find_entities(sentences: Sequence[Sequence[str]]) -> list[list[tuple[int, int]]]:
  """Per sentence, the [start, end) token spans of its entities (module doc)."""
  free = set()  # words seen capitalised after a word
  for s in sentences:
    for i in range(1, len(s)):
      if _capitalised(s[i]) and _is_word(s[i - 1]):
        free.add(s[i])
  spans = []
  for s in sentences:
    capable = [_capitalised(t) and ((i > 0 and _is_word(s[i - 1])) or t in free)
               for i, t in enumerate(s)]
    out, i = [], 0
    while i < len(s):
      if capable[i]:
        j = i
        while j < len(s) and capable[j]:
          j += 1
        out.append((i, j))
        i = j
      else:
        i += 1
    spans.append(out)
  return spans


def _decode(raw: bytes) -> str:
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError:
    return raw.decode("latin-1")


def read_abc(zip_path: str | os.PathLike[str], verify: bool = True) -> list[Document]:
  """The articles of ``abc.zip``, in file order, tokenised; the zip checked
  against its pinned SHA-256 (unless not ``verify``) and its CRCs."""
  texts = news.read_abc_zip(Path(zip_path), ABC_FILES, verify)
  docs = []
  for name, text in texts:
    blocks = re.split(r"\n\s*\n", text.replace("\r", ""))
    k = 0
    for block in blocks:
      lines = [l.strip() for l in block.split("\n") if l.strip()]
      if len(lines) < 2:
        continue
      docs.append(Document(f"{name}#{k}", tuple(tuple(tokenize(l)) for l in lines)))
      k += 1
  return docs


def read_books(directory: str | os.PathLike[str], skip: Sequence[str] = VERSE,
               verify: bool = True) -> list[Document]:
  """Each ``*.txt`` but ``skip`` (already tokenised, one sentence a line), in
  name order. With ``verify``, all the folder's ``*.txt`` (``skip`` too) must
  be the Gutenberg books ``files.SHA256[GUTENBERG]`` pins."""
  every = sorted(p for p in Path(directory).glob("*.txt"))
  paths = [p for p in every if p.name not in skip]
  if not paths:
    raise DataError(f"{directory}: no .txt books found")
  if verify:
    data_files.check_gutenberg(Path(directory), every)
  docs = []
  for p in paths:
    try:
      lines = _decode(p.read_bytes()).replace("\r", "").split("\n")
    except OSError as e:
      raise DataError(f"{p}: cannot read it ({str(e).splitlines()[0][:200]})") from e
    docs.append(Document(f"gutenberg/{p.name}",
                         tuple(tuple(l.split()) for l in lines if l.strip())))
  return docs


def _anonymise(passage: Sequence[tuple[str, bool]], query: Sequence[tuple[str, bool]],
               answer: str, url: str, rng: np.random.Generator) -> cq.Question:
  """(text, is_entity) tokens -> a Question with entities as @entityN."""
  order: dict[str, None] = {}
  for text, is_entity in (*passage, *query):
    if is_entity:
      order.setdefault(text)
  perm = rng.permutation(len(order))
  ids = {name: f"@entity{perm[k]}" for k, name in enumerate(order)}

  def render(toks):
    return tuple(ids[t] if e else (t if t == cq.PLACEHOLDER else t.lower()) for t, e in toks)

  entities = sorted(((ids[n], n) for n in order), key=lambda e: int(e[0][7:]))
  return cq.Question(url, render(passage), render(query), ids[answer], tuple(entities))


def _chunks(sentence: Sequence[str], spans: Sequence[tuple[int, int]]
            ) -> list[tuple[str, bool]]:
  """A sentence as (text, is_entity) items, each entity one item."""
  out, i = [], 0
  for a, b in spans:
    out += [(t, False) for t in sentence[i:a]]
    out.append((" ".join(sentence[a:b]), True))
    i = b
  return out + [(t, False) for t in sentence[i:]]


def _cloze(passage: list[tuple[str, bool]], query_sentences: Iterable[list[tuple[str, bool]]],
           url: str, rng: np.random.Generator) -> list[cq.Question]:
  in_passage = {t for t, e in passage if e}
  out = []
  for query in query_sentences:
    names = [t for t, e in query if e]
    for k, (t, e) in enumerate(query):
      if e and t in in_passage and names.count(t) == 1:
        masked = [*query[:k], (cq.PLACEHOLDER, False), *query[k + 1:]]
        out.append(_anonymise(passage, masked, t, url, rng))
  return out


def _rng(seed: int, doc: int, kind: int) -> np.random.Generator:
  return np.random.default_rng(np.random.SeedSequence([seed, kind, doc]))


def news_questions(doc: Document, doc_index: int, seed: int, passage_sentences: int = 4
                   ) -> list[cq.Question]:
  """The cloze questions of one article (module doc)."""
  spans = find_entities(doc.sentences)
  items = [_chunks(s, sp) for s, sp in zip(doc.sentences, spans)]
  body = items[1:]
  passage = [t for s in body[:passage_sentences] for t in s]
  queries = [items[0], *body[passage_sentences:]]
  return _cloze(passage, queries, doc.name, _rng(seed, doc_index, 0))


def book_questions(doc: Document, doc_index: int, seed: int, context_sentences: int = 20,
                   max_context_tokens: int = 0, stride: int = 1) -> list[cq.Question]:
  """Children's-Book-Test-style questions of one book (module doc)."""
  spans = find_entities(doc.sentences)
  items = [_chunks(s, sp) for s, sp in zip(doc.sentences, spans)]
  rng = _rng(seed, doc_index, 1)
  out, n = [], context_sentences + 1
  for start in range(0, len(items) - n + 1, stride):
    window = doc.sentences[start:start + context_sentences]
    if max_context_tokens and sum(map(len, window)) > max_context_tokens:
      continue
    passage = [t for s in items[start:start + context_sentences] for t in s]
    out += _cloze(passage, [items[start + context_sentences]],
                  f"{doc.name}#{start}", rng)
  return out


def split_news(num_docs: int, seed: int, fractions: tuple[float, float] = (0.1, 0.1)
               ) -> list[str]:
  """Each article's split: a seeded shuffle, cut by (validation, test) fractions."""
  order = np.random.default_rng(np.random.SeedSequence([seed, 2])).permutation(num_docs)
  n_valid, n_test = (int(round(f * num_docs)) for f in fractions)
  split = ["training"] * num_docs
  for rank, d in enumerate(order):
    if rank < n_valid:
      split[d] = "validation"
    elif rank < n_valid + n_test:
      split[d] = "test"
  return split


def split_books(names: Sequence[str], validation: Sequence[str], test: Sequence[str]
                ) -> list[str]:
  return ["validation" if n in validation else "test" if n in test else "training"
          for n in names]


def file_name(q: cq.Question, index: int) -> str:
  """A SHA-1 of the question, as DeepMind's names are; ``index`` keeps
  repeated sentences apart."""
  key = f"{index}\n{cq.format_question(q)}".encode()
  return hashlib.sha1(key).hexdigest() + ".question"


def write_splits(out: str | os.PathLike[str], questions: dict[str, list[cq.Question]],
                 extra: dict[str, str] | None = None) -> Path:
  """Writes ``<out>/cnn/questions/<split>/*.question`` for every split, and
  ``extra`` {file name: text} beside the splits, into a temporary directory
  first: an existing set is replaced only once the new one is complete."""
  root = Path(out).expanduser() / "cnn"
  final = root / "questions"
  tmp = root / "questions.tmp"
  if tmp.exists():
    shutil.rmtree(tmp)
  for split in cq.SPLITS:
    d = tmp / split
    d.mkdir(parents=True)
    for i, q in enumerate(questions.get(split, [])):
      cq.write_question(d / file_name(q, i), q)
  for name, text in (extra or {}).items():
    (tmp / name).write_text(text, encoding="utf-8")
  return swap_in(tmp, final, root / "questions.old")


@dataclasses.dataclass(frozen=True)
class Counts:
  documents: dict[str, dict[str, int]]  # source -> split -> documents
  questions: dict[str, dict[str, int]]  # source -> split -> questions


def build(news: Sequence[Document], books: Sequence[Document], seed: int = 0,
          passage_sentences: int = 4, context_sentences: int = 20,
          max_context_tokens: int = 0, stride: int = 1,
          fractions: tuple[float, float] = (0.1, 0.1),
          validation_books: Sequence[str] = VALIDATION_BOOKS,
          test_books: Sequence[str] = TEST_BOOKS) -> tuple[dict[str, list[cq.Question]], Counts]:
  """{split: questions} from the articles and the books, and the counts."""
  questions: dict[str, list[cq.Question]] = {s: [] for s in cq.SPLITS}
  docs = {src: {s: 0 for s in cq.SPLITS} for src in ("news", "books")}
  counts = {src: {s: 0 for s in cq.SPLITS} for src in ("news", "books")}
  for i, (doc, split) in enumerate(zip(news, split_news(len(news), seed, fractions))):
    qs = news_questions(doc, i, seed, passage_sentences)
    questions[split] += qs
    docs["news"][split] += 1
    counts["news"][split] += len(qs)
  names = [d.name.rsplit("/", 1)[-1] for d in books]
  for i, (doc, split) in enumerate(zip(books, split_books(names, validation_books,
                                                           test_books))):
    qs = book_questions(doc, i, seed, context_sentences, max_context_tokens, stride)
    questions[split] += qs
    docs["books"][split] += 1
    counts["books"][split] += len(qs)
  return questions, Counts(docs, counts)


# --- the news stand-in (news_standin) ----------------------------------------

@dataclasses.dataclass(frozen=True)
class NewsSizes:
  """How the news stand-in's questions are cut (``news_questions_of``)."""
  max_passage_tokens: int = 250  # the reader's smoke preset keeps passages <= 250
  max_query_tokens: int = 50     # longer headlines and leads are no summary
  fractions: tuple[float, float] = (0.1, 0.1)  # validation, test documents


NEWS_STANDINS = {"news_standin": NewsSizes()}


def _items(s: "news.Sentence", names: Sequence[str]) -> list[tuple[str, bool]]:
  """A sentence as (text, is_entity) items, an entity named by its entity."""
  out, i = [], 0
  for a, b, e in s.mentions:
    out += [(t, False) for t in s.tokens[i:a]]
    out.append((names[e], True))
    i = b
  return out + [(t, False) for t in s.tokens[i:]]


def news_questions_of(art: "news.Annotated", doc_index: int, seed: int, sizes: NewsSizes,
                      skips: collections.Counter) -> list[cq.Question]:
  """The cloze questions of one tagged article. Queries: its headline (where
  usable) and its lead, the first sentence, which is left out of the passage;
  the passage: the sentences after the lead, as many whole ones as fit in
  ``max_passage_tokens``. Each entity named once in a query and present in
  the passage gives one question (module doc of news.py: merging)."""
  if len(art.body) < 2:
    skips["documents too short for a passage"] += 1
    return []
  passage, n = [], 0
  for s in art.body[1:]:
    if n + len(s.tokens) > sizes.max_passage_tokens:
      break
    passage.append(s)
    n += len(s.tokens)
  if not passage:
    skips["documents whose first passage sentence is too long"] += 1
    return []
  in_passage = {e for s in passage for _, _, e in s.mentions}
  ptoks = [t for s in passage for t in _items(s, art.entities)]
  rng = _rng(seed, doc_index, 3)
  out = []
  for q in ((art.headline,) if art.headline else ()) + (art.body[0],):
    if len(q.tokens) > sizes.max_query_tokens:
      skips["queries over max_query_tokens"] += 1
      continue
    ents = [e for _, _, e in q.mentions]
    items = _items(q, art.entities)
    k = -1
    for _, _, e in q.mentions:
      k = next(i for i in range(k + 1, len(items)) if items[i][1])
      if ents.count(e) > 1:
        skips["answers named twice in their query"] += 1
      elif e not in in_passage:
        skips["questions whose answer is not in the passage"] += 1
      else:
        masked = [*items[:k], (cq.PLACEHOLDER, False), *items[k + 1:]]
        out.append(_anonymise(ptoks, masked, art.entities[e], art.name, rng))
  if not out:
    skips["documents with no question"] += 1
  return out


def valid_question(q: cq.Question) -> bool:
  """What the reader needs of a question: one placeholder, the answer in the
  passage and among the entity lines."""
  return (q.query.count(cq.PLACEHOLDER) == 1 and q.answer in q.passage
          and q.answer in dict(q.entities))


@dataclasses.dataclass(frozen=True)
class NewsBuild:
  questions: dict[str, list[cq.Question]]  # split -> questions
  documents: dict[str, dict[str, int]]  # source -> split -> documents with questions
  skips: collections.Counter  # reason -> count (news.Skips)


def source_of(url: str) -> str:
  return url.split("/", 1)[0]


def build_news(articles: Sequence["news.Annotated"], seed: int = 0,
               sizes: NewsSizes = NewsSizes(),
               skips: collections.Counter | None = None) -> NewsBuild:
  """{split: questions} of the tagged articles, split by article (a seeded
  shuffle, ``split_news``). Questions that fail ``valid_question`` are
  counted and dropped (none should)."""
  skips = collections.Counter() if skips is None else skips
  questions: dict[str, list[cq.Question]] = {s: [] for s in cq.SPLITS}
  docs: dict[str, dict[str, int]] = {}
  for i, (art, split) in enumerate(zip(articles, split_news(len(articles), seed,
                                                             sizes.fractions))):
    qs = news_questions_of(art, i, seed, sizes, skips)
    bad = [q for q in qs if not valid_question(q)]
    if bad:
      skips["questions whose answer is not in the passage"] += len(bad)
      qs = [q for q in qs if valid_question(q)]
    if qs:
      questions[split] += qs
      d = docs.setdefault(source_of(art.name), {s: 0 for s in cq.SPLITS})
      d[split] += 1
  return NewsBuild(questions, docs, skips)


def _quantiles(xs: Sequence[float]) -> dict[str, float]:
  if not xs:
    return {}
  q = np.quantile(np.asarray(xs, float), (0.0, 0.5, 0.9, 0.99, 1.0))
  return {"mean": round(float(np.mean(xs)), 1),
          **{k: round(float(v), 1) for k, v in zip(("min", "median", "p90", "p99", "max"), q)}}


def stats(questions: Sequence[cq.Question]) -> dict[str, object]:
  """Sizes of a split: questions, passage and query tokens, the entities of a
  passage (candidates)."""
  return {"questions": len(questions),
          "passage_tokens": _quantiles([len(q.passage) for q in questions]),
          "query_tokens": _quantiles([len(q.query) for q in questions]),
          "passage_entities": _quantiles([len({t for t in q.passage if cq.entity_id(t) is not None})
                                          for q in questions])}


# --- Hermann et al.'s baselines -------------------------------------------------

WORD_DISTANCE_MAX = 8  # Hermann et al.'s m, the most one query word costs


def frequency_answer(q: cq.Question, exclusive: bool = False) -> str | None:
  """The passage's most frequent entity (the first seen on ties), leaving out
  those in the query if ``exclusive``; None if none is left. Maximum and
  exclusive frequency, Hermann et al. 2015 section 4."""
  skip = set(q.query) if exclusive else set()
  counts = collections.Counter(t for t in q.passage
                               if cq.entity_id(t) is not None and t not in skip)
  return counts.most_common(1)[0][0] if counts else None


def word_distance_answer(q: cq.Question, m: int = WORD_DISTANCE_MAX) -> str | None:
  """Hermann et al.'s word distance benchmark: align the placeholder with
  each entity occurrence in the passage; each other query word costs the
  distance between its offset from the placeholder and the nearest same
  word's offset from the occurrence, at most ``m`` (``m`` if absent). The
  answer is the entity of the cheapest occurrence (the first on ties)."""
  k = q.query.index(cq.PLACEHOLDER)
  where: dict[str, list[int]] = collections.defaultdict(list)
  for i, t in enumerate(q.passage):
    where[t].append(i)
  occ = [p for p, t in enumerate(q.passage) if cq.entity_id(t) is not None]
  if not occ:
    return None
  P = np.asarray(occ)
  cost = np.zeros(len(occ), np.int64)
  for j, t in enumerate(q.query):
    if j == k:
      continue
    pos = where.get(t)
    if pos is None:
      cost += m
    else:
      d = np.abs(np.asarray(pos)[None, :] - P[:, None] - (j - k)).min(1)
      cost += np.minimum(d, m)
  return q.passage[occ[int(np.argmin(cost))]]  # argmin: the first on ties


def baselines(questions: Sequence[cq.Question]) -> dict[str, float]:
  """Error rates of the three baselines: ``maxfreq``, ``exclusive`` (what
  this project called the word-count baseline) and ``word_distance``."""
  if not questions:
    return {}
  n = len(questions)
  return {"maxfreq": sum(frequency_answer(q) != q.answer for q in questions) / n,
          "exclusive": sum(frequency_answer(q, True) != q.answer for q in questions) / n,
          "word_distance": sum(word_distance_answer(q) != q.answer for q in questions) / n}
