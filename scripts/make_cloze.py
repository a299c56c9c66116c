r"""Builds a stand-in for the CNN question corpus (lnorm/data/cloze.py) as
DeepMind's .question files under <out>/cnn/questions/{training,validation,test}/.

  python scripts/make_cloze.py --standin news_standin    # news cloze (requirements-extras.txt)
  python scripts/make_cloze.py --standin cnn_standin_4   # what configs/reader.py:cpu reads
  python scripts/make_cloze.py --out DIR [--context_sentences 20] [--text_dir DIR] \
      [--seed 0] [--no_books]
  python scripts/make_cloze.py --out DIR --news [--max_passage_tokens 250] [--max_query_tokens 50]
  python scripts/make_cloze.py --standin news_standin --sample_entities 100  # reads, builds nothing

``--standin NAME`` writes the stand-in a reader preset reads (its
questions_dir) into ``<data_dir>/NAME`` (data_dir: $LNORM_DATA_DIR, else
~/.cache/lnorm/data), with that stand-in's settings (``cloze.STANDINS``,
``cloze.NEWS_STANDINS``). With ``--out DIR``, train with --config.data_dir=DIR
--config.questions_dir=''. Text is read from ``<data_dir>/text`` unless
--text_dir is given. The same inputs and seed give byte-identical files. An
existing set in <out> is replaced only once the new one is complete. Prints
the counts.

The news stand-in (``--news``, or ``--standin news_standin``): Reuters-21578,
BBC News and NLTK's ABC news, entities by spaCy's English model, mentions
merged per article (lnorm/data/news.py). It also prints, and writes beside
the splits as ``build.json``, each split's sizes, what was skipped and why
(one line), the recognizer, and Hermann et al.'s baselines on each split
(``cloze.baselines``). ``--sample_entities N`` prints N entities drawn (with
``--seed``) from the built validation and test questions, each with its
context, to judge the recognizer by hand (results/cloze_ner/precision.md).

Errors (a missing file, no questions at all, spaCy absent): one line on
stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
import random
import sys
import time

if __package__ in (None, ""):  # Run as `python scripts/make_cloze.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lnorm.data import DataError, resolve_data_dir  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import cloze  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import cnn_questions as cq  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import news  # pylint: disable=g-import-not-at-top,wrong-import-position

# News text read beyond the passage budget is never in a passage: the lead
# and headline come first, so a little more than the budget is tagged.
HEAD_WORDS_MARGIN = 100


def build_news(text: Path, out: Path, seed: int, sizes: cloze.NewsSizes,
               recognize: news.Recognizer | None = None) -> int:
  """The news stand-in into ``out`` (module doc); the exit status."""
  t0 = time.perf_counter()
  recognize = recognize or news.spacy_recognizer()  # refuses before the slow part
  skips = news.Skips()
  articles = news.clean(news.read_all(text, skips), skips)
  articles = [news.head(a, sizes.max_passage_tokens + HEAD_WORDS_MARGIN) for a in articles]
  print(f"tagging {len(articles)} articles with {getattr(recognize, 'name', 'a recognizer')}",
        flush=True)
  tagged = news.tag(articles, recognize, skips)
  built = cloze.build_news(tagged, seed, sizes, skips)
  empty = [s for s in cq.SPLITS if not built.questions[s]]
  if empty:
    raise DataError(f"no {', '.join(empty)} questions from {len(articles)} articles in {text} "
                    f"({skips.line()})")
  report = {"recognizer": getattr(recognize, "name", "?"), "seed": seed,
            "sizes": dataclasses.asdict(sizes), "documents": built.documents,
            "skipped": dict(sorted(skips.items())),
            "splits": {s: cloze.stats(built.questions[s]) for s in cq.SPLITS},
            "baselines": {s: cloze.baselines(built.questions[s]) for s in cq.SPLITS},
            "build_seconds": round(time.perf_counter() - t0)}
  where = cloze.write_splits(out, built.questions,
                             {"build.json": json.dumps(report, indent=1) + "\n"})
  print(f"wrote {where} in {time.perf_counter() - t0:.0f}s with {report['recognizer']}")
  print(skips.line())
  print(f"{'source':13s} " + " ".join(f"{s:>10s}" for s in cq.SPLITS) + "  documents")
  for src, d in sorted(built.documents.items()):
    print(f"{src:13s} " + " ".join(f"{d[s]:10d}" for s in cq.SPLITS))
  print(f"{'split':10s} {'questions':>9s} {'passage p50/p90/max':>20s} {'query max':>9s} "
        f"{'entities mean/max':>17s}  errors: maxfreq exclusive word_distance")
  for s in cq.SPLITS:
    st, b = report["splits"][s], report["baselines"][s]
    p, e = st["passage_tokens"], st["passage_entities"]
    print(f"{s:10s} {st['questions']:9d} {p['median']:>8.0f}/{p['p90']:.0f}/{p['max']:.0f}"
          f"{'':4s} {st['query_tokens']['max']:9.0f} {e['mean']:>12.1f}/{e['max']:.0f}"
          f"{'':10s}{b['maxfreq']:.3f}     {b['exclusive']:.3f}        {b['word_distance']:.3f}")
  return 0


def sample_entities(root: Path, n: int, seed: int) -> list[str]:
  """``n`` distinct (article, entity) draws from the held-out splits' questions,
  each shown as its name and the passage around its first mention, in the
  passage's words (the names of the entities restored)."""
  qs = [q for s in ("validation", "test") for q in cq.load_split(root, s)]
  rng = random.Random(seed)
  lines, seen = [], set()
  while len(lines) < min(n, sum(len(q.entities) for q in qs)):
    q = rng.choice(qs)
    names = dict(q.entities)
    ids = sorted({t for t in q.passage if t in names})
    e = rng.choice(ids)
    if (q.url, names[e]) in seen:  # one article's entity once, however many questions ask it
      continue
    seen.add((q.url, names[e]))
    k = len(lines)
    i = q.passage.index(e)
    ctx = " ".join(f"[{names[t]}]" if t == e else names.get(t, t)
                   for t in q.passage[max(0, i - 12):i + 12])
    lines.append(f"{k + 1:3d}. {names[e]!r} | {q.url} | ... {ctx} ...")
  return lines



