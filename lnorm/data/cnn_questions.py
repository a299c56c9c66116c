"""DeepMind's question-answering corpora (Hermann et al. 2015) in their own
``.question`` format, and the arrays the attentive reader trains on.

Files: ``<data_dir>/cnn/questions/{training,validation,test}/*.question``, one
question each, as DeepMind distributes them::

    <url>
    (blank)
    <passage: tokens separated by single spaces, entities as @entityN>
    (blank)
    <query: tokens, exactly one of them @placeholder>
    (blank)
    <answer: @entityN>
    (blank)
    @entity0:<name>
    @entity1:<name>
    ...

The answer must be one of the entity lines. data_dir is resolved as for MNIST
(``files.resolve_data_dir``: the argument, ``$LNORM_DATA_DIR``, else
``~/.cache/lnorm/data``). ``scripts/make_cloze.py`` writes a stand-in in this
format from real news text (``lnorm/data/cloze.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from lnorm.data import DataError
from lnorm.data.files import resolve_data_dir

SPLITS = ("training", "validation", "test")
PLACEHOLDER = "@placeholder"
PAD, UNK = "<pad>", "<unk>"  # ids 0 and 1 of every vocabulary
SENTENCE_END = frozenset((".", "!", "?"))
_ENTITY = re.compile(r"@entity(\d+)")
_ENTITY_LINE = re.compile(r"(@entity\d+):(.*)")


@dataclasses.dataclass(frozen=True)
class Question:
  url: str
  passage: tuple[str, ...]
  query: tuple[str, ...]
  answer: str  # '@entityN'
  entities: tuple[tuple[str, str], ...]  # ('@entityN', name), in file order


def entity_id(token: str) -> int | None:
  """N for '@entityN', else None."""
  m = _ENTITY.fullmatch(token)
  return int(m.group(1)) if m else None


def format_question(q: Question) -> str:
  """The file's text; ``parse_question`` inverts it."""
  lines = [q.url, "", " ".join(q.passage), "", " ".join(q.query), "", q.answer, ""]
  lines += [f"{e}:{name}" for e, name in q.entities]
  return "\n".join(lines) + "\n"


def parse_question(text: str, where: str = "<string>") -> Question:
  """Raises ``DataError`` '<where>:<line>: ...' on the first malformed line."""
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the final newline
  def bad(n: int, what: str) -> DataError:
    return DataError(f"{where}:{n}: {what} (not a .question file: url, blank, passage, "
                     "blank, query, blank, answer, blank, @entityN:name lines)")
  if len(lines) < 8:
    raise bad(len(lines) + 1, f"file ends after {len(lines)} lines; expected at least 8")
  for n in (2, 4, 6, 8):
    if lines[n - 1].strip():
      raise bad(n, f"expected a blank line, found {lines[n - 1][:60]!r}")
  url, passage, query, answer = lines[0], lines[2].split(), lines[4].split(), lines[6].strip()
  if not url.strip():
    raise bad(1, "empty url")
  if not passage:
    raise bad(3, "empty passage")
  if query.count(PLACEHOLDER) != 1:
    raise bad(5, f"the query holds {query.count(PLACEHOLDER)} {PLACEHOLDER}; expected 1")
  if entity_id(answer) is None:
    raise bad(7, f"answer {answer[:60]!r} is not @entityN")
  entities = []
  for n, line in enumerate(lines[8:], start=9):
    m = _ENTITY_LINE.fullmatch(line)
    if m is None:
      raise bad(n, f"expected @entityN:name, found {line[:60]!r}")
    entities.append((m.group(1), m.group(2)))
  if answer not in dict(entities):
    raise bad(7, f"answer {answer} has no @entityN:name line")
  return Question(url, tuple(passage), tuple(query), answer, tuple(entities))


def read_question(path: str | os.PathLike[str]) -> Question:
  path = Path(path)
  try:
    text = path.read_text(encoding="utf-8")
  except (OSError, UnicodeDecodeError) as e:
    raise DataError(f"{path}: cannot read it ({str(e).splitlines()[0][:200]})") from e
  return parse_question(text, str(path))


def write_question(path: str | os.PathLike[str], q: Question) -> None:
  Path(path).write_text(format_question(q), encoding="utf-8")


def split_dir(data_dir: str | os.PathLike[str] | None, split: str) -> Path:
  if split not in SPLITS:
    raise DataError(f"split {split!r} is not valid; choose one of: {', '.join(SPLITS)}")
  return resolve_data_dir(data_dir) / "cnn" / "questions" / split


