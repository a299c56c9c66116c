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

Tokenisation (``tokenize``): lower-cased, split on white space, and clitics and
punctuation split off as in the Penn Treebank ("don't." -> "do n't ."). The
Gutenberg books, MR, CR, SUBJ and MPQA are already tokenised so; SICK is not.

Vocabulary (``Vocab.build``): id 0 is PAD, 1 EOS (ends every sentence), 2 UNK,
then the ``size - 3`` most frequent training-set tokens, most frequent first,
ties in alphabetical order. Kiros et al. use 20,000 words.

The data_dir is, as for MNIST (``lnorm.data.files.resolve_data_dir``): the
argument if non-empty, ``$LNORM_DATA_DIR``, else ``~/.cache/lnorm/data``.
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
from lnorm.data.files import reason, resolve_data_dir

GUTENBERG = "text/gutenberg"
HELDOUT_BOOKS = ("austen-persuasion.txt", "chesterton-thursday.txt")
PAD, EOS, UNK = 0, 1, 2
SPECIALS = ("<pad>", "<eos>", "<unk>")

_CLITIC = re.compile(r"(?i)(\w)(n't|'s|'re|'ve|'ll|'d|'m)\b")
_PUNCT = re.compile(r"""([.,!?;:"()\[\]{}]|``|'')""")


def tokenize(line: str) -> list[str]:
  """Lower-cased Treebank-style tokens; idempotent on tokenised text."""
  line = _CLITIC.sub(r"\1 \2", line.lower())
  return _PUNCT.sub(r" \1 ", line).split()


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
  d = Path(directory)
  if not d.is_dir():
    raise DataError(f"{d}/ not found; it should hold the books, one sentence a line")
  files = sorted(f for f in d.glob("*.txt") if f.is_file())
  if not files:
    raise DataError(f"{d}: no .txt books found")
  return files


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
                   max_len: int = 30, heldout: Sequence[str] = HELDOUT_BOOKS) -> Corpus:
  """The default corpus: ``<data_dir>/text/gutenberg/*.txt``, split by ``heldout``."""
  train, held = split_books(book_files(resolve_data_dir(data_dir) / GUTENBERG), heldout)
  return load_corpus(train, held, vocab_size, max_len)
