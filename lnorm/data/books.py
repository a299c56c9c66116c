"""Contiguous sentences from books, as (previous, current, next) triples for
skip-thoughts (Kiros et al. 2015), and the vocabulary built from them.

Layout: any set of text files, one sentence a line, in book order. Each file
is one book, and a blank line also ends a document, so triples never span two
books (or two blank-line-separated documents). BookCorpus's own release
(``books_large_p1.txt``, ``books_large_p2.txt``) has this layout but marks no
boundaries between the books inside a file; with it, only file ends and blank
lines are boundaries.

The default corpus is the 17 Project Gutenberg books in
``<data_dir>/text/gutenberg/`` (``GUTENBERG``), a stand-in for BookCorpus.
Split by whole books: ``HELDOUT_BOOKS``, austen-persuasion.txt and
chesterton-thursday.txt (7,217 sentences, 7,213 triples), are the held-out set;
the other 15 (59,155 sentences, 59,125 triples) the training set.

A bigger stand-in (``load_novels``, ``corpus = "novels"`` in the config): the
99 Gutenberg novels of ``<data_dir>/text/novels/novels.tar.gz`` (about 9.4M
words; its README), read from the archive with ``bytes_lm.read_novels`` and
cleaned of transcriber credits and illustration markers by
``bytes_lm.clean_book``. Each book is one document: its paragraphs (blank-line
separated, hard-wrapped lines joined by a space) in order, cut into sentences
by ``split_sentences``, so that a triple may cross a paragraph (BookCorpus's
triples do too). Before that, ``normalize_novel`` drops the ``_underscores_``
that mark italics (so that "_one_" and "one" are one word) and spaces out the
dashes ("--" and em dashes become " -- ", as in the Treebank text). Held out
by name: ``NOVELS_HELDOUT``, the byte LM's five test books
(``bytes_lm.TEST_BOOKS``). The four novels also in ``text/gutenberg``
(``NOVELS_IN_GUTENBERG``: Austen's Emma and Persuasion, Carroll's Alice,
Melville's Moby Dick) must lie on one side of the split, all training or all
held out (a one-line DataError otherwise); by default all four train.

Sentence splitting (``split_sentences``; no model or download: NLTK's punkt
data is not available here): a sentence ends at ".", "!" or "?" (a run of them
counts as one), with any closing quotes, brackets or underscores after it,
when white space and then an upper-case letter follow, that letter maybe
after opening quotes or brackets. A "." does not end a sentence after a
title or abbreviation of ``ABBREVIATIONS`` (Mr., Mrs., Dr., St., ...) or
after a single capital other than "I" (the initials of "J. W. Arrowsmith"). Lower-case
continuations ('"Ah! poor Miss Taylor!"') stay one sentence.

Tokenisation (``tokenize``): lower-cased, split on white space, and clitics and
punctuation split off as in the Penn Treebank ("don't." -> "do n't ."). The
Gutenberg books, MR, CR, SUBJ and MPQA are already tokenised so; SICK is not.

Vocabulary (``Vocab.build``): id 0 is PAD, 1 EOS (ends every sentence), 2 UNK,
then the ``size - 3`` most frequent training-set tokens, most frequent first,
ties in alphabetical order. Kiros et al. use 20,000 words.

The data_dir is, as for MNIST (``lnorm.data.files.resolve_data_dir``): the
argument if non-empty, ``$LNORM_DATA_DIR``, else ``~/.cache/lnorm/data``.

Checks: the Gutenberg books are verified together against the SHA-256 of
their 17 files concatenated in name order, the novels' archive against its
own SHA-256 and its gzip CRC (both pinned in ``files.SHA256``, as the data's
READMEs give them; ``verify=False`` skips the pinned checks). A folder of
one's own books (``book_files`` + ``load_corpus``) has no checksum to check.
A mismatch is one ``DataError`` line naming the file or folder.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from lnorm.data import DataError
from lnorm.data import bytes_lm
from lnorm.data import files as data_files
from lnorm.data.files import reason, resolve_data_dir

GUTENBERG = data_files.GUTENBERG
HELDOUT_BOOKS = ("austen-persuasion.txt", "chesterton-thursday.txt")
NOVELS = bytes_lm.NOVELS
NOVELS_HELDOUT = bytes_lm.TEST_BOOKS
NOVELS_IN_GUTENBERG = ("austen_emma.txt", "austen_persuasion.txt", "carroll_alice.txt",
                       "melville_moby.txt")
# Words after which a "." ends no sentence (compared lower-cased).
ABBREVIATIONS = frozenset(
    "mr mrs ms messrs mme mlle dr st jr sr prof rev revd hon esq capt col gen lt sgt maj "
    "gov sen rep fr mt no vol vols ch chap viz etc vs cf ibid".split())
PAD, EOS, UNK = 0, 1, 2
SPECIALS = ("<pad>", "<eos>", "<unk>")

_CLITIC = re.compile(r"(?i)(\w)(n't|'s|'re|'ve|'ll|'d|'m)\b")
_PUNCT = re.compile(r"""([.,!?;:"()\[\]{}]|``|'')""")


def tokenize(line: str) -> list[str]:
  """Lower-cased Treebank-style tokens; idempotent on tokenised text."""
  line = _CLITIC.sub(r"\1 \2", line.lower())
  return _PUNCT.sub(r" \1 ", line).split()


# A candidate end: the stop(s), closers, white space, then (maybe after
# openers) an upper-case letter, which the lookahead leaves to the next sentence.
_END = re.compile(r"""([.!?]+)(["')\]_]*)\s+(?=["'(\[_]*[A-Z\u00C0-\u00DE])""")
_LAST_WORD = re.compile(r"(\w+)$")
_DASH = re.compile(r"\s*(?:--+|\u2014+)\s*")


def split_sentences(paragraph: str) -> list[str]:
  """The sentences of a paragraph (one line of text), by the rule of the
  module doc; white space at either end dropped, empty ones left out."""
  out, start = [], 0
  for m in _END.finditer(paragraph):
    if m.group(1) == ".":
      w = _LAST_WORD.search(paragraph, 0, m.start())
      if w and (w.group(1).lower() in ABBREVIATIONS
                or (len(w.group(1)) == 1 and w.group(1).isupper() and w.group(1) != "I")):
        continue
    out.append(paragraph[start:m.end(2)].strip())
    start = m.end()
  out.append(paragraph[start:].strip())
  return [x for x in out if x]


def normalize_novel(text: str) -> str:
  """Italic underscores dropped, dashes spaced out (see the module doc)."""
  return _DASH.sub(" -- ", text.replace("_", ""))


def novel_sentences(text: str) -> list[str]:
  """A raw novel's sentences in order: cleaned (``bytes_lm.clean_book``),
  normalised, paragraphs joined into lines, each split into sentences."""
  paragraphs = re.split(r"\n\s*\n", normalize_novel(bytes_lm.clean_book(text)))
  return [s for p in paragraphs for s in split_sentences(" ".join(p.split()))]


@dataclasses.dataclass(frozen=True)
class Document:
  name: str                 # file name, with "#k" for the k-th blank-line part after the first
  sentences: tuple[str, ...]


def read_documents(paths: Iterable[str | os.PathLike[str]]) -> list[Document]:
  """Each file's non-blank lines, cut into documents at blank lines."""
  docs = []
  for p in paths:
    p = Path(p)
    try:
      text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
      raise DataError(f"{p}: cannot read it ({reason(e)})") from e
    part, k = [], 0
    for line in text.splitlines() + [""]:
      if line.strip():
        part.append(line.strip())
      elif part:
        docs.append(Document(p.name if k == 0 else f"{p.name}#{k}", tuple(part)))
        part, k = [], k + 1
  return docs


def book_files(directory: str | os.PathLike[str]) -> list[Path]:
  """The ``*.txt`` files of ``directory``, in name order."""
  return data_files.txt_files(directory, "the books, one sentence a line")


def split_books(files: Sequence[Path], heldout: Sequence[str] = HELDOUT_BOOKS
                ) -> tuple[list[Path], list[Path]]:
  """(training files, held-out files) by file name."""
  missing = sorted(set(heldout) - {f.name for f in files})
  if missing:
    raise DataError(f"held-out books {', '.join(missing)} not among the {len(files)} books")
  return ([f for f in files if f.name not in heldout],
          [f for f in files if f.name in heldout])


@dataclasses.dataclass(frozen=True)
class Vocab:
  words: tuple[str, ...]  # id -> word; words[:3] == SPECIALS

  @classmethod
  def build(cls, sentences: Iterable[str], size: int) -> "Vocab":
    if size <= len(SPECIALS):
      raise ValueError(f"vocabulary size {size} must exceed {len(SPECIALS)}")
    counts = collections.Counter(t for s in sentences for t in tokenize(s))
    for w in SPECIALS:
      counts.pop(w, None)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size - len(SPECIALS)]
    return cls(SPECIALS + tuple(w for w, _ in top))

  def __len__(self) -> int:
    return len(self.words)

  @property
  def index(self) -> dict[str, int]:
    return {w: i for i, w in enumerate(self.words)}

  def encode(self, sentences: Sequence[str], max_len: int) -> np.ndarray:
    """int32 (N, max_len): token ids, EOS, then PAD; truncated to
    ``max_len - 1`` tokens so that every row ends with EOS."""
    index = self.index
    out = np.full((len(sentences), max_len), PAD, np.int32)
    for i, s in enumerate(sentences):
      ids = [index.get(t, UNK) for t in tokenize(s)][:max_len - 1] + [EOS]
      out[i, :len(ids)] = ids
    return out

  def decode(self, ids: Sequence[int]) -> str:
    out = []
    for i in ids:
      if i in (EOS, PAD):
        break
      out.append(self.words[i])
    return " ".join(out)