def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  where = p.add_mutually_exclusive_group(required=True)
  where.add_argument("--standin", choices=sorted(cloze.STANDINS),
                     help="build this stand-in into <data_dir>/<standin>")
  where.add_argument("--out", help="folder to write cnn/questions/ into")
  p.add_argument("--text_dir", default="",
                 help="holds abc.zip, gutenberg/ and news/ (default <data_dir>/text)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--passage_sentences", type=int, default=4)
  p.add_argument("--context_sentences", type=int, default=None,
                 help="books' context sentences (default: the stand-in's, else 20)")
  p.add_argument("--max_context_tokens", type=int, default=0, help="0 = no limit")
  p.add_argument("--stride", type=int, default=1, help="sentences between book windows")
  p.add_argument("--no_books", action="store_true", help="news questions only")
  p.add_argument("--news", action="store_true",
                 help="the news stand-in (Reuters, BBC, ABC; spaCy) instead of ABC and books")
  p.add_argument("--max_passage_tokens", type=int, default=None,
                 help="news: passage budget in tokens (default: the stand-in's)")
  p.add_argument("--max_query_tokens", type=int, default=None,
                 help="news: longer queries are skipped (default: the stand-in's)")
  p.add_argument("--sample_entities", type=int, default=0,
                 help="news: print N entities of the built set to judge by hand; builds nothing")
  a = p.parse_args(argv)
  t0 = time.perf_counter()
  try:
    if a.news or a.standin in cloze.NEWS_STANDINS:
      return _news(a)
    if a.max_passage_tokens is not None or a.max_query_tokens is not None or a.sample_entities:
      raise DataError("--max_passage_tokens, --max_query_tokens and --sample_entities are for "
                      "the news stand-in (--news or --standin news_standin)")
    if a.context_sentences is None:
      a.context_sentences = cloze.STANDINS.get(a.standin, 20)
    elif a.standin and a.context_sentences != cloze.STANDINS[a.standin]:
      raise DataError(f"--standin {a.standin} has --context_sentences "
                      f"{cloze.STANDINS[a.standin]}; use --out DIR for another set")
    out = resolve_data_dir("") / a.standin if a.standin else Path(a.out).expanduser()
    if a.passage_sentences < 1 or a.context_sentences < 1 or a.stride < 1:
      raise DataError("--passage_sentences, --context_sentences and --stride must be >= 1")
    text = Path(a.text_dir).expanduser() if a.text_dir else resolve_data_dir("") / "text"
    news = cloze.read_abc(text / "abc.zip")
    books = [] if a.no_books else cloze.read_books(text / "gutenberg")
    names = {d.name.rsplit("/", 1)[-1] for d in books}
    missing = [b for b in (*cloze.VALIDATION_BOOKS, *cloze.TEST_BOOKS) if b not in names]
    if books and missing:
      raise DataError(f"{text / 'gutenberg'}: held-out books missing: {', '.join(missing)}")
    questions, counts = cloze.build(
        news, books, seed=a.seed, passage_sentences=a.passage_sentences,
        context_sentences=a.context_sentences, max_context_tokens=a.max_context_tokens,
        stride=a.stride)
    where = cloze.write_splits(out, questions)
  except (DataError, OSError) as e:
    print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    return 1
  print(f"wrote {where} in {time.perf_counter() - t0:.0f}s")
  print(f"{'source':8s} {'split':10s} {'documents':>9s} {'questions':>9s}")
  for src in ("news", "books"):
    for split in cq.SPLITS:
      print(f"{src:8s} {split:10s} {counts.documents[src][split]:9d} "
            f"{counts.questions[src][split]:9d}")
  for split in cq.SPLITS:
    print(f"{'all':8s} {split:10s} {'':9s} {len(questions[split]):9d}")
  return 0


def _news(a: argparse.Namespace) -> int:
  out = resolve_data_dir("") / a.standin if a.standin else Path(a.out).expanduser()
  if a.sample_entities:
    print("\n".join(sample_entities(out, a.sample_entities, a.seed)))
    return 0
  sizes = cloze.NEWS_STANDINS.get(a.standin, cloze.NewsSizes())
  given = {k: v for k, v in (("max_passage_tokens", a.max_passage_tokens),
                             ("max_query_tokens", a.max_query_tokens)) if v is not None}
  if a.standin and any(getattr(sizes, k) != v for k, v in given.items()):
    raise DataError(f"--standin {a.standin} has {sizes}; use --out DIR --news for another set")
  sizes = dataclasses.replace(sizes, **given)
  if sizes.max_passage_tokens < 1 or sizes.max_query_tokens < 1:
    raise DataError("--max_passage_tokens and --max_query_tokens must be >= 1")
  text = Path(a.text_dir).expanduser() if a.text_dir else resolve_data_dir("") / "text"
  return build_news(text, out, a.seed, sizes)


if __name__ == "__main__":
  sys.exit(main())
