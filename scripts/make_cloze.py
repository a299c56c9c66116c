r"""Builds the stand-in for the CNN question corpus (lnorm/data/cloze.py) as
DeepMind's .question files under <out>/cnn/questions/{training,validation,test}/.

  python scripts/make_cloze.py --standin cnn_standin_4   # what configs/reader.py:cpu reads
  python scripts/make_cloze.py --out DIR [--context_sentences 20] [--text_dir DIR] \
      [--seed 0] [--no_books]

``--standin NAME`` writes the stand-in a reader preset reads (its
questions_dir) into ``<data_dir>/NAME`` (data_dir: $LNORM_DATA_DIR, else
~/.cache/lnorm/data), with that stand-in's --context_sentences
(``cloze.STANDINS``). With ``--out DIR``, train with --config.data_dir=DIR
--config.questions_dir=''. Text is read from ``<data_dir>/text`` unless
--text_dir is given. The same inputs and seed give
byte-identical files. An existing set in <out> is replaced only once the new
one is complete. Prints the counts. Errors: one line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys
import time

if __package__ in (None, ""):  # Run as `python scripts/make_cloze.py`.
  sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lnorm.data import DataError, resolve_data_dir  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import cloze  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import cnn_questions as cq  # pylint: disable=g-import-not-at-top,wrong-import-position



def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  where = p.add_mutually_exclusive_group(required=True)
  where.add_argument("--standin", choices=sorted(cloze.STANDINS),
                     help="build this stand-in into <data_dir>/<standin>")
  where.add_argument("--out", help="folder to write cnn/questions/ into")
  p.add_argument("--text_dir", default="",
                 help="holds abc.zip and gutenberg/ (default <data_dir>/text)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--passage_sentences", type=int, default=4)
  p.add_argument("--context_sentences", type=int, default=None,
                 help="books' context sentences (default: the stand-in's, else 20)")
  p.add_argument("--max_context_tokens", type=int, default=0, help="0 = no limit")
  p.add_argument("--stride", type=int, default=1, help="sentences between book windows")
  p.add_argument("--no_books", action="store_true", help="news questions only")
  a = p.parse_args(argv)
  t0 = time.perf_counter()
  try:
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


if __name__ == "__main__":
  sys.exit(main())