def load_split(data_dir: str | os.PathLike[str] | None, split: str, limit: int = 0
               ) -> list[Question]:
  """The split's questions in file-name order (the first ``limit`` if > 0)."""
  directory = split_dir(data_dir, split)
  if not directory.is_dir():
    raise DataError(f"{directory} not found; point data_dir (or $LNORM_DATA_DIR) at a "
                    "directory holding cnn/questions/, or build the stand-in with "
                    "`python scripts/make_cloze.py --out DIR`")
  paths = sorted(directory.glob("*.question"))
  if not paths:
    raise DataError(f"{directory} holds no .question files")
  if limit > 0:
    paths = paths[:limit]
  return [read_question(p) for p in paths]


def truncate_passage(q: Question, num_sentences: int) -> Question | None:
  """The passage cut after its ``num_sentences``-th sentence end ('.', '!', '?');
  None when the answer is no longer in it. 0 keeps the whole passage."""
  if num_sentences <= 0:
    return q
  ends, cut = 0, len(q.passage)
  for i, tok in enumerate(q.passage):
    if tok in SENTENCE_END:
      ends += 1
      if ends == num_sentences:
        cut = i + 1
        break
  passage = q.passage[:cut]
  if q.answer not in passage:
    return None
  return dataclasses.replace(q, passage=passage)


def build_vocab(questions: Iterable[Question], min_count: int = 1, max_size: int = 0
                ) -> dict[str, int]:
  """token -> id over passages and queries: PAD 0, UNK 1, then by decreasing
  count (ties by token). Entity tokens and @placeholder are always kept."""
  counts: collections.Counter[str] = collections.Counter()
  for q in questions:
    counts.update(q.passage)
    counts.update(q.query)
  special = sorted((t for t in counts if t == PLACEHOLDER or entity_id(t) is not None),
                   key=lambda t: (entity_id(t) is not None, entity_id(t) or 0))
  keep = set(special)
  words = sorted((t for t in counts if t not in keep and counts[t] >= min_count),
                 key=lambda t: (-counts[t], t))
  if max_size > 0:
    words = words[:max(0, max_size - 2 - len(special))]
  return {t: i for i, t in enumerate([PAD, UNK, *special, *words])}


def num_entities(questions: Iterable[Question]) -> int:
  """1 + the largest entity id in any passage, query or answer."""
  top = -1
  for q in questions:
    for tok in (*q.passage, *q.query, q.answer):
      n = entity_id(tok)
      if n is not None and n > top:
        top = n
  return top + 1


def entity_tokens(vocab: Mapping[str, int], entities: int) -> np.ndarray:
  """int32 [entities]: the vocabulary id of each @entityN. Every one must be in
  the vocabulary (renumbering entities maps each to another's token)."""
  missing = [f"@entity{n}" for n in range(entities) if f"@entity{n}" not in vocab]
  if missing:
    raise DataError(f"{len(missing)} entities never occur in the training questions "
                    f"(first: {missing[0]}), so they cannot be renumbered")
  return np.asarray([vocab[f"@entity{n}"] for n in range(entities)], np.int32)


def to_arrays(questions: Sequence[Question], vocab: Mapping[str, int], entities: int,
              passage_len: int = 0, query_len: int = 0) -> dict[str, np.ndarray]:
  """Padded arrays: ``passage`` [N, Tp] and ``query`` [N, Tq] int32 token ids
  (PAD = 0 past each end), their bool masks, ``candidates`` [N, entities]
  (the entities that occur in the passage) and ``answer`` [N] int32 (N of
  @entityN). Lengths default to the longest; a longer text is an error."""
  n = len(questions)
  Tp = passage_len or max((len(q.passage) for q in questions), default=1)
  Tq = query_len or max((len(q.query) for q in questions), default=1)
  out = {"passage": np.zeros((n, Tp), np.int32), "query": np.zeros((n, Tq), np.int32),
         "passage_mask": np.zeros((n, Tp), bool), "query_mask": np.zeros((n, Tq), bool),
         "candidates": np.zeros((n, entities), bool), "answer": np.zeros((n,), np.int32)}
  unk = vocab[UNK]
  for i, q in enumerate(questions):
    for key, toks, T in (("passage", q.passage, Tp), ("query", q.query, Tq)):
      if len(toks) > T:
        raise DataError(f"{q.url}: {key} of {len(toks)} tokens is longer than {T}")
      out[key][i, :len(toks)] = [vocab.get(t, unk) for t in toks]
      out[key + "_mask"][i, :len(toks)] = True
    for tok in q.passage:
      e = entity_id(tok)
      if e is not None and e < entities:
        out["candidates"][i, e] = True
    a = entity_id(q.answer)
    if a is None or a >= entities or not out["candidates"][i, a]:
      raise DataError(f"{q.url}: answer {q.answer} is not among the passage's entities "
                      f"(of {entities})")
    out["answer"][i] = a
  return out
