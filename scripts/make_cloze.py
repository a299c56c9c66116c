r"""Builds the stand-in for the CNN question corpus (lnorm/data/cloze.py) as
DeepMind's .question files under <out>/cnn/questions/{training,validation,test}/.

  python scripts/make_cloze.py --out ~/.cache/lnorm/data/cnn_standin \
      [--text_dir ../shared/data/text] [--seed 0] [--no_books]

Then train with --config.data_dir=<out>. The same inputs and seed give
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

from lnorm.data import DataError  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import cloze  # pylint: disable=g-import-not-at-top,wrong-import-position
from lnorm.data import cnn_questions as cq  # pylint: disable=g-import-not-at-top,wrong-import-position

_REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--out", required=True, help="data_dir to write cnn/questions/ into")
  p.add_argument("--text_dir", default=str(_REPO.parent / "shared" / "data" / "text"),
                 help="holds abc.zip and gutenberg/")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--passage_sentences", type=int, default=4)
  p.add_argument("--context_sentences", type=int, default=20)
  p.add_argument("--max_context_tokens", type=int, default=0, help="0 = no limit")
  p.add_argument("--stride", type=int, default=1, help="sentences between book windows")
  p.add_argument("--no_books", action="store_true", help="news questions only")
  a = p.parse_args(argv)
  t0 = time.perf_counter()
  try:
    if a.passage_sentences < 1 or a.context_sentences < 1 or a.stride < 1:
      raise DataError("--passage_sentences, --context_sentences and --stride must be >= 1")
    text = Path(a.text_dir).expanduser()
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
    where = cloze.write_splits(a.out, questions)
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
