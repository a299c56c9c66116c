"""The one rule every target's verdicts follow (issue 63): a claim judged seed
by seed against the spread between seeds.

Seed s of one side is paired with seed s of the other (the same
initialisation key and batch order). With n seeds, k of them agreeing with the
claim:

  holds        every seed agrees and the two sides' ranges over the seeds do
               not overlap (a stated test, e.g. "within the spread": it passes
               in every seed)
  fails        every seed disagrees and the ranges do not overlap (a test: it
               fails in every seed)
  leans        most seeds agree (2k > n), but the ranges overlap
  cannot tell  the difference is inside the seeds' spread: the ranges overlap
               and at most half the seeds agree (a tie is a tie, not a failure)

Ranges apart means every seed of one side beats every seed of the other, so
k is then n or 0. One seed has no spread to judge against: its verdict says
what that seed did, and that. Step times are judged only from an idle
benchmark in one process (scripts/bench/), never from the runs' own timings:
runs that share the machine slow each other unevenly (the same Transformer run
took 0.60 s an update beside another run, 0.27 s alone), so a speed claim with
no such record reads ``untimed``.

A smoke preset's runs are a few updates of tiny models: they check that every
run, record, table and figure is made, not the claims. Under :func:`smoke`
(reproduce.py enters it for ``--preset smoke``) every verdict cell reads
``plumbing only (smoke preset)`` instead of a verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Iterator, Sequence

HOLDS, FAILS, LEANS, CANNOT_TELL, ONE_SEED = "holds", "fails", "leans", "cannot tell", "one seed"
PLUMBING = "plumbing only (smoke preset)"
_judging = [True]  # False inside smoke(): cells say PLUMBING


@contextlib.contextmanager
def smoke(on: bool = True) -> Iterator[None]:
  """Within it (with ``on``), every verdict cell reads PLUMBING: a smoke run's
  numbers judge no claim."""
  _judging.append(not on)
  try:
    yield
  finally:
    _judging.pop()

RULE = ("A claim **holds** where every seed agrees and the two sides' ranges over the seeds do "
        "not overlap (or a stated test passes in every seed), **fails** where every seed "
        "disagrees beyond the spread, **leans** where most seeds agree but the ranges overlap, "
        "and reads **cannot tell** where the difference is inside the seeds' spread; one seed "
        "has no spread to judge against (scripts/paper/verdicts.py).")


@dataclasses.dataclass(frozen=True)
class Verdict:
  word: str                   # HOLDS, FAILS, LEANS, CANNOT_TELL or ONE_SEED
  agree: int                  # seeds agreeing with the claim
  n: int                      # seeds
  overlap: bool | None = None  # the two sides' ranges overlap; None for a stated test
  ties: int = 0               # seeds in which the two sides are equal
  why: str = ""               # said instead of the counts (``untimed``, ``both``)

  def __str__(self) -> str:
    """The table cell: the word in bold and what it rests on."""
    if not _judging[-1]:
      return PLUMBING
    if self.why:
      return f"**{self.word}** ({self.why})"
    if self.word == ONE_SEED:
      did = ("agrees" if self.agree else "ties" if self.ties else "disagrees")
      return f"{did} in the one seed (no spread to judge against)"
    ranges = ("" if self.overlap is None else
              "; the ranges overlap" if self.overlap else ", ranges apart")
    return f"**{self.word}** ({self.agree} of {self.n} seeds{ranges})"


def _word(k: int, n: int, apart: bool) -> str:
  if n == 1:
    return ONE_SEED
  if apart and k == n:
    return HOLDS
  if apart and k == 0:
    return FAILS
  return LEANS if 2 * k > n else CANNOT_TELL


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
  """Whether the ranges [min, max] of ``a`` and ``b`` share a point (an unknown,
  NaN, value overlaps everything: it cannot set the sides apart)."""
  if any(math.isnan(x) for x in (*a, *b)):
    return True
  return min(a) <= max(b) and min(b) <= max(a)


def compare(a: Sequence[float], b: Sequence[float], *, lower: bool) -> Verdict:
  """The claim that side ``a`` is below (``lower``) or above side ``b``,
  seed s against seed s (values in seed order; inf for "never reached" or
  "diverged" compares as any number does)."""
  if len(a) != len(b) or not a:
    raise ValueError(f"compare needs the same seeds on both sides, got {len(a)} and {len(b)}")
  k = sum((x < y) if lower else (x > y) for x, y in zip(a, b))
  ties = sum(x == y for x, y in zip(a, b))
  ov = overlap(a, b)
  return Verdict(_word(k, len(a), not ov), k, len(a), ov, ties)


def passes(ok: Sequence[bool]) -> Verdict:
  """A stated test, seed by seed: holds where it passes in every seed, fails
  where it passes in none, leans where in most, else cannot tell."""
  if not ok:
    raise ValueError("passes needs at least one seed")
  k = sum(map(bool, ok))
  return Verdict(_word(k, len(ok), k in (0, len(ok))), k, len(ok))


def spread(*sides: Sequence[float]) -> float:
  """The largest range over seeds of any side (its finite values; 0 with one seed)."""
  out = 0.0
  for side in sides:
    v = [x for x in side if math.isfinite(x)]
    if len(v) > 1:
      out = max(out, max(v) - min(v))
  return out


def no_worse(a: Sequence[float], b: Sequence[float], *, lower: bool,
             sp: float | None = None) -> list[bool]:
  """Per seed, whether ``a`` is no worse than ``b`` beyond the spread ``sp``
  (default ``spread(a, b)``); ``lower``: lower is better. For a claim that one
  side keeps up with the other ("does not need warm-up"), a test for ``passes``."""
  sp = spread(a, b) if sp is None else sp
  return [((x - y) if lower else (y - x)) <= sp for x, y in zip(a, b)]


def within(a: Sequence[float], b: Sequence[float], sp: float | None = None) -> list[bool]:
  """Per seed, whether ``a`` and ``b`` differ by no more than the spread ``sp``
  (default ``spread(a, b)``): a test for "matches" claims."""
  sp = spread(a, b) if sp is None else sp
  return [abs(x - y) <= sp for x, y in zip(a, b)]


def untimed(n: int, command: str) -> Verdict:
  """A step-time claim with no idle benchmark recorded: cannot tell, whatever
  the runs' own timings say."""
  return Verdict(CANNOT_TELL, 0, n,
                 why=f"no idle benchmark recorded beside the runs; it awaits `{command}`")


def both(parts: dict[str, Verdict]) -> Verdict:
  """A claim of several ``parts`` ({what: its verdict}) that must all hold:
  fails where one fails, holds where all hold, cannot tell where one cannot
  tell (or rests on one seed), else leans; the cell names each part's."""
  words = [p.word for p in parts.values()]
  n = next(iter(parts.values())).n
  if n == 1:
    w = ONE_SEED
  elif FAILS in words:
    w = FAILS
  elif all(x == HOLDS for x in words):
    w = HOLDS
  elif CANNOT_TELL in words or ONE_SEED in words:
    w = CANNOT_TELL
  else:
    w = LEANS
  return Verdict(w, min(p.agree for p in parts.values()), n, why="; ".join(
      f"{what}: {str(p).replace('**', '')}" for what, p in parts.items()))