@dataclasses.dataclass(frozen=True)
class Triples:
  """Sentences of several documents, end to end, and the triples within them."""
  tokens: np.ndarray   # int32 (S, max_len), every sentence in document order
  middle: np.ndarray   # int32 (N,): index of each triple's current sentence;
                       # its previous and next are middle - 1 and middle + 1
  documents: tuple[str, ...]
  doc_of: np.ndarray   # int32 (S,): each sentence's document

  def __len__(self) -> int:
    return len(self.middle)

  def batch(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(previous, current, next) token rows of triples ``idx``."""
    m = self.middle[idx]
    return self.tokens[m - 1], self.tokens[m], self.tokens[m + 1]


def triples(docs: Sequence[Document], vocab: Vocab, max_len: int) -> Triples:
  """Every sentence with a neighbour on both sides in its own document."""
  sents = [s for d in docs for s in d.sentences]
  doc_of = np.concatenate([np.full(len(d.sentences), i, np.int32)
                           for i, d in enumerate(docs)] or [np.zeros(0, np.int32)])
  middle, start = [], 0
  for d in docs:
    middle.extend(range(start + 1, start + len(d.sentences) - 1))
    start += len(d.sentences)
  return Triples(vocab.encode(sents, max_len), np.asarray(middle, np.int32),
                 tuple(d.name for d in docs), doc_of)


@dataclasses.dataclass(frozen=True)
class Corpus:
  train: Triples
  heldout: Triples
  vocab: Vocab


def load_corpus(files: Sequence[str | os.PathLike[str]], heldout_files: Sequence[
    str | os.PathLike[str]], vocab_size: int, max_len: int) -> Corpus:
  """Triples of training and held-out files; the vocabulary from training only."""
  train_docs = read_documents(files)
  if not train_docs:
    raise DataError(f"no sentences in the training files ({', '.join(map(str, files))})")
  vocab = Vocab.build((s for d in train_docs for s in d.sentences), vocab_size)
  return Corpus(triples(train_docs, vocab, max_len),
                triples(read_documents(heldout_files), vocab, max_len), vocab)


def load_gutenberg(data_dir: str | os.PathLike[str] | None = None, vocab_size: int = 20000,
                   max_len: int = 30, heldout: Sequence[str] = HELDOUT_BOOKS,
                   verify: bool = True) -> Corpus:
  """The default corpus: ``<data_dir>/text/gutenberg/*.txt``, split by ``heldout``."""
  directory = resolve_data_dir(data_dir) / GUTENBERG
  files = book_files(directory)
  if verify:
    data_files.check_gutenberg(directory, files)
  train, held = split_books(files, heldout)
  return load_corpus(train, held, vocab_size, max_len)


def load_novels(data_dir: str | os.PathLike[str] | None = None, vocab_size: int = 20000,
                max_len: int = 30, heldout: Sequence[str] = NOVELS_HELDOUT,
                verify: bool = True) -> Corpus:
  """The novels of ``<data_dir>/text/novels/novels.tar.gz``, a document a
  book, split by ``heldout`` (file names in the archive)."""
  path = resolve_data_dir(data_dir) / NOVELS
  texts = bytes_lm.read_novels(path, verify)
  missing = sorted(set(heldout) - set(texts))
  if missing:
    raise DataError(f"{path}: held-out books {', '.join(missing)} not among its "
                    f"{len(texts)} books")
  shared = sorted(set(NOVELS_IN_GUTENBERG) & set(texts))
  held_shared = [n for n in shared if n in heldout]
  if held_shared and len(held_shared) != len(shared):
    raise DataError(f"{', '.join(shared)} are also in {GUTENBERG}: hold out all of them or "
                    f"none, not {', '.join(held_shared)} alone")
  if not set(texts) - set(heldout):
    raise DataError(f"{path}: every book is held out; none is left to train on")
  docs = {n: Document(n, tuple(novel_sentences(texts[n]))) for n in sorted(texts)}
  train = [d for n, d in docs.items() if n not in heldout]
  held = [d for n, d in docs.items() if n in heldout]
  vocab = Vocab.build((s for d in train for s in d.sentences), vocab_size)
  return Corpus(triples(train, vocab, max_len), triples(held, vocab, max_len), vocab)
